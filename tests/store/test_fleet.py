"""Many host processes behave as one: real processes, one PostgreSQL store.

Each worker is a separate Python process with its own Host and its own connection pool
(:mod:`tests.support.fleet`). Workers are released together through their pipes once all
of them have opened their host — no sleeps.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from host.audit.log import verify
from host.store.postgres import PostgresStore
from tests.support.fleet import Repo, Worker, make_repo

CALLS_PER_PROCESS = 250


class Fleet:
    def __init__(self, repo: Repo, dsn: str) -> None:
        self.repo = repo
        self.dsn = dsn
        self.workers: list[Worker] = []

    def start(self, count: int, lock: str = "gen1.lock") -> list[Worker]:
        """Start ``count`` workers and open their hosts (all answered before returning)."""
        started = [Worker(self.repo, self.dsn, f"w{len(self.workers) + i}") for i in range(count)]
        self.workers += started
        for worker in started:
            worker.send("open", lock=lock)
        for worker in started:
            assert worker.answer().get("ok") is True
        return started

    def all(self, workers: list[Worker], op: str, **args: Any) -> list[dict[str, Any]]:
        """Send ``op`` to every worker first, then collect the answers (they run at once)."""
        for worker in workers:
            worker.send(op, **args)
        return [worker.answer() for worker in workers]

    def records(self, tmp_path: Path, chain: str = "project:p") -> list[dict[str, Any]]:
        """The chain, exported to a file that must verify."""
        path = tmp_path / f"{chain.replace(':', '_')}.jsonl"
        with PostgresStore(self.dsn) as store:
            path.write_text("".join(line + "\n" for line in store.lines(chain)))
        report = verify(path)
        assert report.ok, report.reason
        return [json.loads(line) for line in path.read_text().splitlines()]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()


@pytest.fixture
def fleet(pg_dsn: str, tmp_path: Path) -> Iterator[Fleet]:
    running = Fleet(make_repo(tmp_path / "repo"), pg_dsn)
    try:
        yield running
    finally:
        running.close()


def test_four_processes_write_one_chain_without_fork_or_gap(fleet: Fleet, tmp_path: Path) -> None:
    workers = fleet.start(4)
    answers = fleet.all(workers, "calls", n=CALLS_PER_PROCESS, tool="echo.write", session="s1")
    assert [a["codes"] for a in answers] == [{"OK": CALLS_PER_PROCESS}] * 4
    records = fleet.records(tmp_path)
    kinds = Counter(r["kind"] for r in records)
    assert kinds == {"call.outcome": 4 * CALLS_PER_PROCESS, "call.intent": 4 * CALLS_PER_PROCESS}
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    outcome_ids = {r["hash"] for r in records if r["kind"] == "call.outcome"}
    assert outcome_ids == {i for a in answers for i in a["ids"]}


def test_eight_processes_race_for_one_approval_exactly_one_runs(fleet: Fleet, tmp_path: Path) -> None:
    workers = fleet.start(8)
    issued = workers[0].ask("approve", tool="echo.ask", session="race")
    assert issued["status"] == "approval_required"
    results = fleet.all(workers, "call", tool="echo.ask", session="race", approval=issued["approval"])
    assert sorted(str(r["code"]) for r in results) == ["APPROVAL_INVALID"] * 7 + ["None"]
    assert [r["fuel"] for r in results if not r["ok"]] == [0] * 7  # no loser's guest started
    records = fleet.records(tmp_path)
    redeemed = [r for r in records if r["kind"] == "approval.redeemed"]
    intents = [r for r in records if r["kind"] == "call.intent" and r["tool"] == "echo.ask"]
    outcomes = Counter((r["kind"], r.get("ok"), r.get("error", {}).get("code")) for r in records)
    assert len(redeemed) == 1 and redeemed[0]["nonce"] == issued["approval"]["nonce"]
    assert len(intents) == 1
    assert outcomes[("call.outcome", True, None)] == 1
    assert outcomes[("call.outcome", False, "APPROVAL_INVALID")] == 7


def test_rate_limit_holds_across_processes(fleet: Fleet) -> None:
    workers = fleet.start(4)
    answers = fleet.all(workers, "calls", n=50, tool="echo.limited", session="s1")
    totals = sum((Counter(a["codes"]) for a in answers), Counter())
    assert totals == {"OK": 100, "RATE_LIMITED": 100}


def test_session_grant_in_one_process_honoured_and_cleared_in_another(fleet: Fleet) -> None:
    a, b = fleet.start(2)
    assert b.ask("call", tool="echo.ask", session="g")["code"] == "APPROVAL_REQUIRED"
    assert a.ask("grant", tool="echo.ask", session="g") == {"ok": True}
    granted = b.ask("call", tool="echo.ask", session="g")
    assert granted["ok"] is True
    assert b.ask("call", tool="echo.ask", session="other")["code"] == "APPROVAL_REQUIRED"
    assert a.ask("clear", session="g") == {"cleared": 1}
    assert b.ask("discharges", tool="echo.ask", session="g") == {"granted": False}
    assert b.ask("call", tool="echo.ask", session="g")["code"] == "APPROVAL_REQUIRED"


def test_process_refuses_a_generation_older_than_another_accepted(fleet: Fleet) -> None:
    fleet.start(1, lock="gen2.lock")
    late = Worker(fleet.repo, fleet.dsn, "late")
    fleet.workers.append(late)
    assert late.ask("open", lock="gen1.lock") == {"code": "LOCK_ROLLBACK"}
    assert late.ask("open", lock="gen2.lock") == {"ok": True, "generation": 2}


def test_process_b_reloads_the_generation_process_a_accepted(fleet: Fleet) -> None:
    (fleet.repo.root / "b.lock").write_bytes(fleet.repo.gen1.read_bytes())
    (b,) = fleet.start(1, lock="b.lock")
    assert b.ask("follow") == {"following": True}
    (fleet.repo.root / "b.lock").write_bytes(fleet.repo.gen2.read_bytes())  # deployed everywhere
    fleet.start(1, lock="gen2.lock")  # process A accepts generation 2
    answer = b.ask("reloads", count=1, timeout_s=120)
    assert answer == {"events": [{"ok": True, "generation": 2, "running": 2, "code": None, "message": None}],
                      "generation": 2}
    assert b.ask("call", tool="echo.write", session="s")["ok"] is True
