"""The MCP servers people actually run, from npm at a pinned version (package.json's
devDependencies, installed by ``npm ci``): ``@modelcontextprotocol/server-everything`` and
``@modelcontextprotocol/server-filesystem`` 2026.8.31, as real stdio sources.

Their schemas are what zod-to-json-schema emits (``$schema`` draft-07, open objects,
``default``, no ``maxLength``), so they exercise the external schema profile
(``host.formats.schemaprofile``) end to end: pin, call through ``Host`` with valid and invalid
input, and through ``stockade serve`` with the official SDK client.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest

from host import CallRequest, FilePolicyEngine, Host, HostConfig, Principal
from host.errors import InputInvalid
from host.formats.manifest import Effect, Risk
from host.formats.mcppin import McpDeclaration, tool_unbounded
from host.formats.schemaprofile import PROFILE_EXTERNAL
from host.mcp.server import ServeOptions, StockadeMCP
from host.mcpsource.pinning import PinResult, pin_source
from host.secrets.store import SecretsStore
from sdk.review.lockfile import add_mcp
from tests.support.secrets import make_store

ROOT = Path(__file__).resolve().parents[2]
MODULES = ROOT / "node_modules" / "@modelcontextprotocol"
NODE = shutil.which("node")
VERSION = "2026.8.31"
ALICE = Principal(project="p", subject="alice")

pytestmark = pytest.mark.skipif(
    NODE is None or not (MODULES / "server-everything").is_dir(),
    reason="needs node and `npm ci` (package.json devDependencies)",
)


def _installed(name: str) -> str:
    return str(json.loads((MODULES / name / "package.json").read_text())["version"])


def declaration(name: str, args: list[str]) -> McpDeclaration:
    doc = {
        "format": "stockade.mcp/1", "name": name, "version": "1.0.0",
        "transport": {"type": "stdio", "command": str(Path(NODE or "/usr/bin/node").resolve()), "args": args},
        "limits": {"call_timeout_ms": 20_000, "max_output_bytes": 1024 * 1024, "max_concurrent_calls": 4,
                   "startup_timeout_ms": 60_000},
    }
    return McpDeclaration.from_json(json.dumps(doc).encode())


@dataclass
class Real:
    root: Path
    files: Path
    lock: Path
    pins: dict[str, PinResult]
    hosts: list[Host]
    secrets: SecretsStore

    def open(self) -> Host:
        policy = FilePolicyEngine.initialize(self.root / f"policy-{len(self.hosts)}.json")
        tools = [t.tool for result in self.pins.values() for t in result.pin.tools]
        policy.set_role("user", allow=[f"tool.call:{t}" for t in tools])
        policy.grant_role("p", "alice", "user")
        host = Host.open(self.lock, config=HostConfig(state_dir=self.root / "state"), policy=policy,
                         secrets=self.secrets, audit=self.root / "audit.log")
        self.hosts.append(host)
        return host


READ = (Effect.READ, Risk.LOW)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Real]:
    assert _installed("server-everything") == VERSION and _installed("server-filesystem") == VERSION
    root = tmp_path_factory.mktemp("real")
    files = root / "files"
    files.mkdir()
    (files / "hello.txt").write_text("line one\nline two\n")
    everything = declaration("everything", [str(MODULES / "server-everything" / "dist" / "index.js"), "stdio"])
    filesystem = declaration("filesystem", [str(MODULES / "server-filesystem" / "dist" / "index.js"), str(files)])
    pins = {
        "everything": pin_source(everything, state_dir=root / "pin", secrets=None,
                                 review={"echo": READ, "get-sum": READ, "get-tiny-image": READ}),
        "filesystem": pin_source(filesystem, state_dir=root / "pin", secrets=None,
                                 review={"read_text_file": READ, "list_directory": READ}),
    }
    lock = root / "stockade.lock"
    for result in pins.values():
        add_mcp(lock, result.pin)
    world = Real(root, files, lock, pins, [], make_store(root))
    yield world
    for host in world.hosts:
        host.close()


def request(tool: str, input: Any) -> CallRequest:
    return CallRequest(principal=ALICE, session="s1", tool=tool, version="1.0.0", input=input)


def test_at_least_90_percent_of_the_real_tools_pin_under_the_external_profile(real: Real) -> None:
    listed = sum(r.listed for r in real.pins.values())
    pinned = [t for r in real.pins.values() for t in r.pin.tools]
    refused = {r.name: r.reasons for result in real.pins.values() for r in result.refused}
    assert listed == 27
    assert len(pinned) / listed >= 0.9, refused
    assert refused == {}  # all 27 pin today; a new refusal must be looked at, not absorbed
    assert {t.schema_profile for t in pinned} == {PROFILE_EXTERNAL}
    names = {t.name: t.tool for t in pinned}
    assert names["get-tiny-image"] == "everything.get-tiny-image"
    assert names["read_text_file"] == "filesystem.read-text-file"  # the pin keeps the server's name
    assert real.pins["everything"].summary() == "13 of 13 tools pinned"


def test_real_tools_called_through_host_with_valid_input(real: Real) -> None:
    host = real.open()
    echo = host.call(request("everything.echo", {"message": "hello"}))
    assert echo.ok, echo.error
    assert "hello" in echo.output["text"]
    total = host.call(request("everything.get-sum", {"a": 2, "b": 3.5}))
    assert total.ok and "5.5" in total.output["text"]
    read = host.call(request("filesystem.read-text-file", {"path": str(real.files / "hello.txt"), "head": 1}))
    assert read.ok, read.error
    assert read.output == {"content": "line one"}
    image = host.call(request("everything.get-tiny-image", {}))
    assert image.ok, image.error
    blocks = image.output["content"]
    assert any(b["type"] == "image" and b["mimeType"] == "image/png" and b["data"] for b in blocks)


@pytest.mark.parametrize(
    ("tool", "input", "pointer", "rule"),
    [
        ("everything.echo", {}, "", "required"),
        ("everything.echo", {"message": 7}, "/message", "type"),
        ("everything.get-sum", {"a": "2", "b": 3}, "/a", "type"),
        ("filesystem.read-text-file", {"path": "/x", "head": "ten"}, "/head", "type"),
        ("filesystem.list-directory", {"path": ["/"]}, "/path", "type"),
    ],
    ids=["missing-required", "wrong-type", "string-for-number", "optional-wrong-type", "array-for-string"],
)
def test_invalid_input_is_refused_before_the_server_sees_it(
    real: Real, tool: str, input: dict[str, Any], pointer: str, rule: str
) -> None:
    host = real.open() if not real.hosts else real.hosts[0]
    result = host.call(request(tool, input))
    assert not result.ok and result.error is not None
    assert result.error.code == "INPUT_INVALID"
    assert result.error.details["pointer"] == pointer and result.error.details["rule"] == rule
    # refused while preparing (docs/design.md §6 step 5), before anything is sent to the server
    with pytest.raises(InputInvalid) as refused:
        host.prepare(request(tool, input))
    assert refused.value.details["pointer"] == pointer


def test_default_is_never_applied_to_input(real: Real) -> None:
    host = real.hosts[0] if real.hosts else real.open()
    plan = host.prepare(request("filesystem.list-directory-with-sizes", {"path": str(real.files)}))
    assert json.loads(plan.canonical_input) == {"path": str(real.files)}  # no "sortBy": "name" filled in


def test_source_tools_are_honest_about_the_native_process(real: Real) -> None:
    host = real.hosts[0] if real.hosts else real.open()
    plan = host.prepare(request("everything.toggle-simulated-logging", {}))
    preview = "\n".join(plan.preview.lines())
    assert "may reach anything the host user can" in preview
    entries = {t["name"]: t for t in host.tools("mcp")}
    unreviewed = entries["everything.toggle-simulated-logging"]["annotations"]
    assert unreviewed["destructiveHint"] is True and unreviewed["openWorldHint"] is True
    assert unreviewed["readOnlyHint"] is False
    reviewed = entries["everything.echo"]["annotations"]
    assert reviewed["readOnlyHint"] is True and reviewed["openWorldHint"] is True
    # the server's own annotations (readOnlyHint: true on get-env) are never trusted
    assert entries["everything.get-env"]["annotations"]["readOnlyHint"] is False


def test_real_tools_through_stockade_serve_with_the_sdk_client(real: Real) -> None:
    policy = FilePolicyEngine.initialize(real.root / "serve-policy.json")
    policy.set_role("user", allow=["tool.call:everything.echo", "tool.call:everything.get-sum",
                                   "tool.call:filesystem.read-text-file"])
    policy.grant_role("p", "alice", "user")

    def open_host() -> Host:
        host = Host.open(real.lock, config=HostConfig(state_dir=real.root / "serve-state"), policy=policy,
                         secrets=real.secrets, audit=real.root / "serve-audit.log")
        real.hosts.append(host)
        return host

    app = StockadeMCP(open_host, options=ServeOptions(state_dir=real.root / "serve-state", principal=ALICE))
    seen: dict[str, Any] = {}

    async def body() -> None:
        async with mcp.Client(app.server) as client:
            listed = await client.list_tools()
            seen["names"] = {t.name for t in listed.tools}
            seen["echo"] = await client.call_tool("everything.echo", {"message": "via serve"})
            seen["sum"] = await client.call_tool("everything.get-sum", {"a": 1, "b": 2})
            seen["read"] = await client.call_tool(
                "filesystem.read-text-file", {"path": str(real.files / "hello.txt")})
            seen["bad"] = await client.call_tool("everything.get-sum", {"a": "one", "b": 2})

    anyio.run(body)
    app.close()
    assert {"everything.echo", "everything.get-sum", "filesystem.read-text-file"} <= seen["names"]
    assert seen["echo"].is_error is False and "via serve" in seen["echo"].structured_content["text"]
    assert seen["sum"].is_error is False and "3" in seen["sum"].structured_content["text"]
    assert seen["read"].is_error is False
    assert seen["read"].structured_content == {"content": "line one\nline two\n"}
    assert seen["bad"].is_error is True and "INPUT_INVALID" in json.dumps(seen["bad"].model_dump(mode="json"))


# A minimal stdio MCP server (node, no dependencies) listing only tools the profile refuses.
REFUSING_SERVER = r"""
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  let result = {};
  if (m.method === 'initialize') {
    result = {protocolVersion: m.params.protocolVersion, capabilities: {tools: {}},
              serverInfo: {name: 'refusing', version: '1.0.0'}};
  } else if (m.method === 'tools/list') {
    result = {tools: [
      {name: 'lookBehind', description: 'x',
       inputSchema: {type: 'object', properties: {q: {type: 'string', pattern: '(?<=a)b'}}}},
      {name: 'remote', description: 'y',
       inputSchema: {type: 'object', properties: {q: {$ref: 'https://schemas.example/q.json'}}}},
      {name: 'Remote', description: 'z', inputSchema: {type: 'object'}},
    ]};
  }
  process.stdout.write(JSON.stringify({jsonrpc: '2.0', id: m.id, result}) + '\n');
});
"""


def _cli_workspace(tmp_path: Path) -> Path:
    from tests.support.secrets import write_key_file  # noqa: PLC0415

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    write_key_file(state / "master.key")
    return state


def test_add_mcp_of_a_real_server_prints_the_summary_the_names_and_what_is_unbounded(real: Real,
                                                                                    tmp_path: Path) -> None:
    from tests.support.cli import cli_env, run_cli  # noqa: PLC0415

    state = _cli_workspace(tmp_path)
    decl = tmp_path / "filesystem.mcp.json"
    decl.write_text(declaration("filesystem", [str(MODULES / "server-filesystem" / "dist" / "index.js"),
                                               str(real.files)]).model_dump_json())
    proc = run_cli("lock", "add-mcp", str(decl), "--review", "read_text_file=read:low", "--state-dir", str(state),
                   cwd=tmp_path, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert "14 of 14 tools pinned" in proc.stdout
    assert "filesystem.read-text-file (server: read_text_file)" in proc.stdout
    assert "/properties/path: string without maxLength" in proc.stdout
    assert "stockade: starting MCP server filesystem" in proc.stderr  # progress, before the connect finishes
    report = run_cli("inspect", "stockade.lock", "--json", "--no-imports", cwd=tmp_path, env=cli_env())
    (source,) = json.loads(report.stdout)["mcp"]
    assert "may reach anything the host user can" in source["isolation"] and source["refused"] == []
    tools = {t["name"]: t for t in source["tools"]}
    assert tools["filesystem.write-file"]["unbounded"] and tools["filesystem.write-file"]["remote"] == "write_file"


def test_add_mcp_that_pins_no_tool_fails_with_every_reason_and_writes_nothing(tmp_path: Path) -> None:
    from tests.support.cli import cli_env, run_cli  # noqa: PLC0415

    state = _cli_workspace(tmp_path)
    decl = tmp_path / "refusing.mcp.json"
    server = tmp_path / "refusing.js"
    server.write_text(REFUSING_SERVER)
    decl.write_text(declaration("refusing", [str(server)]).model_dump_json())
    proc = run_cli("lock", "add-mcp", str(decl), "--state-dir", str(state), "--json", cwd=tmp_path, env=cli_env())
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not (tmp_path / "stockade.lock").exists()
    error = json.loads(proc.stdout)["error"] if proc.stdout.strip() else json.loads(proc.stderr)["error"]
    assert error["code"] == "MCP_NO_TOOLS" and error["message"].startswith("0 of 3 tools pinned")
    assert "RE2" in error["message"] and "not local" in error["message"]  # every tool's reason
    assert "both map to refusing.remote" in error["message"]


def test_call_to_a_tool_refused_at_pin_names_the_reason(tmp_path: Path) -> None:
    from host.mcpsource.pinning import pin_tools  # noqa: PLC0415

    decl = declaration("everything", [str(MODULES / "server-everything" / "dist" / "index.js"), "stdio"])
    live = [
        {"name": "echo", "description": "e", "inputSchema": {"type": "object", "properties": {"m": {"type": "string"}}}},
        {"name": "grep", "description": "g",
         "inputSchema": {"type": "object", "properties": {"q": {"type": "string", "pattern": "(a)\\1"}}}},
    ]
    result = pin_tools(decl, live, review={})
    assert [t.name for t in result.pin.tools] == ["echo"] and result.summary() == "1 of 2 tools pinned"
    lock = tmp_path / "stockade.lock"
    add_mcp(lock, result.pin)
    policy = FilePolicyEngine.initialize(tmp_path / "policy.json")
    policy.set_role("user", allow=["tool.call:everything.echo", "tool.call:everything.grep"])
    policy.grant_role("p", "alice", "user")
    with Host.open(lock, config=HostConfig(state_dir=tmp_path / "state"), policy=policy,
                   secrets=make_store(tmp_path), audit=tmp_path / "audit.log") as host:
        answer = host.call(request("everything.grep", {"q": "x"}))
    assert answer.error is not None and answer.error.code == "TOOL_NOT_FOUND"
    assert "refused when source everything was pinned" in answer.error.message and "RE2" in answer.error.message
    assert "stockade inspect" in answer.error.hint


def test_policy_grant_tool_and_explain_work_for_source_tools(real: Real, tmp_path: Path) -> None:
    from tests.support.cli import cli_env, run_cli  # noqa: PLC0415

    state = _cli_workspace(tmp_path)
    base = ("--lock", str(real.lock), "--state-dir", str(state))
    assert run_cli("policy", "init", "--state-dir", str(state), cwd=tmp_path, env=cli_env()).returncode == 0
    granted = run_cli("policy", "grant-tool", "p", "alice", "everything.echo@1.0.0", "--role", "agent", *base,
                      cwd=tmp_path, env=cli_env())
    assert granted.returncode == 0, granted.stdout + granted.stderr
    explained = run_cli("policy", "explain", "p", "alice", "everything.echo@1.0.0", "--json", *base,
                        cwd=tmp_path, env=cli_env())
    assert explained.returncode in (0, 3), explained.stdout + explained.stderr
    assert "tool.call:everything.echo" in explained.stdout
    unknown = run_cli("policy", "explain", "p", "alice", "everything.nope@1.0.0", *base, cwd=tmp_path,
                      env=cli_env())
    assert unknown.returncode == 1 and "everything.echo@1.0.0" in unknown.stderr  # the hint lists source tools


def test_tightened_schema_is_enforced_and_dropping_it_is_an_escalation(tmp_path: Path) -> None:
    from host.mcpsource.pinning import pin_tools  # noqa: PLC0415
    from sdk.review.mcp import _tool_changes  # noqa: PLC0415

    decl = declaration("everything", [str(MODULES / "server-everything" / "dist" / "index.js"), "stdio"])
    live = [{"name": "echo", "description": "e", "inputSchema": {
        "$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
        "properties": {"message": {"type": "string"}}, "required": ["message"]}}]
    tight = {"type": "object", "properties": {"message": {"type": "string", "maxLength": 5}},
             "additionalProperties": False}
    tightened = pin_tools(decl, live, review={}, review_schemas={"echo": tight})
    loose = pin_tools(decl, live, review={})
    (tool,) = tightened.pin.tools
    assert tool.review_schema == tight
    lock = tmp_path / "stockade.lock"
    add_mcp(lock, tightened.pin)
    policy = FilePolicyEngine.initialize(tmp_path / "policy.json")
    policy.set_role("user", allow=["tool.call:everything.echo"])
    policy.grant_role("p", "alice", "user")
    with Host.open(lock, config=HostConfig(state_dir=tmp_path / "state"), policy=policy,
                   secrets=make_store(tmp_path), audit=tmp_path / "audit.log") as host:
        host.prepare(request("everything.echo", {"message": "short"}))
        with pytest.raises(InputInvalid) as too_long:  # the server would accept it; the reviewer does not
            host.prepare(request("everything.echo", {"message": "much too long"}))
        assert too_long.value.details == {"pointer": "/message", "rule": "maxLength"}
        with pytest.raises(InputInvalid) as extra:
            host.prepare(request("everything.echo", {"message": "hi", "extra": 1}))
        assert extra.value.details["rule"] == "additionalProperties"
        with pytest.raises(InputInvalid) as missing:  # the server's own schema still applies
            host.prepare(request("everything.echo", {}))
        assert missing.value.details["rule"] == "required"
    kinds = {c.kind: c.escalation for c in _tool_changes("everything", tightened.pin, loose.pin)}
    assert kinds == {"mcp.tool.review_schema": True, "mcp.tool.unbounded": True}
    assert tool_unbounded(tool) == []  # every open parameter of the server's schema is bounded by the reviewer
    assert "/properties/message: string without maxLength" in tool_unbounded(loose.pin.tools[0])
