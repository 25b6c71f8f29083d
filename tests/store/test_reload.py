"""A running Host follows the lock generation another process accepts (host.call.reload).

Two Hosts, each with its own state dir, share one store: A opens a newer generation,
B — following generations — reloads it through every check of ``Host.open`` and swaps
between calls. Waits are on the follower's condition (``follower.wait``), never sleeps;
the PostgreSQL tests use a poll interval far longer than the test, so only ``NOTIFY``
can have woken B.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from host import Host, HostConfig
from host.call.reload import ReloadEvent
from host.store import LocalStore, StateStore
from host.types import CallRequest
from tests.store.conftest import open_local
from tests.support.bundles import lock_digest, lock_entry, write_bundle, write_lock
from tests.support.hosts import ALICE, echo_manifest, echo_tool, write_policy
from tests.support.wat import echo_component

NOTIFY_ONLY_POLL_S = 3600.0  # longer than any test: only a NOTIFY can wake the watcher
WAIT_S = 60.0  # an upper bound for the reload (it compiles); the test ends as soon as it happens


@dataclass
class Repo:
    root: Path
    gen1: Path
    gen2: Path


def make_repo(root: Path) -> Repo:
    """echo 1.0.0 (echo.say) in generation 1; echo 1.1.0 (echo.say, echo.shout) in generation 2."""
    module = echo_component()
    one = write_bundle(root / "bundles" / "echo-1.0.0", echo_manifest([echo_tool()], module), module)
    two_manifest = echo_manifest(
        [echo_tool(), echo_tool(name="echo.shout")], module,
        package={"name": "echo", "version": "1.1.0", "description": "Echo.", "homepage": None},
    )
    two = write_bundle(root / "bundles" / "echo-1.1.0", two_manifest, module)
    gen1 = write_lock(root / "gen1.lock", [lock_entry(root, one)])
    gen2 = write_lock(root / "gen2.lock", [lock_entry(root, two)], generation=2, previous=lock_digest(gen1))
    write_policy(root / "policy.json", allow=["tool.call:echo.say", "tool.call:echo.shout", "echo.use"])
    return Repo(root, gen1, gen2)


def open_host(repo: Repo, lock: Path, store: StateStore, name: str) -> Host:
    from host import FilePolicyEngine  # noqa: PLC0415

    return Host.open(
        lock, config=HostConfig(state_dir=repo.root / "state" / name), secrets=None,
        policy=FilePolicyEngine(repo.root / "policy.json"), store=store,
    )


def request(tool: str = "echo.say", message: str = "hi") -> CallRequest:
    return CallRequest(principal=ALICE, session="s", tool=tool, version="1.0.0", input={"message": message})


def names(host: Host) -> set[str]:
    return {tool.name for tool in host.registry}


def pg_records(store: Any, kind: str) -> list[dict[str, Any]]:
    import json  # noqa: PLC0415

    return [json.loads(line) for chain, _, _ in store.chains() for line in store.lines(chain)
            if json.loads(line)["kind"] == kind]


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path / "repo")


@pytest.fixture
def pg_pair(pg_dsn: str) -> Iterator[tuple[StateStore, StateStore]]:
    from host.store.postgres import PostgresStore  # noqa: PLC0415

    with PostgresStore(pg_dsn) as a, PostgresStore(pg_dsn) as b:
        yield a, b


def test_host_b_serves_the_generation_host_a_accepted(repo: Repo, pg_pair: tuple[StateStore, StateStore]) -> None:
    store_a, store_b = pg_pair
    b_lock = repo.root / "b.lock"
    shutil.copyfile(repo.gen1, b_lock)
    with open_host(repo, b_lock, store_b, "b") as b:
        follower = b.follow_generations(poll_s=NOTIFY_ONLY_POLL_S)
        stale = b.prepare(request())
        assert (b.generation, names(b)) == (1, {"echo.say"})
        shutil.copyfile(repo.gen2, b_lock)  # the new lock is deployed to every machine
        with open_host(repo, repo.gen2, store_a, "a") as a:
            assert a.generation == 2
            assert follower.wait(1, timeout_s=WAIT_S) == [ReloadEvent(ok=True, generation=2, running=2)]
        assert (b.generation, names(b)) == (2, {"echo.say", "echo.shout"})
        shouted = b.call(request("echo.shout", "new tool"))
        assert shouted.ok and shouted.output == {"message": "new tool"}
        refused = b.execute(stale)  # prepared on generation 1: refused at execute
        assert refused.error is not None and refused.error.code == "APPROVAL_REQUIRED"
        assert "changed since it was prepared" in refused.error.message
        assert b.execute(b.prepare(request())).ok
        watcher = follower.thread
    assert not watcher.is_alive()
    outcomes = [r for r in pg_records(store_a, "call.outcome") if r.get("ok")]
    assert {r["generation"] for r in outcomes} == {2}


def test_tampered_newer_generation_keeps_the_old_one_and_is_audited(
    repo: Repo, pg_pair: tuple[StateStore, StateStore], tmp_path: Path
) -> None:
    store_a, store_b = pg_pair
    b_repo = tmp_path / "b-repo"  # machine B's own copy of the bundles
    shutil.copytree(repo.root / "bundles", b_repo / "bundles")
    b_lock = b_repo / "b.lock"
    shutil.copyfile(repo.gen1, b_lock)
    with open_host(repo, b_lock, store_b, "b") as b:
        follower = b.follow_generations(poll_s=NOTIFY_ONLY_POLL_S)
        module = b_repo / "bundles" / "echo-1.1.0" / "module.wasm"
        module.write_bytes(module.read_bytes() + b"\x00")  # an attacker's module behind the new lock
        shutil.copyfile(repo.gen2, b_lock)
        with open_host(repo, repo.gen2, store_a, "a"):
            (event,) = follower.wait(1, timeout_s=WAIT_S)
        assert (event.ok, event.generation, event.running, event.code) == (False, 2, 1, "DIGEST_MISMATCH")
        assert (b.generation, names(b)) == (1, {"echo.say"})
        served = b.call(request())
        assert served.ok
        assert b.call(request("echo.shout")).error.code == "TOOL_NOT_FOUND"  # type: ignore[union-attr]
    refusals = pg_records(store_a, "lock.reload_refused")
    assert [(r["generation"], r["running"], r["code"]) for r in refusals] == [(2, 1, "DIGEST_MISMATCH")]
    assert [r["generation"] for r in pg_records(store_a, "call.outcome") if r.get("ok")] == [1]


def test_refused_reload_is_retried_once_the_lock_file_is_fixed(repo: Repo, tmp_path: Path) -> None:
    with open_local(tmp_path / "shared") as store:
        b_lock = repo.root / "b.lock"
        shutil.copyfile(repo.gen1, b_lock)
        with open_host(repo, b_lock, store, "b") as b:
            follower = b.follow_generations(poll_s=0.05)  # local store: polling
            with open_host(repo, repo.gen2, store, "a"):  # B's lock file still names generation 1
                (refused,) = follower.wait(1, timeout_s=WAIT_S)
                assert (refused.ok, refused.code, b.generation) == (False, "LOCK_ROLLBACK", 1)
                assert follower.watcher.wait_checks(3, timeout_s=WAIT_S)  # still ahead, same file
                assert follower.events == [refused]
                shutil.copyfile(repo.gen2, b_lock)
                events = follower.wait(2, timeout_s=WAIT_S)
            assert events == [refused, ReloadEvent(ok=True, generation=2, running=2)]
            assert names(b) == {"echo.say", "echo.shout"}
        kinds = [r["kind"] for r in _records(store)]
    assert kinds.count("lock.reload_refused") == 1  # polled many times, audited once


def test_swap_waits_for_the_call_in_flight_which_runs_wholly_on_the_old_generation(
    repo: Repo, tmp_path: Path
) -> None:
    with open_local(tmp_path / "shared") as store:
        b_lock = repo.root / "b.lock"
        shutil.copyfile(repo.gen1, b_lock)
        with open_host(repo, b_lock, store, "b") as b:
            follower = b.follow_generations(poll_s=0.05)
            inside, release = threading.Event(), threading.Event()
            results: list[Any] = []

            def hold(stage: str, info: Any) -> None:
                if stage == "authorized":
                    inside.set()
                    release.wait()

            caller = threading.Thread(target=lambda: results.append(b.call(request(), progress=hold)))
            caller.start()
            inside.wait()
            shutil.copyfile(repo.gen2, b_lock)
            with open_host(repo, repo.gen2, store, "a"):
                gate = b._gate  # observe that the swap waits for the call
                with gate._cond:
                    assert gate._cond.wait_for(lambda: gate._swapping, timeout=WAIT_S)
                assert b.generation == 1  # the swap waits for the call in flight
                release.set()
                caller.join()
                assert follower.wait(1, timeout_s=WAIT_S)[0].ok
            assert b.generation == 2
    (result,) = results
    assert result.ok
    records = [r for r in _records(store) if r["kind"] == "call.outcome"]
    assert [r["generation"] for r in records] == [1]


def _records(store: LocalStore) -> list[dict[str, Any]]:
    import json  # noqa: PLC0415

    return [json.loads(line) for line in Path(store.audit.path).read_text().splitlines()]


def test_closing_the_host_stops_the_watcher_thread(repo: Repo, tmp_path: Path) -> None:
    with open_local(tmp_path / "shared") as store:
        host = open_host(repo, repo.gen1, store, "b")
        follower = host.follow_generations(poll_s=NOTIFY_ONLY_POLL_S)
        assert follower.thread.is_alive()
        assert host.follow_generations() is follower
        host.close()  # returns at once: the stop wakes the watcher's select
        assert not follower.thread.is_alive()
        assert not [t for t in threading.enumerate() if t.name == "stockade-generation-watch"]
        with pytest.raises(RuntimeError):
            host.follow_generations()


def test_postgres_watcher_thread_and_listener_end_with_the_host(
    repo: Repo, pg_pair: tuple[StateStore, StateStore]
) -> None:
    _, store_b = pg_pair
    host = open_host(repo, repo.gen1, store_b, "b")
    follower = host.follow_generations(poll_s=NOTIFY_ONLY_POLL_S)
    assert follower.thread.is_alive()
    host.close()
    assert not follower.thread.is_alive()
