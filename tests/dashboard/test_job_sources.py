"""A job that mirrors a user's labelled Job names that object on its page, in the list and in the
API (docs/kubernetes.md, "Your own Jobs through the queue")."""

from __future__ import annotations

from typing import Any

from gpuqueue.models import JobSource


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
