"""Kubernetes' own OpenAPI v3 schemas of a release (api/openapi-spec/v3 of its Go module,
fetched through the Go module proxy), to validate objects strictly for a version whose API
server these tests do not run (the chart's minimum)."""

from __future__ import annotations

import json
import os
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft7Validator
from referencing import Registry, Resource

from tests.kube.controlplane import Unavailable, go_binary


@cache
def spec_dir(version: str) -> Path:
    go = go_binary()
    if go is None:
        raise Unavailable("Go is not installed (needed to fetch Kubernetes' OpenAPI schemas)")
    done = subprocess.run(
        [go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    if done.returncode != 0:
        raise Unavailable(f"could not fetch k8s.io/kubernetes@{version}: {done.stderr[-500:]}")
    return Path(json.loads(done.stdout)["Dir"]) / "api" / "openapi-spec" / "v3"


def _strict(schema: Any) -> Any:
    """No field a schema does not declare: an object with `properties` and no
    `additionalProperties` gets `additionalProperties: false` (as the API server's strict
    field validation refuses unknown fields)."""
    if isinstance(schema, dict):
        out = {key: _strict(value) for key, value in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


@cache
def _schemas(version: str) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """Every component schema of the release, and (apiVersion, kind) -> its schema's name."""
    schemas: dict[str, Any] = {}
    for path in sorted(spec_dir(version).glob("*.json")):
        schemas.update(json.loads(path.read_text()).get("components", {}).get("schemas", {}))
    kinds: dict[tuple[str, str], str] = {}
    for name, schema in schemas.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            group, kind = gvk["group"], gvk["kind"]
            api_version = f"{group}/{gvk['version']}" if group else gvk["version"]
            kinds[(api_version, kind)] = name
    return {name: _strict(s) for name, s in schemas.items()}, kinds


def errors(obj: dict[str, Any], version: str) -> list[str]:
    """What is wrong with `obj` for Kubernetes `version` (an unknown kind is an error too)."""
    schemas, kinds = _schemas(version)
    name = kinds.get((obj["apiVersion"], obj["kind"]))
    if name is None:
        return [f"{obj['apiVersion']} {obj['kind']} does not exist in Kubernetes {version}"]
    root = {"components": {"schemas": schemas}}
    registry = Registry().with_resource("urn:k8s", Resource.opaque(root))
    validator = Draft7Validator({"$ref": f"urn:k8s#/components/schemas/{name}"}, registry=registry)
    return [
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(obj)
    ]
