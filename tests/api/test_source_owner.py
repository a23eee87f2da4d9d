"""Who a labelled Job's gpuqueue job belongs to: the member its `gpuqueue.dev/user` annotation
names, else the team's pipeline identity; a name that is no member's (a site admin included)
gains nothing from the annotation."""

from __future__ import annotations

from typing import Any

import pytest

from gpuqueue.cluster.sources import SourceShape
from gpuqueue.services.jobs.sources import PIPELINE_PREFIX, owner_of

pytestmark = pytest.mark.django_db


def shape(user: str) -> SourceShape:
    return SourceShape(
        namespace="team-a",
        name="finetune",
        uid="u-1",
        team="team-a",
        workers=1,
        gpus_per_worker=1,
        resource_name="nvidia.com/gpu",
        image="ghcr.io/acme/train:1",
        user=user,
    )


@pytest.mark.parametrize(
    ("named", "owner"),
    [
        ("alice", "alice"),  # a member
        ("bob", "bob"),  # the team's admin
        ("carol", f"{PIPELINE_PREFIX}team-a"),  # another team's member
        ("root", f"{PIPELINE_PREFIX}team-a"),  # the site admin, no member of the team
        ("nobody", f"{PIPELINE_PREFIX}team-a"),
        ("", f"{PIPELINE_PREFIX}team-a"),
    ],
)
def test_a_labelled_job_belongs_to_the_member_it_names_or_to_the_pipeline(
    world: Any, named: str, owner: str
) -> None:
    assert owner_of(shape(named), world.team_a).username == owner
