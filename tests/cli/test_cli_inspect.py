"""``stockade inspect``: the capability report a reviewer trusts must be complete and honest.

Attacks defended: a capability missing from the report, a refused import reported as
fine, a hostile manifest rewriting the reviewer's terminal or hiding text with markup.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.bundles import lock_entry, make_manifest, make_tool, write_bundle, write_lock
from tests.support.cli import json_out, run_cli
from tests.support.wat import http_component, import_component


def _tracker_bundle(root: Path, module: bytes, **overrides: object) -> Path:
    return write_bundle(root / "bundles" / "tracker", make_manifest(module_bytes=module, **overrides), module)


def test_inspect_bundle_reports_every_capability(tmp_path: Path) -> None:
    bundle = _tracker_bundle(tmp_path, http_component())
    proc = run_cli("inspect", str(bundle), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json_out(proc)
    assert report["kind"] == "bundle"
    [package] = report["packages"]
    assert (package["name"], package["version"]) == ("tracker", "1.2.0")
    assert len(package["manifest_sha256"]) == 64 and len(package["module_sha256"]) == 64
    [allow] = package["http"]["allow"]
    assert allow["origin"] == "https://api.tracker.example:443"
    assert (allow["path_prefix"], allow["methods"]) == ("/v1/issues", ["GET", "POST"])
    [credential] = package["http"]["credentials"]
    assert credential["secret"] == "tracker_token" and credential["injected_as"] == "bearer"
    assert credential["hosts"] == ["api.tracker.example"] and credential["path_prefixes"] == ["/v1"]
    assert package["limits"]["fuel"] == 2_000_000_000 and package["http"]["max_response_bytes"] == 10_485_760
    [tool] = package["tools"]
    assert tool["name"] == "tracker.list-issues" and tool["effect"] == "read" and tool["risk"] == "low"
    assert tool["permissions"] == ["issues.read"] and tool["timeout_s"] == 30
    assert tool["rate_limit"] == {"per_minute": 60, "per_hour": 1000}
    assert tool["input"] == "{repo*: string≤200}" and tool["output"] == "array≤100 of string≤500"
    component = package["component"]
    assert component["accepted"] is True and component["refusal"] is None
    host_imports = [i for i in component["imports"] if i["name"].startswith("stockade:plugin/host@")]
    assert host_imports and host_imports[0]["functions"] == ["http-request"]
    assert "call" in component["exports"]


@pytest.mark.parametrize(
    ("location", "shown"),
    [
        ({"type": "basic", "username": "bot"}, "basic(username=bot)"),
        ({"type": "header", "name": "X-Api-Key", "prefix": "Token "}, "header(X-Api-Key, prefix 'Token ')"),
        ({"type": "query", "name": "api_key"}, "query(api_key)"),
    ],
    ids=["basic", "header", "query"],
)
def test_inspect_names_where_each_credential_is_injected(tmp_path: Path, location: dict, shown: str) -> None:
    manifest = make_manifest()
    manifest["http"]["credentials"][0]["location"] = location
    bundle = write_bundle(tmp_path / "b", manifest)
    proc = run_cli("inspect", str(bundle), "--no-imports", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    package = json_out(proc)["packages"][0]
    assert package["http"]["credentials"][0]["injected_as"] == shown
    assert package["component"] is None  # --no-imports
    table = run_cli("inspect", str(bundle), "--no-imports", cwd=tmp_path)
    assert shown in table.stdout


def test_inspect_shows_which_origins_are_sent_the_calls_trace_context(tmp_path: Path) -> None:
    manifest = make_manifest()
    manifest["http"]["allow"][0]["propagate_trace"] = True
    bundle = write_bundle(tmp_path / "b", manifest)
    proc = run_cli("inspect", str(bundle), "--no-imports", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json_out(proc)["packages"][0]["http"]["allow"][0]["propagate_trace"] is True
    table = run_cli("inspect", str(bundle), "--no-imports", cwd=tmp_path).stdout
    assert "trace context sent" in table and "trace context" in table
    plain = run_cli("inspect", str(write_bundle(tmp_path / "p", make_manifest())), "--no-imports", cwd=tmp_path)
    assert "trace context sent" not in plain.stdout


def test_inspect_table_shows_hosts_secrets_tools_and_imports(tmp_path: Path) -> None:
    bundle = _tracker_bundle(tmp_path, http_component())
    proc = run_cli("inspect", str(bundle), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for needle in ("https://api.tracker.example:443", "/v1/issues", "GET, POST", "tracker_token", "bearer",
                   "tracker.list-issues@1.2.0", "issues.read", "stockade:plugin/host@1.1.0", "http-request",
                   "component    accepted", "limits.fuel", "2,000,000,000"):
        assert needle in proc.stdout, needle


def test_inspect_reports_forbidden_import_as_refused(tmp_path: Path) -> None:
    module = import_component('(import "wasi:http/outgoing-handler@0.2.0" (instance (export "f" (func))))')
    bundle = _tracker_bundle(tmp_path, module)
    proc = run_cli("inspect", str(bundle), "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    report = json_out(proc)
    assert report["ok"] is False and report["error"]["code"] == "COMPONENT_REFUSED"
    component = report["packages"][0]["component"]
    assert component["accepted"] is False
    assert component["refusal"]["code"] == "COMPONENT_REFUSED"
    assert "wasi:http/outgoing-handler@0.2.0" in component["refusal"]["message"]
    assert "wasi:http/outgoing-handler@0.2.0" in [i["name"] for i in component["imports"]]
    table = run_cli("inspect", str(bundle), cwd=tmp_path)
    assert "REFUSED" in table.stdout
    assert table.returncode == 1 and "error: COMPONENT_REFUSED" in table.stderr


def test_inspect_lock_with_component_host_would_refuse_fails(tmp_path: Path) -> None:
    module = import_component('(import "wasi:http/outgoing-handler@0.2.0" (instance (export "f" (func))))')
    bundle = _tracker_bundle(tmp_path, module)
    write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])  # written by hand, not `lock add`
    proc = run_cli("inspect", "stockade.lock", cwd=tmp_path)
    assert proc.returncode == 1 and "REFUSED" in proc.stdout
    assert "error: COMPONENT_REFUSED: package tracker@1.2.0" in proc.stderr
    skipped = run_cli("inspect", "stockade.lock", "--no-imports", cwd=tmp_path)
    assert skipped.returncode == 0, skipped.stderr  # documented: --no-imports skips the check


def test_inspect_signed_lock_verifies_and_reports_every_package(tmp_path: Path) -> None:
    assert run_cli("keygen", "--out", "key.pem", "--keys-file", "keys.json", cwd=tmp_path).returncode == 0
    bundle = _tracker_bundle(tmp_path, http_component())
    assert run_cli("lock", "add", str(bundle), "--key", "key.pem", cwd=tmp_path).returncode == 0
    refused = run_cli("inspect", "stockade.lock", cwd=tmp_path)
    assert refused.returncode == 1 and "error: SIGNATURE_INVALID" in refused.stderr
    proc = run_cli("inspect", "stockade.lock", "--trusted-keys", "keys.json", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json_out(proc)
    assert report["kind"] == "lock" and report["generation"] == 1 and len(report["digest"]) == 64
    [package] = report["packages"]
    assert package["bundle"] == "bundles/tracker"
    assert package["signature"]["signed"] is True and package["signature"]["verified"] is True
    assert package["component"]["accepted"] is True


def test_inspect_tampered_lock_fails_with_digest_mismatch(tmp_path: Path) -> None:
    bundle = _tracker_bundle(tmp_path, http_component())
    write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])
    (bundle / "module.wasm").write_bytes(http_component() + b"\x00")
    proc = run_cli("inspect", "stockade.lock", cwd=tmp_path)
    assert proc.returncode == 1 and "error: DIGEST_MISMATCH" in proc.stderr


def test_hostile_manifest_text_cannot_drive_the_terminal(tmp_path: Path) -> None:
    hostile = "Harmless.\x1b[2J\x1b]0;pwned\x07 [bold red]trust me[/] \u202egnp.exe"
    tool = make_tool(description=hostile)
    tool["input_schema"]["properties"]["repo"]["enum"] = ["a\x1b[31m"]
    manifest = make_manifest(package={"name": "tracker", "version": "1.2.0", "description": hostile,
                                      "homepage": None}, tools=[tool])
    bundle = write_bundle(tmp_path / "b", manifest)
    proc = run_cli("inspect", str(bundle), "--no-imports", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\u001b[2J" in proc.stdout and "\\u202e" in proc.stdout
    assert "[bold red]trust me[/]" in proc.stdout  # markup shown as text, not interpreted
    as_json = run_cli("inspect", str(bundle), "--no-imports", "--json", cwd=tmp_path)
    assert "\x1b" not in as_json.stdout and "\u202e" not in as_json.stdout  # JSON escapes them
    assert json.loads(as_json.stdout)["packages"][0]["description"] == hostile  # the exact text


def test_inspect_shows_each_tools_binding_digest_and_the_signer_is_part_of_it(tmp_path: Path) -> None:
    assert run_cli("keygen", "--out", "key.pem", "--keys-file", "keys.json", cwd=tmp_path).returncode == 0
    bundle = _tracker_bundle(tmp_path, http_component())
    [unsigned] = json_out(run_cli("inspect", str(bundle), "--no-imports", "--json", cwd=tmp_path))["packages"]
    assert run_cli("lock", "add", str(bundle), "--key", "key.pem", cwd=tmp_path).returncode == 0
    args = ("inspect", "stockade.lock", "--trusted-keys", "keys.json", "--no-imports")
    [signed] = json_out(run_cli(*args, "--json", cwd=tmp_path))["packages"]
    digests = [t["binding_digest"] for t in signed["tools"]]
    assert digests and all(len(d) == 64 for d in digests)
    assert digests != [t["binding_digest"] for t in unsigned["tools"]]  # who vouched is bound too
    text = run_cli(*args, cwd=tmp_path).stdout
    for tool, digest in zip(signed["tools"], digests, strict=True):
        assert f"binding  {tool['name']}@{tool['version']} {digest}" in text
