"""Recording: tee what passes the pinned transport; the final scan; the atomic write."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx2

from host.egress.cassette.redact import CassetteRedactor
from host.egress.decoding import BodyDecoder, BodyTooLarge, ResponseInvalid, parse_content_encoding
from host.errors import CassetteInvalid
from host.formats.cassette import (
    CASSETTE_FORMAT,
    MAX_CASSETTE_BYTES,
    Cassette,
    Interaction,
)

__all__ = ["CassetteRecorder", "build_cassette", "write_cassette"]


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
        format=CASSETTE_FORMAT,
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

