"""Load benchmark: concurrent submitters against a gpuqueue API. Prints numbers; not a test.

    .venv/bin/python benchmarks/api_load.py          # starts the embedded service itself
    .venv/bin/python benchmarks/api_load.py --url http://host:8000 --token gq_…

1. Without --url: start `python -m gpuqueue.ops.launcher` with a temporary GPUQUEUE_DATA_DIR, free
   ports, the demo world (users, teams, quotas; the simulated cluster's nodes reach the
   inventory through the watcher) and a per-token rate high enough not to throttle the
   benchmark; mint a token for a demo user with `manage.py create_api_token`.
2. Wait until the API answers and knows a node of the flavor.
3. Warm up, then run --threads submitters for --seconds, each POSTing jobs with its own
   Idempotency-Key over a connection it keeps open, as a pipeline's HTTP session does
   (--no-keep-alive: a new connection per request). Latency is measured at the client, end
   to end.
4. Print throughput, p50/p90/p99/max and statuses, and (embedded, on Linux) the CPU each part
   of the service used per submission, read from /proc: unlike throughput, that does not move
   when something else shares the machine; stop the service.

The target is >= 200 submissions/s with p99 <= 100 ms on a 2-core machine. The client
runs on the same cores as the service, PostgreSQL and Redis, so the numbers are a lower bound.
The embedded service takes its settings from this environment: GPUQUEUE_CACHES=false measures
it with nothing kept between requests (gpuqueue/core/caches.py).
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
            "gpuqueue.ops.launcher",
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


def submission(args: argparse.Namespace) -> dict[str, object]:
    job: dict[str, object] = {
        "flavor": args.flavor,
        "image": "ghcr.io/acme/train:1",
        "name": "bench",
        "workers": 1,
        "gpus_per_worker": 1,
        "command": ["python", "train.py"],
    }
    if args.team:
        job["team"] = args.team
    return job


def run_load(
    base: str, token: str, args: argparse.Namespace, seconds: float
) -> tuple[list[float], dict[int, int], float]:
    job = submission(args)
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


def _proc_stats() -> dict[int, tuple[int, int, float, str]]:
    """pid -> (parent pid, session id, CPU seconds used, command line), for every process."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        found[int(entry)] = (int(fields[1]), int(fields[3]), cpu, cmdline)
    return found


PARTS = (("granian", "web"), ("postgres", "PostgreSQL"), ("redis", "Redis"), ("celery", "Celery"))


def service_cpu(service_pid: int, data_dir: Path) -> dict[str, float]:
    """CPU seconds used so far by the service's processes, by part: its session (the launcher
    starts one) and the embedded PostgreSQL (which leaves the session), with their children.
    Processes that have exited are not counted: read it before and after, while they run."""
    stats = _proc_stats()
    ours = {pid for pid, (_, sid, _, cmd) in stats.items() if sid == service_pid}
    ours |= {pid for pid, (_, _, _, cmd) in stats.items() if str(data_dir) in cmd}
    grew = True
    while grew:
        children = {pid for pid, (ppid, *_) in stats.items() if ppid in ours} - ours
        ours |= children
        grew = bool(children)
    parts: dict[str, float] = {}
    for pid in ours:
        cmd = stats[pid][3]
        part = next((name for key, name in PARTS if key in cmd), "other")
        parts[part] = parts.get(part, 0.0) + stats[pid][2]
    return parts


# wrk's Lua hooks: a POST with its own Idempotency-Key each time, and a JSON summary at the end
# (latencies in microseconds; "non_2xx" is wrk's count of statuses above 399).
WRK_SCRIPT = """
local counter = 0
local prefix = tostring(math.random(1, 1e9))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("GQ_TOKEN")
wrk.body = os.getenv("GQ_BODY")
function setup(thread) thread:set("id", tostring(math.random(1, 1e9))) end
function request()
  counter = counter + 1
  local headers = {}
  for name, value in pairs(wrk.headers) do headers[name] = value end
  headers["Idempotency-Key"] = prefix .. "-" .. id .. "-" .. counter
  return wrk.format(nil, nil, headers)
end
function done(summary, latency, requests)
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50": %d, "p90": %d, "p99": %d, "max": %d, '
    .. '"mean": %.1f, "errors": %d, "non_2xx": %d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max, latency.mean,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout, summary.errors.status))
end
"""


def run_wrk(base: str, token: str, args: argparse.Namespace, seconds: float) -> dict[str, float]:
    """The same load from wrk (a C client: about a tenth of the Python client's CPU per
    request, which runs on the same two cores as the service). --threads is its connection
    count; it uses two threads of its own (one for a single connection)."""
    script = Path(tempfile.mkstemp(suffix=".lua", prefix="gq-wrk-")[1])
    script.write_text(WRK_SCRIPT)
    body = {**submission(args)}
    env = dict(os.environ, GQ_TOKEN=token, GQ_BODY=json.dumps(body))
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t",
                str(min(2, args.threads)),
                "-c",
                str(args.threads),
                "-d",
                f"{max(1, round(seconds))}s",  # whole seconds only
                "--timeout",
                "30s",
                "-s",
                str(script),
                f"{base}/api/v1/jobs/",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        script.unlink()
    if out.returncode != 0:
        raise SystemExit(f"wrk failed: {out.stderr or out.stdout}")
    out = out.stdout
    return json.loads(out.strip().splitlines()[-1])


def client_seconds() -> float:
    """CPU used by this process and the children it waited for (wrk)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


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
        "--client",
        choices=("python", "wrk"),
        default="python",
        help="python: threads of http.client (default); wrk: the C load generator "
        "(apt-get install wrk), whose own CPU use is about a tenth",
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
        measure_cpu = service is not None and Path("/proc/self/stat").exists()
        if args.client == "wrk":
            run_wrk(base, token, args, args.warmup)
        else:
            run_load(base, token, args, args.warmup)
        if measure_cpu:
            cpu_before, client_before = service_cpu(service.pid, data_dir), client_seconds()
        if args.client == "wrk":
            result = run_wrk(base, token, args, args.seconds)
            elapsed = result["duration_us"] / 1e6
            ok = result["requests"] - result["non_2xx"] - result["errors"]
            submitted, statuses = result["requests"], {"4xx/5xx": result["non_2xx"]}
            us = {k: result[k] / 1000 for k in ("p50", "p90", "p99", "max", "mean")}
        else:
            latencies, counts, elapsed = run_load(base, token, args, args.seconds)
            ok = sum(v for k, v in counts.items() if k in (200, 201))
            submitted, statuses = len(latencies), dict(sorted(counts.items()))
            us = {f"p{p}": percentile(latencies, p) * 1000 for p in (50, 90, 99)}
            us |= {"max": max(latencies) * 1000, "mean": statistics.fmean(latencies) * 1000}
        if measure_cpu:
            cpu_after, client_after = service_cpu(service.pid, data_dir), client_seconds()
        who = "connections (wrk)" if args.client == "wrk" else "submitters"
        kept = args.keep_alive or args.client == "wrk"
        print(
            f"api_load: {args.threads} {who}, {elapsed:.1f} s, {os.cpu_count()} CPUs "
            f"(client, web, PostgreSQL, Redis, Celery on the same machine), "
            f"connections {'kept open' if kept else 'one per request'}"
        )
        print(f"  submissions: {submitted}  ok: {ok}  statuses: {statuses}")
        print(f"  throughput:  {ok / elapsed:.1f} submissions/s")
        print(
            f"  latency ms:  p50 {us['p50']:.1f}  p90 {us['p90']:.1f}  p99 {us['p99']:.1f}  "
            f"max {us['max']:.1f}  mean {us['mean']:.1f}"
        )
        if measure_cpu and ok:
            used = {p: cpu_after[p] - cpu_before.get(p, 0.0) for p in cpu_after}
            used["client"] = client_after - client_before
            print(
                "  CPU ms per submission: "
                + "  ".join(f"{p} {v / ok * 1000:.2f}" for p, v in sorted(used.items()))
                + f"  (all {sum(used.values()) / ok * 1000:.2f})"
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
