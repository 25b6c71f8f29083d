"""``exec.run``'s sandbox against the escapes measured before it existed.

The allowlist is not the boundary: a declared ``git`` runs a shell through
``-c alias.x=!…`` and a declared ``python3`` runs anything through ``-c``. Each test runs
such a command through the real Host (policy, approval, audit) in real bubblewrap and
checks what the process could reach: files outside the binds, a loopback listener the
test starts, the host's environment, surviving descendants (scanned in ``/proc``), the
process limit, the output cap and the host's memory while reading it, and a host without
``bwrap``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from host.config import CommandEntry
from host.errors import PolicyDenied, SandboxUnavailable
from host.sandbox import Limits, SandboxProfile, run_sandboxed
from tests.support.commands import ExecHost, make_exec_host
from tests.support.secrets import make_store

REPO = Path(__file__).resolve().parents[2]
BWRAP = shutil.which("bwrap")
if BWRAP is None and os.environ.get("STOCKADE_REQUIRE_BWRAP") == "1":
    raise RuntimeError("STOCKADE_REQUIRE_BWRAP=1 but bwrap is not installed")
pytestmark = pytest.mark.skipif(BWRAP is None, reason="bubblewrap (bwrap) is not installed")

PYTHON = CommandEntry(name="python3", path=Path("/usr/bin/python3"), max_timeout_ms=10_000)
SH = CommandEntry(name="sh", path=Path("/bin/sh"), max_timeout_ms=10_000, max_processes=32)
GIT = CommandEntry(name="git", path=Path("/usr/bin/git"), workspace="rw", env={"GIT_CONFIG_NOSYSTEM": "1"})


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[ExecHost]:
    fixture = make_exec_host(tmp_path, [PYTHON, SH, GIT])
    try:
        yield fixture
    finally:
        fixture.host.close()


def _out(ex: ExecHost, *argv: str, **input: object) -> dict[str, object]:
    result = ex.run(*argv, **input)
    assert result.ok, result.error
    assert isinstance(result.output, dict)
    return result.output


def _py(ex: ExecHost, code: str) -> dict[str, object]:
    return _out(ex, "python3", "-c", textwrap.dedent(code))


def _accepted_any(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return False
    conn.close()
    return True


def _sleepers(marker: str) -> list[int]:
    """Processes anywhere on the host whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b"pytest" not in cmdline:
            found.append(int(entry))
    return found


# -- the measured escapes ----------------------------------------------------------------


def test_git_alias_shell_cannot_write_outside_workspace_or_open_socket(
    ex: ExecHost, tmp_path: Path, listener: socket.socket
) -> None:
    outside = tmp_path / "pwned.txt"
    port = listener.getsockname()[1]
    payload = (
        f"!echo pwned > {outside}; echo inside > escaped.txt; "
        f"python3 -c 'import socket; s = socket.socket(); s.connect((\"127.0.0.1\", {port}))'"
    )
    out = _out(ex, "git", "-c", f"alias.x={payload}", "x")
    assert not outside.exists()  # the host path is not in the sandbox
    assert (ex.ws / "escaped.txt").read_text() == "inside\n"  # the workspace is (rw entry)
    assert "Operation not permitted" in str(out["stderr"]) and out["exit_code"] != 0
    assert not _accepted_any(listener)


def test_python_cannot_read_host_file_outside_binds(ex: ExecHost, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("TOP SECRET")
    out = _py(ex, f"""
        import os
        for path in ({str(secret)!r}, "/etc/shadow", "/root", "/home", "/run"):
            print(path, os.path.exists(path))
        try:
            open({str(secret)!r}).read()
        except OSError as exc:
            print("refused", type(exc).__name__)
    """)
    assert "TOP SECRET" not in str(out["stdout"])
    assert out["stdout"] == (
        f"{secret} False\n/etc/shadow False\n/root False\n/home False\n/run False\nrefused FileNotFoundError\n"
    )


def test_python_cannot_connect_to_loopback_listener(ex: ExecHost, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    out = _py(ex, f"""
        import errno, socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=1)
            print("connected")
        except OSError as exc:
            print("refused", errno.errorcode.get(exc.errno))
        socket.socket(socket.AF_UNIX).close()
        print("unix ok")
    """)
    assert out["stdout"] == "refused EPERM\nunix ok\n"  # seccomp: no AF_INET socket at all
    assert not _accepted_any(listener)


def test_host_environment_canary_not_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_CANARY", "canary-7f3a")
    entry = CommandEntry(name="python3", path=Path("/usr/bin/python3"), env={"TOOL_MODE": "ci"})
    ex = make_exec_host(tmp_path, [entry])
    try:
        out = _py(ex, "import json, os; print(json.dumps(dict(os.environ), sort_keys=True))")
    finally:
        ex.host.close()
    env = json.loads(str(out["stdout"]))
    assert env == {"HOME": "/tmp", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin",
                   "PWD": "/workspace", "TOOL_MODE": "ci", "TZ": "UTC"}  # fmt: skip


def test_secret_env_reaches_process_only_by_mapping_and_is_scrubbed(tmp_path: Path) -> None:
    store = make_store(tmp_path / "secrets")
    token = "ghp-secret-4c1d9e7f"
    store.set("p", "alice", "github_token", token)
    entry = CommandEntry(name="python3", path=Path("/usr/bin/python3"), secret_env={"GH_TOKEN": "github_token"})
    ex = make_exec_host(tmp_path, [entry], secrets=store)
    try:
        plan = ex.prepare(argv=["python3", "-c", "import os; v = os.environ['GH_TOKEN']; print(v, len(v))"])
        assert token not in json.dumps(plan.effect) and "github_token" in json.dumps(plan.effect)
        result = ex.host.execute(plan, ex.host.approve(plan))
    finally:
        ex.host.close()
    assert result.ok, result.error
    assert result.output["stdout"] == f"[REDACTED] {len(token)}\n"  # it was there, and is scrubbed
    assert token not in ex.audit_path.read_text()


def test_missing_secret_refused_credential_unavailable(tmp_path: Path) -> None:
    entry = CommandEntry(name="python3", path=Path("/usr/bin/python3"), secret_env={"GH_TOKEN": "github_token"})
    ex = make_exec_host(tmp_path, [entry], secrets=make_store(tmp_path / "secrets"))
    try:
        result = ex.run("python3", "-c", "print(1)")
    finally:
        ex.host.close()
    assert result.error is not None and result.error.code == "CREDENTIAL_UNAVAILABLE"
    assert result.error.details["secret"] == "github_token"


def test_setsid_grandchild_killed_at_one_second_deadline(ex: ExecHost) -> None:
    marker = "97.31"  # a sleep length nothing else on this machine uses
    started = time.monotonic()
    out = _out(ex, "sh", "-c", f"sleep {marker} & (setsid sleep {marker} &); sleep {marker}", timeout_ms=1000)
    elapsed = time.monotonic() - started
    assert out["timed_out"] is True and out["exit_code"] == -1 and out["signal"] in (9, 15)
    assert elapsed < 3.5
    assert _sleepers(f"sleep\x00{marker}") == []


def test_fork_bomb_ends_at_process_limit_and_host_stays_responsive(ex: ExecHost) -> None:
    gaps: list[float] = []
    result: dict[str, object] = {}

    def bomb() -> None:
        result.update(_out(ex, "sh", "-c", "f(){ f | f & }; f; sleep 1; echo still-here", timeout_ms=5000))

    worker = threading.Thread(target=bomb)
    worker.start()
    last = time.monotonic()
    while worker.is_alive():
        time.sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
    worker.join()
    assert "Cannot fork" in str(result["stderr"])  # the limit (32 processes) was hit
    assert result["timed_out"] is False  # it ended at the limit, not at the deadline
    assert max(gaps) < 1.0  # the host's own thread kept running
    assert _out(ex, "sh", "-c", "echo ok")["stdout"] == "ok\n"


def test_ten_megabytes_of_stdout_truncated_with_bounded_host_rss(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from host.config import CommandEntry
        from tests.support.commands import make_exec_host

        def hwm():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

        entry = CommandEntry(name="sh", path=Path("/bin/sh"))
        ex = make_exec_host(Path({str(tmp_path)!r}), [entry])
        ex.run("sh", "-c", "head -c 100000 /dev/zero | tr '\\\\0' a")  # warm every code path
        before = hwm()
        result = ex.run("sh", "-c", "head -c 10000000 /dev/zero | tr '\\\\0' a; echo done >&2")
        after = hwm()
        ex.host.close()
        out = result.output
        print(json.dumps({{"growth": after - before, "bytes": out["stdout_bytes"], "cut": out["stdout_truncated"],
                          "kept": len(out["stdout"]), "stderr": out["stderr"]}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["bytes"] == 10_000_000 and report["cut"] is True and report["stderr"] == "done\n"
    assert report["kept"] <= 64 * 1024 + 100
    assert report["growth"] < 2 * 1024 * 1024, report


def test_path_without_bwrap_refused_sandbox_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    ex = make_exec_host(tmp_path, [PYTHON])
    try:
        with pytest.raises(SandboxUnavailable) as caught:
            ex.prepare(argv=["python3", "-c", "print(1)"])
    finally:
        ex.host.close()
    assert caught.value.code == "SANDBOX_UNAVAILABLE" and caught.value.details["reason"] == "no_bwrap"
    assert "bubblewrap" in (caught.value.hint or "")


def test_unsafe_exec_without_sandbox_runs_bare_and_is_audited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    ex = make_exec_host(tmp_path, [PYTHON], unsafe_exec_without_sandbox=True)
    try:
        plan = ex.prepare(argv=["python3", "-c", "import os; print(os.getcwd())"])
        assert "UNSAFE" in (plan.preview.detail or "")
        result = ex.host.execute(plan, ex.host.approve(plan))
    finally:
        ex.host.close()
    assert result.ok and result.output["stdout"] == f"{ex.ws}\n"  # the host's real path: no sandbox
    records = [json.loads(line) for line in ex.audit_path.read_text().splitlines()]
    accepted = next(r for r in records if r["kind"] == "lock.accepted")
    outcome = next(r for r in records if r["kind"] == "call.outcome")
    assert accepted["unsafe_exec_without_sandbox"] is True
    assert outcome["outcome"]["sandbox"] == "none" and outcome["outcome"]["profile_digest"] == "none"
    assert outcome["outcome"]["landlock"] == "unavailable"  # bare: no launcher, no Landlock


# -- the rest of the profile --------------------------------------------------------------


def test_git_dir_read_only_in_read_write_workspace(ex: ExecHost) -> None:
    (ex.ws / ".git").mkdir()
    (ex.ws / ".git" / "config").write_text("[core]\n")
    out = _out(ex, "git", "-c", "alias.x=!echo hook >> .git/config; echo ok > file.txt", "x")
    assert "Read-only file system" in str(out["stderr"])
    assert (ex.ws / ".git" / "config").read_text() == "[core]\n"
    assert (ex.ws / "file.txt").read_text() == "ok\n"


def test_read_only_entry_cannot_write_workspace(ex: ExecHost) -> None:
    out = _py(ex, "open('new.txt', 'w')")
    assert "Read-only file system" in str(out["stderr"]) and out["exit_code"] == 1
    assert not (ex.ws / "new.txt").exists()


def test_denied_workspace_path_hidden_from_command(tmp_path: Path) -> None:
    ex = make_exec_host(tmp_path, [PYTHON], grant={"deny": ["secrets", "key.pem"]})
    try:
        (ex.ws / "secrets").mkdir()
        (ex.ws / "secrets" / "token").write_text("s3cr3t")
        (ex.ws / "key.pem").write_text("PRIVATE")
        out = _py(ex, """
            import os
            print(os.listdir("secrets"))
            try:
                print(repr(open("key.pem").read()))
            except OSError as exc:
                print(type(exc).__name__)
        """)
    finally:
        ex.host.close()
    assert out["stdout"] == "[]\nPermissionError\n"  # an empty tmpfs; /dev/null bound nodev


def test_glob_deny_list_refused_as_unenforceable(tmp_path: Path) -> None:
    ex = make_exec_host(tmp_path, [PYTHON], grant={"deny": ["*.pem"]})
    try:
        with pytest.raises(PolicyDenied) as caught:
            ex.prepare(argv=["python3", "-c", "print(1)"])
    finally:
        ex.host.close()
    assert caught.value.details["reason"] == "deny_unenforceable"


@pytest.mark.parametrize(
    ("call", "expect"),
    [
        ("libc.unshare(0x10000000)", "EPERM"),  # CLONE_NEWUSER
        ("libc.ptrace(16, 1, 0, 0)", "EPERM"),  # PTRACE_ATTACH to the sandbox's PID 1
        ("libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)", "EPERM"),
        ("libc.syscall(321, 0, 0, 0)", "EPERM"),  # bpf
        ("libc.syscall(425, 8, 0)", "EPERM"),  # io_uring_setup
        ("libc.ioctl(1, 0x5412, ctypes.c_char_p(b'x'))", "EPERM"),  # TIOCSTI (else ENOTTY on a pipe)
    ],
    ids=["unshare", "ptrace", "mount", "bpf", "io_uring", "tiocsti"],
)
def test_seccomp_denies_sandbox_widening_syscalls(ex: ExecHost, call: str, expect: str) -> None:
    out = _py(ex, f"""
        import ctypes, errno
        libc = ctypes.CDLL(None, use_errno=True)
        result = {call}
        print(result, errno.errorcode.get(ctypes.get_errno()))
    """)
    assert out["stdout"] == f"-1 {expect}\n"


def test_cancel_kills_process_tree(ex: ExecHost) -> None:
    marker = "97.32"
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    started = time.monotonic()
    result = ex.run("sh", "-c", f"(setsid sleep {marker} &); sleep {marker}", cancel=cancel)
    assert result.error is not None and result.error.code == "CANCELLED"
    assert time.monotonic() - started < 3
    assert _sleepers(f"sleep\x00{marker}") == []


def test_bwrap_setup_failure_refused_sandbox_unavailable(tmp_path: Path) -> None:
    # A bind whose source is missing makes bwrap fail after it started: nothing ran, and
    # the refusal is not mistaken for the command's own exit status 1.
    limits = Limits(cpu_s=5, memory_bytes=1 << 30, max_processes=16, max_file_bytes=1 << 20, max_open_files=64)
    profile = SandboxProfile(workspace=tmp_path / "gone", mode="ro", read_only=(), binary=Path("/bin/true"),
                             network="none", limits=limits)  # fmt: skip
    with pytest.raises(SandboxUnavailable) as caught:
        run_sandboxed(profile, str(BWRAP), ["/bin/true"], cwd=".", stdin=b"", deadline_s=5, cancel=None,
                      max_output_bytes=1024)  # fmt: skip
    assert caught.value.details["reason"] == "setup_failed" and "bwrap:" in caught.value.message


def test_undeclared_command_refused_command_not_allowed(ex: ExecHost) -> None:
    with pytest.raises(PolicyDenied) as caught:
        ex.prepare(argv=["/bin/bash", "-c", "id"])
    assert caught.value.details["reason"] == "command_not_allowed"
    with pytest.raises(PolicyDenied):
        ex.prepare(argv=["bash", "-c", "id"])  # not declared, though it is on PATH


def test_unsafe_bare_mode_returns_although_setsid_grandchild_holds_pipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without the sandbox nothing kills a descendant that left the process group (that is
    # what "unsafe" means), but the call must still end: reading stops after the kill.
    marker = "97.33"
    monkeypatch.setenv("PATH", str(tmp_path))
    ex = make_exec_host(tmp_path, [SH], unsafe_exec_without_sandbox=True)
    try:
        started = time.monotonic()
        out = _out(ex, "sh", "-c", f"(setsid sleep {marker} &); sleep {marker}", timeout_ms=500)
        elapsed = time.monotonic() - started
    finally:
        ex.host.close()
        for pid in _sleepers(f"sleep\x00{marker}"):  # the survivor this test knowingly made
            os.kill(pid, 9)
    assert out["timed_out"] is True and elapsed < 3
