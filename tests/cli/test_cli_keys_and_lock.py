"""keygen, sign and lock add/remove/verify through the real entry point.

Attacks defended: a lock edited without advancing its generation, a bundle swapped after
locking, a signature dropped or made by an untrusted key, a key file overwritten.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from host.config import HostConfig
from host.trust.lock import LockState, PackageLock, TrustedKeys, load_lock
from tests.support.bundles import (
    MODULE_BYTES,
    lock_digest,
    lock_entry,
    make_manifest,
    make_tool,
    write_bundle,
    write_lock,
)
from tests.support.cli import json_out, run_cli
from tests.support.wat import ECHO_WAT, core_module, echo_component, import_component, wrong_call_component


def _bundle(root: Path, name: str = "tracker", module: bytes | None = None, **overrides: object) -> Path:
    """A bundle with a real component (``lock add`` runs the host's component checks)."""
    module = echo_component() if module is None else module
    manifest = make_manifest(module_bytes=module, **overrides)
    return write_bundle(root / "bundles" / name, manifest, module)


def _keygen(root: Path, name: str = "key.pem", keys: str = "trusted-keys.json") -> dict[str, str]:
    proc = run_cli("keygen", "--out", name, "--keys-file", keys, "--json", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return json_out(proc)  # type: ignore[no-any-return]


def test_keygen_writes_private_key_0600_and_trusts_public_key(tmp_path: Path) -> None:
    made = _keygen(tmp_path)
    key = tmp_path / "key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    keys = TrustedKeys.load(tmp_path / "trusted-keys.json")
    assert made["key_id"] in keys and len(keys) == 1
    # a second key is appended, not replacing the first
    second = _keygen(tmp_path, "other.pem")
    keys = TrustedKeys.load(tmp_path / "trusted-keys.json")
    assert made["key_id"] in keys and second["key_id"] in keys and len(keys) == 2


def test_keygen_refuses_to_overwrite_a_key(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("precious")
    proc = run_cli("keygen", "--out", "key.pem", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: KEY_EXISTS" in proc.stderr
    assert (tmp_path / "key.pem").read_text() == "precious"


def test_sign_prints_a_signature_the_trusted_keys_verify(tmp_path: Path) -> None:
    made = _keygen(tmp_path)
    bundle = _bundle(tmp_path)
    proc = run_cli("sign", str(bundle), "--key", "key.pem", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    signed = json_out(proc)
    assert signed["key_id"] == made["key_id"]
    TrustedKeys.load(tmp_path / "trusted-keys.json").verify(
        signed["package"], signed["version"], signed["manifest_sha256"], signed["module_sha256"],
        signature=signed["signature"], key_id=signed["key_id"],
    )


def test_sign_says_lock_add_signs_the_entry_itself(tmp_path: Path) -> None:
    # It printed a signature nothing consumes, and said nothing about it.
    _keygen(tmp_path)
    bundle = _bundle(tmp_path)
    proc = run_cli("sign", str(bundle), "--key", "key.pem", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "signature" in proc.stdout
    assert f"stockade lock add {bundle} --key key.pem` signs the lock entry itself" in proc.stderr


def test_sign_with_a_file_that_is_not_a_key_refused(tmp_path: Path) -> None:
    (tmp_path / "key.pem").write_text("-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n")
    (tmp_path / "key.pem").chmod(0o600)
    proc = run_cli("sign", str(_bundle(tmp_path)), "--key", "key.pem", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: KEY_INVALID" in proc.stderr


def test_signed_lock_round_trip_with_required_signatures(tmp_path: Path) -> None:
    _keygen(tmp_path)
    bundle = _bundle(tmp_path)
    added = run_cli("lock", "add", str(bundle), "--key", "key.pem", "--json", cwd=tmp_path)
    assert added.returncode == 0, added.stderr
    entry = json_out(added)["entry"]
    assert entry["bundle"] == "bundles/tracker" and entry["signature"] and entry["key_id"]
    ok = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--require-signatures", "--json",
                 cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json_out(ok)["packages"][0]["signed"] is True


def test_signed_lock_without_trusted_keys_refused(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), "--key", "key.pem", cwd=tmp_path).returncode == 0
    proc = run_cli("lock", "verify", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: SIGNATURE_INVALID" in proc.stderr


def test_signature_by_untrusted_key_refused(tmp_path: Path) -> None:
    _keygen(tmp_path)
    _keygen(tmp_path, "rogue.pem", keys="rogue-keys.json")
    assert run_cli("lock", "add", str(_bundle(tmp_path)), "--key", "rogue.pem", cwd=tmp_path).returncode == 0
    proc = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: SIGNATURE_INVALID" in proc.stderr and "not a trusted key" in proc.stderr


def test_unsigned_package_refused_when_signatures_required(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0
    proc = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--require-signatures", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: SIGNATURE_INVALID" in proc.stderr and "not signed" in proc.stderr


def test_unsigned_package_refused_when_trusted_keys_are_given(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0
    proc = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--json", cwd=tmp_path)
    assert proc.returncode == 1
    error = json_out(proc)["error"]
    assert error["code"] == "SIGNATURE_INVALID" and error["details"]["reason"] == "unsigned"


def test_unsafe_allow_unsigned_accepts_and_conflicts_with_require_signatures(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0
    ok = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--unsafe-allow-unsigned", "--json",
                 cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert json_out(ok)["packages"][0]["signed"] is False
    assert "unsafe_allow_unsigned is on" in ok.stderr
    both = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--unsafe-allow-unsigned",
                   "--require-signatures", cwd=tmp_path)
    assert both.returncode == 2
    assert "contradicts --require-signatures" in both.stderr


def test_lock_add_increments_generation_and_chains_previous(tmp_path: Path) -> None:
    lock = tmp_path / "stockade.lock"
    first = json_out(run_cli("lock", "add", str(_bundle(tmp_path)), "--json", cwd=tmp_path))
    assert first["generation"] == 1 and first["previous"] is None
    assert first["digest"] == lock_digest(lock)
    other = _bundle(tmp_path, "jsonkit", package={"name": "jsonkit", "version": "1.0.0", "description": "",
                                                  "homepage": None},
                    tools=[make_tool(name="jsonkit.query", version="1.0.0")])
    second = json_out(run_cli("lock", "add", str(other), "--json", cwd=tmp_path))
    assert second["generation"] == 2 and second["previous"] == first["digest"]
    removed = json_out(run_cli("lock", "remove", "tracker", "--json", cwd=tmp_path))
    assert removed["generation"] == 3 and removed["previous"] == second["digest"]
    parsed = PackageLock.from_json(lock.read_bytes())
    assert [p.name for p in parsed.packages] == ["jsonkit"]
    assert parsed.digest() == removed["digest"]


def test_lock_add_replaces_package_of_the_same_name(tmp_path: Path) -> None:
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0
    newer = _bundle(tmp_path, "tracker-1.3.0",
                    package={"name": "tracker", "version": "1.3.0", "description": "", "homepage": None})
    report = json_out(run_cli("lock", "add", str(newer), "--json", cwd=tmp_path))
    assert report["replaced"]["version"] == "1.2.0" and report["entry"]["version"] == "1.3.0"
    parsed = PackageLock.from_json((tmp_path / "stockade.lock").read_bytes())
    assert [(p.name, p.version, p.bundle) for p in parsed.packages] == [("tracker", "1.3.0", "bundles/tracker-1.3.0")]


def test_lock_remove_unknown_package_refused_and_lock_unchanged(tmp_path: Path) -> None:
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0
    before = (tmp_path / "stockade.lock").read_bytes()
    proc = run_cli("lock", "remove", "nosuch", cwd=tmp_path)
    assert proc.returncode == 1 and "error: PACKAGE_NOT_IN_LOCK" in proc.stderr
    assert (tmp_path / "stockade.lock").read_bytes() == before


def test_tampered_bundle_fails_lock_verify_with_digest_mismatch(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    assert run_cli("lock", "add", str(bundle), cwd=tmp_path).returncode == 0
    assert run_cli("lock", "verify", cwd=tmp_path).returncode == 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["http"]["allow"][0]["host"] = "evil.example"  # widened after locking
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    proc = run_cli("lock", "verify", "--json", cwd=tmp_path)
    assert proc.returncode == 1
    error = json_out(proc)["error"]
    assert error["code"] == "DIGEST_MISMATCH" and error["details"]["file"] == "manifest.json"


def test_lock_add_refuses_bundle_whose_module_does_not_match_manifest(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    (bundle / "module.wasm").write_bytes(b"\x00asm\x0d\x00\x01\x00swapped")
    proc = run_cli("lock", "add", str(bundle), cwd=tmp_path)
    assert proc.returncode == 1 and "error: DIGEST_MISMATCH" in proc.stderr
    assert not (tmp_path / "stockade.lock").exists()


def test_lock_add_refuses_bundle_outside_the_lock_directory(tmp_path: Path) -> None:
    outside = _bundle(tmp_path / "elsewhere")
    (tmp_path / "ws").mkdir()
    proc = run_cli("lock", "add", str(outside), "--lock", "ws/stockade.lock", cwd=tmp_path)
    assert proc.returncode == 1 and "error: LOCK_INVALID" in proc.stderr and "outside" in proc.stderr
    assert not (tmp_path / "ws" / "stockade.lock").exists()


def test_lock_add_refuses_invalid_manifest(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, limits={"fuel": -1, "memory_bytes": 65536, "timeout_ms": 1,
                                       "max_http_requests": 0, "max_log_bytes": 0})
    proc = run_cli("lock", "add", str(bundle), cwd=tmp_path)
    assert proc.returncode == 1 and "error: MANIFEST_INVALID" in proc.stderr


def test_lock_verify_with_state_dir_detects_rollback_without_writing(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    assert run_cli("lock", "add", str(bundle), cwd=tmp_path).returncode == 0
    old = (tmp_path / "stockade.lock").read_bytes()
    assert run_cli("lock", "add", str(bundle), cwd=tmp_path).returncode == 0  # generation 2
    state = tmp_path / "state"
    LockState(state).accept(load_lock(tmp_path / "stockade.lock", config=HostConfig(state_dir=state),
                                      trusted_keys=None))
    snapshot = (state / "lock-state.json").read_bytes()
    (tmp_path / "stockade.lock").write_bytes(old)  # generation 1 again
    proc = run_cli("lock", "verify", "--state-dir", str(state), cwd=tmp_path)
    assert proc.returncode == 1 and "error: LOCK_ROLLBACK" in proc.stderr
    assert (state / "lock-state.json").read_bytes() == snapshot


@pytest.mark.parametrize("components", [False, True], ids=["manifest-only", "with-components"])
def test_lock_verify_components_refuses_core_module(tmp_path: Path, components: bool) -> None:
    bundle = _bundle(tmp_path, module=MODULE_BYTES)  # a component header, not a real component
    write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])  # not through `lock add`
    proc = run_cli("lock", "verify", *(["--components"] if components else []), cwd=tmp_path)
    if components:
        assert proc.returncode == 1 and "error: COMPONENT_REFUSED" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr


def test_keygen_refuses_a_corrupt_keys_file_before_writing_a_key(tmp_path: Path) -> None:
    (tmp_path / "keys.json").write_text('{"format": "stockade.keys/1", "keys": [{"key_id": "x"}]}')
    proc = run_cli("keygen", "--out", "key.pem", "--keys-file", "keys.json", cwd=tmp_path)
    assert proc.returncode == 1 and "error: LOCK_INVALID" in proc.stderr
    assert not (tmp_path / "key.pem").exists()


def test_lock_add_bundle_that_is_the_lock_directory_refused(tmp_path: Path) -> None:
    write_bundle(tmp_path, make_manifest())
    proc = run_cli("lock", "add", ".", cwd=tmp_path)
    assert proc.returncode == 1 and "error: LOCK_INVALID" in proc.stderr
    assert not (tmp_path / "stockade.lock").exists()


# --- lock signatures (issue 9.5 b) ----------------------------------------------------------


def test_lock_add_with_key_signs_entry_and_lock_body(tmp_path: Path) -> None:
    made = _keygen(tmp_path)
    added = json_out(run_cli("lock", "add", str(_bundle(tmp_path)), "--key", "key.pem", "--json", cwd=tmp_path))
    assert added["lock_key_id"] == made["key_id"] == added["entry"]["key_id"]
    ok = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--trusted-operator-keys",
                 "trusted-keys.json", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    report = json_out(ok)
    assert report["lock_key_id"] == made["key_id"] and report["lock_signature_verified"] is True


def test_lock_add_with_separate_operator_key(tmp_path: Path) -> None:
    author = _keygen(tmp_path)
    operator = _keygen(tmp_path, "operator.pem", keys="operator-keys.json")
    added = json_out(run_cli("lock", "add", str(_bundle(tmp_path)), "--key", "key.pem", "--operator-key",
                             "operator.pem", "--json", cwd=tmp_path))
    assert added["entry"]["key_id"] == author["key_id"] and added["lock_key_id"] == operator["key_id"]
    ok = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--trusted-operator-keys",
                 "operator-keys.json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert f"signed by {operator['key_id']} (verified)" in ok.stdout


def test_unsigned_lock_refused_by_verify_with_operator_keys(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0
    proc = run_cli("lock", "verify", "--trusted-operator-keys", "trusted-keys.json", cwd=tmp_path)
    assert proc.returncode == 1
    assert "error: SIGNATURE_INVALID" in proc.stderr and "lock generation 1 is not signed" in proc.stderr


def test_lock_sign_signs_in_place_keeping_generation_and_digest(tmp_path: Path) -> None:
    made = _keygen(tmp_path)
    first = json_out(run_cli("lock", "add", str(_bundle(tmp_path)), "--json", cwd=tmp_path))
    signed = run_cli("lock", "sign", "--key", "key.pem", "--json", cwd=tmp_path)
    assert signed.returncode == 0, signed.stderr
    report = json_out(signed)
    assert (report["generation"], report["digest"]) == (first["generation"], first["digest"])
    assert report["lock_key_id"] == made["key_id"]
    assert run_cli("lock", "verify", "--trusted-operator-keys", "trusted-keys.json", cwd=tmp_path).returncode == 0


def test_lock_edited_after_signing_refused_by_verify(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), "--key", "key.pem", cwd=tmp_path).returncode == 0
    lock = tmp_path / "stockade.lock"
    document = json.loads(lock.read_text())
    document["generation"], document["previous"] = 2**53 - 1, "e" * 64  # the generation-burning edit
    lock.write_text(json.dumps(document))
    proc = run_cli("lock", "verify", "--trusted-keys", "trusted-keys.json", "--trusted-operator-keys",
                   "trusted-keys.json", cwd=tmp_path)
    assert proc.returncode == 1 and "error: SIGNATURE_INVALID" in proc.stderr and "does not verify" in proc.stderr


def test_edit_without_key_warns_that_lock_signature_is_dropped(tmp_path: Path) -> None:
    _keygen(tmp_path)
    assert run_cli("lock", "add", str(_bundle(tmp_path)), "--key", "key.pem", cwd=tmp_path).returncode == 0
    removed = run_cli("lock", "remove", "tracker", cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    assert "the previous generation was signed; this one is not" in removed.stderr
    assert "lock signed no" in removed.stdout


def test_host_with_operator_keys_refuses_unsigned_lock(tmp_path: Path) -> None:
    from tests.support.cli import echo_workspace  # noqa: PLC0415 - only this test needs a host

    ws = echo_workspace(tmp_path)
    _keygen(tmp_path, keys="operator-keys.json")
    proc = ws.run("tools", *ws.host_args, "--trusted-operator-keys", "operator-keys.json")
    assert proc.returncode == 1 and "error: SIGNATURE_INVALID" in proc.stderr
    assert not (ws.state / "lock-state.json").exists()
    assert run_cli("lock", "sign", "--key", "key.pem", "--lock", str(ws.lock), cwd=tmp_path).returncode == 0
    ok = ws.run("tools", *ws.host_args, "--trusted-operator-keys", "operator-keys.json")
    assert ok.returncode == 0, ok.stderr


def test_serve_with_operator_keys_refuses_unsigned_lock(tmp_path: Path) -> None:
    from tests.support.cli import echo_workspace  # noqa: PLC0415 - only this test needs a host

    ws = echo_workspace(tmp_path)
    _keygen(tmp_path, keys="operator-keys.json")
    proc = ws.run("serve", *ws.host_args, "--trusted-operator-keys", "operator-keys.json",
                  "--project", "p", "--subject", "alice")  # stdio transport; stdin is /dev/null
    assert proc.returncode == 1 and "error: SIGNATURE_INVALID" in proc.stderr


# --- component checks at lock time (issue 9 "Also") -----------------------------------------


def _shared_memory_component() -> bytes:
    """The echo component plus a shared memory: the host's engine (threads off) cannot compile it."""
    return bytes(wasmtime.wat2wasm(ECHO_WAT.replace("(core module $m\n", "(core module $m\n    (memory 1 1 shared)\n", 1)))


@pytest.mark.parametrize(
    ("module", "needle"),
    [
        (core_module, "core WebAssembly module, not a component"),
        (lambda: wrong_call_component("returns-string"), "call"),
        (lambda: wrong_call_component("missing"), "does not export `call`"),
        (lambda: import_component('(import "wasi:http/outgoing-handler@0.2.0" (instance (export "f" (func))))'),
         "wasi:http/outgoing-handler@0.2.0"),
        (_shared_memory_component, "threads must be enabled for shared memories"),
    ],
    ids=["core-module", "wrong-call-signature", "no-call-export", "wasi-http-import", "shared-memory"],
)
def test_lock_add_refuses_component_the_host_would_refuse(tmp_path: Path, module: Any, needle: str) -> None:
    bundle = _bundle(tmp_path, module=module())
    proc = run_cli("lock", "add", str(bundle), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    error = json_out(proc)["error"]
    assert error["code"] == "COMPONENT_REFUSED" and needle in error["message"]
    assert not (tmp_path / "stockade.lock").exists()
    inspected = run_cli("inspect", str(bundle), cwd=tmp_path)
    assert inspected.returncode == 1 and "error: COMPONENT_REFUSED" in inspected.stderr


def test_help_documents_lock_signature_flags(tmp_path: Path) -> None:
    for command, flags in ((("lock", "add"), ("--key", "--operator-key", "lock body")),
                           (("lock", "sign"), ("--key", "stockade/lock@1")),
                           (("lock", "verify"), ("--trusted-operator-keys",)),
                           (("tools",), ("--trusted-operator-keys",))):
        proc = run_cli(*command, "--help", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        for flag in flags:
            assert flag in proc.stdout, (command, flag)


def test_lock_verify_with_state_dir_detects_package_downgrade(tmp_path: Path) -> None:
    assert run_cli("lock", "add", str(_bundle(tmp_path)), cwd=tmp_path).returncode == 0  # tracker 1.2.0
    newer = _bundle(tmp_path, "tracker-1.3.0",
                    package={"name": "tracker", "version": "1.3.0", "description": "", "homepage": None})
    assert run_cli("lock", "add", str(newer), cwd=tmp_path).returncode == 0
    state = tmp_path / "state"
    LockState(state).accept(load_lock(tmp_path / "stockade.lock", config=HostConfig(state_dir=state),
                                      trusted_keys=None))
    assert run_cli("lock", "add", str(tmp_path / "bundles" / "tracker"), cwd=tmp_path).returncode == 0  # 1.2.0
    proc = run_cli("lock", "verify", "--state-dir", str(state), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    error = json_out(proc)["error"]
    assert error["code"] == "LOCK_ROLLBACK" and error["details"]["reason"] == "downgrade"
