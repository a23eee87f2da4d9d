"""A job's specification checked as plain values, by the rules every way in shares.

The API's serializer and the dashboard's form each turn their input into typed values (DRF's
strict fields, Django's form fields) and leave the rules to this module, so that a job one of
them accepts is exactly one the other accepts, refused with the same messages at the same
fields.

A check takes two steps, as DRF's serializers do:
1. each field alone: the team and the flavor exist for the submitter, numbers are within their
   bounds, names, the image, the command, the environment, labels and annotations are well
   formed, and so are the pod's volumes, Secrets, priority class and ServiceAccount
   (`field_errors`);
2. only when every field passed, the job as a whole: the team a submission leaves out, the
   defaults (the name from the image, the checkpoint grace from settings, CPU and memory from
   the flavor), its share of a GPU and its GPU models against its flavor and the flavor's
   nodes (gpuqueue.services.jobs.gpu_share), whether its workers fit the nodes of its
   flavor, its CPU and memory within the flavor's maxima, and the ServiceAccount, Secrets and
   claims it names within its team's allow-lists (`check_whole`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from functools import partial
from typing import Any

from django.conf import settings

from gpuqueue.core import topology_levels
from gpuqueue.models import Flavor
from gpuqueue.services.jobs import gpu_share, pod_spec
from gpuqueue.services.jobs import validation as rules
from gpuqueue.services.jobs.submit import (
    JOB_FIELDS,
    TEAM_REQUIRED,
    SubmissionRefused,
    check_fits,
    flavor_for_submission,
    submittable_team,
    teams_for_submission,
)
from gpuqueue.services.jobs.validation import Checked, FieldErrors
from teams.models import Team

PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
MAX_WORKERS = 1024
MAX_GPUS_PER_WORKER = 64
MAX_GRACE_SECONDS = 24 * 3600
MAX_RUNTIME_SECONDS = 30 * 24 * 3600
NAME_MAX_CHARS = 63
IMAGE_MAX_CHARS = 512

# The lowest and highest value of each whole-number field.
BOUNDS: dict[str, tuple[int, int]] = {
    "workers": (1, MAX_WORKERS),
    "gpus_per_worker": (1, MAX_GPUS_PER_WORKER),
    "gpu_milli": (0, 999),
    "gpu_memory_mib": (1, gpu_share.MAX_GPU_MEMORY_MIB),
    "priority": (PRIORITY_MIN, PRIORITY_MAX),
    "checkpoint_grace_seconds": (0, MAX_GRACE_SECONDS),
    "max_runtime_seconds": (1, MAX_RUNTIME_SECONDS),
    "expected_runtime_seconds": (1, MAX_RUNTIME_SECONDS),
    **pod_spec.RESOURCE_BOUNDS,
}

# gpu_memory_mib is no column: check_whole turns it into gpu_milli.
FIELDS = ("team", "flavor", *JOB_FIELDS, "gpu_memory_mib")
REQUIRED_FIELDS = ("flavor", "image")
# What a field left out becomes. The name and the checkpoint grace are filled in by
# `check_whole`; the runtimes stay unset.
DEFAULTS: dict[str, Any] = {
    "workers": 1,
    "gpus_per_worker": 1,
    "gpu_milli": 0,
    "priority": 0,
    "preemptible": True,
    "priority_class": "",
    "service_account": "",
    "topology_level": "",
    "topology_required": False,
}
EMPTY_BY_DEFAULT: dict[str, Callable[[], Any]] = {
    "command": list,
    "env": dict,
    "labels": dict,
    "annotations": dict,
    "volumes": list,
    "gpu_models": list,
    "image_pull_secrets": list,
    "env_from_secrets": list,
}

UNKNOWN_TEAM = "Unknown team {value}."
UNKNOWN_FLAVOR = "Unknown flavor {value}."
BAD_NAME = "1–63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit."


def _name_errors(name: str) -> list[str]:
    too_long = rules.length_errors(name, NAME_MAX_CHARS)
    return too_long or ([] if rules.JOB_NAME.match(name) else [BAD_NAME])


def _image_errors(image: str) -> list[str]:
    return rules.length_errors(image, IMAGE_MAX_CHARS) or rules.image_errors(image)


FIELD_RULES: dict[str, Callable[[Any], list[str]]] = {
    "name": _name_errors,
    "image": _image_errors,
    "command": rules.command_errors,
    "env": rules.env_errors,
    "labels": rules.label_errors,
    "annotations": rules.annotation_errors,
    "volumes": pod_spec.volume_errors,
    "gpu_models": gpu_share.gpu_models_errors,
    "topology_level": lambda level: topology_levels.key_errors(level) if level else [],
    "image_pull_secrets": pod_spec.secret_names_errors,
    "env_from_secrets": pod_spec.secret_names_errors,
    "priority_class": lambda name: pod_spec.priority_class_errors(name) if name else [],
    "service_account": pod_spec.service_account_errors,
    **{
        field: partial(rules.bound_errors, lowest=lowest, highest=highest)
        for field, (lowest, highest) in BOUNDS.items()
    },
}


def field_errors(field: str, value: Any) -> list[str]:
    """The rules of one field alone, for a value of the field's type (None: left unset)."""
    rule = FIELD_RULES.get(field)
    return [] if rule is None or value is None else rule(value)


def _signed_in(user: Any) -> bool:
    return user is not None and bool(user.is_authenticated)


def find_team(user: Any, slug: str) -> Team | None:
    """The team named `slug` if `user` may submit to it. A team the user may not see is as
    unknown as one that does not exist, as its jobs answer 404."""
    return submittable_team(user, slug) if _signed_in(user) else None


def find_flavor(name: str) -> Flavor | None:
    return flavor_for_submission(name)


def check_submission(
    user: Any, values: Mapping[str, Any], *, refused: Collection[str] = ()
) -> Checked:
    """Both steps, over `values` that name the team and the flavor (None: left out).

    `refused` names the fields whose type the caller refused already (text that is no
    number): they are neither required nor checked again, and the job is not checked as a
    whole, since a value it depends on is missing."""
    given = {field: value for field, value in values.items() if value is not None}
    found = dict(given)
    errors: FieldErrors = {
        field: [rules.REQUIRED]
        for field in REQUIRED_FIELDS
        if field not in given and field not in refused
    }
    for field, value in given.items():
        if field in refused:
            continue
        if field not in FIELDS:
            errors[field] = [rules.UNKNOWN_FIELD]
        elif field == "team":
            found["team"] = find_team(user, value)
            if found["team"] is None:
                errors["team"] = [UNKNOWN_TEAM.format(value=value)]
        elif field == "flavor":
            found["flavor"] = find_flavor(value)
            if found["flavor"] is None:
                errors["flavor"] = [UNKNOWN_FLAVOR.format(value=value)]
        elif messages := field_errors(field, value):
            errors[field] = messages
    if errors or refused:
        return Checked(found, errors)
    return check_whole(user, found)


def _topology_errors(job: Mapping[str, Any]) -> FieldErrors:
    """A level is one of the flavor's; requiring one needs one."""
    flavor = job["flavor"]
    level = job["topology_level"]
    found = topology_levels.job_level_errors(level, list(flavor.topology_levels), flavor.name)
    if found:
        return {"topology_level": found}
    if job["topology_required"] and not level:
        return {"topology_required": ["Name the topology level it requires (topology_level)."]}
    return {}


def default_name(image: str) -> str:
    """The image's last path component, without tag or digest, made a valid job name."""
    base = image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", base)[:NAME_MAX_CHARS].strip("-_.") or "job"


def check_whole(user: Any, values: Mapping[str, Any]) -> Checked:
    """The job as a whole, once each field has passed alone (team and flavor found).

    1. Without a team, the job goes to the submitter's only team, which `submit_job` finds as
       it writes the job (refusing with TeamRequired when there are none or several); the
       team stays None here, unless the job names a ServiceAccount, Secrets or claims, which
       its team must allow (then the team is taken here). Someone not signed in must name one.
    2. The defaults of the fields left out.
    3. A fraction of a GPU (or GPU memory) only on a shared flavor, in whole slices, one GPU
       per worker; GPU models among those the flavor's nodes report.
       A worker must fit the largest node of its flavor, and the gang its empty nodes, whole
       workers per node.
       Without a team, a submitter who does not have exactly one is told that first, as the
       insert would.
    4. CPU, memory and /dev/shm per worker: the flavor's defaults for what was left out, and
       the flavor's maxima (gpuqueue.services.jobs.pod_spec.resources); no claim mounted
       where the flavor's fabric mounts its devices.
    5. The ServiceAccount, Secrets and claims it names are on its team's allow-lists
       (gpuqueue.services.jobs.pod_spec.namespace_errors), whatever else is wrong with it.
    """
    job = dict(values)
    if job.get("team") is None:
        if not _signed_in(user):
            return Checked(job, {"team": [TEAM_REQUIRED]})
        job["team"] = None
        if pod_spec.uses_namespace_objects(job):
            # What the job may use is its team's to say, so the team is taken now; the insert
            # still checks the membership.
            teams = teams_for_submission(user)
            if len(teams) != 1:
                return Checked(job, {"team": [TEAM_REQUIRED]})
            job["team"] = teams[0]
    refused = pod_spec.namespace_errors(job["team"], job) if job["team"] is not None else {}
    if not job.get("name"):
        job["name"] = default_name(job["image"])
    job.setdefault("checkpoint_grace_seconds", settings.GPUQUEUE_DEFAULT_CHECKPOINT_GRACE_SECONDS)
    for field, default in DEFAULTS.items():
        job.setdefault(field, default)
    for field, empty in EMPTY_BY_DEFAULT.items():
        job.setdefault(field, empty())
    share, errors = gpu_share.share_errors(job, job["flavor"])
    errors.update(gpu_share.model_errors(job["gpu_models"], job["flavor"]))
    errors.update(_topology_errors(job))
    if errors:
        return Checked(job, {**refused, **errors})
    job.update(share)
    job.pop("gpu_memory_mib", None)
    try:
        check_fits(job["flavor"], job["workers"], job["gpus_per_worker"])
    except SubmissionRefused as exc:
        if job["team"] is None and len(teams_for_submission(user)) != 1:
            return Checked(job, {"team": [TEAM_REQUIRED]})
        return Checked(job, {**refused, exc.field or "flavor": [str(exc)]})
    resources, errors = pod_spec.resources(job, job["flavor"])
    job.update(resources)
    found = {**refused, **errors}
    for field, messages in pod_spec.fabric_mount_errors(job, job["flavor"]).items():
        found[field] = [*found.get(field, []), *messages]
    return Checked(job, found)
