"""Canonical JSON and strict parsing (host.canonical).

The attacks: two spellings of one value getting two digests (or one digest for two
values), values that silently change on a JSON round trip (big ints, NaN, lone
surrogates), parser disagreements (duplicate keys, non-UTF-8, BOM) and resource
exhaustion (deep nesting, huge numbers, oversized text).
"""

from __future__ import annotations

import enum
import hashlib
import json
import struct
import time
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from host.canonical import (
    MAX_JSON_DEPTH,
    MAX_POINTER_CHARS,
    MAX_SAFE_INTEGER,
    canonical_json,
    digest_json,
    json_pointer,
    parse_json,
    sha256_hex,
)
from host.errors import InputInvalid, StockadeError
from tests.support.schemas import CANONICAL_JSON_VALUES


def _nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _refusal(exc_info: pytest.ExceptionInfo[InputInvalid]) -> tuple[str, str]:
    exc = exc_info.value
    assert exc.code == "INPUT_INVALID"
    assert isinstance(exc, StockadeError)
    return exc.details["rule"], exc.details["pointer"]


# --- RFC 8785 known vectors -----------------------------------------------------------

def test_rfc8785_section_3_2_2_example_serializes_exactly() -> None:
    # RFC 8785 §3.2.2: the "numbers / string / literals" sample and its canonical form.
    value = parse_json(
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    ).encode()
    assert canonical_json(value) == expected


def test_rfc8785_section_3_2_3_keys_sorted_by_utf16_code_units() -> None:
    value = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    keys = list(json.loads(canonical_json(value)))
    # U+1F600 is the surrogate pair D83D DE00: it sorts *before* U+FB33 in UTF-16
    # although it is the larger code point.
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


@pytest.mark.parametrize(
    ("ieee_hex", "expected"),
    [
        ("0000000000000000", "0"),
        ("8000000000000000", "0"),
        ("0000000000000001", "5e-324"),
        ("8000000000000001", "-5e-324"),
        ("7fefffffffffffff", "1.7976931348623157e+308"),
        ("ffefffffffffffff", "-1.7976931348623157e+308"),
        ("4340000000000000", "9007199254740992"),
        ("c340000000000000", "-9007199254740992"),
        ("4430000000000000", "295147905179352830000"),
        ("44b52d02c7e14af5", "9.999999999999997e+22"),
        ("44b52d02c7e14af6", "1e+23"),
        ("44b52d02c7e14af7", "1.0000000000000001e+23"),
        ("444b1ae4d6e2ef4e", "999999999999999700000"),
        ("444b1ae4d6e2ef4f", "999999999999999900000"),
        ("444b1ae4d6e2ef50", "1e+21"),
        ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
        ("3eb0c6f7a0b5ed8d", "0.000001"),
        ("41b3de4355555553", "333333333.3333332"),
        ("41b3de4355555554", "333333333.33333325"),
        ("41b3de4355555555", "333333333.3333333"),
        ("41b3de4355555556", "333333333.3333334"),
        ("41b3de4355555557", "333333333.33333343"),
        ("becbf647612f3696", "-0.0000033333333333333333"),
        ("43143ff3c1cb0959", "1424953923781206.2"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) == 16 else None,
)
def test_rfc8785_appendix_b_numbers_serialize_exactly(ieee_hex: str, expected: str) -> None:
    (number,) = struct.unpack(">d", bytes.fromhex(ieee_hex))
    assert canonical_json(number) == expected.encode()


@pytest.mark.parametrize(
    ("spelling_a", "spelling_b"),
    [
        ('{"a":1,"b":2}', '{ "b" : 2 , "a" : 1 }'),
        ("[1.0, 10e0, 1]", "[1, 10, 1]"),
        ('"\\u00e9"', '"é"'),
        ('"\\/"', '"/"'),
        ("-0.0", "0"),
    ],
    ids=["key-order-whitespace", "number-spelling", "unicode-escape", "solidus-escape", "negative-zero"],
)
def test_two_spellings_of_one_value_share_one_digest(spelling_a: str, spelling_b: str) -> None:
    assert digest_json(parse_json(spelling_a)) == digest_json(parse_json(spelling_b))


# --- canonical_json refusals ----------------------------------------------------------

class _Colour(str, enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    ("value", "rule", "pointer"),
    [
        (float("nan"), "not-finite", ""),
        ({"x": [float("inf")]}, "not-finite", "/x/0"),
        ([float("-inf")], "not-finite", "/0"),
        (2**53, "integer-range", ""),
        ({"n": -(2**53)}, "integer-range", "/n"),
        ([10**400], "integer-range", "/0"),
        ({1: "x"}, "key-type", ""),
        ({"a": {None: 1}}, "key-type", "/a"),
        ({("t",): 1}, "key-type", ""),
        ("\ud800", "lone-surrogate", ""),
        (["ok", "a\udc00b"], "lone-surrogate", "/1"),
        ({"\ud83d": 1}, "lone-surrogate", "/\ud83d"),
        ("\ud83d\ude00", "lone-surrogate", ""),  # two code points, not the emoji U+1F600
        (b"bytes", "unsupported-type", ""),
        ({"s": {1, 2}}, "unsupported-type", "/s"),
        ([Decimal("1.5")], "unsupported-type", "/0"),
        ([object()], "unsupported-type", "/0"),
        ({"a/b": {"c~d": [frozenset()]}}, "unsupported-type", "/a~1b/c~0d/0"),
    ],
    ids=[
        "nan", "infinity-nested", "minus-infinity", "int-2**53", "int-minus-2**53", "int-huge",
        "int-key", "none-key", "tuple-key", "lone-high-surrogate", "lone-low-surrogate",
        "surrogate-in-key", "surrogate-pair-code-points", "bytes", "set", "decimal", "object",
        "pointer-escaping",
    ],
)
def test_non_canonical_values_refused_with_pointer(value: object, rule: str, pointer: str) -> None:
    with pytest.raises(InputInvalid) as exc_info:
        canonical_json(value)
    assert _refusal(exc_info) == (rule, pointer)


@pytest.mark.parametrize("number", [MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0], ids=["max", "min", "zero"])
def test_safe_integer_edge_accepted(number: int) -> None:
    assert canonical_json(number) == str(number).encode()


def test_bool_is_serialized_as_literal_not_number() -> None:
    assert canonical_json([True, False, 1, 0]) == b"[true,false,1,0]"


def test_tuple_is_an_array_and_str_enum_is_its_value() -> None:
    assert canonical_json({"t": (1, "a"), "e": _Colour.RED}) == b'{"e":"red","t":[1,"a"]}'


def test_astral_character_serialized_as_utf8_not_escaped() -> None:
    assert canonical_json("\U0001f600") == '"\U0001f600"'.encode()


def test_nesting_at_depth_limit_accepted_and_over_refused() -> None:
    assert canonical_json(_nested_list(MAX_JSON_DEPTH)) == b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    with pytest.raises(InputInvalid) as exc_info:
        canonical_json(_nested_list(MAX_JSON_DEPTH + 1))
    assert _refusal(exc_info)[0] == "too-deep"


def test_hostile_deep_value_refused_without_recursion_error() -> None:
    with pytest.raises(InputInvalid, match="nested deeper"):
        canonical_json(_nested_list(200_000))


def test_cyclic_value_refused_not_looping() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    loop: dict[str, Any] = {}
    loop["self"] = loop
    for value in (cycle, loop):
        with pytest.raises(InputInvalid) as exc_info:
            canonical_json(value)
        assert _refusal(exc_info)[0] == "too-deep"


def test_long_pointer_is_cut() -> None:
    pointer = json_pointer(["k" * 5000])
    assert len(pointer) == MAX_POINTER_CHARS
    assert pointer.endswith("…")
    assert json_pointer([]) == ""
    assert json_pointer(["a/b", "~", 3]) == "/a~1b/~0/3"


# --- digests --------------------------------------------------------------------------

def test_sha256_hex_known_vector() -> None:
    assert sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_digest_json_hashes_the_canonical_bytes() -> None:
    value = {"b": [1.0, "é"], "a": None}
    assert digest_json(value) == hashlib.sha256(b'{"a":null,"b":[1,"\xc3\xa9"]}').hexdigest()


def test_digest_json_refuses_what_canonical_json_refuses() -> None:
    with pytest.raises(InputInvalid):
        digest_json({"n": float("nan")})


# --- parse_json -----------------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "rule", "pointer"),
    [
        (b'{"a": 1, "a": 2}', "duplicate-key", ""),
        (b'{"x": [{"k": 1, "k": 1}]}', "duplicate-key", "/x/0"),
        (b'{"\\u0061": 1, "a": 2}', "duplicate-key", ""),
        (b"[NaN]", "not-finite", "/0"),
        (b'{"v": Infinity}', "not-finite", "/v"),
        (b"-Infinity", "not-finite", ""),
        (b"[1e400]", "not-finite", "/0"),
        (b"[-1e400]", "not-finite", "/0"),
        (b"9007199254740992", "integer-range", ""),
        (b"[-9007199254740992]", "integer-range", "/0"),
        (b"[" + b"9" * 10_000 + b"]", "integer-range", "/0"),
        (b'["\\ud800"]', "lone-surrogate", "/0"),
        (b'{"k": "\\udc00"}', "lone-surrogate", "/k"),
        (b'{"\\ud800": 1}', "lone-surrogate", "/\ud800"),
        (b'"\\ude00\\ud83d"', "lone-surrogate", ""),
        (b'"\xff"', "invalid-utf-8", ""),
        (b'"\xed\xa0\x80"', "invalid-utf-8", ""),  # CESU-8 encoded surrogate
        (b'"\xc0\xaf"', "invalid-utf-8", ""),  # overlong "/"
        ('{"a": 1}'.encode("utf-16"), "invalid-utf-8", ""),  # json.loads would sniff UTF-16
        (b"\xef\xbb\xbf{}", "syntax", ""),  # UTF-8 byte order mark
        (b"", "syntax", ""),
        (b"[1,]", "syntax", ""),
        (b"{'a': 1}", "syntax", ""),
        (b'{"a": 1} x', "syntax", ""),
        (b"[1] // comment", "syntax", ""),
        (b'"tab\tinside"', "syntax", ""),
        (b"[01]", "syntax", ""),
        (b"[" * 100_000, "too-deep", ""),
    ],
    ids=[
        "duplicate-key", "duplicate-key-nested", "duplicate-key-escaped-spelling", "nan-literal",
        "infinity-literal", "minus-infinity-literal", "float-overflow", "negative-float-overflow",
        "int-2**53", "int-minus-2**53", "int-10000-digits", "escaped-lone-high-surrogate",
        "escaped-lone-low-surrogate", "escaped-surrogate-key", "reversed-surrogate-pair",
        "invalid-byte", "cesu8-surrogate", "overlong-encoding", "utf16-text", "bom", "empty",
        "trailing-comma", "single-quotes", "trailing-garbage", "comment", "raw-control-char",
        "leading-zero", "deep-nesting-100k",
    ],
)
def test_parse_json_refuses_ambiguous_or_hostile_text(text: bytes, rule: str, pointer: str) -> None:
    with pytest.raises(InputInvalid) as exc_info:
        parse_json(text)
    assert _refusal(exc_info) == (rule, pointer)


def test_parse_json_refuses_a_bom_in_text_as_in_bytes() -> None:
    """The decoder is built once; the BOM check json.loads made stays."""
    for data in (b"\xef\xbb\xbf{}", "\ufeff{}"):
        with pytest.raises(InputInvalid, match="BOM") as exc_info:
            parse_json(data)
        assert _refusal(exc_info)[0] == "syntax"


def test_parse_json_threads_each_get_their_own_decoder() -> None:
    import threading  # noqa: PLC0415  # only this test needs it

    from host import canonical  # noqa: PLC0415

    seen: list[object] = []
    worker = threading.Thread(target=lambda: seen.append(canonical._decoder()))
    worker.start()
    worker.join()
    assert seen[0] is not canonical._decoder()
    assert canonical._decoder() is canonical._decoder()


def test_parse_json_huge_integer_refused_quickly() -> None:
    start = time.perf_counter()
    with pytest.raises(InputInvalid, match="integer outside"):
        parse_json(b"1" * 1_000_000)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"9007199254740991", MAX_SAFE_INTEGER),
        (b"-9007199254740991", -MAX_SAFE_INTEGER),
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b'"\xf0\x9f\x98\x80"', "\U0001f600"),
        (b' \t\r\n{"a": [1, 2.5, null, true]} \n', {"a": [1, 2.5, None, True]}),
        (b"1E2", 100.0),
        ("\"é\"", "é"),
    ],
    ids=["max-int", "min-int", "escaped-pair", "raw-astral", "whitespace", "exponent", "str-input"],
)
def test_parse_json_accepts_strict_json(text: bytes | str, expected: object) -> None:
    assert parse_json(text) == expected


@pytest.mark.parametrize("spelling", ["bytes", "str"])
def test_parse_json_byte_budget_at_edge_accepted_and_over_refused(spelling: str) -> None:
    doc = '["' + "é" * 10 + '"]'  # 24 UTF-8 bytes, 14 characters
    data: bytes | str = doc.encode() if spelling == "bytes" else doc
    assert parse_json(data, max_bytes=24) == ["é" * 10]
    with pytest.raises(InputInvalid) as exc_info:
        parse_json(data, max_bytes=23)
    assert _refusal(exc_info) == ("too-large", "")
    assert exc_info.value.details["size"] == 24


def test_parse_json_depth_at_limit_accepted_and_over_refused() -> None:
    assert parse_json(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) == _nested_list(MAX_JSON_DEPTH)
    too_deep = b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)
    with pytest.raises(InputInvalid) as exc_info:
        parse_json(too_deep)
    assert _refusal(exc_info)[0] == "too-deep"
    assert parse_json(b"[[[]]]", max_depth=3) == [[[]]]
    with pytest.raises(InputInvalid, match="nested deeper than 2"):
        parse_json(b"[[[]]]", max_depth=2)


def test_parse_json_message_does_not_echo_the_text() -> None:
    with pytest.raises(InputInvalid) as exc_info:
        parse_json(b'{"token": "hunter2-secret" oops}')
    assert "hunter2" not in str(exc_info.value)
    assert exc_info.value.details["position"] == 27  # the space before "oops"


def test_parse_json_rejects_non_text_as_caller_misuse() -> None:
    with pytest.raises(TypeError):
        parse_json(123)  # type: ignore[arg-type]


def _has_unparseable_float(value: Any) -> bool:
    if isinstance(value, float):
        return MAX_SAFE_INTEGER < abs(value) < 1e21
    if isinstance(value, list):
        return any(_has_unparseable_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_unparseable_float(v) for v in value.values())
    return False


@pytest.mark.parametrize("number", [2.0**53, -1e16, 1e20], ids=["2**53", "minus-1e16", "1e20"])
def test_float_beyond_safe_integers_prints_digits_that_parse_refuses(number: float) -> None:
    # Documented asymmetry: RFC 8785 prints these floats as integer digits, and an
    # integer literal beyond ±(2**53 - 1) is refused rather than silently rounded.
    data = canonical_json(number)
    assert b"." not in data and b"e" not in data
    with pytest.raises(InputInvalid, match="integer outside"):
        parse_json(data)


@settings(max_examples=300, deadline=None)
@given(CANONICAL_JSON_VALUES)
def test_parse_of_canonical_form_round_trips(value: Any) -> None:
    assume(not _has_unparseable_float(value))
    data = canonical_json(value)
    assert data == rfc8785.dumps(value)
    assert parse_json(data) == value
    assert canonical_json(parse_json(json.dumps(value, indent=1))) == data


# -- the fast path must be byte-for-byte RFC 8785 ------------------------------------------

_fast_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",))),
)
_fast_keys = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)
_fast_values = st.recursive(
    _fast_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_fast_keys, children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None)
@given(_fast_values)
def test_fast_path_matches_rfc8785_reference(value: object) -> None:
    """Keys with characters >= U+E000, astral keys and some floats go the slow way; all must match."""
    assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize(
    "value",
    [{"\ue000": 1, "\U0001f600": 2}, {"a": 1.5}, {"\uffff": [1, 2], "\U00010000": None}, [1.0, 2],
     [-0.0, 0.0001, 0.00009999999999999999, 1e-05, 4503599627370495.5, 1e16, 1e21, 1e22, 5e-324,
      0.1, 2.0 / 3, -123.456, 1.7976931348623157e308]],
    ids=["private-use-vs-astral", "float", "bmp-max-vs-astral", "integral-float", "float-edges"],
)
def test_slow_path_cases_still_canonical(value: object) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)
