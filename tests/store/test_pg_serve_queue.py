"""``stockade serve`` on a PostgreSQL store, with a client that cannot elicit: the queue's
approved decision is the approver-signed approval the retried call redeems. The serving
host holds only the trusted approver public keys (it can redeem, never sign), and a row
edited to ``approved`` in the database runs nothing."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp
import psycopg
from mcp import types

from host import FilePolicyEngine, Host, HostConfig
from host.mcp.server import META_KEY, ServeOptions, StockadeMCP
from host.policy.toolpolicy import ToolPolicyStore
from host.signing import TrustedKeys
from host.store.postgres import PostgresStore
from tests.mcp.conftest import ALICE, build_world
from tests.support.approver import APPROVER


def _meta(result: types.CallToolResult) -> dict[str, Any]:
    assert result.meta is not None
    return dict(result.meta[META_KEY])


def _serve(world: Any, store: PostgresStore) -> StockadeMCP:
    def open_host() -> Host:
        return Host.open(
            world.lock, config=HostConfig(state_dir=world.state), secrets=None,
            policy=FilePolicyEngine(world.state / "policy.json"), store=store,
            tool_policy=ToolPolicyStore(world.state / "tool-policy", admin_dir=None),
        )

    return StockadeMCP(open_host, options=ServeOptions(state_dir=world.state, principal=ALICE))


def _ran(store: PostgresStore) -> int:
    records = [json.loads(line) for line in store.lines("project:p")]
    return sum(1 for r in records if r["kind"] == "call.outcome" and r.get("tool") == "echo.write" and r.get("ok"))


def test_pg_queue_status_edited_to_approved_refused_over_mcp(pg_dsn: str, tmp_path: Any) -> None:
    world = build_world(tmp_path, with_spin=False)
    trusted = TrustedKeys({APPROVER.key_id: APPROVER.public_bytes})
    with PostgresStore(pg_dsn, trusted_approver_keys=trusted) as store, PostgresStore(
        pg_dsn, approver=APPROVER
    ) as approver:
        app = _serve(world, store)

        async def body() -> None:
            async with mcp.Client(app.server, mode="legacy") as client:  # type: ignore[arg-type]
                refused = await client.call_tool("echo.write", {"message": "later"})
                digest = _meta(refused)["action_digest"]
                assert _meta(refused)["code"] == "APPROVAL_REQUIRED"
                with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the database writer approves
                    row = conn.execute("SELECT entry FROM pending_approvals").fetchone()
                    assert row is not None
                    entry = json.loads(str(row[0]))
                    entry["status"] = "approved"
                    conn.execute("UPDATE pending_approvals SET status = 'approved', entry = %s",
                                 (json.dumps(entry),))
                edited = await client.call_tool("echo.write", {"message": "later"})
                assert edited.is_error is True and _meta(edited)["code"] == "APPROVAL_INVALID"
                assert _ran(store) == 0
                queued = await client.call_tool("echo.write", {"message": "later"})
                assert _meta(queued)["code"] == "APPROVAL_REQUIRED"
                approver.pending.decide(digest, approve=True, by="reviewer")
                ran = await client.call_tool("echo.write", {"message": "later"})
                assert ran.is_error is False and ran.structured_content == {"message": "later"}
                assert _ran(store) == 1

        anyio.run(body)
        app.close()
    world.audit.close()
