"""Spawning a sandboxed command: deadline, cancellation and bounded capture.

One call, one process tree. stdout and stderr are read from pipes as they arrive, each
into a :class:`Captured` that keeps the first and last halves of its cap and counts every
byte, so a command printing gigabytes costs the host a fixed amount of memory. On the
deadline or a cancel, the bwrap process gets ``SIGTERM`` and, after a grace period,
``SIGKILL``; bwrap's death takes the sandbox's PID 1 with it (``--die-with-parent``) and
the kernel kills everything else in that PID namespace, so no double-forked grandchild
survives (a process group kill would miss a ``setsid`` one).

Without the sandbox (``unsafe_exec_without_sandbox``), :func:`run_bare` runs the command
in a new session with a cleared environment and kills its process group: a descendant
that left the group survives; that is part of what "unsafe" means.
"""

from __future__ import annotations

import json
import math
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from host.errors import SandboxUnavailable
from host.sandbox.bwrap import PidsCgroup, SandboxProfile
from host.sandbox.launch import LAUNCH_ERROR
from host.sandbox.seccomp import build_filter

__all__ = ["Captured", "Outcome", "run_bare", "run_sandboxed"]

GRACE_S: Final = 0.5  # s between SIGTERM and SIGKILL
_CHUNK: Final = 65536  # bytes read at a time
_POLL_S: Final = 0.05  # s, how often a cancel is noticed


@dataclass(frozen=True, slots=True)
class Captured:
    """What was kept of one stream: ``head`` and ``tail`` bytes of ``total`` bytes
    (``tail`` is empty unless ``total`` > the cap; nothing between them was kept)."""

    head: bytes
    tail: bytes
    total: int

    @property
    def truncated(self) -> bool:
        """Whether bytes were dropped between head and tail."""
        return self.total > len(self.head) + len(self.tail)


class _Capture:
    __slots__ = ("head", "head_cap", "tail", "tail_cap", "total")

    def __init__(self, cap: int) -> None:
        self.head_cap = cap - cap // 2
        self.tail_cap = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    def result(self) -> Captured:
        return Captured(bytes(self.head), bytes(self.tail), self.total)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a command ended. ``exit_code`` is -1 and ``signal`` non-zero when a signal
    ended it; ``timed_out``/``cancelled`` say the host stopped it."""

    exit_code: int
    signal: int
    timed_out: bool
    cancelled: bool
    stdout: Captured
    stderr: Captured
    duration_ms: float


def run_sandboxed(
    profile: SandboxProfile,
    bwrap: str,
    command: Sequence[str],
    *,
    cwd: str,
    stdin: bytes,
    deadline_s: float,
    cancel: threading.Event | None,
    max_output_bytes: int,
    secrets: Mapping[str, str] | None = None,
    proxy_socket: Path | None = None,
) -> Outcome:
    """Run ``command`` (``command[0]`` = the binary's path) in the sandbox ``profile``,
    with ``secrets`` (secret name -> value) for the profile's ``secret_env`` and, for
    network ``egress``, the Unix socket of the call's :class:`~host.sandbox.proxy.EgressProxy`.

    Raises:
        SandboxUnavailable: the filter cannot be built, bwrap cannot start, or bwrap
            reported that it could not set the sandbox up (nothing of the command ran).
    """
    program, _ = build_filter(profile.network)
    cgroup = PidsCgroup(profile.limits.max_processes)
    seccomp_r, seccomp_w = os.pipe()
    status_r, status_w = os.pipe()
    try:
        os.write(seccomp_w, program)  # < 64 KiB: fits the pipe buffer
        os.close(seccomp_w)
        seccomp_w = -1
        argv = profile.argv(bwrap, seccomp_fd=seccomp_r, status_fd=status_w, cwd=cwd, command=list(command),
                             proxy_socket=proxy_socket)  # fmt: skip
        try:
            proc = subprocess.Popen(
                [*cgroup.launcher(), *argv], stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(seccomp_r, status_w),
                env=profile.environment(secrets or {}), start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            raise SandboxUnavailable(f"bwrap cannot start: {exc.strerror or exc}", reason="bwrap") from exc
        os.close(status_w)
        status_w = -1
        outcome = _supervise(proc, stdin, deadline_s, cancel, max_output_bytes)
        status = _read_all(status_r)
    finally:
        for fd in (seccomp_r, seccomp_w, status_r, status_w):
            if fd >= 0:
                os.close(fd)
        cgroup.close()
    _check_started(status, outcome)
    return outcome


def run_bare(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: bytes,
    deadline_s: float,
    cancel: threading.Event | None,
    max_output_bytes: int,
) -> Outcome:
    """Run ``command`` without a sandbox (``unsafe_exec_without_sandbox`` only), with
    exactly the environment ``env``.

    Raises:
        OSError: the binary cannot be started.
    """
    proc = subprocess.Popen(
        list(command), cwd=cwd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
        start_new_session=True,
    )  # fmt: skip
    return _supervise(proc, stdin, deadline_s, cancel, max_output_bytes, group=True)


def _supervise(
    proc: subprocess.Popen[bytes],
    stdin: bytes,
    deadline_s: float,
    cancel: threading.Event | None,
    cap: int,
    *,
    group: bool = False,
) -> Outcome:
    """Read both streams until they close, stopping the process on deadline or cancel."""
    started = time.monotonic()
    deadline = started + deadline_s
    captures: dict[Any, _Capture] = {proc.stdout: _Capture(cap), proc.stderr: _Capture(cap)}
    pending = memoryview(stdin)
    selector = selectors.DefaultSelector()
    for stream in captures:
        assert stream is not None
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ)
    if proc.stdin is not None:
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
    stopped: str | None = None
    killed_at: float | None = None
    abandon_at = math.inf
    try:
        while selector.get_map() and time.monotonic() < abandon_at:
            now = time.monotonic()
            if stopped is None and (now >= deadline or (cancel is not None and cancel.is_set())):
                stopped = "deadline" if now >= deadline else "cancel"
                _signal(proc, signal.SIGTERM, group=group)
                killed_at = now + GRACE_S
            elif killed_at is not None and now >= killed_at:
                _signal(proc, signal.SIGKILL, group=group)
                killed_at = None
                # Bare mode: a descendant outside the group may hold the pipes open for
                # ever; stop reading a grace period after the kill (the sandbox never needs it).
                abandon_at = now + GRACE_S
            wait = min(_POLL_S, max(deadline - now, 0.001)) if stopped is None else _POLL_S
            pending = _pump(proc, selector, captures, pending, wait)
        if stopped is not None and killed_at is not None:
            remaining = max(killed_at - time.monotonic(), 0)
            try:
                proc.wait(remaining)
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL, group=group)
        returncode = proc.wait()
    finally:
        selector.close()
        if proc.poll() is None:
            _signal(proc, signal.SIGKILL, group=group)
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    out, err = (c.result() for c in captures.values())
    return Outcome(
        exit_code=returncode if returncode >= 0 else -1,
        signal=-returncode if returncode < 0 else 0,
        timed_out=stopped == "deadline",
        cancelled=stopped == "cancel",
        stdout=out,
        stderr=err,
        duration_ms=round((time.monotonic() - started) * 1000, 3),
    )


def _pump(
    proc: subprocess.Popen[bytes],
    selector: selectors.BaseSelector,
    captures: dict[Any, _Capture],
    pending: memoryview,
    wait: float,
) -> memoryview:
    """One round: feed stdin, read what is ready, unregister streams at end of file."""
    for key, _ in selector.select(wait):
        if key.fileobj is proc.stdin:
            pending = _feed_stdin(proc, selector, pending)
            continue
        data = _read(key.fd)
        if data:
            captures[key.fileobj].feed(data)
        elif data is not None:
            selector.unregister(key.fileobj)
    return pending


def _feed_stdin(
    proc: subprocess.Popen[bytes], selector: selectors.BaseSelector, pending: memoryview
) -> memoryview:
    """Write what the pipe takes; a command that closed its stdin gets no more."""
    assert proc.stdin is not None
    try:
        pending = pending[os.write(proc.stdin.fileno(), pending[:_CHUNK]) :]
    except BlockingIOError:
        return pending
    except BrokenPipeError:
        pending = pending[len(pending) :]
    if not pending:
        selector.unregister(proc.stdin)
        proc.stdin.close()
    return pending


def _read(fd: int) -> bytes | None:
    """The next chunk, ``b""`` at end of stream, ``None`` when nothing is ready after all."""
    try:
        return os.read(fd, _CHUNK)
    except BlockingIOError:
        return None


def _signal(proc: subprocess.Popen[bytes], sig: int, *, group: bool) -> None:
    try:
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, _CHUNK):
        chunks.append(chunk)
    return b"".join(chunks)


def _check_started(status: bytes, outcome: Outcome) -> None:
    """Refuse when bwrap never started the command (setup failed inside bwrap)."""
    started = False
    for line in status.splitlines():
        try:
            started = started or "child-pid" in json.loads(line)
        except ValueError:
            continue
    text = (outcome.stderr.head + outcome.stderr.tail).decode("utf-8", "replace")
    failed_setup = outcome.exit_code == 1 and text.startswith(("bwrap: ", "prlimit: ", LAUNCH_ERROR))
    if not started or failed_setup:
        first = text.splitlines()[0][:300] if text else f"exit status {outcome.exit_code}"
        raise SandboxUnavailable(f"the sandbox could not be set up: {first}", reason="setup_failed")
