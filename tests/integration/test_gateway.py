"""The one call pipeline (docs/design.md §6, §7), end to end on real components, files and policy.

Tests are named after what they defend against. Guest starts are counted by wrapping
the runtime's ``run`` so "nothing ran" is proven, not assumed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import host.audit.log as audit_module
import host.call.prepare as plan_module
import host.types as types_module
from host import CallRequest, Host, HostConfig, Principal
from host.audit.log import AuditLog, verify
from host.call.prepare import action_digest
from host.canonical import digest_json
from host.egress.session import EgressSession
from host.errors import AuditUnavailable, DigestMismatch, PolicyDenied, ToolNotFound
from host.policy.engine import Decision, Verdict
from host.policy.toolpolicy import ServiceSelector, ToolMode, ToolPolicyStore, ToolSelector
from host.secrets.store import SecretsStore
from host.types import Approval, Fence, InvocationPlan, Preview
from tests.support.bundles import lock_digest, lock_entry, write_bundle, write_lock
from tests.support.hosts import ALICE, HostFixture, echo_manifest, echo_tool, make_host
from tests.support.secrets import make_key
from tests.support.wat import counter_component, echo_component, loop_component
from tests.support.wat import guest as wat_guest

WRITE_TOOL = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])
WRITE_PERMS = ("tool.call:echo.write", "echo.write")
READ_PERMS = ("tool.call:echo.say", "echo.use")
CREDENTIALED_HTTP = {
    "allow": [
        {
            "scheme": "https",
            "host": "api.echo.example",
            "port": None,
            "path_prefix": "/v1",
            "methods": ["GET"],
        }
    ],
    "credentials": [
        {
            "secret": "echo_token",
            "location": {"type": "bearer"},
            "hosts": ["api.echo.example"],
            "path_prefixes": ["/v1"],
            "optional": False,
        }
    ],
    "max_request_bytes": 1024,
    "max_response_bytes": 1024,
    "timeout_ms": 1000,
}


class GuestCounter:
    """Counts guest starts by wrapping the host's runtime."""

    def __init__(self, host: Host) -> None:
        self.starts = 0
        runtime = host._runtime
        original = runtime.run

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.starts += 1
            return original(*args, **kwargs)

        runtime.run = counting  # type: ignore[method-assign]


@pytest.fixture
def fx(tmp_path: Path) -> Any:
    fixture = make_host(
        tmp_path,
        tools=[echo_tool(), WRITE_TOOL],
        allow=(*READ_PERMS, *WRITE_PERMS),
        tool_policy=ToolPolicyStore(tmp_path / "tool-policy", admin_dir=None),
    )
    yield fixture
    fixture.host.close()


def audit_records(fx: HostFixture) -> list[dict[str, Any]]:
    """The log's records without signed checkpoints (tested in test_audit*.py)."""
    records = [json.loads(line) for line in fx.audit_path.read_text().splitlines()]
    return [r for r in records if r["kind"] != "audit.checkpoint"]


# -- steps 1–6: prepare --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("project", "subject"),
    # Control, zero-width and bidi characters are refused at the envelope (Principal), so the
    # escapes case holds what JSON must still escape or keep verbatim: quotes, backslashes,
    # slashes, non-ASCII letters.
    [("p", "alice"), ('pé"\\', 'x"y\\z/'), ("\ue000", "\U0001f600")],
    ids=["ascii", "escapes", "high-code-points"],
)
def test_action_digest_is_sha256_of_the_canonical_action_document(
    fx: HostFixture, project: str, subject: str
) -> None:
    """The per-tool template of the digest gives byte-for-byte the §7 document's digest."""
    tool = fx.host.registry.get("echo.say", "1.0.0")
    principal = Principal(project=project, subject=subject)
    document = {
        "domain": "stockade/tool-invocation@1", "project": project, "subject": subject,
        "tool": "echo.say", "version": "1.0.0",
        "binding": {
            "package": "echo", "version": "1.0.0", "generation": tool.binding.generation,
            "manifest_sha256": tool.binding.manifest_sha256, "module_sha256": tool.binding.module_sha256,
        },
        "permissions": ["tool.call:echo.say", "echo.use"], "effect": "read", "risk": "low",
        "timeout_s": 5, "input_sha256": "ab" * 32,
    }
    assert action_digest(principal, tool, "ab" * 32) == digest_json(document)


def test_ready_plan_is_digest_bound_under_one_fence(fx: HostFixture) -> None:
    plan = fx.host.prepare(fx.request())
    again = fx.host.prepare(fx.request())
    other = fx.host.prepare(fx.request(input={"message": "other"}))
    assert plan.status == "ready"
    assert plan.action_digest == again.action_digest
    assert plan.action_digest != other.action_digest
    assert plan.fence == fx.policy.fence()
    assert plan.canonical_input == b'{"message":"hi"}'


def test_plan_carries_no_authority(fx: HostFixture) -> None:
    """A plan is pure data: no files, sockets, threads, clocks, callables or handlers."""
    plan = fx.host.prepare(fx.request())
    allowed = (
        str,
        int,
        float,
        bool,
        bytes,
        type(None),
        tuple,
        list,
        dict,
        Fence,
        Preview,
        CallRequest,
        Principal,
    )

    def walk(value: Any) -> None:
        assert isinstance(value, allowed), type(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                walk(getattr(value, f.name))
        elif isinstance(value, (CallRequest, Principal)):
            for name in type(value).model_fields:
                walk(getattr(value, name))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key)
                walk(item)

    assert dataclasses.is_dataclass(plan)
    assert isinstance(plan, InvocationPlan)
    for f in dataclasses.fields(plan):
        walk(getattr(plan, f.name))


def test_deny_stops_before_input_is_parsed(fx: HostFixture) -> None:
    fx.policy.revoke_role("p", "alice", "user")
    seen: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> bytes:
        seen.append(args)
        raise AssertionError("the validator ran before policy denied")

    with pytest.raises(PolicyDenied) as info:
        plan_module.prepare(
            fx.request(input={"message": 12345, "extra": True}),
            registry=fx.host.registry,
            engine=fx.policy,
            tool_policy=fx.host._tool_policy,
            grants=fx.host.grants,
            max_input_bytes=65536,
            validate_input=spy,
        )
    assert info.value.code == "POLICY_DENIED"
    assert seen == []
    result = fx.host.call(fx.request(input={"message": 12345}))
    assert result.error is not None and result.error.code == "POLICY_DENIED"


def test_invalid_input_refused_after_policy_and_guest_never_starts(fx: HostFixture) -> None:
    counter = GuestCounter(fx.host)
    result = fx.host.call(fx.request(input={"message": "x" * 101}))
    assert not result.ok and result.error is not None
    assert result.error.code == "INPUT_INVALID"
    assert result.error.details["pointer"] == "/message"
    assert counter.starts == 0


class _Engine:
    def __init__(self, decisions: list[Any] | Exception) -> None:
        self.decisions = decisions

    def authorize(self, principal: Any, project: str, permission: str) -> Any:
        if isinstance(self.decisions, Exception):
            raise self.decisions
        return self.decisions.pop(0)


GOOD = Fence(1, 1)


@pytest.mark.parametrize(
    "engine",
    [
        _Engine(OSError("store down")),
        _Engine(["allow", "allow"]),
        _Engine([Decision(Verdict.ALLOW, None), Decision(Verdict.ALLOW, None)]),
        _Engine([Decision(Verdict.ALLOW, GOOD), Decision(Verdict.ALLOW, Fence(1, 2))]),
        _Engine([Decision(Verdict.ALLOW, Fence(-1, 1)), Decision(Verdict.ALLOW, Fence(-1, 1))]),
    ],
    ids=["store-error", "malformed-decision", "missing-fence", "mixed-fences", "malformed-fence"],
)
def test_policy_failures_fail_closed(fx: HostFixture, engine: _Engine) -> None:
    counter = GuestCounter(fx.host)
    fx.host._policy = engine  # the port, swapped for a failing implementation
    result = fx.host.call(fx.request())
    assert result.error is not None and result.error.code == "POLICY_UNAVAILABLE"
    assert counter.starts == 0


def test_expired_principal_refused(fx: HostFixture) -> None:
    expired = Principal(project="p", subject="alice", expires_at=1.0)
    result = fx.host.call(fx.request(principal=expired))
    assert result.error is not None and result.error.code == "REQUEST_INVALID"


def test_extra_envelope_fields_refused(fx: HostFixture) -> None:
    envelope = fx.request().model_dump() | {"sudo": True}
    result = fx.host.call(envelope)
    assert result.error is not None and result.error.code == "REQUEST_INVALID"
    with pytest.raises(Exception, match="REQUEST_INVALID"):
        CallRequest.from_json(json.dumps(envelope))


@pytest.mark.parametrize(
    "field,value",
    [("expires_at", "99999999999"), ("project", 7), ("subject", None)],
    ids=["string-expiry", "int-project", "null-subject"],
)
def test_envelope_types_are_not_coerced(fx: HostFixture, field: str, value: Any) -> None:
    envelope = fx.request().model_dump()
    envelope["principal"][field] = value
    result = fx.host.call(envelope)
    assert result.error is not None and result.error.code == "REQUEST_INVALID"


def test_envelope_over_its_byte_budget_refused(fx: HostFixture) -> None:
    envelope = fx.request().model_dump()
    overhead = len(json.dumps(envelope | {"input": {"message": ""}}))
    envelope["input"] = {"message": "x" * (types_module.MAX_ENVELOPE_BYTES - overhead)}
    at_edge = json.dumps(envelope)
    assert len(at_edge) == types_module.MAX_ENVELOPE_BYTES
    assert CallRequest.from_json(at_edge).tool == "echo.say"
    envelope["input"] = {"message": "x" * (types_module.MAX_ENVELOPE_BYTES - overhead + 1)}
    with pytest.raises(Exception, match="REQUEST_INVALID"):
        CallRequest.from_json(json.dumps(envelope))


def test_unknown_version_is_not_resolved_to_another(fx: HostFixture) -> None:
    for version in ("1.0", "latest", "1.0.1", "*"):
        result = fx.host.call(fx.request(version=version))
        assert result.error is not None and result.error.code == "TOOL_NOT_FOUND", version


# -- layered tool policy and grants ----------------------------------------------------------


def test_write_tool_asks_by_class_default(fx: HostFixture) -> None:
    counter = GuestCounter(fx.host)
    result = fx.host.call(fx.request(tool="echo.write"))
    assert result.error is not None and result.error.code == "APPROVAL_REQUIRED"
    assert result.error.details["action_digest"] == result.action_digest
    assert counter.starts == 0


def test_file_engine_ask_requires_approval_even_for_read(tmp_path: Path) -> None:
    fx = make_host(tmp_path, allow=(), ask=READ_PERMS)
    with fx.host:
        plan = fx.host.prepare(fx.request())
        assert plan.status == "approval_required"
        assert plan.preview.action_digest == plan.action_digest


def test_always_for_session_then_tighten_to_deny_deny_wins(fx: HostFixture) -> None:
    counter = GuestCounter(fx.host)
    fx.host.grants.grant(ALICE.key, "s1", "echo.write")
    assert fx.host.call(fx.request(tool="echo.write")).ok
    assert counter.starts == 1
    fx.host._tool_policy.set("alice", "p", ToolSelector("echo.write"), ToolMode.DISABLED)
    result = fx.host.call(fx.request(tool="echo.write"))
    assert result.error is not None and result.error.code == "POLICY_DENIED"
    assert counter.starts == 1


def test_bound_allow_runs_without_asking_and_its_outcome_says_so(fx: HostFixture) -> None:
    binding = fx.host.binding_of("echo.write", "1.0.0")
    assert binding is not None
    fx.host._tool_policy.set("alice", "p", ToolSelector("echo.write"), ToolMode.ALLOW, bound={"echo.write": binding})
    result = fx.host.call(fx.request(tool="echo.write"))
    assert result.ok
    outcome = [r for r in audit_records(fx) if r["kind"] == "call.outcome"][-1]
    assert outcome["tool_policy"] == {"mode": "allow", "binding": binding, "allow": "bound"}


def test_rebound_allow_asks_and_the_preview_and_outcome_say_rebind(fx: HostFixture) -> None:
    counter = GuestCounter(fx.host)
    stale = "0" * 64  # the binding the allow was reviewed for: not the tool's now
    fx.host._tool_policy.set("alice", "p", ToolSelector("echo.write"), ToolMode.ALLOW, bound={"echo.write": stale})
    plan = fx.host.prepare(fx.request(tool="echo.write"))
    assert plan.status == "approval_required"
    current = fx.host.binding_of("echo.write", "1.0.0")
    assert plan.preview.rebind == {"recorded": stale, "current": current}
    assert any("REBIND" in line for line in plan.preview.lines())
    assert plan.preview.to_dict()["rebind"]["recorded"] == stale
    refused = fx.host.call(fx.request(tool="echo.write"))
    assert refused.error is not None and refused.error.code == "APPROVAL_REQUIRED"
    assert counter.starts == 0
    approved = fx.host.execute(plan, fx.host.approve(plan))
    assert approved.ok
    outcome = [r for r in audit_records(fx) if r["kind"] == "call.outcome"][-1]
    assert outcome["tool_policy"]["allow"] == "rebind"


def test_session_grant_via_host_is_bound_to_the_tools_binding(fx: HostFixture) -> None:
    fx.host.grants.grant(ALICE.key, "s1", "echo.write")
    binding = fx.host.binding_of("echo.write", "1.0.0")
    assert binding is not None
    assert fx.host.store.grants.discharges(ALICE.key, "s1", f"echo.write#{binding}")
    assert not fx.host.store.grants.discharges(ALICE.key, "s1", "echo.write")  # never stored unbound
    assert fx.host.call(fx.request(tool="echo.write")).ok


def test_session_grant_does_not_cross_sessions_or_principals(fx: HostFixture) -> None:
    fx.host.grants.grant(ALICE.key, "A", "echo.write")
    assert fx.host.call(fx.request(tool="echo.write", session="A")).ok
    other_session = fx.host.call(fx.request(tool="echo.write", session="B"))
    assert other_session.error is not None and other_session.error.code == "APPROVAL_REQUIRED"
    fx.policy.grant_role("p", "bob", "user")
    bob = fx.host.call(
        fx.request(tool="echo.write", session="A", principal=Principal(project="p", subject="bob"))
    )
    assert bob.error is not None and bob.error.code == "APPROVAL_REQUIRED"


def test_managed_cap_beats_user_allow(tmp_path: Path) -> None:
    admin = tmp_path / "admin"
    admin.mkdir()
    (admin / "cap.json").write_text(
        json.dumps(
            {"format": "stockade.toolcap/1", "rules": [{"selector": {"service": "echo"}, "max": "disabled"}]}
        )
    )
    store = ToolPolicyStore(tmp_path / "tool-policy", admin_dir=admin)
    store.set("alice", "p", ServiceSelector("echo"), ToolMode.ALLOW, bound={"echo.write": "0" * 64})
    fx = make_host(tmp_path, tool_policy=store)
    with fx.host:
        result = fx.host.call(fx.request())
    assert result.error is not None and result.error.code == "POLICY_DENIED"


# -- approvals ------------------------------------------------------------------------------


def test_approved_write_runs_once_and_replay_is_refused(fx: HostFixture) -> None:
    counter = GuestCounter(fx.host)
    plan = fx.host.prepare(fx.request(tool="echo.write"))
    approval = fx.host.approve(plan)
    assert fx.host.execute(plan, approval).ok
    replay = fx.host.execute(plan, approval)
    assert replay.error is not None and replay.error.code == "APPROVAL_INVALID"
    assert counter.starts == 1


def test_approval_in_envelope_is_honoured_once(fx: HostFixture) -> None:
    plan = fx.host.prepare(fx.request(tool="echo.write"))
    approval = fx.host.approve(plan)
    assert fx.host.call(fx.request(tool="echo.write", approval=approval)).ok
    again = fx.host.call(fx.request(tool="echo.write", approval=approval))
    assert again.error is not None and again.error.code == "APPROVAL_INVALID"


@pytest.mark.parametrize("change", ["input", "session", "principal", "forged-digest", "expired"])
def test_approval_for_another_action_refused(fx: HostFixture, change: str) -> None:
    plan = fx.host.prepare(fx.request(tool="echo.write"))
    approval = fx.host.approve(plan)
    counter = GuestCounter(fx.host)
    if change == "input":
        target = fx.host.prepare(fx.request(tool="echo.write", input={"message": "rm -rf"}))
    elif change == "session":
        target = fx.host.prepare(fx.request(tool="echo.write", session="s2"))
    elif change == "principal":
        fx.policy.grant_role("p", "bob", "user")
        target = fx.host.prepare(
            fx.request(tool="echo.write", principal=Principal(project="p", subject="bob"))
        )
    elif change == "forged-digest":
        target = fx.host.prepare(fx.request(tool="echo.write", input={"message": "other"}))
        approval = Approval(**(approval.model_dump() | {"action_digest": target.action_digest}))
    else:
        target = plan
        approval = fx.host._approvals.issue(plan, ttl_s=1, now=0.0)
    result = fx.host.execute(target, approval)
    assert result.error is not None and result.error.code == "APPROVAL_INVALID"
    assert counter.starts == 0


def test_approval_from_another_lock_generation_refused(tmp_path: Path) -> None:
    fx = make_host(tmp_path, tools=[WRITE_TOOL], allow=WRITE_PERMS)
    plan = fx.host.prepare(fx.request(tool="echo.write"))
    approval = fx.host.approve(plan)
    fx.host.close()
    previous = lock_digest(fx.lock_path)
    bundle = tmp_path / "bundles" / "echo"
    write_lock(fx.lock_path, [lock_entry(tmp_path, bundle)], generation=2, previous=previous)
    host2 = Host.open(
        fx.lock_path,
        config=HostConfig(state_dir=tmp_path / "state"),
        secrets=None,
        policy=fx.policy,
        audit=tmp_path / "audit.log",
    )
    with host2:
        plan2 = host2.prepare(fx.request(tool="echo.write"))
        assert plan2.action_digest != plan.action_digest
        result = host2.execute(plan2, approval)
    assert result.error is not None and result.error.code == "APPROVAL_INVALID"


def test_revoke_between_prepare_and_execute_denies(fx: HostFixture) -> None:
    counter = GuestCounter(fx.host)
    plan = fx.host.prepare(fx.request())
    fx.policy.revoke_role("p", "alice", "user")
    result = fx.host.execute(plan)
    assert result.error is not None and result.error.code == "POLICY_DENIED"
    assert counter.starts == 0


# -- steps 7–11 ------------------------------------------------------------------------------


def test_rate_limit_per_principal_and_tool(tmp_path: Path) -> None:
    fx = make_host(tmp_path, tools=[echo_tool(rate_limit={"per_minute": 2, "per_hour": 10})])
    with fx.host:
        assert fx.host.call(fx.request()).ok
        assert fx.host.call(fx.request()).ok
        third = fx.host.call(fx.request())
    assert third.error is not None and third.error.code == "RATE_LIMITED"
    assert third.error.details["retry_after_s"] > 0


def test_required_secret_missing_guest_never_starts(tmp_path: Path) -> None:
    fx = make_host(tmp_path, manifest_overrides={"http": CREDENTIALED_HTTP})
    counter = GuestCounter(fx.host)
    with fx.host:
        result = fx.host.call(fx.request())
    assert result.error is not None and result.error.code == "CREDENTIAL_UNAVAILABLE"
    assert result.error.details["secret"] == "echo_token"
    assert counter.starts == 0


def test_staged_secret_is_scrubbed_from_output_and_audit(tmp_path: Path) -> None:
    secret = "s3cr3t-value-4242"
    store = SecretsStore(tmp_path / "secrets.json", make_key())
    store.set("p", "alice", "echo_token", secret)
    fx = make_host(tmp_path, manifest_overrides={"http": CREDENTIALED_HTTP}, secrets=store)
    with fx.host:
        result = fx.host.call(fx.request(input={"message": f"token={secret}"}))
    assert result.ok, result.error
    assert result.output == {"message": "token=[REDACTED]"}
    assert secret not in fx.audit_path.read_text()


def test_egress_session_closed_once_each_call_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The call's egress session (pooled connections) is closed after its outcome record is
    written, on success and on failure alike (a context-managed session)."""
    secret = "s3cr3t-value-4242"
    store = SecretsStore(tmp_path / "secrets.json", make_key())
    store.set("p", "alice", "echo_token", secret)
    events: list[str] = []
    original_close = EgressSession.close
    original_append = AuditLog.append

    def close(self: EgressSession) -> None:
        events.append("close")
        original_close(self)

    def append(self: AuditLog, kind: str, payload: Any, **kwargs: Any) -> str:
        events.append(kind)
        return original_append(self, kind, payload, **kwargs)

    monkeypatch.setattr(EgressSession, "close", close)
    monkeypatch.setattr(AuditLog, "append", append)
    fx = make_host(tmp_path, manifest_overrides={"http": CREDENTIALED_HTTP}, secrets=store,
                   tools=[echo_tool(), echo_tool(name="echo.bad", output_schema=None)],
                   allow=("tool.call:echo.say", "tool.call:echo.bad", "echo.use"))
    with fx.host:
        events.clear()
        assert fx.host.call(fx.request()).ok
        assert events == ["call.outcome", "close"]
        events.clear()
        failed = fx.host.call(fx.request(tool="echo.bad"))
        assert failed.error is not None and failed.error.code == "OUTPUT_INVALID"
        assert events == ["call.outcome", "close"]


def test_two_guests_are_inside_wasm_at_the_same_time(tmp_path: Path) -> None:
    """Nothing serializes guests once they run either (the test above stops at
    ``Runtime.run``'s door): each guest, mid-run, waits in a host import until the other
    guest is in it too. A lock held across wasm execution (in the runtime or the sandbox)
    would break the barrier, and the call would fail as a host import failure."""
    module = wat_guest("(drop (call $secret_available {S:n})) (call $ok (local.get $ip) (local.get $il))",
                       host=["secret-available"], strings={"n": "meet"})
    fx = make_host(tmp_path, module=module)
    meet = threading.Barrier(2)
    runtime = fx.host._runtime
    original = runtime.run

    def meeting(*args: Any, **kwargs: Any) -> Any:
        def secret_available(name: str) -> bool:
            meet.wait(timeout=60)  # both guests are running now, or the barrier breaks
            return False

        return original(*args, **{**kwargs, "secret_available": secret_available})

    runtime.run = meeting  # type: ignore[method-assign]
    results: list[Any] = []
    with fx.host:
        workers = [threading.Thread(target=lambda: results.append(fx.host.call(fx.request()))) for _ in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert [r.ok for r in results] == [True, True], [r.error for r in results]
    assert not meet.broken


def test_output_outside_schema_is_refused(tmp_path: Path) -> None:
    fx = make_host(tmp_path, tools=[echo_tool(output_schema=None)])
    with fx.host:
        result = fx.host.call(fx.request())
    assert result.error is not None and result.error.code == "OUTPUT_INVALID"


def test_fresh_instance_per_call(tmp_path: Path) -> None:
    fx = make_host(
        tmp_path,
        module=counter_component(),
        tools=[echo_tool(output_schema={"type": "integer", "minimum": 0, "maximum": 100})],
    )
    with fx.host:
        outputs = [fx.host.call(fx.request()).output for _ in range(3)]
    assert outputs == [1, 1, 1]


def test_runaway_guest_contained_and_audited_with_usage(tmp_path: Path) -> None:
    fx = make_host(tmp_path, module=loop_component())
    with fx.host:
        result = fx.host.call(fx.request())
    assert result.error is not None and result.error.code == "SANDBOX_FUEL_EXHAUSTED"
    outcome = audit_records(fx)[-1]
    assert outcome["kind"] == "call.outcome" and outcome["ok"] is False
    assert outcome["error"]["code"] == "SANDBOX_FUEL_EXHAUSTED"
    assert outcome["usage"]["fuel"] > 40_000_000


class _FailingIntentLog(AuditLog):
    def append(self, kind: str, payload: Any, *, durable: bool | None = None) -> str:
        if kind == "call.intent":
            raise AuditUnavailable("disk full")
        return super().append(kind, payload, durable=durable)


def test_audit_failure_refuses_write_and_runs_nothing(tmp_path: Path) -> None:
    log = _FailingIntentLog(tmp_path / "audit.log")
    fx = make_host(tmp_path, tools=[WRITE_TOOL], allow=WRITE_PERMS, audit=log)
    counter = GuestCounter(fx.host)
    with fx.host:
        fx.host.grants.grant(ALICE.key, "s1", "echo.write")
        result = fx.host.call(fx.request(tool="echo.write"))
    log.close()
    assert result.error is not None and result.error.code == "AUDIT_UNAVAILABLE"
    assert counter.starts == 0


def test_every_call_audited_under_concurrency_and_chain_verifies(fx: HostFixture) -> None:
    threads, per_thread = 8, 500
    failures: list[Any] = []

    def work(n: int) -> None:
        for i in range(per_thread):
            message = f"t{n}-{i}"
            result = fx.host.call(fx.request(input={"message": message}))
            if not result.ok or result.output != {"message": message}:
                failures.append(result)

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert failures == []
    report = verify(fx.audit_path)
    assert report.ok, report.reason
    outcomes = [r for r in audit_records(fx) if r["kind"] == "call.outcome"]
    assert len(outcomes) == threads * per_thread
    assert {r["input"]["message"] for r in outcomes} == {
        f"t{n}-{i}" for n in range(threads) for i in range(per_thread)
    }


def test_two_calls_run_their_guests_at_the_same_time(tmp_path: Path) -> None:
    """Nothing in the pipeline serializes sandbox runs: two write calls
    (intent record, outcome record, full durability) are inside ``Runtime.run`` at once.
    Each run waits at a barrier for the other; a lock held across the run would break
    the barrier (its timeout) instead."""
    fx = make_host(tmp_path, tools=[WRITE_TOOL], allow=WRITE_PERMS)
    fx.host.grants.grant(ALICE.key, "s1", "echo.write")
    both_inside = threading.Barrier(2, timeout=30)
    runtime = fx.host._runtime
    real_run = runtime.run

    def run(*args: Any, **kwargs: Any) -> Any:
        both_inside.wait()
        return real_run(*args, **kwargs)

    runtime.run = run  # type: ignore[method-assign]
    results: list[Any] = []
    pool = [
        threading.Thread(target=lambda m=m: results.append(
            fx.host.call(fx.request(tool="echo.write", input={"message": m}))))
        for m in ("a", "b")
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    fx.host.close()
    assert sorted(r.output["message"] for r in results if r.ok) == ["a", "b"]
    assert not both_inside.broken


@pytest.mark.parametrize("durability", ["full", "flush"])
def test_intent_record_is_on_disk_before_the_guest_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """In both durability modes the intent of a write call is fsynced before the guest
    runs; only ``full`` also waits for the outcome record's fsync."""
    config = HostConfig(state_dir=tmp_path / "state", audit_durability=durability,  # type: ignore[arg-type]
                        audit_flush_interval_ms=3_600_000)
    fx = make_host(tmp_path, tools=[WRITE_TOOL], allow=WRITE_PERMS, config=config)
    fx.host.grants.grant(ALICE.key, "s1", "echo.write")
    synced: list[int] = []
    real_fsync = audit_module.os.fsync
    monkeypatch.setattr(audit_module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    seen_at_start: list[int] = []
    runtime = fx.host._runtime
    real_run = runtime.run

    def run(*args: Any, **kwargs: Any) -> Any:
        seen_at_start.append(len(synced))
        return real_run(*args, **kwargs)

    runtime.run = run  # type: ignore[method-assign]
    result = fx.host.call(fx.request(tool="echo.write"))
    assert result.ok
    assert seen_at_start == [1]  # the intent record's fsync, before the guest started
    assert len(synced) == (2 if durability == "full" else 1)  # the outcome's own fsync in full mode
    fx.host.close()


def test_acall_runs_the_same_pipeline(fx: HostFixture) -> None:
    result = asyncio.run(fx.host.acall(fx.request()))
    assert result.ok and result.output == {"message": "hi"}
    denied = asyncio.run(fx.host.acall(fx.request(tool="echo.write")))
    assert denied.error is not None and denied.error.code == "APPROVAL_REQUIRED"


@pytest.mark.parametrize(
    "fmt,key", [("openai", "function"), ("anthropic", "input_schema"), ("mcp", "inputSchema")]
)
def test_model_facing_schemas(fx: HostFixture, fmt: str, key: str) -> None:
    schemas = fx.host.tools(format=fmt)  # type: ignore[arg-type]
    assert len(schemas) == 2
    assert all(key in s for s in schemas)
    names = json.dumps(schemas)
    assert ("echo__say" in names) if fmt != "mcp" else ("echo.say" in names)
    offered = schemas[0]["function"]["name"] if fmt == "openai" else schemas[0]["name"]
    assert fx.host.resolve_tool(fmt, offered)[1] == "1.0.0"  # type: ignore[arg-type]
    with pytest.raises(Exception, match="TOOL_NOT_FOUND"):
        fx.host.resolve_tool(fmt, "echo.say@9.9.9")  # type: ignore[arg-type]


def test_closed_host_refuses_use(tmp_path: Path) -> None:
    fx = make_host(tmp_path)
    fx.host.close()
    with pytest.raises(RuntimeError, match="closed"):
        fx.host.call(fx.request())


def test_lock_with_unexpected_module_refused_before_registry(tmp_path: Path) -> None:
    module = echo_component()
    manifest = echo_manifest([echo_tool()], module)
    bundle = write_bundle(tmp_path / "bundles" / "echo", manifest, module)
    lock = write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])
    (bundle / "module.wasm").write_bytes(module + b"\x00")
    with pytest.raises(DigestMismatch) as info:
        Host.open(
            lock,
            config=HostConfig(state_dir=tmp_path / "state"),
            secrets=None,
            policy=_Engine([]),
            audit=tmp_path / "audit.log",
        )
    assert info.value.code == "DIGEST_MISMATCH"
    assert info.value.details["file"] == "module.wasm"
    assert not (tmp_path / "state" / "lock-state.json").exists()


def test_reviewer_rebind_sets_a_bound_allow_and_writes_a_policy_rebind_record(fx: HostFixture) -> None:
    stale = "0" * 64
    fx.host._tool_policy.set("alice", "p", ToolSelector("echo.write"), ToolMode.ALLOW, bound={"echo.write": stale})
    assert fx.host.prepare(fx.request(tool="echo.write")).status == "approval_required"
    fx.host.bind_allow("p", "alice", "echo.write", "1.0.0")
    assert fx.host.prepare(fx.request(tool="echo.write")).status == "ready"
    record = [r for r in audit_records(fx) if r["kind"] == "policy.rebind"][-1]
    assert (record["recorded"], record["binding"]) == (stale, fx.host.binding_of("echo.write", "1.0.0"))
    assert (record["project"], record["subject"], record["tool"]) == ("p", "alice", "echo.write")
    with pytest.raises(ToolNotFound):
        fx.host.bind_allow("p", "alice", "echo.nope", "1.0.0")
    assert len([r for r in audit_records(fx) if r["kind"] == "policy.rebind"]) == 1
