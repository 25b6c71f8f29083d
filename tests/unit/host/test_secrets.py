"""SecretsStore, MasterKey and SecretValue: round trips, masking, limits, key loading."""

from __future__ import annotations

import copy
import json
import logging
import os
import pickle
import stat
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from host.errors import SecretsUnavailable
from host.secrets.store import (
    MAX_VALUE_BYTES,
    MIN_VALUE_CHARS,
    MasterKey,
    SecretInfo,
    SecretsStore,
    SecretValue,
    generate_key_file,
)
from tests.support.secrets import key_text, make_key, make_store, write_key_file

VALUE = "tok-Zq9#x7!Lm2"
T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _revealed(store: SecretsStore, name: str) -> str:
    """The plaintext of ``proj``/``alice``/``name``, failing the test when it is absent."""
    value = store.get("proj", "alice", name)
    assert value is not None, f"secret {name!r} missing"
    return value.reveal()


# -- round trips ------------------------------------------------------------------------------


def test_set_then_get_round_trips_the_value(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "tracker_token", VALUE)
    got = store.get("proj", "alice", "tracker_token")
    assert isinstance(got, SecretValue)
    assert got.reveal() == VALUE


def test_round_trip_survives_reopen_with_the_same_key(tmp_path: Path) -> None:
    key = make_key()
    make_store(tmp_path, key).set("proj", "alice", "tok", VALUE)
    again = make_store(tmp_path, key).get("proj", "alice", "tok")
    assert again is not None and again.reveal() == VALUE


def test_secret_value_wrapper_is_accepted_by_set(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "tok", SecretValue(VALUE))
    assert store.get("proj", "alice", "tok") == SecretValue(VALUE)


def test_non_ascii_value_round_trips(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "tok", "mot-de-passe-é€😀")
    got = store.get("proj", "alice", "tok")
    assert got is not None and got.reveal() == "mot-de-passe-é€😀"


def test_overwrite_keeps_created_at_and_rotates_salt_nonce_and_ciphertext(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "tok", VALUE, now=T0)
    before = json.loads(store.path.read_text())["entries"][0]
    later = T0 + timedelta(hours=1)
    store.set("proj", "alice", "tok", VALUE, now=later)
    after = json.loads(store.path.read_text())["entries"][0]
    for field in ("salt", "nonce", "ciphertext"):
        assert before[field] != after[field], field
    assert store.list("proj", "alice") == [SecretInfo("tok", T0, later)]


def test_get_of_absent_secret_is_none(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.get("proj", "alice", "tok") is None
    store.set("proj", "alice", "other", VALUE)
    assert store.get("proj", "alice", "tok") is None


def test_missing_file_is_an_empty_store_and_is_not_created_by_reads(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    assert store.list("proj", "alice") == []
    assert store.stage("proj", "alice", ["tok"]) == {}
    assert store.delete("proj", "alice", "tok") is False
    assert not store.path.exists()


def test_stage_returns_only_present_names(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "one", "value-one-1")
    store.set("proj", "alice", "two", "value-two-2")
    staged = store.stage("proj", "alice", ["one", "absent", "two"])
    assert sorted(staged) == ["one", "two"]
    assert staged["one"].reveal() == "value-one-1"
    assert store.stage("proj", "alice", []) == {}


def test_delete_removes_only_that_secret(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "one", "value-one-1")
    store.set("proj", "alice", "two", "value-two-2")
    assert store.delete("proj", "alice", "one") is True
    assert store.get("proj", "alice", "one") is None
    assert _revealed(store, "two") == "value-two-2"
    before = store.path.read_bytes()
    assert store.delete("proj", "alice", "one") is False
    assert store.path.read_bytes() == before


def test_list_shows_names_and_metadata_but_never_values(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "b_token", VALUE, now=T0)
    store.set("proj", "alice", "a_token", VALUE + "-2", now=T0)
    store.set("proj", "bob", "c_token", VALUE, now=T0)
    listing = store.list("proj", "alice")
    assert [info.name for info in listing] == ["a_token", "b_token"]
    assert VALUE not in repr(listing)
    raw = store.path.read_bytes()
    assert VALUE.encode() not in raw
    assert b"tok-Zq9" not in raw


def test_store_file_mode_is_0600_and_no_temp_files_remain(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "tok", VALUE)
    store.set("proj", "alice", "tok", VALUE + "x")
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secrets.json", "secrets.json.lock"]


def test_store_creates_its_directory_with_mode_0700(tmp_path: Path) -> None:
    store = SecretsStore(tmp_path / "state" / "secrets.json", make_key())
    store.set("proj", "alice", "tok", VALUE)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


def test_concurrent_writers_lose_no_update(tmp_path: Path) -> None:
    key = make_key()
    stores = [make_store(tmp_path, key) for _ in range(2)]  # two handles: flock, not just the RLock

    def writer(index: int) -> None:
        for round_ in range(5):
            stores[index % 2].set("proj", "alice", f"s{index}_{round_}", f"value-{index}-{round_}")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stores[0].list("proj", "alice")) == 30


# -- caller misuse: names, values, identities -------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "A", "Token", "1abc", "_abc", "a-b", "a.b", "a b", "ä", "a" * 65, "tok\n", "a/b"],
    ids=["empty", "upper", "mixed-case", "digit-first", "underscore-first", "dash", "dot", "space",
         "non-ascii", "65-chars", "newline", "slash"],
)
def test_invalid_secret_name_refused(tmp_path: Path, name: str) -> None:
    store = make_store(tmp_path)
    for op in (
        lambda: store.set("proj", "alice", name, VALUE),
        lambda: store.get("proj", "alice", name),
        lambda: store.delete("proj", "alice", name),
        lambda: store.stage("proj", "alice", [name]),
    ):
        with pytest.raises(ValueError, match="secret name"):
            op()
    assert not store.path.exists()


def test_name_of_64_characters_accepted(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "a" * 64, VALUE)
    assert _revealed(store, "a" * 64) == VALUE


@pytest.mark.parametrize(
    "value",
    ["", "x" * (MIN_VALUE_CHARS - 1), "x" * (MAX_VALUE_BYTES + 1), "é" * (MAX_VALUE_BYTES // 2 + 1),
     "token\r\nX-Evil: 1", "token\x00abc", "token\tabc", "token\x7fabc"],
    ids=["empty", "7-chars", "64KiB-plus-1", "64KiB-plus-2-utf8", "crlf-header-injection", "nul",
         "tab", "del"],
)
def test_invalid_secret_value_refused_without_echoing_it(tmp_path: Path, value: str) -> None:
    store = make_store(tmp_path)
    with pytest.raises(ValueError, match="secret value") as info:
        store.set("proj", "alice", "tok", value)
    if value:
        assert value not in str(info.value)
    assert not store.path.exists()


@pytest.mark.parametrize(
    "value", ["x" * MIN_VALUE_CHARS, "x" * MAX_VALUE_BYTES], ids=["8-chars", "64KiB"]
)
def test_value_at_the_limits_accepted(tmp_path: Path, value: str) -> None:
    store = make_store(tmp_path)
    store.set("proj", "alice", "tok", value)
    got = store.get("proj", "alice", "tok")
    assert got is not None and got.reveal() == value


@pytest.mark.parametrize(
    ("scope", "principal"),
    [("", "alice"), ("proj", ""), ("p" * 257, "alice"), ("proj", "al\nice"), ("proj\x00", "alice")],
    ids=["empty-scope", "empty-principal", "long-scope", "newline-principal", "nul-scope"],
)
def test_invalid_scope_or_principal_refused(tmp_path: Path, scope: str, principal: str) -> None:
    store = make_store(tmp_path)
    with pytest.raises(ValueError):
        store.set(scope, principal, "tok", VALUE)
    with pytest.raises(ValueError):
        store.list(scope, principal)


def test_naive_now_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        make_store(tmp_path).set("proj", "alice", "tok", VALUE, now=datetime(2025, 1, 1))


def test_store_without_master_key_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="MasterKey"):
        SecretsStore(tmp_path / "s.json", None)  # type: ignore[arg-type]


# -- SecretValue never shows itself ------------------------------------------------------------


RENDERINGS = {
    "repr": repr,
    "str": str,
    "fstring": lambda v: f"{v}",
    "fstring-r": lambda v: f"{v!r}",
    "fstring-s": lambda v: f"{v!s}",
    "fstring-spec": lambda v: f"{v:>40}",
    "percent-s": lambda v: "%s" % v,  # noqa: UP031 - the old-style path is what is tested
    "percent-r": lambda v: "%r" % v,  # noqa: UP031
    "str-format": "{}".format,
    "in-list": lambda v: str([v]),
    "in-dict": lambda v: str({"k": v}),
    "in-exception": lambda v: str(ValueError(v)),
    "exception-repr": lambda v: repr(ValueError(v)),
}


@pytest.mark.parametrize("render", list(RENDERINGS.values()), ids=list(RENDERINGS))
def test_secret_value_rendering_is_masked(render: object) -> None:
    text = render(SecretValue(VALUE))  # type: ignore[operator]
    assert VALUE not in text
    assert "********" in text


def test_secret_value_logging_is_masked(caplog: pytest.LogCaptureFixture) -> None:
    secret = SecretValue(VALUE)
    with caplog.at_level(logging.DEBUG):
        log = logging.getLogger("stockade.test")
        log.info("token %s", secret)
        log.info("token %r", secret)
        log.info(secret)
        log.info("extra", extra={"token": secret})
    assert VALUE not in caplog.text
    assert all(VALUE not in record.getMessage() for record in caplog.records)


def test_secret_value_cannot_be_pickled() -> None:
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(TypeError, match="pickled"):
            pickle.dumps(SecretValue(VALUE), protocol=protocol)


def test_secret_value_copies_are_itself_and_it_is_immutable_and_unhashable() -> None:
    secret = SecretValue(VALUE)
    assert copy.copy(secret) is secret
    assert copy.deepcopy({"k": secret})["k"] is secret
    with pytest.raises(AttributeError):
        secret._value = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(secret)
    assert not hasattr(secret, "__dict__")


def test_secret_value_equality_is_by_value_and_only_with_secret_values() -> None:
    assert SecretValue(VALUE) == SecretValue(VALUE)
    assert SecretValue(VALUE) != SecretValue(VALUE + "x")
    assert SecretValue("é-unicode-é") == SecretValue("é-unicode-é")  # compare_digest on bytes
    assert SecretValue(VALUE) != VALUE  # a bare str never equals a wrapped secret


def test_secret_value_wraps_only_str() -> None:
    with pytest.raises(TypeError):
        SecretValue(b"bytes")  # type: ignore[arg-type]


# -- master key -------------------------------------------------------------------------------


def test_master_key_from_env_variable() -> None:
    key = MasterKey.load(env={"STOCKADE_MASTER_KEY": key_text()})
    assert repr(key) == "MasterKey('********')"


def test_master_key_defaults_to_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    material = os.urandom(32)
    monkeypatch.setenv("STOCKADE_MASTER_KEY", key_text(material))
    store = SecretsStore(tmp_path / "s.json", MasterKey.load())
    store.set("proj", "alice", "tok", VALUE)
    # The same material given explicitly opens what the process-environment key wrote.
    explicit = MasterKey.load(env={"STOCKADE_MASTER_KEY": key_text(material)})
    assert _revealed(SecretsStore(tmp_path / "s.json", explicit), "tok") == VALUE


def test_master_key_env_wins_over_key_file(tmp_path: Path) -> None:
    material = os.urandom(32)
    file_key = MasterKey.load(key_file=write_key_file(tmp_path / "k", material))
    SecretsStore(tmp_path / "s.json", file_key).set("proj", "alice", "tok", VALUE)
    env_key = MasterKey.load(env={"STOCKADE_MASTER_KEY": key_text()}, key_file=tmp_path / "k")
    with pytest.raises(SecretsUnavailable):
        SecretsStore(tmp_path / "s.json", env_key)


def test_master_key_from_file_with_mode_0600_and_0400(tmp_path: Path) -> None:
    material = os.urandom(32)
    key = MasterKey.load(env={}, key_file=write_key_file(tmp_path / "k1", material))
    store = SecretsStore(tmp_path / "s.json", key)
    store.set("proj", "alice", "tok", VALUE)
    again = MasterKey.load(env={}, key_file=write_key_file(tmp_path / "k2", material, mode=0o400))
    assert _revealed(SecretsStore(tmp_path / "s.json", again), "tok") == VALUE


def test_master_key_is_not_picklable() -> None:
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(make_key())


def test_generate_key_file_writes_a_0600_key_that_loads(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    key = generate_key_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    SecretsStore(tmp_path / "s.json", key).set("proj", "alice", "tok", VALUE)
    loaded = MasterKey.load(env={}, key_file=path)
    assert _revealed(SecretsStore(tmp_path / "s.json", loaded), "tok") == VALUE
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_generate_key_file_never_replaces_an_existing_key(tmp_path: Path) -> None:
    path = tmp_path / "master.key"
    generate_key_file(path)
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        generate_key_file(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["master.key"]
