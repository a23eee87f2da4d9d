"""Trace replay: gpuqueue's engine and baseline policies on real GPU cluster traces, in virtual
time, with no database.

From Python (the what-if command feeds it jobs from the database the same way):

    from gpuqueue.sim import SimConfig, SimJob, simulate, uniform_cluster, proportional_quotas
    jobs = [SimJob(id=1, team="a", submitted_at=0.0, duration=3600.0, workers=2, gpus_per_worker=8)]
    cluster = uniform_cluster(nodes=4, gpus_per_node=8)
    result = simulate(jobs, cluster, proportional_quotas(jobs, cluster), policy="gpuqueue")
    result.summary["delay_mean_s"], result.teams

From the shell: `python -m gpuqueue.sim replay --help` and `python -m gpuqueue.sim compare --help`.
"""

from gpuqueue.native import check as _check_native_build

_check_native_build()  # compiled modules (`make native`) must match their sources

# ruff: noqa: E402 -- after the guard
from gpuqueue.sim.cluster import Cluster, SimNode, parse_cluster_spec, uniform_cluster
from gpuqueue.sim.jobs import SimJob, gang_shape
from gpuqueue.sim.policies import POLICIES
from gpuqueue.sim.quotas import helios_quotas, proportional_quotas, quotas_from_yaml
from gpuqueue.sim.simulator import Progress, Result, Segment, SimConfig, simulate

__all__ = [
    "POLICIES",
    "Cluster",
    "Progress",
    "Result",
    "Segment",
    "SimConfig",
    "SimJob",
    "SimNode",
    "gang_shape",
    "helios_quotas",
    "parse_cluster_spec",
    "proportional_quotas",
    "quotas_from_yaml",
    "simulate",
    "uniform_cluster",
]
