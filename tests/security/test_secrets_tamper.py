"""Attacks on the secrets store: moved and tampered ciphertexts, wrong or weak keys,
corrupt files, badly protected key files and cross-principal fallback (docs/design.md §8)."""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from host.errors import SecretsUnavailable
from host.secrets.store import MasterKey, SecretsStore, generate_key_file
from tests.support.secrets import key_text, make_key, make_store, write_key_file

VALUE = "tok-Zq9#x7!Lm2-alice"
BOB_VALUE = "tok-Bb8$y6?Kn1-bob"
OPAQUE = "wrong master key, or the file was tampered with"


def _populated(tmp_path: Path) -> tuple[SecretsStore, MasterKey]:
    key = make_key()
    store = make_store(tmp_path, key)
    store.set("proj", "alice", "tracker_token", VALUE)
    store.set("proj", "bob", "tracker_token", BOB_VALUE)
    store.set("proj", "alice", "other_token", "other-value-123")
    return store, key


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _entry(doc: dict[str, Any], principal: str, name: str) -> dict[str, Any]:
    found = [e for e in doc["entries"] if e["principal"] == principal and e["name"] == name]
    assert len(found) == 1
    entry: dict[str, Any] = found[0]
    return entry


def _flip(b64: str, index: int = 0) -> str:
    raw = bytearray(base64.b64decode(b64))
    raw[index] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _assert_unavailable_without_values(exc: SecretsUnavailable) -> None:
    assert exc.code == "SECRETS_UNAVAILABLE"
    for value in (VALUE, BOB_VALUE):
        assert value not in str(exc) and value not in repr(exc.to_dict())


# -- moved ciphertexts: associated data binds scope, principal and name -----------------------


def _move_to_principal(doc: dict[str, Any]) -> None:
    # Bob's entry now claims to be carol's: the ciphertext moved to another principal.
    _entry(doc, "bob", "tracker_token")["principal"] = "carol"


def _move_to_name(doc: dict[str, Any]) -> None:
    _entry(doc, "alice", "tracker_token")["name"] = "renamed_token"


def _move_to_scope(doc: dict[str, Any]) -> None:
    _entry(doc, "bob", "tracker_token")["scope"] = "other"


def _swap_principals(doc: dict[str, Any]) -> None:
    alice, bob = _entry(doc, "alice", "tracker_token"), _entry(doc, "bob", "tracker_token")
    for field in ("salt", "nonce", "ciphertext"):
        alice[field], bob[field] = bob[field], alice[field]


MOVES = [
    (_move_to_principal, ("proj", "carol", "tracker_token")),
    (_move_to_name, ("proj", "alice", "renamed_token")),
    (_move_to_scope, ("other", "bob", "tracker_token")),
    (_swap_principals, ("proj", "alice", "tracker_token")),
]


@pytest.mark.parametrize(("move", "address"), MOVES, ids=["to-principal", "to-name", "to-scope", "swap"])
def test_ciphertext_moved_to_another_address_fails_to_decrypt(
    tmp_path: Path, move: Callable[[dict[str, Any]], None], address: tuple[str, str, str]
) -> None:
    store, key = _populated(tmp_path)
    _edit(store.path, move)
    reopened = SecretsStore(store.path, key)  # the file itself is well-formed
    with pytest.raises(SecretsUnavailable, match=OPAQUE) as info:
        reopened.get(*address)
    _assert_unavailable_without_values(info.value)
    with pytest.raises(SecretsUnavailable, match=OPAQUE):
        reopened.stage(address[0], address[1], [address[2]])


# -- tampered fields ----------------------------------------------------------------------------


def _tamper(field: str, how: Callable[[str], str]) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        entry = _entry(doc, "alice", "tracker_token")
        entry[field] = how(entry[field])

    return change


TAMPERS = [
    _tamper("ciphertext", _flip),
    _tamper("ciphertext", lambda v: _flip(v, -1)),  # the GCM tag
    _tamper("ciphertext", lambda v: base64.b64encode(base64.b64decode(v)[:-1]).decode()),
    _tamper("ciphertext", lambda v: base64.b64encode(base64.b64decode(v)[:10]).decode()),
    _tamper("ciphertext", lambda v: ""),
    _tamper("nonce", _flip),
    _tamper("nonce", lambda v: base64.b64encode(base64.b64decode(v)[:11]).decode()),
    _tamper("salt", _flip),
    _tamper("salt", lambda v: _flip(v, 31)),
    _tamper("salt", lambda v: base64.b64encode(base64.b64decode(v)[:16]).decode()),
    _tamper("ciphertext", lambda v: v[:-2] + "!!"),
]
TAMPER_IDS = [
    "ciphertext-bit", "tag-bit", "ciphertext-truncated", "ciphertext-short", "ciphertext-empty",
    "nonce-bit", "nonce-short", "salt-bit", "salt-last-bit", "salt-short", "ciphertext-not-base64",
]


@pytest.mark.parametrize("tamper", TAMPERS, ids=TAMPER_IDS)
def test_tampered_entry_fails_closed_with_one_opaque_error(
    tmp_path: Path, tamper: Callable[[dict[str, Any]], None]
) -> None:
    store, key = _populated(tmp_path)
    _edit(store.path, tamper)
    reopened = SecretsStore(store.path, key)
    with pytest.raises(SecretsUnavailable) as info:
        reopened.get("proj", "alice", "tracker_token")
    assert info.value.message == (
        "the secrets store cannot be decrypted: wrong master key, or the file was tampered with"
    )
    _assert_unavailable_without_values(info.value)
    # Staging a set that includes the tampered secret fails as a whole, never partially.
    with pytest.raises(SecretsUnavailable):
        reopened.stage("proj", "alice", ["other_token", "tracker_token"])


def test_tampered_key_check_refused(tmp_path: Path) -> None:
    store, key = _populated(tmp_path)
    _edit(store.path, lambda doc: doc["key_check"].update(mac=_flip(doc["key_check"]["mac"])))
    with pytest.raises(SecretsUnavailable, match=OPAQUE):
        SecretsStore(store.path, key)


# -- wrong master key ---------------------------------------------------------------------------


def test_wrong_master_key_refused_by_every_operation_and_file_untouched(tmp_path: Path) -> None:
    store, key = _populated(tmp_path)
    before = store.path.read_bytes()
    with pytest.raises(SecretsUnavailable, match=OPAQUE):
        SecretsStore(store.path, make_key())
    # A handle opened before the file existed (so the constructor had nothing to check)
    # still refuses every operation once the file written under another key appears.
    wrong = SecretsStore(tmp_path / "late.json", make_key())
    shutil.copyfile(store.path, wrong.path)
    before = wrong.path.read_bytes()
    for op in (
        lambda: wrong.list("proj", "alice"),
        lambda: wrong.get("proj", "alice", "tracker_token"),
        lambda: wrong.stage("proj", "alice", ["tracker_token"]),
        lambda: wrong.set("proj", "alice", "new_token", "new-value-123"),
        lambda: wrong.delete("proj", "alice", "tracker_token"),
    ):
        with pytest.raises(SecretsUnavailable, match=OPAQUE):
            op()
    assert wrong.path.read_bytes() == before
    value = SecretsStore(wrong.path, key).get("proj", "alice", "tracker_token")
    assert value is not None and value.reveal() == VALUE


# -- corrupt or unknown files: never an empty store, never overwritten ------------------------


CORRUPT = {
    "empty-file": b"",
    "not-json": b"\x00\x01garbage",
    "truncated-json": b'{"format": "stockade.secrets/1", "entr',
    "top-level-array": b"[]",
    "missing-key-check": b'{"format": "stockade.secrets/1", "entries": []}',
    "missing-format": b'{"key_check": {"salt": "", "mac": ""}, "entries": []}',
}


@pytest.mark.parametrize("content", list(CORRUPT.values()), ids=list(CORRUPT))
def test_corrupt_file_refused_and_not_overwritten_by_later_writes(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "secrets.json"
    path.write_bytes(content)
    key = make_key()
    with pytest.raises(SecretsUnavailable, match="corrupt"):
        SecretsStore(path, key)
    late = SecretsStore(tmp_path / "late.json", key)
    (tmp_path / "late.json").write_bytes(content)
    with pytest.raises(SecretsUnavailable, match="corrupt"):
        late.set("proj", "alice", "tok", "value-12345")
    assert path.read_bytes() == content == late.path.read_bytes()


STRUCTURAL = {
    "extra-top-level-field": lambda d: d.update(extra=1),
    "extra-entry-field": lambda d: d["entries"][0].update(value="plain"),
    "duplicate-entry": lambda d: d["entries"].append(dict(d["entries"][0])),
    "bad-name-in-file": lambda d: d["entries"][0].update(name="Bad-Name"),
    "empty-principal-in-file": lambda d: d["entries"][0].update(principal=""),
    "naive-timestamp": lambda d: d["entries"][0].update(created_at="2025-01-01T00:00:00"),
    "number-for-string": lambda d: d["entries"][0].update(nonce=12),
    "entries-not-a-list": lambda d: d.update(entries={}),
}


@pytest.mark.parametrize("change", list(STRUCTURAL.values()), ids=list(STRUCTURAL))
def test_structurally_invalid_file_refused_and_set_does_not_repair_it(
    tmp_path: Path, change: Callable[[dict[str, Any]], None]
) -> None:
    store, key = _populated(tmp_path)
    _edit(store.path, change)
    before = store.path.read_bytes()
    with pytest.raises(SecretsUnavailable, match="corrupt"):
        SecretsStore(store.path, key)
    handle = SecretsStore(tmp_path / "late.json", key)  # opened before the bad file appears
    shutil.copyfile(store.path, handle.path)
    for op in (
        lambda: handle.set("proj", "alice", "new_token", "new-value-123"),
        lambda: handle.delete("proj", "alice", "tracker_token"),
        lambda: handle.list("proj", "alice"),
        lambda: handle.get("proj", "bob", "tracker_token"),
    ):
        with pytest.raises(SecretsUnavailable):
            op()
    assert handle.path.read_bytes() == before == store.path.read_bytes()


@pytest.mark.parametrize("version", ["stockade.secrets/2", "stockade.secrets/0", "other"])
def test_unknown_format_version_refused_by_name(tmp_path: Path, version: str) -> None:
    store, key = _populated(tmp_path)
    _edit(store.path, lambda d: d.update(format=version))
    with pytest.raises(SecretsUnavailable, match=f"unknown format '{version}'"):
        SecretsStore(store.path, key)


def test_store_file_over_16_mib_refused(tmp_path: Path) -> None:
    path = tmp_path / "secrets.json"
    with path.open("wb") as handle:
        handle.write(b" " * (16 * 1024 * 1024 + 1))
    with pytest.raises(SecretsUnavailable, match="over the limit of 16777216"):
        SecretsStore(path, make_key())


def test_symlinked_store_file_refused(tmp_path: Path) -> None:
    store, key = _populated(tmp_path)
    link = tmp_path / "link.json"
    link.symlink_to(store.path)
    with pytest.raises(SecretsUnavailable, match="symlink"):
        SecretsStore(link, key)


def test_directory_as_store_file_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(SecretsUnavailable):
        SecretsStore(tmp_path / "dir.json", make_key())


# -- no fallback across principals or scopes --------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "principal"),
    [("proj", "carol"), ("other", "alice"), ("default", "alice"), ("proj", "*"), ("*", "alice"),
     ("proj", "ALICE"), ("proj", "alice "), ("Proj", "alice")],
    ids=["other-principal", "other-scope", "default-scope", "wildcard-principal", "wildcard-scope",
         "case-variant-principal", "trailing-space-principal", "case-variant-scope"],
)
def test_no_fallback_to_another_principal_or_scope(tmp_path: Path, scope: str, principal: str) -> None:
    store, _ = _populated(tmp_path)
    assert store.get(scope, principal, "tracker_token") is None
    assert store.stage(scope, principal, ["tracker_token", "other_token"]) == {}
    assert store.list(scope, principal) == []


def test_each_principal_gets_only_its_own_value(tmp_path: Path) -> None:
    store, _ = _populated(tmp_path)
    alice = store.get("proj", "alice", "tracker_token")
    bob = store.get("proj", "bob", "tracker_token")
    assert alice is not None and alice.reveal() == VALUE
    assert bob is not None and bob.reveal() == BOB_VALUE
    assert [i.name for i in store.list("proj", "bob")] == ["tracker_token"]


# -- master key loading: missing, weak, badly protected ------------------------------------------


def _no_key() -> MasterKey:
    return MasterKey.load(env={})


@pytest.mark.parametrize(
    "material",
    [os.urandom(31), b"\x41" * 32, bytes(range(7)) * 5, b"", os.urandom(1025)],
    ids=["31-bytes", "32-bytes-one-value", "7-distinct-values", "empty", "1025-bytes"],
)
def test_weak_master_key_refused(tmp_path: Path, material: bytes) -> None:
    with pytest.raises(SecretsUnavailable) as info:
        MasterKey.load(env={"STOCKADE_MASTER_KEY": key_text(material)})
    assert info.value.code == "SECRETS_UNAVAILABLE"
    with pytest.raises(SecretsUnavailable):
        MasterKey.load(env={}, key_file=write_key_file(tmp_path / "k", material))
    with pytest.raises(SecretsUnavailable):
        MasterKey.from_bytes(material)


def test_eight_distinct_values_and_32_bytes_is_enough(tmp_path: Path) -> None:
    # The boundary of the strength check: accepted, and usable as a key for a real store.
    key = MasterKey.from_bytes(bytes(range(8)) * 4)
    store = make_store(tmp_path, key)
    store.set("proj", "alice", "tracker_token", VALUE)
    value = SecretsStore(store.path, MasterKey.from_bytes(bytes(range(8)) * 4)).get("proj", "alice", "tracker_token")
    assert value is not None and value.reveal() == VALUE


@pytest.mark.parametrize(
    "text",
    ["not base64!", "QUJD", "QUJDRA", "\u00e9" * 44, " ", "a" * 5000],
    ids=["punctuation", "3-bytes", "missing-padding", "non-ascii", "blank", "too-long"],
)
def test_master_key_text_that_is_not_strong_base64_refused(text: str) -> None:
    with pytest.raises(SecretsUnavailable):
        MasterKey.load(env={"STOCKADE_MASTER_KEY": text})


def test_missing_master_key_is_secrets_unavailable() -> None:
    with pytest.raises(SecretsUnavailable, match="no master key") as info:
        _no_key()
    assert info.value.code == "SECRETS_UNAVAILABLE"


def test_missing_master_key_from_scrubbed_process_environment() -> None:
    assert "STOCKADE_MASTER_KEY" not in os.environ
    with pytest.raises(SecretsUnavailable, match="no master key"):
        MasterKey.load()


def test_empty_env_variable_is_refused_not_skipped_for_the_key_file(tmp_path: Path) -> None:
    key_file = write_key_file(tmp_path / "k")
    with pytest.raises(SecretsUnavailable, match="STOCKADE_MASTER_KEY"):
        MasterKey.load(env={"STOCKADE_MASTER_KEY": ""}, key_file=key_file)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660, 0o610, 0o601], ids=oct)
def test_key_file_readable_or_usable_by_others_refused(tmp_path: Path, mode: int) -> None:
    path = write_key_file(tmp_path / "k", mode=mode)
    with pytest.raises(SecretsUnavailable, match="group or others") as info:
        MasterKey.load(env={}, key_file=path)
    assert "chmod 600" in info.value.hint


def test_missing_key_file_refused(tmp_path: Path) -> None:
    with pytest.raises(SecretsUnavailable, match="cannot open"):
        MasterKey.load(env={}, key_file=tmp_path / "absent.key")


def test_symlinked_key_file_refused(tmp_path: Path) -> None:
    target = write_key_file(tmp_path / "real.key")
    link = tmp_path / "link.key"
    link.symlink_to(target)
    with pytest.raises(SecretsUnavailable, match="symlink"):
        MasterKey.load(env={}, key_file=link)


def test_directory_as_key_file_refused(tmp_path: Path) -> None:
    directory = tmp_path / "keydir"
    directory.mkdir(mode=0o700)
    with pytest.raises(SecretsUnavailable):
        MasterKey.load(env={}, key_file=directory)


def test_binary_key_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "k"
    path.write_bytes(os.urandom(32) + b"\xff")
    path.chmod(0o600)
    with pytest.raises(SecretsUnavailable):
        MasterKey.load(env={}, key_file=path)


def test_generated_key_file_loads_and_differs_each_time(tmp_path: Path) -> None:
    generate_key_file(tmp_path / "a.key")
    generate_key_file(tmp_path / "b.key")
    assert (tmp_path / "a.key").read_bytes() != (tmp_path / "b.key").read_bytes()
    MasterKey.load(env={}, key_file=tmp_path / "a.key")
