"""Tampered bundles and forged signatures are refused before anything is parsed or compiled.

Every refusal leaves the accepted lock state on disk byte for byte unchanged.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from host.config import HostConfig
from host.errors import DigestMismatch, LockInvalid, ManifestInvalid, SignatureInvalid, StockadeError
from host.trust.lock import LockState, TrustedKeys, load_lock
from sdk.bundle import generate_keypair, sign_package, write_keys_file
from tests.support.bundles import (
    MODULE_BYTES,
    lock_digest,
    lock_entry,
    make_manifest,
    sha256,
    state_snapshot,
    write_bundle,
    write_lock,
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    return root


@pytest.fixture
def keypair() -> tuple[bytes, bytes]:
    return generate_keypair()


@pytest.fixture
def keys(keypair: tuple[bytes, bytes]) -> TrustedKeys:
    return TrustedKeys({sign_key_id(keypair): keypair[1]})


def sign_key_id(keypair: tuple[bytes, bytes]) -> str:
    return sign_package(keypair[0], "x", "1.0.0", "0" * 64, "0" * 64)[1]


def config(tmp_path: Path, **kwargs: object) -> HostConfig:
    return HostConfig(state_dir=tmp_path / "state", **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def accepted(tmp_path: Path, repo: Path, keypair: tuple[bytes, bytes], keys: TrustedKeys) -> dict[str, bytes]:
    """Generation 1 with one signed package, accepted; returns the state snapshot."""
    bundle = write_bundle(repo / "bundles" / "tracker", make_manifest())
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, bundle, private_key=keypair[0])])
    cfg = config(tmp_path)
    LockState(cfg.state_dir).accept(load_lock(lock, config=cfg, trusted_keys=keys))
    snapshot = state_snapshot(cfg.state_dir)
    assert snapshot
    return snapshot


def next_lock(repo: Path, entry: dict) -> Path:
    """Generation 2, chained to the accepted generation 1, holding ``entry``."""
    previous = lock_digest(repo / "stockade.lock")
    return write_lock(repo / "next.lock", [entry], generation=2, previous=previous)


def refuse_and_keep_state(
    tmp_path: Path, lock: Path, error: type[StockadeError], code: str, snapshot: dict[str, bytes],
    *, keys: TrustedKeys | None, **cfg: object,
) -> StockadeError:
    cfg_obj = config(tmp_path, **cfg)
    with pytest.raises(error) as caught:
        loaded = load_lock(lock, config=cfg_obj, trusted_keys=keys)
        LockState(cfg_obj.state_dir).accept(loaded)
    assert caught.value.code == code
    assert state_snapshot(cfg_obj.state_dir) == snapshot
    return caught.value


def test_tampered_module_refused(tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict) -> None:
    (repo / "bundles" / "tracker" / "module.wasm").write_bytes(MODULE_BYTES + b"\x00backdoor")
    error = refuse_and_keep_state(
        tmp_path, repo / "stockade.lock", DigestMismatch, "DIGEST_MISMATCH", accepted, keys=keys
    )
    assert error.details["file"] == "module.wasm"


def test_tampered_manifest_refused(tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict) -> None:
    path = repo / "bundles" / "tracker" / "manifest.json"
    widened = json.loads(path.read_bytes())
    widened["http"]["allow"][0]["host"] = "evil.example"
    path.write_text(json.dumps(widened))
    error = refuse_and_keep_state(
        tmp_path, repo / "stockade.lock", DigestMismatch, "DIGEST_MISMATCH", accepted, keys=keys
    )
    assert error.details["file"] == "manifest.json"


def test_digest_checked_before_manifest_is_parsed(
    tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict
) -> None:
    # Unparseable bytes: a parse-first loader would say MANIFEST_INVALID, not DIGEST_MISMATCH.
    (repo / "bundles" / "tracker" / "manifest.json").write_bytes(b'{"format": NaN, "a": 1, "a": 2')
    refuse_and_keep_state(tmp_path, repo / "stockade.lock", DigestMismatch, "DIGEST_MISMATCH", accepted, keys=keys)


def test_relocked_swapped_module_fails_signature(
    tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict
) -> None:
    # The attacker can edit the lock and the bundle, but cannot sign.
    evil = b"\x00asm\x0d\x00\x01\x00evil"
    bundle = write_bundle(repo / "bundles" / "tracker", make_manifest(module_bytes=evil), evil)
    entry = json.loads((repo / "stockade.lock").read_bytes())["packages"][0]
    entry.update(
        manifest_sha256=sha256((bundle / "manifest.json").read_bytes()), module_sha256=sha256(evil)
    )
    refuse_and_keep_state(
        tmp_path, next_lock(repo, entry), SignatureInvalid, "SIGNATURE_INVALID", accepted, keys=keys
    )


def test_bit_flipped_signature_refused(tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict) -> None:
    entry = json.loads((repo / "stockade.lock").read_bytes())["packages"][0]
    raw = bytearray(base64.b64decode(entry["signature"]))
    raw[0] ^= 1
    entry["signature"] = base64.b64encode(bytes(raw)).decode()
    refuse_and_keep_state(
        tmp_path, next_lock(repo, entry), SignatureInvalid, "SIGNATURE_INVALID", accepted, keys=keys
    )


def test_signature_for_another_version_refused(
    tmp_path: Path, repo: Path, keypair: tuple[bytes, bytes], keys: TrustedKeys, accepted: dict
) -> None:
    entry = json.loads((repo / "stockade.lock").read_bytes())["packages"][0]
    entry["signature"], _ = sign_package(
        keypair[0], "tracker", "1.2.1", entry["manifest_sha256"], entry["module_sha256"]
    )
    refuse_and_keep_state(
        tmp_path, next_lock(repo, entry), SignatureInvalid, "SIGNATURE_INVALID", accepted, keys=keys
    )


def test_signature_by_unknown_key_refused(tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict) -> None:
    stranger, _ = generate_keypair()
    entry = lock_entry(repo, repo / "bundles" / "tracker", private_key=stranger)
    error = refuse_and_keep_state(
        tmp_path, next_lock(repo, entry), SignatureInvalid, "SIGNATURE_INVALID", accepted, keys=keys
    )
    assert "not a trusted key" in error.message


def test_signature_required_but_absent_refused(
    tmp_path: Path, repo: Path, keys: TrustedKeys, accepted: dict
) -> None:
    entry = lock_entry(repo, repo / "bundles" / "tracker")
    assert entry["signature"] is None
    refuse_and_keep_state(
        tmp_path, next_lock(repo, entry), SignatureInvalid, "SIGNATURE_INVALID", accepted,
        keys=keys, require_signatures=True,
    )


def test_signature_never_ignored_when_no_keys_are_configured(tmp_path: Path, repo: Path, accepted: dict) -> None:
    refuse_and_keep_state(
        tmp_path, repo / "stockade.lock", SignatureInvalid, "SIGNATURE_INVALID", accepted, keys=None
    )


def test_signature_required_and_valid_accepted_via_keys_file(
    tmp_path: Path, repo: Path, keypair: tuple[bytes, bytes]
) -> None:
    bundle = write_bundle(repo / "bundles" / "tracker", make_manifest())
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, bundle, private_key=keypair[0])])
    keys_file = tmp_path / "trusted-keys.json"
    write_keys_file(keys_file, [keypair[1]])
    cfg = config(tmp_path, require_signatures=True, trusted_keys_file=keys_file)
    loaded = load_lock(lock, config=cfg, trusted_keys=None)
    assert loaded.packages[0].module_bytes == MODULE_BYTES


@pytest.mark.parametrize(
    "bundle_path",
    ["../outside", "bundles/../../outside", "/etc", "bundles/./tracker", "bundles//tracker",
     "bundles\\tracker", "C:/bundles", "bundles/tracker\n"],
    ids=repr,
)
def test_bundle_path_escape_refused(tmp_path: Path, repo: Path, bundle_path: str) -> None:
    write_bundle(tmp_path / "outside", make_manifest())
    entry = lock_entry(repo, write_bundle(repo / "bundles" / "tracker", make_manifest()), bundle=bundle_path)
    lock = write_lock(repo / "stockade.lock", [entry])
    error = refuse_and_keep_state(tmp_path, lock, LockInvalid, "LOCK_INVALID", {}, keys=None)
    assert error.details["problems"][0]["loc"] == "packages.0.bundle"


def test_symlinked_bundle_outside_lock_dir_refused(tmp_path: Path, repo: Path) -> None:
    outside = write_bundle(tmp_path / "outside", make_manifest())
    (repo / "bundles").mkdir()
    (repo / "bundles" / "tracker").symlink_to(outside, target_is_directory=True)
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, repo / "bundles" / "tracker")])
    error = refuse_and_keep_state(tmp_path, lock, LockInvalid, "LOCK_INVALID", {}, keys=None)
    assert "outside" in error.message


def test_lock_entry_naming_another_package_refused(
    tmp_path: Path, repo: Path, keypair: tuple[bytes, bytes], keys: TrustedKeys
) -> None:
    # The entry names package "billing" and is validly signed for it, but its bundle is
    # the tracker's: the lock must not serve tracker's tools under billing's name.
    bundle = write_bundle(repo / "bundles" / "tracker", make_manifest())
    forged = lock_entry(repo, bundle, name="billing")
    forged["signature"], forged["key_id"] = sign_package(
        keypair[0], "billing", forged["version"], forged["manifest_sha256"], forged["module_sha256"]
    )
    lock = write_lock(repo / "stockade.lock", [forged])
    error = refuse_and_keep_state(tmp_path, lock, LockInvalid, "LOCK_INVALID", {}, keys=keys)
    assert error.message == "lock entry billing@1.2.0 points at a bundle of tracker@1.2.0"
    assert error.details["package"] == "billing"


def test_lock_entry_naming_another_version_refused(tmp_path: Path, repo: Path) -> None:
    bundle = write_bundle(repo / "bundles" / "tracker", make_manifest())
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, bundle, version="1.2.1")])
    error = refuse_and_keep_state(tmp_path, lock, LockInvalid, "LOCK_INVALID", {}, keys=None)
    assert error.message == "lock entry tracker@1.2.1 points at a bundle of tracker@1.2.0"


def test_manifest_pinning_another_module_refused(tmp_path: Path, repo: Path) -> None:
    manifest = make_manifest()
    manifest["module"]["sha256"] = "f" * 64
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, write_bundle(repo / "b", manifest))])
    refuse_and_keep_state(tmp_path, lock, DigestMismatch, "DIGEST_MISMATCH", {}, keys=None)


def test_invalid_manifest_behind_valid_digest_refused(tmp_path: Path, repo: Path) -> None:
    manifest = make_manifest()
    manifest["limits"]["fuel"] = 10**15
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, write_bundle(repo / "b", manifest))])
    error = refuse_and_keep_state(tmp_path, lock, ManifestInvalid, "MANIFEST_INVALID", {}, keys=None)
    assert error.details["problems"][0]["loc"] == "limits.fuel"


@pytest.mark.timeout(10)
def test_fifo_in_place_of_module_refused_without_hanging(tmp_path: Path, repo: Path) -> None:
    bundle = write_bundle(repo / "b", make_manifest())
    entry = lock_entry(repo, bundle)
    (bundle / "module.wasm").unlink()
    os.mkfifo(bundle / "module.wasm")
    lock = write_lock(repo / "stockade.lock", [entry])
    error = refuse_and_keep_state(tmp_path, lock, LockInvalid, "LOCK_INVALID", {}, keys=None)
    assert "regular file" in error.message


def test_missing_module_refused(tmp_path: Path, repo: Path) -> None:
    bundle = write_bundle(repo / "b", make_manifest())
    entry = lock_entry(repo, bundle)
    (bundle / "module.wasm").unlink()
    refuse_and_keep_state(
        tmp_path, write_lock(repo / "stockade.lock", [entry]), LockInvalid, "LOCK_INVALID", {}, keys=None
    )
