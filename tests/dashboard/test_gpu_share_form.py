"""The submit form takes a fraction of a GPU, GPU memory and GPU models as the API does (same
verdicts, same messages, same fields), and the job page shows them with the packed devices."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from dashboard.forms import SubmitForm
from gpuqueue.models import Job, Node
from tests.conftest import H100_MODEL

pytestmark = pytest.mark.django_db

FORM = {"team": "team-a", "flavor": "h100-shared", "image": "ghcr.io/acme/train:1"}
BODY = dict(FORM)

BAD = [
    # (what is wrong, as typed, as sent, the field)
    (
        "a fraction on a flavor that does not share",
        {"flavor": "h100", "gpu_milli": "250"},
        {"flavor": "h100", "gpu_milli": 250},
        "gpu_milli",
    ),
    ("a fraction of no whole slices", {"gpu_milli": "300"}, {"gpu_milli": 300}, "gpu_milli"),
    (
        "a fraction with two GPUs per worker",
        {"gpu_milli": "250", "gpus_per_worker": "2"},
        {"gpu_milli": 250, "gpus_per_worker": 2},
        "gpus_per_worker",
    ),
    ("a fraction past 999", {"gpu_milli": "1000"}, {"gpu_milli": 1000}, "gpu_milli"),
    (
        "GPU memory and a fraction",
        {"gpu_milli": "250", "gpu_memory_mib": "100"},
        {"gpu_milli": 250, "gpu_memory_mib": 100},
        "gpu_memory_mib",
    ),
    (
        "GPU memory of a whole GPU",
        {"gpu_memory_mib": "90000"},
        {"gpu_memory_mib": 90000},
        "gpu_memory_mib",
    ),
    (
        "a GPU model no node has",
        {"gpu_models": "NVIDIA-B200"},
        {"gpu_models": ["NVIDIA-B200"]},
        "gpu_models",
    ),
    (
        "a GPU model where no node reports one",
        {"flavor": "l4", "gpu_models": "NVIDIA-L4"},
        {"flavor": "l4", "gpu_models": ["NVIDIA-L4"]},
        "gpu_models",
    ),
]


@pytest.mark.parametrize(("what", "typed", "sent", "field"), BAD, ids=[c[0] for c in BAD])
def test_the_form_and_the_api_refuse_a_bad_share_alike(
    what: str,
    typed: dict[str, str],
    sent: dict[str, Any],
    field: str,
    world: Any,
    nodes: Any,
    shared_flavor: Any,
) -> None:
    form = SubmitForm(data={**FORM, **typed}, user=world.alice)
    assert form.validated_submission() is None
    api = APIClient()
    api.force_authenticate(world.alice)
    response = api.post("/api/v1/jobs/", {**BODY, **sent}, format="json")
    assert response.status_code == 400, response.content
    form_errors = {name: list(messages) for name, messages in form.errors.items()}
    assert form_errors == response.json()["error"]["fields"] and field in form_errors
    assert not Job.objects.exists()


def test_a_fraction_and_models_from_the_form_are_shown_on_the_job_page(
    world: Any, nodes: Any, shared_flavor: Any, clients: Any
) -> None:
    Node.objects.filter(name__startswith="h100-").update(gpu_model=H100_MODEL)
    typed = {**FORM, "workers": "2", "gpu_milli": "250", "gpu_models": H100_MODEL}
    assert clients["alice"].post("/jobs/new/", typed).status_code == 303
    job = Job.objects.get()
    assert (job.workers, job.gpu_milli, job.gpu_models) == (2, 250, [H100_MODEL])
    Job.objects.filter(pk=job.pk).update(
        state="RUNNING",
        placement={"h100-shared-0": 2},
        gpu_devices=[["h100-shared-0", 0], ["h100-shared-0", 1]],
    )
    page = clients["alice"].get(f"/jobs/{job.pk}/").content.decode()
    assert "2 workers × 250/1000 of one shared h100-shared GPU = 0.5 GPU" in page
    assert f'id="job-gpu-models">{H100_MODEL}<' in page
    assert "h100-shared-0 GPU 0 (250/1000); h100-shared-0 GPU 1 (250/1000)" in page
    assert clients["carol"].get(f"/jobs/{job.pk}/").status_code == 404
