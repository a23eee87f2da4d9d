"""HTML forms whose rules are the API's: a form only turns text fields into the JSON the API
takes, then the API's own serializer validates it, so a job or quota the dashboard accepts is
exactly one the API accepts, with the same messages."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from django import forms

from gpuqueue.api.serializers import JobSubmitSerializer, QuotaSerializer
from gpuqueue.core.errors import Refused
from gpuqueue.models import Flavor, Quota
from teams.models import Role, Team

INT_FIELDS = (
    "workers",
    "gpus_per_worker",
    "priority",
    "checkpoint_grace_seconds",
    "max_runtime_seconds",
    "expected_runtime_seconds",
)
MAP_FIELDS = ("env", "labels", "annotations")

# Common shapes: a notebook on one GPU, a training job on a whole node, a gang of four
# nodes. Values are what the form shows; the user can change any of them before submitting.
PRESETS: dict[str, dict[str, Any]] = {
    "notebook": {
        "title": "Notebook, 1 × 1 GPU",
        "name": "notebook",
        "image": "quay.io/jupyter/pytorch-notebook:2024-10-07",
        "command": "start-notebook.py",
        "workers": "1",
        "gpus_per_worker": "1",
        "preemptible": False,
        "expected_runtime_seconds": "14400",
    },
    "training": {
        "title": "Training, 1 × 8 GPUs",
        "name": "train",
        "image": "ghcr.io/acme/train:1.0",
        "command": "torchrun --nproc-per-node 8 train.py",
        "workers": "1",
        "gpus_per_worker": "8",
        "preemptible": True,
        "expected_runtime_seconds": "21600",
    },
    "distributed": {
        "title": "Distributed, 4 × 8 GPUs",
        "name": "train-distributed",
        "image": "ghcr.io/acme/train:1.0",
        "command": "torchrun --nnodes 4 --nproc-per-node 8 train.py",
        "workers": "4",
        "gpus_per_worker": "8",
        "preemptible": True,
        "expected_runtime_seconds": "43200",
    },
}


def _int_or_text(value: str) -> Any:
    """An integer when the text is one; otherwise the text, which the serializer refuses with
    its own message ("Must be an integer.")."""
    try:
        return int(value.strip())
    except ValueError:
        return value


def parse_mapping(text: str) -> dict[str, str]:
    """KEY=value per line; blank lines and lines starting with # are skipped."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValueError(f"Line {number}: write KEY=value.")
        out[key.strip()] = value
    return out


def flatten_errors(errors: Any, prefix: str = "") -> list[str]:
    """DRF's nested errors (a dict field's per-key messages) as plain sentences."""
    if isinstance(errors, Mapping):
        out: list[str] = []
        for key, value in errors.items():
            out += flatten_errors(value, f"{prefix}{key}: ")
        return out
    if isinstance(errors, list | tuple):
        out = []
        for value in errors:
            out += flatten_errors(value, prefix)
        return out
    return [f"{prefix}{errors}"]


class ApiForm(forms.Form):
    """A form whose validation is a DRF serializer's; field errors land on the same names."""

    def add_api_errors(self, errors: Mapping[str, Any]) -> None:
        for key, value in errors.items():
            field = key if key in self.fields else None
            for message in flatten_errors(value):
                self.add_error(field, message)


class SubmitForm(ApiForm):
    team = forms.CharField(widget=forms.Select, help_text="The team whose quota the job uses.")
    flavor = forms.CharField(widget=forms.Select, label="GPU flavor")
    name = forms.CharField(required=False, help_text="Defaults from the image.")
    image = forms.CharField(required=False, label="Container image")
    command = forms.CharField(
        required=False, help_text="As in a shell: words split on spaces, quotes kept together."
    )
    workers = forms.CharField(
        required=False,
        initial="1",
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Gang size: all workers start together or none does.",
    )
    gpus_per_worker = forms.CharField(
        required=False,
        initial="1",
        label="GPUs per worker",
        widget=forms.NumberInput(attrs={"min": 1}),
    )
    priority = forms.CharField(
        required=False,
        initial="0",
        widget=forms.NumberInput,
        help_text="Within the team: higher runs first and may preempt lower.",
    )
    preemptible = forms.BooleanField(
        required=False,
        initial=True,
        help_text="May be stopped (after a checkpoint signal) to make room; non-preemptible "
        "jobs may only use the team's guarantee.",
    )
    checkpoint_grace_seconds = forms.CharField(
        required=False,
        label="Checkpoint grace (seconds)",
        widget=forms.NumberInput(attrs={"min": 0}),
    )
    max_runtime_seconds = forms.CharField(
        required=False,
        label="Maximum runtime (seconds)",
        widget=forms.NumberInput(attrs={"min": 1}),
    )
    expected_runtime_seconds = forms.CharField(
        required=False,
        label="Expected runtime (seconds)",
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Improves the estimated starts.",
    )
    env = forms.CharField(
        required=False,
        label="Environment",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="KEY=value, one per line.",
    )
    labels = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="key=value, one per line.",
    )
    annotations = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="key=value, one per line.",
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        teams = list(Team.objects.of_user(user).values_list("slug", "name"))
        self.fields["team"].widget.choices = [(slug, f"{slug} — {name}") for slug, name in teams]
        self.fields["flavor"].widget.choices = [
            (f.name, f"{f.name}{' — ' + f.description if f.description else ''}")
            for f in Flavor.objects.all()
        ]
        self.has_teams = bool(teams)

    def payload(self) -> dict[str, Any]:
        """The API request body for what was typed (also shown as the curl to copy)."""
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        body: dict[str, Any] = {}
        for key in ("team", "flavor", "name", "image"):
            if data.get(key):
                body[key] = data[key]
        if data.get("command"):
            try:
                body["command"] = shlex.split(data["command"])
            except ValueError:
                body["command"] = data["command"]  # the serializer names the field
        for key in INT_FIELDS:
            value = str(data.get(key) or "")
            if value.strip():
                body[key] = _int_or_text(value)
        body["preemptible"] = bool(data.get("preemptible"))
        for key in MAP_FIELDS:
            if data.get(key, "").strip():
                try:
                    body[key] = parse_mapping(data[key])
                except ValueError:
                    body[key] = data[key]
        return body

    def validate_with_api(self, request: Any) -> dict[str, Any] | None:
        """Validated data for submit_job, or None with the errors on the form.

        1. Django's own pass (only the form shape: everything is text).
        2. Text the API cannot take as JSON (unbalanced quotes, a map line without '=').
        3. The API's JobSubmitSerializer on the JSON body.
        """
        if not self.is_valid():
            return None
        if self.cleaned_data.get("command"):
            try:
                shlex.split(self.cleaned_data["command"])
            except ValueError as exc:
                self.add_error("command", f"Cannot split into words: {exc}.")
        for key in MAP_FIELDS:
            try:
                parse_mapping(self.cleaned_data.get(key, ""))
            except ValueError as exc:
                self.add_error(key, str(exc))
        if self.errors:
            return None
        serializer = JobSubmitSerializer(data=self.payload(), context={"request": request})
        if not serializer.is_valid():
            self.add_api_errors(serializer.errors)
            return None
        return dict(serializer.validated_data)


def curl_command(base_url: str, body: Mapping[str, Any]) -> str:
    """The same submission for a pipeline: POST /api/v1/jobs/ with a token."""
    payload = json.dumps(body, indent=2)
    return (
        f"curl -X POST {shlex.quote(base_url.rstrip('/') + '/api/v1/jobs/')} \\\n"
        '  -H "Authorization: Bearer $GPUQUEUE_TOKEN" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        '  -H "Idempotency-Key: $(uuidgen)" \\\n'
        f"  -d {shlex.quote(payload)}"
    )


class QuotaForm(ApiForm):
    guarantee = forms.CharField(widget=forms.NumberInput(attrs={"min": 0}))
    limit = forms.CharField(widget=forms.NumberInput(attrs={"min": 0}))
    weight = forms.CharField(widget=forms.NumberInput(attrs={"min": 0, "step": "any"}))
    oversubscribe = forms.BooleanField(required=False, label="allow guarantees beyond capacity")

    def save_with_api(self, request: Any, team: Team, flavor: Flavor) -> Quota | None:
        """Validate with the API's QuotaSerializer and save through set_quota; None with the
        errors on the form when refused (Forbidden is left to the caller: it is a role)."""
        from gpuqueue.core.errors import Forbidden

        if not self.is_valid():
            return None
        data = self.cleaned_data
        body = {
            "team": team.slug,
            "flavor": flavor.name,
            "guarantee": _int_or_text(data["guarantee"]),
            "limit": _int_or_text(data["limit"]),
            "weight": data["weight"],
            "oversubscribe": bool(data.get("oversubscribe")),
        }
        instance = Quota.objects.filter(team=team, flavor=flavor).first()
        serializer = QuotaSerializer(instance, data=body, context={"request": request})
        if not serializer.is_valid():
            self.add_api_errors(serializer.errors)
            return None
        try:
            return serializer.save()
        except Forbidden:
            raise
        except Refused as exc:
            if exc.fields:
                self.add_api_errors(exc.fields)
            else:
                self.add_error(None, exc.message)
            return None


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150, label="Username")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="What the token is for, e.g. nightly-pipeline."
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Expires in (days)",
        help_text="Leave empty for a token that does not expire.",
    )
