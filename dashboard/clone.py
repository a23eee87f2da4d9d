"""Resubmit / Clone: the submit form filled in from a job, as text in the form's own formats
(the user may edit, then submits as any new job, with the rights a submission needs)."""

from __future__ import annotations

import shlex
from typing import Any

from gpuqueue.models import Job

# Set by gpuqueue on each task of an array (gpuqueue/services/jobs/arrays.py): not the user's.
RESERVED_ENV_PREFIX = "GPUQUEUE_"
# Copied as they are (numbers, names); the rest are written in the form's formats below.
PLAIN = (
    "name",
    "image",
    "workers",
    "gpus_per_worker",
    "priority",
    "checkpoint_grace_seconds",
    "max_runtime_seconds",
    "expected_runtime_seconds",
    "cpu_millicores",
    "memory_mib",
    "cpu_limit_millicores",
    "memory_limit_mib",
    "shm_mib",
    "priority_class",
    "service_account",
)


def _lines(mapping: dict[str, Any]) -> str:
    return "\n".join(f"{key}={value}" for key, value in mapping.items())


def _volume(v: dict[str, Any]) -> str:
    return f"{v['claim']}:{v['mount_path']}" + (":ro" if v.get("read_only") else "")


def initial_from(job: Job) -> dict[str, Any]:
    """The form's initial values for a copy of `job`."""
    initial: dict[str, Any] = {
        name: getattr(job, name) for name in PLAIN if getattr(job, name) not in (None, "")
    }
    initial.update(
        team=job.team.slug,
        flavor=job.flavor.name,
        preemptible=job.preemptible,
        command=shlex.join(str(word) for word in job.command or []),
        env=_lines(
            {k: v for k, v in (job.env or {}).items() if not k.startswith(RESERVED_ENV_PREFIX)}
        ),
        labels=_lines(job.labels or {}),
        annotations=_lines(job.annotations or {}),
        volumes="\n".join(_volume(v) for v in job.volumes or []),
        gpu_models=", ".join(job.gpu_models or []),
        image_pull_secrets=", ".join(job.image_pull_secrets or []),
        env_from_secrets=", ".join(job.env_from_secrets or []),
    )
    if job.gpu_milli:
        initial["gpu_milli"] = job.gpu_milli
    return {k: v for k, v in initial.items() if v not in (None, "")}
