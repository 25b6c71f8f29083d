"""Redaction of staged secret values from everything that leaves the host (DESIGN §8 step 9).

A :class:`Redactor` is built once per call from the secret values staged for that call and
is frozen afterwards. It replaces every occurrence of each value, and of every form in which
a server, a guest or an error message could plausibly echo it, with :data:`REDACTED`.

Forms covered, for each value ``v`` (its UTF-8 bytes ``b``):

- raw ``v``;
- URL-encoded: ``quote(v, safe="")``, ``quote(v, safe="/")``, ``quote_plus(v, safe="")``
  (``+`` for space) and the JavaScript ``encodeURIComponent`` spelling; the hex digits of
  ``%XX`` escapes match in upper, lower *and mixed* case (these forms are searched
  ASCII-case-insensitively in a length-preserving lower-cased view of the text);
- JSON string escapes (``\\"``, ``\\\\``, ``\\uXXXX`` with and without ``ensure_ascii``,
  and ``\\/``) when they differ from the raw value;
- base64, standard and URL-safe alphabets, with and without ``=`` padding;
- base64 *inside a longer base64 blob*: for each of the three byte alignments the run of
  characters determined by the secret's bytes alone (as GitHub Actions masks secrets),
  kept only when at least :data:`MIN_FORM_CHARS` long so short values cannot erase text;
- basic-auth: base64 of ``username:v`` for every ``basic_usernames`` entry and of ``:v``.

Every occurrence of every form is found, overlapping ones included, and the *union* of the
matched spans is replaced (adjacent or overlapping spans become one ``[REDACTED]``). This is
stronger than "longest alternative first": with secrets ``xabc`` and ``abcdef`` the text
``xabcdef`` becomes ``[REDACTED]``, where a leftmost regex alternation would leave ``def``.

Short values: the redactor redacts every non-empty value however short (hiding too much is
safe, leaking is not). A value of 1-3 characters would erase most text, so
:class:`host.secrets.SecretsStore` refuses to store values shorter than 8 characters; a
staged value is therefore never that short in practice. Empty values are ignored.

Cost: one ``str.find``/``bytes.find`` scan per distinct form (C speed), plus one
length-preserving ASCII lower-casing of the text when it contains ``%`` or ``+`` and some
value has URL-encoded forms. A hostile, highly repetitive body cannot make it quadratic:
runs of overlapping matches of a periodic form are measured with slice comparisons.
With no secrets, every method returns its input unchanged (fast path).

Example::

    redactor = Redactor(["s3cr3t-token"], basic_usernames=["bot"])
    redactor.text("echo: s3cr3t-token")         # 'echo: [REDACTED]'
    redactor.bytes(b"czNjcjN0LXRva2Vu")         # b'[REDACTED]'
    redactor.json_value({"s3cr3t-token": [1, "x s3cr3t-token"]})
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Final, TypeVar, final
from urllib.parse import quote, quote_plus

from host.secrets import SecretValue

__all__ = ["MIN_FORM_CHARS", "REDACTED", "Redactor"]

REDACTED: Final = "[REDACTED]"
"""What every secret form is replaced with."""

MIN_FORM_CHARS: Final = 8
"""Base64 alignment cores shorter than this are not used (they would match ordinary text)."""

_REDACTED_B: Final = REDACTED.encode("ascii")
_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_JS_URI_COMPONENT_SAFE: Final = "-_.!~*'()"

_S = TypeVar("_S", str, bytes)


def _b64_forms(data: bytes) -> set[str]:
    """Full base64 spellings of ``data`` and its alignment cores, both alphabets."""
    forms: set[str] = set()
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        full = encode(data).decode("ascii")
        forms.update((full, full.rstrip("=")))
        for offset in range(3):
            # With `offset` unknown bytes before the value, the first characters mix in
            # those bytes and the last one mixes in whatever follows: keep the middle.
            skip = (0, 2, 3)[offset]
            total_bits = 8 * (offset + len(data))
            core = encode(b"\0" * offset + data).decode("ascii")[skip : total_bits // 6]
            if len(core) >= MIN_FORM_CHARS:
                forms.add(core)
    return forms


def _plain_forms(value: str, usernames: Sequence[str]) -> set[str]:
    """Case-sensitive forms of one value: raw, JSON escapes, base64 and basic-auth."""
    forms = {value}
    for ensure_ascii in (True, False):
        escaped = json.dumps(value, ensure_ascii=ensure_ascii)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    forms.update(_b64_forms(value.encode("utf-8")))
    for username in (*usernames, ""):
        pair = base64.b64encode(f"{username}:{value}".encode()).decode("ascii")
        forms.update((pair, pair.rstrip("=")))
    return forms


def _url_forms(value: str) -> set[str]:
    """URL-encoded forms of one value, lower-cased (searched case-insensitively)."""
    forms = {
        quote(value, safe=""),
        quote(value, safe="/"),
        quote(value, safe=_JS_URI_COMPONENT_SAFE),
        quote_plus(value, safe=""),
    }
    return {form.translate(_ASCII_LOWER) for form in forms if form != value}


def _smallest_period(form: _S) -> int:
    """The smallest p > 0 with form[p:] == form[:-p] (len(form) if none): KMP failure."""
    fail = [0] * len(form)
    k = 0
    for i in range(1, len(form)):
        while k and form[i] != form[k]:
            k = fail[k - 1]
        if form[i] == form[k]:
            k += 1
        fail[i] = k
    return len(form) - fail[-1]


def _periodic_end(haystack: _S, start: int, period: int) -> int:
    """First index x >= start with haystack[x] != haystack[x - period] (or len)."""
    # haystack[x] == haystack[x - p] for all x in [a, a + n) iff the two slices are equal.
    end, step = start, 1
    while end < len(haystack):
        n = min(step, len(haystack) - end)
        if haystack[end : end + n] == haystack[end - period : end - period + n]:
            end, step = end + n, step * 2
        elif n == 1:
            return end
        else:
            step = max(1, n // 2)
    return end


def _spans(haystack: _S, form: _S, period: int, out: list[tuple[int, int]]) -> None:
    """Append the spans covering every (possibly overlapping) occurrence of ``form``."""
    size = len(form)
    at = haystack.find(form)
    while at >= 0:
        last = at
        if period < size:
            # A run of overlapping occurrences: occurrences sit every `period` characters
            # while the text keeps the period, and no other occurrence starts in between.
            stop = _periodic_end(haystack, at + size, period)
            last = at + ((stop - size - at) // period) * period
        out.append((at, last + size))
        at = haystack.find(form, last + period)


def _replace_spans(
    haystack: _S, spans: list[tuple[int, int]], marker: _S, join: Callable[[list[_S]], _S]
) -> _S:
    """Replace the union of ``spans`` in ``haystack`` with ``marker``."""
    spans.sort()
    parts: list[_S] = []
    cursor = 0
    start, end = spans[0]
    for span_start, span_end in spans[1:]:
        if span_start <= end:
            end = max(end, span_end)
            continue
        parts += (haystack[cursor:start], marker)
        cursor = end
        start, end = span_start, span_end
    parts += (haystack[cursor:start], marker, haystack[end:])
    return join(parts)


@final
class Redactor:
    """Replaces staged secret values and their derived forms with ``[REDACTED]``.

    Immutable after construction; safe to share between threads.

    Args:
        values: the secret values staged for this call (``str`` or ``SecretValue``).
            Empty values are ignored.
        basic_usernames: usernames of ``basic`` credential mappings, so that the
            base64 of ``username:secret`` is redacted as a whole.

    Raises:
        TypeError: a value or username is not a string (or ``SecretValue``).
    """

    __slots__ = ("_count", "_plain_b", "_plain_s", "_url_b", "_url_s")

    _count: int
    _plain_s: tuple[tuple[str, int], ...]
    _plain_b: tuple[tuple[bytes, int], ...]
    _url_s: tuple[tuple[str, int], ...]
    _url_b: tuple[tuple[bytes, int], ...]

    def __init__(self, values: Iterable[str | SecretValue], *, basic_usernames: Iterable[str] = ()) -> None:
        users = [_require_str(name, "basic username") for name in basic_usernames]
        plain: set[str] = set()
        url: set[str] = set()
        count = 0
        for item in values:
            value = _reveal(item)
            if not value:
                continue
            count += 1
            plain |= _plain_forms(value, users)
            url |= _url_forms(value)
        plain.discard("")
        url.discard("")
        # Longest first: irrelevant for correctness (spans are unioned), kept for stable order.
        plain_s = sorted(plain, key=lambda f: (-len(f), f))
        url_s = sorted(url, key=lambda f: (-len(f), f))
        set_ = object.__setattr__
        set_(self, "_count", count)
        set_(self, "_plain_s", tuple((f, _smallest_period(f)) for f in plain_s))
        set_(self, "_url_s", tuple((f, _smallest_period(f)) for f in url_s))
        set_(self, "_plain_b", _encode_forms(plain_s))
        set_(self, "_url_b", _encode_forms(url_s))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Redactor is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Redactor is immutable")

    def __repr__(self) -> str:
        forms = len(self._plain_s) + len(self._url_s)
        return f"Redactor(<{self._count} secrets, {forms} forms>)"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("Redactor holds secret values and cannot be pickled")

    @property
    def empty(self) -> bool:
        """True when there is nothing to redact (no non-empty value was given)."""
        return self._count == 0

    def text(self, s: str) -> str:
        """Return ``s`` with every secret form replaced by ``[REDACTED]``.

        Args:
            s: any text (header value, body, error message, log line, trap text).

        Returns:
            The redacted text (``s`` itself when nothing matched).

        Raises:
            TypeError: ``s`` is not a ``str``.
        """
        if not isinstance(s, str):
            raise TypeError(f"Redactor.text expects str, got {type(s).__name__}")
        if self._count == 0 or not s:
            return s
        spans: list[tuple[int, int]] = []
        for form, period in self._plain_s:
            _spans(s, form, period, spans)
        if self._url_s and ("%" in s or "+" in s):
            lowered = s.translate(_ASCII_LOWER)  # ASCII only: length-preserving
            for form, period in self._url_s:
                _spans(lowered, form, period, spans)
        if not spans:
            return s
        return _replace_spans(s, spans, REDACTED, "".join)

    def bytes(self, b: bytes) -> bytes:
        """Return ``b`` with every secret form (UTF-8 encoded) replaced by ``[REDACTED]``.

        Args:
            b: any bytes (a response body, a captured stdout chunk).

        Returns:
            The redacted bytes (``b`` itself when nothing matched).

        Raises:
            TypeError: ``b`` is not bytes-like.
        """
        if not isinstance(b, (bytes, bytearray, memoryview)):
            raise TypeError(f"Redactor.bytes expects bytes, got {type(b).__name__}")
        data = bytes(b)
        if self._count == 0 or not data:
            return data
        spans: list[tuple[int, int]] = []
        for form, period in self._plain_b:
            _spans(data, form, period, spans)
        if self._url_b and (b"%" in data or b"+" in data):
            lowered = data.lower()  # bytes.lower() touches ASCII letters only
            for form, period in self._url_b:
                _spans(lowered, form, period, spans)
        if not spans:
            return data
        return _replace_spans(data, spans, _REDACTED_B, b"".join)

    def json_value(self, v: object) -> object:
        """Return a copy of a JSON-able value with secrets redacted in strings and keys.

        Dicts, lists and tuples are copied (tuples become lists); numbers, booleans and
        ``None`` are returned unchanged. If two keys redact to the same text, the later
        one wins (the object loses a member, never reveals one).

        Args:
            v: a JSON-able value (``dict``/``list``/``tuple``/``str``/``int``/``float``/
                ``bool``/``None``).

        Returns:
            The redacted value.

        Raises:
            TypeError: ``v`` contains a value that is not JSON-able.
        """
        if isinstance(v, str):
            return self.text(v)
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, dict):
            return {
                (self.text(k) if isinstance(k, str) else k): self.json_value(item) for k, item in v.items()
            }
        if isinstance(v, (list, tuple)):
            return [self.json_value(item) for item in v]
        raise TypeError(f"Redactor.json_value: {type(v).__name__} is not JSON-able")


def _encode_forms(forms: Sequence[str]) -> tuple[tuple[bytes, int], ...]:
    encoded = dict.fromkeys(form.encode("utf-8") for form in forms)
    return tuple((form, _smallest_period(form)) for form in encoded)


def _require_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be str, got {type(value).__name__}")
    return value


def _reveal(item: object) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, SecretValue):
        return item.reveal()
    raise TypeError(f"secret value must be str or SecretValue, got {type(item).__name__}")
