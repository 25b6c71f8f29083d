"""Redaction of staged secret values from everything that leaves the host (docs/design.md §8 step 9).

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
- basic-auth: base64 of ``username:v`` for every ``basic_usernames`` entry and of ``:v``;
- hex of ``b`` (upper, lower and mixed case), ``\\xHH`` escapes of ``b``, and hex HTML
  character references (``&#x73;``, any case) — searched case-insensitively;
- HTML: ``html.escape(v)`` and every character as a decimal reference (``&#115;``);
- double URL-encoding (``quote(quote(v))``, any hex case);
- UTF-16 (little- and big-endian) of ``v`` in bytes (and its Latin-1 reading in text,
  for ASCII values);
- line-wrapped base64: every base64 form above is also searched in a view of the text
  with CR and LF removed (MIME wraps at 76 columns, PEM at 64), and the matched span,
  line breaks included, is replaced.

Every occurrence of every form is found, overlapping ones included, and the *union* of the
matched spans is replaced (adjacent or overlapping spans become one ``[REDACTED]``). This is
stronger than "longest alternative first": with secrets ``xabc`` and ``abcdef`` the text
``xabcdef`` becomes ``[REDACTED]``, where a leftmost regex alternation would leave ``def``.

Short values: the redactor redacts every non-empty value however short (hiding too much is
safe, leaking is not). A value of 1-3 characters would erase most text, so
:class:`host.secrets.store.SecretsStore` refuses to store values shorter than 8 characters; a
staged value is therefore never that short in practice. Empty values are ignored.

Cost: one ``str.find``/``bytes.find`` scan per distinct form (C speed), plus one
length-preserving ASCII lower-casing of the text for the case-insensitive forms, plus one
copy without CR/LF when the text has line breaks. :meth:`Redactor.texts` redacts many
short texts (response headers) in one pass per form over their concatenation, so its
cost is linear in their total size, not in their number. A hostile, highly
repetitive body cannot make it quadratic: runs of overlapping matches of a periodic form
are measured with slice comparisons. With no secrets, every method returns its input
unchanged (fast path).

Example::

    redactor = Redactor(["s3cr3t-token"], basic_usernames=["bot"])
    redactor.text("echo: s3cr3t-token")         # 'echo: [REDACTED]'
    redactor.bytes(b"czNjcjN0LXRva2Vu")         # b'[REDACTED]'
    redactor.json_value({"s3cr3t-token": [1, "x s3cr3t-token"]})
"""

from __future__ import annotations

import base64
import bisect
import html
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar, final
from urllib.parse import quote, quote_plus

from host.secrets.store import SecretValue

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


View = Literal["raw", "lower", "squeezed"]
"""Where a family is searched: the text, its ASCII-lower-cased view, or its view without
CR/LF (the text itself when it has no line break)."""

_Family = tuple[View, str, set[str]]


def _base64_forms(value: str, usernames: Sequence[str]) -> set[str]:
    """Base64 forms of one value (searched across line breaks): value and basic-auth."""
    forms = _b64_forms(value.encode("utf-8"))
    for username in (*usernames, ""):
        pair = base64.b64encode(f"{username}:{value}".encode()).decode("ascii")
        forms.update((pair, pair.rstrip("=")))
    return forms


def _plain_forms(value: str) -> set[str]:
    """Case-sensitive forms without a common marker: raw, JSON and HTML escapes."""
    forms = {value, html.escape(value), html.escape(value, quote=False)}
    for ensure_ascii in (True, False):
        escaped = json.dumps(value, ensure_ascii=ensure_ascii)[1:-1]
        forms.update((escaped, escaped.replace("/", "\\/")))
    return forms


def _url_forms(value: str) -> set[str]:
    """URL-encoded forms of one value, once and twice, lower-cased."""
    once = {
        quote(value, safe=""),
        quote(value, safe="/"),
        quote(value, safe=_JS_URI_COMPONENT_SAFE),
        quote_plus(value, safe=""),
    }
    twice = {quote(form, safe="") for form in once}
    return {form.translate(_ASCII_LOWER) for form in once | twice if form != value}


def _families(value: str, usernames: Sequence[str]) -> list[_Family]:
    """Every form of one value as (view, gate, forms): a form can only occur in a text
    whose view contains the gate (``""``: no gate), so whole families are skipped cheaply."""
    data = value.encode("utf-8")
    url = _url_forms(value)
    families: list[_Family] = [
        ("raw", "", _plain_forms(value)),
        ("raw", "&#", {"".join(f"&#{ord(c)};" for c in value)}),
        ("lower", "", {data.hex()}),
        ("lower", "\\x", {"".join(f"\\x{byte:02x}" for byte in data)}),
        ("lower", "&#x", {"".join(f"&#x{ord(c):x};" for c in value)}),
        ("lower", "%", {form for form in url if "%" in form}),
        ("lower", "+", {form for form in url if "%" not in form}),
        ("squeezed", "", _base64_forms(value, usernames)),
    ]
    if value.isascii():  # UTF-16 text read as Latin-1 (bytes get the real encodings)
        utf16 = {value.encode(codec).decode("latin-1") for codec in ("utf-16-le", "utf-16-be")}
        families.append(("raw", "\x00", utf16))
    return families


def _bytes_only_forms(value: str) -> set[bytes]:
    """Forms that exist only as bytes: UTF-16 of the value, both byte orders."""
    return {value.encode("utf-16-le"), value.encode("utf-16-be")}


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


@dataclass(frozen=True, slots=True)
class _Kind(Generic[_S]):
    """The constants of one haystack type (``str`` or ``bytes``)."""

    cr: _S
    lf: _S
    percent: _S
    plus: _S
    empty: _S
    marker: _S
    breaks: re.Pattern[_S]
    lower: Callable[[_S], _S]
    join: Callable[[list[_S]], _S]


def _lower_str(s: str) -> str:
    # Length-preserving: str.lower() is, for ASCII text; otherwise only ASCII letters change.
    return s.lower() if s.isascii() else s.translate(_ASCII_LOWER)


_STR: Final[_Kind[str]] = _Kind(
    "\r", "\n", "%", "+", "", REDACTED, re.compile(r"[\r\n]"), _lower_str, "".join
)
# bytes.lower() touches ASCII letters only.
_BYTES: Final[_Kind[bytes]] = _Kind(
    b"\r", b"\n", b"%", b"+", b"", _REDACTED_B, re.compile(rb"[\r\n]"), bytes.lower, b"".join
)


@dataclass(frozen=True, slots=True)
class _Group(Generic[_S]):
    """Forms searched in one view of the text, only when the view contains ``gate``."""

    view: View
    gate: _S
    forms: tuple[tuple[_S, int], ...]


@dataclass(frozen=True, slots=True)
class _FormSet(Generic[_S]):
    """Every form of every value, for one haystack type, grouped by view and gate."""

    kind: _Kind[_S]
    groups: tuple[_Group[_S], ...]

    @property
    def count(self) -> int:
        """How many distinct forms there are."""
        return sum(len(group.forms) for group in self.groups)

    def forms(self, view: View) -> list[_S]:
        """Every form searched in ``view`` (for tests and reference models)."""
        return [form for group in self.groups if group.view == view for form, _ in group.forms]

    def spans(self, haystack: _S) -> list[tuple[int, int]]:
        """Every span of ``haystack`` covered by some occurrence of some form."""
        kind = self.kind
        views: dict[View, _S] = {"raw": haystack}
        breaks = kind.lf in haystack or kind.cr in haystack
        found: list[tuple[int, int]] = []
        wrapped: list[tuple[int, int]] = []
        for group in self.groups:
            view = views.get(group.view)
            if view is None:
                view = views[group.view] = self._view(haystack, group.view)
            if group.gate and group.gate not in view:
                continue
            into = wrapped if group.view == "squeezed" and breaks else found
            for form, period in group.forms:
                _spans(view, form, period, into)
        if wrapped:
            found += _unsqueeze(haystack, wrapped, kind.breaks)
        return found

    def _view(self, haystack: _S, view: View) -> _S:
        kind = self.kind
        if view == "lower":
            return kind.lower(haystack)
        return haystack.replace(kind.cr, kind.empty).replace(kind.lf, kind.empty)

    def redact(self, haystack: _S) -> _S:
        """``haystack`` with the union of :meth:`spans` replaced by the marker."""
        spans = self.spans(haystack)
        if not spans:
            return haystack
        return _replace_spans(haystack, spans, self.kind.marker, self.kind.join)


def _form_set(kind: _Kind[_S], families: dict[tuple[View, _S], set[_S]]) -> _FormSet[_S]:
    groups = tuple(
        _Group(view, gate, _sorted_forms(forms))
        for (view, gate), forms in sorted(families.items(), key=lambda item: (item[0][0], item[0][1]))
        if any(forms)
    )
    return _FormSet(kind, groups)


def _unsqueeze(haystack: _S, spans: list[tuple[int, int]], breaks: re.Pattern[_S]) -> list[tuple[int, int]]:
    """Map spans of the CR/LF-free view of ``haystack`` back onto ``haystack`` itself."""
    # Break i sits just before the character whose index in the view is (its position - i).
    inserted = [match.start() - i for i, match in enumerate(breaks.finditer(haystack))]

    def original(index: int) -> int:
        return index + bisect.bisect_right(inserted, index)

    return [(original(start), original(end - 1) + 1) for start, end in spans]


def _sorted_forms(forms: Iterable[_S]) -> tuple[tuple[_S, int], ...]:
    # Longest first: irrelevant for correctness (spans are unioned), kept for stable order.
    ordered = sorted({f for f in forms if f}, key=lambda f: (-len(f), f))
    return tuple((form, _smallest_period(form)) for form in ordered)


def _encoded(forms: Iterable[str]) -> set[bytes]:
    return {form.encode("utf-8") for form in forms}


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

    __slots__ = ("_bytes", "_count", "_str")

    _count: int
    _str: _FormSet[str]
    _bytes: _FormSet[bytes]

    def __init__(self, values: Iterable[str | SecretValue], *, basic_usernames: Iterable[str] = ()) -> None:
        users = [_require_str(name, "basic username") for name in basic_usernames]
        text: dict[tuple[View, str], set[str]] = {}
        data: dict[tuple[View, bytes], set[bytes]] = {}
        count = 0
        for item in values:
            value = _reveal(item)
            if not value:
                continue
            count += 1
            for view, gate, forms in _families(value, users):
                text.setdefault((view, gate), set()).update(forms)
                data.setdefault((view, gate.encode("utf-8")), set()).update(_encoded(forms))
            data.setdefault(("raw", b"\x00"), set()).update(_bytes_only_forms(value))
        set_ = object.__setattr__
        set_(self, "_count", count)
        set_(self, "_str", _form_set(_STR, text))
        set_(self, "_bytes", _form_set(_BYTES, data))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Redactor is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Redactor is immutable")

    def __repr__(self) -> str:
        return f"Redactor(<{self._count} secrets, {self._str.count} forms>)"

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
        return self._str.redact(s)

    def texts(self, items: Sequence[str]) -> list[str]:
        """Redact many texts at once, in one pass per form over their concatenation.

        For response headers: thousands of short names and values cost one
        scan of their total size per form, not one scan per item. The texts are joined
        with LF, so a secret's base64 split across two items is found like a wrapped one;
        a match crossing a boundary is redacted on both sides (hiding too much is safe).

        Args:
            items: the texts, in order.

        Returns:
            The redacted texts, in the same order.

        Raises:
            TypeError: an item is not a ``str``.
        """
        out = list(items)
        for item in out:
            if not isinstance(item, str):
                raise TypeError(f"Redactor.texts expects str items, got {type(item).__name__}")
        if self._count == 0 or not out:
            return out
        spans = self._str.spans("\n".join(out))
        if spans:
            _redact_items(out, sorted(spans))
        return out

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
        return self._bytes.redact(data)

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


def _redact_items(items: list[str], spans: list[tuple[int, int]]) -> None:
    """Apply sorted spans of ``"\\n".join(items)`` to each item, clipped to its bounds."""
    first = 0
    offset = 0
    for index, item in enumerate(items):
        end = offset + len(item)
        while first < len(spans) and spans[first][1] <= offset:
            first += 1
        local: list[tuple[int, int]] = []
        at = first
        while at < len(spans) and spans[at][0] < end:
            start, stop = spans[at]
            if stop > offset:
                local.append((max(start, offset) - offset, min(stop, end) - offset))
            at += 1
        if local:
            items[index] = _replace_spans(item, local, REDACTED, "".join)
        offset = end + 1


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
