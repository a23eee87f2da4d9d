"""HTML forms that read text into values and leave the rules to the services the API calls
too (gpuqueue.services.jobs.job_spec, gpuqueue.services.quotas.quotas), so that a job or quota the
dashboard accepts is exactly one the API accepts, refused with the same messages at the same
fields. The fields' own refusals (text that is no number) use the API's words for the same."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from dashboard import array_and_dependency_fields as links
from gpuqueue.client.durations import parse_duration
from gpuqueue.client.volumes import parse_volume
from gpuqueue.core.errors import Forbidden, Refused
from gpuqueue.models import Flavor, Quota
from gpuqueue.services.jobs import job_spec
from gpuqueue.services.jobs import validation as rules
from gpuqueue.services.quotas.quotas import check_quota, set_quota
from teams.models import Role, Team
from teams.services import set_allowed

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


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


# Every field's text is bounded before it is read: splitting a command into words, reading
# KEY=value lines or a number costs time with the length of the text (shlex is quadratic: 2 MiB
# took minutes), so a text longer than any value the rules accept is refused by its length
# alone. The request body as a whole is bounded by DATA_UPLOAD_MAX_MEMORY_SIZE (settings).
LINE_MAX_CHARS = 1000  # one-line fields: a name, an image, a number, a list of names
# Multi-line fields: twice the largest total the rules accept (32 KiB of environment, of
# annotations; gpuqueue.services.jobs.validation), room for keys and line breaks.
TEXT_MAX_CHARS = 64 * 1024
# The command: the words' largest total, and quotes and a space for each word. shlex's cost
# grows with the square of a word's length (a 64 KiB word takes a quarter of a second).
COMMAND_MAX_CHARS = rules.MAX_COMMAND_TOTAL_CHARS + 3 * rules.MAX_COMMAND_ITEMS


def bounded_text(value: Any, most: int) -> str:
    """The field's text, stripped; ValidationError when it is longer than `most` characters
    (checked before anything else reads it)."""
    text = _text(value)
    if len(text) > most:
        raise ValidationError(
            f"The text is {len(text)} characters long; at most {most}.", code="too_long"
        )
    return text


class BoundedCharField(forms.CharField):
    """A CharField whose parsing subclasses read only text within `max_chars`, and whose
    widget says so (maxlength); Django's own max_length is checked after parsing, and on the
    parsed value."""

    max_chars = LINE_MAX_CHARS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if isinstance(self.widget, (forms.TextInput, forms.Textarea)):
            self.widget.attrs.setdefault("maxlength", str(self.max_chars))

    def to_python(self, value: Any) -> Any:
        return bounded_text(value, self.max_chars)


def typed_as_text(widget: forms.Widget, inputmode: str) -> forms.Widget:
    """A text box in place of a number box: a browser empties an <input type=number> holding
    letters, so the server would read nothing and the job would get the default."""
    if isinstance(widget, forms.NumberInput):
        attrs = {k: v for k, v in widget.attrs.items() if k not in ("min", "max", "step")}
        return forms.TextInput(attrs={**attrs, "inputmode": inputmode})
    return widget


class WholeNumberField(forms.IntegerField):
    """An integer as typed. Django's IntegerField also reads "4.0" as 4, which the API
    refuses."""

    default_error_messages = {"invalid": "Must be an integer."}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.widget = typed_as_text(self.widget, "numeric")

    def to_python(self, value: Any) -> int | None:
        text = bounded_text(value, LINE_MAX_CHARS)
        if not text:
            return None
        try:
            return int(text)
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class NumberField(forms.FloatField):
    """A number as the API reads one from text; like DRF, refused past 1,000 characters,
    which would cost a conversion for nothing."""

    default_error_messages = {
        "invalid": "A valid number is required.",
        "too_long": "String value too large.",
    }
    MAX_CHARS = LINE_MAX_CHARS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.widget = typed_as_text(self.widget, "decimal")

    def to_python(self, value: Any) -> float | None:
        text = _text(value)
        if len(text) > self.MAX_CHARS:
            raise ValidationError(self.error_messages["too_long"], code="too_long")
        if not text:
            return None
        try:
            return float(text)
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class DurationField(BoundedCharField):
    """Seconds, or a duration as in the CLI and the API: 90m, 2h, 1:30:00
    (gpuqueue.client.durations)."""

    def to_python(self, value: Any) -> int | None:
        text = bounded_text(value, self.max_chars)
        if not text:
            return None
        try:
            return parse_duration(text)
        except ValueError as exc:
            raise ValidationError(str(exc), code="invalid") from None


DURATION_HELP = "Seconds, or 45s, 90m, 2h, 1d, 1h30m, 1:30:00."


class CommandField(BoundedCharField):
    """A command line split into words as a shell does: quotes keep words together."""

    max_chars = COMMAND_MAX_CHARS

    def to_python(self, value: Any) -> list[str] | None:
        text = bounded_text(value, self.max_chars)
        if not text:
            return None
        try:
            return shlex.split(text)
        except ValueError as exc:
            raise ValidationError(f"Cannot split into words: {exc}.", code="invalid") from None


class MappingField(BoundedCharField):
    """KEY=value lines (see `parse_mapping`)."""

    max_chars = TEXT_MAX_CHARS

    def to_python(self, value: Any) -> dict[str, str] | None:
        text = bounded_text(value, self.max_chars)
        if not text:
            return None
        try:
            return parse_mapping(text)
        except ValueError as exc:
            raise ValidationError(str(exc), code="invalid") from None


class VolumesField(BoundedCharField):
    """One CLAIM:PATH[:ro] per line."""

    max_chars = TEXT_MAX_CHARS

    def to_python(self, value: Any) -> list[dict[str, Any]] | None:
        text = bounded_text(value, self.max_chars)
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if not lines:
            return None
        try:
            return [parse_volume(line) for line in lines]
        except ValueError as exc:
            raise ValidationError(str(exc), code="invalid") from None


class NamesField(BoundedCharField):
    """Names separated by commas or spaces."""

    max_chars = TEXT_MAX_CHARS

    def to_python(self, value: Any) -> list[str] | None:
        names = bounded_text(value, self.max_chars).replace(",", " ").split()
        return names or None


class ServiceForm(forms.Form):
    def add_field_errors(self, errors: Mapping[str, list[str]]) -> None:
        """A service's messages per field, on the field of that name."""
        for field, messages in errors.items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


class SubmitForm(ServiceForm):
    team = BoundedCharField(widget=forms.Select, help_text="The team whose quota the job uses.")
    flavor = BoundedCharField(widget=forms.Select, label="GPU flavor")
    name = BoundedCharField(required=False, help_text="Defaults from the image.")
    image = BoundedCharField(required=False, label="Container image")
    command = CommandField(
        required=False, help_text="As in a shell: words split on spaces, quotes kept together."
    )
    workers = WholeNumberField(
        required=False,
        initial="1",
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Gang size: all workers start together or none does.",
    )
    gpus_per_worker = WholeNumberField(
        required=False,
        initial="1",
        label="GPUs per worker",
        widget=forms.NumberInput(attrs={"min": 1}),
    )
    gpu_milli = WholeNumberField(
        required=False,
        label="Fraction of a GPU (thousandths)",
        widget=forms.NumberInput(attrs={"min": 0, "max": 999}),
        help_text="On a shared flavor, in whole slices: 250 is a quarter of one GPU per worker.",
    )
    gpu_memory_mib = WholeNumberField(
        required=False,
        label="GPU memory per worker (MiB)",
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Instead of a fraction: the fewest slices that hold it.",
    )
    gpu_models = NamesField(
        required=False,
        label="GPU models",
        help_text="Run only on nodes of these models, comma-separated; empty: any.",
    )
    topology_level = forms.CharField(
        required=False,
        label="Topology level",
        help_text="One of the flavor's levels (a node label key, e.g. a rack label or "
        "nvidia.com/gpu.clique): all workers in one domain of it; empty: anywhere.",
    )
    topology_required = forms.BooleanField(
        required=False,
        label="Require one domain",
        help_text="Wait for one domain of the level to hold the whole gang, instead of only "
        "preferring one.",
    )
    priority = WholeNumberField(
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
    checkpoint_grace_seconds = DurationField(
        required=False, label="Checkpoint grace", help_text=DURATION_HELP
    )
    max_runtime_seconds = DurationField(
        required=False, label="Maximum runtime", help_text=DURATION_HELP
    )
    expected_runtime_seconds = DurationField(
        required=False,
        label="Expected runtime",
        help_text=f"Improves the estimated starts. {DURATION_HELP}",
    )
    env = MappingField(
        required=False,
        label="Environment",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="KEY=value, one per line.",
    )
    labels = MappingField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="key=value, one per line.",
    )
    annotations = MappingField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="key=value, one per line.",
    )
    cpu_millicores = WholeNumberField(
        required=False,
        label="CPU per worker (millicores)",
        widget=forms.NumberInput(attrs={"min": 0}),
        help_text="Defaults from the flavor, per GPU.",
    )
    memory_mib = WholeNumberField(
        required=False,
        label="Memory per worker (MiB)",
        widget=forms.NumberInput(attrs={"min": 0}),
        help_text="Defaults from the flavor, per GPU; also the limit unless one is set.",
    )
    cpu_limit_millicores = WholeNumberField(
        required=False,
        label="CPU limit (millicores)",
        widget=forms.NumberInput(attrs={"min": 1}),
    )
    memory_limit_mib = WholeNumberField(
        required=False,
        label="Memory limit (MiB)",
        widget=forms.NumberInput(attrs={"min": 1}),
    )
    shm_mib = WholeNumberField(
        required=False,
        label="/dev/shm (MiB)",
        widget=forms.NumberInput(attrs={"min": 1}),
        help_text="Default: half the memory.",
    )
    volumes = VolumesField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Existing claims of the team's namespace: CLAIM:PATH or CLAIM:PATH:ro, one per "
        "line.",
    )
    image_pull_secrets = NamesField(required=False, help_text="Secret names, comma-separated.")
    env_from_secrets = NamesField(
        required=False,
        label="Environment from Secrets",
        help_text="Secret names whose keys become variables, comma-separated.",
    )
    priority_class = BoundedCharField(required=False, label="Priority class")
    service_account = BoundedCharField(
        required=False, label="Service account", help_text="Its API token is mounted."
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields.update(links.form_fields())
        self.user = user
        teams = list(Team.objects.of_user(user).values_list("slug", "name"))
        self.fields["team"].widget.choices = [(slug, f"{slug} — {name}") for slug, name in teams]
        self.fields["flavor"].widget.choices = [
            (f.name, f"{f.name}{' — ' + f.description if f.description else ''}")
            for f in Flavor.objects.all()
        ]
        self.has_teams = bool(teams)

    def payload(self) -> dict[str, Any]:
        """The API request body for what was typed (shown as the curl to copy): each field's
        value where the field can read its text, else the text, which the API refuses at the
        same field."""
        body: dict[str, Any] = {}
        for name, field in self.fields.items():
            typed = self[name].data
            try:
                value = field.clean(typed)
            except ValidationError:
                value = _text(typed)
            if value is not None and value != "":
                body[name] = value
        return body

    def validated_submission(self) -> dict[str, Any] | None:
        """The values for `submit_job`, or None with the errors on the form.

        1. The form's fields read the text: numbers, the command's words, KEY=value lines.
        2. job_spec checks the rules: each field that could be read alone, then, when every
           field passed, the job as a whole (defaults, whether a worker fits a node).
        """
        refused = set(self.errors)
        given = {
            name: value
            for name, value in self.cleaned_data.items()
            if value is not None and value != ""
        }
        # 3. as the API: dependencies are checked once the job is good; an array spec was
        #    read by its field.
        linked = {name: given.pop(name) for name in links.FIELDS if name in given}
        checked = job_spec.check_submission(self.user, given, refused=refused)
        self.add_field_errors(checked.errors)
        if not self.errors:
            self.add_field_errors(links.dependency_errors(self.user, linked))
        return None if self.errors else {**checked.values, **linked}


def curl_command(base_url: str, body: Mapping[str, Any]) -> str:
    """The same submission for a pipeline: POST /api/v1/jobs/ (an array: /api/v1/arrays/) with
    a token."""
    payload = json.dumps(body, indent=2)
    path = "/api/v1/arrays/" if "array" in body else "/api/v1/jobs/"
    return (
        f"curl -X POST {shlex.quote(base_url.rstrip('/') + path)} \\\n"
        '  -H "Authorization: Bearer $GPUQUEUE_TOKEN" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        '  -H "Idempotency-Key: $(uuidgen)" \\\n'
        f"  -d {shlex.quote(payload)}"
    )


class QuotaForm(ServiceForm):
    guarantee = WholeNumberField(widget=forms.NumberInput(attrs={"min": 0}))
    limit = WholeNumberField(widget=forms.NumberInput(attrs={"min": 0}))
    weight = NumberField(widget=forms.NumberInput(attrs={"min": 0, "step": "any"}))
    oversubscribe = forms.BooleanField(required=False, label="allow guarantees beyond capacity")

    def save_quota(self, actor: Any, team: Team, flavor: Flavor) -> Quota | None:
        """Check the numbers by the quota rules and save through set_quota; None with the
        errors on the form when refused (Forbidden is left to the caller: it is a role)."""
        refused = set(self.errors)
        self.add_field_errors(check_quota(self.cleaned_data, refused=refused))
        if self.errors:
            return None
        data = self.cleaned_data
        try:
            return set_quota(
                actor,
                team,
                flavor,
                guarantee=data["guarantee"],
                limit=data["limit"],
                weight=data["weight"],
                oversubscribe=data["oversubscribe"],
            ).quota
        except Forbidden:
            raise
        except Refused as exc:
            if exc.fields:
                self.add_field_errors(exc.fields)
            else:
                self.add_error(None, exc.message)
            return None


class AllowedForm(ServiceForm):
    """A team's allow-lists as typed: names separated by commas or spaces, `*` for any run of
    characters. The rules and the write are teams.services.set_allowed's, as over the API."""

    allowed_service_accounts = NamesField(required=False, label="ServiceAccounts")
    allowed_secrets = NamesField(required=False, label="Secrets")
    allowed_claims = NamesField(required=False, label="PersistentVolumeClaims")

    def save_allowed(self, user: Any, team: Team) -> Team | None:
        """The team with its new lists, or None with the errors on the form."""
        if not self.is_valid():
            return None
        lists = {field: value or [] for field, value in self.cleaned_data.items()}
        try:
            return set_allowed(user, team, **lists)
        except Forbidden:
            raise  # the role, not the input: the view answers 403
        except Refused as exc:
            self.add_field_errors(exc.fields or {})
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
        widget=forms.TextInput(attrs={"inputmode": "numeric"}),  # see typed_as_text
        min_value=1,
        max_value=3650,
        label="Expires in (days)",
        help_text="Leave empty for a token that does not expire.",
    )
