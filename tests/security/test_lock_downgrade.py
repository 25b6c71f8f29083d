"""Rollback protection that does not trust the lock's own numbering (issue 9.5 a, c).

Attacks: someone who can write the lock wraps an old, validly signed package version in
a newer generation; or numbers a lock 2^53-1 so that every later legitimate lock looks
like a rollback. The accepted state keeps the highest version of every package and lets
a lock be at most MAX_GENERATION_STEP generations ahead. After every refusal the state
directory is compared byte for byte with its earlier copy.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from host import FilePolicyEngine, Host
from host.config import HostConfig
from host.errors import LockRollback
from host.trust.lock import (
    MAX_GENERATION_STEP,
    LoadedLock,
    LockState,
    TrustedKeys,
    key_id_for,
    load_lock,
    semver_precedence,
)
from sdk.bundle import generate_keypair
from tests.support.bundles import lock_entry, make_manifest, state_snapshot, write_bundle, write_lock
from tests.support.hosts import echo_manifest, echo_tool, write_policy
from tests.support.wat import echo_component

FIXED = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class Repo:
    """Signed bundles of ``tracker`` at several versions, locks over them, one host state."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path / "repo"
        self.private, public = generate_keypair()
        self.keys = TrustedKeys({key_id_for(public): public})
        self.config = HostConfig(state_dir=tmp_path / "state", require_signatures=True)
        self.state = LockState(self.config.state_dir, now=lambda: FIXED)

    def entry(self, version: str, name: str = "tracker") -> dict[str, Any]:
        manifest = make_manifest(package={"name": name, "version": version, "description": "", "homepage": None},
                                 tools=[{**make_manifest()["tools"][0], "name": f"{name}.list-issues"}])
        bundle = write_bundle(self.root / "bundles" / f"{name}-{version}", manifest)
        return lock_entry(self.root, bundle, private_key=self.private)

    def lock(self, generation: int, previous: str | None, *entries: dict[str, Any]) -> LoadedLock:
        path = write_lock(self.root / f"gen{generation}.lock", list(entries), generation=generation,
                          previous=previous)
        return load_lock(path, config=self.config, trusted_keys=self.keys)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path)


def assert_refused_unchanged(repo: Repo, lock: LoadedLock, reason: str) -> LockRollback:
    before = state_snapshot(repo.config.state_dir)
    with pytest.raises(LockRollback) as caught:
        repo.state.accept(lock)
    assert caught.value.code == "LOCK_ROLLBACK"
    assert caught.value.details["reason"] == reason
    assert state_snapshot(repo.config.state_dir) == before
    return caught.value


def test_old_signed_package_wrapped_in_newer_generation_refused(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.2.0"))
    two = repo.lock(2, one.digest, repo.entry("1.3.0"))
    repo.state.accept(one)
    repo.state.accept(two)
    # The attacker re-uses the old entry (a valid signature by a trusted key) in a lock
    # that chains correctly and carries the next generation: every signature verifies.
    three = repo.lock(3, two.digest, repo.entry("1.2.0"))
    refused = assert_refused_unchanged(repo, three, "downgrade")
    assert refused.details["package"] == "tracker"
    assert (refused.details["accepted_version"], refused.details["offered_version"]) == ("1.3.0", "1.2.0")
    assert "1.2.0 is older than 1.3.0" in refused.message


def test_old_package_readded_after_removal_refused(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.3.0"), repo.entry("1.0.0", name="notes"))
    two = repo.lock(2, one.digest, repo.entry("1.0.0", name="notes"))  # tracker removed
    repo.state.accept(one)
    repo.state.accept(two)
    three = repo.lock(3, two.digest, repo.entry("1.2.0"), repo.entry("1.0.0", name="notes"))
    assert_refused_unchanged(repo, three, "downgrade")


def test_prerelease_of_accepted_version_is_a_downgrade(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("2.0.0"))
    repo.state.accept(one)
    assert_refused_unchanged(repo, repo.lock(2, one.digest, repo.entry("2.0.0-rc.1")), "downgrade")


def test_package_upgrades_and_new_packages_are_recorded(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.2.0"))
    two = repo.lock(2, one.digest, repo.entry("1.10.0"), repo.entry("0.1.0", name="notes"))
    repo.state.accept(one)
    repo.state.accept(two)
    on_disk = json.loads(repo.state.path.read_bytes())
    assert on_disk["format"] == "stockade.lock-state/2"
    assert on_disk["packages"] == {
        "tracker": {"version": "1.10.0", "generation": 2},
        "notes": {"version": "0.1.0", "generation": 2},
    }


def test_unsafe_override_accepts_downgrade_lowers_mark_and_is_recorded(
    repo: Repo, caplog: pytest.LogCaptureFixture
) -> None:
    one = repo.lock(1, None, repo.entry("1.3.0"))
    two = repo.lock(2, one.digest, repo.entry("1.2.0"))
    repo.state.accept(one)
    with caplog.at_level(logging.WARNING, logger="stockade.lock"):
        assert repo.state.accept(two, unsafe_accept_rollback=True) == ("downgrade",)
    assert any("unsafe_accept_rollback" in r.getMessage() and "downgrade" in r.getMessage()
               for r in caplog.records)
    state = repo.state.current()
    assert state is not None and state.packages["tracker"].version == "1.2.0"
    [override] = state.overrides
    assert (override.reason, override.package, override.old_version, override.new_version) == (
        "downgrade", "tracker", "1.3.0", "1.2.0")
    # The operator's rollback is now the baseline: the next generation keeping 1.2.0 is fine.
    repo.state.accept(repo.lock(3, two.digest, repo.entry("1.2.0")))


def test_generation_jump_to_2_pow_53_minus_1_refused_and_later_locks_still_accepted(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.2.0"))
    repo.state.accept(one)
    burned = repo.lock(2**53 - 1, "e" * 64, repo.entry("1.2.0"))
    refused = assert_refused_unchanged(repo, burned, "jump")
    assert "at most 16" in refused.message and "16 generations" in refused.hint
    repo.state.accept(repo.lock(2, one.digest, repo.entry("1.2.0")))  # the legitimate successor
    assert repo.state.current().generation == 2  # type: ignore[union-attr]


def test_generation_step_bound_is_exact(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.2.0"))
    repo.state.accept(one)
    assert_refused_unchanged(repo, repo.lock(2 + MAX_GENERATION_STEP, "d" * 64, repo.entry("1.2.0")), "jump")
    repo.state.accept(repo.lock(1 + MAX_GENERATION_STEP, "d" * 64, repo.entry("1.2.0")))
    assert repo.state.current().generation == 1 + MAX_GENERATION_STEP  # type: ignore[union-attr]


def test_unsafe_override_accepts_jump_and_records_it(repo: Repo) -> None:
    repo.state.accept(repo.lock(1, None, repo.entry("1.2.0")))
    assert repo.state.accept(repo.lock(1000, "d" * 64, repo.entry("1.2.0")), unsafe_accept_rollback=True) == (
        "jump",)
    [override] = repo.state.current().overrides  # type: ignore[union-attr]
    assert (override.reason, override.old_generation, override.new_generation) == ("jump", 1, 1000)


def test_check_reports_downgrade_without_writing(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.3.0"))
    repo.state.accept(one)
    before = state_snapshot(repo.config.state_dir)
    with pytest.raises(LockRollback, match="downgrade"):
        repo.state.check(repo.lock(2, one.digest, repo.entry("1.2.0")))
    assert state_snapshot(repo.config.state_dir) == before


def test_version_1_state_file_is_read_then_upgraded_with_package_versions(repo: Repo) -> None:
    one = repo.lock(1, None, repo.entry("1.3.0"))
    repo.config.state_dir.mkdir(parents=True)
    repo.state.path.write_text(json.dumps({
        "format": "stockade.lock-state/1", "generation": 1, "digest": one.digest,
        "history": [{"generation": 1, "digest": one.digest, "accepted_at": "x"}], "overrides": []}))
    repo.state.accept(one)  # the same lock: the package versions are recorded now
    assert json.loads(repo.state.path.read_bytes())["packages"] == {"tracker": {"version": "1.3.0",
                                                                                 "generation": 1}}
    assert_refused_unchanged(repo, repo.lock(2, one.digest, repo.entry("1.2.0")), "downgrade")


@pytest.mark.parametrize(
    ("lower", "higher"),
    [("1.2.0", "1.3.0"), ("1.9.0", "1.10.0"), ("1.0.0-alpha", "1.0.0"), ("1.0.0-alpha", "1.0.0-alpha.1"),
     ("1.0.0-alpha.1", "1.0.0-alpha.beta"), ("1.0.0-beta.2", "1.0.0-beta.11"), ("1.0.0-rc.1", "1.0.0"),
     ("0.9.9", "1.0.0")],
    ids=lambda v: v,
)
def test_semver_precedence_follows_semver_org(lower: str, higher: str) -> None:
    assert semver_precedence(lower) < semver_precedence(higher)


def test_semver_precedence_ignores_build_metadata() -> None:
    assert semver_precedence("1.0.0+build.1") == semver_precedence("1.0.0+build.2") == semver_precedence("1.0.0")


def _echo_lock(root: Path, version: str, generation: int, previous: str | None) -> Path:
    module = echo_component()
    manifest = echo_manifest([echo_tool()], module,
                             package={"name": "echo", "version": version, "description": "", "homepage": None})
    bundle = write_bundle(root / "bundles" / f"echo-{version}", manifest, module)
    return write_lock(root / f"gen{generation}.lock", [lock_entry(root, bundle)], generation=generation,
                      previous=previous)


def test_host_open_refuses_downgrade_and_audits_the_override(tmp_path: Path) -> None:
    policy: FilePolicyEngine = write_policy(tmp_path / "policy.json", allow=["tool.call:echo.say", "echo.use"])
    config = HostConfig(state_dir=tmp_path / "state")
    audit = tmp_path / "audit.log"
    first = _echo_lock(tmp_path, "1.1.0", 1, None)
    with Host.open(first, config=config, secrets=None, policy=policy, audit=audit):
        pass
    older = _echo_lock(tmp_path, "1.0.0", 2, load_lock(first, config=config, trusted_keys=None).digest)
    with pytest.raises(LockRollback, match="downgrade"):
        Host.open(older, config=config, secrets=None, policy=policy, audit=audit)
    with Host.open(older, config=config, secrets=None, policy=policy, audit=audit, unsafe_accept_rollback=True):
        pass
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    accepted = [r for r in records if r["kind"] == "lock.accepted"]
    assert [a["overridden"] for a in accepted] == [[], ["downgrade"]]
    assert accepted[-1]["unsafe_accept_rollback"] is True
