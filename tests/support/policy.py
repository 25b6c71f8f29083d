"""Test helpers for host.policy: a principal type and raw policy-file writers."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class P:
    """A minimal PrincipalRef."""

    project: str
    subject: str


def policy_doc(
    *,
    roles: dict[str, dict[str, list[str]]] | None = None,
    bindings: dict[str, dict[str, list[str]]] | None = None,
    policy_version: int = 1,
    role_binding_version: int = 1,
) -> dict[str, Any]:
    """A stockade.policy/1 document."""
    return {
        "format": "stockade.policy/1",
        "policy_version": policy_version,
        "role_binding_version": role_binding_version,
        "roles": roles or {},
        "bindings": bindings or {},
    }


def write_json(path: Path, doc: object) -> None:
    """Write ``doc`` as JSON, replacing the file the way an editor or another process would."""
    tmp = path.with_name(path.name + ".tmp-test")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)
