"""``Host.call`` on the PostgreSQL state store against the local one.

Run: ``python tests/benchmarks/bench_store.py [--calls 300] [--rounds 3] [--per-process 200]``

Needs the PostgreSQL server binaries (initdb, pg_ctl) and psycopg; starts a throw-away
cluster on a loopback port (as the ``postgres`` user when run as root) and stops it.

Latency rows (median µs per ``Host.call``, the WAT echo tool, same run, rounds alternate):

  (lw) local store, write tool (intent + outcome records, durability ``full``)
  (pw) postgres store, write tool (two audit transactions, each committed durably);
       both stores sign audit checkpoints (every 1,000 records of a chain)
  (lr) / (pr) the same for a write tool allowed outright but carrying a rate limit
       (one rate-limit transaction more on postgres)

Throughput row:

  (T)  4 host processes x 2 threads each, one postgres store, write tool: calls/s over
       all calls; the chain is exported and verified afterwards.

Target: pw/lw <= 2.0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg

from host import FilePolicyEngine, Host, HostConfig
from host.audit.key import AuditKey
from host.audit.log import verify
from host.policy.toolpolicy import ToolPolicyStore
from host.store.migrations import migrate
from host.store.postgres import PostgresStore
from host.types import CallRequest, Principal
from tests.support.fleet import Repo, Worker, make_repo
from tests.support.postgres import Cluster

ALICE = Principal(project="p", subject="alice")


def open_host(repo: Repo, state: Path, store: PostgresStore | None) -> Host:
    common = {
        "config": HostConfig(state_dir=state),
        "secrets": None,
        "policy": FilePolicyEngine(repo.policy),
        "tool_policy": ToolPolicyStore(repo.tool_policy, admin_dir=None),
    }
    if store is None:
        return Host.open(repo.gen1, audit=state / "audit.log", **common)  # type: ignore[arg-type]
    return Host.open(repo.gen1, store=store, **common)  # type: ignore[arg-type]


def median_us(host: Host, tool: str, calls: int) -> float:
    samples = []
    for n in range(calls):
        request = CallRequest(principal=ALICE, session="b", tool=tool, version="1.0.0",
                              input={"message": f"m{n}"})
        started = time.perf_counter()
        result = host.call(request)
        samples.append(time.perf_counter() - started)
        if not result.ok:
            raise SystemExit(f"{tool}: {result.error}")
    return statistics.median(samples) * 1e6


def latency(repo: Repo, root: Path, dsn: str, calls: int, rounds: int) -> None:
    rows: dict[str, list[float]] = {"lw": [], "pw": [], "lr": [], "pr": []}
    # Both sign audit checkpoints (the local log with the state dir's key, as Host.open does).
    (root / "shared").mkdir(parents=True, exist_ok=True)
    store = PostgresStore(dsn, signer=AuditKey.load_or_create(root / "shared"))
    local = open_host(repo, root / "local", None)
    shared = open_host(repo, root / "shared", store)
    try:
        for _ in range(rounds):
            for key, host, tool in (("lw", local, "echo.write"), ("pw", shared, "echo.write"),
                                    ("lr", local, "echo.limited"), ("pr", shared, "echo.limited")):
                # echo.limited allows 100/min per key: 30 per round stays under it over 3 rounds
                rows[key].append(median_us(host, tool, 30 if key.endswith("r") else calls))
    finally:
        local.close()
        shared.close()
        store.close()
    for key, values in rows.items():
        print(f"({key}) {statistics.median(values):9.0f} µs   rounds: {', '.join(f'{v:.0f}' for v in values)}")
    lw, pw = statistics.median(rows["lw"]), statistics.median(rows["pw"])
    print(f"pw/lw = {pw / lw:.2f}  (target <= 2.0)")
    print(f"pr/lr = {statistics.median(rows['pr']) / statistics.median(rows['lr']):.2f}")


def throughput(repo: Repo, dsn: str, per_process: int) -> None:
    workers = [Worker(repo, dsn, f"t{i}") for i in range(4)]
    try:
        for worker in workers:
            worker.send("open", lock="gen1.lock")
        for worker in workers:
            assert worker.answer().get("ok") is True
        started = time.perf_counter()
        for worker in workers:
            worker.send("calls", n=per_process, tool="echo.write", session="t", threads=2)
        answers = [worker.answer() for worker in workers]
        elapsed = time.perf_counter() - started
    finally:
        for worker in workers:
            worker.close()
    total = sum(a["codes"].get("OK", 0) for a in answers)
    with PostgresStore(dsn) as store, tempfile.NamedTemporaryFile("w", suffix=".jsonl") as out:
        out.write("".join(line + "\n" for line in store.lines("project:p")))
        out.flush()
        report = verify(Path(out.name))
    print(f"(T) {total / elapsed:9.0f} calls/s   4 processes x 2 threads, {total} calls in {elapsed:.2f} s; "
          f"chain verifies: {report.ok} ({report.records} records)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-process", type=int, default=200)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    cluster = Cluster.start()
    try:
        dsn = cluster.create_database("bench")
        with psycopg.connect(dsn, autocommit=True) as conn:
            migrate(conn)
        with tempfile.TemporaryDirectory() as tmp:
            repo = make_repo(Path(tmp) / "repo")
            latency(repo, Path(tmp), dsn, args.calls, args.rounds)
            throughput(repo, dsn, args.per_process)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
