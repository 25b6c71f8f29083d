"""The HTTP client of a Streamable HTTP MCP source, under the host's egress rules.

The official SDK's ``streamable_http_client`` speaks the protocol; every byte it sends
or receives goes through :class:`SourceTransport`, an ``httpx2`` transport built here
from the pieces :mod:`host.egress` uses for guest requests:

- **allowlist**: the declared URL is the source's whole allowlist (its scheme, host,
  port and path, methods ``POST`` and ``DELETE``), checked by
  :meth:`host.egress.EgressPolicy.check` for every request; anything else is
  ``EGRESS_DENIED`` (``host_not_allowed``, ``path_not_allowed``, ...);
- **SSRF guard**: the host name is resolved once per connection through the host's
  resolver port and vetted by :meth:`~host.egress.EgressPolicy.vet` (every address
  public; loopback only with ``HostConfig.unsafe_allow_loopback``); the sockets are opened
  only to those addresses (:class:`host.egress.transport.PinnedAsyncBackend`, the async
  form of the one pinned backend guest egress uses), so DNS rebinding cannot move them; TLS
  verifies the certificate against the system store plus ``HostConfig.extra_ca_file``
  and the host name (:func:`host.egress.transport.tls_context`);
- **credentials**: the declared secrets are added as headers here, by the host; the SDK,
  its ``httpx2`` client and the declaration never hold them;
- **bounds**: the host asks for ``Accept-Encoding: identity``; a body compressed anyway is
  decoded here under the host's one decoding policy (:mod:`host.egress.decoding`: one
  ``gzip`` or ``deflate`` layer, stacked or unknown codings refused as ``malformed``,
  decoded incrementally), and one response body is cut at ``max_response_bytes`` **decoded**
  bytes while it is read (``MCP_UNAVAILABLE`` reason ``too_large``), so a decompression bomb
  never holds more than the limit plus one chunk; a status >= 400 fails the connection
  (``http_status``), a failed connect or TLS handshake is ``unreachable``, a connection
  broken off before or during an answer is ``crashed``; no proxies, no environment, no
  cookies, HTTP/1.1, no retries;
- **no server stream**: the server-to-client ``GET`` stream is answered ``405`` without
  touching the network (the host offers no server-to-client requests and reads no
  notifications, as for stdio).

Every refusal is reported through ``on_fault`` before it is raised, so the connection
fails the pending requests with the host's code even where the SDK would turn the error
into a synthesized JSON-RPC error.

Example::

    transport = SourceTransport(url, network=net, headers=[("Authorization", "Bearer …")],
                                max_response_bytes=65536, on_fault=record, name="files")
    async with httpx2.AsyncClient(transport=transport, trust_env=False) as client:
        ...
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final

import anyio
import httpcore2
import httpx2

from host.egress.decoding import BodyDecoder, BodyTooLarge, ResponseInvalid
from host.egress.policy import EgressPolicy, EgressTarget
from host.egress.transport import PinnedAsyncBackend, Pins, tls_context
from host.egress.urls import normalize_url
from host.errors import EgressDenied, McpUnavailable, StockadeError
from host.mcpsource.rpc import McpNetwork

__all__ = ["PinnedAsyncBackend", "SourceTransport", "endpoint_policy"]

METHODS: Final = ("POST", "DELETE")  # what the streamable HTTP client sends (GET is answered here)
_MAX_CONNECTIONS: Final = 8  # sockets one source may hold open
_KEEPALIVE_EXPIRY: Final = 30.0  # s an idle connection is kept
_DECODED_AWAY: Final = (b"content-encoding", b"content-length")  # response headers the decoding voids


def endpoint_policy(url: str) -> EgressPolicy:
    """The allowlist of a source: exactly the declared endpoint (scheme, host, port, path).

    Raises:
        EgressDenied: the URL breaks the egress URL rules (IP literal, ``localhost``,
            userinfo, ...): such a source is never reached.
    """
    target = normalize_url(url)
    return EgressPolicy.from_allow([{
        "scheme": target.scheme, "host": target.host, "port": target.port,
        "path_prefix": target.path, "methods": list(METHODS),
    }])


class _BoundedBody(httpx2.AsyncByteStream):
    """A response body decoded within bounds (:mod:`host.egress.decoding`, the one policy of
    every HTTP response the host reads): at most ``limit`` **decoded** bytes, one chunk at a
    time, never buffered past it; a compression ratio over the cap is refused as well."""

    def __init__(self, inner: httpcore2.Response, decoder: BodyDecoder, limit: int,
                 fault: Callable[[StockadeError], None], name: str) -> None:
        self._inner = inner
        self._decoder = decoder
        self._limit = limit
        self._fault = fault
        self._name = name

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner.aiter_stream():
                for piece in self._decoder.feed(chunk):
                    yield piece
            for piece in self._decoder.finish():
                yield piece
        except BodyTooLarge as exc:
            raise self._refuse(McpUnavailable(
                f"MCP source {self._name} sent a response over {self._limit} bytes ({exc}); "
                "the connection was closed",
                source=self._name, reason="too_large",
                hint="Raise limits.max_output_bytes in the declaration and re-pin, or fix the server.",
            )) from None
        except ResponseInvalid as exc:
            raise self._refuse(_undecodable(self._name, exc)) from None
        except httpcore2.TimeoutException as exc:
            raise httpx2.ReadTimeout(str(exc)) from exc
        except (httpcore2.NetworkError, httpcore2.ProtocolError) as exc:
            raise self._refuse(McpUnavailable(
                f"MCP source {self._name} broke off its answer ({exc}); the next call reconnects",
                source=self._name, reason="crashed",
            )) from None

    def _refuse(self, error: McpUnavailable) -> McpUnavailable:
        self._fault(error)
        return error

    async def aclose(self) -> None:
        await self._inner.aclose()


class SourceTransport(httpx2.AsyncBaseTransport):
    """The ``httpx2`` transport of one HTTP source connection (see the module docstring).

    Args:
        url: the declared endpoint.
        network: resolver, extra CA file and the loopback opt-in of the host.
        headers: the credential headers to add to every request (host-injected).
        max_response_bytes: the longest response body accepted.
        on_fault: told of every refusal before it is raised (first one wins there).
        name: the source name (for messages).
        timeout_s: the longest a DNS lookup may take.

    Raises:
        EgressDenied: ``url`` breaks the egress URL rules.
        OSError, ssl.SSLError: ``network.ca_file`` cannot be loaded.
    """

    def __init__(
        self,
        url: str,
        *,
        network: McpNetwork,
        headers: Sequence[tuple[str, str]],
        max_response_bytes: int,
        on_fault: Callable[[StockadeError], None],
        name: str,
        timeout_s: float,
    ) -> None:
        self._timeout_s = timeout_s
        self._policy = endpoint_policy(url)
        self._network = network
        self._headers = tuple(headers)
        self._injected = {name.lower() for name, _ in headers}
        self._limit = max_response_bytes
        self._fault = on_fault
        self._name = name
        self._pins = Pins()
        self._vetted: dict[tuple[str, int], tuple[str, ...]] = {}
        self._pool = httpcore2.AsyncConnectionPool(
            ssl_context=tls_context(network.ca_file),
            max_connections=_MAX_CONNECTIONS,
            keepalive_expiry=_KEEPALIVE_EXPIRY,
            http1=True,
            http2=False,
            retries=0,
            network_backend=PinnedAsyncBackend(self._pins),
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Check, vet, inject, send; refusals are reported to ``on_fault`` and raised.

        Raises:
            EgressDenied, EgressUnreachable: the allowlist or the SSRF guard refused.
            McpUnavailable: ``unreachable`` (connect or TLS failed), ``http_status``.
            httpx2.TimeoutException: an httpx2 timeout passed.
        """
        if request.method == "GET":  # the server-to-client stream is not offered
            return httpx2.Response(405, headers={"allow": "POST, DELETE"}, request=request)
        try:
            target = self._policy.check(request.method, str(request.url))
            await self._vet(target)
        except EgressDenied as exc:
            refused = type(exc)(
                f"MCP source {self._name}: {exc.message}", reason=exc.reason, source=self._name,
                hint="An MCP source reaches only its declared URL, at public addresses "
                "(loopback only with HostConfig.unsafe_allow_loopback, for tests).",
            )
            self._fault(refused)
            raise refused from None
        headers = [(k, v) for k, v in request.headers.raw
                   if k.decode("latin-1").lower() not in self._injected | {"accept-encoding"}]
        headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in self._headers]
        headers.append((b"Accept-Encoding", b"identity"))  # the host needs no compression
        assert isinstance(request.stream, httpx2.AsyncByteStream)
        core = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                              port=request.url.port, target=request.url.raw_path),
            headers=headers,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = await self._pool.handle_async_request(core)
        except httpcore2.TimeoutException as exc:
            raise httpx2.ConnectTimeout(str(exc)) from exc
        except (httpcore2.ConnectError, OSError) as exc:
            error = _unreachable(self._name, f"cannot reach {target.host}:{target.port}: {exc}")
            self._fault(error)
            raise error from None
        except (httpcore2.NetworkError, httpcore2.ProtocolError) as exc:  # connected, then broken off
            error = McpUnavailable(
                f"MCP source {self._name} hung up without an answer ({exc}); the next call reconnects",
                source=self._name, reason="crashed",
            )
            self._fault(error)
            raise error from None
        if response.status >= 400 and request.method != "DELETE":
            await response.aclose()
            error = McpUnavailable(
                f"MCP source {self._name} answered HTTP {response.status}; the connection was closed",
                source=self._name, reason="http_status", status=response.status,
                hint="Check the URL and the credentials the declaration sends; the next call reconnects.",
            )
            self._fault(error)
            raise error
        encodings = [v.decode("latin-1") for k, v in response.headers if k.lower() == b"content-encoding"]
        try:
            decoder = BodyDecoder.for_encodings(encodings, limit=self._limit)
        except ResponseInvalid as exc:  # stacked or unknown codings: refused before any byte is read
            await response.aclose()
            error = _undecodable(self._name, exc)
            self._fault(error)
            raise error from None
        # The body is handed on decoded: httpx2 must not decode it again (its decoders are unbounded).
        plain = [(k, v) for k, v in response.headers if k.lower() not in _DECODED_AWAY]
        return httpx2.Response(
            status_code=response.status,
            headers=plain,
            stream=_BoundedBody(response, decoder, self._limit, self._fault, self._name),
            extensions=response.extensions,
        )

    async def _vet(self, target: EgressTarget) -> None:
        """Resolve and vet ``target.host`` once per connection; pin the answer."""
        key = (target.host, target.port)
        if key in self._vetted:
            return
        deadline = time.monotonic() + self._timeout_s
        addresses = await anyio.to_thread.run_sync(
            lambda: self._policy.vet(target, self._network.resolver,
                                     allow_loopback=self._network.allow_loopback, deadline=deadline)
        )
        self._pins.pin(target.host, target.port, addresses)
        self._vetted[key] = addresses

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._pool.aclose()


def _undecodable(name: str, exc: ResponseInvalid) -> McpUnavailable:
    return McpUnavailable(
        f"MCP source {name} sent a response the host does not decode ({exc}); the connection was closed",
        source=name, reason="malformed",
        hint="The host asks for Accept-Encoding: identity and decodes at most one gzip or deflate layer.",
    )


def _unreachable(name: str, what: str) -> McpUnavailable:
    return McpUnavailable(
        f"MCP source {name}: {what}; the next call reconnects",
        source=name, reason="unreachable",
        hint="Check that the server runs and that its certificate is trusted (HostConfig.extra_ca_file).",
    )
