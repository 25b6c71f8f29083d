"""Canonical JSON (RFC 8785, "JCS") and SHA-256 digests (docs/design.md §1, §2, §7).

Everything Stockade hashes, signs or hands to a guest is canonical JSON: one byte string
per value, so a digest or an approval binds the *value*, never a spelling of it. The
serializer is the maintained ``rfc8785`` package; this module decides what may reach it
and turns every refusal into :class:`~host.errors.InputInvalid` with the JSON pointer of
the offending value (``details["pointer"]``) and the rule broken (``details["rule"]``).

Choices (each one is a refusal, never a repair):

- **Types.** ``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` and ``dict`` with
  ``str`` keys. A ``tuple`` is accepted as an array (host code builds digest statements
  from tuples; :func:`parse_json` never produces one). Subclasses of ``str``/``int``
  (string and int enums) serialize as their base value. Anything else (``bytes``,
  ``set``, ``Decimal``, non-``dict`` mappings, objects) is refused: rule
  ``unsupported-type``. ``bool`` is JSON ``true``/``false``, never a number.
- **Integers** must lie in the JSON-safe range ±(2**53 − 1) (RFC 7493 §2.2, RFC 8785
  §3.2.2.3): an integer beyond it cannot survive an IEEE-754 round trip, so two
  different values would share a digest. Rule ``integer-range``.
- **Floats** must be finite (no NaN, ±Infinity: rule ``not-finite``) and serialize as
  ECMAScript ``Number.prototype.toString`` (RFC 8785 §3.2.2.3): ``1.0`` → ``1``,
  ``-0.0`` → ``0``, ``1e21`` → ``1e+21``. A float of magnitude 2**53 up to 1e21 prints
  as integer digits (``1e16`` → ``10000000000000000``), which :func:`parse_json` then
  refuses as an out-of-range integer instead of rounding it: such numbers never survive
  a round trip, and the schema subset bounds every number within ±(2**53 − 1) anyway.
- **Strings and keys** may hold any code point except the surrogates U+D800–U+DFFF: a
  lone surrogate has no UTF-8 form (RFC 8785 §3.2.2.2, RFC 7493 §2.1). Rule
  ``lone-surrogate``. Keys must be ``str`` (rule ``key-type``).
- **Depth.** At most :data:`MAX_JSON_DEPTH` nested arrays/objects (rule ``too-deep``),
  checked without recursion, so hostile or cyclic values fail cleanly instead of
  raising ``RecursionError``.

:func:`parse_json` is the strict parser for untrusted text: UTF-8 only (no BOM, no
UTF-16/32 sniffing), duplicate object keys refused (``duplicate-key``; RFC 8259 §4 leaves
them undefined, so two readers could disagree), ``NaN``/``Infinity`` literals and
overflowing numbers refused, ``\\ud800``-style escapes of lone surrogates refused, a
byte budget (``too-large``) checked before parsing. Everything it returns is accepted by
:func:`canonical_json`.

Example::

    >>> canonical_json({"b": [1.0, "é"], "a": None})
    b'{"a":null,"b":[1,"\\xc3\\xa9"]}'
    >>> parse_json(b'{"a": 1, "a": 2}')
    Traceback (most recent call last):
    host.errors.InputInvalid: INPUT_INVALID: duplicate object key 'a'
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Iterable
from typing import Any, Final, TypeAlias, cast

import rfc8785

from host.errors import InputInvalid

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_POINTER_CHARS",
    "MAX_SAFE_INTEGER",
    "canonical_json",
    "digest_json",
    "json_pointer",
    "parse_json",
    "sha256_hex",
]

MAX_SAFE_INTEGER: Final = 2**53 - 1
"""Largest integer magnitude JSON carries exactly (RFC 7493 §2.2); beyond it is refused."""

MAX_JSON_DEPTH: Final = 64
"""Most nested arrays/objects in one value; the root container is depth 1.

Far above any Stockade format (a manifest with a depth-8 schema nests about 20 deep) and
far below Python's recursion limit, which ``rfc8785`` relies on.
"""

MAX_POINTER_CHARS: Final = 1024
"""JSON pointers in error details are cut to this many characters (keys are untrusted)."""

_MAX_INT_DIGITS: Final = len(str(MAX_SAFE_INTEGER))
"""Longer digit strings are out of range; refusing them unparsed avoids slow int()."""

_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_HIGH_KEY: Final = re.compile("[\ue000-\U0010ffff]")
"""Key characters whose UTF-16 order differs from code-point order against supplementary ones."""

# A path is a linked list (parent, token) so the walk never copies a path per node.
_Path: TypeAlias = "tuple[_Path, str | int] | None"


class _Refused:
    """A marker :func:`parse_json`'s hooks leave where a value was refused.

    The post-parse walk finds it and reports it with the JSON pointer of its position,
    which the ``json`` hooks themselves cannot know.
    """

    __slots__ = ("message", "rule")

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        self.message = message


def json_pointer(tokens: Iterable[str | int]) -> str:
    """Build an RFC 6901 JSON pointer, cut to :data:`MAX_POINTER_CHARS` characters.

    Args:
        tokens: object keys and array indexes from the root down.

    Returns:
        ``""`` for the root, otherwise ``"/a/0/x~1y"`` (``~`` → ``~0``, ``/`` → ``~1``).
    """
    pointer = "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)
    if len(pointer) > MAX_POINTER_CHARS:
        pointer = pointer[: MAX_POINTER_CHARS - 1] + "…"
    return pointer


def _pointer(path: _Path) -> str:
    tokens: list[str | int] = []
    while path is not None:
        path, token = path
        tokens.append(token)
    tokens.reverse()
    return json_pointer(tokens)


def _refuse(rule: str, message: str, path: _Path) -> InputInvalid:
    pointer = _pointer(path)
    where = f" at {pointer!r}" if pointer else ""
    return InputInvalid(f"{message}{where}", pointer=pointer, rule=rule)


def _check_scalar(node: object, path: _Path) -> None:
    """Check one non-container value; raise for anything canonical JSON cannot carry."""
    if node is None or isinstance(node, bool):
        return
    if isinstance(node, str):
        if _SURROGATE.search(node):
            raise _refuse("lone-surrogate", "string holds a lone surrogate", path)
    elif isinstance(node, int):
        if not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:
            raise _refuse("integer-range", "integer outside ±(2**53 - 1)", path)
    elif isinstance(node, float):
        if not math.isfinite(node):
            raise _refuse("not-finite", "NaN and Infinity are not JSON numbers", path)
    elif isinstance(node, _Refused):
        raise _refuse(node.rule, node.message, path)
    else:
        raise _refuse("unsupported-type", f"{type(node).__name__} is not a JSON type", path)


def _check_value(value: object, *, max_depth: int) -> bool:
    """Walk ``value`` without recursion and raise on the first non-canonical part.

    Returns:
        True when the value holds no float and no object key with a character at or
        above U+E000: then the standard library's sorted, compact JSON is byte-for-byte
        the RFC 8785 form (see :func:`canonical_json`).

    Raises:
        InputInvalid: with ``pointer`` and ``rule`` (see the module docstring).
    """
    simple = True
    stack: list[tuple[object, _Path, int]] = [(value, None, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, (list, tuple)):
            if depth >= max_depth:
                raise _refuse("too-deep", f"nested deeper than {max_depth}", path)
            stack.extend((node[i], (path, i), depth + 1) for i in range(len(node) - 1, -1, -1))
        elif isinstance(node, dict):
            if depth >= max_depth:
                raise _refuse("too-deep", f"nested deeper than {max_depth}", path)
            children: list[tuple[object, _Path, int]] = []
            for key, item in node.items():
                if not isinstance(key, str):
                    raise _refuse("key-type", f"object key of type {type(key).__name__}", path)
                if _SURROGATE.search(key):
                    raise _refuse("lone-surrogate", "object key holds a lone surrogate", (path, key))
                if simple and _HIGH_KEY.search(key):
                    simple = False
                children.append((item, (path, key), depth + 1))
            children.reverse()
            stack.extend(children)
        else:
            _check_scalar(node, path)
            if simple and isinstance(node, float):
                simple = False
    return simple


class _Fallback(Exception):
    """Raised by :func:`_scan` when the careful walk must decide (and name the pointer)."""


_FIXED_FLOOR = 1e-4  # below it Python's repr switches to exponent notation


def _scan(node: object, depth: int) -> bool:
    """The common case, fast: exact JSON types only, recursion bounded by MAX_JSON_DEPTH.

    Returns the same "simple" flag as :func:`_check_value`; raises :class:`_Fallback`
    for anything unusual (errors, subclasses), which :func:`_check_value` then judges.
    """
    if type(node) is str:
        if not node.isascii() and _SURROGATE.search(node):
            raise _Fallback
        return True
    if type(node) is int:
        if -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:
            return True
        raise _Fallback
    if node is None or type(node) is bool:
        return True
    if type(node) is float:
        if math.isfinite(node):
            # A non-integral float of magnitude >= 1e-4 prints the same in both: Python's
            # repr and ECMAScript's Number#toString both give the shortest round-trip
            # digits, and both use fixed notation there (Python below 1e16, ECMAScript
            # below 1e21; a non-integral float is below 2**52). Integral floats (1.0 → 1,
            # -0.0 → 0) and smaller magnitudes (1e-05 vs 0.00001) take the slow way.
            return abs(node) >= _FIXED_FLOOR and not node.is_integer()
        raise _Fallback
    if depth >= MAX_JSON_DEPTH:
        raise _Fallback
    simple = True
    if type(node) is dict:
        for key, item in node.items():
            if type(key) is not str:
                raise _Fallback
            if not key.isascii():
                if _SURROGATE.search(key):
                    raise _Fallback
                if _HIGH_KEY.search(key):
                    simple = False
            if not _scan(item, depth + 1):
                simple = False
        return simple
    if type(node) is list or type(node) is tuple:
        for item in node:
            if not _scan(item, depth + 1):
                simple = False
        return simple
    raise _Fallback


def canonical_json(value: object) -> bytes:
    """Serialize ``value`` as RFC 8785 canonical JSON.

    Args:
        value: JSON data (see the module docstring for the accepted types and ranges).

    Raises:
        InputInvalid: the value has no canonical form; ``details`` carry ``pointer`` and
            ``rule`` (``unsupported-type``, ``key-type``, ``integer-range``,
            ``not-finite``, ``lone-surrogate`` or ``too-deep``).

    Returns:
        The canonical UTF-8 bytes.
    """
    try:
        simple = _scan(value, 0)
    except _Fallback:
        simple = _check_value(value, max_depth=MAX_JSON_DEPTH)
    if simple:
        # Fast path (C encoder). Without floats (but those :func:`_scan` lets through),
        # RFC 8785 differs from sorted compact JSON only in key order, which is UTF-16
        # code-unit order: equal to code-point order
        # unless a key holds a character >= U+E000. String escaping is the same as
        # ECMAScript's (short escapes for \b \t \n \f \r, lower-case \u00xx for other
        # controls, nothing else escaped with ensure_ascii=False); lone surrogates were
        # refused above. tests/unit/host/test_canonical.py checks this against rfc8785.
        return _ENCODER.encode(value).encode("utf-8")
    try:
        # rfc8785 types its input as a recursive alias; the walk above has checked it.
        return rfc8785.dumps(cast(Any, value))
    except rfc8785.CanonicalizationError as exc:  # pragma: no cover - the walk refuses first
        raise InputInvalid(f"no canonical form: {exc}", pointer="", rule="canonical") from exc


def sha256_hex(data: bytes) -> str:
    """Return the lower-case hex SHA-256 of ``data``.

    Args:
        data: the bytes to hash.

    Returns:
        64 lower-case hex digits.
    """
    return hashlib.sha256(data).hexdigest()


def digest_json(value: object) -> str:
    """Return ``sha256_hex(canonical_json(value))``.

    Args:
        value: JSON data.

    Raises:
        InputInvalid: as :func:`canonical_json`.

    Returns:
        64 lower-case hex digits.
    """
    return sha256_hex(canonical_json(value))


def _object_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any] | _Refused:
    obj: dict[str, Any] = {}
    for key, item in pairs:
        if key in obj:
            shown = key if len(key) <= 64 else key[:64] + "…"
            return _Refused("duplicate-key", f"duplicate object key {shown!r}")
        obj[key] = item
    return obj


def _parse_int(text: str) -> int | _Refused:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        return _Refused("integer-range", "integer outside ±(2**53 - 1)")
    return int(text)


def _parse_constant(name: str) -> _Refused:
    return _Refused("not-finite", f"{name} is not a JSON number")


def _decode(data: bytes | bytearray | memoryview | str, max_bytes: int | None) -> str:
    """Return the text of ``data`` after the byte budget and UTF-8 checks."""
    if isinstance(data, str):
        size = len(data) if max_bytes is None else len(data.encode("utf-8", "surrogatepass"))
        text = data
    elif isinstance(data, (bytes, bytearray, memoryview)):
        size = len(data)
        text = ""
    else:
        raise TypeError(f"parse_json needs bytes or str, not {type(data).__name__}")
    if max_bytes is not None and size > max_bytes:
        raise InputInvalid(
            f"JSON text of {size} bytes exceeds the budget of {max_bytes} bytes",
            pointer="", rule="too-large", size=size, limit=max_bytes,
        )
    if not isinstance(data, str):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputInvalid(
                f"JSON text is not valid UTF-8 (byte {exc.start})",
                pointer="", rule="invalid-utf-8", position=exc.start,
            ) from None
    return text


def parse_json(
    data: bytes | bytearray | memoryview | str,
    *,
    max_bytes: int | None = None,
    max_depth: int = MAX_JSON_DEPTH,
) -> Any:
    """Parse untrusted JSON text strictly.

    Args:
        data: UTF-8 bytes (no BOM) or text.
        max_bytes: refuse more than this many bytes (UTF-8) before parsing; ``None``
            means no budget (only for text already bounded by the caller).
        max_depth: refuse more nested arrays/objects than this.

    Raises:
        InputInvalid: ``rule`` is ``too-large``, ``invalid-utf-8``, ``syntax`` (with
            ``position``), ``too-deep``, ``duplicate-key``, ``not-finite``,
            ``integer-range`` or ``lone-surrogate``; ``pointer`` locates the value
            where the parse got that far.
        TypeError: ``data`` is neither bytes-like nor ``str`` (caller misuse).

    Returns:
        ``None``, ``bool``, ``int``, ``float``, ``str``, ``list`` or ``dict``: a value
        :func:`canonical_json` accepts.
    """
    text = _decode(data, max_bytes)
    try:
        if text.startswith("\ufeff"):  # as json.loads does; _decoder() is json.loads without it
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        value = _decoder().decode(text)
    except json.JSONDecodeError as exc:
        raise InputInvalid(
            f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            pointer="", rule="syntax", position=exc.pos,
        ) from None
    except RecursionError:
        raise InputInvalid(
            f"JSON text nested deeper than {max_depth}", pointer="", rule="too-deep"
        ) from None
    _check_value(value, max_depth=max_depth)
    return value


_ENCODER: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
builds on every call, built once (its ``encode`` keeps no state between calls)."""


_DECODERS = threading.local()


def _decoder() -> json.JSONDecoder:
    """What ``json.loads`` with the strict hooks builds on every call, built once per
    thread (its scanner keeps a key memo between the hooks' calls; threads do not share it)."""
    decoder: json.JSONDecoder | None = getattr(_DECODERS, "decoder", None)
    if decoder is None:
        decoder = _DECODERS.decoder = json.JSONDecoder(
            object_pairs_hook=_object_pairs, parse_int=_parse_int, parse_constant=_parse_constant
        )
    return decoder
