"""What the stdio and HTTP connections of a source share: waiting for an answer, cancelling.

:func:`wait_answer` waits for a request's answer until its deadline and, while it waits,
watches the call's cancel event (set by ``Host.call``'s caller, or by ``stockade serve``
when the agent's client cancels). A cancelled request is abandoned with a
``notifications/cancelled`` to the server (MCP's cancellation; the server stops the
handler) and :func:`cancelled` is raised: the connection itself stays usable.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, Protocol, final

from host.canonical import parse_json
from host.egress.policy import Resolver, system_resolver
from host.errors import CallCancelled, InputInvalid, StockadeError

__all__ = [
    "CANCEL_POLL_S",
    "Connection",
    "McpNetwork",
    "Pending",
    "cancelled",
    "parse_message",
    "wait_answer",
]

CANCEL_POLL_S: Final = 0.01  # s, how often a waiting request looks at its cancel event

_VALUE_RULES: Final = frozenset({"not-finite", "integer-range", "lone-surrogate"})
"""Refusals of one value inside a message (not of the message's syntax or nesting): such a
value is left for the answer's own check, so a NaN in a result is ``OUTPUT_INVALID``."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate object key")
    return obj


_LENIENT_VALUES: Final = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def parse_message(data: bytes) -> Any:
    """Parse one JSON-RPC message from a server with the host's strict, bounded parser.

    :func:`host.canonical.parse_json` bounds the nesting (a line nested 20,000 deep is
    refused at once, never a ``RecursionError`` in a reader thread) and refuses bad UTF-8,
    bad syntax and duplicate keys. A number or string JSON cannot carry exactly (``NaN``,
    ``1e999``, integers past 2**53, lone surrogates) fails only the answer that holds it:
    the text already parsed within the bounds, so it is read again keeping the value,
    and the answer's canonical form refuses it later (``OUTPUT_INVALID``).

    Raises:
        ValueError: the message is malformed (the connection fails ``malformed``).
    """
    try:
        return parse_json(data)
    except InputInvalid as exc:
        if exc.details.get("rule") not in _VALUE_RULES:
            raise ValueError(exc.message) from None
    return _LENIENT_VALUES.decode(data.decode("utf-8"))


class Pending:
    """One request waiting for its answer: ``done`` is set once ``result`` or ``error`` is."""

    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: StockadeError | None = None

@final
@dataclass(frozen=True, slots=True)
class McpNetwork:
    """The host's network settings an HTTP source is reached with.

    Args:
        resolver: the DNS port (``Host.open``'s ``resolver``).
        ca_file: ``HostConfig.extra_ca_file`` (trusted besides the system store).
        allow_loopback: ``HostConfig.unsafe_allow_loopback`` (TEST ONLY).
    """

    resolver: Resolver = field(default=system_resolver)
    ca_file: Path | None = None
    allow_loopback: bool = False


class Connection(Protocol):
    """A running session with one server (stdio process or HTTP endpoint)."""

    @property
    def pid(self) -> int | None:
        """The server's process id (``None`` for an HTTP server)."""

    @property
    def alive(self) -> bool:
        """Whether the session is usable."""

    def request(
        self, method: str, params: dict[str, Any], *, timeout_s: float, cancel: threading.Event | None = None
    ) -> Any:
        """Send one request and return its result (see the implementations)."""

    def close(self) -> None:
        """End the session. Idempotent."""


def wait_answer(
    done: threading.Event, deadline: float, cancel: threading.Event | None
) -> Literal["done", "timeout", "cancelled"]:
    """Wait until ``done`` is set, ``deadline`` (``time.monotonic()``) passes or ``cancel`` is set.

    Without a cancel event this is one ``Event.wait``; with one, the wait is cut into
    slices of :data:`CANCEL_POLL_S` (an event cannot wake another's waiter).
    """
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "done" if done.is_set() else "timeout"
        if cancel is None:
            return "done" if done.wait(remaining) else "timeout"
        if done.wait(min(remaining, CANCEL_POLL_S)):
            return "done"
        if cancel.is_set():
            return "cancelled"


def cancelled(name: str, method: str) -> CallCancelled:
    """The error of a request abandoned because its call was cancelled."""
    return CallCancelled(
        f"the call was cancelled while MCP source {name} worked on {method}; "
        "the server was sent notifications/cancelled",
        source=name,
    )
