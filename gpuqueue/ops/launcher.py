"""`make run`: the whole service on one machine, with nothing installed but Python.

1. Start PostgreSQL and Redis from their wheels (unless DATABASE_URL / REDIS_URL point at
   servers), with data under GPUQUEUE_DATA_DIR so that a restart finds everything again.
2. Apply migrations and, in the embedded mode, seed the demo world once.
3. Start the web server (Granian), a Celery worker, Celery beat and the cluster watcher.
4. Print where to sign in, then watch the children: if one dies, or on Ctrl-C / SIGTERM, stop
   them all (SIGTERM, then SIGKILL after a grace period), then Redis and PostgreSQL.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpuqueue.config import env_bool
from gpuqueue.ops.embedded import EmbeddedPostgres, EmbeddedRedis, start_postgres, start_redis

ROOT = Path(__file__).resolve().parents[2]  # the repository
GRACE_SECONDS = 15.0
# The web server's fixed arguments (deploy/, docker-compose.yml and the Dockerfile use the same).
GRANIAN_WSGI = (
    "--interface",
    "wsgi",
    "--access-log",
    "--workers-kill-timeout",
    "10",
    "gpuqueue.wsgi:application",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuqueue.ops.launcher", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--host", default=os.environ.get("GPUQUEUE_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GPUQUEUE_PORT", "8000")))
    parser.add_argument(
        "--web-workers", type=int, default=int(os.environ.get("GPUQUEUE_WEB_WORKERS", "2"))
    )
    parser.add_argument(
        "--web-threads", type=int, default=int(os.environ.get("GPUQUEUE_WEB_THREADS", "2"))
    )
    args = parser.parse_args(argv)

    data_dir = Path(os.environ.get("GPUQUEUE_DATA_DIR", ROOT / "data")).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "staticfiles").mkdir(exist_ok=True)  # whitenoise serves from the finders
    env = dict(os.environ, GPUQUEUE_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    postgres: EmbeddedPostgres | None = None
    redis: EmbeddedRedis | None = None
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        # 1. Servers
        if "DATABASE_URL" not in os.environ:
            postgres = start_postgres(data_dir / "postgres")
            env.update(DATABASE_URL=postgres.url, GPUQUEUE_EMBEDDED="1")
            print(f"PostgreSQL: {data_dir / 'postgres'}", flush=True)
        if "REDIS_URL" not in os.environ:
            port = int(os.environ.get("GPUQUEUE_EMBEDDED_REDIS_PORT", "6399"))
            redis = start_redis(data_dir / "redis", port=port)
            env["REDIS_URL"] = redis.url
            print(f"Redis: {redis.url}", flush=True)
        # 2. Schema and demo data
        manage = [sys.executable, str(ROOT / "manage.py")]
        subprocess.run([*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True)
        seeded = env_bool("GPUQUEUE_DEMO", postgres is not None)
        if seeded:
            subprocess.run([*manage, "seed_demo"], env=env, check=True)
        # 3. Processes
        bin_dir = Path(sys.executable).parent
        commands = {
            "web": [
                # Granian: its HTTP layer is Rust, which left a submission about a third
                # less CPU than gunicorn's sync workers on these 2-core machines (docs/api.md).
                str(bin_dir / "granian"),
                *GRANIAN_WSGI,
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--workers",
                str(args.web_workers),
                # Threads per worker overlap one request's database waits with another's work.
                "--blocking-threads",
                str(args.web_threads),
            ],
            "worker": [
                str(bin_dir / "celery"),
                "-A",
                "gpuqueue.celery",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                "2",
                "--without-gossip",
                "--without-mingle",
            ],
            "beat": [
                str(bin_dir / "celery"),
                "-A",
                "gpuqueue.celery",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(data_dir / "celerybeat-schedule"),
            ],
            "watcher": [*manage, "watch_cluster"],
        }
        for name, command in commands.items():
            # Own session: Ctrl-C reaches only the launcher, which then stops children in order.
            nice = background_nice() if name in BACKGROUND else 0
            children.append(
                (
                    name,
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=env,
                        start_new_session=True,
                        preexec_fn=functools.partial(os.nice, nice) if nice else None,
                    ),
                )
            )
        # 4. Watch
        print(_banner(args.host, args.port, seeded), flush=True)
        while not stopping:
            for name, child in children:
                if child.poll() is not None:
                    print(f"{name} exited with {child.returncode}; stopping gpuqueue", flush=True)
                    stopping = True
                    break
            time.sleep(0.5)
        return 0 if all(c.poll() in (None, 0, -signal.SIGTERM) for _, c in children) else 1
    finally:
        _stop_children(children)
        if redis is not None:
            redis.stop()
        if postgres is not None:
            postgres.stop()
        print("gpuqueue stopped", flush=True)


# The admission cycle's processes yield the CPU to the web server when both want it: on a
# machine where they share cores (the embedded service), a cycle over thousands of pending jobs
# otherwise stalls API requests behind it. They still get their share; they only wait their
# turn. docs/api.md#load has the numbers.
BACKGROUND = ("worker", "beat")
DEFAULT_BACKGROUND_NICE = 5


def background_nice() -> int:
    """The nice increment for BACKGROUND processes (GPUQUEUE_BACKGROUND_NICE, 0 to 19)."""
    value = int(os.environ.get("GPUQUEUE_BACKGROUND_NICE", DEFAULT_BACKGROUND_NICE))
    if not 0 <= value <= 19:
        raise SystemExit(f"GPUQUEUE_BACKGROUND_NICE must be 0 to 19, not {value}")
    return value


def _stop_children(children: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    for _, child in children:
        if child.poll() is None:
            _signal_group(child, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for _, child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
            child.wait()
    for _, child in children:  # children of children (Granian and Celery workers)
        _signal_group(child, signal.SIGKILL)


def _signal_group(child: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, sig)


def _banner(host: str, port: int, demo: bool) -> str:
    from gpuqueue.demo.accounts import DEMO_USERS
    from gpuqueue.demo.accounts import ROOT as ROOT_USER

    lines = [
        "",
        f"gpuqueue is running: http://{host}:{port}/   (API: http://{host}:{port}/api/v1/)",
    ]
    if demo:
        lines.append("Sign in with a demo user (username / password):")
        lines += [f"  {u:6} / {p:16} {role} of {team}" for u, p, team, role in DEMO_USERS]
        lines.append(f"  {ROOT_USER[0]:6} / {ROOT_USER[1]:16} site admin (also /admin/)")
    lines.append("Press Ctrl-C to stop.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
