"""`gpuqueue`: submit and follow jobs from a shell or a pipeline, through the public API.

gpuqueue configure --url http://gpuqueue:8000 --token gq_…
gpuqueue submit --flavor h100 --workers 2 --image ghcr.io/acme/train:1 -- python train.py
gpuqueue submit -f job.yaml --idempotency-key nightly-2026-11-22
gpuqueue wait 42   # exit: 0 succeeded, the job's exit code (or 1) failed, 3 cancelled
gpuqueue queue            # like squeue: your teams' pending and running jobs, why, when
gpuqueue list --state pending --mine
gpuqueue status 42 | gpuqueue events 42 | gpuqueue cancel 42 43 50-59
gpuqueue submit --array 0-999%50 -f job.yaml   # N tasks, GPUQUEUE_ARRAY_INDEX; status --array 7
gpuqueue submit --after-ok 12,13 -f eval.yaml  # waits for 12 and 13 to succeed
gpuqueue logs 42 --worker 1 --tail 50 --follow   # --follow: until the job ends; exit as wait
gpuqueue usage --team vision --since 2026-11-01 --by week [--csv]   # GPU-hours, sreport-like
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuqueue.client import arrays, exit_codes, forecast_text, humane, usage
from gpuqueue.client.api import ApiError, Client, save_config
from gpuqueue.client.durations import parse_duration
from gpuqueue.client.job_ids import parse_ids
from gpuqueue.client.volumes import parse_volume

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 3
EXIT_TIMEOUT = 124  # as timeout(1)
EXIT_API_ERROR = 4


# Options of every subcommand, given before it or after it.
GLOBAL_OPTIONS: list[tuple[tuple[str, ...], dict[str, Any]]] = [
    (("--url",), {"help": "server URL (default: GPUQUEUE_URL or the config file)"}),
    (("--token",), {"help": "API token (default: GPUQUEUE_TOKEN or the config file)"}),
    (("--json",), {"action": "store_true", "help": "print JSON instead of text"}),
]
DURATION_FLAGS = (
    ("--checkpoint-grace", "checkpoint_grace_seconds"),
    ("--max-runtime", "max_runtime_seconds"),
    ("--expected-runtime", "expected_runtime_seconds"),
)
DURATION_HELP = "seconds, or 45s, 90m, 2h, 1d, 1h30m, 1:30:00"


def duration(text: str) -> int:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "subcommand", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except ApiError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_API_ERROR
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpuqueue",
        description="Submit and follow GPU jobs on gpuqueue.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    for flags, kwargs in GLOBAL_OPTIONS:
        parser.add_argument(*flags, **kwargs)
    sub = parser.add_subparsers(dest="subcommand")

    p = sub.add_parser("configure", help="save URL and token to the config file")
    p.add_argument("--url", dest="set_url", required=True)
    p.add_argument("--token", dest="set_token", required=True)
    p.set_defaults(handler=cmd_configure)

    p = sub.add_parser("whoami", help="the token's user and teams")
    p.set_defaults(handler=cmd_whoami)

    p = sub.add_parser("submit", help="submit a job from flags and/or a YAML spec")
    p.add_argument("-f", "--file", help="YAML (or JSON) job spec; flags override its fields")
    p.add_argument("--team")
    p.add_argument("--flavor")
    p.add_argument("--name")
    p.add_argument("--image")
    p.add_argument("--workers", type=int)
    p.add_argument("--gpus-per-worker", type=int)
    p.add_argument(
        "--gpu-fraction", type=float, help="of one GPU per worker, on a shared flavor: 0.25"
    )
    p.add_argument("--gpu-milli", type=int, help="the same in thousandths: 250")
    p.add_argument("--gpu-memory", type=int, dest="gpu_memory_mib", help="GPU MiB per worker")
    p.add_argument(
        "--gpu-model",
        action="append",
        default=[],
        metavar="MODEL",
        help="run only on nodes of this GPU model (repeatable), e.g. NVIDIA-A100-SXM4-80GB",
    )
    p.add_argument(
        "--topology-level",
        metavar="LABEL",
        help="prefer all workers in one domain of this level of the flavor (a node label "
        "key, e.g. a rack label or nvidia.com/gpu.clique)",
    )
    p.add_argument(
        "--topology-required",
        action="store_true",
        help="require it: wait until one domain of --topology-level holds the gang",
    )
    p.add_argument("--priority", type=int)
    p.add_argument("--non-preemptible", action="store_true")
    for flag, dest in DURATION_FLAGS:
        p.add_argument(flag, type=duration, dest=dest, metavar="DURATION", help=DURATION_HELP)
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--label", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--annotation", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--cpu", type=int, dest="cpu_millicores", help="millicores per worker")
    p.add_argument("--cpu-limit", type=int, dest="cpu_limit_millicores", help="millicores")
    p.add_argument("--memory", type=int, dest="memory_mib", help="MiB per worker")
    p.add_argument("--memory-limit", type=int, dest="memory_limit_mib", help="MiB")
    p.add_argument("--shm", type=int, dest="shm_mib", help="/dev/shm in MiB")
    p.add_argument(
        "--volume", action="append", default=[], metavar="CLAIM:PATH[:ro]", help="a team PVC"
    )
    p.add_argument("--image-pull-secret", action="append", default=[], metavar="SECRET")
    p.add_argument("--env-from-secret", action="append", default=[], metavar="SECRET")
    p.add_argument("--priority-class")
    p.add_argument("--service-account")
    p.add_argument("--idempotency-key", help="retrying with the same key never makes a second job")
    arrays.add_submit_arguments(p)
    p.add_argument("--wait", action="store_true", help="then wait, as `gpuqueue wait`")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the command and its arguments")
    p.set_defaults(handler=cmd_submit)

    p = sub.add_parser(
        "queue", help="the active jobs (pending and holding GPUs), squeue-like, oldest first"
    )
    p.add_argument("--team")
    p.add_argument("--flavor")
    p.add_argument("--mine", action="store_true")
    p.add_argument("--state", action="append", help="default: active (any case; repeatable)")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument(
        "--tasks", action="store_true", help="each task of an array on a line of its own"
    )
    p.set_defaults(handler=cmd_queue)

    p = sub.add_parser("list", help="list jobs, newest first")
    p.add_argument("--team")
    p.add_argument("--state", action="append")
    p.add_argument("--user")
    p.add_argument("--flavor")
    p.add_argument("--mine", action="store_true")
    p.add_argument("--ordering", help="sort as the API's ?ordering=: name, --ordering=-waited, …")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(handler=cmd_list)

    p = sub.add_parser("cancel", help="cancel jobs: 12 13, 12-20, 12,15-17; --array: arrays")
    p.add_argument("ids", nargs="+", metavar="ID", help="ids, ranges (12-20) or lists (12,15)")
    p.add_argument("--array", action="store_true", help="the ids are arrays: all their tasks")
    p.set_defaults(handler=cmd_cancel)

    for name, handler, text in (
        ("status", cmd_status, "a job's state, why it is pending, when it may start"),
        ("events", cmd_events, "a job's timeline"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("job", type=int)
        if name == "status":
            p.add_argument("--array", action="store_true", help="JOB is an array: its tasks")
        p.set_defaults(handler=handler)

    p = sub.add_parser("logs", help="a worker's last log lines; --follow: new ones as they come")
    p.add_argument("job", type=int)
    p.add_argument("--worker", type=int, default=0, help="the worker's index (default 0)")
    p.add_argument("--tail", type=int, default=100, help="the last lines only (1 to 10000)")
    p.add_argument("--follow", "-f", action="store_true", help="until the job is finished")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between polls")
    p.set_defaults(handler=cmd_logs)

    p = sub.add_parser("wait", help="wait for a job to finish; the exit code is its result")
    p.add_argument("job", type=int)
    p.add_argument("--timeout", type=float, help="seconds; exit 124 when over")
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(handler=cmd_wait)

    usage.add_parser(sub, _client)
    global_options_after_subcommands(sub)
    return parser


def global_options_after_subcommands(sub: Any) -> None:
    """`gpuqueue status 42 --json` as well as `gpuqueue --json status 42`: each subcommand
    also takes the global options, defaulting to nothing so that one given before it stands.
    `configure` keeps its own --url and --token (what to save)."""
    for name, p in sub.choices.items():
        if name == "configure":
            continue
        for flags, kwargs in GLOBAL_OPTIONS:
            with contextlib.suppress(argparse.ArgumentError):  # the subcommand's own wins
                p.add_argument(*flags, **kwargs, default=argparse.SUPPRESS)


def _client(args: argparse.Namespace) -> Client:
    return Client(url=args.url, token=args.token)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def gpu_milli_of(fraction: float, milli: int | None) -> int:
    """--gpu-fraction in thousandths, as the API takes it; the server checks whole slices."""
    if milli is not None:
        raise ValueError("give --gpu-fraction or --gpu-milli, not both")
    if not 0 < fraction < 1:
        raise ValueError(f"--gpu-fraction is more than 0 and less than 1; got {fraction:g}")
    thousandths = fraction * 1000
    if abs(thousandths - round(thousandths)) > 1e-6:
        raise ValueError(f"--gpu-fraction in thousandths at most; got {fraction:g}")
    return round(thousandths)


def job_spec(args: argparse.Namespace) -> dict[str, Any]:
    """The spec file, then the flags on top."""
    spec: dict[str, Any] = {}
    if args.file:
        import yaml

        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
        loaded = yaml.safe_load(text) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.file}: a job spec is a mapping of fields")
        spec.update(loaded)
    for key in (
        "team",
        "flavor",
        "name",
        "image",
        "workers",
        "gpus_per_worker",
        "gpu_milli",
        "gpu_memory_mib",
        "priority",
        *(dest for _, dest in DURATION_FLAGS),
        "cpu_millicores",
        "cpu_limit_millicores",
        "memory_mib",
        "memory_limit_mib",
        "shm_mib",
        "priority_class",
        "service_account",
        "topology_level",
    ):
        value = getattr(args, key)
        if value is not None:
            spec[key] = value
    if args.gpu_fraction is not None:
        spec["gpu_milli"] = gpu_milli_of(args.gpu_fraction, args.gpu_milli)
    if args.gpu_model:
        spec["gpu_models"] = [*spec.get("gpu_models", []), *args.gpu_model]
    if args.non_preemptible:
        spec["preemptible"] = False
    if args.topology_required:
        spec["topology_required"] = True
    for key, items, what in (
        ("env", args.env, "--env"),
        ("labels", args.label, "--label"),
        ("annotations", args.annotation, "--annotation"),
    ):
        if items:
            spec[key] = {**spec.get(key, {}), **_pairs(items, what)}
    if args.volume:
        spec["volumes"] = [*spec.get("volumes", []), *map(parse_volume, args.volume)]
    for key, names in (
        ("image_pull_secrets", args.image_pull_secret),
        ("env_from_secrets", args.env_from_secret),
    ):
        if names:
            spec[key] = [*spec.get(key, []), *names]
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if command:
        spec["command"] = command
    spec.update(arrays.submission_fields(args))
    return spec


def cmd_configure(args: argparse.Namespace) -> int:
    path = save_config(args.set_url, args.set_token)
    print(f"saved to {path}")
    return 0


def cmd_whoami(args: argparse.Namespace) -> int:
    me = _client(args).me()
    if args.json:
        print(json.dumps(me, indent=2))
    else:
        teams = ", ".join(f"{t['team']} ({t['role']})" for t in me["teams"]) or "no teams"
        admin = " site admin;" if me["is_site_admin"] else ""
        print(f"{me['username']}:{admin} {teams}")
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    client = _client(args)
    spec = job_spec(args)
    if "array" in spec:
        return arrays.submit(args, client, spec)
    job = client.submit(spec, idempotency_key=args.idempotency_key)
    if args.json and not args.wait:
        print(json.dumps(job, indent=2))
    else:
        print(
            f"job {job['id']} {job['state']}: {job['name']} on {humane.gpus_text(job)} "
            f"({job['workers']} × {humane.per_worker(job)}), team {job['team']}"
        )
    if args.wait:
        args.job, args.timeout, args.interval, args.quiet = job["id"], None, 2.0, False
        return cmd_wait(args)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    jobs = list(
        _client(args).jobs(
            limit=args.limit,
            team=args.team,
            state=args.state,
            user=args.user,
            flavor=args.flavor,
            mine="true" if args.mine else None,
            ordering=args.ordering,
        )
    )
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    print(f"{'ID':>7}  {'STATE':10}  {'TEAM':12}  {'USER':10}  {'GPUS':>9}  NAME")
    for j in jobs:
        gpus = humane.shape(j)
        # An array is one line: squeue's label and the array's state (`queue` has its counts).
        array = j.get("array_summary")
        ident, state = (array["label"], array["state"]) if array else (j["id"], j["state"])
        print(f"{ident:>7}  {state:10}  {j['team']:12}  {j['user']:10}  {gpus:>9}  {j['name']}")
    return 0


def cmd_queue(args: argparse.Namespace) -> int:
    client = _client(args)
    filters = {
        "team": args.team,
        "flavor": args.flavor,
        "mine": "true" if args.mine else None,
        "expand": "tasks" if args.tasks else None,
    }
    # Asked sorted, so that --limit keeps what comes first below (the jobs holding GPUs, then
    # the head of the line), not the newest jobs.
    asked = [(["holding"], "submitted_at"), (["pending"], "position")]
    if args.state:
        asked = [(args.state, "position")]
    jobs: list[dict[str, Any]] = []
    for states, ordering in asked:
        if len(jobs) < args.limit:
            left = args.limit - len(jobs)
            jobs += client.jobs(limit=left, state=states, ordering=ordering, **filters)
    jobs = one_line_per_array(jobs)
    if args.json:
        print(json.dumps(jobs, indent=2))
        return 0
    # Holding GPUs first, then pending in the order they will be considered (positions).
    jobs.sort(
        key=lambda j: (
            j["state"] == "PENDING",
            j.get("cluster_position") or math.inf,  # no position yet: after those placed
            j.get("submitted_at") or "",
        )
    )
    now = datetime.now(UTC)
    print(humane.table(humane.QUEUE_COLUMNS, humane.queue_rows(jobs, now)))
    return 0


def one_line_per_array(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An array's row comes once from the tasks holding GPUs and again from those waiting:
    keep the first (its summary covers every task)."""
    seen: set[int] = set()
    out = []
    for job in jobs:
        if job.get("array_summary"):
            if job["array"] in seen:
                continue
            seen.add(job["array"])
        out.append(job)
    return out


def describe(job: dict[str, Any], now: datetime | None = None) -> str:
    lines = [f"job {job['id']} ({job['name']}): {job['state']}"]
    if job.get("command"):
        lines.append(f"  command: {shlex.join(job['command'])}")
    if job.get("pending_reason_text"):
        lines.append(f"  why: {job['pending_reason_text']}")
    lines += arrays.job_lines(job)
    if job.get("queue_position") is not None:
        lines.append(
            f"  position: {job['queue_position']} in the team's queue, "
            f"{job.get('cluster_position')} in the cluster"
        )
    if job.get("estimated_start"):
        now = now or datetime.now(UTC)
        lines.append(f"  estimated start: {humane.when(job['estimated_start'], now)}")
    if job.get("start_band"):
        now = now or datetime.now(UTC)
        lines.append(f"  start band: {forecast_text.band_text(job['start_band'], now)}")
    if job.get("runtime_prediction"):
        lines.append(f"  runtime: {forecast_text.runtime_text(job['runtime_prediction'])}")
    if job.get("gpu_models"):
        lines.append("  GPU models: " + ", ".join(job["gpu_models"]))
    if job.get("topology_level"):
        how = "required" if job.get("topology_required") else "preferred"
        lines.append(f"  topology: one domain of {job['topology_level']}, {how}")
    if job.get("placement"):
        lines.append("  placement: " + ", ".join(f"{n}×{w}" for n, w in job["placement"].items()))
    if job.get("placement_domain"):
        lines.append(f"  placed in: {job['placement_domain']}")
    if job.get("gpu_devices"):
        share = f"{job['gpu_milli']}/1000"
        lines.append(
            f"  shared GPUs ({share} each): "
            + ", ".join(f"{node} GPU {index}" for node, index in job["gpu_devices"])
        )
    if job.get("attempts"):
        lines.append(f"  attempts: {job['attempts']}")
    if job.get("exit_code") is not None:
        hint = exit_codes.exit_hint(job["exit_code"])
        lines.append(f"  exit code: {job['exit_code']}" + (f", {hint}" if hint else ""))
    if job.get("message"):
        lines.append(f"  message: {job['message']}")
    return "\n".join(lines)


def cmd_status(args: argparse.Namespace) -> int:
    if args.array:
        return arrays.show(args, _client(args))
    job = _client(args).job(args.job)
    print(json.dumps(job, indent=2) if args.json else describe(job))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    """Each id in turn: one that cannot be cancelled is reported and the rest still are. A
    job that had already ended is no failure (it is as asked); anything else exits 4."""
    client = _client(args)
    failed = False
    done = []
    ids = parse_ids(args.ids)
    for item_id in ids:
        try:
            item = client.cancel_array(item_id) if args.array else client.cancel(item_id)
        except ApiError as exc:
            if exc.code == "unreachable" or exc.status == 401:
                raise  # nothing else will go through either
            print(f"error: {exc.message}", file=sys.stderr)
            failed = failed or exc.code != "invalid_transition"
            continue
        done.append(item)
        if not args.json:
            print(arrays.summary(item) if args.array else f"job {item['id']} {item['state']}")
    if args.json:  # one id: its object, as ever; several: a list
        print(json.dumps(done[0] if len(ids) == 1 and done else done, indent=2))
    return EXIT_API_ERROR if failed else 0


def cmd_events(args: argparse.Namespace) -> int:
    events = _client(args).events(args.job)
    if args.json:
        print(json.dumps(events, indent=2))
        return 0
    for e in events:
        at = humane.parse(e["at"])
        shown = "" if at is None else f"{at.astimezone():%Y-%m-%d %H:%M:%S %Z}"
        print(
            f"{shown}  {e['from_state'] or '-':10} → {e['to_state']:10}  "
            f"{e['actor']:14}  {e['reason']}"
        )
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    """Print the lines (--json: the API's answer, not with --follow); following, exit as
    `wait` does once the job is finished."""
    client = _client(args)
    if not args.follow:
        body = client.logs(args.job, worker=args.worker, tail=args.tail)
        if args.json:
            print(json.dumps(body, indent=2))
            return 0
        for line in body["lines"]:
            print(line)
        if body["truncated"]:
            print("(cut at the size limit: ask for fewer lines with --tail)", file=sys.stderr)
        return 0
    for line in client.follow_logs(
        args.job, worker=args.worker, tail=args.tail, interval=args.interval
    ):
        print(line, flush=True)
    return exit_code_for(client.job(args.job))


def exit_code_for(job: dict[str, Any]) -> int:
    """0 succeeded; a failed job's own exit code when it has a nonzero one, else 1; 3 cancelled."""
    if job["state"] == "SUCCEEDED":
        return 0
    if job["state"] == "CANCELLED":
        return EXIT_CANCELLED
    code = job.get("exit_code")
    return code if isinstance(code, int) and 0 < code < 256 else EXIT_FAILED


def cmd_wait(args: argparse.Namespace) -> int:
    client = _client(args)

    def show(job: dict[str, Any]) -> None:
        if not args.quiet:
            reason = f": {job['pending_reason_text']}" if job.get("pending_reason_text") else ""
            print(f"job {job['id']} {job['state']}{reason}", flush=True)

    try:
        job = client.wait(args.job, timeout=args.timeout, interval=args.interval, on_change=show)
    except TimeoutError as exc:
        print(f"timeout: {exc}", file=sys.stderr)
        return EXIT_TIMEOUT
    if args.json:
        print(json.dumps(job, indent=2))
    return exit_code_for(job)


if __name__ == "__main__":
    sys.exit(main())
