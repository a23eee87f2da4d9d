"""Values a process keeps between reads: every cache of the service, its freshness rule, and
the machinery of the web's rule (`Kept`, the epoch).

A kept value is used only while the version it was read under is still current, and for at
most an age. What the version is depends on who reads and how often the rows change:

| cache: what it keeps (module) | fresh while | at most | serves |
| --- | --- | --- | --- |
| API tokens, users (teams/token_cache) | the epoch | 60 s | api_load |
| a submission's team, flavor (services/jobs/submit) | the epoch | 60 s | api_load |
| largest node per flavor (services/cluster/inventory) | the epoch | 60 s | api_load |
| active job rows (cycle/job_feed) | the change feed | 600 s | cycle_scale, steady |
| nodes, flavors, quotas, teams (cycle/table_versions) | table counters | 600 s | the same |
| the last plan (cycle/kept_plan) | feed's mark, engine's clock | 600 s | the same: "kept" |
| runtime history (services/forecasts/runtime_history) | its age | 60 s | predictions |
| a job's facts, fixed (services/forecasts/runtime_history) | its age | a day | predictions |
| how far bands missed (services/forecasts/band_samples) | its age | 600 s | forecasts |
| memos (scheduler: engine, ledger, starvation) | one plan's ledger | one plan | make bench |
| SQL text (`functools.cache`) | always | the process | - |

"serves": the number each one earns its place on. Measured together (`sum(range(10**6))`
about 10 ms): a steady cycle of benchmarks/cycle_scale.py at 43,000 pending takes 0.09-0.11 s,
2.8-3.0 s with GPUQUEUE_CACHES off (the feed, the world, the last plan and the predictions'
caches); benchmarks/api_load.py 5.3-5.9 ms of CPU per submission, 10.5-11.2 ms with
GPUQUEUE_CACHES off (tokens and node sizes, about a fifth each, as their modules say); `make
bench` at `large` 0.36 s of CPU, 0.63 s with `--no-memo`. 60 s is MAX_AGE_SECONDS, 600 s
CYCLE_MAX_AGE_SECONDS.

Why four rules and not one:

- **The epoch** (the web). Values the API reads on every request from rows that change
  seldom are read under the cache epoch, a random value in Redis that every save or delete of
  such a row replaces, at once and again when the write commits (each app names its models
  with `derives_from`). A request reads the epoch once, in its first Redis round trip (the
  rate count's script returns it: `note_epoch`), so a change takes effect at the next request
  in every process, and a kept token costs no round trip of its own. Outside a request, and
  without Redis, nothing is kept. Jobs cannot go under it: every submission would renew it.
- **Triggers in PostgreSQL** (the admission cycle). The cycle runs in one process at a time
  and must see every change of the rows it reads, job by job: a trigger marks each job row
  whose watched columns changed (job_feed.WATCHED) and moves a counter per table for nodes,
  flavors, quotas and teams. Nothing has to be renewed by hand, and a write that is none of
  the cycle's business (a forecast, a reason the cycle remembers itself) marks nothing.
- **The engine's clock** (the last plan). The same snapshot at a later time gives the same
  plan until the first time one of the plan's comparisons with the clock flips; the engine's
  clock notes that time as it answers (scheduler/horizon.py).
- **Age alone** (predictions and forecasts). Estimates that may lag a minute or more behind
  the jobs that finished, read from thousands of rows: the age is the rule.

Each age bounds what no version sees: a bulk write (the cluster sync writes nodes with
`bulk_update`, so a new node size counts within MAX_AGE_SECONDS), SQL behind gpuqueue's back,
an epoch Redis lost, a reason written by hand. A missing epoch is replaced by a fresh random
value, never by one seen before, so an emptied Redis cannot make a stale value current.
Misses are not kept.

GPUQUEUE_CACHES off keeps nothing (the engine's memos aside: `Cycle(memo=False)`): every value
is read every time, the plain path that the tests compare the caches with. Redis also holds
records that are not caches (the cluster's health, the forecast's last timing): each is the
only copy of what it says.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from django.conf import settings
from django.core.signals import request_finished, request_started
from django.db import transaction
from django.db.models import Model
from django.db.models.signals import post_delete, post_save

from gpuqueue.core import redis as api_redis
from gpuqueue.core.outage import redis_failed

log = logging.getLogger(__name__)

EPOCH_KEY = "gpuqueue:cache-epoch"
MAX_AGE_SECONDS = 60.0  # the web's caches
CYCLE_MAX_AGE_SECONDS = 600.0  # the cycle's: everything is read whole again after this long
MAX_ENTRIES = 10_000  # per cache; past this it starts over

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def enabled() -> bool:
    return bool(settings.GPUQUEUE_CACHES)


class Kept(Generic[K, V]):
    """One cache: values by key, each with the version it was read under and when.

    Entries are replaced, never changed in place (but for the time a kept token was last used,
    a plain attribute: teams.token_cache), so threads of one process may share it."""

    def __init__(
        self, max_entries: int | None = MAX_ENTRIES, max_age_seconds: float | None = None
    ) -> None:
        """max_entries: past this the cache starts over; None for a cache whose owner prunes
        it itself (`keep_only`). max_age_seconds: how long a value is used at most, however
        current its version (None: the module's MAX_AGE_SECONDS)."""
        self._entries: dict[K, tuple[Hashable, float, V]] = {}
        self.max_entries = max_entries
        self.max_age_seconds = max_age_seconds
        _all.append(self)

    def get(self, key: K, version: Hashable | None) -> V | None:
        """The value kept for `key` if it was read under `version`, not too long ago."""
        hit = self._entries.get(key)
        if hit is None or version is None or not enabled():
            return None
        if hit[0] != version or time.monotonic() - hit[1] > self._max_age():
            return None
        return hit[2]

    def get_many(self, versions: Mapping[K, Hashable]) -> dict[K, V | None]:
        """`get` for each key and the version it is read under now: one look at the settings
        and the clock for all (a cycle asks for tens of thousands of pending rows)."""
        if not enabled():
            return dict.fromkeys(versions)
        oldest = time.monotonic() - self._max_age()
        entries = self._entries
        out: dict[K, V | None] = {}
        for key, version in versions.items():
            hit = entries.get(key)
            if hit is not None and version is not None and hit[0] == version and hit[1] >= oldest:
                out[key] = hit[2]
            else:
                out[key] = None
        return out

    def put_many(self, values: Mapping[K, tuple[Hashable, V]]) -> None:
        """`put` for each key: (the version it was read under, the value)."""
        if not enabled():
            return
        now = time.monotonic()
        if self.max_entries is not None and len(self._entries) + len(values) > self.max_entries:
            self._entries = {}
        for key, (version, value) in values.items():
            if version is not None and value is not None:
                self._entries[key] = (version, now, value)

    def _max_age(self) -> float:
        return MAX_AGE_SECONDS if self.max_age_seconds is None else self.max_age_seconds

    def holds(self, key: K) -> bool:
        """Something is kept for `key`, current or not."""
        return key in self._entries

    def put(self, key: K, version: Hashable | None, value: V | None) -> None:
        """Keep `value`, read under `version` (which must have been read before the value)."""
        if value is None or version is None or not enabled():
            return
        if self.max_entries is not None and len(self._entries) >= self.max_entries:
            self._entries = {}
        self._entries[key] = (version, time.monotonic(), value)

    def keep_only(self, keys: Iterable[K]) -> None:
        entries = self._entries
        self._entries = {key: entries[key] for key in keys if key in entries}

    def clear(self) -> None:
        self._entries = {}


_all: list[Kept[Any, Any]] = []


def forget_everything() -> None:
    """Empty every cache of this process, as a fresh process starts."""
    for kept in _all:
        kept.clear()


def read_through(kept: Kept[K, V], key: K, load: Callable[[], V | None]) -> V | None:
    """The value for `key` under the request's epoch: kept, else loaded (and kept)."""
    epoch = request_epoch()
    value = kept.get(key, epoch)
    if value is None:
        value = load()
        kept.put(key, epoch, value)
    return value


# --- The epoch ------------------------------------------------------------------------------

_UNREAD = object()
_request = threading.local()  # .epoch: _UNREAD, the request's epoch, or None (none known)


def _request_started(**_: Any) -> None:
    _request.epoch = _UNREAD


def _request_finished(**_: Any) -> None:
    _request.epoch = None


request_started.connect(_request_started, dispatch_uid="gpuqueue-caches-started")
request_finished.connect(_request_finished, dispatch_uid="gpuqueue-caches-finished")


def new_epoch() -> str:
    return secrets.token_hex(16)


def note_epoch(epoch: bytes | None) -> None:
    """The request in progress read the epoch (None: Redis did not answer)."""
    if getattr(_request, "epoch", None) is _UNREAD:
        _request.epoch = epoch


def request_epoch() -> bytes | None:
    """The epoch of the request in progress, read at most once per request; None outside a
    request or without Redis (then nothing is kept)."""
    epoch = getattr(_request, "epoch", None)
    if epoch is _UNREAD:
        epoch = _request.epoch = _read_epoch()
    return epoch


def _read_epoch() -> bytes | None:
    try:
        redis = api_redis.client()
        epoch = redis.get(EPOCH_KEY)
        if epoch is None:
            redis.set(EPOCH_KEY, new_epoch(), nx=True)
            epoch = redis.get(EPOCH_KEY)
    except Exception as error:  # noqa: BLE001 - without Redis, read everything from the database
        redis_failed(log, "reading the cache epoch (nothing is kept)", error)
        return None
    return epoch


def renew_epoch() -> None:
    """Make every process's kept values stale. Best effort: without Redis no process uses
    its kept values (it cannot read the epoch), and MAX_AGE_SECONDS bounds the rest."""
    try:
        api_redis.client().set(EPOCH_KEY, new_epoch())
    except Exception as error:  # noqa: BLE001 - a write must not fail because Redis is away
        redis_failed(
            log, f"renewing the cache epoch (kept values age out in {MAX_AGE_SECONDS}s)", error
        )


def derives_from(*models: type[Model]) -> None:
    """Kept values derive from these models: every save or delete of one of their rows renews
    the epoch, at once and again once the write commits. The first renewal stops the old
    value being used during the transaction; a process that reads the row again before the
    commit still reads the old values under the new epoch, which the second makes stale."""
    for model in models:
        label = model._meta.label
        post_save.connect(_row_written, sender=model, dispatch_uid=f"caches-save-{label}")
        post_delete.connect(_row_written, sender=model, dispatch_uid=f"caches-delete-{label}")


# Saves that write only these columns change nothing a cache keeps (a sign-in stamps
# last_login): without this every sign-in would make every process read everything again.
UNREAD_COLUMNS = frozenset({"last_login"})


def _row_written(update_fields: Any = None, **_: Any) -> None:
    if update_fields is not None and set(update_fields) <= UNREAD_COLUMNS:
        return
    renew_epoch()
    transaction.on_commit(renew_epoch)
