"""Record and replay a call's HTTP at the transport seam, after every egress rule.

The seam is the session's :data:`~host.egress.transport.TransportFactory`: the
``httpx2.Request`` a transport receives has passed the budget, hygiene, normalization,
the allowlist, DNS vetting and pinning, and carries the injected credentials; the
response it returns is then bounded, decoded and redacted by the session. So:

- **Recording** (:class:`CassetteRecorder`) wraps the real pinned transport: it sees
  what went on the wire and the response as the host received it (read as the host
  reads it, streamed, at most :data:`~host.formats.cassette.MAX_CASSETTE_BYTES`).
- **Replay** (:class:`CassetteReplayer`) replaces only the transport and, with
  :func:`replay_resolver`, the resolver: every other egress step runs exactly as live,
  so a request the current manifest no longer allows is ``EGRESS_DENIED`` in replay
  too, and a recorded ``gzip`` body is re-encoded and decoded by the host under its
  limits. An unmatched request raises :class:`CassetteMiss` inside the transport (the
  guest sees a failed request, never a response it could take for the server's).

Redaction (:class:`CassetteRedactor`), before anything reaches disk, fails closed:

1. by value: every staged secret, URL-encoded, base64 (both alphabets, padded or not),
   hex and inside basic auth, becomes ``<secret:NAME>``; any other form the host's
   :class:`~host.redact.Redactor` knows becomes ``[REDACTED]``;
2. by name: credential-like headers (``Authorization``, ``Cookie``, ``Set-Cookie``,
   ``X-Api-Key``, ...), query parameters and JSON or form body keys (``access_token``,
   ``refresh_token``, ``id_token``, ``api_key``, ``client_secret``, ``password``, ...)
   in requests and responses become ``<redacted>`` (a header or parameter that holds
   nothing but placeholders keeps them, e.g. ``Bearer <secret:token>``);
3. an optional author hook, whose result is redacted again by 1 and 2;
4. a final scan of each serialized interaction and of the whole file for every form of
   every staged value: a hit raises ``CassetteInvalid`` (``secret_in_cassette``, naming
   the interaction) and nothing is written.

Example::

    redactor = CassetteRedactor({"token": value})
    recorder = CassetteRecorder(redactor)
    factory = lambda pins: recorder.wrap(pinned(pins))      # record
    replayer = CassetteReplayer(cassette, redactor)
    factory = replayer.transport                            # replay
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, quote, quote_plus, urlencode

import httpx2

from host.egress.decoding import BodyDecoder, BodyTooLarge, ResponseInvalid, parse_content_encoding
from host.egress.hygiene import fold_header_name, is_credential_header_name, is_credential_query_name
from host.egress.transport import Pins
from host.errors import CassetteInvalid
from host.formats.cassette import (
    MAX_CASSETTE_BYTES,
    Cassette,
    Interaction,
    RecordedExchange,
    RecordedResponse,
    body_fields,
)
from host.redact import Redactor

__all__ = [
    "REDACTED_BY_NAME",
    "REPLAY_ADDRESS",
    "CassetteMiss",
    "CassetteRecorder",
    "CassetteRedactor",
    "CassetteReplayer",
    "RedactionHook",
    "build_cassette",
    "replay_resolver",
    "write_cassette",
]

REDACTED_BY_NAME: Final = "<redacted>"
"""What a credential-like header, cookie, query parameter or body key's value becomes."""

REPLAY_ADDRESS: Final = "93.184.215.14"
"""What every name resolves to in replay: public (so vetting runs), never connected to."""

_DROPPED_HEADERS: Final = frozenset(
    {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive", "date"}
)  # framing (recomputed on replay) and the one timestamp servers always send
_JS_SAFE: Final = "-_.!~*'()"
_PLACEHOLDERS_ONLY: Final = re.compile(r"(?:[A-Za-z][\w-]* )?(?:<secret:[^<>\s]+>|<redacted>|\[REDACTED\])")
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}

RedactionHook = Callable[[Interaction], Interaction]
"""An author's extra redaction: receives a redacted interaction, returns one (redacted again)."""


def replay_resolver(host: str) -> list[str]:
    """The replay resolver: every name is :data:`REPLAY_ADDRESS` (nothing is looked up)."""
    del host
    return [REPLAY_ADDRESS]


class CassetteMiss(httpx2.TransportError):
    """Raised by the replay transport for a request no unused interaction matches."""


class CassetteRedactor:
    """Removes secrets by value and by name from what a cassette records (see module doc).

    Args:
        staged: the secret values, by name (never written anywhere).
        basic_usernames: basic-auth usernames of the package's credentials.
        hook: an optional author hook (its result is redacted again).
    """

    def __init__(
        self,
        staged: Mapping[str, str],
        *,
        basic_usernames: Iterable[str] = (),
        hook: RedactionHook | None = None,
    ) -> None:
        usernames = sorted(set(basic_usernames))
        forms: dict[str, str] = {}
        for name, value in staged.items():
            if not value:
                continue
            shown = f"<secret:{name}>"
            for user in [*usernames, ""]:
                for encode in (base64.b64encode, base64.urlsafe_b64encode):
                    raw = encode(f"{user}:{value}".encode()).decode("ascii")
                    forms[raw] = encode(f"{user}:{shown}".encode()).decode("ascii")
                    forms[raw.rstrip("=")] = forms[raw].rstrip("=")
            data = value.encode("utf-8")
            spelled = {
                value, quote(value, safe=""), quote(value, safe="/"), quote(value, safe=_JS_SAFE),
                quote_plus(value, safe=""), data.hex(), data.hex().upper(),
            }  # fmt: skip
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                full = encode(data).decode("ascii")
                spelled.update((full, full.rstrip("=")))
            for form in spelled:
                forms.setdefault(form, shown)
        # Longest first, so a value that contains another is replaced whole.
        self._forms = sorted(forms.items(), key=lambda item: (-len(item[0]), item[0]))
        values = [v for v in staged.values() if v]
        self._last_resort = Redactor(values, basic_usernames=usernames)
        self._hook = hook

    # -- by value ---------------------------------------------------------------------------

    def text(self, text: str) -> str:
        """Every staged value's forms as ``<secret:NAME>``; any other known form ``[REDACTED]``."""
        for form, shown in self._forms:
            text = text.replace(form, shown)
        return self._last_resort.text(text)

    def content(self, data: bytes) -> bytes:
        """:meth:`text` for bytes."""
        for form, shown in self._forms:
            data = data.replace(form.encode("utf-8"), shown.encode("utf-8"))
        return self._last_resort.bytes(data)

    def leaks(self, data: bytes) -> bool:
        """Whether ``data`` still holds any form of any staged value (the final scan)."""
        return self._last_resort.bytes(data) != data

    # -- by name ----------------------------------------------------------------------------

    def url(self, url: str) -> str:
        """The URL by value, then credential-like query parameters by name."""
        text = self.text(url)
        base, sep, query = text.partition("?")
        if not sep:
            return text
        pairs = []
        for part in query.split("&"):
            name, eq, value = part.partition("=")
            if eq and is_credential_query_name(name) and not _PLACEHOLDERS_ONLY.fullmatch(value):
                value = REDACTED_BY_NAME
            pairs.append(f"{name}{eq}{value}")
        return f"{base}?{'&'.join(pairs)}"

    def headers(self, headers: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """Headers by value, credential-like ones by name; framing headers and ``Date`` dropped."""
        kept: list[tuple[str, str]] = []
        for name, raw in headers:
            folded = fold_header_name(name)
            if folded in _DROPPED_HEADERS:
                continue
            value = self.text(raw)
            if folded in ("cookie", "cookie2", "set-cookie", "set-cookie2"):
                value = _redact_cookie(value, response=folded.startswith("set-"))
            elif is_credential_header_name(folded) and not _PLACEHOLDERS_ONLY.fullmatch(value):
                value = REDACTED_BY_NAME
            kept.append((self.text(name), value))
        return tuple(kept)

    def body(self, data: bytes, content_type: str) -> bytes:
        """A body by value, then JSON object keys or form fields by name."""
        data = self.content(data)
        kind = content_type.split(";", 1)[0].strip().lower()
        if kind == "application/x-www-form-urlencoded":
            return _redact_form(data)
        if kind == "application/json" or kind.endswith("+json") or data[:1] in (b"{", b"["):
            return _redact_json(data)
        return data

    # -- whole interactions -----------------------------------------------------------------

    def interaction(
        self,
        request: tuple[str, str, Sequence[tuple[str, str]], bytes],
        response: tuple[int, Sequence[tuple[str, str]], bytes, str],
    ) -> Interaction:
        """Build one redacted interaction (hook applied, then redacted again).

        Args:
            request: ``(method, url, headers, body)`` as sent.
            response: ``(status, headers, decoded body, content_encoding)`` as received.
        """
        method, url, req_headers, req_body = request
        status, resp_headers, resp_body, encoding = response
        built = Interaction(
            request=self._exchange(method, url, req_headers, req_body),
            response=self._response(status, resp_headers, resp_body, encoding),
        )
        if self._hook is None:
            return built
        hooked = self._hook(built)
        if not isinstance(hooked, Interaction):
            raise TypeError(f"a redaction hook must return an Interaction, not {type(hooked).__name__}")
        return Interaction(
            request=self._exchange(
                hooked.request.method, hooked.request.url, hooked.request.headers, hooked.request.content
            ),
            response=self._response(
                hooked.response.status, hooked.response.headers, hooked.response.content,
                hooked.response.content_encoding,
            ),
        )  # fmt: skip

    def exchange(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> RecordedExchange:
        """One request, redacted (what matching compares, live and in replay)."""
        return self._exchange(method, url, headers, body)

    def _exchange(
        self, method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> RecordedExchange:
        kept = self.headers(headers)
        content_type = next((v for n, v in kept if n.lower() == "content-type"), "")
        return RecordedExchange(
            method=method, url=self.url(url), headers=kept, **body_fields(self.body(body, content_type))
        )

    def _response(
        self, status: int, headers: Sequence[tuple[str, str]], body: bytes, encoding: str
    ) -> RecordedResponse:
        kept = self.headers(headers)
        content_type = next((v for n, v in kept if n.lower() == "content-type"), "")
        return RecordedResponse.model_validate(
            {
                "status": status,
                "headers": kept,
                "content_encoding": encoding,
                **body_fields(self.body(body, content_type)),
            }
        )


def _redact_cookie(value: str, *, response: bool) -> str:
    """Every cookie value as ``<redacted>`` (``Set-Cookie`` keeps its attributes)."""
    parts = value.split(";")
    cookies = parts[:1] if response else parts
    out = []
    for cookie in cookies:
        name, eq, _ = cookie.partition("=")
        out.append(f"{name}={REDACTED_BY_NAME}" if eq else REDACTED_BY_NAME)
    return ";".join(out + (parts[1:] if response else []))


def _redact_form(data: bytes) -> bytes:
    try:
        pairs = parse_qsl(data.decode("ascii"), keep_blank_values=True, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        return data
    if not any(is_credential_query_name(name) for name, _ in pairs):
        return data
    fixed = [(n, REDACTED_BY_NAME if is_credential_query_name(n) else v) for n, v in pairs]
    return urlencode(fixed).encode("ascii")


def _redact_json(data: bytes) -> bytes:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return data
    changed = [False]

    def walk(node: object) -> object:
        if isinstance(node, dict):
            out: dict[str, object] = {}
            for key, value in node.items():
                if is_credential_query_name(key) and isinstance(value, (str, int, float)) and not (
                    isinstance(value, str) and _PLACEHOLDERS_ONLY.fullmatch(value)
                ):
                    out[key] = REDACTED_BY_NAME
                    changed[0] = True
                else:
                    out[key] = walk(value)
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    fixed = walk(doc)
    if not changed[0]:
        return data
    return json.dumps(fixed, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- recording ------------------------------------------------------------------------------


class CassetteRecorder:
    """Records the interactions that pass through the transports it wraps (thread-safe).

    Args:
        redactor: applied to every interaction before it is kept.

    Attributes:
        interactions: redacted, in the order their responses completed.
        errors: why a response could not be recorded (an unsupported encoding, a body
            over the cassette ceiling); a non-empty list makes :func:`write_cassette`'s
            caller refuse to write.
    """

    def __init__(self, redactor: CassetteRedactor) -> None:
        self._redactor = redactor
        self._lock = threading.Lock()
        self.interactions: list[Interaction] = []
        self.errors: list[str] = []

    def wrap(self, inner: httpx2.BaseTransport) -> httpx2.BaseTransport:
        """A transport that sends through ``inner`` and records what it sends and gets."""
        return _RecordingTransport(inner, self)

    def _keep(self, interaction: Interaction) -> None:
        with self._lock:
            self.interactions.append(interaction)

    def _fail(self, message: str) -> None:
        with self._lock:
            self.errors.append(self._redactor.text(message))


class _RecordingTransport(httpx2.BaseTransport):
    def __init__(self, inner: httpx2.BaseTransport, recorder: CassetteRecorder) -> None:
        self._inner = inner
        self._recorder = recorder

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.read()
        response = self._inner.handle_request(request)
        sent = (request.method, str(request.url), tuple(request.headers.multi_items()), body)
        tee = _Tee(response, sent, self._recorder)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers.raw,
            stream=tee,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


class _Tee(httpx2.SyncByteStream):
    """Passes the raw body through and keeps a copy; records once the body ends or closes.

    A body the host stopped reading early (a redirect, a response over the manifest's
    limit) is read to its end here, up to the cassette ceiling, so that replay gives the
    host the same body and the same limits decide.
    """

    def __init__(
        self,
        response: httpx2.Response,
        sent: tuple[str, str, tuple[tuple[str, str], ...], bytes],
        recorder: CassetteRecorder,
    ) -> None:
        self._response = response
        self._sent = sent
        self._recorder = recorder
        self._raw = bytearray()
        self._done = False
        self._chunks = response.iter_raw()

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._chunks:
            self._take(chunk)
            yield chunk
        self._finish()

    def _take(self, chunk: bytes) -> None:
        if len(self._raw) <= MAX_CASSETTE_BYTES:
            self._raw += chunk

    def close(self) -> None:
        if not self._done:
            try:
                for chunk in self._chunks:
                    self._take(chunk)
                    if len(self._raw) > MAX_CASSETTE_BYTES:
                        break
            except httpx2.HTTPError as exc:
                self._recorder._fail(f"{self._sent[0]} {self._sent[1]}: reading the body failed: {exc}")
                self._done = True
            self._finish()
        self._response.close()

    def _finish(self) -> None:
        if self._done:
            return
        self._done = True
        method, url, headers, body = self._sent
        where = f"{method} {self._recorder._redactor.url(url)}"
        if len(self._raw) > MAX_CASSETTE_BYTES:
            self._recorder._fail(f"{where}: the response is over {MAX_CASSETTE_BYTES} bytes")
            return
        try:
            values = self._response.headers.get_list("content-encoding")
            encoding = parse_content_encoding(values)
            decoder = BodyDecoder(encoding, limit=MAX_CASSETTE_BYTES)
            decoded = b"".join([*decoder.feed(bytes(self._raw)), *decoder.finish()])
        except (ResponseInvalid, BodyTooLarge) as exc:
            self._recorder._fail(f"{where}: the response cannot be recorded: {exc}")
            return
        received = tuple(self._response.headers.multi_items())
        response = (self._response.status_code, received, decoded, encoding)
        self._recorder._keep(self._recorder._redactor.interaction((method, url, headers, body), response))


# -- replay ---------------------------------------------------------------------------------


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


# -- writing --------------------------------------------------------------------------------


def build_cassette(
    interactions: Sequence[Interaction],
    redactor: CassetteRedactor,
    *,
    package: str,
    version: str,
    manifest_sha256: str,
) -> bytes:
    """The cassette's bytes after the final scan (nothing is written here).

    Raises:
        CassetteInvalid: an interaction (``details["interaction"]``: its index, and its
            method and redacted URL) still holds a form of a staged value
            (``secret_in_cassette``), or the file would be too large (``too_large``).
    """
    cassette = Cassette(
        format="stockade.cassette/1",
        package=package,
        version=version,
        manifest_sha256=manifest_sha256,
        interactions=tuple(interactions),
    )
    for index, interaction in enumerate(cassette.interactions):
        if redactor.leaks(interaction.model_dump_json().encode("utf-8")):
            raise CassetteInvalid(
                f"interaction {index} ({interaction.request.method} {interaction.request.url}) still "
                "holds a secret after redaction; the cassette was not written",
                reason="secret_in_cassette", interaction=index,
                hint="Add a redaction hook for the field that carries it, or do not record this call.",
            )  # fmt: skip
    data = cassette.to_bytes()
    if redactor.leaks(data):
        raise CassetteInvalid(
            "the cassette still holds a secret after redaction; it was not written",
            reason="secret_in_cassette", interaction=-1,
        )  # fmt: skip
    return data


def write_cassette(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_bytes(data)
    os.replace(temp, path)

