"""Plugins read the workspace through read-only preopens, and through nothing else.

A real componentize-py plugin (``tests/plugins/reader_py``, ``workspace.read = ["docs",
"src"]``) runs under a real Host whose configuration grants ``ws/`` to alice in project
``p``. Every escape of the matrix is tried from inside the guest, through the pipeline
(``Host.call``), and the audit records what each call was given.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from host import CallRequest, CallResult, Host, HostConfig, Principal
from host.config import WorkspaceGrant
from host.tools import preopens
from host.tools.paths import Workspace
from host.tools.preopens import FIFO_GRACE_S, PluginReads, open_plugin_reads, unblock_fifos_after
from tests.support.bundles import lock_entry, write_bundle, write_lock
from tests.support.hosts import write_policy
from tests.support.plugins import SHARED_ARTIFACTS_DIR, build_test_plugin

pytestmark = pytest.mark.slow

ALICE = Principal(project="p", subject="alice")
BOB = Principal(project="q", subject="bob")
SECRET = "OUTSIDE-SECRET-4242"
TIMEOUT_MS = 2_000


@dataclass
class Reader:
    host: Host
    ws: Path
    outside: Path
    audit: Path

    def call(self, tool: str, principal: Principal = ALICE, **input: Any) -> CallResult:
        return self.host.call(
            CallRequest(principal=principal, session="s1", tool=tool, version="1.0.0", input=input)
        )

    def read(self, path: str, principal: Principal = ALICE) -> dict[str, Any]:
        result = self.call("reader.read", principal, path=path)
        assert result.ok, result.error
        return result.output  # type: ignore[no-any-return]

    def last_outcome(self) -> dict[str, Any]:
        records = [json.loads(line) for line in self.audit.read_text().splitlines()]
        return next(r for r in reversed(records) if r.get("kind", r.get("type")) == "call.outcome")


def _layout(root: Path) -> tuple[Path, Path]:
    ws, outside = root / "ws", root / "outside"
    for d in (ws / "docs" / "sub", ws / "src", ws / "private", outside):
        d.mkdir(parents=True)
    (ws / "docs" / "a.txt").write_text("alpha\n")
    (ws / "docs" / "sub" / "b.txt").write_text("beta\n")
    (ws / "src" / "app.py").write_text("print('src')\n")
    (ws / "private" / "p.txt").write_text("private\n")
    (outside / "secret.txt").write_text(SECRET)
    (ws / "..notes.txt").write_text("notes\n")
    os.symlink(outside / "secret.txt", ws / "docs" / "abs_file_link")
    os.symlink(outside, ws / "docs" / "abs_dir_link")
    os.symlink("../../outside/secret.txt", ws / "docs" / "rel_out_link")
    os.symlink("a.txt", ws / "docs" / "inside_link")
    os.symlink("../private/p.txt", ws / "docs" / "sibling_link")
    os.link(outside / "secret.txt", ws / "docs" / "hard_out")
    return ws, outside


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    root = tmp_path_factory.mktemp("preopens")
    ws, outside = _layout(root)
    build = build_test_plugin("reader_py")
    manifest = json.loads(build.manifest_path.read_bytes())
    manifest["limits"]["timeout_ms"] = TIMEOUT_MS
    bundle = write_bundle(root / "bundles" / "reader", manifest, build.module_path.read_bytes())
    lock = write_lock(root / "stockade.lock", [lock_entry(root, bundle)])
    tools = ("reader.read", "reader.list", "reader.change")
    policy = write_policy(root / "policy.json", allow=[f"tool.call:{t}" for t in tools])
    policy.grant_role("q", "bob", "user")
    config = HostConfig(
        state_dir=root / "state",
        artifact_cache_dir=SHARED_ARTIFACTS_DIR,
        workspaces=(WorkspaceGrant(root=ws, project="p"),),
    )
    audit = root / "audit.log"
    with Host.open(lock, config=config, secrets=None, policy=policy, audit=audit) as host:
        yield Reader(host, ws, outside, audit)


def test_declared_directory_is_readable_at_its_guest_path(reader: Reader) -> None:
    assert reader.read("/workspace/docs/a.txt") == {"ok": True, "text": "alpha\n"}
    assert reader.read("/workspace/docs/sub/b.txt") == {"ok": True, "text": "beta\n"}
    assert reader.read("/workspace/src/app.py")["text"] == "print('src')\n"
    outcome = reader.last_outcome()["outcome"]["workspace"]
    assert outcome == {"read_only": ["/workspace/docs", "/workspace/src"], "withheld": []}


def test_undeclared_directory_and_the_root_are_not_visible(reader: Reader) -> None:
    for path in ("/workspace/private/p.txt", "/workspace/..notes.txt", "/workspace"):
        seen = reader.read(path)
        assert seen["ok"] is False and "alpha" not in json.dumps(seen)
    listing = reader.call("reader.list", path="/workspace/docs").output
    assert listing["ok"] is True and "a.txt" in listing["entries"]


@pytest.mark.parametrize(
    "path",
    [
        "/workspace/docs/../../outside/secret.txt",  # relative ..
        "/workspace/docs/../private/p.txt",  # .. into an undeclared sibling
        "{outside}/secret.txt",  # absolute host path
        "/workspace/docs/abs_file_link",  # symlink to an outside file
        "/workspace/docs/abs_dir_link/secret.txt",  # symlink to an outside directory
        "/workspace/docs/rel_out_link",  # relative symlink out
        "/workspace/docs/sibling_link",  # symlink to an undeclared part of the workspace
        "/workspace/docs/a.txt\x00/../../outside/secret.txt",  # NUL
    ],
)
def test_escape_from_a_read_only_preopen_refused(reader: Reader, path: str) -> None:
    seen = reader.read(path.format(outside=reader.outside))
    assert seen["ok"] is False
    assert SECRET not in json.dumps(seen) and "private" not in seen.get("text", "")


def test_symlink_inside_the_preopen_is_followed(reader: Reader) -> None:
    assert reader.read("/workspace/docs/inside_link") == {"ok": True, "text": "alpha\n"}


def test_hard_link_to_an_outside_file_is_readable_the_documented_limit(reader: Reader) -> None:
    # The kernel cannot tell a hard link from the inside; a WASI preopen cannot refuse
    # st_nlink > 1 as the fs.* tools do (docs/workspace.md says so).
    assert reader.read("/workspace/docs/hard_out") == {"ok": True, "text": SECRET}
    fs_view = open_plugin_reads(None, ["docs"], internal=())
    assert fs_view.withheld == [("docs", "no_workspace")]


@pytest.mark.parametrize(
    ("action", "path"),
    [
        ("create", "/workspace/docs/planted.txt"),
        ("append", "/workspace/docs/a.txt"),
        ("mkdir", "/workspace/docs/newdir"),
        ("symlink", "/workspace/docs/planted_link"),
        ("rename", "/workspace/docs/a.txt"),
        ("unlink", "/workspace/docs/a.txt"),
        ("create", "/tmp/planted.txt"),
    ],
)
def test_read_only_preopen_refuses_every_change(reader: Reader, action: str, path: str) -> None:
    before = sorted(os.listdir(reader.ws / "docs"))
    result = reader.call("reader.change", action=action, path=path)
    assert result.ok and result.output["ok"] is False, result.output
    assert sorted(os.listdir(reader.ws / "docs")) == before
    assert (reader.ws / "docs" / "a.txt").read_text() == "alpha\n"


def test_principal_without_a_workspace_grant_gets_no_preopen(reader: Reader) -> None:
    seen = reader.read("/workspace/docs/a.txt", principal=BOB)
    assert seen["ok"] is False
    withheld = reader.last_outcome()["outcome"]["workspace"]
    assert withheld == {
        "read_only": [],
        "withheld": [{"path": "docs", "reason": "no_workspace"}, {"path": "src", "reason": "no_workspace"}],
    }


def test_guest_blocked_on_a_fifo_ends_at_its_deadline(reader: Reader) -> None:
    # Opening a FIFO blocks inside wasmtime, where the epoch deadline cannot reach; the
    # host unblocks it past the deadline, and the call ends as SANDBOX_TIMEOUT.
    fifo = reader.ws / "docs" / "sub" / "pipe"
    os.mkfifo(fifo)
    try:
        started = time.monotonic()
        result = reader.call("reader.read", path="/workspace/docs/sub/pipe")
        elapsed = time.monotonic() - started
    finally:
        fifo.unlink()
    assert result.error is not None and result.error.code == "SANDBOX_TIMEOUT"
    assert elapsed < TIMEOUT_MS / 1000 + FIFO_GRACE_S + 3


def test_unix_socket_in_the_preopen_does_not_block(reader: Reader) -> None:
    path = reader.ws / "docs" / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        try:
            seen = reader.read("/workspace/docs/sock")
        finally:
            path.unlink()
    assert seen["ok"] is False


def test_device_node_in_the_preopen_reads_like_a_file_without_hanging(reader: Reader) -> None:
    # Creating a device node needs CAP_MKNOD, so only an operator (or root) can put one in
    # a workspace; wasmtime opens it like a file and the guest's limits bound the reads.
    path = reader.ws / "docs" / "null"
    try:
        os.mknod(path, 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("this machine refuses mknod (no CAP_MKNOD)")
    try:
        assert reader.read("/workspace/docs/null") == {"ok": True, "text": ""}
    finally:
        path.unlink()


# -- which declared directories are given (no guest needed) ------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Workspace]:
    ws, _ = _layout(tmp_path)
    (ws / ".stockade").mkdir()
    os.symlink(".stockade", ws / "state_link")
    root = Workspace(ws, protected=(".git", ".stockade"), deny=())
    yield root
    root.close()


def _given(reads: PluginReads) -> list[str]:
    try:
        return [p.guest_path for p in reads.preopens]
    finally:
        reads.close()


@pytest.mark.parametrize(
    ("deny", "declared", "withheld"),
    [
        (("docs/secret.txt",), "docs", "denied"),  # a denied file beneath it
        (("docs",), "docs/sub", "denied"),  # a denied parent
        (("*.env",), "docs", "denied"),  # a glob that can match anywhere
        (("d*",), "docs", "denied"),
        (("src/*",), "docs", None),  # a glob that cannot reach docs
        (("private",), "docs", None),
        (("private",), ".", "denied"),  # the root holds every denied path
    ],
)
def test_deny_list_that_could_reach_beneath_withholds_the_directory(
    tmp_path: Path, deny: tuple[str, ...], declared: str, withheld: str | None
) -> None:
    ws, _ = _layout(tmp_path)
    root = Workspace(ws, protected=(), deny=deny)
    try:
        reads = open_plugin_reads(root, [declared], internal=())
        assert reads.withheld == ([] if withheld is None else [(declared, withheld)])
        assert len(_given(reads)) == (1 if withheld is None else 0)
    finally:
        root.close()


@pytest.mark.parametrize(
    ("declared", "reason"),
    [
        (".", "protected"),  # the root holds the state directory
        (".stockade", "protected"),
        ("state_link", "protected"),  # a symlink beneath the root to the state directory
        ("docs/abs_dir_link", "path_escape"),  # a symlink out of the root
        ("missing", "not_found"),
        ("docs/a.txt", "not_found"),  # not a directory
    ],
)
def test_directory_withheld_with_its_reason(workspace: Workspace, declared: str, reason: str) -> None:
    reads = open_plugin_reads(workspace, [declared], internal=(".stockade",))
    assert _given(reads) == []
    assert reads.withheld == [(declared, reason)]


def test_given_directories_hold_fds_until_closed(workspace: Workspace) -> None:
    reads = open_plugin_reads(workspace, ["docs", "src"], internal=(".stockade",))
    fds = [p.fd for p in reads.preopens]
    assert [p.guest_path for p in reads.preopens] == ["/workspace/docs", "/workspace/src"]
    assert all(os.fstat(fd) for fd in fds)
    reads.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_fifo_unblocker_costs_nothing_on_a_call_that_ends_in_time(workspace: Workspace) -> None:
    reads = open_plugin_reads(workspace, ["docs"], internal=())
    try:
        os.mkfifo(workspace.root / "docs" / "pipe")
        with unblock_fifos_after(reads, 5.0):
            pass  # the call ended at once: nothing was written to the FIFO
        fd = os.open(workspace.root / "docs" / "pipe", os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert os.read(fd, 16) == b""
        finally:
            os.close(fd)
    finally:
        reads.close()


@pytest.mark.parametrize(("budget", "poked"), [(5, False), (1000, True)])
def test_fifo_walk_stops_at_its_entry_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int, poked: bool
) -> None:
    monkeypatch.setattr(preopens, "FIFO_SCAN_ENTRIES", budget)
    (tmp_path / "deep").mkdir()
    for i in range(10):
        (tmp_path / f"f{i}").write_text("x")
    os.mkfifo(tmp_path / "deep" / "pipe")
    reader = os.open(tmp_path / "deep" / "pipe", os.O_RDONLY | os.O_NONBLOCK)  # a waiting reader
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        preopens._poke_fifos(root)
        try:
            got = os.read(reader, 16)
        except BlockingIOError:
            got = b""
    finally:
        os.close(root)
        os.close(reader)
    assert got == (b"\n" if poked else b"")
