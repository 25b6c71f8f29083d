"""The diff is the approval: an edit is written only as approved, atomically, and audited
without contents.

- approve, modify the file, execute → ``APPROVAL_INVALID reason: "stale"``, nothing written;
- a change in the last window (after the re-check, before the rename) is refused too;
- ``kill -9`` between the temp write and the rename leaves the old file intact, and the
  next open removes the temp file;
- an approval for one diff never authorizes another; the preview escapes control characters;
- the audit log holds digests and sizes, never file contents.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from host import Host, HostConfig
from host.canonical import sha256_hex
from host.config import WorkspaceGrant
from host.errors import StockadeError
from host.tools.atomic import TEMP_PREFIX, atomic_replace
from host.tools.fs import Workspaces
from host.tools.paths import RelPath, Workspace
from tests.support.bundles import write_lock
from tests.support.hosts import write_policy
from tests.support.workspace import ALICE, FsHost, make_fs_host


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FsHost]:
    fixture = make_fs_host(tmp_path)
    (fixture.ws / "f.txt").write_text("alpha\nbeta\n")
    try:
        yield fixture
    finally:
        fixture.host.close()


def test_approve_then_modify_then_execute_refused_stale(fs: FsHost) -> None:
    plan = fs.prepare_edit(path="f.txt", old_text="beta", new_text="gamma")
    approval = fs.host.approve(plan)
    (fs.ws / "f.txt").write_text("alpha\nbeta\nmore\n")  # still matches: only the diff differs
    result = fs.host.execute(plan, approval)
    assert result.error is not None
    assert (result.error.code, result.error.details["reason"]) == ("APPROVAL_INVALID", "stale")
    assert (fs.ws / "f.txt").read_text() == "alpha\nbeta\nmore\n"


def test_approval_carried_in_envelope_for_old_content_refused(fs: FsHost) -> None:
    plan = fs.prepare_edit(path="f.txt", old_text="beta", new_text="gamma")
    approval = fs.host.approve(plan)
    (fs.ws / "f.txt").write_text("alpha\nbeta\n\n")
    request = fs.request("fs.edit_file", path="f.txt", old_text="beta", new_text="gamma")
    result = fs.host.call(request.model_copy(update={"approval": approval}))
    assert result.error is not None and result.error.code == "APPROVAL_INVALID"
    assert (fs.ws / "f.txt").read_text() == "alpha\nbeta\n\n"


def test_approval_of_one_diff_does_not_authorize_another(fs: FsHost) -> None:
    approved = fs.prepare_edit(path="f.txt", old_text="beta", new_text="gamma")
    other = fs.prepare_edit(path="f.txt", old_text="beta", new_text="delta")
    assert approved.action_digest != other.action_digest
    result = fs.host.execute(other, fs.host.approve(approved))
    assert result.error is not None and result.error.code == "APPROVAL_INVALID"
    assert (fs.ws / "f.txt").read_text() == "alpha\nbeta\n"


def test_edit_without_approval_asks_with_the_diff(fs: FsHost) -> None:
    result = fs.host.call(fs.request("fs.edit_file", path="f.txt", old_text="beta", new_text="gamma"))
    assert result.error is not None and result.error.code == "APPROVAL_REQUIRED"
    diff = result.error.details["preview"]["diff"]
    assert diff.splitlines()[:3] == ["--- a/f.txt", "+++ b/f.txt", "@@ -1,2 +1,2 @@"]
    assert "-beta" in diff and "+gamma" in diff
    assert (fs.ws / "f.txt").read_text() == "alpha\nbeta\n"


def test_preview_escapes_control_characters(fs: FsHost) -> None:
    plan = fs.prepare_edit(path="f.txt", old_text="beta", new_text="\x1b[2J\u202eevil\r")
    assert plan.preview.detail is not None
    assert "\x1b" not in plan.preview.detail and "\\u001b[2J" in plan.preview.detail
    assert (
        "\u202e" not in str(plan.preview) and "\\u202e" in str(plan.preview) and "\\u000d" in plan.preview.detail
    )


def test_change_in_the_last_window_before_rename_refused(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("old\n")

    def meddle() -> None:
        (tmp_path / "f.txt").write_text("new\n")

    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(StockadeError) as caught:
            atomic_replace(
                dir_fd, "f.txt", b"mine\n", expect_sha256=sha256_hex(b"old\n"), max_bytes=1000, tool="t",
                before_rename=meddle,
            )  # fmt: skip
    finally:
        os.close(dir_fd)
    assert caught.value.details["reason"] == "stale"
    assert (tmp_path / "f.txt").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys, time
    from host.canonical import sha256_hex
    from host.tools.atomic import atomic_replace
    root = sys.argv[1]
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    def stop():
        print("renaming", flush=True)
        time.sleep(60)
    atomic_replace(fd, "f.txt", b"new content\\n", expect_sha256=sha256_hex(b"old content\\n"), max_bytes=1000,
                   tool="t", before_rename=stop)
    """
)


def test_kill_9_between_temp_write_and_rename_keeps_old_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "f.txt").write_text("old content\n")
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(ws)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "renaming"
        temps = [p.name for p in ws.iterdir() if p.name.startswith(TEMP_PREFIX)]
        assert len(temps) == 1 and (ws / temps[0]).read_bytes() == b"new content\n"  # fsynced, not renamed
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.stdout is not None
        child.stdout.close()
    assert (ws / "f.txt").read_text() == "old content\n"
    Workspaces([WorkspaceGrant(root=ws, project="p")], protected=[]).close()  # the next open sweeps
    assert sorted(p.name for p in ws.iterdir()) == ["f.txt"]


def test_audit_holds_digests_never_contents(fs: FsHost) -> None:
    (fs.ws / "s.txt").write_text("top-secret-body\nmarker-old\n")
    assert fs.read(path="s.txt").ok
    result = fs.edit(path="s.txt", old_text="marker-old", new_text="marker-new")
    assert result.ok
    log = fs.audit_path.read_text()
    for content in ("top-secret-body", "marker-old", "marker-new"):
        assert content not in log
    intent = next(line for line in log.splitlines() if '"call.intent"' in line)
    for field in ('"sha256_before"', '"diff_sha256"', '"size_before"', '"size_after"', '"path":"s.txt"'):
        assert field in intent
    outcome = [line for line in log.splitlines() if '"fs.edit_file"' in line and '"outcome"' in line][-1]
    for field in ('"sha256_after"', '"lines_added":1', '"lines_removed":1', '"replacements":1'):
        assert field in outcome


def test_no_workspace_for_principal_is_tool_not_found(fs: FsHost) -> None:
    request = fs.request("fs.read_file", path="f.txt").model_copy(
        update={"principal": ALICE.model_copy(update={"project": "other"})}
    )
    result = fs.host.call(request)
    assert result.error is not None and result.error.code in ("TOOL_NOT_FOUND", "POLICY_DENIED")


def test_without_workspace_fs_tools_are_not_in_the_registry(tmp_path: Path) -> None:
    lock = write_lock(tmp_path / "stockade.lock", [])
    policy = write_policy(tmp_path / "policy.json", allow=["tool.call:fs.read_file", "fs.read"])
    with Host.open(lock, config=HostConfig(state_dir=tmp_path / "s"), secrets=None, policy=policy,
                   audit=tmp_path / "audit.log") as host:  # fmt: skip
        assert host.tools() == []
        result = host.call({"principal": ALICE, "session": "s", "tool": "fs.read_file", "version": "1.0.0",
                            "input": {"path": "x"}})  # fmt: skip
        assert result.error is not None and result.error.code == "TOOL_NOT_FOUND"


def test_component_walk_fallback_refuses_every_symlink(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("out\n")
    ws_dir = tmp_path / "ws"
    (ws_dir / "sub").mkdir(parents=True)
    (ws_dir / "sub" / "f.txt").write_text("in\n")
    (ws_dir / "in_link").symlink_to("sub/f.txt")
    (ws_dir / "out_link").symlink_to("../outside.txt")
    (ws_dir / "dir_link").symlink_to("sub")
    ws = Workspace(ws_dir, protected=(), deny=())
    ws._force_walk = True
    try:
        fd, _ = ws.open_file(RelPath(("sub", "f.txt")), follow=True)
        assert os.read(fd, 10) == b"in\n"
        os.close(fd)
        for parts in (("in_link",), ("out_link",), ("dir_link", "f.txt")):
            with pytest.raises(StockadeError) as caught:
                ws.open_file(RelPath(parts), follow=True)
            assert caught.value.details["reason"] == "symlink", parts
    finally:
        ws.close()


def test_preview_escapes_zero_width_and_line_separators_in_the_diff(fs: FsHost) -> None:
    # The diff used to have its own escaping rule, which let a zero-width space inside a
    # changed word and U+2028 (a line break for some renderers) through unescaped.
    plan = fs.prepare_edit(path="f.txt", old_text="beta", new_text="pass\u200bword\u2028hidden\ufeff")
    detail = plan.preview.detail
    assert detail is not None
    assert not any(ch in detail for ch in "\u200b\u2028\ufeff")
    assert "+pass\\u200bword\\u2028hidden\\ufeff" in detail.splitlines()
