"""Trust state only moves forward (docs/design.md §4, CONTRIBUTING.md principle 8): rollback and fork are refused.

After every refusal the state directory is compared byte for byte with its earlier copy.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from host.config import HostConfig
from host.errors import LockInvalid, LockRollback
from host.trust.lock import LoadedLock, LockState, load_lock
from tests.support.bundles import (
    lock_digest,
    lock_entry,
    make_manifest,
    state_snapshot,
    write_bundle,
    write_lock,
)

FIXED = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


class Chain:
    """A repo of lock generations over one bundle, plus the host state directory."""

    def __init__(self, tmp_path: Path) -> None:
        self.repo = tmp_path / "repo"
        self.config = HostConfig(state_dir=tmp_path / "state")
        self.bundle = write_bundle(self.repo / "bundles" / "tracker", make_manifest())
        self.state = LockState(self.config.state_dir, now=lambda: FIXED)

    def lock(self, generation: int, previous: str | None, *, name: str | None = None, extra: int = 0) -> LoadedLock:
        """Write and load a lock; ``extra`` adds a second package so contents differ."""
        entries = [lock_entry(self.repo, self.bundle)]
        if extra:
            other = make_manifest(package={"name": "notes", "version": f"1.0.{extra}"},
                                  tools=[{**make_manifest()["tools"][0], "name": "notes.list-issues"}])
            entries.append(lock_entry(self.repo, write_bundle(self.repo / "bundles" / f"notes{extra}", other)))
        path = write_lock(self.repo / (name or f"gen{generation}.lock"), entries,
                          generation=generation, previous=previous)
        return load_lock(path, config=self.config, trusted_keys=None)

    def chain(self, generations: int) -> list[LoadedLock]:
        locks: list[LoadedLock] = []
        previous: str | None = None
        for generation in range(1, generations + 1):
            locks.append(self.lock(generation, previous))
            previous = locks[-1].digest
        return locks


@pytest.fixture
def chain(tmp_path: Path) -> Chain:
    return Chain(tmp_path)


def assert_refused_unchanged(chain: Chain, lock: LoadedLock, reason: str) -> None:
    before = state_snapshot(chain.config.state_dir)
    with pytest.raises(LockRollback) as caught:
        chain.state.accept(lock)
    assert caught.value.code == "LOCK_ROLLBACK"
    assert caught.value.details["reason"] == reason
    assert state_snapshot(chain.config.state_dir) == before


def test_lock_generation_rollback_refused(chain: Chain) -> None:
    one, two = chain.chain(2)
    chain.state.accept(one)
    chain.state.accept(two)
    assert_refused_unchanged(chain, one, "rollback")
    assert chain.state.current().generation == 2  # type: ignore[union-attr]


def test_same_generation_different_content_fork_refused(chain: Chain) -> None:
    one = chain.lock(1, None)
    fork = chain.lock(1, None, name="fork.lock", extra=1)
    assert fork.digest != one.digest
    chain.state.accept(one)
    assert_refused_unchanged(chain, fork, "fork")


def test_next_generation_not_chaining_to_accepted_refused(chain: Chain) -> None:
    one = chain.lock(1, None)
    chain.state.accept(one)
    unchained = chain.lock(2, "e" * 64)
    assert_refused_unchanged(chain, unchained, "fork")


def test_next_generation_chaining_to_a_forked_sibling_refused(chain: Chain) -> None:
    one = chain.lock(1, None)
    sibling = chain.lock(1, None, name="sibling.lock", extra=2)
    chain.state.accept(one)
    assert_refused_unchanged(chain, chain.lock(2, sibling.digest), "fork")


def test_same_lock_again_accepted_without_rewriting_state(chain: Chain) -> None:
    one = chain.lock(1, None)
    chain.state.accept(one)
    before = state_snapshot(chain.config.state_dir)
    chain.state.accept(chain.lock(1, None, name="again.lock"))  # same content, other file
    assert state_snapshot(chain.config.state_dir) == before


def test_lock_digest_ignores_formatting(chain: Chain) -> None:
    one = chain.lock(1, None)
    compact = chain.repo / "compact.lock"
    compact.write_text(json.dumps(json.loads(one.path.read_bytes()), separators=(",", ":"), sort_keys=True))
    again = load_lock(compact, config=chain.config, trusted_keys=None)
    assert again.digest == one.digest == lock_digest(one.path)


def test_forward_generations_accepted_and_recorded(chain: Chain) -> None:
    locks = chain.chain(3)
    for lock in locks:
        chain.state.accept(lock)
    state = chain.state.current()
    assert state is not None
    assert (state.generation, state.digest) == (3, locks[-1].digest)
    assert [h.generation for h in state.history] == [1, 2, 3]
    assert state.overrides == ()


def test_generation_gap_accepted(chain: Chain) -> None:
    # A host may never see some generations; only the next one can be checked for chaining.
    chain.state.accept(chain.lock(1, None))
    chain.state.accept(chain.lock(5, "d" * 64))
    assert chain.state.current().generation == 5  # type: ignore[union-attr]


def test_unsafe_override_accepts_rollback_warns_and_is_recorded(
    chain: Chain, caplog: pytest.LogCaptureFixture
) -> None:
    one, two = chain.chain(2)
    chain.state.accept(one)
    chain.state.accept(two)
    with caplog.at_level(logging.WARNING, logger="stockade.lock"):
        chain.state.accept(one, unsafe_accept_rollback=True)
    assert any("unsafe_accept_rollback" in r.getMessage() for r in caplog.records)
    state = chain.state.current()
    assert state is not None and state.generation == 1
    [override] = state.overrides
    assert override.model_dump() == {
        "at": FIXED.isoformat(), "reason": "rollback",
        "old_generation": 2, "old_digest": two.digest, "new_generation": 1, "new_digest": one.digest,
        "package": None, "old_version": None, "new_version": None,
    }
    on_disk = json.loads(chain.state.path.read_bytes())
    assert on_disk["overrides"][0]["reason"] == "rollback"


def test_override_not_needed_is_not_recorded(chain: Chain) -> None:
    one = chain.lock(1, None)
    chain.state.accept(one, unsafe_accept_rollback=True)
    assert chain.state.current().overrides == ()  # type: ignore[union-attr]


def test_check_never_writes(chain: Chain) -> None:
    one, two = chain.chain(2)
    chain.state.check(one)
    assert state_snapshot(chain.config.state_dir) == {}
    chain.state.accept(two)
    before = state_snapshot(chain.config.state_dir)
    with pytest.raises(LockRollback):
        chain.state.check(one)
    assert state_snapshot(chain.config.state_dir) == before


@pytest.mark.parametrize(
    "content",
    [b"", b"{", b"null", b"{}", b'{"format": "stockade.lock-state/1", "generation": 0, "digest": "x",'
     b' "history": []}', b"\xff\xfe", b'{"generation": 9, "generation": 1}'],
    ids=["empty", "truncated", "null", "empty-object", "bad-values", "not-utf8", "duplicate-key"],
)
def test_corrupt_state_fails_closed_never_treated_as_empty(chain: Chain, content: bytes) -> None:
    chain.config.state_dir.mkdir(parents=True)
    chain.state.path.write_bytes(content)
    before = state_snapshot(chain.config.state_dir)
    with pytest.raises(LockInvalid) as caught:
        chain.state.accept(chain.lock(1, None))
    assert caught.value.code == "LOCK_INVALID"
    assert state_snapshot(chain.config.state_dir) == before


def test_state_written_atomically_without_leftovers(chain: Chain) -> None:
    chain.state.accept(chain.lock(1, None))
    names = sorted(p.name for p in chain.config.state_dir.iterdir())
    assert names == [".lock-state.lock", "lock-state.json"]
    assert (chain.state.path.stat().st_mode & 0o777) == 0o600


def test_failed_write_refuses_and_keeps_state(chain: Chain, monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = chain.chain(2)
    chain.state.accept(one)
    before = state_snapshot(chain.config.state_dir)

    def disk_full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(LockInvalid, match="cannot write"):
        chain.state.accept(two)
    monkeypatch.undo()
    assert state_snapshot(chain.config.state_dir) == before  # no torn file, no temp file left


def test_state_file_over_size_cap_fails_closed(chain: Chain) -> None:
    chain.config.state_dir.mkdir(parents=True)
    with open(chain.state.path, "wb") as handle:
        handle.truncate(4 * 1024 * 1024 + 1)
    with pytest.raises(LockInvalid, match="over the limit"):
        chain.state.accept(chain.lock(1, None))


def test_history_is_capped_at_1000_entries(chain: Chain) -> None:
    one = chain.lock(1, None)
    chain.state.accept(one)
    state = json.loads(chain.state.path.read_bytes())
    state["history"] = [{"generation": 1, "digest": one.digest, "accepted_at": "x"}] * 1000
    chain.state.path.write_text(json.dumps(state))
    chain.state.accept(chain.lock(2, one.digest))
    history = chain.state.current().history  # type: ignore[union-attr]
    assert len(history) == 1000 and history[-1].generation == 2
