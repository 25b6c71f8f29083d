"""``stockade.scope/1``: refused at issue when unbounded, signed by the approver key,
and a forged or edited scope covers nothing."""

from __future__ import annotations

import json
import math

import pytest

from host.approverkey import ApproverKey, scope_verifies, sign_scope
from host.errors import ScopeInvalid
from host.formats.scope import (
    DEFAULT_CEILING_S,
    MAX_INPUTS,
    MAX_TOOLS,
    Scope,
    ScopeTool,
    SignedScope,
    build_scope,
    scope_tool,
)
from host.signing import TrustedKeys

NOW = 1_800_000_000.0
IDENTITY = "a" * 64
KEY = ApproverKey.generate()
TRUSTED = TrustedKeys({KEY.key_id: KEY.public_bytes})


def _tool(max_calls: object = 5, inputs: list[str] | None = None) -> ScopeTool:
    return scope_tool("tracker.create-issue", "1.2.0", identity=IDENTITY, max_calls=max_calls, inputs=inputs)


def _scope(**overrides: object) -> Scope:
    args: dict[str, object] = {
        "project": "p", "subject": "ci-bot", "job": "nightly", "issued_by": "alice",
        "tools": [_tool()], "for_s": 7200.0, "lock_generation": 3, "now": NOW,
    }
    args.update(overrides)
    return build_scope(**args)  # type: ignore[arg-type]


def test_a_scope_is_built_with_every_field_of_the_format() -> None:
    scope = _scope(session="s1")
    assert scope.format == "stockade.scope/1" and scope.id.startswith("scope_")
    assert scope.not_after == NOW + 7200 and scope.issued_at == NOW
    assert scope.max_calls_total == 5  # the sum of the tools' counts by default
    assert (scope.principal.project, scope.principal.subject, scope.session) == ("p", "ci-bot", "s1")


@pytest.mark.parametrize("for_s", [math.inf, -math.inf, math.nan, -1.0, 0.0, True])
def test_a_lifetime_that_is_not_positive_and_finite_is_refused_at_issue(for_s: object) -> None:
    with pytest.raises(ScopeInvalid) as caught:
        _scope(for_s=for_s)
    assert caught.value.code == "SCOPE_INVALID" and caught.value.details["field"] == "not_after"


@pytest.mark.parametrize("not_after", [NOW - 1, NOW, math.inf, math.nan])
def test_a_past_or_non_finite_not_after_is_refused_at_issue(not_after: float) -> None:
    with pytest.raises(ScopeInvalid):
        _scope(for_s=None, not_after=not_after)


def test_a_lifetime_past_the_host_ceiling_is_refused_and_the_ceiling_is_named() -> None:
    _scope(for_s=DEFAULT_CEILING_S)  # exactly the ceiling is allowed
    with pytest.raises(ScopeInvalid) as caught:
        _scope(for_s=DEFAULT_CEILING_S + 1)
    assert caught.value.details["limit"] == DEFAULT_CEILING_S
    with pytest.raises(ScopeInvalid):
        _scope(for_s=3601, ceiling_s=3600)


@pytest.mark.parametrize("count", [0, -1, 1.5, True, "5", 1_000_001])
def test_a_zero_negative_or_non_integer_count_is_refused_at_issue(count: object) -> None:
    with pytest.raises(ScopeInvalid):
        _tool(max_calls=count)
    with pytest.raises(ScopeInvalid):
        _scope(max_calls_total=count)


def test_no_tool_a_duplicate_tool_or_a_malformed_input_digest_is_refused() -> None:
    with pytest.raises(ScopeInvalid):
        _scope(tools=[])
    with pytest.raises(ScopeInvalid):
        _scope(tools=[_tool(), _tool()])
    with pytest.raises(ScopeInvalid):
        _tool(inputs=["not-a-digest"])


def test_a_signed_scope_verifies_and_round_trips_through_json() -> None:
    signed = sign_scope(KEY, _scope())
    again = SignedScope.from_json(signed.model_dump_json())
    assert again == signed and scope_verifies(TRUSTED, again)


def test_a_scope_edited_after_signing_does_not_verify() -> None:
    signed = sign_scope(KEY, _scope())
    wider = signed.scope.model_copy(update={"max_calls_total": 1000})
    assert not scope_verifies(TRUSTED, signed.model_copy(update={"scope": wider}))
    later = signed.scope.model_copy(update={"not_after": signed.scope.not_after + 3600})
    assert not scope_verifies(TRUSTED, signed.model_copy(update={"scope": later}))


def test_a_scope_signed_by_an_untrusted_key_does_not_verify() -> None:
    signed = sign_scope(ApproverKey.generate(), _scope())
    assert not scope_verifies(TRUSTED, signed)


def test_another_format_version_is_refused_with_the_value_named() -> None:
    body = sign_scope(KEY, _scope()).model_dump(mode="json")
    body["scope"]["format"] = "stockade.scope/2"
    with pytest.raises(ScopeInvalid) as caught:
        SignedScope.from_json(json.dumps(body))
    assert "'stockade.scope/2'" in caught.value.message and caught.value.details["format"] == "stockade.scope/2"


def test_the_tool_and_input_bounds_are_enforced_at_issue() -> None:
    tools = [scope_tool(f"t.n{i}", "1.0.0", identity=IDENTITY, max_calls=1) for i in range(MAX_TOOLS + 1)]
    _scope(tools=tools[:MAX_TOOLS])
    with pytest.raises(ScopeInvalid):
        _scope(tools=tools)
    digests = [f"{i:064x}" for i in range(MAX_INPUTS + 1)]
    _tool(inputs=digests[:MAX_INPUTS])
    with pytest.raises(ScopeInvalid):
        _tool(inputs=digests)
    with pytest.raises(ScopeInvalid):
        _tool(inputs=[])
