"""Topology levels: a site admin gives a flavor its levels (checked label keys, Kueue's form
taken), a job names one of them, required or preferred (checked against its flavor, in the API,
the form and the CLI), and once admitted the job's API, CLI and page show the domain its gang
was placed in."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from dashboard.forms import SubmitForm
from gpuqueue.client.cli import describe
from gpuqueue.cycle.cluster_sync import sync_cluster
from gpuqueue.cycle.run import run_cycle
from gpuqueue.models import Flavor, Job

RACK = "example.com/rack"
BLOCK = "example.com/block"
HOST = "kubernetes.io/hostname"
LEVELS = [BLOCK, RACK, HOST]

# Two racks of the simulated cluster: r1 with 3 H100 nodes, r2 with 2.
RACKED = """
nodes:
  - name: r1-{i}
    count: 3
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, example.com/block: b1,
             example.com/rack: r1}
    capacity: {nvidia.com/gpu: 8}
  - name: r2-{i}
    count: 2
    labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3, example.com/block: b1,
             example.com/rack: r2}
    capacity: {nvidia.com/gpu: 8}
"""


def test_a_site_admin_sets_a_flavors_levels_in_kueues_terms_and_others_may_not(api: Any) -> None:
    kueue = [{"nodeLabel": key} for key in LEVELS]
    changed = api("root").patch("/api/v1/flavors/h100/", {"topology_levels": kueue}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["topology_levels"] == LEVELS
    assert Flavor.objects.get(name="h100").topology_levels == LEVELS
    refused = api("bob").patch("/api/v1/flavors/h100/", {"topology_levels": []}, format="json")
    assert refused.status_code == 403
    assert Flavor.objects.get(name="h100").topology_levels == LEVELS


@pytest.mark.parametrize(
    ("levels", "message"),
    [
        (["Example.com/rack"], "the prefix before '/' must be a DNS subdomain"),
        (["example.com/"], "the name must be 1–63"),
        ([RACK, RACK], f"Each level once: {RACK} is given more than once"),
        ([HOST, RACK], f"{HOST} is the innermost level: put it last"),
        ("example.com/rack", "A list of node label keys"),
        ([{"key": RACK}], "A list of node label keys"),
    ],
)
def test_bad_levels_are_refused_at_the_field_and_change_nothing(
    api: Any, levels: Any, message: str
) -> None:
    response = api("root").patch(
        "/api/v1/flavors/h100/", {"topology_levels": levels}, format="json"
    )
    assert response.status_code == 400
    assert message in str(response.json()["error"]["fields"]["topology_levels"])
    assert Flavor.objects.get(name="h100").topology_levels == []


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"topology_level": "example.com/spine"},
            "topology_level",
            f"Flavor h100's topology levels are {', '.join(LEVELS)}; got 'example.com/spine'.",
        ),
        ({"topology_level": "bad key/"}, "topology_level", "the name must be 1–63"),
        (
            {"topology_required": True},
            "topology_required",
            "Name the topology level it requires",
        ),
        (
            {"flavor": "l4", "topology_level": RACK},
            "topology_level",
            "Flavor l4 has no topology levels.",
        ),
    ],
)
def test_a_job_names_one_of_its_flavors_levels_or_is_refused(
    api: Any, job_body: dict[str, Any], changes: dict[str, Any], field: str, message: str
) -> None:
    Flavor.objects.filter(name="h100").update(topology_levels=LEVELS)
    response = api("alice").post("/api/v1/jobs/", {**job_body, **changes}, format="json")
    assert response.status_code == 400, response.content
    assert message in str(response.json()["error"]["fields"][field])
    assert not Job.objects.exists()


def test_a_required_rack_gang_is_placed_in_one_rack_and_shows_it_everywhere(
    api: Any, job_body: dict[str, Any], cluster_file: Path, backend: Any, client: Any, world: Any
) -> None:
    """Three workers of 8 GPUs requiring one rack: r1 (3 nodes) holds them, r2 (2) does not;
    the API, the CLI's view and the job's page name the rack."""
    cluster_file.write_text(RACKED)
    Flavor.objects.filter(name="h100").update(topology_levels=LEVELS)
    sync_cluster(backend)
    body = {**job_body, "workers": 3, "gpus_per_worker": 8}
    body |= {"topology_level": RACK, "topology_required": True}
    response = api("alice").post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    assert run_cycle(backend=backend).admitted == [job_id]

    shown = api("alice").get(f"/api/v1/jobs/{job_id}/").json()
    assert shown["topology_level"] == RACK and shown["topology_required"] is True
    assert set(shown["placement"]) == {"r1-0", "r1-1", "r1-2"}
    assert shown["placement_domain"] == f"{RACK}=r1"
    text = describe(shown)
    assert f"topology: one domain of {RACK}, required" in text
    assert f"placed in: {RACK}=r1" in text
    client.force_login(world.alice)
    page = client.get(f"/jobs/{job_id}/").content.decode()
    assert f"placed in <code>{RACK}=r1</code>" in page


def test_a_required_level_no_domain_meets_waits_with_the_level_and_the_numbers(
    api: Any, job_body: dict[str, Any], cluster_file: Path, backend: Any
) -> None:
    """Four workers fit the five nodes but no rack: the job waits, saying which level and how
    close the best rack comes."""
    cluster_file.write_text(RACKED)
    Flavor.objects.filter(name="h100").update(topology_levels=LEVELS)
    sync_cluster(backend)
    body = {**job_body, "workers": 4, "gpus_per_worker": 8}
    body |= {"topology_level": RACK, "topology_required": True}
    job_id = api("alice").post("/api/v1/jobs/", body, format="json").json()["id"]
    assert run_cycle(backend=backend).admitted == []
    shown = api("alice").get(f"/api/v1/jobs/{job_id}/").json()
    assert shown["pending_reason_label"] == "Topology"
    assert shown["pending_reason_text"] == (
        f"Can never start: it requires one rack ({RACK}), and no rack has room for 4 workers "
        "of 8 h100 GPUs even when empty; the largest holds 3."
    )


def test_the_django_admins_form_checks_the_levels_as_the_api_does(world: Any) -> None:
    """The admin saves through the model's full_clean: the same rules, Kueue's form taken."""
    flavor = world.h100
    flavor.topology_levels = [HOST, RACK]
    with pytest.raises(ValidationError) as refused:
        flavor.full_clean()
    assert refused.value.message_dict["topology_levels"] == [
        f"{HOST} is the innermost level: put it last."
    ]
    flavor.topology_levels = [{"nodeLabel": RACK}, {"nodeLabel": HOST}]
    flavor.full_clean()
    assert flavor.topology_levels == [RACK, HOST]


def test_the_submit_form_takes_a_level_and_refuses_one_the_flavor_lacks_as_the_api(
    api: Any, job_body: dict[str, Any], world: Any
) -> None:
    Flavor.objects.filter(name="h100").update(topology_levels=LEVELS)
    typed = {**job_body, "workers": "2", "topology_level": RACK, "topology_required": "on"}
    values = SubmitForm(data=typed, user=world.alice).validated_submission()
    assert values is not None
    assert (values["topology_level"], values["topology_required"]) == (RACK, True)
    bad = {**job_body, "topology_level": "example.com/spine"}
    form = SubmitForm(data=bad, user=world.alice)
    assert form.validated_submission() is None
    response = api("alice").post("/api/v1/jobs/", bad, format="json")
    form_errors = {name: list(messages) for name, messages in form.errors.items()}
    assert form_errors == response.json()["error"]["fields"]
    assert "topology_level" in form_errors


@pytest.mark.django_db(transaction=True)
def test_the_cli_submits_a_level_and_shows_the_domain(cli: Any, world: Any, capsys: Any) -> None:
    Flavor.objects.filter(name="h100").update(topology_levels=LEVELS)
    base = ("submit", "--team", "team-a", "--flavor", "h100", "--image", "ghcr.io/acme/train:1")
    assert cli(*base, "--workers", "2", "--topology-level", RACK, "--topology-required") == 0
    job = Job.objects.get()
    assert (job.topology_level, job.topology_required) == (RACK, True)
    Job.objects.filter(pk=job.pk).update(placement_domain=f"{RACK}=r1")
    capsys.readouterr()
    assert cli("status", str(job.pk)) == 0
    out = capsys.readouterr().out
    assert f"topology: one domain of {RACK}, required" in out and f"placed in: {RACK}=r1" in out
    assert cli(*base, "--topology-level", "example.com/spine") != 0
    assert Job.objects.count() == 1
