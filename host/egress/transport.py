"""The pinned transport: connect only to vetted addresses, verify TLS by host name (docs/design.md §8).

DNS is resolved and vetted once per request by the policy (``EgressPolicy.vet``); the
addresses it returns are *pinned* in a :class:`Pins` table. The network backend under the
httpx2 transport ignores the host name when it opens a socket and connects only to the
pinned addresses of that ``(host, port)``, so a second resolution (DNS rebinding) can never
move the connection elsewhere. TLS is unaffected: httpcore2 wraps the pinned socket with the
original host name as SNI and as the name the certificate must match.

Invariants:

- a ``(host, port)`` that was not pinned is never connected to (``ConnectError``);
  Unix sockets are refused;
- every socket operation (connect, TLS handshake, read, write) is bounded by the smaller
  of httpcore2's per-operation timeout and the absolute :attr:`Pins.deadline`, so a server
  that trickles bytes cannot hold a request past its deadline;
- at most :data:`MAX_INFORMATIONAL_RESPONSES` interim (``1xx``) responses before a
  final one: more is a protocol error (an endless ``103 Early Hints`` stream);
- no proxies (the pool is built directly, never from the environment), HTTP/1.1 only,
  no retries, certificates verified against the system store plus an optional extra CA
  file.

This module holds the host's one pinned network backend, in its two forms over the one
HTTP stack (httpx2/httpcore2): :class:`PinnedBackend` for plugin egress (synchronous,
under :class:`PinnedTransport`) and :class:`PinnedAsyncBackend` for MCP sources over HTTP
(``host.mcpsource.egress``); both take their addresses from a :class:`Pins` table through
one check (:func:`_vetted`).

Example::

    pins = Pins()
    pins.pin("api.example.com", 443, ["93.184.216.34"])
    pins.deadline = time.monotonic() + 5
    with httpx2.Client(transport=PinnedTransport(pins, ssl_context=tls_context(None)),
                      trust_env=False, follow_redirects=False) as client:
        client.get("https://api.example.com/")
"""

from __future__ import annotations

import functools
import math
import re
import ssl
import time
import typing
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import httpcore2
import httpx2

__all__ = [
    "MAX_INFORMATIONAL_RESPONSES",
    "PinnedAsyncBackend",
    "PinnedBackend",
    "PinnedTransport",
    "Pins",
    "TransportFactory",
    "checked_transport",
    "pinned_transport_factory",
    "tls_context",
]

TransportFactory = Callable[["Pins"], httpx2.BaseTransport]
"""Builds the transport of one egress session from its pin table.

The default (:func:`pinned_transport_factory`) returns a :class:`PinnedTransport`. A test
harness may return, for example, ``httpx2.MockTransport``: every policy check still runs.
The transport must be an ``httpx2.BaseTransport``; one of the former stack (``httpx``) is
refused with a ``TypeError`` naming the migration (:func:`checked_transport`).
"""

_MAX_CONNECTIONS: Final = 4  # connections one session (one tool call) may hold open
_KEEPALIVE_EXPIRY: Final = 5.0  # s an idle connection is kept within a session

_SocketOption = httpcore2.SOCKET_OPTION
_UNIX_REFUSED: Final = "unix sockets are not reachable from egress"

MAX_INFORMATIONAL_RESPONSES: Final = 8  # interim (1xx) responses accepted before a final one
_HEAD_SCAN_LIMIT: Final = 256 * 1024  # bytes of one head watched (h11's own limit is lower)
_HEAD_END: Final = re.compile(rb"\r?\n\r?\n")
_STATUS_LINE: Final = re.compile(rb"[\r\n]*HTTP/\d\.\d +(\d{3})\b")


def _host_key(host: str) -> str:
    return host.lower().removeprefix("[").removesuffix("]")


class Pins:
    """The vetted addresses of each ``(host, port)`` and the current request deadline.

    One table per egress session; not thread-safe (a session serves one call, whose guest
    makes one request at a time).

    Attributes:
        deadline: ``time.monotonic()`` value after which every socket operation fails
            with a timeout. ``math.inf`` until a request sets it.
    """

    __slots__ = ("_table", "deadline")

    def __init__(self) -> None:
        self._table: dict[tuple[str, int], tuple[str, ...]] = {}
        self.deadline: float = math.inf

    def pin(self, host: str, port: int, addresses: Sequence[str]) -> None:
        """Allow connections to ``host:port`` only at ``addresses`` (replacing earlier ones).

        Args:
            host: the URL host (DNS name, IPv4, or IPv6 with or without brackets).
            port: the effective port.
            addresses: the vetted IP addresses, in the order to try.

        Raises:
            ValueError: ``addresses`` is empty (nothing vetted means nothing reachable).
        """
        if not addresses:
            raise ValueError(f"no vetted address for {host}:{port}")
        self._table[(_host_key(host), port)] = tuple(addresses)

    def addresses(self, host: str, port: int) -> tuple[str, ...]:
        """The pinned addresses of ``host:port`` (empty if it was never vetted)."""
        return self._table.get((_host_key(host), port), ())

    def remaining(self) -> float:
        """Seconds left before :attr:`deadline` (negative once it passed)."""
        return self.deadline - time.monotonic()

    def clamp(self, timeout: float | None, exc_type: type[Exception]) -> float | None:
        """``min(timeout, remaining())``; raise ``exc_type`` once the deadline passed.

        ``None`` (no timeout) only while neither a timeout nor a deadline is set.
        """
        remaining = self.remaining()
        if remaining <= 0:
            raise exc_type("the request deadline passed")
        if math.isinf(remaining):
            return timeout
        return remaining if timeout is None else min(timeout, remaining)


class _InformationalCounter:
    """Counts the interim (1xx) response heads a server sends before its final response.

    httpcore2 skips every ``1xx`` but ``101`` and reads on, so an endless stream of
    ``103 Early Hints`` would keep a request busy until its deadline. The
    counter watches the bytes read after each request is written, head by head (heads end
    with an empty line; h11 accepts LF as well as CRLF), and raises
    ``httpcore2.RemoteProtocolError`` past :data:`MAX_INFORMATIONAL_RESPONSES`. It stops
    watching at the first final head (the body is never scanned).
    """

    __slots__ = ("_buffer", "_count")

    def __init__(self) -> None:
        self._buffer: bytearray | None = None
        self._count = 0

    def request_sent(self) -> None:
        self._buffer, self._count = bytearray(), 0

    def received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer is None or not data:
            return
        buffer += data
        while True:
            end = _HEAD_END.search(buffer)
            if end is None:
                if len(buffer) > _HEAD_SCAN_LIMIT:
                    self._buffer = None  # h11 refuses heads this large by itself
                return
            status = _STATUS_LINE.match(buffer)
            if status is None or not 100 <= int(status.group(1)) < 200 or status.group(1) == b"101":
                self._buffer = None  # the final response: stop watching
                return
            self._count += 1
            if self._count > MAX_INFORMATIONAL_RESPONSES:
                self._buffer = None
                raise httpcore2.RemoteProtocolError(
                    f"more than {MAX_INFORMATIONAL_RESPONSES} informational (1xx) responses"
                )
            del buffer[: end.end()]


class _DeadlineStream(httpcore2.NetworkStream):
    """A network stream whose every operation is bounded by the pins' deadline.

    It also caps the interim responses before each final one (:class:`_InformationalCounter`).
    """

    def __init__(self, inner: httpcore2.NetworkStream, pins: Pins) -> None:
        self._inner = inner
        self._pins = pins
        self._interim = _InformationalCounter()

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, self._pins.clamp(timeout, httpcore2.ReadTimeout))
        self._interim.received(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._interim.request_sent()
        self._inner.write(buffer, self._pins.clamp(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        # server_hostname is the URL host (httpcore2 passes origin.host): SNI and
        # certificate verification use the name, the socket uses the pinned address.
        bounded = self._pins.clamp(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded), self._pins)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class PinnedBackend(httpcore2.NetworkBackend):
    """An httpcore2 network backend that connects only to pinned, vetted addresses.

    Args:
        pins: the session's pin table (read at every connect).
        inner: the backend that opens sockets (``httpcore2.SyncBackend()`` by default).
    """

    def __init__(self, pins: Pins, inner: httpcore2.NetworkBackend | None = None) -> None:
        self._pins = pins
        self._inner = inner if inner is not None else httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore2.NetworkStream:
        """Connect to the first reachable pinned address of ``host:port``; never resolve ``host``.

        Raises:
            httpcore2.ConnectError: ``host:port`` was not vetted, or no address answered.
            httpcore2.ConnectTimeout: the deadline passed.
        """
        options = list(socket_options or ())
        failure: Exception | None = None
        for address in _vetted(self._pins, host, port):
            bounded = self._pins.clamp(timeout, httpcore2.ConnectTimeout)
            try:
                stream = self._inner.connect_tcp(address, port, bounded, local_address, options)
            except httpcore2.ConnectError as exc:
                failure = exc
                continue
            return _DeadlineStream(stream, self._pins)
        raise httpcore2.ConnectError(f"could not connect to {host}:{port}: {failure}")

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore2.NetworkStream:
        """Always refused: egress goes to vetted TCP addresses only.

        Raises:
            httpcore2.ConnectError: always.
        """
        raise httpcore2.ConnectError(_UNIX_REFUSED)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class PinnedAsyncBackend(httpcore2.AsyncNetworkBackend):
    """The async form of :class:`PinnedBackend` (MCP sources over HTTP): the same pin check.

    Each connect attempt is bounded by the smaller of httpcore2's connect timeout and
    :attr:`Pins.deadline` (an MCP source sets no deadline: its calls are bounded by their
    own timeouts); a refused or timed-out address is skipped for the next pinned one.

    Args:
        pins: the connection's pin table (read at every connect).
        inner: the backend that opens sockets (``httpcore2.AnyIOBackend()`` by default).
    """

    def __init__(self, pins: Pins, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        self._pins = pins
        self._inner = inner if inner is not None else httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Connect to the first reachable pinned address of ``host:port``; never resolve ``host``.

        Raises:
            httpcore2.ConnectError: ``host:port`` was not vetted, or no address answered.
        """
        options = list(socket_options or ())
        failure: Exception | None = None
        for address in _vetted(self._pins, host, port):
            bounded = self._pins.clamp(timeout, httpcore2.ConnectTimeout)
            try:
                return await self._inner.connect_tcp(address, port, bounded, local_address, options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        raise httpcore2.ConnectError(f"could not connect to {host}:{port}: {failure}")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[_SocketOption] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Always refused: egress goes to vetted TCP addresses only.

        Raises:
            httpcore2.ConnectError: always.
        """
        raise httpcore2.ConnectError(_UNIX_REFUSED)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def _vetted(pins: Pins, host: str, port: int) -> tuple[str, ...]:
    """The pinned addresses of ``host:port``; ``ConnectError`` if it was never vetted."""
    addresses = pins.addresses(host, port)
    if not addresses:
        raise httpcore2.ConnectError(f"{host}:{port} was not vetted; refusing to connect")
    return addresses


# Most specific first: the first isinstance match wins (httpx2's map_httpcore_exceptions).
_EXCEPTIONS: Final[tuple[tuple[type[Exception], type[httpx2.HTTPError]], ...]] = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.ProxyError, httpx2.ProxyError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
)


def _map_exception(exc: Exception) -> Exception:
    for source, target in _EXCEPTIONS:
        if isinstance(exc, source):
            return target(str(exc))
    return exc


class _ResponseStream(httpx2.SyncByteStream):
    def __init__(self, inner: Iterable[bytes]) -> None:
        self._inner = inner

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._inner
        except Exception as exc:
            mapped = _map_exception(exc)
            if mapped is exc:
                raise
            raise mapped from exc

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class PinnedTransport(httpx2.BaseTransport):
    """An httpx2 transport over an httpcore2 pool whose backend is a :class:`PinnedBackend`.

    Args:
        pins: the session's pin table.
        ssl_context: the TLS context (see :func:`tls_context`); it must verify
            certificates and host names.
        socket_backend: what opens sockets *under* the pin check (default
            ``httpcore2.SyncBackend()``); the pin check and deadlines always apply.

    Raises:
        ValueError: ``ssl_context`` does not verify certificates or host names.
    """

    def __init__(
        self,
        pins: Pins,
        *,
        ssl_context: ssl.SSLContext,
        socket_backend: httpcore2.NetworkBackend | None = None,
    ) -> None:
        if ssl_context.verify_mode != ssl.CERT_REQUIRED or not ssl_context.check_hostname:
            raise ValueError("the egress TLS context must verify certificates and host names")
        self._pool = httpcore2.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=_MAX_CONNECTIONS,
            keepalive_expiry=_KEEPALIVE_EXPIRY,
            http1=True,
            http2=False,
            retries=0,
            network_backend=PinnedBackend(pins, socket_backend),
        )

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send one request through the pinned pool (httpx2's ``HTTPTransport`` contract).

        Raises:
            httpx2.TransportError: connection, TLS, timeout or protocol failures.
        """
        if not isinstance(request.stream, httpx2.SyncByteStream):
            raise TypeError("PinnedTransport needs a synchronous request body")
        core_request = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = self._pool.handle_request(core_request)
        except Exception as exc:
            mapped = _map_exception(exc)
            if mapped is exc:
                raise
            raise mapped from exc
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(typing.cast(Iterable[bytes], response.stream)),
            extensions=response.extensions,
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()


@functools.lru_cache(maxsize=16)
def _cached_context(ca_file: str | None, _stamp: tuple[int, int]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)  # system trust store
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return context


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """The egress TLS context: system CAs plus ``ca_file``, TLS 1.2+, host names verified.

    Contexts are cached per file (and its size and modification time): building one
    loads the system store, which costs tens of milliseconds.

    Args:
        ca_file: an extra PEM bundle to trust (``HostConfig.extra_ca_file``), or ``None``.

    Raises:
        OSError: the file cannot be read.
        ssl.SSLError: the file holds no usable certificate.

    Returns:
        A shared, verifying ``ssl.SSLContext`` (do not modify it).
    """
    if ca_file is None:
        return _cached_context(None, (0, 0))
    stat = Path(ca_file).stat()
    return _cached_context(str(ca_file), (stat.st_mtime_ns, stat.st_size))


def checked_transport(transport: object) -> httpx2.BaseTransport:
    """``transport`` if it is an ``httpx2`` transport; otherwise a ``TypeError`` with the migration.

    A :data:`TransportFactory` written for the former stack (``httpx.MockTransport``, an
    ``httpx.BaseTransport`` subclass) would be handed ``httpx2`` requests and answer with
    responses the session cannot read; it is refused before any request instead.

    Raises:
        TypeError: ``transport`` is not an ``httpx2.BaseTransport``.
    """
    if isinstance(transport, httpx2.BaseTransport):
        return transport
    kind = type(transport)
    raise TypeError(
        f"the transport factory returned a {kind.__module__}.{kind.__qualname__}, not an "
        "httpx2.BaseTransport: Stockade's HTTP stack is httpx2 (the maintained continuation of "
        "httpx). Build the transport with httpx2 (httpx2.MockTransport, httpx2.Response, ...), "
        "or call httpx2.alias_httpx() before anything imports httpx; see docs/host-apps.md"
    )


def pinned_transport_factory(*, ca_file: Path | None) -> TransportFactory:
    """The default :data:`TransportFactory`: a :class:`PinnedTransport` trusting ``ca_file``.

    Args:
        ca_file: extra trusted CA bundle or ``None`` (system store only).

    Raises:
        OSError: the file cannot be read.
        ssl.SSLError: the file holds no usable certificate.

    Returns:
        A factory building one pinned transport per session.
    """
    context = tls_context(ca_file)

    def factory(pins: Pins) -> httpx2.BaseTransport:
        return PinnedTransport(pins, ssl_context=context)

    return factory
