"""Cassette redaction: secrets by value and by name, and an author hook (see the package docstring)."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final
from urllib.parse import parse_qsl, quote, quote_plus, urlencode

from host.egress.hygiene import fold_header_name, is_credential_header_name, is_credential_query_name
from host.formats.cassette import (
    Interaction,
    RecordedExchange,
    RecordedResponse,
    body_fields,
)
from host.secrets.redact import Redactor

__all__ = ["REDACTED_BY_NAME", "CassetteRedactor", "RedactionHook"]

REDACTED_BY_NAME: Final = "<redacted>"
"""What a credential-like header, cookie, query parameter or body key's value becomes."""

_DROPPED_HEADERS: Final = frozenset(
    {"content-length", "transfer-encoding", "content-encoding", "connection", "keep-alive", "date"}
)  # framing (recomputed on replay) and the one timestamp servers always send
_JS_SAFE: Final = "-_.!~*'()"
_PLACEHOLDERS_ONLY: Final = re.compile(r"(?:[A-Za-z][\w-]* )?(?:<secret:[^<>\s]+>|<redacted>|\[REDACTED\])")

RedactionHook = Callable[[Interaction], Interaction]
"""An author's extra redaction: receives a redacted interaction, returns one (redacted again)."""


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

