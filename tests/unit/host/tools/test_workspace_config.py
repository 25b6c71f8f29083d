"""The workspace root comes from the operator: ``[[workspace]]`` in ``stockade.host.toml``."""

from __future__ import annotations

from pathlib import Path

import pytest

from host.config import WorkspaceGrant
from host.errors import ConfigInvalid
from host.formats.hostfile import load_host_file


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "stockade.host.toml"
    path.write_text('format = "stockade.host/1"\n' + body)
    return path


def test_workspace_tables_parsed_with_root_relative_to_file(tmp_path: Path) -> None:
    settings = load_host_file(_write(tmp_path, textwrap_body()))
    (first,) = settings.workspaces
    assert first["root"] == tmp_path / "ws" and first["project"] == "p"
    grant = WorkspaceGrant(**first)
    assert grant.deny == ("secrets",) and grant.subjects == ("alice",) and grant.max_file_bytes == 1000
    assert grant.grants("p", "alice") and not grant.grants("p", "bob") and not grant.grants("q", "alice")


def textwrap_body() -> str:
    return (
        '[[workspace]]\nroot = "ws"\nproject = "p"\nsubjects = ["alice"]\n'
        'deny = ["secrets"]\nmax_file_bytes = 1000\n'
    )


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ('[[workspace]]\nproject = "p"\n', "workspace.0.root"),
        ('[[workspace]]\nroot = "ws"\n', "workspace.0.project"),
        ('[[workspace]]\nroot = "ws"\nproject = "p"\ndeny = "x"\n', "workspace.0.deny"),
        ('[[workspace]]\nroot = "ws"\nproject = "p"\nmax_file_bytes = -1\n', "workspace.0.max_file_bytes"),
        ('[[workspace]]\nroot = "ws"\nproject = "p"\nwritable = true\n', "workspace.0.writable"),
        ('workspace = "ws"\n', "workspace"),
    ],
    ids=["no_root", "no_project", "deny_not_list", "negative_limit", "unknown_key", "not_tables"],
)
def test_invalid_workspace_tables_refused(tmp_path: Path, body: str, loc: str) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        load_host_file(_write(tmp_path, body))
    assert loc in [p["loc"] for p in caught.value.details["problems"]]


def test_grant_limits_checked() -> None:
    with pytest.raises(ValueError, match="max_list_entries"):
        WorkspaceGrant(root=Path("."), project="p", max_list_entries=257)
    with pytest.raises(ValueError, match="page_bytes"):
        WorkspaceGrant(root=Path("."), project="p", page_bytes=200 * 1024)
