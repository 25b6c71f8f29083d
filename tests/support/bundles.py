"""Write bundles, locks and trusted keys files for tests (real files, real Ed25519).

    manifest = make_manifest()                       # the valid docs/design.md §3 example
    bundle = write_bundle(tmp_path / "bundles" / "tracker", manifest, MODULE_BYTES)
    lock = write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])

``make_manifest(**overrides)`` replaces top-level keys; ``make_tool(**overrides)``
replaces keys of one tool. ``module_bytes=`` makes ``module.sha256`` match those bytes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from host.canonical import digest_json
from sdk.bundle import sign_package

MODULE_BYTES = b"\x00asm\x0d\x00\x01\x00test-module"
"""Stand-in module bytes: lock tests never compile the module."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_tool(**overrides: Any) -> dict[str, Any]:
    """A valid tool entry (``tracker.list-issues`` of docs/design.md §3) with ``overrides`` applied."""
    tool: dict[str, Any] = {
        "name": "tracker.list-issues",
        "version": "1.2.0",
        "description": "List the issues of a repository.",
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"repo": {"type": "string", "maxLength": 200}},
            "required": ["repo"],
        },
        "output_schema": {"type": "array", "maxItems": 100, "items": {"type": "string", "maxLength": 500}},
        "effect": "read",
        "risk": "low",
        "permissions": ["issues.read"],
        "timeout_s": 30,
        "sensitive_params": [],
        "rate_limit": {"per_minute": 60, "per_hour": 1000},
    }
    tool.update(copy.deepcopy(overrides))
    return tool


def make_manifest(*, module_bytes: bytes = MODULE_BYTES, **overrides: Any) -> dict[str, Any]:
    """A valid manifest (the docs/design.md §3 example) with top-level ``overrides`` applied."""
    manifest: dict[str, Any] = {
        "format": "stockade.manifest/1",
        "package": {"name": "tracker", "version": "1.2.0", "description": "Issue tracker tools.",
                    "homepage": None},
        "module": {"file": "module.wasm", "sha256": sha256(module_bytes), "world": "stockade:plugin/tool@1.1.0"},
        "limits": {"fuel": 2_000_000_000, "memory_bytes": 134_217_728, "timeout_ms": 10_000,
                   "max_http_requests": 16, "max_log_bytes": 65_536},
        "http": {
            "allow": [{"scheme": "https", "host": "api.tracker.example", "port": None,
                       "path_prefix": "/v1/issues", "methods": ["GET", "POST"]}],
            "credentials": [{"secret": "tracker_token", "location": {"type": "bearer"},
                             "hosts": ["api.tracker.example"], "path_prefixes": ["/v1"],
                             "optional": False}],
            "max_request_bytes": 1_048_576, "max_response_bytes": 10_485_760, "timeout_ms": 30_000,
        },
        "tools": [make_tool()],
    }
    manifest.update(copy.deepcopy(overrides))
    return manifest


def manifest_bytes(manifest: dict[str, Any] | bytes) -> bytes:
    if isinstance(manifest, bytes):
        return manifest
    return json.dumps(manifest, indent=2).encode("utf-8")


def write_bundle(directory: Path, manifest: dict[str, Any] | bytes, module_bytes: bytes = MODULE_BYTES) -> Path:
    """Write ``manifest.json`` and ``module.wasm`` into ``directory`` (created); return it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "manifest.json").write_bytes(manifest_bytes(manifest))
    (directory / "module.wasm").write_bytes(module_bytes)
    return directory


def lock_entry(lock_dir: Path, bundle_dir: Path, *, private_key: Any = None, **overrides: Any) -> dict[str, Any]:
    """A lock entry for a written bundle, signed when ``private_key`` is given."""
    manifest_raw = (bundle_dir / "manifest.json").read_bytes()
    manifest = json.loads(manifest_raw)
    entry: dict[str, Any] = {
        "name": manifest["package"]["name"],
        "version": manifest["package"]["version"],
        "bundle": bundle_dir.relative_to(lock_dir).as_posix(),
        "manifest_sha256": sha256(manifest_raw),
        "module_sha256": sha256((bundle_dir / "module.wasm").read_bytes()),
        "signature": None,
        "key_id": None,
    }
    if private_key is not None:
        entry["signature"], entry["key_id"] = sign_package(
            private_key, entry["name"], entry["version"], entry["manifest_sha256"], entry["module_sha256"]
        )
    entry.update(overrides)
    return entry


def lock_document(
    packages: Sequence[dict[str, Any]], *, generation: int = 1, previous: str | None = None
) -> dict[str, Any]:
    return {"format": "stockade.lock/1", "generation": generation, "previous": previous,
            "packages": list(packages)}


def write_lock(
    path: Path, packages: Sequence[dict[str, Any]], *, generation: int = 1, previous: str | None = None
) -> Path:
    """Write a lock file; ``previous`` defaults to null (right only for generation 1)."""
    path.write_text(json.dumps(lock_document(packages, generation=generation, previous=previous), indent=2))
    return path


def lock_digest(path: Path) -> str:
    """The digest the next generation's ``previous`` must name."""
    return digest_json(json.loads(path.read_bytes()))


def state_snapshot(state_dir: Path) -> dict[str, bytes]:
    """Every file of a state directory with its bytes: compare before and after a refusal.

    The empty inter-process lock file ``.lock-state.lock`` (created by any accept) is left out.
    """
    if not state_dir.exists():
        return {}
    return {
        p.name: p.read_bytes()
        for p in sorted(state_dir.iterdir())
        if p.is_file() and p.name != ".lock-state.lock"
    }
