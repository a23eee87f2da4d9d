"""gpuqueue: GPU job queueing and admission in front of Kubernetes.

Nothing but the guard of the optional compiled build (standard library only) is imported here,
so that `gpuqueue.scheduler` and `gpuqueue.sim` stay free of Django and Celery; the Celery app is
loaded by the app config (web) or by `celery -A gpuqueue.celery`.
"""

from gpuqueue.native import check as _check_native_build

# Modules compiled with `make native` (optional) must match their sources: stale ones are refused
# before anything imports them.
_check_native_build()
