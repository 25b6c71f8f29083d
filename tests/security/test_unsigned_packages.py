"""Trusted keys configured ⇒ package signatures required, unless ``unsafe_allow_unsigned``.

Attack: an operator configures trusted keys and believes only signed packages load; an
attacker who can edit the lock adds (or swaps in) an *unsigned* package, which used to be
accepted because signatures were only checked when present. Now the package is refused
(SIGNATURE_INVALID, ``reason="unsigned"``); the opt-out is named ``unsafe_``, logged and
recorded in the ``lock.accepted`` audit record (CONTRIBUTING.md principle 7).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from host import Host, HostConfig
from host.errors import SignatureInvalid
from host.trust.lock import LockState, TrustedKeys, load_lock
from sdk.bundle import generate_keypair, write_keys_file
from tests.support.bundles import lock_entry, make_manifest, state_snapshot, write_bundle, write_lock
from tests.support.hosts import echo_manifest, echo_tool, write_policy
from tests.support.wat import echo_component

WARNING = (
    "unsafe_allow_unsigned is on: packages without a signature are accepted although "
    "trusted keys may be configured."
)


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "trusted-keys.json"
    write_keys_file(path, [generate_keypair()[1]])
    return path


def _unsigned_lock(root: Path) -> Path:
    bundle = write_bundle(root / "bundles" / "tracker", make_manifest())
    return write_lock(root / "stockade.lock", [lock_entry(root, bundle)])


def test_unsigned_package_smuggled_into_a_lock_refused_when_keys_are_trusted(tmp_path: Path, keys_file: Path) -> None:
    lock = _unsigned_lock(tmp_path / "repo")
    config = HostConfig(state_dir=tmp_path / "state", trusted_keys_file=keys_file)
    with pytest.raises(SignatureInvalid, match=r"tracker@1\.2\.0 is not signed, and this host requires") as caught:
        load_lock(lock, config=config, trusted_keys=None)
    assert caught.value.code == "SIGNATURE_INVALID"
    assert caught.value.details["reason"] == "unsigned"
    assert "unsafe_allow_unsigned" in caught.value.hint
    # the same through keys handed in directly
    with pytest.raises(SignatureInvalid, match="is not signed"):
        load_lock(lock, config=HostConfig(state_dir=tmp_path / "s2"), trusted_keys=TrustedKeys.load(keys_file))
    assert state_snapshot(tmp_path / "state") == {}


def test_unsigned_package_accepted_with_unsafe_allow_unsigned_and_warned(
    tmp_path: Path, keys_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    lock = _unsigned_lock(tmp_path / "repo")
    with caplog.at_level(logging.WARNING, logger="stockade.config"):
        config = HostConfig(state_dir=tmp_path / "state", trusted_keys_file=keys_file, unsafe_allow_unsigned=True)
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [WARNING]
    loaded = load_lock(lock, config=config, trusted_keys=None)
    assert [p.binding.package for p in loaded.packages] == ["tracker"]
    LockState(config.state_dir).accept(loaded)


def test_unsafe_allow_unsigned_still_refuses_a_signature_by_an_untrusted_key(tmp_path: Path, keys_file: Path) -> None:
    root = tmp_path / "repo"
    bundle = write_bundle(root / "bundles" / "tracker", make_manifest())
    rogue = generate_keypair()[0]
    lock = write_lock(root / "stockade.lock", [lock_entry(root, bundle, private_key=rogue)])
    config = HostConfig(state_dir=tmp_path / "state", trusted_keys_file=keys_file, unsafe_allow_unsigned=True)
    with pytest.raises(SignatureInvalid, match="not a trusted key"):
        load_lock(lock, config=config, trusted_keys=None)


def test_without_trusted_keys_unsigned_packages_load_as_before(tmp_path: Path) -> None:
    lock = _unsigned_lock(tmp_path / "repo")
    loaded = load_lock(lock, config=HostConfig(state_dir=tmp_path / "state"), trusted_keys=None)
    assert loaded.lock.packages[0].signature is None
    assert [p.binding.package for p in loaded.packages] == ["tracker"]


def test_require_signatures_and_unsafe_allow_unsigned_contradict(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="contradict"):
        HostConfig(state_dir=tmp_path, require_signatures=True, unsafe_allow_unsigned=True)


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("waived", [False, True], ids=["default", "unsafe"])
def test_host_open_with_unsigned_package_refused_or_audited(tmp_path: Path, keys_file: Path, waived: bool) -> None:
    module = echo_component()
    bundle = write_bundle(tmp_path / "bundles" / "echo", echo_manifest([echo_tool()], module), module)
    lock = write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])
    policy = write_policy(tmp_path / "policy.json", allow=["tool.call:echo.say", "echo.use"])
    config = HostConfig(state_dir=tmp_path / "state", trusted_keys_file=keys_file, unsafe_allow_unsigned=waived)
    audit = tmp_path / "audit.log"
    if not waived:
        with pytest.raises(SignatureInvalid, match="is not signed"):
            Host.open(lock, config=config, secrets=None, policy=policy, audit=audit)
        return
    with Host.open(lock, config=config, secrets=None, policy=policy, audit=audit):
        pass
    (accepted,) = [r for r in _audit(audit) if r["kind"] == "lock.accepted"]
    assert accepted["unsafe_allow_unsigned"] is True


def test_default_host_records_unsafe_allow_unsigned_false(tmp_path: Path) -> None:
    module = echo_component()
    bundle = write_bundle(tmp_path / "bundles" / "echo", echo_manifest([echo_tool()], module), module)
    lock = write_lock(tmp_path / "stockade.lock", [lock_entry(tmp_path, bundle)])
    policy = write_policy(tmp_path / "policy.json", allow=["tool.call:echo.say", "echo.use"])
    with Host.open(lock, config=HostConfig(state_dir=tmp_path / "state"), secrets=None, policy=policy,
                   audit=tmp_path / "audit.log"):
        pass
    (accepted,) = [r for r in _audit(tmp_path / "audit.log") if r["kind"] == "lock.accepted"]
    assert accepted["unsafe_allow_unsigned"] is False
