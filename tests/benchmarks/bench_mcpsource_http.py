"""Cost of an MCP source over Streamable HTTP (through the egress rules) against stdio.

Run: ``python tests/benchmarks/bench_mcpsource_http.py [--calls 200]``

Rows (median µs per call of the test server's ``echo`` tool, interleaved, same run):

  (sd) stdio, direct ``tools/call`` over the host's stdio client
  (sh) stdio, ``Host.call`` of the pinned tool (the whole pipeline, audit on /dev/shm)
  (hd) HTTP, direct ``tools/call`` over the host's HTTP session (SDK client on an event-loop
       thread, egress-checked pinned TLS transport, real uvicorn server on loopback)
  (hh) HTTP, ``Host.call`` of the same pinned tool over that session

and, in a second phase (one event loop, raw JSON-RPC ``tools/call`` POSTs on one session):

  (pp) a plain ``httpx2.AsyncClient`` (no egress checks; TLS verification off, Host header set)
  (ep) the same client over the egress transport (allowlist, vetted pinned address, TLS
       verified, injected credential header, bounded body)

Prints hd/sd (HTTP against stdio), hh/hd and hh-hd (the pipeline), ep/pp (the egress
transport against a plain client) and hd/ep (the blocking bridge and the SDK client).
The test server itself (the SDK's Streamable HTTP app under uvicorn) takes most of an
HTTP call: compare rows, not absolute figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from host import FilePolicyEngine, Host, HostConfig
from host.formats.mcppin import McpDeclaration
from host.mcpsource.pinning import pin_source
from host.mcpsource.rpc import McpNetwork
from sdk.review.lockfile import add_mcp
from tests.mcpsource.conftest import REVIEW, TOKEN, declaration, request
from tests.support.secrets import make_store
from tests.support.tls import CertAuthority

SERVER = Path(__file__).resolve().parents[1] / "mcpsource" / "http_server.py"
NAME = "mcp.test.example"


def _host(root: Path, decl: McpDeclaration, network: McpNetwork, shm: Path) -> Host:
    secrets = make_store(root)
    secrets.set("ops", "mcp-test", "api_token", TOKEN)
    pinned = pin_source(decl, state_dir=root / "pin", secrets=secrets, review=REVIEW, network=network)
    add_mcp(root / "stockade.lock", pinned.pin)
    policy = FilePolicyEngine.initialize(root / "policy.json")
    policy.set_role("user", allow=["tool.call:test.echo"])
    policy.grant_role("p", "alice", "user")
    config = HostConfig(state_dir=root / "state", extra_ca_file=network.ca_file,
                        unsafe_allow_loopback=network.allow_loopback)
    return Host.open(root / "stockade.lock", config=config, secrets=secrets, policy=policy,
                     audit=shm / "audit.log", resolver=network.resolver)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


async def _raw_posts(url: str, port: int, network: McpNetwork, calls: int) -> dict[str, list[float]]:
    """Time raw ``tools/call`` POSTs with a plain client and with the egress transport."""
    import httpx2  # noqa: PLC0415 - the mcp extra

    from host.mcpsource.egress import SourceTransport  # noqa: PLC0415

    plain = httpx2.AsyncClient(verify=False)
    egress = httpx2.AsyncClient(transport=SourceTransport(
        url, network=network, headers=[("Authorization", f"Bearer {TOKEN}")], max_response_bytes=65536,
        on_fault=lambda error: None, name="test", timeout_s=5,
    ))
    rows: dict[str, list[float]] = {"pp": [], "ep": []}
    async with plain, egress:
        for key, client, target, extra in (
            ("pp", plain, f"https://127.0.0.1:{port}/mcp",
             {"host": f"{NAME}:{port}", "authorization": f"Bearer {TOKEN}"}),
            ("ep", egress, url, {}),
        ):
            headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
            headers |= extra
            init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b", "version": "1"}}}
            answer = await client.post(target, headers=headers, json=init)
            headers |= {"mcp-session-id": answer.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await client.post(target, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            for i in range(calls):
                body = {"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                        "params": {"name": "echo", "arguments": {"message": "hi"}}}
                start = time.perf_counter()
                (await client.post(target, headers=headers, json=body)).raise_for_status()
                rows[key].append(time.perf_counter() - start)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    shm_root = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory(dir=shm_root) as fast:
        root, shm = Path(scratch), Path(fast)
        ca = CertAuthority.create(root / "ca")
        cert, key = ca.issue([NAME])
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--behaviour", str(root / "b.json"), "--cert", str(cert), "--key",
             str(key), "--token", TOKEN, "--host", NAME], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            cwd=SERVER.parent,
        )
        assert proc.stdout is not None and proc.stdin is not None
        port = int(proc.stdout.readline())
        network = McpNetwork(lambda host: ["127.0.0.1"], ca.ca_file, allow_loopback=True)
        http_decl = McpDeclaration.from_json(json.dumps({
            "format": "stockade.mcp/1", "name": "test", "version": "1.0.0",
            "transport": {"type": "http", "url": f"https://{NAME}:{port}/mcp"},
            "secrets": [{"secret": "api_token", "header": "Authorization", "prefix": "Bearer "}],
            "secrets_scope": {"project": "ops", "subject": "mcp-test"},
            "limits": {"call_timeout_ms": 5000, "max_output_bytes": 65536, "max_concurrent_calls": 4},
        }).encode())
        (root / "s").mkdir()
        (root / "h").mkdir()
        (shm / "s").mkdir()
        (shm / "h").mkdir()
        rows: dict[str, list[float]] = {"sd": [], "sh": [], "hd": [], "hh": []}
        params = {"name": "echo", "arguments": {"message": "hi"}}
        try:
            with _host(root / "s", declaration(root / "s"), network, shm / "s") as stdio_host, \
                    _host(root / "h", http_decl, network, shm / "h") as http_host:
                stdio_conn, http_conn = stdio_host._mcp["test"]._conn, http_host._mcp["test"]._conn
                assert stdio_conn is not None and http_conn is not None
                for _ in range(args.calls):
                    rows["sd"].append(_timed(lambda: stdio_conn.request("tools/call", params, timeout_s=5)))
                    rows["sh"].append(_timed(lambda: stdio_host.call(request("test.echo", {"message": "hi"}))))
                    rows["hd"].append(_timed(lambda: http_conn.request("tools/call", params, timeout_s=5)))
                    rows["hh"].append(_timed(lambda: http_host.call(request("test.echo", {"message": "hi"}))))
            import anyio  # noqa: PLC0415

            url = f"https://{NAME}:{port}/mcp"
            rows |= anyio.run(_raw_posts, url, port, network, args.calls)
        finally:
            proc.stdin.close()
            proc.wait(timeout=30)
            proc.stdout.close()
    med = {k: statistics.median(v) * 1e6 for k, v in rows.items()}
    labels = {"sd": "stdio direct tools/call", "sh": "stdio Host.call", "hd": "HTTP direct tools/call",
              "hh": "HTTP Host.call", "pp": "raw POST, plain client", "ep": "raw POST, egress transport"}
    for key, label in labels.items():
        print(f"({key}) {label:26s} {med[key]:9.0f} µs")
    print(f"hd/sd = {med['hd'] / med['sd']:.2f}   hh/hd = {med['hh'] / med['hd']:.2f}   "
          f"hh-hd = {med['hh'] - med['hd']:.0f} µs per call ({args.calls} calls, interleaved)")
    print(f"ep/pp = {med['ep'] / med['pp']:.2f}   ep-pp = {med['ep'] - med['pp']:.0f} µs   "
          f"hd/ep = {med['hd'] / med['ep']:.2f}")


if __name__ == "__main__":
    main()
