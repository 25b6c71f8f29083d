"""``stockade diff``: a lock upgrade that widens anything must exit 3 and name the widening.

Attacks defended: a plugin update that quietly adds a host, swaps a literal host for a
wildcard, adds a method, a credential or a permission, raises a limit, relabels its
effect, widens its input schema, drops its rate limit or its signature.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from host.policy.toolpolicy import ToolMode, ToolPolicyStore, ToolSelector
from tests.support.bundles import lock_digest, lock_entry, make_manifest, make_tool, write_bundle, write_lock
from tests.support.cli import json_out, run_cli

Manifest = dict[str, Any]


def _lock(root: Path, manifests: list[Manifest], *, generation: int = 1, previous: str | None = None,
          key: Any = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for manifest in manifests:
        bundle = write_bundle(root / "bundles" / manifest["package"]["name"], manifest)
        entries.append(lock_entry(root, bundle, private_key=key))
    return write_lock(root / "stockade.lock", entries, generation=generation, previous=previous)


def _pair(tmp_path: Path, change: Callable[[Manifest], None]) -> tuple[Path, Path]:
    old_manifest = make_manifest()
    new_manifest = copy.deepcopy(old_manifest)
    change(new_manifest)
    old = _lock(tmp_path / "old", [old_manifest])
    new = _lock(tmp_path / "new", [new_manifest], generation=2, previous=lock_digest(old))
    return old, new


def _set(path: str, value: Any) -> Callable[[Manifest], None]:
    def change(manifest: Manifest) -> None:
        *parents, last = path.split(".")
        node: Any = manifest
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[int(last) if last.isdigit() else last] = value

    return change


def _add_allow(entry: dict[str, Any]) -> Callable[[Manifest], None]:
    def change(manifest: Manifest) -> None:
        manifest["http"]["allow"].append({"port": None, **entry})

    return change


def _add_credential(manifest: Manifest) -> None:
    manifest["http"]["credentials"].append({"secret": "admin_token", "location": {"type": "header", "name": "X-Admin"},
                                            "hosts": ["api.tracker.example"], "path_prefixes": ["/v1/issues"],
                                            "optional": False})


def _credential_to_new_host(manifest: Manifest) -> None:
    manifest["http"]["allow"].append({"scheme": "https", "host": "mirror.example", "port": None,
                                      "path_prefix": "/v1", "methods": ["GET"]})
    manifest["http"]["credentials"][0]["hosts"].append("mirror.example")


def _add_tool(manifest: Manifest) -> None:
    manifest["tools"].append(make_tool(name="tracker.delete-issue", effect="write", risk="high",
                                       permissions=["issues.delete"]))


def _widen_input(manifest: Manifest) -> None:
    manifest["tools"][0]["input_schema"]["properties"]["repo"]["maxLength"] = 100_000


ESCALATIONS = [
    ("new-host", _add_allow({"scheme": "https", "host": "exfil.example", "path_prefix": "/", "methods": ["POST"]}),
     "http.host"),
    ("wildcard-replaces-literal", _set("http.allow.0.host", "*.tracker.example"), "http.wildcard"),
    ("new-method", _set("http.allow.0.methods", ["GET", "POST", "DELETE"]), "http.methods"),
    ("shorter-path-prefix", _set("http.allow.0.path_prefix", "/v1"), "http.path"),
    ("trace-context-sent", _set("http.allow.0.propagate_trace", True), "http.trace"),
    ("plain-http", _add_allow({"scheme": "http", "host": "api.tracker.example", "path_prefix": "/v1/issues",
                               "methods": ["GET"]}), "http.scheme"),
    ("other-port", _add_allow({"scheme": "https", "host": "api.tracker.example", "port": 8443,
                               "path_prefix": "/v1/issues", "methods": ["GET"]}), "http.port"),
    ("new-credential", _add_credential, "credential.added"),
    ("credential-location", _set("http.credentials.0.location", {"type": "query", "name": "token"}),
     "credential.location"),
    ("credential-new-host", _credential_to_new_host, "credential.hosts"),
    ("credential-wider-path", _set("http.credentials.0.path_prefixes", ["/"]), "credential.paths"),
    ("permission-added", _set("tools.0.permissions", ["issues.read", "issues.admin"]), "tool.permission.added"),
    ("raised-fuel", _set("limits.fuel", 4_000_000_000), "limit.raised"),
    ("raised-response-bytes", _set("http.max_response_bytes", 20_000_000), "limit.raised"),
    ("effect-read-to-write", _set("tools.0.effect", "write"), "tool.effect"),
    ("risk-raised", _set("tools.0.risk", "high"), "tool.risk"),
    ("tool-added", _add_tool, "tool.added"),
    ("input-schema-widened", _widen_input, "tool.input_schema"),
    ("rate-limit-removed", _set("tools.0.rate_limit", None), "tool.rate_limit"),
    ("timeout-raised", _set("tools.0.timeout_s", 600), "tool.timeout"),
]


@pytest.mark.parametrize(("change", "kind"), [(c, k) for _, c, k in ESCALATIONS], ids=[i for i, _, _ in ESCALATIONS])
def test_widening_lock_change_exits_3_naming_the_escalation(tmp_path: Path, change: Any, kind: str) -> None:
    old, new = _pair(tmp_path, change)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    report = json_out(proc)
    assert report["escalated"] is True and report["chained"] is True
    assert kind in report["escalations"], report["changes"]
    assert all(c["escalation"] for c in report["changes"] if c["kind"] in report["escalations"])


def test_identical_locks_exit_0_with_no_changes(tmp_path: Path) -> None:
    old = _lock(tmp_path / "old", [make_manifest()])
    proc = run_cli("diff", str(old), str(old), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json_out(proc)["changes"] == []
    table = run_cli("diff", str(old), str(old), cwd=tmp_path)
    assert table.returncode == 0 and "no changes" in table.stdout


def _reduce(manifest: Manifest) -> None:
    manifest["limits"]["fuel"] = 1_000_000_000
    manifest["http"]["allow"][0]["methods"] = ["GET"]
    manifest["tools"][0]["risk"] = "low"
    manifest["tools"][0]["timeout_s"] = 10
    manifest["tools"][0]["input_schema"]["properties"]["repo"]["maxLength"] = 100


def test_reductions_are_shown_but_exit_0(tmp_path: Path) -> None:
    old, new = _pair(tmp_path, _reduce)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    report = json_out(proc)
    kinds = {c["kind"] for c in report["changes"]}
    assert {"limit.lowered", "http.narrowed", "tool.timeout", "tool.input_schema"} <= kinds
    assert report["escalations"] == [] and not any(c["escalation"] for c in report["changes"])


def test_effect_relabelled_write_to_read_escalates(tmp_path: Path) -> None:
    """A write tool relabelled read would skip the default approval prompt."""
    old_manifest = make_manifest(tools=[make_tool(effect="write")])
    new_manifest = make_manifest(tools=[make_tool(effect="read")])
    old = _lock(tmp_path / "old", [old_manifest])
    new = _lock(tmp_path / "new", [new_manifest], generation=2, previous=lock_digest(old))
    report = json_out(run_cli("diff", str(old), str(new), "--json", cwd=tmp_path))
    assert "tool.effect" in report["escalations"]


def test_new_package_escalates_with_its_capabilities(tmp_path: Path) -> None:
    old = _lock(tmp_path / "old", [make_manifest()])
    extra = make_manifest(package={"name": "webfetch", "version": "1.0.0", "description": "", "homepage": None},
                          tools=[make_tool(name="webfetch.get", version="1.0.0")])
    new = _lock(tmp_path / "new", [make_manifest(), extra], generation=2, previous=lock_digest(old))
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 3
    changes = [(c["kind"], c["package"]) for c in json_out(proc)["changes"] if c["escalation"]]
    assert ("package.added", "webfetch") in changes and ("tool.added", "webfetch") in changes
    assert ("credential.added", "webfetch") in changes and ("http.host", "webfetch") in changes


def test_dropped_signature_escalates(tmp_path: Path) -> None:
    assert run_cli("keygen", "--out", "key.pem", "--keys-file", "keys.json", cwd=tmp_path).returncode == 0
    key = (tmp_path / "key.pem").read_bytes()
    old = _lock(tmp_path / "old", [make_manifest()], key=key)
    new = _lock(tmp_path / "new", [make_manifest()], generation=2, previous=lock_digest(old))
    unverified = run_cli("diff", str(old), str(new), cwd=tmp_path)
    assert unverified.returncode == 1 and "error: SIGNATURE_INVALID" in unverified.stderr
    # with trusted keys a host would refuse the unsigned package, and so does the diff ...
    refused = run_cli("diff", str(old), str(new), "--trusted-keys", "keys.json", "--json", cwd=tmp_path)
    assert refused.returncode == 1
    assert json_out(refused)["error"]["details"]["reason"] == "unsigned"
    # ... unless told to accept it, and then the dropped signature is the escalation
    proc = run_cli("diff", str(old), str(new), "--trusted-keys", "keys.json", "--unsafe-allow-unsigned", "--json",
                   cwd=tmp_path)
    assert proc.returncode == 3
    assert json_out(proc)["escalations"] == ["signature.dropped"]


def test_diff_table_flags_escalations(tmp_path: Path) -> None:
    old, new = _pair(tmp_path, _set("http.allow.0.host", "*.tracker.example"))
    proc = run_cli("diff", str(old), str(new), cwd=tmp_path)
    assert proc.returncode == 3
    assert "ESCALATES" in proc.stdout and "http.wildcard" in proc.stdout and "*.tracker.example" in proc.stdout
    assert "1 escalation(s)" in proc.stdout


def test_diff_refuses_a_tampered_lock(tmp_path: Path) -> None:
    old, new = _pair(tmp_path, _set("limits.fuel", 1_000_000_000))
    bundle = tmp_path / "new" / "bundles" / "tracker" / "manifest.json"
    manifest = json.loads(bundle.read_text())
    manifest["http"]["allow"][0]["host"] = "evil.example"
    bundle.write_text(json.dumps(manifest))
    proc = run_cli("diff", str(old), str(new), cwd=tmp_path)
    assert proc.returncode == 1 and "error: DIGEST_MISMATCH" in proc.stderr


def test_unchained_lock_is_noted(tmp_path: Path) -> None:
    old = _lock(tmp_path / "old", [make_manifest()])
    new = _lock(tmp_path / "new", [make_manifest()], generation=5, previous="0" * 64)
    proc = run_cli("diff", str(old), str(new), "--json", cwd=tmp_path)
    assert proc.returncode == 4  # its own exit code: a host would refuse this lock
    assert json_out(proc)["chained"] is False and json_out(proc)["relation"] == "skipped"


def _allow_as_reviewed(tmp_path: Path, lock: Path) -> Path:
    """alice's and bob's allows of tracker.list-issues, bound to its binding in ``lock``."""
    [package] = json_out(run_cli("inspect", str(lock), "--no-imports", "--json", cwd=tmp_path))["packages"]
    [tool] = package["tools"]
    state = tmp_path / "state"
    store = ToolPolicyStore(state / "tool-policy", admin_dir=None)
    for subject in ("alice", "bob"):
        store.set(subject, "p", ToolSelector(tool["name"]), ToolMode.ALLOW, bound={tool["name"]: tool["binding_digest"]})
    store.set("carol", "p", ToolSelector(tool["name"]), ToolMode.DISABLED)  # never listed: not an allow
    return state


def test_diff_lists_the_user_allows_a_widening_would_turn_back_into_asks(tmp_path: Path) -> None:
    old, new = _pair(tmp_path, _add_allow({"scheme": "https", "host": "exfil.example", "path_prefix": "/",
                                          "methods": ["POST"]}))
    state = _allow_as_reviewed(tmp_path, old)
    before = sorted((p.name, p.read_bytes()) for p in (state / "tool-policy").iterdir())
    proc = run_cli("diff", str(old), str(new), "--state-dir", str(state), "--json", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    rebinds = json_out(proc)["allows_that_ask_again"]
    assert sorted((r["account"], r["workspace"], r["tool"]) for r in rebinds) == [
        ("alice", "p", "tracker.list-issues"), ("bob", "p", "tracker.list-issues")
    ]
    assert all(r["recorded"] not in r["new"] and len(r["new"]) == 1 for r in rebinds)
    table = run_cli("diff", str(old), str(new), "--state-dir", str(state), cwd=tmp_path)
    assert "user allows that would ask again (2)" in table.stdout
    assert "allow tracker.list-issues recorded for binding" in table.stdout and "-> ask (rebind)" in table.stdout
    assert sorted((p.name, p.read_bytes()) for p in (state / "tool-policy").iterdir()) == before  # read only


def test_diff_of_a_code_and_version_only_upgrade_lists_no_allow(tmp_path: Path) -> None:
    def upgrade(manifest: Manifest) -> None:
        manifest["package"]["version"] = "1.3.0"
        manifest["tools"][0]["version"] = "1.3.0"
        manifest["tools"][0]["description"] = "Faster."

    old, new = _pair(tmp_path, upgrade)
    state = _allow_as_reviewed(tmp_path, old)
    proc = run_cli("diff", str(old), str(new), "--state-dir", str(state), "--json", cwd=tmp_path)
    assert json_out(proc)["allows_that_ask_again"] == []
