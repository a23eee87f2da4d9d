"""`gpuqueue submit` with a fraction of a GPU and GPU models: flags turned into the API's fields,
the server's refusals printed at their field, nothing made by a bad request."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.client.cli import EXIT_API_ERROR, EXIT_USAGE
from gpuqueue.models import Job, Node
from tests.conftest import H100_MODEL

BASE = ("submit", "--team", "team-a", "--image", "ghcr.io/acme/train:1")


@pytest.fixture
def shared(shared_flavor: Any, nodes: Any) -> Any:
    Node.objects.filter(name__startswith="h100-").update(gpu_model=H100_MODEL)
    return shared_flavor


@pytest.mark.django_db(transaction=True)
def test_a_fraction_and_models_from_flags(cli: Any, shared: Any, capsys: Any) -> None:
    assert cli(*BASE, "--flavor", "h100-shared", "--workers", "2", "--gpu-fraction", "0.25") == 0
    assert "on 0.5 of shared h100-shared GPUs (2 × 0.25)" in capsys.readouterr().out
    assert cli(*BASE, "--flavor", "h100-shared", "--gpu-milli", "750") == 0
    assert cli(*BASE, "--flavor", "h100", "--gpu-model", H100_MODEL) == 0
    jobs = list(Job.objects.order_by("pk").values_list("gpu_milli", "workers", "gpu_models"))
    assert jobs == [(250, 2, []), (750, 1, []), (0, 1, [H100_MODEL])]
    Job.objects.filter(pk=Job.objects.order_by("pk")[0].pk).update(
        gpu_devices=[["h100-shared-0", 0], ["h100-shared-0", 0]]
    )
    capsys.readouterr()
    assert cli("status", str(Job.objects.order_by("pk")[0].pk)) == 0
    assert "shared GPUs (250/1000 each): h100-shared-0 GPU 0, h100-shared-0 GPU 0" in (
        capsys.readouterr().out
    )


BAD = [
    # (what is wrong, the flags, the exit code, words in the error)
    ("a fraction of a whole GPU", ("--gpu-fraction", "1"), EXIT_USAGE, "less than 1"),
    ("a fraction finer than thousandths", ("--gpu-fraction", "0.2505"), EXIT_USAGE, "thousandths"),
    (
        "a fraction given twice",
        ("--gpu-fraction", "0.25", "--gpu-milli", "250"),
        EXIT_USAGE,
        "not both",
    ),
    ("no whole slices", ("--gpu-milli", "300"), EXIT_API_ERROR, "250, 500 or 750"),
    (
        "an unknown model",
        ("--gpu-model", "NVIDIA-B200"),
        EXIT_API_ERROR,
        "has no node of GPU model NVIDIA-B200",
    ),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("what", "flags", "code", "words"), BAD, ids=[c[0] for c in BAD])
def test_bad_flags_are_refused_and_make_nothing(
    what: str, flags: tuple[str, ...], code: int, words: str, cli: Any, shared: Any, capsys: Any
) -> None:
    assert cli(*BASE, "--flavor", "h100-shared", *flags) == code
    assert words in capsys.readouterr().err
    assert not Job.objects.exists()
