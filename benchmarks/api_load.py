"""Load benchmark: concurrent submitters against a gpuqueue API. Prints numbers; not a test.

    .venv/bin/python benchmarks/api_load.py          # starts the embedded service itself
    .venv/bin/python benchmarks/api_load.py --url http://host:8000 --token gq_…

1. Without --url: start `python -m gpuqueue.launcher` with a temporary GPUQUEUE_DATA_DIR, free
   ports, the demo world (users, teams, quotas; the simulated cluster's nodes reach the
   inventory through the watcher) and a per-token rate high enough not to throttle the
   benchmark; mint a token for a demo user with `manage.py create_api_token`.
2. Wait until the API answers and knows a node of the flavor.
3. Warm up, then run --threads submitters for --seconds, each POSTing jobs with its own
   Idempotency-Key over a connection it keeps open, as a pipeline's HTTP session does
   (--no-keep-alive: a new connection per request). Latency is measured at the client, end
   to end.
4. Print throughput, p50/p90/p99/max and statuses; stop the service.

The target (issue 5) is >= 300 submissions/s with p99 <= 100 ms on a 2-core machine. The client
runs on the same cores as the service, PostgreSQL and Redis, so the numbers are a lower bound.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(
    base: str,
    method: str,
    path: str,
    token: str,
    body: dict | None = None,
    headers: dict[str, str] | None = None,
    conn: http.client.HTTPConnection | None = None,
) -> tuple[int, bytes]:
    """One request, over `conn` when given (kept open, as a pipeline's HTTP session keeps it),
    else over a connection of its own."""
    own = conn is None
    if conn is None:
        url = urllib.parse.urlsplit(base)
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
    try:
        all_headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            **(headers or {}),
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=all_headers)
        response = conn.getresponse()
        payload = response.read()
        if response.will_close:
            conn.close()  # http.client reconnects on the next request
        return response.status, payload
    except OSError:
        conn.close()
        raise
    finally:
        if own:
            conn.close()


def start_service(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str, str, Path]:
    data_dir = Path(tempfile.mkdtemp(prefix="gq-bench-"))
    data_dir.chmod(0o755)  # the embedded PostgreSQL runs as another user when we are root
    port = free_port()
    env = dict(
        os.environ,
        GPUQUEUE_DATA_DIR=str(data_dir),
        GPUQUEUE_EMBEDDED_REDIS_PORT=str(free_port()),
        GPUQUEUE_API_RATE="10000000/min",
        GPUQUEUE_DEMO="1",
        GPUQUEUE_DEMO_JOBS_PER_MINUTE="0",
        GPUQUEUE_LOG_LEVEL="WARNING",
    )
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    log = open(data_dir / "service.log", "wb")  # noqa: SIM115 - lives as long as the service
    service = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpuqueue.launcher",
            "--port",
            str(port),
            "--web-workers",
            str(args.web_workers),
            *(["--web-threads", str(args.web_threads)] if args.web_threads else []),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if service.poll() is not None:
            raise SystemExit(f"the service exited; see {data_dir / 'service.log'}")
        try:
            status, _ = call(base, "GET", "/api/v1/me/", "none")
            if status in (200, 401):
                break
        except OSError:
            pass
        time.sleep(0.5)
    token = (
        subprocess.run(
            [sys.executable, "manage.py", "create_api_token", args.user, "--name", "bench"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return service, base, token, data_dir


def wait_for_nodes(base: str, token: str, flavor: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status, body = call(base, "GET", "/api/v1/utilization/", token)
        if status == 200 and any(
            f["flavor"] == flavor and f["capacity"] > 0 for f in json.loads(body)
        ):
            return
        time.sleep(0.5)
    raise SystemExit(f"no node of flavor {flavor} became known")


def run_load(
    base: str, token: str, args: argparse.Namespace, seconds: float
) -> tuple[list[float], dict[int, int], float]:
    job = {
        "flavor": args.flavor,
        "image": "ghcr.io/acme/train:1",
        "name": "bench",
        "workers": 1,
        "gpus_per_worker": 1,
        "command": ["python", "train.py"],
    }
    if args.team:
        job["team"] = args.team
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def submitter() -> None:
        mine: list[float] = []
        counts: dict[int, int] = {}
        url = urllib.parse.urlsplit(base)
        conn = (
            http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
            if args.keep_alive
            else None
        )
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                status, _ = call(
                    base,
                    "POST",
                    "/api/v1/jobs/",
                    token,
                    job,
                    {"Idempotency-Key": uuid.uuid4().hex},
                    conn,
                )
            except OSError:
                status = 0
            mine.append(time.perf_counter() - started)
            counts[status] = counts.get(status, 0) + 1
        if conn is not None:
            conn.close()
        with lock:
            latencies.extend(mine)
            for k, v in counts.items():
                statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=submitter) for _ in range(args.threads)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, statuses, time.monotonic() - began


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="a running gpuqueue; without it the embedded one is started")
    parser.add_argument("--token", help="an API token (with --url)")
    parser.add_argument("--user", default="alice", help="demo user to submit as (embedded)")
    parser.add_argument("--team", default=None, help="team slug (default: the user's only team)")
    parser.add_argument("--flavor", default="h100")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--web-workers", type=int, default=4, help="web processes (embedded)")
    parser.add_argument(
        "--web-threads", type=int, default=None, help="threads per web worker (embedded)"
    )
    parser.add_argument(
        "--keep-alive",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each submitter keeps its connection open, as an HTTP session does (default on)",
    )
    args = parser.parse_args()

    service = data_dir = None
    if args.url:
        if not args.token:
            raise SystemExit("--url needs --token")
        base, token = args.url.rstrip("/"), args.token
    else:
        print("starting the embedded service…", flush=True)
        service, base, token, data_dir = start_service(args)
    try:
        wait_for_nodes(base, token, args.flavor)
        run_load(base, token, args, args.warmup)
        latencies, statuses, elapsed = run_load(base, token, args, args.seconds)
        ok = sum(v for k, v in statuses.items() if k in (200, 201))
        print(
            f"api_load: {args.threads} submitters, {elapsed:.1f} s, {os.cpu_count()} CPUs "
            f"(client, web, PostgreSQL, Redis, Celery on the same machine), "
            f"connections {'kept open' if args.keep_alive else 'one per request'}"
        )
        print(
            f"  submissions: {len(latencies)}  ok: {ok}  statuses: {dict(sorted(statuses.items()))}"
        )
        print(f"  throughput:  {ok / elapsed:.1f} submissions/s")
        print(
            f"  latency ms:  p50 {percentile(latencies, 50) * 1000:.1f}  "
            f"p90 {percentile(latencies, 90) * 1000:.1f}  "
            f"p99 {percentile(latencies, 99) * 1000:.1f}  "
            f"max {max(latencies) * 1000:.1f}  mean {statistics.fmean(latencies) * 1000:.1f}"
        )
        try:
            load = os.getloadavg()
            print(f"  load average during the run: {load[0]:.2f} (1 min)")
        except OSError:
            pass
    finally:
        if service is not None:
            os.killpg(service.pid, signal.SIGTERM)
            try:
                service.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(service.pid, signal.SIGKILL)
            print(f"service stopped (log and data in {data_dir})")


if __name__ == "__main__":
    main()
