"""A job that mirrors a user's labelled Job names that object on its page, in the list and in the
API (docs/kubernetes.md, "Your own Jobs through the queue")."""

from __future__ import annotations

import re
from typing import Any

from gpuqueue.core.states import JobState
from gpuqueue.models import Job, JobSource


def test_the_job_page_list_and_api_name_the_kubernetes_object(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    job = submit(name="finetune")
    plain = submit(name="plain")
    JobSource.objects.create(
        job_id=job.pk, kind="Job", namespace="team-a", name="finetune", uid="u-1", creator="alice"
    )
    page = clients["alice"].get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="job-source"' in page and "Job team-a/finetune" in page
    assert 'id="job-source"' not in clients["alice"].get(f"/jobs/{plain.pk}/").content.decode()
    assert "Job finetune</small>" in clients["alice"].get("/jobs/").content.decode()
    api = clients["alice"].get(f"/api/v1/jobs/{job.pk}/").json()
    assert api["source"] == {"kind": "Job", "namespace": "team-a", "name": "finetune"}
    assert clients["alice"].get(f"/api/v1/jobs/{plain.pk}/").json()["source"] is None


def test_a_job_of_pod_sets_shows_each_pod_set_and_each_pod_s_node(
    clients: Any, world: Any, nodes: Any, submit: Any
) -> None:
    """A PyTorchJob with a 1-GPU Master beside 3 Workers of 8 (gpuqueue/core/pod_sets.py): its
    page says what each pod set asks and, admitted, which node holds how many pods and GPUs;
    the list and the API give its 25 GPUs and its pod sets."""
    sets = [
        {"name": "Master", "pods": 1, "gpus": 1, "cpu_millicores": 4000, "memory_mib": 8192},
        {"name": "Worker", "pods": 3, "gpus": 8, "cpu_millicores": 32000, "memory_mib": 65536},
    ]
    job = submit(name="mixed", workers=25, gpus_per_worker=1)
    Job.objects.filter(pk=job.pk).update(
        pod_sets=sets,
        pod_nodes=["n2", "n0", "n1", "n2"],
        placement={"n0": 8, "n1": 8, "n2": 9},
        state=JobState.RUNNING,
    )
    page = clients["alice"].get(f"/jobs/{job.pk}/").content.decode()
    assert "Master 1 × 1 GPU, Worker 3 × 8 GPUs of h100 = 25 GPUs" in page
    rows = re.findall(r"<tr><td>(n\d)</td><td>(\d+)</td><td>(\d+)</td></tr>", page)
    assert rows == [("n0", "1", "8"), ("n1", "1", "8"), ("n2", "2", "9")]
    assert "25 h100 in pod sets" in clients["alice"].get("/jobs/").content.decode()
    api = clients["alice"].get(f"/api/v1/jobs/{job.pk}/").json()
    assert (api["gpus"], api["pod_sets"], api["pod_nodes"]) == (25, sets, ["n2", "n0", "n1", "n2"])
