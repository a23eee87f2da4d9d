"""The CLI's job arrays and dependencies: `gpuqueue submit --array 0-999%50`,
`--after-ok 12,13`, and `gpuqueue status --array 7`. No Django: the client stands alone."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpuqueue.client.api import Client

KINDS = ("after_ok", "after_any", "after_not_ok")


def add_submit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--array", metavar="SPEC", help="submit N tasks: 0-999%%50 (at most 50 at once), 1,5-9:2"
    )
    for kind in KINDS:
        parser.add_argument(
            f"--{kind.replace('_', '-')}",
            dest=kind,
            metavar="IDS",
            help=f"comma-separated job ids: start {kind.replace('_', ' ')} them",
        )
    parser.add_argument(
        "--keep-if-unmet",
        action="store_true",
        help="stay pending when a dependency can no longer be met (default: cancelled)",
    )


def job_ids(text: str, flag: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--{flag.replace('_', '-')} {text!r}: job ids such as 12,13") from None


def submission_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The array and dependency fields the flags give (none: nothing)."""
    fields: dict[str, Any] = {}
    for kind in KINDS:
        if getattr(args, kind, None):
            fields[kind] = job_ids(getattr(args, kind), kind)
    if getattr(args, "keep_if_unmet", False):
        fields["keep_if_unmet"] = True
    if getattr(args, "array", None):
        fields["array"] = args.array
    return fields


def submit(args: argparse.Namespace, client: Client, spec: dict[str, Any]) -> int:
    array = client.submit_array(spec, idempotency_key=args.idempotency_key)
    print(json.dumps(array, indent=2) if args.json else summary(array))
    return 0


def summary(array: dict[str, Any]) -> str:
    cap = f", at most {array['max_concurrent']} at once" if array.get("max_concurrent") else ""
    counts = ", ".join(f"{n} {state.lower()}" for state, n in array["counts"].items() if n)
    return (
        f"array {array['id']} [{array['spec']}]: {array['size']} tasks of {array['name']}{cap}, "
        f"team {array['team']}\n  {counts or 'no tasks'}"
    )


def show(args: argparse.Namespace, client: Client) -> int:
    array = client.array(args.job)
    print(json.dumps(array, indent=2) if args.json else summary(array))
    return 0


def job_lines(job: dict[str, Any]) -> list[str]:
    """`gpuqueue status JOB`'s lines on the job's array and the jobs it waits for or that wait
    for it, each with its condition and state (none when it has neither)."""
    lines = []
    if job.get("array") is not None:
        lines.append(f"  array: task {job['array_index']} of array {job['array']}")
    for label, key in (("waits for", "depends_on"), ("waited for by", "dependents")):
        if job.get(key):
            listed = ", ".join(
                f"job {d['job']} {d['name']} ({d['kind']}, {d['state']})" for d in job[key]
            )
            lines.append(f"  {label}: {listed}")
    if job.get("depends_on") and job.get("keep_if_unmet"):
        lines.append("  kept pending if a dependency can no longer be met")
    return lines
