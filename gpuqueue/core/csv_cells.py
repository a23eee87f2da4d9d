"""CSV cells that no spreadsheet evaluates (standard library only: the CLI uses it too)."""

from __future__ import annotations

from typing import Any

# A cell starting with one of these is a formula to a spreadsheet (OWASP "CSV injection"), and
# user names may start with + - @: such text gets a leading apostrophe, which Excel, LibreOffice
# and Google Sheets show as text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# The GPU-hours report's CSV, as the server exports it and `gpuqueue usage --csv` writes it.
USAGE_CSV_COLUMNS = (
    "period",
    "team",
    "user",
    "flavor",
    "gpu_hours",
    "preempted_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "jobs",
)


def as_csv_cell(value: Any) -> Any:
    """A value as a CSV cell: text never a formula, floats to 4 places, None empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
