"""Settings, read from the environment only (see README "Configuration").

With nothing set, gpuqueue runs in the embedded mode: PostgreSQL and Redis started from wheels
by `gpuqueue.ops.launcher`, data under GPUQUEUE_DATA_DIR, the simulated cluster, demo teams and
traffic.
"""

from __future__ import annotations

import re
import secrets
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from gpuqueue.config import data_dir, env_bool, env_choice, env_float, env_int, env_list, env_str
from gpuqueue.log_config import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = data_dir()

DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
# Embedded mode: no external database configured. The launcher starts the servers, passes their
# URLs on and sets GPUQUEUE_EMBEDDED=1; a process started without it (manage.py shell) finds them
# by the same defaults.
EMBEDDED = env_bool("GPUQUEUE_EMBEDDED", DATABASE_URL is None)
EMBEDDED_REDIS_PORT = env_int("GPUQUEUE_EMBEDDED_REDIS_PORT", 6399, minimum=1)
if DATABASE_URL is None:
    DATABASE_URL = f"postgresql://postgres:@/postgres?host={DATA_DIR / 'postgres'}"
if REDIS_URL is None:
    REDIS_URL = f"redis://127.0.0.1:{EMBEDDED_REDIS_PORT}/0"


def _secret_key() -> str:
    key = env_str("SECRET_KEY")
    if key:
        return key
    if not EMBEDDED:
        raise ImproperlyConfigured("SECRET_KEY must be set when DATABASE_URL points at a server")
    # Embedded mode keeps a generated key in the data folder so sessions survive restarts.
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("GPUQUEUE_DEBUG", False)
ALLOWED_HOSTS = env_list("GPUQUEUE_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("GPUQUEUE_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "django_htmx",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "teams",
    "gpuqueue",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # NUL characters, chunked bodies without a length, oversized API bodies: a clear 4xx.
    "gpuqueue.ops.request_guard.RequestGuardMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # An htmx request without a session: 401, and one sign-in for the whole page.
    "dashboard.expired_session.ExpiredSessionMiddleware",
    # 503 with Retry-After, not 500, while PostgreSQL or Redis is away (ops/unavailable.py).
    "gpuqueue.ops.unavailable.ServiceUnavailableMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gpuqueue.urls"
WSGI_APPLICATION = "gpuqueue.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# A kept connection is checked before reuse, so a restarted PostgreSQL costs no failed request.
DATABASES = {
    "default": dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
}
# Server-side binding, with psycopg preparing a statement once it has run five times on a
# connection (Django leaves that off unless asked): with client-side binding every query is new
# text that PostgreSQL parses and plans again, half of its CPU per API submission.
DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=5)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "gpuqueue",
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Failed sign-ins are counted per address and username together (django-axes, in PostgreSQL):
# after GPUQUEUE_LOGIN_FAILURES, that address is refused sign-in as that user for
# GPUQUEUE_LOGIN_COOLOFF_MINUTES; the same user from another address is not.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("GPUQUEUE_LOGIN_FAILURES", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("GPUQUEUE_LOGIN_COOLOFF_MINUTES", 15, minimum=1))
# The pair, never the username alone: anyone can type a username, so counting by it would let
# anyone lock anyone (the site admin included) out of signing in (docs/security.md).
AXES_LOCKOUT_PARAMETERS = [["ip_address", "username"]]
# A try during the cool-off does not start it again: a lockout ends COOLOFF after it began.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
# The address as the trusted proxies report it, never a header a client chose.
AXES_CLIENT_IP_CALLABLE = "gpuqueue.core.client_address.client_address"
# Proxies in front of the web server that append the client's address to X-Forwarded-For
# (an ingress: 1). 0: the connection's peer is the client and no header is read.
GPUQUEUE_TRUSTED_PROXY_HOPS = env_int("GPUQUEUE_TRUSTED_PROXY_HOPS", 0, minimum=0)

# A Content-Security-Policy the dashboard passes as it is: scripts and styles from our own
# origin only (htmx is vendored); style attributes carry the teams' colours. The API docs pages,
# whose generated HTML has inline scripts, are exempt (gpuqueue/urls.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Behind a proxy that terminates TLS (deploy/ sets it): secure cookies, HSTS, and the proxy's
# X-Forwarded-Proto trusted to say the request came in over HTTPS.
GPUQUEUE_HTTPS = env_bool("GPUQUEUE_HTTPS", False)
if GPUQUEUE_HTTPS:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 365 * 24 * 3600
    SECURE_HSTS_INCLUDE_SUBDOMAINS = False  # the site's own host only: we do not own the rest
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Serve from the finders so that a fresh checkout needs no collectstatic step.
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "gpuqueue.api.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "gpuqueue.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.CursorPagination",
    "PAGE_SIZE": 50,
}
# Values kept between requests and cycles (gpuqueue/core/caches.py: tokens, the teams and
# flavors a submission names, the largest node of each flavor, the pending rows). Off: every
# value is read from the database every time.
GPUQUEUE_CACHES = env_bool("GPUQUEUE_CACHES", True)

SPECTACULAR_SETTINGS = {
    "TITLE": "gpuqueue API",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Swagger UI asks validator.swagger.io about the schema unless told not to.
    "SWAGGER_UI_SETTINGS": {"validatorUrl": None, "deepLinking": True},
}

# Celery: Redis is the broker only; results live in PostgreSQL as job state.
CELERY_BROKER_URL = REDIS_URL
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

# The admission cycle and the cluster.
GPUQUEUE_CYCLE_SECONDS = env_float("GPUQUEUE_CYCLE_SECONDS", 3.0, minimum=0.5)
GPUQUEUE_FORECAST_SECONDS = env_float("GPUQUEUE_FORECAST_SECONDS", 15.0, minimum=1)
GPUQUEUE_SYNC_SECONDS = env_float("GPUQUEUE_SYNC_SECONDS", 1.0, minimum=0.1)
GPUQUEUE_CLUSTER_BACKEND = env_choice(
    "GPUQUEUE_CLUSTER_BACKEND", "simulated", ("simulated", "kubernetes")
)
GPUQUEUE_SIM_CLUSTER = env_str(
    "GPUQUEUE_SIM_CLUSTER", str(BASE_DIR / "gpuqueue" / "cluster" / "default_cluster.yaml")
)
GPUQUEUE_SIM_STARTUP_SECONDS = env_float("GPUQUEUE_SIM_STARTUP_SECONDS", 1.0, minimum=0)
GPUQUEUE_SIM_CHECKPOINT_SECONDS = env_float("GPUQUEUE_SIM_CHECKPOINT_SECONDS", 2.0, minimum=0)
GPUQUEUE_DEMO = env_bool("GPUQUEUE_DEMO", EMBEDDED)
GPUQUEUE_DEMO_JOBS_PER_MINUTE = env_float("GPUQUEUE_DEMO_JOBS_PER_MINUTE", 6.0, minimum=0)

# Scheduling policy (gpuqueue.scheduler.Policy).
GPUQUEUE_PLACEMENT = env_choice("GPUQUEUE_PLACEMENT", "binpack", ("binpack", "spread"))
GPUQUEUE_STARVATION_SECONDS = env_float("GPUQUEUE_STARVATION_SECONDS", 3600.0, minimum=0)
# A job that declares no max runtime may backfill a reservation's nodes when this many times its
# predicted runtime ends before the reservation starts; 0: only declared runtimes backfill.
GPUQUEUE_BACKFILL_PREDICTION_FACTOR = env_float(
    "GPUQUEUE_BACKFILL_PREDICTION_FACTOR", 2.0, minimum=0
)
GPUQUEUE_MIN_RUNTIME_SECONDS = env_float("GPUQUEUE_MIN_RUNTIME_SECONDS", 60.0, minimum=0)
GPUQUEUE_PREEMPTION = env_bool("GPUQUEUE_PREEMPTION", True)
GPUQUEUE_RECLAIM = env_bool("GPUQUEUE_RECLAIM", True)
# Reclaim for a share above the guarantee takes only jobs that ran this long (Policy field).
GPUQUEUE_RECLAIM_MIN_RUNTIME_SECONDS = env_float(
    "GPUQUEUE_RECLAIM_MIN_RUNTIME_SECONDS", 4 * 3600.0, minimum=0
)
# Time-based fair share: each team's balance of GPU-time received against its fair share, kept
# by the admission cycle (gpuqueue/services/quotas/share_balance.py, docs/dashboard.md).
GPUQUEUE_TIME_BASED_SHARE = env_bool("GPUQUEUE_TIME_BASED_SHARE", True)
GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS = env_int(
    "GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS", 120, minimum=0
)

LOGGING = logging_config(env_str("GPUQUEUE_LOG_LEVEL", "INFO") or "INFO")
GPUQUEUE_GANG_READY_TIMEOUT_SECONDS = env_float(
    "GPUQUEUE_GANG_READY_TIMEOUT_SECONDS", 600.0, minimum=1
)
# A job whose pods could not be started (refused by a ResourceQuota, gang never ready, planned
# nodes taken) is requeued to wait this long, doubled after each such failure up to an hour,
# and fails after this many (gpuqueue/services/jobs/start_failures.py).
GPUQUEUE_MAX_START_ATTEMPTS = env_int("GPUQUEUE_MAX_START_ATTEMPTS", 5, minimum=1)
GPUQUEUE_START_BACKOFF_SECONDS = env_float("GPUQUEUE_START_BACKOFF_SECONDS", 30.0, minimum=0)
# Idle GPUs (gpuqueue/services/accounting/gpu_activity.py): a running job whose GPUs stay below the
# threshold for the minutes given is flagged; a flavor may set its own values in the admin.
# Utilization comes from the DCGM exporter through Prometheus in Kubernetes mode, from the
# gpuqueue.dev/sim-gpu-utilization annotation in the simulated cluster.
GPUQUEUE_IDLE_THRESHOLD_PERCENT = env_float("GPUQUEUE_IDLE_THRESHOLD_PERCENT", 5.0, minimum=0)
# Minutes may be a fraction (tests flag a job within seconds); a flavor's own are whole ones.
GPUQUEUE_IDLE_MINUTES = env_float("GPUQUEUE_IDLE_MINUTES", 30.0, minimum=0.01)
# How often the ledger's running attempts are written and GPU utilization is read.
GPUQUEUE_USAGE_SECONDS = env_float("GPUQUEUE_USAGE_SECONDS", 60.0, minimum=1)
GPUQUEUE_PROMETHEUS_URL = env_str("GPUQUEUE_PROMETHEUS_URL")
GPUQUEUE_PROMETHEUS_GPU_METRIC = env_choice(
    "GPUQUEUE_PROMETHEUS_GPU_METRIC",
    "DCGM_FI_DEV_GPU_UTIL",
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
)
GPUQUEUE_PROMETHEUS_TIMEOUT_SECONDS = env_float(
    "GPUQUEUE_PROMETHEUS_TIMEOUT_SECONDS", 5.0, minimum=0.1
)

# Periodic work. `expires` drops a run that waited longer than its period (a backlog of cycles
# after an outage would only repeat the same work).
CELERY_BEAT_SCHEDULE = {
    "admission-cycle": {
        "task": "gpuqueue.run_admission_cycle",
        "schedule": GPUQUEUE_CYCLE_SECONDS,
        "options": {"expires": GPUQUEUE_CYCLE_SECONDS},
    },
    "forecasts": {
        "task": "gpuqueue.refresh_forecasts",
        "schedule": GPUQUEUE_FORECAST_SECONDS,
        "options": {"expires": GPUQUEUE_FORECAST_SECONDS},
    },
    "demo-traffic": {
        "task": "gpuqueue.submit_demo_jobs",
        "schedule": 10.0,
        "options": {"expires": 10.0},
    },
    # The dashboard's utilization history and idle iron
    # (gpuqueue/services/accounting/utilization.py).
    "utilization-sample": {
        "task": "gpuqueue.sample_utilization",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # The GPU-hours ledger's running attempts and idle GPUs (services/accounting/usage_ledger.py,
    # services/accounting/gpu_activity.py).
    "usage-ledger": {
        "task": "gpuqueue.record_usage",
        "schedule": GPUQUEUE_USAGE_SECONDS,
        "options": {"expires": GPUQUEUE_USAGE_SECONDS},
    },
}

# --- Kubernetes backend (GPUQUEUE_CLUSTER_BACKEND=kubernetes; docs/kubernetes.md) -------------
# Read only by gpuqueue.cluster.kubernetes; the simulated backend ignores them.
# A kubeconfig path; unset means in-cluster configuration (the ServiceAccount of deploy/).
GPUQUEUE_K8S_KUBECONFIG = env_str("GPUQUEUE_K8S_KUBECONFIG", env_str("KUBECONFIG"))
GPUQUEUE_K8S_CONTEXT = env_str("GPUQUEUE_K8S_CONTEXT")
# Who this install is (docs/security.md): the `gpuqueue.dev/instance` label on everything it
# makes and in every selector, recorded in the database at the first start, and named by the
# marker it keeps in each team namespace. A label value: letters, digits, '-', '_', '.'.
GPUQUEUE_INSTANCE = env_str("GPUQUEUE_INSTANCE", "gpuqueue") or "gpuqueue"
if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", GPUQUEUE_INSTANCE):
    raise ImproperlyConfigured(
        f"GPUQUEUE_INSTANCE={GPUQUEUE_INSTANCE!r} is not a label value: up to 63 letters,"
        " digits, '-', '_' or '.', beginning and ending with a letter or digit"
    )
# Host paths a flavor's fabric may mount into its workers (gpuqueue/core/fabric.py): the
# InfiniBand device files by default; nothing else of the node is reachable.
GPUQUEUE_FABRIC_HOST_PATHS = env_list("GPUQUEUE_FABRIC_HOST_PATHS", ["/dev/infiniband"])
# The taint key on GPU nodes that gpuqueue's pods tolerate (the GPU Operator's default).
GPUQUEUE_K8S_GPU_TAINT = env_str("GPUQUEUE_K8S_GPU_TAINT", "nvidia.com/gpu")
# NVIDIA_VISIBLE_DEVICES=void in every worker, over its Secrets (gpuqueue/cluster/manifests.py):
# off only where the device plugin's list is that variable (DEVICE_LIST_STRATEGY=envvar).
GPUQUEUE_K8S_PIN_VISIBLE_DEVICES = env_bool("GPUQUEUE_K8S_PIN_VISIBLE_DEVICES", True)
# The PriorityClasses a job may name (none unless listed): a class preempts pods outside the
# queue's plan, so an admin chooses which exist for gpuqueue's workloads.
GPUQUEUE_PRIORITY_CLASSES = env_list("GPUQUEUE_PRIORITY_CLASSES", [])
# The PriorityClass of every worker of a job that names none (deploy/ ships it: value 1000000,
# preemptionPolicy Never), so that kube-scheduler's own preemption does not take a gang's
# workers for other pods. Empty: workers get the cluster's default priority.
GPUQUEUE_K8S_PRIORITY_CLASS = env_str("GPUQUEUE_K8S_PRIORITY_CLASS", "gpuqueue-workload")
# A PodDisruptionBudget per gang (minAvailable = workers, owned by the attempt's Secret): a
# `kubectl drain` of its node then waits until gpuqueue has checkpointed and requeued the gang
# (a drain is a preemption) instead of evicting part of it. Needs the PDB grant in deploy/.
GPUQUEUE_K8S_GANG_PDB = env_bool("GPUQUEUE_K8S_GANG_PDB", False)
# Every API call gives up after this long (then counts as a transient error and is retried).
GPUQUEUE_K8S_API_TIMEOUT_SECONDS = env_float("GPUQUEUE_K8S_API_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Attempts per API call on 429, 5xx and timeouts, with exponential backoff from the base delay.
GPUQUEUE_K8S_API_RETRIES = env_int("GPUQUEUE_K8S_API_RETRIES", 3, minimum=1)
GPUQUEUE_K8S_API_BACKOFF_SECONDS = env_float("GPUQUEUE_K8S_API_BACKOFF_SECONDS", 0.5, minimum=0)
# A worker still pulling its image (ErrImagePull/ImagePullBackOff) after this long is a failed
# start. A node NotReady or unreachable this long has its gangs torn down (the workers tolerate
# the node's not-ready and unreachable taints as long); meanwhile its GPUs are offered to no new
# work.
GPUQUEUE_NODE_LOST_GRACE_SECONDS = env_float("GPUQUEUE_NODE_LOST_GRACE_SECONDS", 300.0, minimum=0)
GPUQUEUE_K8S_IMAGE_PULL_TIMEOUT_SECONDS = env_float(
    "GPUQUEUE_K8S_IMAGE_PULL_TIMEOUT_SECONDS", 300.0, minimum=0
)
# How long one watch request stays open before it is renewed from its last resourceVersion,
# and how often the watcher re-lists everything and reconciles even when nothing was seen.
GPUQUEUE_K8S_WATCH_SECONDS = env_float("GPUQUEUE_K8S_WATCH_SECONDS", 240.0, minimum=0.1)
GPUQUEUE_K8S_RESYNC_SECONDS = env_float("GPUQUEUE_K8S_RESYNC_SECONDS", 60.0, minimum=0.1)
# A finished job's Kubernetes objects (and so its pods' logs) are kept this long, then deleted.
GPUQUEUE_K8S_KEEP_FINISHED_SECONDS = env_float(
    "GPUQUEUE_K8S_KEEP_FINISHED_SECONDS", 86400.0, minimum=0
)
# The watcher touches this file after every sync pass (its liveness probe checks the age).
GPUQUEUE_WATCHER_HEARTBEAT_FILE = env_str("GPUQUEUE_WATCHER_HEARTBEAT_FILE", "")
# The port workers use to rendezvous (MASTER_PORT) through the headless Service.
GPUQUEUE_K8S_MASTER_PORT = env_int("GPUQUEUE_K8S_MASTER_PORT", 29500, minimum=1)
# Where workloads reach gpuqueue's API to acknowledge a checkpoint (GPUQUEUE_URL in the pod).
GPUQUEUE_PUBLIC_URL = env_str("GPUQUEUE_PUBLIC_URL", "http://gpuqueue-web.gpuqueue.svc:8000")
# The cluster-health flag (written by the Kubernetes backend, read by /healthz) counts as stale,
# and so "unknown", after this long without a write.
GPUQUEUE_CLUSTER_HEALTH_TTL_SECONDS = env_float(
    "GPUQUEUE_CLUSTER_HEALTH_TTL_SECONDS", 300.0, minimum=1
)

# --- The REST API: limits, throttling, schema, metrics -------------------------------------------
# Per API token (else per signed-in user), counted in Redis by gpuqueue.api.throttling; empty
# turns throttling off. Anonymous callers (who can only fail to authenticate) by address.
GPUQUEUE_API_RATE = env_str("GPUQUEUE_API_RATE", "1200/min")
GPUQUEUE_API_ANON_RATE = env_str("GPUQUEUE_API_ANON_RATE", "120/min")
# Requests with a token that is not valid, per client address and per token prefix: past this
# 429 before the database is asked (gpuqueue.api.throttling).
GPUQUEUE_API_BAD_TOKEN_RATE = env_str("GPUQUEUE_API_BAD_TOKEN_RATE", "30/min")
# Request bodies above this are refused with 413 before parsing (a job is a few KiB).
GPUQUEUE_API_MAX_BODY_BYTES = env_int("GPUQUEUE_API_MAX_BODY_BYTES", 64 * 1024, minimum=1024)
# Form posts (the dashboard, sign-in, the admin): Django refuses with 400 a urlencoded body whose
# declared length is over this before reading it, and stops reading a multipart body's fields
# past it. The largest submission the rules accept is about 100 KiB of text.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("GPUQUEUE_FORM_MAX_BODY_BYTES", 256 * 1024, minimum=1024)
# No form takes a file: a file part of a multipart body is read and dropped, never kept in
# memory or on disk.
FILE_UPLOAD_HANDLERS: list[str] = []
# With a value, /metrics wants `Authorization: Bearer <it>`. Without one it answers 401 unless
# GPUQUEUE_METRICS_OPEN is set (the default of the embedded mode, which listens on loopback).
GPUQUEUE_METRICS_TOKEN = env_str("GPUQUEUE_METRICS_TOKEN")
GPUQUEUE_METRICS_OPEN = env_bool("GPUQUEUE_METRICS_OPEN", EMBEDDED)

REST_FRAMEWORK.update(
    {
        "DEFAULT_PARSER_CLASSES": ["gpuqueue.api.parsers.LimitedJSONParser"],
        "DEFAULT_THROTTLE_CLASSES": ["gpuqueue.api.throttling.TokenRateThrottle"],
        "DEFAULT_SCHEMA_CLASS": "gpuqueue.api.schema.GpuqueueAutoSchema",
        "DEFAULT_PAGINATION_CLASS": "gpuqueue.api.pagination.NewestFirst",
    }
)
SPECTACULAR_SETTINGS.update(
    {
        "DESCRIPTION": "Submit and follow GPU jobs; manage teams, quotas, tokens. "
        "Authenticate with `Authorization: Bearer gq_…`. Errors: "
        '{"error": {"code", "message", "fields"}}.',
        "SERVE_INCLUDE_SCHEMA": False,
        "COMPONENT_SPLIT_REQUEST": True,
        "SCHEMA_PATH_PREFIX": "/api/v1",
        "ENUM_NAME_OVERRIDES": {
            "JobStateEnum": "gpuqueue.core.states.JobState",
            "RoleEnum": "teams.models.Role",
        },
    }
)
MIDDLEWARE.insert(0, "gpuqueue.ops.metrics.ApiLatencyMiddleware")
# Probes and scrapes address a pod by its IP: /healthz and /metrics answer any Host.
MIDDLEWARE.insert(0, "gpuqueue.ops.probe_hosts.ProbeHostMiddleware")
# The worker times the admission cycle through Celery signals connected in gpuqueue.ops.metrics.
CELERY_IMPORTS = ["gpuqueue.ops.metrics", "gpuqueue.demo.tasks"]
