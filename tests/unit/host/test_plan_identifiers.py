"""Control characters are refused in every principal field, at the envelope.

Attack: a NUL in a principal's subject made its refusals unaudited on PostgreSQL (text
columns cannot hold NUL), and an escape or a bidi override misleads the person who reads
the principal in a listing. The rule is one for all transports: ``Principal`` and
``CallRequest`` refuse them, whatever built the envelope.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from host import Principal
from host.errors import RequestInvalid
from host.mcp.tokens import TokenFile
from tests.support.hosts import HostFixture, make_host

HOSTILE = ["ali\x00ce", "ali\x1b[2Jce", "ali\u202ece", "ali\u200bce", "ali\x85ce", "ali\u2028ce"]
IDS = ["nul", "escape", "rlo", "zero-width", "c1-nel", "line-separator"]


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
@pytest.mark.parametrize("field", ["project", "subject"])
def test_principal_with_control_character_refused(field: str, value: str) -> None:
    fields = {"project": "p", "subject": "alice"} | {field: value}
    with pytest.raises(ValidationError, match="control, zero-width or bidi"):
        Principal(**fields)


@pytest.mark.parametrize("value", HOSTILE, ids=IDS)
@pytest.mark.parametrize("field", ["project", "subject", "session"])
def test_envelope_with_control_character_in_a_principal_field_refused(
    tmp_path: Path, field: str, value: str
) -> None:
    fx: HostFixture = make_host(tmp_path)
    principal = {"project": "p", "subject": "alice"}
    envelope = {"principal": principal, "session": "s1", "tool": "echo.say", "version": "1.0.0",
                "input": {"message": "hi"}}  # fmt: skip
    if field == "session":
        envelope["session"] = value
    else:
        principal[field] = value
    with pytest.raises(RequestInvalid):
        fx.host.prepare(envelope)
    fx.host.close()


def test_token_for_a_principal_with_nul_refused(tmp_path: Path) -> None:
    tokens = TokenFile(tmp_path / "tokens.json")
    with pytest.raises(RequestInvalid, match="control or bidi"):
        tokens.add(project="p", subject="ali\x00ce", ttl_s=60)
    assert tokens.entries() == []


def test_ordinary_unicode_names_still_accepted() -> None:
    assert Principal(project="équipe", subject="名前-ü.o'brien").subject == "名前-ü.o'brien"
