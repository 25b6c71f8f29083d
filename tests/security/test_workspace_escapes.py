"""Escapes from a workspace root through ``fs.read_file`` and ``fs.edit_file``.

Every case runs through the whole Host pipeline. After a refused edit, the target outside
the root (and the inside file) are unchanged. The matrix: relative ``..``, absolute, NUL,
symlink to an outside file, to an outside directory, relative symlink out, a magic link,
symlink inside, hard link out, FIFO, socket, device, ``..notes.txt`` and ``.``.
"""

from __future__ import annotations

import os
import socket
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from host import Host, HostConfig
from host.config import WorkspaceGrant
from tests.support.bundles import write_lock
from tests.support.hosts import write_policy
from tests.support.workspace import ALICE, FS_PERMISSIONS, FsHost, make_fs_host

OUTSIDE = "outside secret\n"
INSIDE = "inside text\n"


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[FsHost]:
    fixture = make_fs_host(tmp_path)
    (tmp_path / "outside.txt").write_text(OUTSIDE)
    (tmp_path / "outside_dir").mkdir()
    (tmp_path / "outside_dir" / "secret.txt").write_text(OUTSIDE)
    (fixture.ws / "a.txt").write_text(INSIDE)
    (fixture.ws / "..notes.txt").write_text(INSIDE)
    try:
        yield fixture
    finally:
        fixture.host.close()
        if "sock" in fixture.extra:
            fixture.extra["sock"].close()


def _symlink(target: str, name: str) -> Callable[[FsHost], str]:
    def setup(fs: FsHost) -> str:
        (fs.ws / name).symlink_to(target)
        return name

    return setup


def _abs_symlink_file(fs: FsHost) -> str:
    (fs.ws / "out_file").symlink_to(fs.root / "outside.txt")
    return "out_file"


def _abs_symlink_dir(fs: FsHost) -> str:
    (fs.ws / "out_dir").symlink_to(fs.root / "outside_dir")
    return "out_dir/secret.txt"


def _hard_link_out(fs: FsHost) -> str:
    os.link(fs.root / "outside.txt", fs.ws / "hard")
    return "hard"


def _fifo(fs: FsHost) -> str:
    os.mkfifo(fs.ws / "fifo")
    return "fifo"


def _socket(fs: FsHost) -> str:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(fs.ws / "sock"))
    fs.extra["sock"] = sock
    return "sock"


def _device(fs: FsHost) -> str:
    try:
        os.mknod(fs.ws / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    return "null"


def _given(path: str) -> Callable[[FsHost], str]:
    return lambda fs: path


# (id, setup -> path, read outcome, edit outcome); an outcome is "ok" or (code, reason).
MATRIX: list[tuple[str, Callable[[FsHost], str], Any, Any]] = [
    ("relative_dotdot", _given("../outside.txt"), ("INPUT_INVALID", "dotdot"), ("INPUT_INVALID", "dotdot")),
    ("dotdot_inside_path", _given("sub/../../outside.txt"), ("INPUT_INVALID", "dotdot"), ("INPUT_INVALID", "dotdot")),
    ("absolute", _given(os.devnull), ("INPUT_INVALID", "absolute"), ("INPUT_INVALID", "absolute")),
    ("nul", _given("a.txt\x00../../etc/passwd"), ("INPUT_INVALID", "nul"), ("INPUT_INVALID", "nul")),
    ("symlink_outside_file", _abs_symlink_file, ("POLICY_DENIED", "path_escape"), ("POLICY_DENIED", "symlink")),
    ("symlink_outside_dir", _abs_symlink_dir, ("POLICY_DENIED", "path_escape"), ("POLICY_DENIED", "symlink")),
    ("relative_symlink_out", _symlink("../outside.txt", "rel_out"), ("POLICY_DENIED", "path_escape"),
     ("POLICY_DENIED", "symlink")),
    ("magic_link", _symlink("/proc/self/root/etc/hostname", "magic"), ("POLICY_DENIED", "path_escape"),
     ("POLICY_DENIED", "symlink")),
    ("symlink_inside", _symlink("a.txt", "in_link"), "ok", ("POLICY_DENIED", "symlink")),
    ("hard_link_out", _hard_link_out, ("POLICY_DENIED", "hard_link"), ("POLICY_DENIED", "hard_link")),
    ("fifo", _fifo, ("POLICY_DENIED", "not_regular"), ("POLICY_DENIED", "not_regular")),
    ("socket", _socket, ("POLICY_DENIED", "not_regular"), ("POLICY_DENIED", "not_regular")),
    ("device", _device, ("POLICY_DENIED", "not_regular"), ("POLICY_DENIED", "not_regular")),
    ("dotdot_prefixed_name", _given("..notes.txt"), "ok", "ok"),
    ("dot_is_root", _given("."), ("POLICY_DENIED", "not_regular"), ("POLICY_DENIED", "protected")),
    ("dot_components", _given("./a.txt"), "ok", "ok"),
]  # fmt: skip


def _check(result: Any, expected: Any) -> None:
    if expected == "ok":
        assert result.ok, result.error
        return
    assert not result.ok
    assert (result.error.code, result.error.details.get("reason")) == expected, result.error


@pytest.mark.parametrize(("setup", "expected"), [(m[1], m[2]) for m in MATRIX], ids=[m[0] for m in MATRIX])
def test_read_file_escape_matrix(fs: FsHost, setup: Callable[[FsHost], str], expected: Any) -> None:
    path = setup(fs)
    started = time.monotonic()
    result = fs.read(path=path)
    assert time.monotonic() - started < 2, "a FIFO or device must never block the host"
    _check(result, expected)
    if expected == "ok":
        assert result.output["content"] == "1: inside text"
    else:
        assert "outside secret" not in repr(result)


@pytest.mark.parametrize(("setup", "expected"), [(m[1], m[3]) for m in MATRIX], ids=[m[0] for m in MATRIX])
def test_edit_file_escape_matrix(fs: FsHost, setup: Callable[[FsHost], str], expected: Any) -> None:
    path = setup(fs)
    old = "inside" if expected == "ok" else "outside"
    try:
        plan = fs.prepare_edit(path=path, old_text=old, new_text="changed")
    except Exception as exc:  # a refusal at prepare: the pipeline's StockadeError
        code, reason = getattr(exc, "code", None), getattr(exc, "details", {}).get("reason")
        assert expected != "ok" and (code, reason) == expected, exc
    else:
        _check(fs.host.execute(plan, fs.host.approve(plan)), expected)
    assert (fs.root / "outside.txt").read_text() == OUTSIDE
    assert (fs.root / "outside_dir" / "secret.txt").read_text() == OUTSIDE
    if expected == "ok":
        assert "changed text" in (fs.ws / path).read_text()


def test_edit_refusal_is_audited_with_requested_path(fs: FsHost) -> None:
    _abs_symlink_file(fs)
    result = fs.host.call(fs.request("fs.edit_file", path="out_file", old_text="outside", new_text="x"))
    assert result.error is not None and result.error.details["reason"] == "symlink"
    refused = [line for line in fs.audit_path.read_text().splitlines() if '"ok":false' in line]
    assert len(refused) == 1 and "'out_file'" in refused[0] and "POLICY_DENIED" in refused[0]


def test_symlink_swapped_in_between_prepare_and_execute_refused(fs: FsHost) -> None:
    (fs.root / "outside.txt").write_text(INSIDE)  # same bytes: only the path trick differs
    plan = fs.prepare_edit(path="a.txt", old_text="inside", new_text="changed")
    approval = fs.host.approve(plan)
    (fs.ws / "a.txt").unlink()
    (fs.ws / "a.txt").symlink_to(fs.root / "outside.txt")
    result = fs.host.execute(plan, approval)
    assert result.error is not None and result.error.details["reason"] == "symlink"
    assert (fs.root / "outside.txt").read_text() == INSIDE


def test_directory_swapped_for_symlink_between_prepare_and_execute_refused(fs: FsHost) -> None:
    (fs.ws / "sub").mkdir()
    (fs.ws / "sub" / "secret.txt").write_text(OUTSIDE)
    plan = fs.prepare_edit(path="sub/secret.txt", old_text="outside", new_text="changed")
    approval = fs.host.approve(plan)
    (fs.ws / "sub").rename(fs.ws / "sub-moved")
    (fs.ws / "sub").symlink_to(fs.root / "outside_dir")  # same content beyond it
    result = fs.host.execute(plan, approval)
    assert result.error is not None and result.error.details["reason"] == "symlink"
    assert (fs.root / "outside_dir" / "secret.txt").read_text() == OUTSIDE


def test_symlink_inside_to_denied_file_refused(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, deny=("private", "*.key"))
    try:
        (fs.ws / "private").mkdir()
        (fs.ws / "private" / "notes.txt").write_text("hidden\n")
        (fs.ws / "id.key").write_text("k\n")
        (fs.ws / "shortcut").symlink_to("private/notes.txt")
        for path in ("private/notes.txt", "id.key", "shortcut"):
            result = fs.read(path=path)
            assert result.error is not None and result.error.details["reason"] == "denied", path
        listing = fs.host.call(fs.request("fs.list", path=".", depth=3))
        assert [e["path"] for e in listing.output["entries"]] == ["shortcut"]
    finally:
        fs.host.close()


def test_protected_paths_refused_for_writes(tmp_path: Path) -> None:
    fs = make_fs_host(tmp_path, protected=("keys",))
    try:
        (fs.ws / ".git").mkdir()
        (fs.ws / ".git" / "config").write_text("[core]\n")
        (fs.ws / "keys").mkdir()
        (fs.ws / "keys" / "k.txt").write_text("key\n")
        for path in (".git/config", "keys/k.txt"):
            result = fs.host.call(fs.request("fs.edit_file", path=path, old_text="e", new_text="x"))
            assert result.error is not None and result.error.details["reason"] == "protected", path
        assert fs.read(path=".git/config").ok  # reads of .git stay allowed
        assert (fs.ws / ".git" / "config").read_text() == "[core]\n"
    finally:
        fs.host.close()


def test_stockade_state_inside_root_protected(tmp_path: Path) -> None:

    ws = tmp_path  # the lock, the state dir and the audit log all lie inside the root
    lock = write_lock(ws / "stockade.lock", [])
    policy = write_policy(ws / "policy.json", allow=FS_PERMISSIONS)
    config = HostConfig(state_dir=ws / ".stockade", workspaces=(WorkspaceGrant(root=ws, project="p"),))
    with Host.open(lock, config=config, secrets=None, policy=policy, audit=ws / "audit.log") as host:
        for path in ("stockade.lock", "audit.log", ".stockade/tool-policy"):
            result = host.call({"principal": ALICE, "session": "s", "tool": "fs.edit_file", "version": "1.0.0",
                                "input": {"path": path, "old_text": "a", "new_text": "b"}})  # fmt: skip
            assert result.error is not None and result.error.details.get("reason") == "protected", path
