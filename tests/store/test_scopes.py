"""Scopes, one contract on both backends: each use counted once and never past a signed
bound, on the store's clock, with its audit record; forged rows, other principals and
sessions, revocation from another process, and a fleet of processes and threads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from host.approverkey import ApproverKey, sign_scope
from host.audit.log import AuditLog, verify
from host.errors import ApprovalRequired, ApproverKeyMissing, ScopeInvalid
from host.formats.scope import SignedScope, build_scope, scope_tool
from host.scopes import LocalScopes, ScopeUse
from host.signing import TrustedKeys
from host.store import LocalStore, StateStore
from tests.support.approver import APPROVER

REPO = Path(__file__).resolve().parents[2]
TRUSTED = TrustedKeys({APPROVER.key_id: APPROVER.public_bytes})
IDENTITY = "1" * 64
TOOL = ("tracker.create-issue", "1.2.0")
Opener = Callable[[], StateStore]


@pytest.fixture(params=["local", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Opener, str]]:
    """(kind, opener, where): ``where`` is the state dir or the DSN other processes open."""
    if request.param == "local":
        state = tmp_path / "state"

        def local() -> StateStore:
            return LocalStore(state, audit=AuditLog(tmp_path / "audit.log"), owns_audit=True,
                              trusted_approver_keys=TRUSTED)

        yield "local", local, str(state)
    else:
        dsn = request.getfixturevalue("pg_dsn")
        from host.store.postgres import PostgresStore  # noqa: PLC0415

        yield "postgres", lambda: PostgresStore(dsn, approver=APPROVER), dsn


@pytest.fixture
def store(backend: tuple[str, Opener, str]) -> Iterator[StateStore]:
    opened = backend[1]()
    try:
        yield opened
    finally:
        opened.close()


def signed_scope(
    *, max_calls: int = 5, total: int | None = None, for_s: float = 3600.0, session: str | None = None,
    subject: str = "ci-bot", inputs: list[str] | None = None, key: ApproverKey = APPROVER, now: float | None = None,
) -> SignedScope:
    tools = [scope_tool(*TOOL, identity=IDENTITY, max_calls=max_calls, inputs=inputs),
             scope_tool("tracker.comment", "1.2.0", identity=IDENTITY, max_calls=max_calls)]
    scope = build_scope(project="p", subject=subject, job="nightly", issued_by="alice", tools=tools,
                        for_s=for_s, lock_generation=1, session=session, max_calls_total=total, now=now)
    return sign_scope(key, scope)


def use(scope_id: str, **overrides: Any) -> ScopeUse:
    fields: dict[str, Any] = {
        "scope_id": scope_id, "project": "p", "subject": "ci-bot", "session": "s1", "tool": TOOL[0],
        "version": TOOL[1], "identity": IDENTITY, "input_sha256": "2" * 64, "action_digest": "3" * 64,
    }
    fields.update(overrides)
    return ScopeUse(**fields)


def reason(call: Callable[[], object]) -> str:
    with pytest.raises(ApprovalRequired) as caught:
        call()
    assert caught.value.code == "APPROVAL_REQUIRED"
    return str(caught.value.details["reason"])


def chain(store: StateStore, kind: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The project's records, exported to a file that must verify."""
    path = tmp_path / "chain.jsonl"
    if kind == "local":
        data = Path(store.audit.path).read_bytes()  # type: ignore[attr-defined]
    else:
        data = "".join(line + "\n" for line in store.lines("project:p")).encode()  # type: ignore[attr-defined]
    path.write_bytes(data)
    report = verify(path)
    assert report.ok, report.reason
    return [json.loads(line) for line in data.splitlines()]


# -- the contract ------------------------------------------------------------------------------


def test_a_scope_runs_exactly_max_calls_then_is_exhausted(
    store: StateStore, backend: tuple[str, Opener, str], tmp_path: Path
) -> None:
    signed = signed_scope(max_calls=3)
    store.scopes.add(signed)
    left = [store.scopes.redeem(use(signed.scope.id)).remaining for _ in range(3)]
    assert left == [2, 1, 0]
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id))) == "scope_exhausted"
    state = store.scopes.get(signed.scope.id)
    assert state.used == {"tracker.create-issue@1.2.0": 3} and state.used_total == 3
    kinds = Counter(r["kind"] for r in chain(store, backend[0], tmp_path))
    assert kinds["scope.issued"] == 1 and kinds["scope.redeemed"] == 3 and kinds["scope.exhausted"] == 1


def test_max_calls_total_bounds_the_tools_together(store: StateStore) -> None:
    signed = signed_scope(max_calls=5, total=3)
    store.scopes.add(signed)
    store.scopes.redeem(use(signed.scope.id))
    store.scopes.redeem(use(signed.scope.id, tool="tracker.comment"))
    assert store.scopes.redeem(use(signed.scope.id)).remaining_total == 0
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, tool="tracker.comment"))) == "scope_exhausted"


def test_a_refused_use_counts_nothing(store: StateStore) -> None:
    signed = signed_scope(max_calls=1)
    store.scopes.add(signed)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, version="9.9.9"))) == "not_in_scope"
    assert store.scopes.get(signed.scope.id).used_total == 0
    store.scopes.redeem(use(signed.scope.id))


def test_principal_b_presenting_a_scope_of_a_is_refused(store: StateStore) -> None:
    signed = signed_scope()
    store.scopes.add(signed)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, subject="mallory"))) == "not_in_scope"
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, project="q"))) == "not_in_scope"
    assert store.scopes.get(signed.scope.id).used_total == 0


def test_a_scope_naming_a_session_is_redeemable_only_there(store: StateStore) -> None:
    signed = signed_scope(session="s1")
    store.scopes.add(signed)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, session="s2"))) == "not_in_scope"
    store.scopes.redeem(use(signed.scope.id, session="s1"))


def test_a_rebuilt_package_identity_is_not_in_scope(store: StateStore) -> None:
    signed = signed_scope()
    store.scopes.add(signed)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, identity="4" * 64))) == "not_in_scope"


def test_a_scope_naming_inputs_covers_only_those_inputs(store: StateStore) -> None:
    signed = signed_scope(inputs=["2" * 64])
    store.scopes.add(signed)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id, input_sha256="5" * 64))) == "not_in_scope"
    store.scopes.redeem(use(signed.scope.id))


def test_an_unknown_scope_id_is_not_in_scope(store: StateStore) -> None:
    assert reason(lambda: store.scopes.redeem(use("scope_" + "0" * 32))) == "not_in_scope"
    with pytest.raises(ScopeInvalid):
        store.scopes.get("scope_" + "0" * 32)


def test_a_scope_signed_by_an_untrusted_key_is_not_in_scope(store: StateStore) -> None:
    signed = signed_scope(key=ApproverKey.generate())
    store.scopes.add(signed)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id))) == "not_in_scope"


def test_a_scope_crossing_not_after_between_two_calls_is_scope_expired(
    store: StateStore, backend: tuple[str, Opener, str], tmp_path: Path
) -> None:
    if backend[0] == "local":  # an injected clock
        clock = [time.time()]
        store.scopes._clock = lambda: clock[0]  # type: ignore[attr-defined]
        signed = signed_scope(for_s=60, now=clock[0])
        store.scopes.add(signed)
        store.scopes.redeem(use(signed.scope.id))
        clock[0] += 60
    else:  # the database's clock decides: a scope ending 1.5 s after it is issued
        signed = signed_scope(for_s=1.5)
        store.scopes.add(signed)
        store.scopes.redeem(use(signed.scope.id))
        time.sleep(1.6)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id))) == "scope_expired"
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id))) == "scope_expired"
    kinds = Counter(r["kind"] for r in chain(store, backend[0], tmp_path))
    assert kinds["scope.redeemed"] == 1 and kinds["scope.expired"] == 1  # the first refusal only


def test_a_revoke_from_another_process_is_effective_on_the_next_call(
    store: StateStore, backend: tuple[str, Opener, str], tmp_path: Path
) -> None:
    kind, _, where = backend
    signed = signed_scope()
    store.scopes.add(signed)
    store.scopes.redeem(use(signed.scope.id))
    if kind == "local":  # what `stockade scopes revoke` does while a host holds the state dir
        code = ("import sys; from pathlib import Path; from host.scopes import LocalScopes; "
                "LocalScopes(Path(sys.argv[1]), audit=None).revoke(sys.argv[2], by='bob')")
    else:
        code = ("import sys; from host.store.postgres import PostgresStore\n"
                "with PostgresStore(sys.argv[1]) as s: s.scopes.revoke(sys.argv[2], by='bob')")
    subprocess.run([sys.executable, "-c", code, where, signed.scope.id], check=True, cwd=REPO, timeout=60)
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id))) == "scope_revoked"
    state = store.scopes.get(signed.scope.id)
    assert state.revoked_by == "bob" and state.used_total == 1
    kinds = Counter(r["kind"] for r in chain(store, kind, tmp_path))
    assert kinds["scope.revoked"] == 1  # on the local store: journaled, appended by the host


def test_a_forged_scope_row_is_refused(store: StateStore, backend: tuple[str, Opener, str], tmp_path: Path) -> None:
    """Whoever writes the store without the approver's private key: a widened count, a
    later end, another subject, or a fresh scope signed by another key cover nothing."""
    kind, _, where = backend
    signed = signed_scope(max_calls=1)
    store.scopes.add(signed)
    wider = signed.scope.model_copy(update={"max_calls_total": 1000, "not_after": signed.scope.not_after + 9e5})
    forged = signed.model_copy(update={"scope": wider}).model_dump_json()
    if kind == "local":
        path = Path(where) / "scopes.json"
        body = json.loads(path.read_text())
        body["scopes"][0]["signed"] = json.loads(forged)
        path.write_text(json.dumps(body))
    else:
        import psycopg  # noqa: PLC0415

        with psycopg.connect(where, autocommit=True) as conn:
            conn.execute("UPDATE scopes SET doc = %s WHERE id = %s", (forged, signed.scope.id))
    assert reason(lambda: store.scopes.redeem(use(signed.scope.id))) == "not_in_scope"


def test_a_store_that_trusts_no_approver_key_redeems_no_scope(tmp_path: Path) -> None:
    with LocalStore(tmp_path / "state", audit=AuditLog(tmp_path / "a.log"), owns_audit=True) as bare:
        signed = signed_scope()
        bare.scopes.add(signed)
        with pytest.raises(ApproverKeyMissing):
            bare.scopes.redeem(use(signed.scope.id))


def test_a_cli_grant_while_a_host_holds_the_audit_log_is_recorded_by_the_host(tmp_path: Path) -> None:
    with LocalStore(tmp_path / "state", audit=AuditLog(tmp_path / "a.log"), owns_audit=True,
                    trusted_approver_keys=TRUSTED) as host_store:
        signed = signed_scope()
        LocalScopes(tmp_path / "state", audit=None).add(signed)  # the CLI: no audit log at hand
        host_store.scopes.redeem(use(signed.scope.id))
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "a.log").read_text().splitlines()]
    assert [k for k in kinds if k.startswith("scope.")] == ["scope.issued", "scope.redeemed"]


# -- counting exactly ----------------------------------------------------------------------------


def test_eight_threads_forty_attempts_five_calls(
    store: StateStore, backend: tuple[str, Opener, str], tmp_path: Path
) -> None:
    signed = signed_scope(max_calls=5)
    store.scopes.add(signed)
    outcomes: Counter[str] = Counter()
    guard = threading.Lock()
    start = threading.Barrier(8)

    def attempt() -> None:
        start.wait()
        for _ in range(5):
            try:
                store.scopes.redeem(use(signed.scope.id))
                got = "ok"
            except ApprovalRequired as exc:
                got = str(exc.details["reason"])
            with guard:
                outcomes[got] += 1

    threads = [threading.Thread(target=attempt) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == {"ok": 5, "scope_exhausted": 35}
    records = chain(store, backend[0], tmp_path)
    assert sum(r["kind"] == "scope.redeemed" for r in records) == 5


WORKER = """
import json, sys, threading
from host.errors import ApprovalRequired
from host.scopes import ScopeUse
from host.store.postgres import PostgresStore
from tests.support.approver import APPROVER
dsn, scope_id = sys.argv[1], sys.argv[2]
store = PostgresStore(dsn, approver=APPROVER)
use = ScopeUse(scope_id=scope_id, project="p", subject="ci-bot", session="s1", tool="tracker.create-issue",
               version="1.2.0", identity="1" * 64, input_sha256="2" * 64, action_digest="3" * 64)
won = []
print("ready", flush=True)
sys.stdin.readline()
def attempt():
    for _ in range(5):
        try:
            store.scopes.redeem(use)
            won.append(1)
        except ApprovalRequired:
            pass
threads = [threading.Thread(target=attempt) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
store.close()
print(json.dumps({"won": len(won)}), flush=True)
"""


def test_two_processes_of_four_threads_on_one_postgresql_run_exactly_five_of_forty(
    pg_dsn: str, tmp_path: Path
) -> None:
    from host.store.postgres import PostgresStore  # noqa: PLC0415

    with PostgresStore(pg_dsn, approver=APPROVER) as store:
        signed = signed_scope(max_calls=5)
        store.scopes.add(signed)
        workers = [
            subprocess.Popen([sys.executable, "-c", WORKER, pg_dsn, signed.scope.id], cwd=REPO, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in range(2)
        ]
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        for w in workers:
            assert w.stdin is not None
            w.stdin.write("go\n")
            w.stdin.flush()
        won = [json.loads(w.communicate(timeout=120)[0].strip().splitlines()[-1])["won"] for w in workers]
        assert sum(won) == 5
        records = chain(store, "postgres", tmp_path)
        redeemed = [r for r in records if r["kind"] == "scope.redeemed"]
        assert len(redeemed) == 5 and sorted(r["remaining"] for r in redeemed) == [0, 1, 2, 3, 4]
        assert store.scopes.get(signed.scope.id).used_total == 5


# -- session grants get the same bounds ------------------------------------------------------


def test_a_counted_session_grant_is_counted_once_per_use_and_revocable(store: StateStore) -> None:
    store.grants.grant(("p", "alice"), "s1", "t#b", max_calls=2)
    assert store.grants.discharges(("p", "alice"), "s1", "t#b")
    assert [store.grants.consume(("p", "alice"), "s1", "t#b") for _ in range(3)] == [1, 0, -1]
    assert not store.grants.discharges(("p", "alice"), "s1", "t#b")
    store.grants.grant(("p", "alice"), "s1", "u#b", ttl_s=60)
    assert store.grants.consume(("p", "alice"), "s1", "u#b") is None  # no count: only an end
    assert store.grants.consume(("p", "bob"), "s1", "u#b") == -1
    assert store.grants.revoke(("p", "alice"), "s1", "u#b") is True
    assert not store.grants.discharges(("p", "alice"), "s1", "u#b")


def test_a_session_grant_ends_at_its_ttl_on_the_stores_clock(store: StateStore) -> None:
    store.grants.grant(("p", "alice"), "s1", "t#b", ttl_s=1.0)
    assert store.grants.discharges(("p", "alice"), "s1", "t#b")
    time.sleep(1.1)
    assert not store.grants.discharges(("p", "alice"), "s1", "t#b")
    assert store.grants.consume(("p", "alice"), "s1", "t#b") == -1


# -- the local book's own bounds ----------------------------------------------------------------


def test_the_local_book_refuses_a_scope_past_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("host.scopes.MAX_SCOPES", 2)
    book = LocalScopes(tmp_path, audit=None)
    book.add(signed_scope())
    book.add(signed_scope())
    with pytest.raises(ScopeInvalid) as caught:
        book.add(signed_scope())
    assert caught.value.details["limit"] == 2 and len(book.entries()) == 2


def test_a_full_journal_refuses_the_change_that_would_go_unrecorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("host.scopes.MAX_JOURNAL", 1)
    book = LocalScopes(tmp_path, audit=None)
    first = signed_scope()
    book.add(first)  # journaled: scope.issued
    from host.errors import StoreUnavailable  # noqa: PLC0415

    with pytest.raises(StoreUnavailable, match="journal is full"):
        book.add(signed_scope())
    assert [s.signed.scope.id for s in book.entries()] == [first.scope.id]


class _FailingSink:
    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.fail = True

    def append(self, kind: str, payload: object, *, durable: bool | None = None) -> str:
        if self.fail:
            from host.errors import AuditUnavailable  # noqa: PLC0415

            raise AuditUnavailable("disk full")
        self.kinds.append(kind)
        return "0" * 64


def test_a_failing_audit_sink_refuses_the_use_counts_it_and_keeps_its_records(tmp_path: Path) -> None:
    """The use stays counted (the safe side) and its records wait in the journal."""
    from host.errors import AuditUnavailable  # noqa: PLC0415

    sink = _FailingSink()
    book = LocalScopes(tmp_path, audit=sink, trusted=TRUSTED)
    signed = signed_scope(max_calls=2)
    with pytest.raises(AuditUnavailable):
        book.add(signed)
    with pytest.raises(AuditUnavailable):
        book.redeem(use(signed.scope.id))
    assert book.get(signed.scope.id).used_total == 1
    sink.fail = False
    book.redeem(use(signed.scope.id))
    assert sink.kinds == ["scope.issued", "scope.redeemed", "scope.redeemed", "scope.exhausted"]


def test_scopes_on_a_postgresql_store_are_granted_listed_and_revoked_from_the_cli(
    tmp_path: Path, pg_dsn: str
) -> None:
    from host.store.postgres import PostgresStore  # noqa: PLC0415
    from tests.support.approver import write_approver_config  # noqa: PLC0415
    from tests.support.cli import cli_env, echo_workspace, json_out  # noqa: PLC0415
    from tests.support.hosts import echo_tool  # noqa: PLC0415

    write_tool = echo_tool(name="echo.write", effect="write", risk="medium", permissions=["echo.write"])
    ws = echo_workspace(tmp_path, tools=[write_tool], allow=("tool.call:echo.write", "echo.write"))
    write_approver_config(tmp_path)
    env = cli_env(STOCKADE_STORE=pg_dsn)
    granted = ws.run("scopes", "grant", "p", "alice", "--tool", "echo.write@1.0.0", "--max-calls", "3",
                     "--for", "30m", "--job", "ci", "--json", *ws.host_args, env=env)
    assert granted.returncode == 0, granted.stderr
    scope_id = json_out(granted)["scope"]["id"]
    listed = json_out(ws.run("scopes", "list", "--json", *ws.host_args, env=env))
    assert [s["scope"]["id"] for s in listed] == [scope_id]
    assert ws.run("scopes", "revoke", scope_id, *ws.host_args, env=env).returncode == 0
    with PostgresStore(pg_dsn) as store:
        assert store.scopes.get(scope_id).revoked_by is not None
        kinds = [json.loads(line)["kind"] for line in store.lines("project:p")]
    assert kinds == ["scope.issued", "scope.revoked"]
    assert not (ws.state / "scopes.json").exists()  # nothing went to the local book
