"""Approvals on the PostgreSQL store are approver-signed statements, not bearer rows.

Whoever can write the database (the one role every host and approver holds) used to be
able to approve: insert an approval row with any MAC, re-arm a used one (``consumed_at =
NULL``) or set a queued action's ``status`` to ``approved``. Each attack below runs as that
writer, with a real server, and must be refused — with nothing consumed or recorded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import psycopg
import pytest

from host.approverkey import ApproverKey, sign_approval
from host.errors import ApprovalInvalid, ApproverKeyMissing, ConfigInvalid
from host.signing import TrustedKeys
from host.store.postgres import PostgresStore
from host.types import Approval, InvocationPlan
from tests.store.test_contract import plans  # noqa: F401 - the module-scoped plans fixture
from tests.support.approver import APPROVER, write_approver_config


def _redeemed(store: PostgresStore) -> int:
    return sum('"kind":"approval.redeemed"' in line for line in store.lines("project:p"))


def _fields(plan: InvocationPlan, nonce: str = "cd" * 16) -> dict[str, object]:
    principal = plan.request.principal
    return {
        "action_digest": plan.action_digest, "project": principal.project, "subject": principal.subject,
        "session": plan.request.session, "expires_at": 4_000_000_000.0, "nonce": nonce,
    }


def _insert_row(dsn: str, approval: Approval, mac: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO approvals (nonce, action_digest, project, subject, session, mac, expires_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, to_timestamp(%s))",
            (approval.nonce, approval.action_digest, approval.project, approval.subject,
             approval.session, mac, approval.expires_at),
        )


@pytest.mark.parametrize("how", ["mac-row", "own-key"], ids=["any-mac", "attacker-signed"])
def test_pg_forged_approval_row_refused(
    pg_dsn: str, plans: dict[str, InvocationPlan], how: str  # noqa: F811
) -> None:
    """A database writer inserts an approval row and presents the matching envelope:
    with a MAC of its choosing, or signed by a key of its own (not a trusted approver)."""
    plan = plans["s1"]
    if how == "mac-row":
        forged = Approval(**_fields(plan), mac="ab" * 32)  # type: ignore[arg-type]  # test data
        mac = forged.mac or ""
    else:
        forged = sign_approval(ApproverKey.generate(), _fields(plan))
        mac = forged.signature or ""
    _insert_row(pg_dsn, forged, mac)
    with PostgresStore(pg_dsn, trusted_approver_keys=TrustedKeys({APPROVER.key_id: APPROVER.public_bytes})) as host:
        with pytest.raises(ApprovalInvalid, match="not valid") as caught:
            host.approvals.redeem(plan, forged)
        assert caught.value.code == "APPROVAL_INVALID"
        assert _redeemed(host) == 0
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT consumed_at FROM approvals").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM approval_nonces").fetchone() == (0,)


def test_pg_rearmed_approval_refused(pg_dsn: str, plans: dict[str, InvocationPlan]) -> None:  # noqa: F811
    """A used, genuinely signed approval re-armed with ``consumed_at = NULL`` is refused:
    its nonce was already redeemed."""
    with PostgresStore(pg_dsn, approver=APPROVER) as store:
        approval = store.approvals.issue(plans["s1"])
        store.approvals.redeem(plans["s1"], approval)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            rearmed = conn.execute("UPDATE approvals SET consumed_at = NULL RETURNING nonce").fetchall()
        assert rearmed == [(approval.nonce,)]
        with pytest.raises(ApprovalInvalid, match="not valid"):
            store.approvals.redeem(plans["s1"], approval)
        assert _redeemed(store) == 1


def _edit_to_approved(dsn: str, *, approval: Approval | None = None) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        entry = json.loads(str(conn.execute("SELECT entry FROM pending_approvals").fetchone()[0]))  # type: ignore[index]  # one row
        entry.update(status="approved", decided_at=entry["requested_at"], decided_by="db")
        if approval is not None:
            entry["approval"] = approval.model_dump()
        conn.execute("UPDATE pending_approvals SET status = 'approved', entry = %s", (json.dumps(entry),))


@pytest.mark.parametrize("carried", ["none", "attacker-signed", "other-action"])
def test_pg_queue_status_edited_to_approved_refused(
    pg_dsn: str, plans: dict[str, InvocationPlan], carried: str  # noqa: F811
) -> None:
    """A queued action whose row is edited to ``approved`` — without an approval, with one
    signed by the writer's own key, or with a genuine one for another action — never
    redeems as approved."""
    plan = plans["s1"]
    with PostgresStore(pg_dsn, approver=APPROVER) as store:
        other = store.approvals.issue(plans["other-input"])
        store.pending.request(plan, summary="{}")
        approval = {
            "none": None,
            "attacker-signed": sign_approval(ApproverKey.generate(), _fields(plan)),
            "other-action": other,
        }[carried]
        _edit_to_approved(pg_dsn, approval=approval)
        principal = plan.request.principal
        with pytest.raises(ApprovalInvalid) as caught:
            store.pending.redeem(plan.action_digest, project=principal.project, subject=principal.subject)
        assert caught.value.code == "APPROVAL_INVALID"
        assert _redeemed(store) == 0


def test_pg_queue_approval_is_signed_and_redeemed_once(
    pg_dsn: str, plans: dict[str, InvocationPlan]  # noqa: F811
) -> None:
    """An approve decision carries an approver-signed approval that a redeem-only host
    (public keys only) redeems exactly once."""
    plan = plans["s1"]
    principal = plan.request.principal
    trusted = TrustedKeys({APPROVER.key_id: APPROVER.public_bytes})
    with PostgresStore(pg_dsn, approver=APPROVER) as approver, PostgresStore(
        pg_dsn, trusted_approver_keys=trusted
    ) as host:
        host.pending.request(plan, summary="{}")
        decided = approver.pending.decide(plan.action_digest, approve=True, by="reviewer")
        assert decided.approval is not None and decided.approval.key_id == APPROVER.key_id
        status, entry = host.pending.redeem(plan.action_digest, project=principal.project, subject=principal.subject)
        assert status == "approved" and entry is not None and entry.approval is not None
        host.approvals.redeem(plan, entry.approval)
        with pytest.raises(ApprovalInvalid):
            host.approvals.redeem(plan, entry.approval)
        assert _redeemed(host) == 1


def test_pg_without_approver_keys_fails_closed(pg_dsn: str, plans: dict[str, InvocationPlan]) -> None:  # noqa: F811
    """No approver key: issuing and approving from the queue fail closed; no trusted
    approver key: redeeming fails closed. Never a fallback to the rows."""
    plan = plans["s1"]
    with PostgresStore(pg_dsn, approver=APPROVER) as approver:
        approval = approver.approvals.issue(plan)
    with PostgresStore(pg_dsn) as bare:
        with pytest.raises(ApproverKeyMissing) as caught:
            bare.approvals.issue(plan)
        assert caught.value.code == "APPROVER_KEY_MISSING" and "approver_key" in (caught.value.hint or "")
        with pytest.raises(ApproverKeyMissing, match="trusts none") as refused:
            bare.approvals.redeem(plan, approval)
        assert "trusted_approver_keys" in (refused.value.hint or "")
        bare.pending.request(plan, summary="{}")
        with pytest.raises(ApproverKeyMissing):
            bare.pending.decide(plan.action_digest, approve=True, by="reviewer")
        assert bare.pending.entries()[0].status == "pending"
        assert _redeemed(bare) == 0


def test_approver_key_readable_by_others_refused(tmp_path: Path) -> None:
    path = write_approver_config(tmp_path / "home")
    assert ApproverKey.load(path).key_id == APPROVER.key_id
    os.chmod(path, 0o644)
    with pytest.raises(ConfigInvalid, match="accessible by group or others") as caught:
        ApproverKey.load(path)
    assert "chmod 600" in (caught.value.hint or "")



def test_pg_cli_approve_signs_with_the_configured_approver_key(
    pg_dsn: str, plans: dict[str, InvocationPlan], tmp_path: Path  # noqa: F811
) -> None:
    """``stockade approvals approve --store …`` without ``approver_key`` is refused and
    leaves the row pending; with it, the decision carries an approval a redeem-only host
    verifies."""
    from tests.support.cli import cli_env, run_cli  # noqa: PLC0415

    plan = plans["s1"]
    principal = plan.request.principal
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = cli_env(STOCKADE_STORE=pg_dsn, STOCKADE_HOME=str(home))
    trusted = TrustedKeys({APPROVER.key_id: APPROVER.public_bytes})
    with PostgresStore(pg_dsn, trusted_approver_keys=trusted) as host:
        host.pending.request(plan, summary="{}")
        refused = run_cli("approvals", "approve", plan.action_digest, cwd=tmp_path, env=env, timeout=120)
        assert refused.returncode != 0 and "APPROVER_KEY_MISSING" in refused.stderr
        assert host.pending.entries()[0].status == "pending"
        write_approver_config(home)
        approved = run_cli("approvals", "approve", plan.action_digest, cwd=tmp_path, env=env, timeout=120)
        assert approved.returncode == 0, approved.stderr
        status, entry = host.pending.redeem(plan.action_digest, project=principal.project, subject=principal.subject)
        assert status == "approved" and entry is not None and entry.approval is not None
        host.approvals.redeem(plan, entry.approval)
