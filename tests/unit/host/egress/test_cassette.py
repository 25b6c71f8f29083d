"""Cassette redaction, the final scan, the format's refusals and the replay matcher (no plugin).

The end-to-end record/replay through a real plugin and a TLS server is in
``tests/integration/test_cassette.py``; here each rule is crossed on its own.
"""

from __future__ import annotations

import base64
import json

import httpx2
import pytest

from host.egress.cassette import (
    CassetteMiss,
    CassetteRedactor,
    CassetteReplayer,
    build_cassette,
    replay_resolver,
)
from host.egress.transport import Pins
from host.errors import CassetteInvalid
from host.formats.cassette import MAX_CASSETTE_BYTES, Cassette, Interaction, body_fields

SECRET = "s3cret/value+0123456789"
STAGED = {"api_token": SECRET}
DIGEST = "0" * 64


def _interaction(url: str = "https://api.example.com/v1/x", *, header: str = "ok", body: bytes = b"{}") -> Interaction:
    return Interaction.model_validate(
        {
            "request": {"method": "GET", "url": url, "headers": (("x-note", header),), **body_fields(b"")},
            "response": {"status": 200, "headers": (), **body_fields(body)},
        }
    )


def _cassette(*interactions: Interaction) -> bytes:
    return build_cassette(list(interactions), CassetteRedactor(STAGED), package="p", version="1",
                          manifest_sha256=DIGEST)  # fmt: skip


def test_secret_that_escaped_redaction_is_refused_by_the_final_scan_naming_the_interaction() -> None:
    leaky = _interaction(header=base64.b64encode(SECRET.encode()).decode())  # built past the redactor
    with pytest.raises(CassetteInvalid, match=r"interaction 1 \(GET https://api.example.com/v1/x\)") as caught:
        _cassette(_interaction(), leaky)
    assert caught.value.details == {"reason": "secret_in_cassette", "interaction": 1}


@pytest.mark.parametrize(
    "form",
    [SECRET, "s3cret%2Fvalue%2B0123456789", base64.b64encode(SECRET.encode()).decode(), SECRET.encode().hex()],
    ids=["raw", "url-encoded", "base64", "hex"],
)
def test_every_known_form_of_a_staged_value_becomes_its_placeholder(form: str) -> None:
    redactor = CassetteRedactor(STAGED)
    assert redactor.text(f"echo {form} end") == "echo <secret:api_token> end"


def test_credential_names_are_redacted_in_headers_cookies_query_json_and_form_bodies() -> None:
    redactor = CassetteRedactor(STAGED)
    headers = redactor.headers([
        ("Authorization", f"Bearer {SECRET}"), ("X-Api-Key", "not-staged-key-999"),
        ("Cookie", "a=1; b=2"), ("Set-Cookie", "sid=xyz; Path=/"), ("Date", "Thu, 03 Dec 2026"),
        ("Content-Type", "application/json"),
    ])  # fmt: skip
    assert headers == (
        ("Authorization", "Bearer <secret:api_token>"), ("X-Api-Key", "<redacted>"),
        ("Cookie", "a=<redacted>; b=<redacted>"), ("Set-Cookie", "sid=<redacted>; Path=/"),
        ("Content-Type", "application/json"),
    )  # fmt: skip
    assert redactor.url("https://h/v1?page=2&client_secret=abc&api_key=zzz") == (
        "https://h/v1?page=2&client_secret=<redacted>&api_key=<redacted>"
    )
    body = json.dumps({"data": [{"id_token": "eyJ...", "refresh_token": "r1", "name": "n"}], "password": "p"})
    assert json.loads(redactor.body(body.encode(), "application/json")) == {
        "data": [{"id_token": "<redacted>", "refresh_token": "<redacted>", "name": "n"}], "password": "<redacted>"
    }  # fmt: skip
    form = redactor.body(b"grant_type=refresh&client_secret=abc&access_token=t", "application/x-www-form-urlencoded")
    assert form == b"grant_type=refresh&client_secret=%3Credacted%3E&access_token=%3Credacted%3E"


def test_author_hook_cannot_put_a_secret_back() -> None:
    def hook(interaction: Interaction) -> Interaction:
        request = interaction.request.model_copy(update={"headers": (("x-note", SECRET),)})
        return interaction.model_copy(update={"request": request})

    redactor = CassetteRedactor(STAGED, hook=hook)
    built = redactor.interaction(("GET", "https://h/v1", (), b""), (200, (), b"", "identity"))
    assert built.request.headers == (("x-note", "<secret:api_token>"),)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d.update(format="stockade.cassette/2"), "malformed"),
        (lambda d: d.update(extra=1), "malformed"),
        (lambda d: d["interactions"][0]["response"].update(body_sha256="1" * 64), "malformed"),
        (lambda d: d["interactions"][0]["response"].update(body_b64="e30="), "malformed"),
    ],
    ids=["other-format", "unknown-field", "digest-mismatch", "two-bodies"],
)
def test_malformed_cassettes_are_refused(mutate: object, reason: str) -> None:
    doc = json.loads(_cassette(_interaction()))
    mutate(doc)  # type: ignore[operator]  # the parametrized mutators
    with pytest.raises(CassetteInvalid) as caught:
        Cassette.from_bytes(json.dumps(doc).encode())
    assert caught.value.details["reason"] == reason


def test_size_ceiling_is_enforced_on_read_and_write() -> None:
    with pytest.raises(CassetteInvalid, match="over the ceiling") as caught:
        Cassette.from_bytes(b" " * (MAX_CASSETTE_BYTES + 1))
    assert caught.value.details["reason"] == "too_large"
    big = _interaction(body=b"x" * MAX_CASSETTE_BYTES)
    with pytest.raises(CassetteInvalid, match="would be"):
        _cassette(big)
    assert Cassette.from_bytes(_cassette(_interaction())).to_bytes() == _cassette(_interaction())


def _replayer(*interactions: Interaction, **kwargs: object) -> tuple[CassetteReplayer, httpx2.BaseTransport]:
    replayer = CassetteReplayer(Cassette.from_bytes(_cassette(*interactions)), CassetteRedactor(STAGED), **kwargs)  # type: ignore[arg-type]
    pins = Pins()
    pins.pin("api.example.com", 443, replay_resolver("api.example.com"))
    return replayer, replayer.transport(pins)


def test_repeated_requests_are_consumed_in_order_once_unless_repeats_are_allowed() -> None:
    first, second = _interaction(body=b'{"n":1}'), _interaction(body=b'{"n":2}')
    replayer, transport = _replayer(first, second)
    get = httpx2.Request("GET", "https://api.example.com/v1/x")
    assert [transport.handle_request(get).read() for _ in range(2)] == [b'{"n":1}', b'{"n":2}']
    with pytest.raises(CassetteMiss, match=r"no recorded interaction for GET https://api\.example\.com/v1/x"):
        transport.handle_request(get)
    assert replayer.unmatched == [("GET", "https://api.example.com/v1/x")]
    replayer, transport = _replayer(first, allow_repeats=True)
    assert [transport.handle_request(get).read() for _ in range(2)] == [b'{"n":1}', b'{"n":1}']


def test_replay_refuses_a_host_that_was_not_vetted() -> None:
    _, transport = _replayer(_interaction())
    with pytest.raises(httpx2.ConnectError, match="was not vetted"):
        transport.handle_request(httpx2.Request("GET", "https://other.example.com/v1/x"))

