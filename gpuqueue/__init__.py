"""gpuqueue: GPU job queueing and admission in front of Kubernetes.

Nothing is imported here, so that `gpuqueue.scheduler` and `gpuqueue.sim` stay free of Django
and Celery; the Celery app is loaded by the app config (web) or by `celery -A gpuqueue.celery`.
The guard of the optional compiled build runs in the two packages that hold compiled modules
(gpuqueue/native.py), so that `python -m gpuqueue.native` itself can rebuild a stale build.
"""
