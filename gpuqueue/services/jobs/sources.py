"""Users' own labelled Jobs as gpuqueue jobs: mirrored when they appear, cancelled when they go.

Who owns the job (docs/kubernetes.md, "Your own Jobs through the queue"):
1. The queue label must name the team whose namespace the Job is in: the admission policy
   refuses any other (the namespace's `gpuqueue.dev/team` label), and this module checks it
   again. Who may create Jobs in a team's namespace is the cluster's RBAC to say; gpuqueue adds
   no right to it: a labelled Job only gets the team's GPUs through the team's queue.
2. The job belongs to the gpuqueue user named by the Job's `gpuqueue.dev/user` annotation
   (which the policy accepts only equal to the creator's Kubernetes user name) when that user
   is a member of the team; otherwise to the team's pipeline identity, `pipeline@<team>`, a
   member without a password, made the first time it is needed. The job's priority, flavor and
   runtime are checked by the same rules as any submission's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from gpuqueue.cluster.sources import SourceShape
from gpuqueue.core.states import FINAL, JobState
from gpuqueue.models import Flavor, Job, JobSource
from gpuqueue.services.jobs import job_spec
from gpuqueue.services.jobs.submit import SubmissionRefused, check_fits, submit_job
from gpuqueue.services.jobs.transitions import transition
from teams.models import Membership, Role, Team

PIPELINE_PREFIX = "pipeline@"


@dataclass(frozen=True, slots=True)
class Mirrored:
    job: Job | None  # None: refused
    text: str  # what the object is told (its status annotation and event)


def pipeline_user(team: Team) -> Any:
    """The team's pipeline identity: owns the labelled Jobs of creators gpuqueue does not
    know. A member of the team, never an admin, and it cannot sign in."""
    user, made = get_user_model().objects.get_or_create(username=f"{PIPELINE_PREFIX}{team.slug}")
    if made:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    Membership.objects.get_or_create(user=user, team=team, defaults={"role": Role.MEMBER})
    return user


def owner_of(shape: SourceShape, team: Team) -> Any:
    """The gpuqueue user the job belongs to (rule 2 of the module's docstring)."""
    # Members only, as the rule says: a site admin who is not one gets no job of the team
    # through an annotation (the name is only as good as the admission policy that checks it).
    if shape.user:
        member = Membership.objects.filter(
            user__username=shape.user, user__is_active=True, team=team
        ).select_related("user")
        found = member.first()
        if found is not None:
            return found.user
    return pipeline_user(team)


def _flavor(shape: SourceShape) -> Flavor | str:
    if shape.flavor:
        flavor = Flavor.objects.filter(name=shape.flavor).first()
        if flavor is None:
            return f"there is no flavor {shape.flavor} (label gpuqueue.dev/flavor)"
        if flavor.resource_name != shape.resource_name:
            return (
                f"flavor {flavor.name} is {flavor.resource_name}, and its pods ask for"
                f" {shape.resource_name}"
            )
        return flavor
    flavors = list(Flavor.objects.filter(resource_name=shape.resource_name).order_by("name"))
    if len(flavors) == 1:
        return flavors[0]
    if not flavors:
        return f"no flavor serves {shape.resource_name}"
    names = ", ".join(f.name for f in flavors)
    return (
        f"several flavors serve {shape.resource_name} ({names}): name one with gpuqueue.dev/flavor"
    )


def mirror(shape: SourceShape) -> Mirrored:
    """A PENDING job for the labelled Job, owned as the module's docstring says, with its
    source recorded; or why not, changing nothing."""
    team = Team.objects.filter(namespace=shape.namespace).first()
    if team is None:
        return Mirrored(None, f"namespace {shape.namespace} is no team's: nothing queues here")
    if shape.team != team.slug:
        return Mirrored(
            None,
            f"its queue label names team {shape.team}, and namespace {shape.namespace} is team"
            f" {team.slug}'s: a {shape.kind} waits in the queue of its namespace's team",
        )
    flavor = _flavor(shape)
    if isinstance(flavor, str):
        return Mirrored(None, flavor)
    fields: dict[str, Any] = {
        "name": shape.name[: job_spec.NAME_MAX_CHARS],
        "image": shape.image or "unknown",
        "workers": shape.workers,
        "gpus_per_worker": shape.gpus_per_worker,
        "cpu_millicores": shape.cpu_millicores,
        "memory_mib": shape.memory_mib,
    }
    if shape.priority is not None:
        fields["priority"] = shape.priority
    if shape.max_runtime_seconds is not None:
        fields["max_runtime_seconds"] = shape.max_runtime_seconds
    # Every number read off the user's object, each pod set's too, against the submission's
    # bounds: a custom resource's template is not checked by the API server as a pod is, and
    # an amount past a column's range must be a sentence, not an error that stops the pass.
    named = [(f, v) for f, v in fields.items() if f not in ("name", "image")]
    for s in shape.pod_sets:
        named += [(f, s[f]) for f in ("cpu_millicores", "memory_mib") if f in s]
    for field, value in named:
        if errors := job_spec.field_errors(field, value):
            return Mirrored(None, f"{field}: {' '.join(errors)}")
    try:
        for s in shape.pod_sets:  # each pod on one node, the largest too
            check_fits(flavor, s["pods"], s["gpus"])
        check_fits(flavor, shape.workers, shape.gpus_per_worker)
    except SubmissionRefused as exc:
        return Mirrored(None, str(exc))
    user = owner_of(shape, team)
    try:
        with transaction.atomic():
            job = _queue(shape, user, team, flavor, fields)
    except SubmissionRefused as exc:  # the user's object, refused: said, the pass goes on
        return Mirrored(None, str(exc))
    return Mirrored(job, f"queued as gpuqueue job {job.pk} of team {team.slug}")


def _queue(
    shape: SourceShape, user: Any, team: Team, flavor: Flavor, fields: dict[str, Any]
) -> Job:
    """The job of a user's object, with its pod sets and its source recorded."""
    job = submit_job(user, team, flavor, {k: v for k, v in fields.items() if v is not None}).job
    if shape.pod_sets:  # not a submission's field: only a user's object has them
        job.pod_sets = [dict(s) for s in shape.pod_sets]
        Job.objects.filter(pk=job.pk).update(pod_sets=job.pod_sets)
    JobSource.objects.create(
        job_id=job.pk,
        kind=shape.kind,
        namespace=shape.namespace,
        name=shape.name,
        uid=shape.uid,
        creator=shape.user,
    )
    return job


def cancel_gone(job: Job, source: JobSource) -> bool:
    """Cancel the job whose Job was deleted: nothing is left to run. Returns whether it
    moved (False: it had ended, or another process moved it)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state in FINAL:
            return False
        return transition(
            job,
            JobState.CANCELLED,
            reason=f"its {source.kind} {source.namespace}/{source.name} was deleted",
            actor="cluster",
            finished_at=timezone.now(),
        )
