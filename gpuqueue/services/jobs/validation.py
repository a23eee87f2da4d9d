"""Rules on plain values, checked before anything is written, whichever way a request came in.

Most are syntax rules for what a job carries into Kubernetes: Kubernetes' own (apimachinery
`validation.IsQualifiedName`, `IsValidLabelValue`, `ValidateAnnotations`, `IsEnvVarName`) and the
image reference grammar of distribution/reference, so that a job gpuqueue accepts is never
refused later by the cluster. Bounds and lengths are refused in the words DRF and Django use for
their own, so that a message reads the same whether a field or a rule caught it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuqueue.cluster.manifests import RESERVED_DEVICE_ENV
from gpuqueue.core.gpu_idle import PROFILE_ANNOTATION, profile_errors

FieldErrors = dict[str, list[str]]

REQUIRED = "This field is required."
UNKNOWN_FIELD = "Unknown field."


@dataclass(frozen=True)
class Checked:
    """The outcome of a check: the values to use, or (when `errors` is not empty) the messages
    per field."""

    values: dict[str, Any]
    errors: FieldErrors

    @property
    def ok(self) -> bool:
        return not self.errors


def bound_errors(value: float, lowest: float, highest: float) -> list[str]:
    if value < lowest:
        return [f"Ensure this value is greater than or equal to {lowest}."]
    if value > highest:
        return [f"Ensure this value is less than or equal to {highest}."]
    return []


def length_errors(text: str, most: int) -> list[str]:
    if len(text) > most:
        return [f"Ensure this field has no more than {most} characters."]
    return []


# distribution/reference: [domain[:port]/]path[:tag][@digest]
_ALNUM = r"[a-z0-9]+"
_SEP = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEP}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_RE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?$"
)
IMAGE_NAME_MAX = 255  # distribution's limit on the name part

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Kubernetes accepts any C identifier-like name plus '-' and '.'; shells and launchers only the
# C identifiers, so that is what gpuqueue accepts.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
JOB_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

# Limits. Kubernetes caps annotations at 256 KiB per object; a job's share is far smaller so
# that a whole request stays within the API's body limit.
MAX_COMMAND_ITEMS = 256
MAX_COMMAND_ITEM_CHARS = 8192
MAX_COMMAND_TOTAL_CHARS = 32 * 1024
MAX_ENV_VARS = 128
MAX_ENV_VALUE_CHARS = 8192
MAX_ENV_TOTAL_CHARS = 32 * 1024
MAX_LABELS = 64
MAX_ANNOTATIONS_TOTAL_CHARS = 32 * 1024
# Names gpuqueue sets itself in every worker: workers find each other by these.
RESERVED_ENV = frozenset({"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"})
RESERVED_ENV_PREFIX = "GPUQUEUE_"


def image_errors(image: str) -> list[str]:
    if not image or not image.strip():
        return ["An image is required."]
    if image != image.strip() or any(ch.isspace() for ch in image):
        return ["An image reference contains no whitespace."]
    if not IMAGE_RE.match(image):
        return [
            f"{image!r} is not a valid image reference: expected "
            "[registry[:port]/]name[:tag][@digest], with a lowercase name."
        ]
    name = image.split("@", 1)[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    if len(name) > IMAGE_NAME_MAX:
        return [f"The image name is {len(name)} characters long; at most {IMAGE_NAME_MAX}."]
    return []


def qualified_key_errors(key: str, what: str) -> list[str]:
    """A label or annotation key: an optional DNS subdomain prefix and '/', then a name of at
    most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    errors = []
    if slash:
        if not prefix:
            errors.append(f"{what} key {key!r}: the prefix before '/' is empty.")
        elif len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix):
            errors.append(
                f"{what} key {key!r}: the prefix must be a DNS subdomain (lowercase letters, "
                "digits, '-' and '.', at most 253 characters)."
            )
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.append(
            f"{what} key {key!r}: the name must be 1–63 characters of letters, digits, '-', '_' "
            "and '.', starting and ending with a letter or digit."
        )
    return errors


def label_errors(labels: dict[str, str]) -> list[str]:
    errors: list[str] = []
    if len(labels) > MAX_LABELS:
        errors.append(f"At most {MAX_LABELS} labels; got {len(labels)}.")
    for key, value in labels.items():
        errors += qualified_key_errors(key, "Label")
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                f"Label {key!r}: the value must be empty or 1–63 characters of letters, digits, "
                "'-', '_' and '.', starting and ending with a letter or digit."
            )
    return errors


# The simulated workload's annotations (the simulated backend and the kwok nodes of the tests
# read them): a duration in plain decimal seconds, and an exit code as a process has one.
SIM_DURATION = "gpuqueue.dev/sim-duration-seconds"
SIM_EXIT_CODE = "gpuqueue.dev/sim-exit-code"
MAX_SIM_DURATION_SECONDS = 10 * 365 * 24 * 3600
_DECIMAL = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,6})?$")


def annotation_errors(annotations: dict[str, str]) -> list[str]:
    errors: list[str] = []
    total = 0
    for key, value in annotations.items():
        errors += qualified_key_errors(key, "Annotation")
        total += len(key) + len(value)
    duration = annotations.get(SIM_DURATION)
    if duration is not None and not (
        _DECIMAL.match(duration) and float(duration) <= MAX_SIM_DURATION_SECONDS
    ):
        errors.append(
            f"Annotation {SIM_DURATION} must be seconds as a plain decimal number from 0 to"
            f" {MAX_SIM_DURATION_SECONDS} (ten years); got {duration[:40]!r}."
        )
    code = annotations.get(SIM_EXIT_CODE)
    if code is not None and not (
        code.isascii() and code.isdigit() and len(code) <= 3 and int(code) <= 255
    ):
        errors.append(
            f"Annotation {SIM_EXIT_CODE} must be an exit code from 0 to 255; got {code[:40]!r}."
        )
    if (profile := annotations.get(PROFILE_ANNOTATION)) is not None:
        errors += profile_errors(profile)
    if total > MAX_ANNOTATIONS_TOTAL_CHARS:
        errors.append(
            f"Annotations total {total} characters; at most {MAX_ANNOTATIONS_TOTAL_CHARS}."
        )
    return errors


def env_errors(env: dict[str, str]) -> list[str]:
    errors: list[str] = []
    if len(env) > MAX_ENV_VARS:
        errors.append(f"At most {MAX_ENV_VARS} variables; got {len(env)}.")
    total = 0
    for name, value in env.items():
        if not ENV_NAME.match(name):
            errors.append(
                f"{name!r} is not a valid variable name: letters, digits and '_', not starting "
                "with a digit."
            )
        elif name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIX):
            errors.append(f"{name} is set by gpuqueue in every worker and cannot be overridden.")
        elif name in RESERVED_DEVICE_ENV:
            errors.append(
                f"{name} selects devices, which only the device plugin does: a job gets the GPUs "
                "it asks for with gpus_per_worker (narrow them with CUDA_VISIBLE_DEVICES)."
            )
        if len(value) > MAX_ENV_VALUE_CHARS:
            errors.append(
                f"{name}: the value is {len(value)} characters long; at most {MAX_ENV_VALUE_CHARS}."
            )
        total += len(name) + len(value)
    if total > MAX_ENV_TOTAL_CHARS:
        errors.append(f"The environment totals {total} characters; at most {MAX_ENV_TOTAL_CHARS}.")
    return errors


def command_errors(command: list[str]) -> list[str]:
    errors: list[str] = []
    if len(command) > MAX_COMMAND_ITEMS:
        errors.append(f"At most {MAX_COMMAND_ITEMS} items; got {len(command)}.")
    if any(len(item) > MAX_COMMAND_ITEM_CHARS for item in command):
        errors.append(f"An item is longer than {MAX_COMMAND_ITEM_CHARS} characters.")
    total = sum(len(item) for item in command)
    if total > MAX_COMMAND_TOTAL_CHARS:
        errors.append(f"The command totals {total} characters; at most {MAX_COMMAND_TOTAL_CHARS}.")
    return errors
