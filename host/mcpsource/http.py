"""A session with one MCP server over Streamable HTTP, through the host's egress rules.

The protocol is the official SDK's (``mcp.client.streamable_http.streamable_http_client``:
POSTs, SSE or JSON answers, session id, ``DELETE`` on close); the bytes go through
:class:`host.mcpsource.egress.SourceTransport` (allowlist = the declared endpoint, SSRF
guard, pinned addresses, host-injected credential headers, bounded bodies). The host
keeps its own JSON-RPC bookkeeping over the SDK's message streams, as it does over
stdio, so results are the exact JSON the server sent (the pins digest it).

The SDK is async; :class:`HttpConnection` runs it on a private event loop thread (an
``anyio`` blocking portal) and offers the same blocking ``request`` as
:class:`~host.mcpsource.stdio.StdioConnection`. Every failure is a
:class:`~host.errors.StockadeError`: ``EGRESS_DENIED`` / ``EGRESS_UNREACHABLE`` from the
egress rules, ``MCP_UNAVAILABLE`` (``unreachable``, ``http_status``, ``too_large``,
``malformed``, ``crashed``, ``closed``) or ``MCP_TIMEOUT``; a failed connection is never
reused (the source reconnects with backoff).

Example::

    conn = HttpConnection(name="files", url="https://mcp.example/mcp", headers=[],
                          network=McpNetwork(), max_message_bytes=65536, timeout_s=30)
    conn.request("tools/list", {}, timeout_s=5)
    conn.close()
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Final, final

import anyio
import anyio.from_thread
import httpx2
from anyio.abc import TaskStatus
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import ClientMessageMetadata, SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)

from host.errors import EgressDenied, McpTimeout, McpUnavailable, StockadeError
from host.mcpsource.egress import SourceTransport, endpoint_policy
from host.mcpsource.rpc import McpNetwork, Pending, cancelled, wait_answer

__all__ = ["HttpConnection"]

_log = logging.getLogger("stockade.mcpsource")

PROTOCOL_VERSION: Final = "2025-11-25"  # the handshake era, as for stdio
_VERSION_HEADER: Final = "mcp-protocol-version"
_CLOSE_GRACE_S: Final = 2.0  # s a clean close may spend ending the session (DELETE)


@final
class HttpConnection:
    """One Streamable HTTP session (initialize already done).

    Args:
        name: the source name (for messages).
        url: the declared ``https`` endpoint.
        headers: credential headers the host adds to every request.
        network: the host's resolver, extra CA file and loopback opt-in.
        max_message_bytes: the longest response body accepted.
        timeout_s: deadline of the handshake (and of connects).

    Raises:
        EgressDenied, EgressUnreachable: the endpoint is not reachable under the egress rules.
        McpUnavailable: the server cannot be reached or fails the handshake.
        McpTimeout: the handshake does not finish in ``timeout_s``.
    """

    def __init__(
        self,
        *,
        name: str,
        url: str,
        headers: Sequence[tuple[str, str]],
        network: McpNetwork,
        max_message_bytes: int,
        timeout_s: float,
    ) -> None:
        self.name = name
        self._url = url
        self._headers = tuple(headers)
        self._network = network
        self._max = max_message_bytes
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._lock = threading.Lock()
        self._failure: StockadeError | None = None
        self._version = PROTOCOL_VERSION
        self._write: Any = None
        self._stop: anyio.Event | None = None
        self._outer: anyio.CancelScope | None = None
        self._closed = False
        try:
            endpoint_policy(url)  # refuse a URL outside the egress rules before starting anything
        except EgressDenied as exc:
            raise type(exc)(f"MCP source {name}: {exc.message}", reason=exc.reason, source=name) from None
        self._portal_cm = anyio.from_thread.start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            self._main_future, _ = self._portal.start_task(self._main)
            self.server_info = self.request(
                "initialize",
                {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                 "clientInfo": {"name": "stockade", "version": "1"}},
                timeout_s=timeout_s,
            )
            version = self.server_info.get("protocolVersion") if isinstance(self.server_info, dict) else None
            self._version = version if isinstance(version, str) and len(version) <= 32 else PROTOCOL_VERSION
            self.notify("notifications/initialized", {})
        except BaseException as exc:
            self.close()
            if isinstance(exc, RuntimeError) and self._failure is not None:
                raise self._failure from None  # the task failed before it started: say why
            raise

    @property
    def pid(self) -> None:
        """No process: the server runs elsewhere."""
        return None

    @property
    def alive(self) -> bool:
        """Whether the session is usable."""
        return self._failure is None and not self._closed

    # -- the event loop side ---------------------------------------------------------------

    async def _main(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._stop = anyio.Event()
        try:
            with anyio.CancelScope() as outer:
                self._outer = outer
                transport = SourceTransport(
                    self._url, network=self._network, headers=self._headers,
                    max_response_bytes=self._max, on_fault=self._fault, name=self.name,
                    timeout_s=self._timeout_s,
                )
                timeout = httpx2.Timeout(connect=self._timeout_s, read=None, write=self._timeout_s,
                                         pool=self._timeout_s)
                async with (
                    httpx2.AsyncClient(transport=transport, trust_env=False, follow_redirects=False,
                                       timeout=timeout) as client,
                    streamable_http_client(self._url, http_client=client,
                                           max_sse_event_size=self._max + 1) as (read, write),
                    anyio.create_task_group() as group,
                ):
                    self._write = write
                    group.start_soon(self._read_loop, read)
                    task_status.started()
                    await self._stop.wait()
                    group.cancel_scope.cancel()
        except Exception as exc:  # an SDK task failed (an exception group): a host error says why
            self._fault(_first_stockade(exc) or self._ended(f"its client failed ({type(exc).__name__})"))
        finally:
            closed = McpUnavailable(f"MCP source {self.name} was closed", source=self.name, reason="closed")
            self._fault(closed)

    async def _read_loop(self, read: Any) -> None:
        async for item in read:
            if isinstance(item, Exception):
                self._fault(self._malformed(str(item)))
                return
            message = item.message
            if isinstance(message, JSONRPCResponse):
                self._resolve(message.id, result=message.result)
            elif isinstance(message, JSONRPCError):
                self._resolve(message.id, error=self._rpc_error(message.error))
            elif isinstance(message, JSONRPCRequest):  # sampling, roots, elicitation: not offered
                error = ErrorData(code=-32601, message="not supported by this client")
                reply = SessionMessage(JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self._write.send(reply)
        self._fault(self._ended("the server ended the session"))

    def _rpc_error(self, error: ErrorData) -> StockadeError:
        if error.code == PARSE_ERROR:  # the SDK's stand-in for an answer that is not JSON-RPC
            return self._malformed(error.message)
        if error.code == CONNECTION_CLOSED:  # the SDK's stand-in for a stream that ended early
            return self._ended(error.message[:200])
        return McpUnavailable(
            f"MCP source {self.name} answered with a JSON-RPC error {error.code!r}: {error.message[:500]}",
            source=self.name, reason="rpc_error",
        )

    def _resolve(self, request_id: Any, *, result: Any = None, error: StockadeError | None = None) -> None:
        with self._lock:
            pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is None:
            return  # an answer to a request that timed out or was cancelled
        if error is not None and self._failure is not None:
            error = self._failure  # the transport's refusal explains the SDK's stand-in error
        pending.result, pending.error = result, error
        pending.done.set()

    def _fault(self, error: StockadeError) -> None:
        """Record the first failure, fail every waiting request, stop the session."""
        with self._lock:
            if self._failure is None:
                self._failure = error
            waiting = list(self._pending.values())
            failure = self._failure
        for pending in waiting:
            if not pending.done.is_set():
                pending.error = failure
                pending.done.set()
        if self._outer is not None and not self._closed:
            self._outer.cancel()  # a broken session is not ended politely

    def _ended(self, what: str) -> McpUnavailable:
        return McpUnavailable(f"MCP source {self.name} stopped answering: {what}; the next call reconnects",
                              source=self.name, reason="crashed")

    def _malformed(self, what: str) -> McpUnavailable:
        return McpUnavailable(f"MCP source {self.name} spoke malformed JSON-RPC ({what[:120]})",
                              source=self.name, reason="malformed")

    # -- the caller side -------------------------------------------------------------------

    def request(
        self, method: str, params: dict[str, Any], *, timeout_s: float, cancel: threading.Event | None = None
    ) -> Any:
        """Send one request and wait for its result, at most ``timeout_s``.

        Raises:
            McpTimeout: no answer in time (the session is closed: it may be wedged).
            CallCancelled: ``cancel`` was set; the server was sent ``notifications/cancelled``.
            McpUnavailable, EgressDenied: the session failed (see the module docstring), or
                the server answered a JSON-RPC error (``reason`` ``rpc_error``).
        """
        deadline = time.monotonic() + timeout_s
        pending = Pending()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            request_id = next(self._ids)
            self._pending[request_id] = pending
        try:
            message = JSONRPCRequest(jsonrpc="2.0", id=request_id, method=method, params=params)
            self._send(message, deadline, stamp=method != "initialize")
            outcome = wait_answer(pending.done, deadline, cancel)
            if outcome == "cancelled":
                self._cancel(request_id)
                raise cancelled(self.name, method)
            if outcome == "timeout":
                timeout = McpTimeout(
                    f"MCP source {self.name} did not answer {method} within {timeout_s:g} s; "
                    "the session was closed and will be reopened",
                    source=self.name, reason="timeout",
                )
                self._fault_from_caller(timeout)
                raise timeout
        finally:
            with self._lock:
                self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    def notify(self, method: str, params: dict[str, Any]) -> None:
        """Send one notification (waits until it was posted, at most the handshake timeout)."""
        message = JSONRPCNotification(jsonrpc="2.0", method=method, params=params)
        self._send(message, time.monotonic() + self._timeout_s, stamp=True)

    def _cancel(self, request_id: int) -> None:
        """Tell the server to stop ``request_id`` (best effort; not waited for)."""
        notice = JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled",
                                     params={"requestId": request_id,
                                             "reason": "the caller cancelled the call"})
        with contextlib.suppress(Exception):
            self._portal.start_task_soon(self._write.send, self._stamped(notice, stamp=True))

    def _stamped(self, message: Any, *, stamp: bool) -> SessionMessage:
        metadata = ClientMessageMetadata(headers={_VERSION_HEADER: self._version}) if stamp else None
        return SessionMessage(message, metadata=metadata)

    def _send(self, message: Any, deadline: float, *, stamp: bool) -> None:
        try:
            stamped = self._stamped(message, stamp=stamp)
            future: Future[None] = self._portal.start_task_soon(self._write.send, stamped)
            future.result(timeout=max(0.001, deadline - time.monotonic()))
        except FutureTimeout:
            timeout = McpTimeout(
                f"MCP source {self.name} did not take a message in time; the session was closed",
                source=self.name, reason="timeout",
            )
            self._fault_from_caller(timeout)
            raise timeout from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
            raise self._failure or self._ended("its session is closed") from None

    def _fault_from_caller(self, error: StockadeError) -> None:
        with contextlib.suppress(RuntimeError):  # the loop may be gone already
            self._portal.call(self._fault, error)

    def close(self) -> None:
        """End the session (``DELETE``, at most 2 s) and stop its event loop. Idempotent."""
        if self._closed:
            return
        self._closed = True

        def stop() -> None:
            if self._outer is not None and self._failure is None:
                self._outer.deadline = anyio.current_time() + _CLOSE_GRACE_S
            if self._stop is not None:
                self._stop.set()

        with contextlib.suppress(RuntimeError):
            self._portal.call(stop)
        with contextlib.suppress(Exception):
            self._portal_cm.__exit__(None, None, None)


def _first_stockade(exc: BaseException) -> StockadeError | None:
    """The first StockadeError in ``exc`` or, for an exception group, in its members."""
    if isinstance(exc, StockadeError):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _first_stockade(inner)
        if found is not None:
            return found
    return None
