"""Replay: answer from recorded interactions, in order, through the host's own rules."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Final

import httpx2

from host.egress.cassette.redact import CassetteRedactor
from host.egress.hygiene import fold_header_name
from host.egress.transport import Pins
from host.formats.cassette import (
    Cassette,
    Interaction,
    RecordedExchange,
)

__all__ = ["REPLAY_ADDRESS", "CassetteMiss", "CassetteReplayer", "replay_resolver"]

REPLAY_ADDRESS: Final = "93.184.215.14"
"""What every name resolves to in replay: public (so vetting runs), never connected to."""

_DEFAULT_PORTS: Final = {"https": 443, "http": 80}


def replay_resolver(host: str) -> list[str]:
    """The replay resolver: every name is :data:`REPLAY_ADDRESS` (nothing is looked up)."""
    del host
    return [REPLAY_ADDRESS]


class CassetteMiss(httpx2.TransportError):
    """Raised by the replay transport for a request no unused interaction matches."""




class CassetteReplayer:
    """Answers requests from a cassette's interactions (thread-safe).

    A request matches an interaction by method, redacted URL and the sha256 of its
    redacted body (and the redacted values of ``match_headers``, if given). Interactions
    are consumed in recorded order, each once; with ``allow_repeats`` a request matching
    only used interactions gets the last of them again.

    Args:
        cassette: what to replay.
        redactor: the same redaction as recording (placeholders make keys value-free).
        allow_repeats: let a request reuse an interaction already consumed.
        match_headers: header names whose values must match too.
        fallback: where an unmatched request goes (``new_episodes``: the recording
            transport); None: it raises :class:`CassetteMiss`.

    Attributes:
        requests: every request seen, redacted, in order (two replays give equal lists).
        unmatched: ``(method, url)`` of every request no interaction answered.
    """

    def __init__(
        self,
        cassette: Cassette,
        redactor: CassetteRedactor,
        *,
        allow_repeats: bool = False,
        match_headers: Sequence[str] = (),
        fallback: Callable[[Pins], httpx2.BaseTransport] | None = None,
    ) -> None:
        self._interactions = cassette.interactions
        self._redactor = redactor
        self._allow_repeats = allow_repeats
        self._match_headers = tuple(fold_header_name(n) for n in match_headers)
        self._fallback = fallback
        self._used = [False] * len(cassette.interactions)
        self._lock = threading.Lock()
        self.requests: list[RecordedExchange] = []
        self.unmatched: list[tuple[str, str]] = []

    def unused(self) -> list[Interaction]:
        """The interactions no request consumed."""
        with self._lock:
            return [i for i, used in zip(self._interactions, self._used, strict=True) if not used]

    def transport(self, pins: Pins) -> httpx2.BaseTransport:
        """The replay transport of one session (a :data:`TransportFactory`)."""
        fallback = None if self._fallback is None else self._fallback(pins)
        return _ReplayTransport(self, pins, fallback)

    def _key(self, exchange: RecordedExchange) -> tuple[str, str, str, tuple[str, ...]]:
        wanted = tuple(
            ";".join(v for n, v in exchange.headers if fold_header_name(n) == name)
            for name in self._match_headers
        )
        return (exchange.method, exchange.url, exchange.body_sha256, wanted)

    def _answer(self, exchange: RecordedExchange) -> Interaction | None:
        key = self._key(exchange)
        with self._lock:
            self.requests.append(exchange)
            last = None
            for index, interaction in enumerate(self._interactions):
                if self._key(interaction.request) != key:
                    continue
                if not self._used[index]:
                    self._used[index] = True
                    return interaction
                last = interaction
            if last is not None and self._allow_repeats:
                return last
            self.unmatched.append((exchange.method, exchange.url))
            return None


class _ReplayTransport(httpx2.BaseTransport):
    def __init__(self, replayer: CassetteReplayer, pins: Pins, fallback: httpx2.BaseTransport | None) -> None:
        self._replayer = replayer
        self._pins = pins
        self._fallback = fallback

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        port = url.port or _DEFAULT_PORTS.get(url.scheme, 0)
        if not self._pins.addresses(url.host, port):  # the pinned transport's invariant
            raise httpx2.ConnectError(f"{url.host}:{port} was not vetted", request=request)
        body = request.read()
        exchange = self._replayer._redactor.exchange(
            request.method, str(url), tuple(request.headers.multi_items()), body
        )
        found = self._replayer._answer(exchange)
        if found is None:
            if self._fallback is not None:
                with self._replayer._lock:
                    self._replayer.unmatched.pop()  # recorded instead
                return self._fallback.handle_request(request)
            message = f"no recorded interaction for {exchange.method} {exchange.url}"
            raise CassetteMiss(message, request=request)
        answer = found.response
        wire = _encode(answer.content, answer.content_encoding)
        headers = [*answer.headers, ("Content-Length", str(len(wire)))]
        if answer.content_encoding != "identity":
            headers.append(("Content-Encoding", answer.content_encoding))
        return httpx2.Response(answer.status, headers=headers, stream=_Chunks(wire))

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()


_CHUNK: Final = 64 * 1024  # bytes per replayed chunk, as a socket would deliver


class _Chunks(httpx2.SyncByteStream):
    def __init__(self, data: bytes) -> None:
        self._data = data

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self._data), _CHUNK):
            yield self._data[start : start + _CHUNK]


def _encode(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body, mtime=0)
    if encoding == "deflate":
        return zlib.compress(body)
    return body

