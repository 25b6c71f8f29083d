"""Throughput by processes: host processes sharing one PostgreSQL store, against one.

Run: ``python tests/benchmarks/bench_processes.py [--calls 300] [--rounds 3]``
(a script, not a test). Needs the PostgreSQL server binaries and psycopg: a throw-away
cluster on a loopback port (``tests/support/postgres.py``), as ``bench_store.py``.

Each worker is a separate ``python`` process with its own :class:`~host.Host`, its own
state dir and its own :class:`~host.store.postgres.PostgresStore` connection pool, on the
same database: what several ``stockade serve`` processes behind one load balancer are
(``tests/support/fleet.py``). Every worker opens the same lock and warms up first (the
component from the artifact cache, the store's pool connected); then each row releases
its workers together (a barrier of pipes) and times until the last one has answered
``--calls`` calls of ``echo.write`` (the WAT echo, a write tool allowed outright: policy,
tool policy, rate-limit bookkeeping and two audit records in the shared store per call).

Rows (calls per second of the whole fleet; rounds alternate, the median is printed):

  (1p) one process, one thread;
  (2p) two processes, one thread each — the target row;
  (1p2t) one process, two threads — why a host scales short calls by processes, not
       threads (the interpreter lock is taken and dropped around every wasmtime call).

Ratios printed: 2p/1p (target >= 1.8) and 1p2t/1p. The PostgreSQL server runs on the
same machine and takes CPU from the workers: on 2 cores the ratio is a floor, not the
figure for a database on its own host. The load average is printed with the rows.
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

from host.store.migrations import migrate
from tests.support.fleet import Worker, make_repo
from tests.support.postgres import Cluster

TARGET = 1.8  # two processes over one, calls per second
TOOL = "echo.write"


def fleet_rate(workers: list[Worker], calls: int, threads: int, session: str) -> float:
    """Calls per second of ``workers`` released together, ``calls`` each."""
    for worker in workers:
        assert worker.ask("ready") == {"ready": True}
    started = time.perf_counter()
    for worker in workers:
        worker.send("calls", n=calls, tool=TOOL, session=session, threads=threads)
    for worker in workers:
        codes = worker.answer()["codes"]
        if codes != {"OK": calls}:
            raise RuntimeError(f"a worker's calls failed: {codes}")
    return len(workers) * calls / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300, help="calls per worker per row (default 300)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_repo(Path(tmp) / "repo")
        cluster = Cluster.start()
        workers: list[Worker] = []
        try:
            dsn = cluster.create_database("bench")
            with psycopg.connect(dsn, autocommit=True) as conn:
                migrate(conn)
            workers = [Worker(repo, dsn, f"w{i}") for i in range(2)]
            for worker in workers:
                opened = worker.ask("open", lock="gen1.lock")
                if not opened.get("ok"):
                    raise RuntimeError(f"a worker could not open the lock: {opened}")
                fleet_rate([worker], 30, 1, "warm")
            rows: dict[str, list[float]] = {"1p": [], "2p": [], "1p2t": []}
            for index in range(args.rounds):
                session = f"r{index}"
                rows["1p"].append(fleet_rate(workers[:1], args.calls, 1, session))
                rows["2p"].append(fleet_rate(workers, args.calls, 1, session))
                rows["1p2t"].append(fleet_rate(workers[:1], args.calls, 2, session))
        finally:
            for worker in workers:
                worker.close()
            cluster.stop()
    medians = {label: statistics.median(values) for label, values in rows.items()}
    print(f"{'row':<6} {'calls/s (median)':>17}  rounds")
    for label, values in rows.items():
        print(f"{label:<6} {medians[label]:>17.0f}  " + " ".join(f"{v:.0f}" for v in values))
    scale = medians["2p"] / medians["1p"]
    print(f"2p/1p   {scale:.2f}x  (target >= {TARGET}x: {'met' if scale >= TARGET else 'NOT met'})")
    print(f"1p2t/1p {medians['1p2t'] / medians['1p']:.2f}x  (threads, for comparison)")
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores "
          "(the PostgreSQL server shares them)")


if __name__ == "__main__":
    main()
