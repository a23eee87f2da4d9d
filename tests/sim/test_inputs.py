"""Trace loaders, cluster specs, quotas and the fairness yardstick."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuqueue.scheduler.model import Quota
from gpuqueue.scheduler.usage import entitled_shares
from gpuqueue.sim import (
    gang_shape,
    helios_quotas,
    parse_cluster_spec,
    proportional_quotas,
    quotas_from_yaml,
    uniform_cluster,
)
from gpuqueue.sim.fairness import jain
from gpuqueue.sim.traces import load_openb_nodes, load_openb_pods, load_philly
from gpuqueue.sim.workload import build_teams

FIXTURES = Path(__file__).parent / "fixtures"


def test_a_job_larger_than_a_node_becomes_a_gang_with_its_gpu_count_kept() -> None:
    assert gang_shape(1, 8) == (1, 1)
    assert gang_shape(8, 8) == (1, 8)
    assert gang_shape(16, 8) == (2, 8)
    assert gang_shape(12, 8) == (2, 6)
    assert gang_shape(128, 8) == (16, 8)


def test_philly_rows_become_jobs_in_submission_order_from_time_zero() -> None:
    jobs = load_philly(FIXTURES / "philly_tiny.csv")
    assert [(j.id, j.submitted_at, j.team, j.workers, j.gpus_per_worker) for j in jobs] == [
        (0, 0.0, "6214e9", 2, 8),  # 16 GPUs: two node-sized workers
        (1, 0.0, "6214e9", 2, 6),  # 12 GPUs, same second, later row
        (2, 2932.0, "11cb48", 1, 1),
        (3, 6417.0, "11cb48", 1, 2),
    ]
    assert jobs[0].duration == 2951.0


def test_openb_nodes_skip_cpu_only_machines_and_pods_skip_or_round_up_shared_gpus() -> None:
    cluster = load_openb_nodes(FIXTURES / "openb_nodes_tiny.csv")
    assert [(n.name, n.gpus) for n in cluster.nodes] == [
        ("openb-node-0000", 2),
        ("openb-node-0001", 8),
    ]
    by_model = load_openb_nodes(FIXTURES / "openb_nodes_tiny.csv", flavor_by_model=True)
    assert by_model.flavors == ("G2", "P100")
    skipped = load_openb_pods(FIXTURES / "openb_pods_tiny.csv")
    assert (skipped.skipped_cpu_only, skipped.skipped_fractional) == (1, 1)
    assert [(j.gpus, j.submitted_at, j.duration) for j in skipped.jobs] == [
        (1, 0.0, 1000.0),
        (8, 100.0, 1.0),
    ]
    rounded = load_openb_pods(FIXTURES / "openb_pods_tiny.csv", fractional="round-up")
    assert [j.gpus for j in rounded.jobs] == [1, 1, 8]


def test_cluster_specs_name_nodes_times_gpus_per_flavor() -> None:
    cluster = parse_cluster_spec("h100=2x8, l4=3x4")
    assert cluster.capacity("h100") == 16 and cluster.capacity("l4") == 12
    assert parse_cluster_spec("4x8").flavors == ("gpu",)
    with pytest.raises(ValueError):
        parse_cluster_spec("eight nodes")


def test_proportional_guarantees_follow_gpu_time_and_add_up_to_the_cluster() -> None:
    jobs = load_philly(FIXTURES / "philly_tiny.csv")
    cluster = uniform_cluster(4, 8)
    teams = {t.id: t.quotas["gpu"] for t in proportional_quotas(jobs, cluster)}
    assert sum(q.guarantee for q in teams.values()) == 32
    assert teams["6214e9"].guarantee > teams["11cb48"].guarantee
    assert all(q.limit == 32 for q in teams.values())


def test_proportional_with_a_fraction_leaves_the_rest_of_the_cluster_unguaranteed() -> None:
    jobs = load_philly(FIXTURES / "philly_tiny.csv")
    cluster = uniform_cluster(4, 8)
    teams = {t.id: t.quotas["gpu"] for t in build_teams(jobs, cluster, "proportional:0.75")}
    assert sum(q.guarantee for q in teams.values()) == 24
    assert all(q.limit == 32 for q in teams.values())
    for bad in ("proportional:1.5", "proportional:half", "proportional:-0.1"):
        with pytest.raises(ValueError, match="from 0 to 1"):
            build_teams(jobs, cluster, bad)


def test_yaml_quotas_fill_teams_left_out_with_the_default() -> None:
    from gpuqueue.sim.jobs import SimJob

    jobs = [SimJob(0, "a", 0, 1, 1, 1), SimJob(1, "b", 0, 1, 1, 1)]
    teams = {
        t.id: t for t in quotas_from_yaml(FIXTURES / "quotas.yaml", jobs, uniform_cluster(2, 8))
    }
    assert teams["a"].quotas["gpu"] == Quota(8, 16, 2.0)
    assert teams["b"].quotas["gpu"] == Quota(0, 4, 1.0)


def test_helios_quotas_give_the_biggest_vc_share_to_the_busiest_team() -> None:
    jobs = load_philly(FIXTURES / "philly_tiny.csv")
    teams = {
        t.id: t.quotas["gpu"]
        for t in helios_quotas(FIXTURES / "helios_tiny.csv", jobs, uniform_cluster(2, 8))
    }
    # Last day: vcB 60 of 80 GPUs, vcA 20; the trace's busiest team is 6214e9.
    assert teams["6214e9"].guarantee == 12
    assert teams["11cb48"].guarantee == 4


def test_entitlements_give_guarantees_first_then_share_the_rest_by_weight() -> None:
    quotas = {"a": Quota(2, 10), "b": Quota(2, 10, weight=3.0), "c": Quota(4, 10)}
    got = entitled_shares(10, {"a": 8, "b": 8, "c": 1}, quotas)
    # c asks for 1 of its 4; a and b get their 2 each; the 5 left go by weight 1:3.
    assert got == pytest.approx({"a": 3.25, "b": 5.75, "c": 1.0})


def test_jain_is_one_when_equal_and_one_over_n_when_one_takes_all() -> None:
    assert jain([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
