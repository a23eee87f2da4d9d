"""The CLAIM:PATH[:ro] notation of a job's volume, shared by the CLI's --volume and the
dashboard's form (standard library only)."""

from __future__ import annotations

from typing import Any


def parse_volume(text: str) -> dict[str, Any]:
    """'data:/data:ro' -> {"claim": "data", "mount_path": "/data", "read_only": True}."""
    claim, _, rest = text.partition(":")
    path, _, mode = rest.partition(":")
    if not claim or not path or mode not in ("", "ro", "rw"):
        raise ValueError(f"{text!r}: write CLAIM:PATH or CLAIM:PATH:ro.")
    return {"claim": claim, "mount_path": path, "read_only": mode == "ro"}
