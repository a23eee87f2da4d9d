"""Instrumentation for topology_replay: why each split gang was split (the replay only)."""

from __future__ import annotations

from collections import Counter, defaultdict

from gpuqueue.scheduler import engine as eng
from gpuqueue.scheduler import starvation as st

# job id -> list of (now, cause)
SPLITS: dict[int, list[tuple[float, str]]] = defaultdict(list)
_state = {"step": "5/6/8"}
_REFUSED: dict[int, str] = {}  # job id -> why its last reservation in one domain was refused


def install() -> None:
    orig_in = eng.Cycle._in_domain
    orig_pre = eng.Cycle._preempt
    orig_fit = st.Reserver._fit

    def in_domain(self, job, fl, extra, incoming=False):
        placement, domain = orig_in(self, job, fl, extra, incoming)
        if placement is not None and domain and not domain.startswith(job.topology_level + "="):
            SPLITS[job.id].append((self.horizon._now, f"next level out ({domain.split('=')[0]})"))
        if placement is not None and not domain and len(placement) > 1:
            now = self.horizon._now
            patience = self.policy.topology_patience_seconds
            since = job.submitted_at if job.requeued_at is None else job.requeued_at
            if now >= since + patience:
                cause = "patience passed, " + (
                    f"starving, {_REFUSED.get(job.id, '?')}"
                    if job.id in self.starving
                    else "not starving"
                )
            elif self.topology.largest(fl, job) < job.workers:
                cause = "no domain ever holds"
            else:
                cause = "other"
            step = _state["step"] if incoming else ("6 backfill" if extra else "5 free")
            if incoming and _state["step"] != "9 preempt":
                step = "8 incoming"
            SPLITS[job.id].append((now, f"{step}: {cause}"))
        return placement, domain

    def preempt(self, job, fl, reclaim):
        _state["step"] = "9 preempt"
        try:
            return orig_pre(self, job, fl, reclaim)
        finally:
            _state["step"] = "5/6/8"

    def fit(self, fl, job, avail, cap, *rest):
        placement = orig_fit(self, fl, job, avail, cap, *rest)
        if placement is not None and job.topology_level and len(placement) > 1:
            dom = self.topology.domain_of(fl, self.topology.level_of(job)) if self.topology else {}
            if len({dom.get(n) for n, _ in placement}) > 1:
                SPLITS[job.id].append((self.horizon._now, "10 reserve: no domain in reservation"))
        return placement

    orig_reserve = st.Reserver.reserve

    def reserve(self, job, strict=None, known=False, beyond=None):
        found = orig_reserve(self, job, strict, known, beyond)
        if found is None and beyond is not None:
            fl = self.ledger.flavors[job.flavor]
            if len(self.reservations) >= self.policy.max_reservations:
                _REFUSED[job.id] = "every reservation taken"
            else:
                cap = fl.caps_without_ours(job.cpu_per_worker, job.memory_per_worker)
                start, _ = self._start(fl, job, cap, True)
                _REFUSED[job.id] = (
                    "no known end frees a rack"
                    if start == float("inf")
                    else ("rack further than the bound")
                )
        return found

    eng.Cycle._in_domain = in_domain
    st.Reserver.reserve = reserve
    eng.Cycle._preempt = preempt
    st.Reserver._fit = fit


def causes(split_jobs, racks) -> dict[str, int]:
    """Each split start (more than one rack) of a gang that fit a rack: the cause recorded at
    the last split placement of it no later than that start, and whether it was its first start
    or one after a preemption."""
    starts: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for (job_id, start), found in racks.items():
        starts[job_id].append((start, len(found)))
    counted: Counter[str] = Counter()
    for job in split_jobs:
        mine = sorted(starts.get(job.id, []))
        if not mine:
            counted["never started"] += 1
            continue
        for i, (start, n) in enumerate(mine):
            if n <= 1:
                continue
            when = "first start" if i == 0 else "after requeue"
            recorded = [c for t, c in SPLITS.get(job.id, []) if t <= start]
            cause = recorded[-1] if recorded else "unrecorded"
            counted[f"{cause} ({when})"] += 1
    out = dict(counted.most_common())
    SPLITS.clear()
    return out


# An experiment, not the product's rule: a gang's patience counted from the first plan in
# which its flavor had free GPUs enough for it (as if the cycle kept that time per job).
_FIRST_FIT: dict[tuple[int, float | None], float] = {}


def install_patience_from_fit() -> None:
    def holds_out(self, job):
        held = self._holding_out.get(job.id)
        if held is not None:
            return held
        patience = self.policy.topology_patience_seconds
        fl = self.ledger.flavors.get(job.flavor)
        if (
            patience <= 0
            or fl is None
            or self.topology.level_of(job) < 0
            or self.topology.largest(fl, job) < job.workers
        ):
            held = False
        else:
            key = (job.id, job.requeued_at)
            since = _FIRST_FIT.get(key)
            if since is None and fl.total_free >= job.gpus:
                since = _FIRST_FIT[key] = self.horizon._now
            held = since is None or self.horizon._now < since + patience
        self._holding_out[job.id] = held
        return held

    eng.Cycle._holds_out = holds_out
