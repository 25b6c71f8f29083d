"""Landlock, the second filesystem and TCP layer of ``exec.run``, holding on its own.

bwrap's binds are the first layer; to test the second, these tests loosen the first in a
test-only way (extra binds added to bwrap's argv of a real call, host directories the
grant never names) and check that the process still cannot read or write them, that the
launcher's own files are not granted, that a TCP bind is refused, and that ``landlock =
"required"`` fails closed on a host without Landlock while ``"auto"`` is audited as
``unavailable``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import host.tools.exec as exec_module
from host.config import CommandEntry
from host.errors import SandboxUnavailable
from host.sandbox.bwrap import SandboxProfile
from host.sandbox.launch import abi
from tests.support.commands import ExecHost, make_exec_host

pytestmark = [
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed"),
    pytest.mark.skipif(abi() < 1, reason="the kernel has no Landlock"),
]

PYTHON = CommandEntry(name="python3", path=Path("/usr/bin/python3"), max_timeout_ms=10_000, workspace="rw")

_PROBE = """
import os, sys
for op, path in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        if op == "read":
            open(path).read()
        elif op == "write":
            open(path, "w").write("x")
        elif op == "list":
            os.listdir(path)
        print(op, path, "ok")
    except OSError as e:
        print(op, path, type(e).__name__)
"""


def _outcome(ex: ExecHost) -> dict[str, Any]:
    records = [json.loads(line) for line in ex.audit_path.read_text().splitlines()]
    outcome: dict[str, Any] = [r for r in records if r["kind"] == "call.outcome"][-1]["outcome"]
    return outcome


def _loosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make every bwrap argv also bind a host directory at ``/loose`` (read-write) and at
    ``/home/victim`` (read-only): a bwrap bug or a too-wide bind that Landlock's grant
    does not cover. Returns the host directory."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("host secret")
    original = SandboxProfile.argv

    def wider(self: SandboxProfile, *args: Any, **kwargs: Any) -> list[str]:
        argv = original(self, *args, **kwargs)
        cut = argv.index("--")
        return [*argv[:cut], "--bind", str(outside), "/loose", "--ro-bind", str(outside), "/home/victim", *argv[cut:]]

    monkeypatch.setattr(SandboxProfile, "argv", wider)
    return outside


@pytest.fixture
def loosened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ExecHost, Path]]:
    """A Host over :func:`_loosen`'s argv."""
    outside = _loosen(tmp_path, monkeypatch)
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        yield ex, outside
    finally:
        ex.host.close()


def test_landlock_denies_read_and_write_of_path_bwrap_bound_but_grant_does_not_name(
    loosened: tuple[ExecHost, Path],
) -> None:
    ex, outside = loosened
    (ex.ws / "mine.txt").write_text("workspace file")
    argv = ["read", "/loose/secret.txt", "write", "/loose/dropped.txt", "list", "/loose",
            "read", "/home/victim/secret.txt", "read", "/workspace/mine.txt", "write", "/workspace/out.txt",
            "write", "/tmp/scratch"]  # fmt: skip
    result = ex.run("python3", "-c", _PROBE, *argv)
    assert result.ok and result.output["exit_code"] == 0, result.output["stderr"]
    assert result.output["stdout"].splitlines() == [
        "read /loose/secret.txt PermissionError",
        "write /loose/dropped.txt PermissionError",
        "list /loose PermissionError",
        "read /home/victim/secret.txt PermissionError",
        "read /workspace/mine.txt ok",
        "write /workspace/out.txt ok",
        "write /tmp/scratch ok",
    ]
    assert not (outside / "dropped.txt").exists()
    assert _outcome(ex)["landlock"] == f"abi {abi()}"


def test_control_without_landlock_the_loosened_bind_is_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test above fails when Landlock is off: the loosened bind alone lets it through."""
    monkeypatch.setattr(exec_module, "landlock_abi", lambda: 0)
    outside = _loosen(tmp_path, monkeypatch)
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        result = ex.run("python3", "-c", _PROBE, "read", "/loose/secret.txt", "write", "/loose/dropped.txt")
    finally:
        ex.host.close()
    assert result.output["stdout"].splitlines() == ["read /loose/secret.txt ok", "write /loose/dropped.txt ok"]
    assert (outside / "dropped.txt").exists()


def test_launcher_files_not_granted_to_the_command(tmp_path: Path) -> None:
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        result = ex.run("python3", "-c", _PROBE, "read", "/.stockade/launch.py", "list", "/")
    finally:
        ex.host.close()
    assert result.output["stdout"].splitlines() == ["read /.stockade/launch.py PermissionError", "list / PermissionError"]


def test_read_only_entry_cannot_write_workspace_even_through_a_writable_bind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = SandboxProfile.argv

    def rw_workspace(self: SandboxProfile, *args: Any, **kwargs: Any) -> list[str]:
        argv = original(self, *args, **kwargs)
        cut = argv.index("--")
        return [*argv[:cut], "--bind", str(self.workspace), "/workspace", *argv[cut:]]  # bwrap says rw

    monkeypatch.setattr(SandboxProfile, "argv", rw_workspace)
    ex = make_exec_host(tmp_path, [CommandEntry(name="python3", path=Path("/usr/bin/python3"), workspace="ro")])
    try:
        result = ex.run("python3", "-c", _PROBE, "write", "/workspace/x.txt")
    finally:
        ex.host.close()
    assert result.output["stdout"].splitlines() == ["write /workspace/x.txt PermissionError"]
    assert not (ex.ws / "x.txt").exists()


def test_landlock_required_without_landlock_refused_sandbox_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(exec_module, "landlock_abi", lambda: 0)
    required = CommandEntry(name="python3", path=Path("/usr/bin/python3"), landlock="required")
    ex = make_exec_host(tmp_path, [required])
    try:
        with pytest.raises(SandboxUnavailable) as caught:
            ex.prepare(argv=["python3", "-c", "print(1)"])
    finally:
        ex.host.close()
    assert caught.value.details["reason"] == "landlock"


def test_landlock_unavailable_audited_when_not_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exec_module, "landlock_abi", lambda: 0)
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        plan = ex.prepare(argv=["python3", "-c", "print(1)"])
        assert "landlock: unavailable" in (plan.preview.detail or "")
        result = ex.host.execute(plan, ex.host.approve(plan))
    finally:
        ex.host.close()
    assert result.ok and result.output["stdout"] == "1\n"
    assert _outcome(ex)["landlock"] == "unavailable"


def test_landlock_abi_is_bound_into_the_profile_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        with_landlock = ex.prepare(argv=["python3", "-c", "print(1)"])
    finally:
        ex.host.close()
    monkeypatch.setattr(exec_module, "landlock_abi", lambda: 0)
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        without = ex.prepare(argv=["python3", "-c", "print(1)"])
    finally:
        ex.host.close()
    assert with_landlock.action_digest != without.action_digest
