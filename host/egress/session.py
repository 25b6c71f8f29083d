"""One tool call's egress: the :class:`EgressPort` the sandbox calls (docs/design.md §8 steps 1–10).

An :class:`EgressSession` is built by the gateway for ONE call of ONE package and
performs every ``http-request`` of that call. :meth:`EgressSession.send` never raises for
a guest mistake: every refusal comes back as an :class:`HttpFailure` whose detail is
redacted. Steps, in order, for each request:

1. Budget: at most ``max_requests`` outbound requests per call; one more is
   ``budget-exhausted``. Every call of :meth:`send` counts, refused ones included (a
   guest cannot probe the policy for free), and so does every redirect hop the host
   follows (at most 3 per request): ``max_http_requests`` bounds what reaches servers.
   A body over ``http.max_request_bytes`` is ``too-large``.
2. Hygiene (:mod:`host.egress.hygiene`): method token, header syntax and size
   (``invalid-request``), host-owned, re-routing and credential-like headers, names
   compared case-folded with ``_`` as ``-`` (``denied``).
3. + 4. Normalization and allowlist (``EgressPolicy.check``): ``denied`` with the policy's
   reason (``invalid-request`` for a malformed URL); then credential-like query parameter
   names are refused (``denied``).
5. DNS (``EgressPolicy.vet``): resolved once per host per call (later requests of the
   call reuse the vetted answer), under the request deadline (a worker thread abandoned
   when it passes: ``timeout``); a failed lookup is ``network``
   (outcome ``network:dns_failure``), never ``denied``: it is not a policy decision. The
   transport connects only to the vetted addresses (:mod:`host.egress.transport`), TLS
   still verifying the host name.
6. Credentials (:mod:`host.egress.router`): this package's mappings only. A required
   secret that is missing is ``credential-unavailable`` (detail: the secret's name);
   two mappings writing one location, or a guest header or query parameter that is an
   injected one in another spelling, are ``denied`` ("credential conflict").
7. Send an ``httpx2.Request`` straight to the transport (no ``httpx2.Client``: nothing
   from the environment, no proxies, no automatic redirects, no cookie jar). Timeout:
   min(guest ``timeout_ms``, the call's remaining time, the manifest's
   ``http.timeout_ms``), one absolute deadline for the request and its redirects,
   enforced on every socket operation. The response is streamed and cut at
   ``http.max_response_bytes`` (``too-large``), also without a Content-Length.
8. Redirects (301, 302, 303, 307, 308 with one ``Location``): at most 3 hops, each
   counted against the budget; a ``Location`` with whitespace or a control character, or
   one that is not a parseable URL, is ``denied`` (``invalid_redirect``, recorded); each
   hop is re-checked from step 3 (normalization, allowlist, credential-like query
   parameters, DNS), every header of the previous hop is dropped (the guest's too),
   credentials are routed again for the new
   destination only; 301/302/303 become GET (HEAD stays HEAD) without body, 307/308 keep
   method and body. A ``Location`` that carries a staged secret (in any form the redactor
   knows) is refused, so a query credential never follows a redirect. A 4th redirect is
   ``denied`` ("too many redirects").
9. Response: more than :data:`MAX_RESPONSE_HEADERS` header lines is ``network``
   (``network:response_invalid``); ``Set-Cookie`` and credential-like headers dropped;
   the body decoded within bounds (:mod:`host.egress.decoding`: one ``gzip`` or
   ``deflate`` layer at most, ``too-large`` past the limit or ratio, ``network`` for
   stacked, unknown or corrupt encodings); every staged secret form replaced with
   ``[REDACTED]`` in header names, values (one pass over all of them) and the body; the
   deadline is checked again after redaction (``timeout``).
10. Usage: one :class:`RequestRecord` per hop sent and per refused request: method,
    host, normalized path (never the query), status, body bytes each way, duration and
    an outcome such as ``ok``, ``redirect``, ``too-large`` or ``denied:host_not_allowed``.

Failures map as: ``EgressUnreachable`` → ``timeout`` (``dns_timeout``) or ``network``;
``EgressDenied`` → ``denied`` (``invalid-request`` for the reasons in
:data:`~host.egress.hygiene.INVALID_REQUEST_REASONS`); ``CredentialUnavailable`` →
``credential-unavailable``; httpx2 timeouts → ``timeout``; other transport, TLS and
protocol errors → ``network``.

Example::

    session = EgressSession(manifest.http, policy, package="tracker",
                            credentials=manifest.http.credentials, staged=staged,
                            max_requests=manifest.limits.max_http_requests,
                            deadline=time.monotonic() + 10, resolver=system_resolver,
                            redactor=Redactor(staged.values()))
    with session:
        result = session.send(HttpRequest("GET", "https://api.tracker.example/v1/issues",
                                          (), None, None))
    session.usage.requests
"""

from __future__ import annotations

import re
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Final, Protocol
from urllib.parse import urljoin

from host import observe
from host.egress.decoding import BodyDecoder, BodyTooLarge, ResponseInvalid
from host.egress.hygiene import (
    INVALID_REQUEST_REASONS,
    check_method,
    check_query,
    check_request_headers,
    fold_header_name,
    sanitize_response_headers,
    strip_trace_context,
)
from host.egress.policy import EgressPolicy, EgressTarget, Resolver
from host.egress.port import FailureKind, HttpFailure, HttpRequest, HttpResponse
from host.egress.router import CredentialMappingLike, CredentialRouter, apply_injections
from host.egress.urls import normalize_url
from host.errors import CredentialUnavailable, EgressDenied, EgressUnreachable
from host.secrets.redact import Redactor
from host.secrets.store import SecretValue

# httpx2 and the transport (httpcore2, ssl) load when the first session is made, not when
# this module is imported: a host whose packages declare no network, and the CLI, start
# without them; the call pipeline imports this module for its isinstance checks.
if TYPE_CHECKING:
    import httpx2

    from host.egress.transport import TransportFactory

__all__ = [
    "MAX_REDIRECTS",
    "MAX_RESPONSE_HEADERS",
    "EgressSession",
    "EgressUsage",
    "HttpLimits",
    "Reauth",
    "RequestRecord",
]

Reauth = Callable[[str, SecretValue], "tuple[SecretValue, Redactor] | None"]
"""The 401 hook: ``(secret, rejected value)`` → a new value and the widened redactor, or None."""

MAX_REDIRECTS: Final = 3  # redirect hops followed per request (docs/design.md §8 step 8)
MAX_RESPONSE_HEADERS: Final = 256  # header lines of one response
_MAX_VETTED_HOSTS: Final = 64  # hosts whose vetted answer one call remembers
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_UNSAFE_LOCATION: Final = re.compile(r"[\x00-\x20\x7f]")  # controls, space (urljoin strips some)
_DEFAULT_HEADERS: Final = (
    ("Accept", "*/*"),
    ("Accept-Encoding", "identity"),  # so that redaction sees the body as sent
    ("User-Agent", "stockade-egress"),
)


class HttpLimits(Protocol):
    """What the session reads of a manifest's ``http`` section (``host.formats.manifest.HttpConfig``)."""

    @property
    def max_request_bytes(self) -> int: ...

    @property
    def max_response_bytes(self) -> int: ...

    @property
    def timeout_ms(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request (or redirect hop) as recorded for usage and audit. No secrets, no query.

    Attributes:
        method: the method sent (``"?"`` if the guest's was malformed).
        host: the normalized host (``""`` if the URL was refused before normalization).
        path: the normalized path, without query (``""`` likewise).
        status: the HTTP status, or ``None`` when no response was received.
        bytes_sent: request body bytes.
        bytes_received: response body bytes read from the network.
        duration_ms: wall time of this hop (or of the refusal), in milliseconds.
        outcome: ``ok``, ``redirect``, a failure kind (``too-large``, ``timeout``,
            ``network``, ``budget-exhausted``, ``credential-unavailable``) or
            ``denied:<reason>`` / ``invalid-request:<reason>``.
    """

    method: str
    host: str
    path: str
    status: int | None
    bytes_sent: int
    bytes_received: int
    duration_ms: float
    outcome: str


@dataclass(frozen=True, slots=True)
class EgressUsage:
    """A call's egress so far: every record and the byte totals (bodies only)."""

    requests: tuple[RequestRecord, ...]
    bytes_sent: int
    bytes_received: int


class _Refused(Exception):
    """Internal: unwinds a request into an HttpFailure (never leaves this module)."""

    def __init__(self, kind: FailureKind, detail: str, outcome: str | None = None) -> None:
        super().__init__(detail)
        self.kind: FailureKind = kind
        self.detail = detail
        self.outcome = outcome if outcome is not None else kind


@dataclass(slots=True)
class _Hop:
    """What the current hop is known to be, for its record."""

    method: str
    host: str = ""
    path: str = ""
    status: int | None = None
    sent: int = 0
    dispatched: bool = False
    received: int = 0
    started: float = 0.0
    injected: tuple[str, ...] = ()


class EgressSession:
    """The egress port of one tool call (not thread-safe; one call, one guest).

    Args:
        http: the package's ``http`` config (request/response byte limits, timeout).
        policy: the package's allowlist (``EgressPolicy.from_allow(http.allow)``).
        package: the package name (for messages).
        credentials: the package's own credential mappings; no other mapping is used.
        staged: the secrets staged for this call, by name.
        max_requests: ``limits.max_http_requests`` of the package.
        deadline: ``time.monotonic()`` at which the whole call must end.
        resolver: the DNS port.
        transport_factory: builds the transport from the pin table (default: the pinned
            transport trusting the system CAs and ``ca_file``).
        ca_file: extra trusted CA bundle (``HostConfig.extra_ca_file``).
        allow_loopback: TEST ONLY, from ``HostConfig.unsafe_allow_loopback``.
        redactor: redacts every staged secret (built by the gateway with the staged
            values and the basic-auth usernames of ``credentials``).
        reauth: the OAuth hook (:meth:`host.egress.oauth.OAuthStage.reauth`): on a 401 to
            a request that carried one of ``reauth_secrets``, the session asks it for a
            new value and replays the request once (the body is bytes the host holds).
        reauth_secrets: the secrets ``reauth`` can renew.

    Raises:
        ValueError: a credential mapping is invalid, or ``max_requests`` is negative.
        TypeError: ``transport_factory`` built something other than an ``httpx2.BaseTransport``
            (a transport of the former ``httpx`` stack: see ``checked_transport``).
        OSError, ssl.SSLError: ``ca_file`` cannot be loaded.
    """

    def __init__(
        self,
        http: HttpLimits,
        policy: EgressPolicy,
        *,
        package: str,
        credentials: Sequence[CredentialMappingLike],
        staged: Mapping[str, SecretValue],
        max_requests: int,
        deadline: float,
        resolver: Resolver,
        transport_factory: TransportFactory | None = None,
        ca_file: Path | None = None,
        allow_loopback: bool = False,
        redactor: Redactor,
        reauth: Reauth | None = None,
        reauth_secrets: frozenset[str] = frozenset(),
    ) -> None:
        from host.egress.transport import (  # noqa: PLC0415 - see the TYPE_CHECKING import
            Pins,
            checked_transport,
            pinned_transport_factory,
        )

        if max_requests < 0:
            raise ValueError("max_requests must be >= 0")
        self.package = package
        self._http = http
        self._policy = policy
        self._router = CredentialRouter(credentials)
        self._staged = staged
        self._max_requests = max_requests
        self._deadline = deadline
        self._resolver = resolver
        self._allow_loopback = allow_loopback
        self._redactor = redactor
        self._pins = Pins()
        factory = transport_factory or pinned_transport_factory(ca_file=ca_file)
        # Requests go straight to the transport, never through httpx2.Client: nothing is
        # read from the environment (proxies, CA paths: trust_env is moot), there is no
        # cookie jar carrying state between hosts, and no redirect machinery at all.
        self._transport = checked_transport(factory(self._pins))
        # Close pooled sockets even if the owner forgets close() (no ResourceWarning).
        self._finalizer = weakref.finalize(self, self._transport.close)
        self._calls = 0
        self._vetted: dict[str, tuple[str, ...]] = {}
        self._records: list[RequestRecord] = []
        self._over_budget_recorded = False
        self._reauth = reauth
        self._reauth_secrets = reauth_secrets
        self.injected: set[str] = set()  # secret names injected into some request of the call

    # --- lifecycle ---

    def close(self) -> None:
        """Close pooled connections. Idempotent; :meth:`send` fails with ``network`` after."""
        self._finalizer()

    def __enter__(self) -> EgressSession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def usage(self) -> EgressUsage:
        """Every record so far and the byte totals."""
        records = tuple(self._records)
        return EgressUsage(
            requests=records,
            bytes_sent=sum(r.bytes_sent for r in records),
            bytes_received=sum(r.bytes_received for r in records),
        )

    # --- the port ---

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        """Perform (or refuse) one guest request; never raises for guest mistakes.

        Args:
            request: the guest's request (untrusted).

        Returns:
            The sanitized response, or a failure with a redacted detail.
        """
        hop = _Hop(method=request.method if _printable(request.method) else "?")
        hop.started = time.monotonic()
        try:
            return self._perform(request, hop)
        except _Refused as refusal:
            self._record(hop, refusal.outcome)
            return HttpFailure(refusal.kind, self._redactor.text(refusal.detail))

    def _count_request(self) -> None:
        self._calls += 1
        if self._calls > self._max_requests:
            raise _Refused("budget-exhausted", f"at most {self._max_requests} HTTP requests per call")

    def _perform(self, request: HttpRequest, hop: _Hop) -> HttpResponse:
        self._count_request()
        body = request.body
        if body is not None and len(body) > self._http.max_request_bytes:
            raise _Refused(
                "too-large", f"request body over {self._http.max_request_bytes} bytes"
            )
        hop.sent = 0 if body is None else len(body)
        try:
            method = check_method(request.method)
            check_request_headers(request.headers)
            target = self._check(method, request.url, hop)
            check_query(target.query)
        except EgressDenied as exc:
            raise _denied(exc) from None
        deadline = self._request_deadline(request.timeout_ms, hop.started)
        headers = strip_trace_context(request.headers)  # the host's to give: see _send_hop
        hops = 0
        reauthed = False
        while True:
            hop.method = method
            response = self._send_hop(hop, target, headers, body, deadline=deadline)
            if response.status_code == 401 and not reauthed and self._renewable(hop):
                response.close()
                self._record(hop, "unauthorized:refresh")
                reauthed = True  # one refresh and one retry per request, never more
                self._renew(hop)
                hop.status, hop.received, hop.dispatched = None, 0, False
                hop.started = time.monotonic()
                self._count_request()
                continue
            location = _redirect_location(response)
            if location is None:
                return self._finish(response, deadline, hop)
            response.close()
            self._record(hop, "redirect")
            if hops == MAX_REDIRECTS:
                raise _Refused(
                    "denied", f"too many redirects (at most {MAX_REDIRECTS})",
                    "denied:too_many_redirects",
                )
            hops += 1
            method, body = _redirect_method(response.status_code, method, body)
            hop.method, hop.status, hop.received, hop.dispatched = method, None, 0, False
            hop.sent = 0 if body is None else len(body)
            hop.started = time.monotonic()
            target = self._follow(target, location, method, hop)
            self._count_request()  # every hop followed is an outbound request
            headers = []  # docs/design.md §8 step 8: every header of the previous hop is dropped

    # --- steps ---

    def _renewable(self, hop: _Hop) -> bool:
        return self._reauth is not None and any(n in self._reauth_secrets for n in hop.injected)

    def _renew(self, hop: _Hop) -> None:
        """After a 401: renew the OAuth secrets this hop carried, or refuse the request."""
        staged = dict(self._staged)
        for name in hop.injected:
            if name not in self._reauth_secrets or self._reauth is None:
                continue
            fresh = self._reauth(name, staged[name])
            if fresh is None:
                raise _Refused("credential-unavailable", name)
            staged[name], self._redactor = fresh
        self._staged = staged

    def _request_deadline(self, timeout_ms: int | None, started: float) -> float:
        deadline = min(self._deadline, started + self._http.timeout_ms / 1000)
        if timeout_ms is not None:
            deadline = min(deadline, started + max(timeout_ms, 0) / 1000)
        return deadline

    def _follow(self, current: EgressTarget, location: str, method: str, hop: _Hop) -> EgressTarget:
        """The next hop's target, with every request-side check of a guest request.

        Never raises anything but :class:`_Refused`: a ``Location`` with a
        control character or whitespace is refused rather than repaired (``urljoin``
        would silently strip TAB/CR/LF), and one ``urljoin`` cannot parse
        (``http://[/x``) is refused too, both as ``invalid_redirect``.
        """
        if _UNSAFE_LOCATION.search(location) is not None:
            raise _Refused(
                "denied", "redirect refused: the Location contains whitespace or a control character",
                "denied:invalid_redirect",
            )
        if self._redactor.text(location) != location:
            raise _Refused(
                "denied", "redirect refused: the Location carries a credential",
                "denied:credential_in_redirect",
            )
        try:
            joined = urljoin(current.url, location)
        except ValueError:
            raise _Refused(
                "denied", "redirect refused: the Location is not a valid URL", "denied:invalid_redirect"
            ) from None
        try:
            target = self._check(method, joined, hop)
            check_query(target.query)  # the same query rules as a guest request
        except EgressDenied as exc:
            raise _denied(exc, redirect=True) from None
        except ValueError:
            raise _Refused(
                "denied", "redirect refused: the Location is not a valid URL", "denied:invalid_redirect"
            ) from None
        return target

    def _check(self, method: str, url: str, hop: _Hop) -> EgressTarget:
        """``policy.check``; on refusal, still record which host and path were tried."""
        try:
            target = self._policy.check(method, url)
        except EgressDenied:
            try:
                tried = normalize_url(url)
                hop.host, hop.path = tried.host, tried.path
            except EgressDenied:
                hop.host, hop.path = "", ""
            raise
        hop.host, hop.path = target.host, target.path
        return target

    def _send_hop(
        self,
        hop: _Hop,
        target: EgressTarget,
        headers: Sequence[tuple[str, str]],
        body: bytes | None,
        *,
        deadline: float,
    ) -> httpx2.Response:
        import httpx2  # noqa: PLC0415 - loaded by __init__ already: a dict lookup

        try:
            addresses = self._vet(target, deadline)
            url = target.normalized()
            injections = self._router.inject(self._router.match(url), self._staged)
            send_url, send_headers = apply_injections(url, headers, injections)
            hop.injected = tuple(item.secret for item in injections)
            self.injected.update(hop.injected)
            if target.propagate_trace:  # the allow entry opted in (off: a trace id stays home)
                send_headers = _with_trace(send_headers)
        except EgressUnreachable as exc:
            kind: FailureKind = "timeout" if exc.reason == "dns_timeout" else "network"
            raise _Refused(kind, exc.message, f"{kind}:{exc.reason}") from None
        except EgressDenied as exc:
            raise _denied(exc) from None
        except CredentialUnavailable as exc:
            name = str(exc.details.get("secret", ""))
            raise _Refused("credential-unavailable", name) from None
        self._pins.pin(target.host, target.port, addresses)
        self._pins.deadline = deadline
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Refused("timeout", "the request deadline passed")
        if not self._finalizer.alive:
            raise _Refused("network", "the egress session is closed")
        try:
            request = httpx2.Request(
                hop.method,
                send_url,
                headers=_with_defaults(send_headers),
                content=body,
                extensions={"timeout": httpx2.Timeout(remaining).as_dict()},
            )
            hop.dispatched = True
            response = self._transport.handle_request(request)
            response.request = request
        except httpx2.TimeoutException:
            raise _Refused("timeout", "the request timed out") from None
        except httpx2.HTTPError as exc:
            raise _Refused("network", f"request failed: {exc}") from None
        except httpx2.InvalidURL as exc:
            raise _Refused("invalid-request", f"request cannot be sent: {exc}") from None
        hop.status = response.status_code
        if len(response.headers.raw) > MAX_RESPONSE_HEADERS:
            response.close()
            raise _Refused(
                "network", f"response refused: more than {MAX_RESPONSE_HEADERS} headers",
                "network:response_invalid",
            )
        return response

    def _vet(self, target: EgressTarget, deadline: float) -> tuple[str, ...]:
        """``policy.vet`` once per host per call: later requests reuse the vetted answer.

        The answer is what the connection is pinned to anyway; reusing it within one call
        keeps one name on one set of addresses for the whole call (no rebinding between
        requests) and spares a lookup (a worker-thread hand-off) per request.
        """
        cached = self._vetted.get(target.host)
        if cached is not None:
            return cached
        addresses = self._policy.vet(
            target, self._resolver, allow_loopback=self._allow_loopback, deadline=deadline
        )
        if len(self._vetted) < _MAX_VETTED_HOSTS:
            self._vetted[target.host] = addresses
        return addresses

    def _finish(self, response: httpx2.Response, deadline: float, hop: _Hop) -> HttpResponse:
        try:
            body = self._read_body(response, deadline)
        finally:
            hop.received = response.num_bytes_downloaded
            response.close()
        kept = sanitize_response_headers(response.headers.multi_items())
        # One pass per secret form over all names and values, not one per header.
        flat = self._redactor.texts([text for pair in kept for text in pair])
        headers = tuple(zip(flat[0::2], flat[1::2], strict=True))
        redacted = self._redactor.bytes(body)
        if time.monotonic() > deadline:
            raise _Refused("timeout", "the response was not ready before the deadline")
        result = HttpResponse(response.status_code, headers, redacted)
        self._record(hop, "ok")
        return result

    def _read_body(self, response: httpx2.Response, deadline: float) -> bytes:
        """Stream, decode (bounded) and collect the body under the response bounds.

        Raw bytes are read with ``iter_raw`` (httpx2's own decoders are unbounded) and
        decoded here by :class:`BodyDecoder`: at most ``limit`` decoded bytes plus one
        chunk are ever held.
        """
        import httpx2  # noqa: PLC0415 - loaded by __init__ already: a dict lookup

        limit = self._http.max_response_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise _Refused("too-large", f"response body over {limit} bytes")
        raws: Iterable[bytes]
        try:
            if response.is_stream_consumed:
                # An in-memory response from a harness transport (httpx2.MockTransport):
                # httpx2 already decoded it; only the limit applies.
                decoder, raws = BodyDecoder("identity", limit=limit), (response.content,)
            else:
                encodings = response.headers.get_list("content-encoding")
                decoder, raws = BodyDecoder.for_encodings(encodings, limit=limit), response.iter_raw()
        except ResponseInvalid as exc:
            raise _Refused("network", f"response refused: {exc}", "network:response_invalid") from None
        body = bytearray()
        try:
            for raw in raws:
                if response.num_bytes_downloaded > limit:
                    raise _Refused("too-large", f"response body over {limit} bytes")
                for piece in decoder.feed(raw):
                    body += piece
                if time.monotonic() > deadline:
                    raise _Refused("timeout", "the response did not finish before the deadline")
            for piece in decoder.finish():
                body += piece
        except BodyTooLarge as exc:
            raise _Refused("too-large", str(exc)) from None
        except ResponseInvalid as exc:
            raise _Refused("network", f"response refused: {exc}", "network:response_invalid") from None
        except httpx2.TimeoutException:
            raise _Refused("timeout", "the response did not finish before the deadline") from None
        except httpx2.HTTPError as exc:
            raise _Refused("network", f"reading the response failed: {exc}") from None
        return bytes(body)

    def _record(self, hop: _Hop, outcome: str) -> None:
        if outcome == "budget-exhausted":
            if self._over_budget_recorded:
                return  # one record is enough; a looping guest must not grow the list
            self._over_budget_recorded = True
        redact = self._redactor.text
        self._records.append(
            RequestRecord(
                method=hop.method,
                host=redact(hop.host),
                path=redact(hop.path),
                status=hop.status,
                bytes_sent=hop.sent if hop.dispatched else 0,
                bytes_received=hop.received,
                duration_ms=round((time.monotonic() - hop.started) * 1000, 3),
                outcome=outcome,
            )
        )


def _with_trace(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` and the current (egress) span's ``traceparent``/``tracestate``: none
    when tracing is off or there is no valid span context (a sampled-out call passes its
    not-sampled decision on, flags ``00``), none over a header already there."""
    present = {fold_header_name(name) for name, _ in headers}
    return [*headers, *((n, v) for n, v in observe.outbound() if n not in present)]


def _with_defaults(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    present = {name.lower() for name, _ in headers}
    return [*headers, *((n, v) for n, v in _DEFAULT_HEADERS if n.lower() not in present)]


def _printable(text: object) -> bool:
    return isinstance(text, str) and 0 < len(text) <= 16 and text.isascii() and text.isprintable()


def _denied(exc: EgressDenied, *, redirect: bool = False) -> _Refused:
    reason = exc.reason
    if redirect:
        # The guest's request was well-formed; the server's Location is what was refused.
        return _Refused("denied", f"redirect refused: {exc.message}", f"denied:{reason}")
    kind: FailureKind = "invalid-request" if reason in INVALID_REQUEST_REASONS else "denied"
    return _Refused(kind, exc.message, f"{kind}:{reason}")


def _redirect_location(response: httpx2.Response) -> str | None:
    if response.status_code not in _REDIRECTS:
        return None
    locations = response.headers.get_list("location")
    if len(locations) != 1 or not locations[0]:
        if locations:
            response.close()
            raise _Refused("denied", "redirect refused: ambiguous Location", "denied:invalid_redirect")
        return None  # a 3xx without Location is an ordinary response
    return locations[0]


def _redirect_method(status: int, method: str, body: bytes | None) -> tuple[str, bytes | None]:
    if status in (307, 308):
        return method, body
    return ("HEAD" if method == "HEAD" else "GET"), None

