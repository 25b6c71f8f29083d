"""Command entries (``[[command]]``, the ``exec.run`` host tool) through the CLI: ``inspect``
and ``diff`` of host files, ``policy explain``, and a call with its preview."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from host.formats.hostfile import load_host_file
from sdk.review.command import command_changes
from tests.support.bundles import write_lock
from tests.support.cli import ALICE_ARGS, json_out, run_cli

HEAD = 'format = "stockade.host/1"\n[host]\nstate_dir = "state"\nlock = "stockade.lock"\n'
WORKSPACE = '[[workspace]]\nroot = "ws"\nproject = "p"\n'
GIT = '[[command]]\nname = "git"\npath = "/usr/bin/git"\n'


def _host_file(path: Path, body: str) -> Path:
    path.write_text(HEAD + WORKSPACE + body)
    path.chmod(0o600)
    return path


def test_inspect_host_file_reports_each_command_with_its_binary(tmp_path: Path) -> None:
    config = _host_file(tmp_path / "a.host.toml", GIT + 'env = { GIT_CONFIG_NOSYSTEM = "1" }\n')
    report = json_out(run_cli("inspect", str(config), "--json", cwd=tmp_path))
    [git] = report["commands"]
    assert report["tool"] == "exec.run" and git["name"] == "git" and git["binary"] == "/usr/bin/git"
    assert len(git["binary_sha256"]) == 64 and git["workspace"] == "ro" and git["network"] == "none"
    assert git["env"] == {"GIT_CONFIG_NOSYSTEM": "1"}
    assert report["sandbox"]["unsafe_exec_without_sandbox"] is False


@pytest.mark.parametrize(
    ("after", "detail"),
    [
        (GIT + 'workspace = "rw"\n', "workspace ro -> rw"),
        (GIT + "max_timeout_ms = 60000\n", "max_timeout_ms 30000 -> 60000"),
        (GIT + 'env = { GIT_DIR = "/x" }\n', "env GIT_DIR added"),
        (GIT + 'secret_env = { GH_TOKEN = "github" }\n', "secret_env GH_TOKEN added"),
        (GIT + '[[command]]\nname = "python3"\npath = "/usr/bin/python3"\n', "new command /usr/bin/python3"),
        (GIT.replace("/usr/bin/git", "/bin/git"), "path /usr/bin/git -> /bin/git"),
    ],
    ids=["read_write_workspace", "longer_deadline", "new_variable", "new_secret", "new_command", "other_binary"],
)
def test_diff_host_files_flags_command_escalations(tmp_path: Path, after: str, detail: str) -> None:
    old = _host_file(tmp_path / "old.host.toml", GIT)
    new = _host_file(tmp_path / "new.host.toml", after)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    changes = json_out(proc)["changes"]
    assert any(c["detail"].startswith(detail) and c["escalation"] for c in changes), changes


EGRESS = GIT + 'network = "egress"\nallow = [{ scheme = "https", host = "github.com", path_prefix = "/", methods = ["GET"] }]\n'


@pytest.mark.parametrize(
    ("before", "after", "detail", "escalation"),
    [
        (GIT, EGRESS, "network none -> egress", True),
        (EGRESS, EGRESS.replace('"github.com"', '"*.github.com"'), "allow ['GET'] https://*.github.com/ added", True),
        (EGRESS.replace('"github.com"', '"*.github.com"'), EGRESS, "allow ['GET'] https://*.github.com/ removed",
         False),
        (GIT + 'landlock = "required"\n', GIT, "landlock required -> auto", True),
        (EGRESS, EGRESS + "max_egress_bytes = 1000000000\n", "max_egress_bytes 67108864 -> 1000000000", True),
    ],
    ids=["egress", "allow_added", "allow_removed", "landlock_not_required", "more_egress_bytes"],
)  # fmt: skip
def test_command_changes_of_egress_and_landlock(
    tmp_path: Path, before: str, after: str, detail: str, escalation: bool
) -> None:
    old = load_host_file(_host_file(tmp_path / "old.host.toml", before))
    new = load_host_file(_host_file(tmp_path / "new.host.toml", after))
    changes = [(c.detail, c.escalation) for c in command_changes(old, new)]
    assert (detail, escalation) in changes, changes


def test_diff_host_files_reduction_not_flagged(tmp_path: Path) -> None:
    old = _host_file(tmp_path / "old.host.toml", GIT + 'workspace = "rw"\nrisk = "high"\n')
    new = _host_file(tmp_path / "new.host.toml", GIT + 'workspace = "ro"\nrisk = "low"\n')
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [c["escalation"] for c in json_out(proc)["changes"]] == [False, False]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_policy_explain_and_call_cover_exec_run(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    write_lock(tmp_path / "stockade.lock", [])
    _host_file(tmp_path / "stockade.host.toml", '[[command]]\nname = "python3"\npath = "/usr/bin/python3"\n')
    assert run_cli("policy", "init", cwd=tmp_path).returncode == 0
    granted = run_cli("policy", "grant-tool", "p", "alice", "exec.run@1.0.0", "--role", "runner", cwd=tmp_path)
    assert granted.returncode == 0, granted.stderr
    explained = run_cli("policy", "explain", "p", "alice", "exec.run@1.0.0", cwd=tmp_path)
    assert "class default for execute" in explained.stdout, explained.stdout
    call = ("call", "exec.run@1.0.0", *ALICE_ARGS, "--input", '{"argv": ["python3", "-c", "print(6 * 7)"]}')
    asked = run_cli(*call, cwd=tmp_path)
    assert asked.returncode == 1 and "APPROVAL_REQUIRED" in asked.stderr
    assert "argv: python3 -c 'print(6 * 7)'" in asked.stdout + asked.stderr
    ran = run_cli(*call, "--approve", "--json", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert json_out(ran)["output"]["stdout"] == "42\n"
