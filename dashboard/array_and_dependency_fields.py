"""The submit form's array and dependency fields: text read into the values the API takes
(`array`, `after_ok`, `after_any`, `after_not_ok`, `keep_if_unmet`), then checked by the same
services as the API (gpuqueue.services.jobs.array_spec, gpuqueue.services.jobs.dependencies), so
that the form refuses exactly what the API refuses, with the same messages at the same fields."""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.urls import reverse

from gpuqueue.services.jobs import array_spec, dependencies
from gpuqueue.services.jobs.arrays import submit_array
from gpuqueue.services.jobs.dependencies import Dependencies, submit_job_after
from gpuqueue.services.jobs.validation import FieldErrors

# The fields this module adds to the submit form; none of them is a job field of job_spec.
DEPENDENCY_FIELDS = (*dependencies.KINDS, "keep_if_unmet")
FIELDS = (*DEPENDENCY_FIELDS, "array")


class JobIdsField(forms.CharField):
    """Job ids separated by commas or spaces, e.g. "12, 13"."""

    def to_python(self, value: Any) -> list[int] | None:
        words = ("" if value is None else str(value)).replace(",", " ").split()
        if not words:
            return None
        ids = []
        for word in words:
            try:
                job_id = int(word)
            except ValueError:
                raise ValidationError(
                    f'"{word}" is not a job id; write job ids such as 12, 13.', code="invalid"
                ) from None
            if job_id < 1:
                raise ValidationError(
                    "Ensure this value is greater than or equal to 1.", code="min_value"
                )
            ids.append(job_id)
        if len(ids) > dependencies.MAX_DEPENDENCIES:
            raise ValidationError(
                f"Ensure this field has no more than {dependencies.MAX_DEPENDENCIES} elements.",
                code="max_length",
            )
        return ids


class FlagField(forms.BooleanField):
    """A checkbox that is True when ticked and left out (None) otherwise, so that an unticked
    box adds nothing to the request body."""

    def to_python(self, value: Any) -> bool | None:
        return True if super().to_python(value) else None


class ArraySpecField(forms.CharField):
    """Slurm's array syntax ("0-99%10"), read by the API's parser."""

    def to_python(self, value: Any) -> str | None:
        text = super().to_python(value)
        return text.strip() or None

    def validate(self, value: Any) -> None:
        super().validate(value)
        if value:
            try:
                array_spec.parse(value)
            except array_spec.ArraySpecError as exc:
                raise ValidationError(str(exc), code="invalid") from exc


def job_ids_field(label: str, help_text: str) -> JobIdsField:
    return JobIdsField(required=False, label=label, help_text=help_text)


def form_fields() -> dict[str, forms.Field]:
    """The fields, by name, in the order the form shows them."""
    return {
        "after_ok": job_ids_field(
            "Start after these succeed", "Job ids, comma-separated: each must succeed."
        ),
        "after_any": job_ids_field(
            "Start after these end", "Job ids, comma-separated: each must end, however."
        ),
        "after_not_ok": job_ids_field(
            "Start if any of these fails",
            "Job ids, comma-separated: starts once any one failed or was cancelled.",
        ),
        "keep_if_unmet": FlagField(
            required=False,
            label="Keep pending if a dependency can no longer be met",
            help_text="Otherwise the job is cancelled, with the reason.",
        ),
        "array": ArraySpecField(
            required=False,
            label="Array",
            help_text="Submit N tasks of this job: 0-99%10 is 100 tasks, at most 10 at once. "
            "Each gets GPUQUEUE_ARRAY_INDEX.",
        ),
    }


def dependency_errors(user: Any, values: dict[str, Any]) -> FieldErrors:
    """The API's refusals of the dependencies in `values` (nothing is written either way)."""
    return dependencies.dependency_errors(user, Dependencies.of(values))


def submit_job_or_array(user: Any, team: Any, flavor: Any, data: dict[str, Any]) -> str:
    """Submit what the form checked (`data` as `SubmitForm.validated_submission` gives it):
    one job, held for its dependencies if it names any, or an array of such jobs. Returns the
    address of the new job's or array's page."""
    spec = data.pop("array", None)
    if spec is None:
        job = submit_job_after(user, team, flavor, data).job
        return reverse("dashboard:job", args=[job.pk])
    deps = Dependencies.take(data)
    array = submit_array(user, team, flavor, data, array_spec.parse(spec), deps).array
    return reverse("dashboard:array", args=[array.pk])
