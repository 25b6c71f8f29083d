"""One host process of a test fleet (driven by :class:`tests.support.fleet.Worker`).

``python -m tests.support.fleet_worker REPO STATE_DIR`` with ``STOCKADE_STORE`` set to
the PostgreSQL DSN. Reads one JSON command per line, answers one JSON line each:

- ``open {"lock": "gen1.lock"}`` → ``{"ok": true, "generation": 1}`` or ``{"code": ...}``;
- ``ready`` → ``{"ready": true}`` (the parent uses it as a barrier);
- ``calls {"n", "tool", "session", "threads"}`` → ``{"codes": {...}, "ids": [...]}``;
- ``call {"tool", "session", "approval"?}`` → ``{"ok", "code", "audit_id"}``;
- ``grant`` / ``clear`` / ``discharges`` on the host's session grants;
- ``follow`` → ``{"following": true}`` (``Host.follow_generations``, notices only);
  ``reloads {"count", "timeout_s"}`` → ``{"events": [...], "generation": n}`` once
  ``count`` reload attempts happened (or the timeout passed);
- ``exit``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from host import FilePolicyEngine, Host, HostConfig
from host.errors import StockadeError
from host.policy.toolpolicy import ToolPolicyStore
from host.store.postgres import PostgresStore
from host.types import Approval, CallRequest, Principal
from tests.support.approver import APPROVER

ALICE = Principal(project="p", subject="alice")


def request(tool: str, session: str, message: str, approval: dict[str, Any] | None = None) -> CallRequest:
    return CallRequest(
        principal=ALICE, session=session, tool=tool, version="1.0.0", input={"message": message},
        approval=None if approval is None else Approval(**approval),
    )


class Fleet:
    def __init__(self, repo: Path, state: Path) -> None:
        self.repo = repo
        self.state = state
        timeout = float(os.environ.get("FLEET_STORE_TIMEOUT_S", "5"))
        probe = float(os.environ.get("FLEET_STORE_PROBE_S", "0.25"))
        self.store = PostgresStore(
            os.environ["STOCKADE_STORE"], pool_size=4, timeout_s=timeout, probe_interval_s=probe,
            approver=APPROVER,
        )
        self.host: Host | None = None
        self.follower: Any = None

    def open(self, lock: str) -> dict[str, Any]:
        try:
            self.host = Host.open(
                self.repo / lock, config=HostConfig(state_dir=self.state), secrets=None,
                policy=FilePolicyEngine(self.repo / "policy.json"), store=self.store,
                tool_policy=ToolPolicyStore(self.repo / "tool-policy", admin_dir=None),
            )
        except StockadeError as exc:
            return {"code": exc.code}
        return {"ok": True, "generation": self.host.generation}

    def calls(self, n: int, tool: str, session: str, threads: int = 1) -> dict[str, Any]:
        assert self.host is not None
        host = self.host
        codes: Counter[str] = Counter()
        ids: list[str] = []
        guard = threading.Lock()

        def run(share: range) -> None:
            for i in share:
                result = host.call(request(tool, session, f"m{i}"))
                with guard:
                    code = "OK" if result.ok else result.error.code if result.error else "?"
                    codes[code] += 1
                    if result.ok and result.audit_id:
                        ids.append(result.audit_id)
                    if not result.ok and result.usage.fuel:
                        codes["RAN_" + code] += 1  # a refused call whose guest had started

        workers = [threading.Thread(target=run, args=(range(t, n, threads),)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return {"codes": dict(codes), "ids": ids}

    def call(self, tool: str, session: str, approval: dict[str, Any] | None = None) -> dict[str, Any]:
        assert self.host is not None
        result = self.host.call(request(tool, session, "approved", approval))
        return {"ok": result.ok, "code": result.error.code if result.error else None,
                "audit_id": result.audit_id, "fuel": result.usage.fuel}

    def approve(self, tool: str, session: str) -> dict[str, Any]:
        assert self.host is not None
        plan = self.host.prepare(request(tool, session, "approved"))
        return {"status": plan.status, "approval": self.host.approve(plan).model_dump()}

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        if op == "open":
            return self.open(args["lock"])
        if op == "ready":
            return {"ready": True}
        if op == "calls":
            return self.calls(args["n"], args["tool"], args["session"], args.get("threads", 1))
        if op == "call":
            return self.call(args["tool"], args["session"], args.get("approval"))
        if op == "approve":
            return self.approve(args["tool"], args["session"])
        assert self.host is not None
        if op == "grant":
            self.host.grants.grant(ALICE.key, args["session"], args["tool"])
            return {"ok": True}
        if op == "clear":
            return {"cleared": self.host.grants.clear_grants(args["session"])}
        if op == "discharges":
            return {"granted": self.host.grants.discharges(ALICE.key, args["session"], args["tool"])}
        if op == "follow":
            self.follower = self.host.follow_generations(poll_s=3600.0)  # only a NOTIFY wakes it
            return {"following": True}
        if op == "reloads":
            events = self.follower.wait(args["count"], timeout_s=args["timeout_s"])
            return {"events": [dataclasses.asdict(e) for e in events], "generation": self.host.generation}
        raise ValueError(f"unknown op {op!r}")

    def close(self) -> None:
        if self.host is not None:
            self.host.close()
        self.store.close()


def main() -> None:
    fleet = Fleet(Path(sys.argv[1]), Path(sys.argv[2]))
    try:
        for line in sys.stdin:
            command = json.loads(line)
            op = command.pop("op")
            if op == "exit":
                break
            sys.stdout.write(json.dumps(fleet.handle(op, command)) + "\n")
            sys.stdout.flush()
    finally:
        fleet.close()


if __name__ == "__main__":
    main()
