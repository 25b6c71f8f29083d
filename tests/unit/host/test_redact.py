"""Redactor: every staged secret and each form a server or guest could echo it in."""

from __future__ import annotations

import base64
import html
import json
import pickle
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from host.secrets.redact import MIN_FORM_CHARS, REDACTED, Redactor
from host.secrets.store import SecretValue

# Chosen so that every form differs: space, "/", "+", "?", "~", "(", "!", non-ASCII, and bytes whose
# base64 contains '+' and '/' (so the URL-safe alphabet differs from the standard one).
SECRET = "p@ss w/rd+?~(é)!>>>???"
USER = "svc-bot"


def _b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


def _b64url(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode()


def _lower_hex(encoded: str) -> str:
    out, i = [], 0
    while i < len(encoded):
        if encoded[i] == "%":
            out.append(encoded[i : i + 3].lower())
            i += 3
        else:
            out.append(encoded[i])
            i += 1
    return "".join(out)


def _alternate_case_escapes(encoded: str) -> str:
    parts = encoded.split("%")
    out = [parts[0]]
    for index, part in enumerate(parts[1:]):
        hexpart = part[:2].lower() if index % 2 else part[:2].upper()
        out.append("%" + hexpart + part[2:])
    return "".join(out)


def _in_b64_blob(offset: int) -> str:
    """The secret inside a base64 blob at byte offset ``offset`` of larger JSON."""
    return base64.b64encode(b"{" * offset + SECRET.encode() + b'"}').decode()


FORMS: dict[str, str] = {
    "raw": SECRET,
    "quote-upper-hex": quote(SECRET, safe=""),
    "quote-lower-hex": _lower_hex(quote(SECRET, safe="")),
    "quote-mixed-hex": _alternate_case_escapes(quote(SECRET, safe="")),
    "quote-default-safe-slash": quote(SECRET),
    "quote-plus-upper-hex": quote_plus(SECRET, safe=""),
    "quote-plus-lower-hex": _lower_hex(quote_plus(SECRET, safe="")),
    "encode-uri-component": quote(SECRET, safe="-_.!~*'()"),
    "base64-std-padded": _b64(SECRET),
    "base64-std-unpadded": _b64(SECRET).rstrip("="),
    "base64-urlsafe-padded": _b64url(SECRET),
    "base64-urlsafe-unpadded": _b64url(SECRET).rstrip("="),
    "basic-auth-username": _b64(f"{USER}:{SECRET}"),
    "basic-auth-empty-username": _b64(f":{SECRET}"),
    "json-escaped-ascii": json.dumps(SECRET)[1:-1],
    "json-escaped-slash": json.dumps(SECRET)[1:-1].replace("/", "\\/"),
}


def test_forms_under_test_are_all_different() -> None:
    assert len(set(FORMS.values())) == len(FORMS)
    assert _b64(SECRET) != _b64url(SECRET)


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([SECRET], basic_usernames=[USER])


@pytest.mark.parametrize("form", list(FORMS.values()), ids=list(FORMS))
def test_secret_echoed_in_text_is_redacted_in_every_form(redactor: Redactor, form: str) -> None:
    out = redactor.text(f"echo: <{form}> tail")
    assert out == f"echo: <{REDACTED}> tail"


@pytest.mark.parametrize("form", list(FORMS.values()), ids=list(FORMS))
def test_secret_echoed_in_bytes_is_redacted_in_every_form(redactor: Redactor, form: str) -> None:
    out = redactor.bytes(b"echo: <" + form.encode() + b"> tail")
    assert out == b"echo: <" + REDACTED.encode() + b"> tail"


def test_basic_auth_header_is_redacted_whole(redactor: Redactor) -> None:
    header = "Basic " + _b64(f"{USER}:{SECRET}")
    assert redactor.text(header) == "Basic " + REDACTED


@pytest.mark.parametrize("offset", [0, 1, 2, 3, 4, 5], ids=lambda o: f"offset-{o}")
def test_secret_inside_a_larger_base64_blob_is_redacted_at_every_alignment(
    redactor: Redactor, offset: int
) -> None:
    blob = _in_b64_blob(offset)
    out = redactor.text(blob)
    assert REDACTED in out
    # What is left cannot decode back to the secret or any long piece of it.
    leftover = out.replace(REDACTED, "")
    assert len(leftover) <= 4 + (offset * 4 + 2) // 3 + 4
    for alphabet in (_b64, _b64url):
        assert alphabet(SECRET)[2:-4] not in out


def test_secret_inside_base64_of_an_unknown_username_is_redacted(redactor: Redactor) -> None:
    out = redactor.text("Basic " + _b64(f"someone-else:{SECRET}"))
    assert REDACTED in out
    assert _b64(SECRET)[4:-4] not in out


def test_several_occurrences_and_several_secrets_are_all_redacted() -> None:
    redactor = Redactor(["first-secret-1", "second-secret-2"])
    text = "a first-secret-1 b second-secret-2 c first-secret-1"
    assert redactor.text(text) == f"a {REDACTED} b {REDACTED} c {REDACTED}"


@pytest.mark.parametrize(
    ("secrets", "text", "expected"),
    [
        (["xabcdefg", "abcdefgh-tail"], "<xabcdefgh-tail>", f"<{REDACTED}>"),
        (["abcdefgh-tail", "xabcdefg"], "<xabcdefgh-tail>", f"<{REDACTED}>"),
        (["secret-one", "one-two-three"], "secret-one-two-three!", f"{REDACTED}!"),
        (["aaaaaaaa"], "b" + "a" * 20 + "b", f"b{REDACTED}b"),
        (["abababab"], "xabababababababx", f"x{REDACTED}x"),
        (["abababab"], "xabababab_ababababx", f"x{REDACTED}_{REDACTED}x"),
        (["token-12", "token-12345"], "token-12345", REDACTED),
        (["inner-secret", "outer-inner-secret-x"], "outer-inner-secret-x", REDACTED),
    ],
    ids=["overlap-suffix-prefix", "overlap-reversed-order", "chained-overlap", "periodic-run",
         "periodic-period-2", "two-periodic-runs", "prefix-secret", "nested-secret"],
)
def test_overlapping_secrets_leave_no_fragment(secrets: list[str], text: str, expected: str) -> None:
    redactor = Redactor(secrets)
    assert redactor.text(text) == expected
    assert redactor.bytes(text.encode()) == expected.encode()


def test_adjacent_occurrences_merge_into_one_marker() -> None:
    assert Redactor(["adjacent1"]).text("adjacent1adjacent1") == REDACTED


def test_secret_in_json_values_and_keys_is_redacted(redactor: Redactor) -> None:
    value = {
        SECRET: "key was a secret",
        "nested": [{"token": f"Bearer {SECRET}"}, (quote(SECRET, safe=""), 3)],
        f"pre-{SECRET}": None,
        "n": 1.5,
        "ok": True,
        7: "non-string key kept",
    }
    out = redactor.json_value(value)
    assert out == {
        REDACTED: "key was a secret",
        "nested": [{"token": f"Bearer {REDACTED}"}, [REDACTED, 3]],
        f"pre-{REDACTED}": None,
        "n": 1.5,
        "ok": True,
        7: "non-string key kept",
    }
    assert SECRET not in json.dumps(out)
    assert value[SECRET] == "key was a secret"  # the input is not modified


def test_json_value_refuses_non_json_values(redactor: Redactor) -> None:
    with pytest.raises(TypeError, match="not JSON-able"):
        redactor.json_value({"k": {1, 2}})
    with pytest.raises(TypeError, match="not JSON-able"):
        redactor.json_value(SECRET.encode())


def test_secret_in_a_json_body_with_escapes_is_redacted(redactor: Redactor) -> None:
    body = json.dumps({"echo": SECRET, "again": SECRET}).encode()
    out = redactor.bytes(body)
    assert json.loads(out) == {"echo": REDACTED, "again": REDACTED}
    body_utf8 = json.dumps({"echo": SECRET}, ensure_ascii=False).encode()
    assert json.loads(redactor.bytes(body_utf8)) == {"echo": REDACTED}


def test_non_ascii_secret_in_bytes_is_redacted() -> None:
    secret = "clé-secrète-€-日本"
    assert Redactor([secret]).bytes(f"[{secret}]".encode()) == f"[{REDACTED}]".encode()


def test_secret_value_wrapper_is_accepted() -> None:
    redactor = Redactor([SecretValue("wrapped-secret-1")])
    assert redactor.text("x wrapped-secret-1 y") == f"x {REDACTED} y"


# -- no secrets, no damage --------------------------------------------------------------------


def test_no_secrets_is_the_identity_fast_path() -> None:
    redactor = Redactor([])
    assert redactor.empty
    text, data = "anything %2F here", b"bytes + here"
    assert redactor.text(text) is text
    assert redactor.bytes(data) == data
    assert redactor.json_value({"a": [text]}) == {"a": [text]}


def test_empty_values_are_ignored() -> None:
    redactor = Redactor(["", ""])
    assert redactor.empty
    assert redactor.text("unchanged") == "unchanged"


def test_text_without_secret_is_unchanged(redactor: Redactor) -> None:
    text = "GET /v1/issues?q=p%40ss+w%2Frd HTTP/1.1 Authorization: Basic c3ZjLWJvdDp4 +++ %%%"
    assert redactor.text(text) is text
    data = text.encode()
    assert redactor.bytes(data) == data


def test_short_value_redacts_raw_but_adds_no_short_base64_cores() -> None:
    redactor = Redactor(["abc"])
    assert redactor.text("xabcx") == f"x{REDACTED}x"
    # The 3-byte alignment cores would be 2-3 characters and would hit ordinary text.
    assert redactor.text("WJj YmM") == "WJj YmM"
    assert MIN_FORM_CHARS == 8


def test_redactor_is_frozen_and_never_shows_its_secrets(redactor: Redactor) -> None:
    with pytest.raises(AttributeError):
        redactor._count = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del redactor._str
    assert SECRET not in repr(redactor) and "secrets" in repr(redactor)
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(redactor)


@pytest.mark.parametrize(
    ("call", "bad"),
    [(Redactor.text, b"bytes"), (Redactor.bytes, "text")],
    ids=["text-given-bytes", "bytes-given-text"],
)
def test_wrong_input_type_is_a_type_error(
    redactor: Redactor, call: Callable[[Redactor, object], object], bad: object
) -> None:
    with pytest.raises(TypeError):
        call(redactor, bad)


def test_non_string_values_are_a_type_error() -> None:
    with pytest.raises(TypeError):
        Redactor([b"bytes-secret"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        Redactor(["secret-12"], basic_usernames=[None])  # type: ignore[list-item]


# -- reference model: the union of every occurrence -------------------------------------------


def _replace_covered(text: str, covered: list[bool]) -> str:
    """``text`` with every maximal run of covered characters replaced by one marker."""
    out, i = [], 0
    while i < len(text):
        if covered[i]:
            while i < len(text) and covered[i]:
                i += 1
            out.append(REDACTED)
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _reference(text: str, forms: list[str]) -> str:
    covered = [False] * len(text)
    for form in forms:
        for start in range(len(text) - len(form) + 1):
            if text.startswith(form, start):
                for i in range(start, start + len(form)):
                    covered[i] = True
    return _replace_covered(text, covered)


@settings(max_examples=300, deadline=None)
@given(
    secrets=st.lists(st.text(alphabet="ab", min_size=1, max_size=5), min_size=1, max_size=3),
    text=st.text(alphabet="abc", max_size=60),
)
def test_raw_redaction_matches_the_union_of_all_occurrences(secrets: list[str], text: str) -> None:
    # Alphabet "abc" has no base64/URL/JSON forms of its own that could appear in the text
    # except the raw ones, so the union of raw occurrences is the exact expectation.
    redactor = Redactor(secrets)
    forms = [f for f in redactor._str.forms("raw") if set(f) <= set("abc")]
    assert redactor.text(text) == _reference(text, forms)
    assert redactor.bytes(text.encode()) == _reference(text, forms).encode()


@settings(max_examples=100, deadline=None)
@given(
    secret=st.text(min_size=8, max_size=24),
    before=st.text(max_size=20),
    after=st.text(max_size=20),
)
def test_any_secret_surrounded_by_any_text_is_gone(secret: str, before: str, after: str) -> None:
    redactor = Redactor([secret])
    out = redactor.text(before + secret + after)
    assert secret not in out
    assert REDACTED in out
    assert secret.encode() not in redactor.bytes((before + secret + after).encode())


# -- issue 9.10: hex, HTML, double-URL, UTF-16 and line-wrapped base64 echoes -----------------


def _mixed_case(text: str) -> str:
    return "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(text))


HEX = SECRET.encode().hex()
MORE_FORMS: dict[str, str] = {
    "hex-lower": HEX,
    "hex-upper": HEX.upper(),
    "hex-mixed": _mixed_case(HEX),
    "backslash-x-escapes": "".join(f"\\x{b:02x}" for b in SECRET.encode()),
    "backslash-x-escapes-upper": "".join(f"\\x{b:02X}" for b in SECRET.encode()),
    "html-escape": html.escape(SECRET),
    "html-decimal-references": "".join(f"&#{ord(c)};" for c in SECRET),
    "html-hex-references-lower": "".join(f"&#x{ord(c):x};" for c in SECRET),
    "html-hex-references-upper": "".join(f"&#X{ord(c):X};" for c in SECRET),
    "double-url-encoded": quote(quote(SECRET, safe=""), safe=""),
    "double-url-encoded-lower-hex": quote(quote(SECRET, safe=""), safe="").lower(),
    "double-url-encoded-plus": quote(quote_plus(SECRET, safe=""), safe=""),
}


def test_more_forms_under_test_are_all_different() -> None:
    assert len(set(MORE_FORMS.values()) | set(FORMS.values())) == len(MORE_FORMS) + len(FORMS)


@pytest.mark.parametrize("form", list(MORE_FORMS.values()), ids=list(MORE_FORMS))
def test_secret_echoed_as_hex_html_or_double_url_is_redacted(redactor: Redactor, form: str) -> None:
    assert redactor.text(f"echo: <{form}> tail") == f"echo: <{REDACTED}> tail"
    assert redactor.bytes(f"echo: <{form}> tail".encode()) == f"echo: <{REDACTED}> tail".encode()


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be", "utf-16"], ids=["le", "be", "with-bom"])
def test_secret_echoed_in_utf16_bytes_is_redacted(redactor: Redactor, codec: str) -> None:
    body = f"echo: <{SECRET}> tail".encode(codec)
    out = redactor.bytes(body)
    assert REDACTED.encode() in out
    assert SECRET.encode(codec.replace("utf-16", "utf-16-le") if codec == "utf-16" else codec) not in out


def test_ascii_secret_in_utf16_read_as_latin1_text_is_redacted() -> None:
    redactor = Redactor(["ascii-secret-42"])
    text = "x ascii-secret-42 y".encode("utf-16-le").decode("latin-1")
    assert "ascii-secret-42".encode("utf-16-le").decode("latin-1") not in redactor.text(text)


def _wrapped(data: bytes, width: int, newline: str) -> str:
    flat = base64.b64encode(data).decode()
    return newline.join(flat[i : i + width] for i in range(0, len(flat), width)) + newline


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("width", [76, 64, 16, 5], ids=["mime-76", "pem-64", "narrow-16", "narrow-5"])
@pytest.mark.parametrize("offset", range(0, 80, 7), ids=lambda o: f"offset-{o}")
def test_secret_in_line_wrapped_base64_is_redacted(redactor: Redactor, width: int, newline: str, offset: int) -> None:
    blob = _wrapped(b"{" * offset + SECRET.encode() + b'"}' + b"." * 40, width, newline)
    out = redactor.text(blob)
    assert out == _wrapped_reference(blob, redactor)
    flat = out.replace("\r", "").replace("\n", "")
    for alphabet in (_b64, _b64url):
        assert alphabet(SECRET)[4:-4] not in flat  # no long run of the secret's base64 is left
    assert redactor.bytes(blob.encode()) == out.encode()


def _wrapped_reference(text: str, redactor: Redactor) -> str:
    """Brute force: every form at every start, base64 forms allowed to skip CR/LF."""
    covered = [False] * len(text)
    lowered = text.lower()
    groups = [(text, redactor._str.forms("raw"), False), (lowered, redactor._str.forms("lower"), False),
              (text, redactor._str.forms("squeezed"), True)]
    for haystack, forms, skip_breaks in groups:
        for form in forms:
            for start in range(len(haystack)):
                i, j = start, 0
                while j < len(form) and i < len(haystack):
                    if skip_breaks and j and haystack[i] in "\r\n":
                        i += 1
                        continue
                    if haystack[i] != form[j]:
                        break
                    i, j = i + 1, j + 1
                if j == len(form):
                    covered[start:i] = [True] * (i - start)
    return _replace_covered(text, covered)


@settings(max_examples=60, deadline=None)
@given(
    secret=st.text(alphabet="abcXYZ019-_", min_size=8, max_size=16),
    before=st.binary(max_size=12),
    breaks=st.lists(st.integers(min_value=0, max_value=60), max_size=4),
    newline=st.sampled_from(["\n", "\r\n"]),
)
def test_wrapped_base64_redaction_matches_the_brute_force_reference(
    secret: str, before: bytes, breaks: list[int], newline: str
) -> None:
    flat = base64.b64encode(before + secret.encode() + b"!").decode()
    for at in sorted(set(breaks), reverse=True):
        flat = flat[:at] + newline + flat[at:]
    redactor = Redactor([secret])
    assert redactor.text(flat) == _wrapped_reference(flat, redactor)


# -- issue 18.5: many texts in one pass --------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(items=st.lists(st.text(alphabet="ab%4B", max_size=12), max_size=12))
def test_texts_equals_text_item_by_item(items: list[str]) -> None:
    # No form of these secrets can span the LF that joins the items: exact equality.
    redactor = Redactor(["abab", "ba%41"])
    assert redactor.texts(items) == [redactor.text(item) for item in items]


def test_texts_match_across_a_boundary_is_hidden_on_both_sides() -> None:
    redactor = Redactor(["wrapped-secret-xyz"])
    b64 = base64.b64encode(b"wrapped-secret-xyz").decode()
    out = redactor.texts([b64[:10], b64[10:], "after"])
    assert out == [REDACTED, REDACTED, "after"]


def test_texts_redacts_names_and_values_of_many_headers() -> None:
    redactor = Redactor(["hdr-secret-0001", "hdr-secret-0002"])
    items = [f"X-H{i}" if i % 2 == 0 else f"v{i} hdr-secret-000{1 + i % 2}" for i in range(2000)]
    out = redactor.texts(items)
    assert out[1] == f"v1 {REDACTED}" and out[2] == "X-H2"
    assert not any("hdr-secret" in item for item in out)


def test_texts_type_checked_and_empty_fast_path() -> None:
    with pytest.raises(TypeError):
        Redactor(["x-secret-1"]).texts([b"bytes"])  # type: ignore[list-item]
    assert Redactor([]).texts(["a", "b"]) == ["a", "b"]


# -- offsets survive length-changing characters before a case-insensitive form ----

# Each of these changes length under str.lower() ("İ" -> "i̇") or str.casefold() ("ß" -> "ss",
# "ẞ" -> "ss", "ﬁ" -> "fi", "ΐ" -> three characters): a search in a folded view whose offsets
# are applied to the original text would be off by one character per filler, and as many
# characters of the secret's encoding would be left in clear.
FOLD_FILLERS = "İẞßﬁΐ"
FOLD_PREFIX = "İ" * 20 + "ẞß ﬁΐ " * 4
FOLD_SUFFIX = " ﬁ tail İİ"
FOLD_SECRETS = ["s3cr3t-Token/42+x", "clé-Secrète/İ-42~"]


def _ascii_fold(char: str) -> str:
    return char.lower() if "A" <= char <= "Z" else char


def _encodings(secret: str) -> dict[str, tuple[str, bool]]:
    """Every form the Redactor's docstring claims, built here: name -> (form, case-insensitive)."""
    data = secret.encode()
    hexed = data.hex()
    url = quote(secret, safe="")
    forms = {
        "raw": (secret, False),
        "json-ascii": (json.dumps(secret)[1:-1], False),
        "json-ascii-slash": (json.dumps(secret)[1:-1].replace("/", "\\/"), False),
        "json-utf8": (json.dumps(secret, ensure_ascii=False)[1:-1], False),
        "html-escape": (html.escape(secret), False),
        "html-decimal": ("".join(f"&#{ord(c)};" for c in secret), False),
        "html-hex-lower": ("".join(f"&#x{ord(c):x};" for c in secret), True),
        "html-hex-upper": ("".join(f"&#X{ord(c):X};" for c in secret), True),
        "hex-lower": (hexed, True),
        "hex-upper": (hexed.upper(), True),
        "hex-mixed": (_mixed_case(hexed), True),
        "backslash-x-lower": ("".join(f"\\x{b:02x}" for b in data), True),
        "backslash-x-upper": ("".join(f"\\x{b:02X}" for b in data), True),
        "url-upper": (url, True),
        "url-lower": (url.lower(), True),
        "url-mixed": (_alternate_case_escapes(url), True),
        "url-safe-slash": (quote(secret), True),
        "url-plus": (quote_plus(secret, safe=""), True),
        "encode-uri-component": (quote(secret, safe="-_.!~*'()"), True),
        "url-double": (quote(url, safe=""), True),
        "url-double-lower": (quote(url, safe="").lower(), True),
        "base64-std": (_b64(secret), False),
        "base64-std-unpadded": (_b64(secret).rstrip("="), False),
        "base64-urlsafe": (_b64url(secret), False),
        "base64-urlsafe-unpadded": (_b64url(secret).rstrip("="), False),
        "basic-auth-empty-username": (_b64(f":{secret}"), False),
        "basic-auth-username": (_b64(f"{USER}:{secret}"), False),
        # MIME-style wrapping: searched in a view without CR/LF, another length change.
        "base64-wrapped-lf": ("\n".join(_b64(secret)[i : i + 8] for i in range(0, len(_b64(secret)), 8)), False),
        "base64-wrapped-crlf": ("\r\n".join(_b64url(secret)[i : i + 5] for i in range(0, len(_b64url(secret)), 5)),
                                False),
    }
    if secret.isascii():  # UTF-16 read as Latin-1 text is only searched for ASCII values
        for codec in ("utf-16-le", "utf-16-be"):
            forms[f"{codec}-as-latin-1"] = (secret.encode(codec).decode("latin-1"), False)
    return forms


def _fold_reference(text: str, forms: list[tuple[str, bool]]) -> str:
    """Brute force on the original text itself: every occurrence of every form at every
    start, compared character by character (ASCII-case-insensitively where the Redactor
    is), no folded copy of the text anywhere; the union of the matches is replaced."""
    covered = [False] * len(text)
    for form, insensitive in forms:
        for start in range(len(text) - len(form) + 1):
            window = text[start : start + len(form)]
            if insensitive:
                same = all(_ascii_fold(a) == _ascii_fold(b) for a, b in zip(window, form, strict=True))
            else:
                same = window == form
            if same:
                covered[start : start + len(form)] = [True] * len(form)
    return _replace_covered(text, covered)


def _survivors(out: str, forms: list[tuple[str, bool]]) -> list[str]:
    folded = "".join(_ascii_fold(c) for c in out)
    return [
        form for form, insensitive in forms
        if (("".join(_ascii_fold(c) for c in form) in folded) if insensitive else (form in out))
    ]


def test_fold_fillers_change_length_under_lower_or_casefold() -> None:
    assert len("İ".lower()) == 2
    assert all(len(c.casefold()) > 1 for c in FOLD_FILLERS)
    assert all(form.isascii() for form, insensitive in _encodings(FOLD_SECRETS[1]).values() if insensitive)


FOLD_CASES = [(secret, name) for secret in FOLD_SECRETS for name in _encodings(secret)]


@pytest.mark.parametrize(
    ("secret", "name"), FOLD_CASES, ids=[f"{name}-{'ascii' if s.isascii() else 'non-ascii'}" for s, name in FOLD_CASES]
)
def test_form_after_length_changing_characters_is_redacted_exactly(secret: str, name: str) -> None:
    redactor = Redactor([secret], basic_usernames=[USER])
    form, _ = _encodings(secret)[name]
    body = f"{FOLD_PREFIX}{form}{FOLD_SUFFIX}"
    expected = f"{FOLD_PREFIX}{REDACTED}{FOLD_SUFFIX}"
    assert redactor.text(body) == expected
    assert redactor.texts(["İ" * 20, body]) == ["İ" * 20, expected]
    assert redactor.bytes(body.encode()) == expected.encode()


@pytest.mark.parametrize("secret", FOLD_SECRETS, ids=["ascii", "non-ascii"])
def test_every_form_between_length_changing_characters_matches_the_brute_force_reference(secret: str) -> None:
    redactor = Redactor([secret], basic_usernames=[USER])
    forms = list(_encodings(secret).values())
    # Every form, each after more fillers than the last: the drift a folded view would
    # cause grows along the body, so every later form would leak more.
    body = "".join(f"{FOLD_FILLERS * (index + 4)}{form}" for index, (form, _) in enumerate(forms)) + FOLD_SUFFIX
    expected = _fold_reference(body, forms)
    assert expected.count(REDACTED) == len(forms)  # the fillers separate every form
    out = redactor.text(body)
    assert out == expected
    assert _survivors(out, forms) == []
    assert out.replace(REDACTED, "") == "".join(FOLD_FILLERS * (i + 4) for i in range(len(forms))) + FOLD_SUFFIX
    assert redactor.bytes(body.encode()) == expected.encode()


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(_encodings(FOLD_SECRETS[0]))),
    before=st.text(alphabet=FOLD_FILLERS + " é日", min_size=1, max_size=40),
    after=st.text(alphabet=FOLD_FILLERS + " é日", max_size=10),
)
def test_any_form_after_any_folding_text_matches_the_brute_force_reference(
    name: str, before: str, after: str
) -> None:
    secret = FOLD_SECRETS[0]
    redactor = Redactor([secret], basic_usernames=[USER])
    forms = list(_encodings(secret).values())
    body = before + _encodings(secret)[name][0] + after
    assert redactor.text(body) == _fold_reference(body, forms) == f"{before}{REDACTED}{after}"
