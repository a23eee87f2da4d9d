"""`make run`: the whole service on one machine, with nothing installed but Python.

1. Start PostgreSQL and Redis from their wheels (unless DATABASE_URL / REDIS_URL point at
   servers), with data under GPUQUEUE_DATA_DIR so that a restart finds everything again.
2. Apply migrations and, in the embedded mode, seed the demo world once.
3. Start the web server (Granian), a Celery worker, Celery beat and the cluster watcher.
4. Print where to sign in, then watch: a process that dies (web server, Celery worker or beat,
   watcher, Redis, PostgreSQL) is restarted with backoff (gpuqueue/ops/supervision.py); one
   that keeps dying stops the launcher, which says which. On Ctrl-C / SIGTERM, stop the
   children (SIGTERM, so that a cycle in flight finishes; SIGKILL after a grace period), then
   Redis and PostgreSQL.

Started by root, Redis and the Python processes run as the unprivileged `gpuqueue` system user
(PostgreSQL as a system user of its own). When this interpreter lives where that user cannot
reach it, they run under a root-owned copy of it (gpuqueue/ops/service_python.py); when that
fails too, the launcher stops and says why rather than run them as root. Root gives that user
only what root made in the data folder and follows no link there (gpuqueue/ops/ownership.py).
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
from typing import Any

from gpuqueue import config
from gpuqueue.config import env_bool
from gpuqueue.ops.embedded import EmbeddedPostgres, EmbeddedRedis, start_postgres, start_redis
from gpuqueue.ops.ownership import hand_over, untrusted_entries
from gpuqueue.ops.run_logging import celery_args, run_log_level, web_server_args
from gpuqueue.ops.service_python import RUNTIME, service_interpreter
from gpuqueue.ops.supervision import RestartPolicy

ROOT = config.REPOSITORY
GRACE_SECONDS = 15.0
# The web server's fixed arguments (deploy/, docker-compose.yml and the Dockerfile use the same).
GRANIAN_ARGS = (
    # The front receives whole bodies on the event loop before the WSGI application's threads
    # see a request (gpuqueue/ops/web_front.py): a slow client cannot hold a thread.
    "--interface",
    "asginl",
    "--no-ws",
    # A client has 10 s to send its request's headers.
    "--http1-header-read-timeout",
    "10000",
    "--access-log",
    "--workers-kill-timeout",
    "10",
    # A worker that dies (killed, out of memory) is replaced; the others keep serving.
    "--respawn-failed-workers",
    "gpuqueue.asgi:application",
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

    data_dir = config.data_dir()
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "staticfiles").mkdir(exist_ok=True)  # whitenoise serves from the finders
    run_as = service_user(data_dir)
    python = sys.executable
    python_as = run_as
    python_env: dict[str, str] = {}
    if run_as:
        found = service_interpreter(data_dir, functools.partial(runs_as, run_as))
        if found is None:
            # Not as root instead: the data folder is the service user's, and a root process
            # would load what that user left there (beat's schedule is a pickle).
            raise SystemExit(
                f"gpuqueue does not start as root: the unprivileged user cannot run "
                f"{sys.executable} (nor a copy of it) with the project's packages and the data "
                f"folder {data_dir}. Keep Python, the repository and the data folder where other "
                "users can reach them, or start gpuqueue as an ordinary user."
            )
        else:
            python, python_env = found
            if python != sys.executable:
                print(f"Python processes: {python} as an unprivileged user", flush=True)
    env = dict(os.environ, **python_env, GPUQUEUE_DATA_DIR=str(data_dir), PYTHONUNBUFFERED="1")
    # Quiet unless asked (gpuqueue/ops/run_logging.py): warnings, errors and summaries.
    log_level = env["GPUQUEUE_LOG_LEVEL"] = run_log_level(os.environ)
    # The web front's threads per worker: they overlap one request's database waits with
    # another's work.
    env["GPUQUEUE_WEB_THREADS"] = str(args.web_threads)
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
            if python_as:  # an unprivileged user reaches the server's socket through its group
                python_as = {**python_as, "extra_groups": [postgres.socket_group()]}
            print(f"PostgreSQL: {data_dir / 'postgres'}", flush=True)
        if "REDIS_URL" not in os.environ:
            port = int(os.environ.get("GPUQUEUE_EMBEDDED_REDIS_PORT", "6399"))
            redis = start_redis(data_dir / "redis", port=port, **run_as)
            env["REDIS_URL"] = redis.url
            print(f"Redis: {redis.url}", flush=True)
        # 2. Schema and demo data
        manage = [python, str(ROOT / "manage.py")]
        subprocess.run(
            [*manage, "migrate", "--noinput", "-v", "0"], env=env, check=True, **python_as
        )
        seeded = env_bool("GPUQUEUE_DEMO", postgres is not None)
        if seeded:
            subprocess.run([*manage, "seed_demo"], env=env, check=True, **python_as)
        # 3. Processes
        commands = {
            "web": [
                # Granian: its HTTP layer is Rust, which left a submission about a third
                # less CPU than gunicorn's sync workers on these 2-core machines (docs/api.md).
                python,
                "-m",
                "granian",
                *web_server_args(GRANIAN_ARGS, log_level),
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--workers",
                str(args.web_workers),
            ],
            "worker": [
                python,
                "-m",
                "celery",
                *celery_args(log_level),
                "worker",
                "--loglevel",
                log_level,
                "--concurrency",
                "2",
                "--without-gossip",
                "--without-mingle",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                *celery_args(log_level),
                "beat",
                "--loglevel",
                log_level,
                "--schedule",
                str(data_dir / "celerybeat-schedule"),
            ],
            "watcher": [*manage, "watch_cluster"],
        }
        policy = RestartPolicy()

        def spawn(name: str) -> subprocess.Popen[bytes]:
            # Own session: Ctrl-C reaches only the launcher, which then stops children in order.
            nice = background_nice() if name in BACKGROUND else 0
            policy.started(name, time.monotonic())
            return subprocess.Popen(
                commands[name],
                cwd=ROOT,
                env=env,
                start_new_session=True,
                preexec_fn=functools.partial(os.nice, nice) if nice else None,
                **python_as,
            )

        children.extend((name, spawn(name)) for name in commands)
        # 4. Watch: restart what dies, with backoff; stop when asked or when one keeps dying.
        print(_banner(args.host, args.port, seeded), flush=True)
        due: dict[str, float] = {}  # name -> when to start it again
        failed = ""
        while not stopping and not failed:
            now = time.monotonic()
            for server, label in ((postgres, "postgresql"), (redis, "redis")):
                if server is None or server.alive():
                    continue
                delay = policy.died(label, now)
                if delay is None:
                    failed = f"{label} keeps dying; see {data_dir}"
                    break
                print(f"{label} died; restarting it", flush=True)
                time.sleep(delay)
                server.restart()
                policy.started(label, time.monotonic())
            for i, (name, child) in enumerate(children):
                if child.poll() is None:
                    continue
                if name in due:
                    if now >= due[name]:
                        del due[name]
                        children[i] = (name, spawn(name))
                        print(f"{name} restarted", flush=True)
                    continue
                _signal_group(child, signal.SIGKILL)  # what it left behind (pool children)
                delay = policy.died(name, now)
                if delay is None:
                    failed = f"{name} keeps dying (last exit status {child.returncode})"
                    break
                print(
                    f"{name} exited with {child.returncode}; restarting it in {delay:g} s",
                    flush=True,
                )
                due[name] = now + delay
            time.sleep(0.5)
        if failed:
            print(f"{failed}; stopping gpuqueue", flush=True)
            return 1
        return 0
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
    """SIGTERM to each child's own process, so that Celery finishes the task in flight (a
    warm shutdown) and Granian its requests; after GRACE_SECONDS, SIGKILL to whole groups."""
    for _, child in children:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    for _, child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(child, signal.SIGKILL)
            child.wait()
    for _, child in children:  # children of children (Granian and Celery workers)
        _signal_group(child, signal.SIGKILL)


def runs_as(run_as: dict[str, Any], argv: list[str], env: dict[str, str]) -> bool:
    """Whether argv succeeds as that user (an interpreter may live under root's private home)."""
    try:
        probe = subprocess.run(
            argv, capture_output=True, cwd=ROOT, env={**os.environ, **env}, **run_as
        )
    except OSError:
        return False
    return probe.returncode == 0


def service_user(data_dir: Path) -> dict[str, Any]:
    """Popen's `user`/`group` for the service's processes: none when the launcher is not root;
    as root, the unprivileged `gpuqueue` system user (created if missing, else `nobody`), who
    is given what root made in the data folder, never through a link (gpuqueue/ops/ownership.py).
    PostgreSQL runs as a system user of its own already. Refuses (SystemExit) a data folder
    with a link where root works by name."""
    if os.geteuid() != 0:
        return {}
    untrusted = untrusted_entries(data_dir)
    if untrusted:
        raise SystemExit(
            "gpuqueue does not start as root on this data folder: " + "; ".join(untrusted) + "."
        )
    import pwd

    try:
        account = pwd.getpwnam("gpuqueue")
    except KeyError:
        created = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "gpuqueue"],
            capture_output=True,
        )
        account = pwd.getpwnam("gpuqueue" if created.returncode == 0 else "nobody")
    # PostgreSQL's folder is its own user's, the runtime folder and the interpreter root's.
    keep = ("postgres", "run", RUNTIME, f"{RUNTIME}.partial")
    hand_over(data_dir, account.pw_uid, account.pw_gid, keep)
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


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
