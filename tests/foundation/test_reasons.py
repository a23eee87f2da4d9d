"""Pending reasons read as one sentence with numbers (docs/architecture.md, scenarios 1, 8)."""
# ruff: noqa: E501 - a table of reasons reads best one case per line

from __future__ import annotations

import pytest

from gpuqueue.core.reason_text import describe_reason, reason_label


@pytest.mark.parametrize(
    ("reason", "sentence"),
    [
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "h100",
                    "workers": 4,
                    "gpus_per_worker": 2,
                    "workers_fit": 3,
                    "free": 6,
                },
            },
            "Waiting for 8 h100 GPUs as 4 × 2; 3 of 4 workers fit now; 6 GPUs free.",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "h100",
                    "workers": 1,
                    "gpus_per_worker": 8,
                    "workers_fit": 0,
                    "free": 8,
                    "short": "cpu",
                    "short_node": "h100-3",
                    "short_node_gpus_free": 8,
                    "short_left": 16000,
                    "short_allocatable": 224000,
                    "short_per_worker": 32000,
                },
            },
            "Waiting for 8 h100 GPUs as 1 × 8; 0 of 1 workers fit now; 8 GPUs free. Node h100-3: 8 GPUs free but 16 of 224 CPUs (a worker asks 32).",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "h100",
                    "workers": 2,
                    "gpus_per_worker": 4,
                    "workers_fit": 1,
                    "free": 8,
                    "short": "memory",
                    "short_node": "n1",
                    "short_node_gpus_free": 4,
                    "short_left": 32 * 2**30,
                    "short_allocatable": 2048 * 2**30,
                    "short_per_worker": 64 * 2**30,
                },
            },
            "Waiting for 8 h100 GPUs as 2 × 4; 1 of 2 workers fit now; 8 GPUs free. Node n1: 4 GPUs free but 32 of 2,048 GiB of memory (a worker asks 64).",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "h100",
                    "workers": 2,
                    "gpus_per_worker": 1,
                    "workers_fit": 0,
                    "free": 8,
                    "short": "pods",
                    "short_node": "n1",
                    "short_node_gpus_free": 8,
                    "short_left": 0,
                    "short_allocatable": 110,
                    "short_per_worker": 1,
                },
            },
            "Waiting for 2 h100 GPUs as 2 × 1; 0 of 2 workers fit now; 8 GPUs free. Node n1: 8 GPUs free but 0 of 110 pod slots (a worker is one pod).",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "h100",
                    "workers": 1,
                    "gpus_per_worker": 8,
                    "largest_node": 8,
                    "flavor_capacity": 16,
                    "most_workers": 0,
                    "short": "cpu",
                    "short_per_worker": 300000,
                    "short_largest": 224000,
                },
            },
            "Can never start: a worker asks 300 CPUs and the largest h100 node has 224.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "h100",
                    "workers": 3,
                    "gpus_per_worker": 2,
                    "largest_node": 8,
                    "flavor_capacity": 16,
                    "most_workers": 2,
                    "short": "cpu",
                    "short_per_worker": 150000,
                    "short_largest": 224000,
                },
            },
            "Can never start: the job asks for 6 h100 GPUs as 3 × 2 with 150 CPUs each, and a worker runs on one node: even empty, the h100 nodes hold at most 2 such workers.",
        ),
        (
            {
                "code": "over_limit",
                "numbers": {
                    "flavor": "h100",
                    "scope": "team",
                    "limit": 16,
                    "in_use": 14,
                    "requested": 4,
                },
            },
            "Over the team's limit: 14 of 16 h100 GPUs in use and this job asks for 4.",
        ),
        (
            {
                "code": "queued_behind_team",
                "numbers": {
                    "flavor": "l4",
                    "workers": 1,
                    "gpus_per_worker": 1,
                    "workers_fit": 0,
                    "free": 1,
                    "ahead": 3,
                },
            },
            "Waiting for 1 l4 GPUs as 1 × 1; 0 of 1 workers fit now; 1 GPU free. Queued behind 3 earlier jobs of the team.",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "h100",
                    "workers": 4,
                    "gpus_per_worker": 8,
                    "workers_fit": 0,
                    "free": 3,
                    "fair_share": 38,
                    "team_in_use": 32,
                    "newer_gpus": 32,
                },
            },
            "Waiting for 32 h100 GPUs as 4 × 8; 0 of 4 workers fit now; 3 GPUs free. Its team holds 32 h100 GPUs against a fair share of 38, 32 of them in jobs that started after this one was submitted (a team's other jobs start whenever they fit): this job can start within the share only once the team's running jobs leave 32 of its GPUs free together, or on GPUs that other teams leave free.",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "h100",
                    "workers": 2,
                    "gpus_per_worker": 8,
                    "workers_fit": 1,
                    "free": 8,
                    "fair_share": 8,
                    "team_in_use": 0,
                    "newer_gpus": 0,
                },
            },
            "Waiting for 16 h100 GPUs as 2 × 8; 1 of 2 workers fit now; 8 GPUs free. It is larger than its team's fair share of 8 h100 GPUs, so it can start only on GPUs that other teams leave free.",
        ),
        (
            {
                "code": "waiting_for_preemption",
                "numbers": {"flavor": "h100", "workers": 2, "gpus_per_worker": 8},
                "job_ids": [4, 9],
            },
            "Waiting for 2 preempted jobs (#4, #9) to checkpoint and release 16 h100 GPUs as 2 × 8.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {"flavor": "l4", "workers": 1, "gpus_per_worker": 8, "largest_node": 4},
            },
            "Can never start: a worker needs 8 l4 GPUs and the largest node has 4.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "h100",
                    "workers": 1024,
                    "gpus_per_worker": 8,
                    "largest_node": 8,
                    "flavor_capacity": 64,
                },
            },
            "Can never start: the job asks for 8192 h100 GPUs as 1024 × 8 and the cluster has "
            "64 h100 GPUs in all.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "h100",
                    "workers": 3,
                    "gpus_per_worker": 6,
                    "largest_node": 8,
                    "flavor_capacity": 20,
                    "most_workers": 2,
                },
            },
            "Can never start: the job asks for 18 h100 GPUs as 3 × 6, and a worker runs on one "
            "node: even empty, the h100 nodes hold at most 2 workers of 6 GPUs.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "a100",
                    "workers": 1,
                    "gpus_per_worker": 1,
                    "largest_node": 0,
                },
            },
            "Can never start: no schedulable node offers a100 GPUs.",
        ),
        (
            {
                "code": "over_limit",
                "numbers": {
                    "flavor": "h100",
                    "scope": "team",
                    "limit": 16,
                    "in_use": 0,
                    "requested": 32,
                },
            },
            "Can never start under the team's limit: the job asks for 32 h100 GPUs and the "
            "limit is 16; ask an admin to raise it.",
        ),
        (
            {
                "code": "behind_reservation",
                "numbers": {"flavor": "h100", "expected_start": None},
                "job_ids": [7],
            },
            "The free h100 GPUs are reserved for starving job #7, expected to start at an unknown time.",
        ),
        (
            {
                "code": "in_share_debt",
                "numbers": {
                    "flavor": "h100",
                    "fair_share": 8,
                    "in_use": 8,
                    "requested": 8,
                    "debt_seconds": 360000,
                    "threshold_seconds": 230400,
                    "recovers_at": 1795000000.0,
                },
            },
            "The team has used 100.0 h100 GPU-hours more than its fair share lately (older use counts less and less), and a team more than 64.0 GPU-hours in debt borrows beyond its fair share of 8 only free GPUs of nodes already in use, and they have no room for this job: 8 in use and this job asks for 8. It should be back under that by 2026-11-18 11:06 UTC if the team holds no more than 8 h100 GPUs until then.",
        ),
        (
            {
                "code": "in_share_debt",
                "numbers": {
                    "flavor": "l4",
                    "fair_share": 0,
                    "in_use": 0,
                    "requested": 1,
                    "debt_seconds": 7200,
                    "threshold_seconds": 0,
                    "recovers_at": None,
                },
            },
            "The team has used 2.0 l4 GPU-hours more than its fair share lately (older use counts less and less), and a team more than 0.0 GPU-hours in debt borrows beyond its fair share of 0 only free GPUs of nodes already in use, and they have no room for this job: 0 in use and this job asks for 1. It is not expected to fall under that.",
        ),
        (
            {
                "code": "waiting_for_reclaim",
                "numbers": {
                    "flavor": "h100",
                    "workers": 2,
                    "gpus_per_worker": 8,
                    "free": 0,
                    "borrowers": "team-b",
                    "borrowed": 16,
                    "min_runtime_seconds": 1800,
                    "reclaim_at": 1795000000.0,
                },
            },
            "Waiting for 16 h100 GPUs as 2 × 8 within the team's guarantee: team-b borrows 16 h100 GPUs, and its jobs may not be preempted before they have run 30 min; reclaim can start at 2026-11-18 11:06 UTC.",
        ),
        (
            {
                "code": "waiting_for_reclaim",
                "numbers": {
                    "flavor": "a100",
                    "workers": 1,
                    "gpus_per_worker": 4,
                    "free": 2,
                    "borrowers": "team-b, team-c, team-d",
                    "borrowed": 24,
                    "min_runtime_seconds": 9000,
                    "reclaim_at": 1795000000.0,
                },
            },
            "Waiting for 4 a100 GPUs as 1 × 4 within the team's guarantee: team-b, team-c and team-d borrow 24 a100 GPUs, and their jobs may not be preempted before they have run 2.5 h; reclaim can start at 2026-11-18 11:06 UTC.",
        ),
        (
            {
                "code": "reserved",
                "numbers": {"flavor": "h100", "nodes": 2, "expected_start": 1795000000.0},
            },
            "Waited past the starvation threshold: 2 nodes are reserved for this job, which should start at 2026-11-18 11:06 UTC.",
        ),
        (
            {
                "code": "reserved",
                "numbers": {
                    "flavor": "h100",
                    "nodes": 1,
                    "expected_start": 1795000000.0,
                    "team_holds_none": 1,
                },
            },
            "The team holds none of its h100 GPUs, so its oldest job goes first: 1 node is reserved for this job, which should start at 2026-11-18 11:06 UTC.",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "flavor": "a100",
                    "workers": 1,
                    "gpus_per_worker": 1,
                    "workers_fit": 0,
                    "free": 0,
                    "gpu_milli": 500,
                    "gpu_models": "",
                    "most_gpu_room": 250,
                },
            },
            "Waiting for 1 × 500 thousandths of one a100 GPU; 0 of 1 workers fit now; 0 GPUs free. The most free on one GPU: 250 thousandths.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "h100",
                    "workers": 1,
                    "gpus_per_worker": 1,
                    "gpu_milli": 250,
                    "shared": 0,
                    "largest_node": 8,
                },
            },
            "Can never start: h100 GPUs are not shared; ask for whole GPUs, or a flavor that shares its GPUs.",
        ),
        (
            {
                "code": "never_fits",
                "numbers": {
                    "flavor": "h100",
                    "workers": 1,
                    "gpus_per_worker": 8,
                    "gpu_milli": 0,
                    "gpu_models": "H200",
                    "largest_node": 0,
                },
            },
            "Can never start: no schedulable h100 node is of model H200.",
        ),
        (
            {
                "code": "held_for_older",
                "numbers": {
                    "flavor": "h100",
                    "limit": 24,
                    "in_use": 20,
                    "requested": 1,
                    "older_gpus": 24,
                    "older_submitted_at": 1795000000.0,
                },
                "job_ids": [7],
            },
            "Held for the team's older job #7 (24 h100 GPUs, waiting since 2026-11-18 11:06 UTC), which has waited longest: 20 of the team's limit of 24 are in use, and this job's 1 would leave it no room.",
        ),
        (
            {
                "code": "over_limit",
                "numbers": {
                    "flavor": "h100",
                    "scope": "team",
                    "limit": 24,
                    "in_use": 20,
                    "requested": 24,
                    "newer_gpus": 20,
                },
            },
            "Over the team's limit: 20 of 24 h100 GPUs in use and this job asks for 24. 20 of them are held by the team's jobs started since this one was submitted; it has waited longest, so the team's newer jobs now start only while they leave it room.",
        ),
        (None, "Waiting for the next admission cycle."),
    ],
)
def test_a_reason_reads_as_a_sentence_with_its_numbers(reason: dict | None, sentence: str) -> None:
    assert describe_reason(reason) == sentence


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        ({"code": "no_capacity", "numbers": {}}, "Resources"),
        ({"code": "queued_behind_team", "numbers": {}}, "TeamQueue"),
        ({"code": "over_limit", "numbers": {"limit": 32, "requested": 8, "in_use": 30}}, "Limit"),
        ({"code": "over_limit", "numbers": {"limit": 32, "requested": 64}}, "NeverUnderLimit"),
        # Without the team's newer jobs (20 GPUs) the 24-GPU gang would be within the limit.
        (
            {
                "code": "over_limit",
                "numbers": {"limit": 24, "requested": 24, "in_use": 20, "newer_gpus": 20},
            },
            "NewerTeamJobs",
        ),
        # Newer jobs hold 4 of 20, but the older ones' 16 leave the 24-GPU gang no room.
        (
            {
                "code": "over_limit",
                "numbers": {"limit": 24, "requested": 24, "in_use": 20, "newer_gpus": 4},
            },
            "Limit",
        ),
        (
            {
                "code": "no_capacity",
                "numbers": {
                    "workers": 4,
                    "gpus_per_worker": 8,
                    "fair_share": 38,
                    "team_in_use": 36,
                    "newer_gpus": 30,
                },
            },
            "NewerTeamJobs",
        ),
        ({"code": "held_for_older", "numbers": {}}, "OlderTeamJob"),
        ({"code": "no_quota", "numbers": {}}, "NoQuota"),
        ({"code": "over_fair_share", "numbers": {}}, "Guarantee"),
        ({"code": "in_share_debt", "numbers": {}}, "FairShare"),
        ({"code": "waiting_for_reclaim", "numbers": {}}, "Reclaim"),
        ({"code": "waiting_for_preemption", "numbers": {}}, "Preempting"),
        ({"code": "behind_reservation", "numbers": {}}, "Priority"),
        ({"code": "reserved", "numbers": {}}, "Reserved"),
        ({"code": "never_fits", "numbers": {}}, "NeverFits"),
        ({"code": "backing_off", "numbers": {}}, "BackOff"),
        ({"code": "dependencies", "numbers": {}}, "Dependency"),
        ({"code": "dependency_unmet", "numbers": {}}, "DependencyNeverMet"),
        ({"code": "array_limit", "numbers": {}}, "ArrayLimit"),
        (None, "Cycle"),
    ],
)
def test_a_reason_has_a_word_for_lists_that_says_what_its_sentence_says(
    reason: dict | None, label: str
) -> None:
    assert reason_label(reason) == label


def test_every_code_the_engine_gives_has_its_own_word() -> None:
    from gpuqueue.core.reason_text import LABELS
    from gpuqueue.scheduler.model import ReasonCode

    assert {code.value for code in ReasonCode} <= set(LABELS)
    assert len(set(LABELS.values())) == len(LABELS)
