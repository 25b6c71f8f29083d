"""The lock format stockade.lock/1, trusted keys and the signed statement (docs/design.md §4)."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from host.config import HostConfig
from host.errors import LockInvalid, SignatureInvalid
from host.trust.lock import MAX_MODULE_BYTES, PackageLock, TrustedKeys, key_id_for, load_lock, statement_for
from sdk.bundle import generate_keypair, load_private_key, read_bundle, sign_package, write_keys_file
from tests.support.bundles import lock_document, lock_entry, make_manifest, write_bundle, write_lock

SHA = "a" * 64


def entry(**overrides: Any) -> dict[str, Any]:
    value = {"name": "tracker", "version": "1.2.0", "bundle": "bundles/tracker",
             "manifest_sha256": SHA, "module_sha256": SHA, "signature": None, "key_id": None}
    value.update(overrides)
    return value


def lock_bytes(packages: list[dict[str, Any]] | None = None, **overrides: Any) -> bytes:
    document = lock_document(packages if packages is not None else [entry()])
    document.update(overrides)
    return json.dumps(document).encode()


def test_valid_lock_parses() -> None:
    lock = PackageLock.from_json(lock_bytes())
    assert (lock.generation, lock.previous, lock.packages[0].name) == (1, None, "tracker")


LOCK_DEFECTS = [
    ("unknown_top_level_field", lock_bytes(trusted=True), "trusted"),
    ("unknown_entry_field", lock_bytes([entry(url="https://x")]), "packages.0.url"),
    ("format_unknown", lock_bytes(format="stockade.lock/2"), "format"),
    ("generation_zero", lock_bytes(generation=0), "generation"),
    ("generation_boolean", lock_bytes(generation=True), "generation"),
    ("generation_string", lock_bytes(generation="2"), "generation"),
    ("generation_2_without_previous", lock_bytes(generation=2), ""),
    ("generation_1_with_previous", lock_bytes(previous=SHA), ""),
    ("previous_not_sha256", lock_bytes(generation=2, previous="abc"), "previous"),
    ("duplicate_package", lock_bytes([entry(), entry(version="1.3.0")]), ""),
    ("package_name_invalid", lock_bytes([entry(name="Tracker")]), "packages.0.name"),
    ("version_not_semver", lock_bytes([entry(version="1.2")]), "packages.0.version"),
    ("digest_uppercase", lock_bytes([entry(module_sha256=SHA.upper())]), "packages.0.module_sha256"),
    ("signature_without_key_id", lock_bytes([entry(signature=base64.b64encode(b"x" * 64).decode())]),
     "packages.0"),
    ("key_id_without_signature", lock_bytes([entry(key_id="0" * 16)]), "packages.0"),
    ("signature_wrong_length", lock_bytes([entry(signature="AAAA", key_id="0" * 16)]), "packages.0.signature"),
    ("signature_not_base64", lock_bytes([entry(signature="!" * 88, key_id="0" * 16)]), "packages.0.signature"),
    ("key_id_uppercase", lock_bytes([entry(signature=base64.b64encode(b"x" * 64).decode(), key_id="A" * 16)]),
     "packages.0.key_id"),
    ("bundle_absolute", lock_bytes([entry(bundle="/srv/bundles/tracker")]), "packages.0.bundle"),
    ("bundle_parent_escape", lock_bytes([entry(bundle="bundles/../../etc")]), "packages.0.bundle"),
    ("bundle_empty", lock_bytes([entry(bundle="")]), "packages.0.bundle"),
    ("too_many_packages", lock_bytes([entry(name=f"p{i}") for i in range(129)]), "packages"),
]


@pytest.mark.parametrize(("data", "loc"), [(d, loc) for _, d, loc in LOCK_DEFECTS],
                         ids=[name for name, _, _ in LOCK_DEFECTS])
def test_lock_defect_refused(data: bytes, loc: str) -> None:
    with pytest.raises(LockInvalid) as caught:
        PackageLock.from_json(data)
    assert caught.value.code == "LOCK_INVALID"
    assert loc in [p["loc"] for p in caught.value.details["problems"]]


@pytest.mark.parametrize(
    "data",
    [b'{"format": "stockade.lock/1", "format": "stockade.lock/1"}', b"NaN", b"\xff", b" " * (1024 * 1024 + 1)],
    ids=["duplicate-key", "nan", "not-utf8", "over-1-MiB"],
)
def test_lock_not_strict_json_refused(data: bytes) -> None:
    with pytest.raises(LockInvalid, match="strict JSON"):
        PackageLock.from_json(data)


def test_lock_digest_is_sha256_of_canonical_json() -> None:
    lock = PackageLock.from_json(lock_bytes())
    canonical = json.dumps(json.loads(lock_bytes()), sort_keys=True, separators=(",", ":")).encode()
    assert lock.digest() == hashlib.sha256(canonical).hexdigest()


def test_statement_is_exact_canonical_json() -> None:
    assert statement_for("tracker", "1.2.0", "a" * 64, "b" * 64) == (
        b'{"manifest_sha256":"' + b"a" * 64 + b'","module_sha256":"' + b"b" * 64
        + b'","package":"tracker","statement":"stockade/package@1","version":"1.2.0"}'
    )


def test_key_id_is_first_16_hex_of_sha256_of_raw_key() -> None:
    _, public = generate_keypair()
    assert key_id_for(public) == hashlib.sha256(public).hexdigest()[:16]
    with pytest.raises(ValueError):
        key_id_for(public[:31])


def test_signature_round_trip_and_domain() -> None:
    private, public = generate_keypair()
    signature, key_id = sign_package(private, "tracker", "1.2.0", SHA, SHA)
    keys = TrustedKeys({key_id: public})
    keys.verify("tracker", "1.2.0", SHA, SHA, signature=signature, key_id=key_id)
    Ed25519PublicKey.from_public_bytes(public).verify(
        base64.b64decode(signature), statement_for("tracker", "1.2.0", SHA, SHA)
    )
    for swapped in (("notes", "1.2.0", SHA, SHA), ("tracker", "1.2.1", SHA, SHA), ("tracker", "1.2.0", "b" * 64, SHA),
                    ("tracker", "1.2.0", SHA, "b" * 64)):
        with pytest.raises(SignatureInvalid):
            keys.verify(*swapped, signature=signature, key_id=key_id)


_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _trailing_bit_set(canonical: str) -> str:
    """The same bytes in a non-canonical spelling: a low, unused bit of the last character set."""
    body = canonical.rstrip("=")
    last = _B64.index(body[-1])
    assert last & 1 == 0  # 64 and 32 bytes leave 4 and 2 unused bits: the lowest one is free
    return body[:-1] + _B64[last | 1] + canonical[len(body):]


def _non_canonical(canonical: str) -> dict[str, str]:
    return {"trailing-bits-set": _trailing_bit_set(canonical), "padding-missing": canonical.rstrip("=")}


@pytest.mark.parametrize("spelling", ["trailing-bits-set", "padding-missing"])
def test_non_canonical_base64_signature_refused(spelling: str) -> None:
    # A second spelling of the same 64 bytes would verify; only the canonical one may.
    private, public = generate_keypair()
    signature, key_id = sign_package(private, "tracker", "1.2.0", SHA, SHA)
    other = _non_canonical(signature)[spelling]
    assert other != signature
    assert base64.b64decode(other + "=" * (-len(other) % 4)) == base64.b64decode(signature)
    keys = TrustedKeys({key_id: public})
    keys.verify("tracker", "1.2.0", SHA, SHA, signature=signature, key_id=key_id)
    with pytest.raises(SignatureInvalid, match="does not verify"):
        keys.verify("tracker", "1.2.0", SHA, SHA, signature=other, key_id=key_id)
    with pytest.raises(SignatureInvalid, match="does not verify"):
        keys.verify_statement(statement_for("tracker", "1.2.0", SHA, SHA), signature=other, key_id=key_id,
                              what="a pin")
    with pytest.raises(LockInvalid) as caught:
        PackageLock.from_json(lock_bytes([entry(signature=other, key_id=key_id)]))
    assert "packages.0.signature" in [p["loc"] for p in caught.value.details["problems"]]


@pytest.mark.parametrize("spelling", ["trailing-bits-set", "padding-missing"])
def test_non_canonical_base64_public_key_refused(spelling: str) -> None:
    _, public = generate_keypair()
    canonical = base64.b64encode(public).decode()
    other = _non_canonical(canonical)[spelling]
    assert base64.b64decode(other + "=" * (-len(other) % 4)) == public
    document = {"format": "stockade.keys/1", "keys": [{"key_id": key_id_for(public), "public_key": other}]}
    with pytest.raises(LockInvalid, match=r"keys\.0\.public_key") as caught:
        TrustedKeys.from_json(json.dumps(document).encode())
    assert "base64" in caught.value.message
    document["keys"][0]["public_key"] = canonical
    assert key_id_for(public) in TrustedKeys.from_json(json.dumps(document).encode())


def test_raw_private_key_accepted_by_signer() -> None:
    private_pem, _ = generate_keypair()
    key = load_private_key(private_pem)
    raw = key.private_bytes_raw()
    assert sign_package(raw, "t", "1.0.0", SHA, SHA) == sign_package(key, "t", "1.0.0", SHA, SHA)


def test_keys_file_round_trip(tmp_path: Path) -> None:
    _, public = generate_keypair()
    path = tmp_path / "keys.json"
    write_keys_file(path, [public])
    keys = TrustedKeys.load(path)
    assert key_id_for(public) in keys and len(keys) == 1


def keys_doc(*pairs: tuple[str, bytes]) -> bytes:
    return json.dumps({"format": "stockade.keys/1", "keys": [
        {"key_id": kid, "public_key": base64.b64encode(raw).decode()} for kid, raw in pairs
    ]}).encode()


def test_keys_file_with_mismatched_key_id_refused() -> None:
    _, public = generate_keypair()
    _, other = generate_keypair()
    with pytest.raises(LockInvalid, match="does not match"):
        TrustedKeys.from_json(keys_doc((key_id_for(other), public)))


def test_keys_file_with_duplicate_key_id_refused() -> None:
    _, public = generate_keypair()
    with pytest.raises(LockInvalid, match="twice"):
        TrustedKeys.from_json(keys_doc((key_id_for(public), public), (key_id_for(public), public)))


@pytest.mark.parametrize(
    "data",
    [b"{}", b'{"format": "stockade.keys/2", "keys": []}', b'{"format": "stockade.keys/1", "keys": [], "x": 1}',
     b'{"format": "stockade.keys/1", "keys": [{"key_id": "0000000000000000", "public_key": "AAAA"}]}'],
    ids=["empty", "unknown-format", "unknown-field", "short-key"],
)
def test_malformed_keys_file_refused(data: bytes) -> None:
    with pytest.raises(LockInvalid):
        TrustedKeys.from_json(data)


def test_missing_keys_file_named_in_config_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, write_bundle(repo / "b", make_manifest()))])
    config = HostConfig(state_dir=tmp_path / "state", trusted_keys_file=tmp_path / "nope.json")
    with pytest.raises(LockInvalid, match="cannot open"):
        load_lock(lock, config=config, trusted_keys=None)


def test_loaded_lock_builds_registry_with_bindings(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    bundle = write_bundle(repo / "bundles" / "tracker", make_manifest())
    lock = write_lock(repo / "stockade.lock", [lock_entry(repo, bundle)])
    loaded = load_lock(lock, config=HostConfig(state_dir=tmp_path / "s"), trusted_keys=None)
    tool = loaded.registry().get("tracker.list-issues", "1.2.0")
    assert tool.binding.generation == 1
    assert tool.binding.manifest_sha256 == hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    assert repr(loaded).count("\\x00") == 0  # module bytes never printed


def test_read_bundle_reports_digests(tmp_path: Path) -> None:
    bundle = read_bundle(write_bundle(tmp_path / "b", make_manifest()))
    assert bundle.module_sha256 == bundle.manifest.module.sha256
    assert bundle.manifest_sha256 == hashlib.sha256(bundle.manifest_bytes).hexdigest()


def test_module_over_size_cap_refused_before_reading(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    bundle = write_bundle(repo / "b", make_manifest())
    entry = lock_entry(repo, bundle)
    with open(bundle / "module.wasm", "r+b") as handle:
        handle.truncate(MAX_MODULE_BYTES + 1)  # sparse: no 256 MiB written
    lock = write_lock(repo / "stockade.lock", [entry])
    with pytest.raises(LockInvalid, match="over the limit"):
        load_lock(lock, config=HostConfig(state_dir=tmp_path / "s"), trusted_keys=None)


@pytest.mark.parametrize(("count", "ok"), [(256, True), (257, False)], ids=["256", "257"])
def test_keys_file_size_limit(count: int, ok: bool) -> None:
    pairs = []
    for _ in range(count):
        _, public = generate_keypair()
        pairs.append((key_id_for(public), public))
    if ok:
        assert len(TrustedKeys.from_json(keys_doc(*pairs))) == 256
    else:
        with pytest.raises(LockInvalid):
            TrustedKeys.from_json(keys_doc(*pairs))
