"""MCP overhead: ``tools/call`` over stdio to a real ``stockade serve`` vs ``Host.call``.

Run: ``python tests/benchmarks/bench_mcp.py [--calls 300] [--concurrent 8]``

Rows (the trivial WAT echo tool; audit logs on /dev/shm when it exists, so fsync does not
dominate and the rows compare the MCP layer, not the disk):

  (h)  ``Host.call`` in process, median µs per call
  (p)  ``ping`` round trip over the same stdio connection: the SDK's own JSON-RPC floor
  (m)  ``tools/call`` round trip over stdio (SDK client, legacy era JSON-RPC) to a
       ``stockade serve`` subprocess on the same lock, median µs per call
  (m8) the same server with ``--concurrent`` calls in flight: calls per second, against
       sequential calls per second

Target: m - h <= 1.5 ms. Both are measured in the same run; the ratios are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import anyio
import mcp
from mcp import StdioServerParameters

from tests.mcp.conftest import build_world
from tests.support.cli import cli_env


def host_row(root: Path, calls: int) -> list[float]:
    world = build_world(root / "h", with_spin=False)
    host = world.open_host()
    request = {"principal": {"project": "p", "subject": "alice"}, "session": "s", "tool": "echo.say",
               "version": "1.0.0", "input": {"message": "hello, sandbox"}}  # fmt: skip
    for _ in range(20):
        host.call(request)
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        result = host.call(request)
        times.append(time.perf_counter() - started)
        if not result.ok:
            raise RuntimeError(result.error)
    host.close()
    world.audit.close()
    return times


async def mcp_rows(root: Path, calls: int, concurrent: int) -> tuple[list[float], list[float], float, float]:
    world = build_world(root / "m", with_spin=False)
    world.audit.close()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sdk.cli", "serve", "--lock", str(world.lock), "--state-dir", str(world.state),
              "--project", "p", "--subject", "alice", "--max-concurrency", str(max(concurrent, 2))],
        env=cli_env(),
    )  # fmt: skip
    args = {"message": "hello, sandbox"}
    async with mcp.Client(params, mode="legacy") as client:
        await client.list_tools()  # as clients do: the SDK validates outputs against the listing
        ping = []
        for _ in range(calls):
            started = time.perf_counter()
            await client.send_ping()
            ping.append(time.perf_counter() - started)
        for _ in range(20):
            await client.call_tool("echo.say", args)
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            result = await client.call_tool("echo.say", args)
            times.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(result.content)
        sequential = calls / sum(times)
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(concurrent):

                async def worker() -> None:
                    for _ in range(calls // concurrent):
                        await client.call_tool("echo.say", args)

                group.start_soon(worker)
        parallel = (calls // concurrent) * concurrent / (time.perf_counter() - started)
    return times, ping, sequential, parallel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=8)
    args = parser.parse_args()
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        root = Path(tmp)
        h = host_row(root, args.calls)
        m, ping, sequential, parallel = anyio.run(mcp_rows, root, args.calls, args.concurrent)
    h_med, m_med = statistics.median(h) * 1e6, statistics.median(m) * 1e6
    print(f"cpus: {os.cpu_count()}, calls: {args.calls}, audit on: {base or 'working disk'}")
    print(f"(h)  Host.call in process          median {h_med:8.0f} µs")
    print(f"(p)  ping over stdio (SDK floor)    median {statistics.median(ping) * 1e6:8.0f} µs")
    print(f"(m)  tools/call over stdio          median {m_med:8.0f} µs")
    print(f"     m - h = {(m_med - h_med) / 1000:.2f} ms (target <= 1.5 ms), m/h = {m_med / h_med:.2f}")
    print(f"(m1) sequential over stdio          {sequential:8.0f} calls/s")
    print(f"(m8) {args.concurrent} concurrent over stdio        {parallel:8.0f} calls/s  "
          f"({parallel / sequential:.2f}x sequential)")  # fmt: skip


if __name__ == "__main__":
    main()
