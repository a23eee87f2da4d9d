FROM python:3.11-slim
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gpuqueue gpuqueue
COPY teams teams
COPY dashboard dashboard
RUN pip install .
COPY . .
RUN useradd --uid 10001 gpuqueue && chown -R gpuqueue /app
USER 10001
EXPOSE 8000
CMD ["granian", "--interface", "asginl", "--no-ws", "--http1-header-read-timeout", "10000", "--access-log", "--workers-kill-timeout", "10", "--respawn-failed-workers", "gpuqueue.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
