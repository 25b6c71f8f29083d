"""The egress port: how a sandbox hands a guest's ``http-request`` to the host.

The runtime converts the WIT ``request`` record into :class:`HttpRequest`, calls
:meth:`EgressPort.send`, and converts the :class:`HttpResponse` or :class:`HttpFailure`
back into the WIT ``result<response, http-error>``. The runtime never performs I/O
itself; the real implementation (policy, DNS vetting, pinned transport, credential
router, redaction) lives in ``host.egress`` and plugs into this same port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = ["DenyAllEgress", "EgressPort", "FailureKind", "HttpFailure", "HttpRequest", "HttpResponse"]

FailureKind = Literal[
    "denied",
    "credential-unavailable",
    "invalid-request",
    "too-large",
    "timeout",
    "budget-exhausted",
    "network",
]
"""The cases of the WIT ``http-error`` variant, spelled as in the WIT."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A guest's request exactly as it asked (unverified: nothing here is trusted)."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    timeout_ms: int | None


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """What the guest receives: sanitized headers and a redacted, bounded body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True, slots=True)
class HttpFailure:
    """A refused or failed request; ``detail`` is redacted text for cases that carry one."""

    kind: FailureKind
    detail: str = ""


class EgressPort(Protocol):
    """One call's egress. Implementations are per call and never shared between calls."""

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        """Perform (or refuse) one request. Must not raise for guest mistakes."""
        ...


class DenyAllEgress:
    """The port that refuses every request (the default for tools without network)."""

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        return HttpFailure("denied", "this call has no network access")
