"""Lock signatures by operator keys and domain-separated statements (issue 9.5 b, d).

Attacks: someone who can write the lock edits its generation, previous or entries, or
drops its signature, on a host configured with trusted operator keys; or replays a
signature made for one purpose (a package) as another (a lock), with one key trusted
for both. Every signature here is real Ed25519 over real files.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from host.config import HostConfig
from host.errors import LockRollback, SignatureInvalid
from host.signing import STATEMENT_TAGS, signed_statement
from host.trust.lock import (
    LockState,
    PackageLock,
    TrustedKeys,
    key_id_for,
    load_lock,
    lock_statement,
    statement_for,
)
from sdk.bundle import generate_keypair, load_private_key
from sdk.review.lockfile import sign_lock
from tests.support.bundles import lock_document, lock_entry, make_manifest, write_bundle


class Operator:
    """One Ed25519 key, trusted both as a package key and as an operator key."""

    def __init__(self) -> None:
        pem, public = generate_keypair()
        self.pem = pem
        self.key: Ed25519PrivateKey = load_private_key(pem)
        self.key_id = key_id_for(public)
        self.keys = TrustedKeys({self.key_id: public})

    def sign(self, message: bytes) -> str:
        return base64.b64encode(self.key.sign(message)).decode()


@pytest.fixture
def op() -> Operator:
    return Operator()


def _write(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(json.dumps(document, indent=2))
    return path


def _signed_lock(root: Path, op: Operator, *, generation: int = 1, previous: str | None = None) -> dict[str, Any]:
    bundle = write_bundle(root / "bundles" / "tracker", make_manifest())
    body = lock_document([lock_entry(root, bundle, private_key=op.pem)], generation=generation, previous=previous)
    return {**body, "signature": {"key_id": op.key_id, "signature": op.sign(lock_statement(body))}}


def _load(path: Path, op: Operator, tmp_path: Path, **config: Any) -> Any:
    return load_lock(path, config=HostConfig(state_dir=tmp_path / "state", **config), trusted_keys=op.keys,
                     operator_keys=op.keys)


def test_signed_lock_verifies_and_reports_its_key(tmp_path: Path, op: Operator) -> None:
    loaded = _load(_write(tmp_path / "stockade.lock", _signed_lock(tmp_path, op)), op, tmp_path)
    assert loaded.lock_key_id == op.key_id


def test_unsigned_lock_with_operator_keys_configured_refused(tmp_path: Path, op: Operator) -> None:
    document = _signed_lock(tmp_path, op)
    del document["signature"]
    with pytest.raises(SignatureInvalid, match="lock generation 1 is not signed"):
        _load(_write(tmp_path / "stockade.lock", document), op, tmp_path)


def test_operator_keys_file_in_host_config_requires_lock_signature(tmp_path: Path, op: Operator) -> None:
    public = op.key.public_key().public_bytes_raw()
    keys_file = tmp_path / "operator-keys.json"
    keys_file.write_text(json.dumps({"format": "stockade.keys/1", "keys": [
        {"key_id": op.key_id, "public_key": base64.b64encode(public).decode()}]}))
    config = HostConfig(state_dir=tmp_path / "state", trusted_operator_keys_file=keys_file)
    document = _signed_lock(tmp_path, op)
    signed = _write(tmp_path / "signed.lock", document)
    assert load_lock(signed, config=config, trusted_keys=op.keys).lock_key_id == op.key_id
    unsigned = _write(tmp_path / "unsigned.lock", {k: v for k, v in document.items() if k != "signature"})
    with pytest.raises(SignatureInvalid) as caught:
        load_lock(unsigned, config=config, trusted_keys=op.keys)
    assert caught.value.code == "SIGNATURE_INVALID"


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d.update(generation=2, previous="e" * 64),
        lambda d: d.update(generation=2**53 - 1, previous="e" * 64),
        lambda d: d["packages"][0].update(version="1.1.0"),
        lambda d: d["packages"][0].update(bundle="bundles/other"),
        lambda d: d.update(packages=[]),
    ],
    ids=["generation-bumped", "generation-burned", "entry-version", "entry-bundle", "entries-dropped"],
)
def test_lock_body_edited_after_operator_signed_it_refused(tmp_path: Path, op: Operator, edit: Any) -> None:
    document = _signed_lock(tmp_path, op)
    edit(document)
    with pytest.raises(SignatureInvalid, match="does not verify"):
        _load(_write(tmp_path / "stockade.lock", document), op, tmp_path)


def test_lock_signed_by_untrusted_key_refused(tmp_path: Path, op: Operator) -> None:
    rogue = Operator()
    document = _signed_lock(tmp_path, rogue)
    with pytest.raises(SignatureInvalid, match="not a trusted key"):
        load_lock(_write(tmp_path / "stockade.lock", document), config=HostConfig(state_dir=tmp_path / "s"),
                  trusted_keys=rogue.keys, operator_keys=op.keys)


def test_package_signature_replayed_as_lock_signature_refused(tmp_path: Path, op: Operator) -> None:
    document = _signed_lock(tmp_path, op)
    entry = document["packages"][0]
    document["signature"] = {"key_id": entry["key_id"], "signature": entry["signature"]}
    with pytest.raises(SignatureInvalid, match="lock generation 1 does not verify"):
        _load(_write(tmp_path / "stockade.lock", document), op, tmp_path)


def test_lock_signature_replayed_as_package_signature_refused(tmp_path: Path, op: Operator) -> None:
    document = _signed_lock(tmp_path, op)
    entry = document["packages"][0]
    entry["signature"] = document["signature"]["signature"]  # a valid signature by a trusted key
    del document["signature"]
    with pytest.raises(SignatureInvalid, match=r"package tracker@1\.2\.0 does not verify"):
        load_lock(_write(tmp_path / "stockade.lock", document), config=HostConfig(state_dir=tmp_path / "s"),
                  trusted_keys=op.keys)


def test_untagged_statement_signature_refused(tmp_path: Path, op: Operator) -> None:
    # A signature over the pre-tag statement (the four fields alone) no longer verifies.
    from host.canonical import canonical_json  # noqa: PLC0415

    document = _signed_lock(tmp_path, op)
    entry = document["packages"][0]
    untagged = canonical_json({k: entry[k] for k in ("manifest_sha256", "module_sha256", "version")}
                              | {"package": entry["name"]})
    entry["signature"] = op.sign(untagged)
    del document["signature"]
    with pytest.raises(SignatureInvalid, match="does not verify"):
        load_lock(_write(tmp_path / "stockade.lock", document), config=HostConfig(state_dir=tmp_path / "s"),
                  trusted_keys=op.keys)


def test_statements_of_each_purpose_never_share_bytes() -> None:
    fields = {"package": "tracker", "version": "1.2.0", "manifest_sha256": "a" * 64, "module_sha256": "b" * 64}
    statements = {signed_statement(tag, fields) for tag in STATEMENT_TAGS}
    assert len(statements) == len(STATEMENT_TAGS) == 6
    assert statement_for("tracker", "1.2.0", "a" * 64, "b" * 64) == signed_statement("stockade/package@1", fields)
    for bad in ({"statement": "stockade/package@1"}, {"signature": "x"}):
        with pytest.raises(ValueError):
            lock_statement(bad)
    with pytest.raises(ValueError, match="unknown statement tag"):
        signed_statement("stockade/other@1", fields)


def test_signing_a_lock_keeps_generation_and_digest(tmp_path: Path, op: Operator) -> None:
    document = _signed_lock(tmp_path, op)
    unsigned = {k: v for k, v in document.items() if k != "signature"}
    path = _write(tmp_path / "stockade.lock", unsigned)
    before = PackageLock.from_json(path.read_bytes())
    update = sign_lock(path, op.pem)
    after = PackageLock.from_json(path.read_bytes())
    assert (update.generation, update.digest, update.lock_key_id) == (1, before.digest(), op.key_id)
    assert after.digest() == before.digest() and after.signature is not None
    assert _load(path, op, tmp_path).lock_key_id == op.key_id


def test_old_signed_lock_replayed_after_newer_accepted_is_rollback(tmp_path: Path, op: Operator) -> None:
    config = HostConfig(state_dir=tmp_path / "state")
    one = _write(tmp_path / "one.lock", _signed_lock(tmp_path, op))
    first = _load(one, op, tmp_path)
    two = _write(tmp_path / "two.lock", _signed_lock(tmp_path, op, generation=2, previous=first.digest))
    state = LockState(config.state_dir)
    state.accept(first)
    state.accept(_load(two, op, tmp_path))
    with pytest.raises(LockRollback, match="rollback"):
        state.accept(_load(one, op, tmp_path))  # validly signed, but old


def test_lock_signature_not_checked_without_operator_keys(tmp_path: Path, op: Operator) -> None:
    # Documented: a host without operator keys accepts unsigned locks, so a lock signature
    # (even by an unknown key) gives it nothing to act on; package signatures still count.
    rogue = Operator()
    document = _signed_lock(tmp_path, op)
    document["signature"] = {"key_id": rogue.key_id, "signature": rogue.sign(b"anything")}
    loaded = load_lock(_write(tmp_path / "stockade.lock", document), config=HostConfig(state_dir=tmp_path / "s"),
                       trusted_keys=op.keys)
    assert loaded.lock_key_id == rogue.key_id
