"""How loud `make run` is. By default its processes log warnings and errors, and the summary
lines (gpuqueue/log_config.py): about one line per admission cycle that admitted or preempted
something, instead of a line per request, per task and per cycle. `make run V=1`
(GPUQUEUE_VERBOSE=1) logs everything at INFO, with the web server's access log; an explicit
GPUQUEUE_LOG_LEVEL wins over both."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpuqueue.config import env_bool


def run_log_level(environ: Mapping[str, str]) -> str:
    explicit = environ.get("GPUQUEUE_LOG_LEVEL")
    if explicit:
        return explicit.upper()
    return "INFO" if env_bool("GPUQUEUE_VERBOSE", False, environ) else "WARNING"


def chatty(level: str) -> bool:
    return level in ("INFO", "DEBUG")


def web_server_args(fixed: Sequence[str], level: str) -> list[str]:
    """The web server's arguments at `level`: its access log (a line per request, the
    dashboard's polling included) only at INFO or below."""
    args = [arg for arg in fixed if chatty(level) or arg != "--access-log"]
    return [*args, "--log-level", level.lower()]


def celery_args(level: str) -> list[str]:
    """Celery's options before its subcommand: its start-up banners only at INFO or below."""
    return ["-A", "gpuqueue.celery"] + ([] if chatty(level) else ["--quiet"])
