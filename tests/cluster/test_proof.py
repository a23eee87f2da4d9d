"""Which listed objects are gpuqueue's (pure: gpuqueue.cluster.proof), and the marker that names
the install owning a namespace (the backend against kmock)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gpuqueue.cluster import manifests as mf
from gpuqueue.cluster.base import Claimed, Phase
from gpuqueue.cluster.kubernetes import KubernetesBackend
from gpuqueue.cluster.proof import (
    MARKER,
    Record,
    attempt_proof,
    install_key,
    is_our_job,
    is_worker,
    marker_refusal,
    sort_out,
)
from gpuqueue.cluster.status import workload_statuses
from tests.cluster.conftest import Emulator, made_by_gpuqueue, records_of

NOW = datetime(2026, 11, 28, 9, 0, tzinfo=UTC)
LABELS = {
    mf.MANAGED_BY: mf.MANAGED_BY_VALUE,
    mf.LABEL_JOB_ID: "7",
    mf.LABEL_ATTEMPT: "1",
    mf.LABEL_INSTANCE: "gpuqueue",
}


def job(namespace: str = "team-a", name: str = "gq-7-1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {"parallelism": 1},
        "status": status,
    }


def pod(namespace: str = "team-a", name: str = "gq-7-1-0-x", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(LABELS),
            "annotations": {mf.COMPLETION_INDEX_ANNOTATION: "0"},
        },
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "worker", "state": {"running": {}}}],
            **status,
        },
    }


FAILED_1 = {
    "phase": "Failed",
    "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 1}}}],
}


def statuses(jobs: list[dict[str, Any]], pods: list[dict[str, Any]], records: Any) -> Any:
    ours = sort_out(jobs, pods, records)
    found = workload_statuses(ours.jobs, ours.pods, {"n1": None}, NOW, timedelta(minutes=5))
    return {(s.job_id, s.attempt): s for s in found}


def test_a_lookalike_pod_in_another_namespace_that_fails_changes_nothing() -> None:
    real, worker = job(), pod()
    made_by_gpuqueue(real, [worker])
    forged = pod("team-b", "forged", **FAILED_1)
    # It even names the real Job's uid as its controller: owners are namespace-local.
    forged["metadata"]["ownerReferences"] = copy.deepcopy(worker["metadata"]["ownerReferences"])
    (status,) = statuses([real], [worker, forged], records_of(real)).values()
    assert status.phase is Phase.RUNNING


def test_a_pod_naming_the_job_as_its_controller_without_the_attempt_s_labels_is_no_worker() -> None:
    real, worker = job(), pod()
    made_by_gpuqueue(real, [worker])
    forged = pod(name="unlabelled", **FAILED_1)
    forged["metadata"]["labels"] = {}
    forged["metadata"]["ownerReferences"] = copy.deepcopy(worker["metadata"]["ownerReferences"])
    ours = sort_out([real], [worker, forged], records_of(real))
    assert ours.pods[(7, 1)] == [worker]
    assert statuses([real], [worker, forged], records_of(real))[(7, 1)].phase is Phase.RUNNING


def test_a_forged_complete_job_in_another_namespace_is_no_status_and_says_why() -> None:
    real, worker = job(), pod()
    made_by_gpuqueue(real, [worker])
    forged = made_by_gpuqueue(
        job("team-b", conditions=[{"type": "Complete", "status": "True"}]), []
    )
    ours = sort_out([real, forged], [worker], records_of(real))
    assert list(ours.jobs.values()) == [real]
    ((unproven, why),) = ours.unproven
    assert unproven is forged and why == "attempt 1 of job 7 was launched in team-a"
    assert statuses([real, forged], [worker], records_of(real))[(7, 1)].phase is Phase.RUNNING


def test_a_job_under_the_attempt_s_name_with_another_uid_is_not_the_attempt_s() -> None:
    real = made_by_gpuqueue(job(), [])
    records = records_of(real)
    impostor = copy.deepcopy(real)
    impostor["metadata"]["uid"] = "another"
    ours = sort_out([impostor], [], records)
    assert not ours.jobs
    assert (
        ours.unproven[0][1] == "its uid is not the one recorded when gpuqueue launched the attempt"
    )


def test_labels_of_an_attempt_the_database_never_recorded_prove_nothing() -> None:
    stray = made_by_gpuqueue(job(), [])
    ours = sort_out([stray], [], {})
    assert not ours.jobs
    assert "the database has no record of launching attempt 1 of job 7" in ours.unproven[0][1]


def test_before_its_uids_are_recorded_a_job_is_proven_by_the_attempt_s_hmac_and_owner() -> None:
    key = install_key("secret", "gpuqueue")
    proof = attempt_proof(key, "team-a", 7, 1, "gpuqueue", "nonce")
    record = Record(namespace="team-a", proof=proof)
    made = made_by_gpuqueue(job(), [])
    assert not is_our_job(made, (7, 1), record)  # labels and owner alone are not enough
    made["metadata"]["annotations"] = {mf.PROOF_ANNOTATION: proof}
    assert is_our_job(made, (7, 1), record)
    assert not is_our_job(made, (7, 1), record, secret_uid="not-its-owner")


def test_the_proof_binds_namespace_job_attempt_instance_nonce_and_the_install_s_key() -> None:
    key = install_key("secret", "gpuqueue")
    base = attempt_proof(key, "team-a", 7, 1, "gpuqueue", "n")
    assert base == attempt_proof(key, "team-a", 7, 1, "gpuqueue", "n")
    others = {
        attempt_proof(key, "team-b", 7, 1, "gpuqueue", "n"),
        attempt_proof(key, "team-a", 8, 1, "gpuqueue", "n"),
        attempt_proof(key, "team-a", 7, 2, "gpuqueue", "n"),
        attempt_proof(key, "team-a", 7, 1, "staging", "n"),
        attempt_proof(key, "team-a", 7, 1, "gpuqueue", "m"),
        attempt_proof(install_key("other", "gpuqueue"), "team-a", 7, 1, "gpuqueue", "n"),
        attempt_proof(install_key("secret", "staging"), "team-a", 7, 1, "gpuqueue", "n"),
    }
    assert base not in others and len(others) == 7


def marker(labels: dict[str, str] | None, **data: str) -> dict[str, Any]:
    return {"metadata": {"name": MARKER, "labels": labels}, "data": data}


MARKED = {mf.MANAGED_BY: mf.MANAGED_BY_VALUE}


@pytest.mark.parametrize(
    "found, why",
    [
        (marker(MARKED, instance="gpuqueue", install="u1"), ""),
        (marker(MARKED, instance="staging", install="u2"), "belongs to another gpuqueue install"),
        (marker(MARKED, instance="gpuqueue", install="u2"), "(database u2)"),
        (marker(None, instance="gpuqueue", install="u1"), "lacks gpuqueue's labels"),
    ],
    ids=["ours", "another instance", "another database", "not a marker"],
)
def test_a_marker_is_this_install_s_only_when_it_names_this_instance_and_database(
    found: dict[str, Any], why: str
) -> None:
    said = marker_refusal(found, "team-a", "gpuqueue", "u1")
    assert (said == "") if not why else (why in said)


def test_a_namespace_another_install_claimed_is_refused_and_a_launch_there_raises(
    emulator: Emulator, make_backend: Any
) -> None:
    first = make_backend(instance="blue", install="u1")
    assert first.claim(["team-a", "team-b"]) == {}
    second: KubernetesBackend = make_backend(instance="green", install="u2")
    refused = second.claim(["team-a", "team-b"])
    assert set(refused) == {"team-a", "team-b"}
    assert "names instance 'blue'" in refused["team-a"]
    assert {"team-a", "team-b"} <= set(second.unseen_namespaces())
    with pytest.raises(Claimed, match="belongs to another gpuqueue install"):
        second.claim(["team-a"], strict=True)
    assert first.claim(["team-a"], strict=True) == {}  # the owner keeps it


def test_a_terminating_pod_whose_job_is_deleted_is_proven_by_its_recorded_uid() -> None:
    # A stop deletes the Job at once (background propagation); its pod terminates for a while.
    real, worker = job(), pod()
    made_by_gpuqueue(real, [worker])
    worker["metadata"]["deletionTimestamp"] = "2026-11-28T09:00:00Z"
    records = records_of(real)
    # Another namespace's pod naming the recorded uid, and one without the attempt's labels.
    elsewhere, unlabelled = pod("team-b", "elsewhere"), pod(name="unlabelled")
    for forged in (elsewhere, unlabelled):
        forged["metadata"]["ownerReferences"] = copy.deepcopy(worker["metadata"]["ownerReferences"])
    unlabelled["metadata"]["labels"] = {}
    ours = sort_out([], [worker, elsewhere, unlabelled], records)
    assert ours.pod_keys == {("team-a", "gq-7-1-0-x"): (7, 1)}
    assert ours.jobs == {} and ours.pods == {}  # no Job: no status


def test_a_rayjob_s_workers_are_those_of_the_cluster_kuberay_names_after_it_and_no_other() -> None:
    def ray_pod(cluster: str) -> dict[str, Any]:
        worker = pod()
        worker["metadata"]["ownerReferences"] = [
            {"kind": "RayCluster", "name": cluster, "uid": "u-" + cluster, "controller": True}
        ]
        return worker

    def of_train(p: dict[str, Any]) -> bool:
        return is_worker(p, (7, 1), "team-a", "rayjob-uid", source="train")

    assert of_train(ray_pod("train-x7k2q"))  # KubeRay's name: the RayJob's, a dash, five
    # Another user's RayJob "train-big" has a cluster "train-big-x7k2q": not train's.
    assert not of_train(ray_pod("train-big-x7k2q"))
    assert not of_train(ray_pod("train-X7K2Q"))
    assert not of_train(ray_pod("train-"))
    assert not of_train(ray_pod("trainx-x7k2q"))
    not_controller = ray_pod("train-x7k2q")
    not_controller["metadata"]["ownerReferences"][0]["controller"] = False
    assert not of_train(not_controller)
