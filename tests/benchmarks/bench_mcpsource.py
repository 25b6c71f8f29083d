"""Cost of governing an external MCP server: ``Host.call`` vs the same JSON-RPC call direct.

Run: ``python tests/benchmarks/bench_mcpsource.py [--calls 300]``

Rows (median µs per call, the test server's ``echo`` tool, same process, same run):

  (d)  direct: ``tools/call`` over the host's bounded stdio client, nothing else
  (h') ``Host.call`` of the pinned ``test.echo`` with the audit log on /dev/shm:
       envelope, registry, policy, input canonicalized against the pinned schema,
       action digest, rate limit, the same ``tools/call``, output check, scrub, outcome record

Prints h'/d and h'-d (the pipeline's own cost per call).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host import FilePolicyEngine, Host, HostConfig
from host.mcpsource.pinning import pin_source
from sdk.review.lockfile import add_mcp
from tests.mcpsource.conftest import REVIEW, TOKEN, declaration, request
from tests.support.secrets import make_store


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory(dir=shm) as fast:
        root = Path(scratch)
        secrets = make_store(root)
        secrets.set("ops", "mcp-test", "api_token", TOKEN)
        pinned = pin_source(declaration(root), state_dir=root / "pin", secrets=secrets, review=REVIEW)
        add_mcp(root / "stockade.lock", pinned.pin)
        policy = FilePolicyEngine.initialize(root / "policy.json")
        policy.set_role("user", allow=["tool.call:test.echo"])
        policy.grant_role("p", "alice", "user")
        with Host.open(root / "stockade.lock", config=HostConfig(state_dir=root / "state"), secrets=secrets,
                       policy=policy, audit=Path(fast) / "audit.log") as host:
            conn = host._mcp["test"]._conn  # the same process and client the host uses
            assert conn is not None
            direct, governed = [], []
            for _ in range(args.calls):
                start = time.perf_counter()
                conn.request("tools/call", {"name": "echo", "arguments": {"message": "hi"}}, timeout_s=5)
                direct.append(time.perf_counter() - start)
                start = time.perf_counter()
                result = host.call(request("test.echo", {"message": "hi"}))
                governed.append(time.perf_counter() - start)
                assert result.ok
    d, h = _median_us(direct), _median_us(governed)
    print(f"(d)  direct tools/call        {d:9.0f} µs")
    print(f"(h') Host.call, audit on shm  {h:9.0f} µs")
    print(f"h'/d = {h / d:.2f}   h'-d = {h - d:.0f} µs per call ({args.calls} calls, interleaved)")


if __name__ == "__main__":
    main()
