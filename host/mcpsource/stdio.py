"""A bounded JSON-RPC client for one MCP server process over stdio.

The host starts the server itself instead of through the SDK's ``stdio_client`` because
it must control the spawn and bound every byte it reads:

- **environment**: exactly the declared ``env`` plus the declared secret variables;
  nothing is inherited (no ``PATH``, ``HOME``, proxy or cloud credentials);
- **working directory**: the declared ``cwd``, else a fresh private directory (0700)
  under the host's state directory;
- **descriptors**: ``close_fds=True``; the child gets only its three pipes;
- **process group**: ``start_new_session=True`` (own session and group), so the whole
  group is killed on timeout, on protocol errors, on :meth:`StdioConnection.close` and at
  interpreter exit;
- **dies with the host**: ``PR_SET_PDEATHSIG`` = SIGKILL (Linux), set in the child by a
  long-lived spawner thread, so even a SIGKILLed host takes its servers with it;
- **resource limits** (``setrlimit`` in the child before ``exec``): no core dumps,
  256 descriptors, and ``RLIMIT_AS`` when the declaration sets ``memory_bytes``;
- **messages**: newline-delimited JSON-RPC read in a reader thread with a running byte
  count: a message longer than ``max_message_bytes`` kills the server (the bytes are
  never buffered beyond the bound); each line is parsed by the host's strict, bounded
  parser (:func:`host.mcpsource.rpc.parse_message`: nesting, UTF-8, syntax, duplicate
  keys), and a malformed one kills the server at once (``malformed``).

Every failure is a :class:`~host.errors.McpUnavailable` (or its child
:class:`~host.errors.McpTimeout`); a request never waits past its deadline.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ctypes.util
import itertools
import json
import logging
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Final, final

from host.errors import McpTimeout, McpUnavailable
from host.mcpsource.rpc import Pending, cancelled, parse_message, wait_answer

__all__ = ["StdioConnection"]

_log = logging.getLogger("stockade.mcpsource")

PROTOCOL_VERSION: Final = "2025-11-25"  # handshake era (initialize); the SDK serves it
MAX_FDS: Final = 256  # RLIMIT_NOFILE of a server process
STDERR_TAIL: Final = 4096  # bytes of the server's stderr kept for error messages
_READ_CHUNK: Final = 65536  # bytes per os.read

_live: weakref.WeakSet[StdioConnection] = weakref.WeakSet()


@atexit.register
def _kill_all() -> None:  # pragma: no cover - runs at interpreter exit
    for conn in list(_live):
        conn.close()


_PR_SET_PDEATHSIG: Final = 1  # linux/prctl.h
try:  # Linux: the child is SIGKILLed when the thread that forked it dies (see _Spawner)
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
except OSError:  # pragma: no cover - not glibc/musl Linux
    _LIBC = None


def _limits_in_child(memory_bytes: int | None, parent: int) -> None:
    """Runs in the child between fork and exec: only async-signal-safe-enough calls."""
    if _LIBC is not None and sys.platform == "linux":
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the host died before prctl took effect
            os._exit(1)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FDS, MAX_FDS))
    if memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


class _Spawner:
    """One long-lived thread that forks every server.

    ``PR_SET_PDEATHSIG`` fires when the *thread* that forked the child exits, not the
    process; forking from a call's worker thread would kill the server when that thread
    ends. This thread lives as long as the host process, so a server dies with the host
    even when the host is SIGKILLed (and no ``atexit`` handler runs).
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._started = False
        self._lock = threading.Lock()

    def run(self, job: Callable[[], Any]) -> Any:
        with self._lock:
            if not self._started:
                threading.Thread(target=self._loop, name="mcp-spawner", daemon=True).start()
                self._started = True
        future: Future[Any] = Future()
        self._jobs.put((job, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            job, future = self._jobs.get()
            try:
                future.set_result(job())
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)


_SPAWNER = _Spawner()


@final
class StdioConnection:
    """One running server process and its JSON-RPC session (initialize already done).

    Args:
        name: the source name (for messages).
        command, args: what to execute (``command`` absolute).
        env: the complete environment of the child.
        cwd: its working directory.
        max_message_bytes: the longest JSON-RPC message accepted from the server.
        memory_bytes: ``RLIMIT_AS`` of the child, or ``None``.
        timeout_s: deadline of the handshake.
        launcher: an argv prefix the command runs under (the bwrap sandbox of
            ``transport.sandbox = "bwrap"``; its process is then the one killed).
        pass_fds: descriptors the launcher needs (the seccomp program).

    Raises:
        McpUnavailable: the process cannot start, or the handshake fails.
        McpTimeout: the handshake does not finish in ``timeout_s``.
    """

    def __init__(
        self,
        *,
        name: str,
        command: str,
        args: tuple[str, ...],
        env: Mapping[str, str],
        cwd: Path,
        max_message_bytes: int,
        memory_bytes: int | None,
        timeout_s: float,
        launcher: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.name = name
        self._max = max_message_bytes
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._failure: McpUnavailable | None = None
        self._stderr = bytearray()
        try:
            parent = os.getpid()
            self._proc: subprocess.Popen[bytes] = _SPAWNER.run(
                lambda: subprocess.Popen(
                    [*launcher, command, *args],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=dict(env),
                    cwd=cwd,
                    close_fds=True,
                    pass_fds=tuple(pass_fds),
                    start_new_session=True,
                    preexec_fn=lambda: _limits_in_child(memory_bytes, parent),  # noqa: PLW1509 - setrlimit, prctl
                )
            )
        except OSError as exc:
            raise McpUnavailable(
                f"MCP source {name}: cannot start {command}: {exc.strerror}",
                source=name,
                reason="start_failed",
            ) from None
        _live.add(self)
        threading.Thread(target=self._read_stdout, name=f"mcp-{name}-out", daemon=True).start()
        threading.Thread(target=self._read_stderr, name=f"mcp-{name}-err", daemon=True).start()
        try:
            self.server_info = self.request(
                "initialize",
                {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "stockade", "version": "1"},
                },
                timeout_s=timeout_s,
            )
            self.notify("notifications/initialized", {})
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """The server's process id (also its process group id)."""
        return self._proc.pid

    @property
    def alive(self) -> bool:
        """Whether the process runs and the session is usable."""
        return self._failure is None and self._proc.poll() is None

    # -- requests ------------------------------------------------------------------------

    def request(
        self,
        method: str,
        params: Mapping[str, Any],
        *,
        timeout_s: float,
        cancel: threading.Event | None = None,
    ) -> Any:
        """Send one request and wait for its result, at most ``timeout_s``.

        Raises:
            McpTimeout: no answer in time (the server is killed: it may be wedged).
            CallCancelled: ``cancel`` was set; the server was sent ``notifications/cancelled``
                and keeps running.
            McpUnavailable: the server died, broke the protocol, or answered a JSON-RPC error.
        """
        deadline = time.monotonic() + timeout_s
        pending = Pending()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            request_id = next(self._ids)
            self._pending[request_id] = pending
        try:
            self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": dict(params)})
            outcome = wait_answer(pending.done, deadline, cancel)
            if outcome == "cancelled":
                with contextlib.suppress(McpUnavailable):
                    self.notify("notifications/cancelled",
                                {"requestId": request_id, "reason": "the caller cancelled the call"})
                raise cancelled(self.name, method)
            if outcome == "timeout":
                timeout = McpTimeout(
                    f"MCP source {self.name} did not answer {method} within {timeout_s:g} s; "
                    "the server was stopped and will be restarted",
                    source=self.name,
                    reason="timeout",
                )
                self._fail(timeout)
                raise timeout
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    def notify(self, method: str, params: Mapping[str, Any]) -> None:
        """Send one notification (no answer)."""
        self._send({"jsonrpc": "2.0", "method": method, "params": dict(params)})

    def _send(self, message: Mapping[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        stdin = self._proc.stdin
        try:
            with self._write_lock:
                if stdin is None:
                    raise BrokenPipeError
                stdin.write(data)
                stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            failure = self._crash_error("its stdin is closed")
            self._fail(failure)
            raise failure from None

    # -- reading -------------------------------------------------------------------------

    def _read_stdout(self) -> None:
        try:
            self._read_messages()
        except Exception as exc:  # a dead reader would leave every call waiting for its timeout
            _log.error("MCP source %s: reader failed (%s)", self.name, type(exc).__name__)
            self._fail(self._malformed(f"{type(exc).__name__} while reading"))

    def _read_messages(self) -> None:
        stdout = self._proc.stdout
        if stdout is None:  # pragma: no cover - Popen(stdout=PIPE) always sets it
            return
        fd = stdout.fileno()
        buffer = bytearray()
        while True:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                self._fail(self._crash_error("it exited"))
                stdout.close()
                return
            buffer += chunk
            while (newline := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:newline])
                del buffer[: newline + 1]
                if len(line) > self._max:
                    self._oversize()
                    break
                if line.strip() and not self._dispatch(line):
                    break
            else:
                if len(buffer) <= self._max:
                    continue
                self._oversize()
            stdout.close()
            return

    def _oversize(self) -> None:
        self._fail(
            McpUnavailable(
                f"MCP source {self.name} sent a message over {self._max} bytes; the server was stopped",
                source=self.name,
                reason="too_large",
                hint="Raise limits.max_output_bytes in the declaration and re-pin, or fix the server.",
            )
        )

    def _dispatch(self, line: bytes) -> bool:
        try:
            message = parse_message(line)
            if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
                raise ValueError("not a JSON-RPC 2.0 object")
        except ValueError as exc:
            self._fail(self._malformed(str(exc)))
            return False
        if "method" in message:
            if "id" in message:  # a server-to-client request (sampling, roots...): not offered
                with contextlib.suppress(McpUnavailable):
                    self._send({"jsonrpc": "2.0", "id": message["id"],
                                "error": {"code": -32601, "message": "not supported by this client"}})
            return True
        request_id = message.get("id")
        with self._lock:
            pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is None:
            return True  # an answer to a request that already timed out
        if "error" in message:
            error = message["error"] if isinstance(message["error"], dict) else {}
            pending.error = McpUnavailable(
                f"MCP source {self.name} answered with a JSON-RPC error "
                f"{error.get('code')!r}: {str(error.get('message'))[:500]}",
                source=self.name,
                reason="rpc_error",
            )
        else:
            pending.result = message.get("result")
        pending.done.set()
        return True

    def _malformed(self, what: str) -> McpUnavailable:
        return McpUnavailable(
            f"MCP source {self.name} spoke malformed JSON-RPC ({what[:120]}); the server was stopped",
            source=self.name,
            reason="malformed",
        )

    def _read_stderr(self) -> None:
        stderr = self._proc.stderr
        if stderr is None:  # pragma: no cover
            return
        fd = stderr.fileno()
        while True:
            try:
                chunk = os.read(fd, _READ_CHUNK)
            except OSError:
                chunk = b""
            if not chunk:
                stderr.close()
                return
            self._stderr += chunk
            del self._stderr[:-STDERR_TAIL]

    def stderr_tail(self) -> str:
        """The last bytes the server wrote to stderr (for diagnostics; may hold anything)."""
        return self._stderr.decode("utf-8", "replace")

    # -- failure and shutdown ------------------------------------------------------------------

    def _crash_error(self, what: str) -> McpUnavailable:
        code = self._proc.poll()
        shown = f" (exit status {code})" if code is not None else ""
        return McpUnavailable(
            f"MCP source {self.name} stopped answering: {what}{shown}; it will be restarted",
            source=self.name,
            reason="crashed",
        )

    def _fail(self, error: McpUnavailable) -> None:
        """Record the first failure, kill the process group, fail every waiting request."""
        with self._lock:
            if self._failure is None:
                self._failure = error
            waiting = list(self._pending.values())
        self._kill()
        for pending in waiting:
            if not pending.done.is_set():
                pending.error = self._failure
                pending.done.set()

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, OSError):
            self._proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def close(self) -> None:
        """Kill the server's whole process group and release the pipes. Idempotent."""
        self._fail(McpUnavailable(f"MCP source {self.name} was closed", source=self.name, reason="closed"))
        if self._proc.stdin is not None:  # stdout/stderr are closed by their reader threads
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        _live.discard(self)
