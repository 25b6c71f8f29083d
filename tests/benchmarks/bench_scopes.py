"""What a scope costs per call, against a session grant measured in the same run.

Run: ``python tests/benchmarks/bench_scopes.py [--calls 200] [--rounds 3]``

Needs the PostgreSQL server binaries and psycopg (a throw-away cluster on a loopback
port, as ``bench_store.py``).

Rows (median µs per ``Host.call`` of the WAT echo write tool, rounds alternate):

  (lg) local store, the ask discharged by a session grant (no count)
  (ls) local store, the ask discharged by a scope (signature check, one locked
       read-count-fsync of ``scopes.json``, one ``scope.redeemed`` record)
  (pg) / (ps) the same on the PostgreSQL store (the scope: one transaction with the
       row lock, two conditional updates and its audit record)

Ratios printed: ls/lg and ps/pg.
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

from host import Host, HostConfig
from host.approverkey import ApproverKey
from host.store.migrations import migrate
from host.store.postgres import PostgresStore
from tests.support.approver import APPROVER, write_approver_config
from tests.support.hosts import HostFixture, echo_tool, make_host
from tests.support.postgres import Cluster

WRITE = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])
PERMS = ("tool.call:echo.write", "echo.write")


def per_call_us(host: Host, fx: HostFixture, calls: int, *, scope: str | None, session: str) -> float:
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        result = host.call(fx.request(tool="echo.write", session=session), scope=scope)
        times.append(time.perf_counter() - started)
        assert result.ok, result.error
    return statistics.median(times) * 1e6


def rows(label: str, host: Host, fx: HostFixture, key: ApproverKey, calls: int, rounds: int) -> None:
    host.grants.grant(("p", "alice"), "granted", "echo.write")
    signed = host.issue_scope(key=key, project="p", subject="alice",
                              tools=[("echo.write", "1.0.0", 1_000_000, None)], job="bench",
                              issued_by="bench", for_s=3600)
    grant, scoped = [], []
    for _ in range(rounds):
        grant.append(per_call_us(host, fx, calls, scope=None, session="granted"))
        scoped.append(per_call_us(host, fx, calls, scope=signed.scope.id, session="unattended"))
    g, s = statistics.median(grant), statistics.median(scoped)
    print(f"({label}g) session grant {g:9.0f} µs   ({label}s) scope {s:9.0f} µs   ratio {s / g:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_approver_config(root / "home")
        config = HostConfig(state_dir=root / "local" / "state", approver_key_file=root / "home" / "approver.pem")
        fx = make_host(root / "local", tools=[WRITE], allow=PERMS, config=config)
        with fx.host:
            rows("l", fx.host, fx, APPROVER, args.calls, args.rounds)
        cluster = Cluster.start()
        try:
            dsn = cluster.create_database("bench")
            with psycopg.connect(dsn, autocommit=True) as conn:
                migrate(conn)
            pfx = make_host(root / "pg", tools=[WRITE], allow=PERMS)
            pfx.host.close()
            store = PostgresStore(dsn, approver=APPROVER)
            with Host.open(pfx.lock_path, config=HostConfig(state_dir=root / "pg" / "state2"), secrets=None,
                           policy=pfx.policy, store=store, own_store=True) as host:
                rows("p", host, pfx, APPROVER, args.calls, args.rounds)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
