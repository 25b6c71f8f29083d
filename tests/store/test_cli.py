"""The CLI on a PostgreSQL store: ``store migrate``, ``call --store``, ``log export`` and
``log verify --store`` (real subprocesses, real server); the DSN's password never printed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.approver import write_approver_config
from tests.support.cli import cli_env, run_cli
from tests.support.fleet import make_repo
from tests.support.postgres import Cluster


def test_migrate_call_export_and_verify_through_the_cli(pg_cluster: Cluster, tmp_path: Path) -> None:
    dsn = pg_cluster.create_database("cli")
    env = cli_env(STOCKADE_STORE=dsn, STOCKADE_HOME=str(tmp_path / "home"))
    write_approver_config(tmp_path / "home")  # `call --approve` signs its approval on the shared store
    repo = make_repo(tmp_path / "repo")
    outputs: list[str] = []

    def cli(*args: str) -> str:
        done = run_cli(*args, cwd=tmp_path, env=env, timeout=300)
        outputs.extend((done.stdout, done.stderr))
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert "migrated the store's schema from version 0" in cli("store", "migrate")
    assert "is current" in cli("store", "migrate")
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "policy.json").write_bytes((repo.root / "policy.json").read_bytes())
    for n in range(2):
        out = cli("call", "echo.ask@1.0.0", "--lock", str(repo.gen1), "--project", "p", "--subject", "alice",
                  "--session", f"s{n}", "--input", json.dumps({"message": f"m{n}"}), "--approve", "--json")
        assert json.loads(out)["ok"] is True
    exported = tmp_path / "audit.jsonl"
    cli("log", "export", "--chain", "project:p", "--output", str(exported))
    key = str(home / "audit-key.pub")  # the hosts signed the chain's checkpoints with the state dir's key
    verified = cli("log", "verify", str(exported), "--key", key, "--strict")
    assert "ok: " in verified and "2 checkpoints verified" in verified and "closed cleanly" in verified
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [r["kind"] for r in records].count("call.outcome") == 2
    assert [r["reason"] for r in records if r["kind"] == "audit.checkpoint"] == ["close", "close"]
    in_place = cli("log", "verify", "--chain", "project:p", "--strict")
    assert "chain intact" in in_place and "2 checkpoints verified" in in_place
    # Without --chain every chain is verified and reported (it refused: "name one with --chain").
    every = cli("log", "verify")
    assert "audit chains in" in every and "chain 'project:p'" in every and "chain 'host'" in every
    assert every.count("ok: ") == int(every.split(" audit chains", 1)[0]) >= 2
    report = json.loads(cli("log", "verify", "--json"))
    assert report["ok"] is True and {"project:p", "host"} <= {c["file"].split("'")[1] for c in report["chains"]}
    assert all(pg_cluster.password not in text for text in outputs)
    assert any("********" in text for text in outputs)


def test_serve_keeps_its_state_in_the_configured_postgres_store(pg_cluster: Cluster, tmp_path: Path) -> None:
    """``stockade serve --store`` used to ignore the store: a fleet of servers each kept
    its own approvals, rate limits and audit log file."""
    from host.store.postgres import PostgresStore  # noqa: PLC0415

    dsn = pg_cluster.create_database("serve")
    home = tmp_path / "home"
    env = cli_env(STOCKADE_STORE=dsn, STOCKADE_HOME=str(home))
    repo = make_repo(tmp_path / "repo")
    assert run_cli("store", "migrate", cwd=tmp_path, env=env).returncode == 0
    home.mkdir(mode=0o700)
    (home / "policy.json").write_bytes(repo.policy.read_bytes())  # serve refuses to list no tools
    served = run_cli("serve", "--lock", str(repo.gen1), "--project", "p", "--subject", "alice",
                     cwd=tmp_path, env=env, stdin="", timeout=300)  # stdin at EOF: the server stops
    assert served.returncode == 0, served.stderr
    with PostgresStore(dsn) as store:
        assert store.locks.current_generation() == 1
        kinds = [json.loads(line)["kind"] for line in store.lines("host")]
    assert kinds == ["lock.accepted", "audit.checkpoint"]  # signed when the server closed the store
    assert not (home / "audit.log").exists()


def test_store_password_on_command_line_refused(pg_cluster: Cluster, tmp_path: Path) -> None:
    """``--store postgresql://user:PASSWORD@…`` put the password in the process list for
    every user of the machine; it is refused before any connection, with the ways that
    keep it private, and a passfile (one of them) works."""
    import psycopg  # noqa: PLC0415

    dsn = pg_cluster.create_database("argv")
    env = cli_env(STOCKADE_HOME=str(tmp_path / "home"))
    spellings = [dsn, dsn.replace(f":{pg_cluster.password}@", "@") + f"?password={pg_cluster.password}",
                 dsn.replace(f":{pg_cluster.password}@", "@") + f"?passw%6Frd={pg_cluster.password}"]
    cases = [(command, ("--store", dsn)) for command in
             (("store", "migrate"), ("log", "verify", "--chain", "host"), ("approvals", "list"))]
    cases += [(("store", "migrate"), (f"--store={spelling}",)) for spelling in spellings]
    for command, form in cases:
        done = run_cli(*command, *form, "--json", cwd=tmp_path, env=env)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "STORE_PASSWORD_ON_COMMAND_LINE"
        assert "STOCKADE_STORE" in error["hint"] and "passfile" in error["hint"]
        assert "config file" in error["hint"]
        assert pg_cluster.password not in done.stdout + done.stderr
    with psycopg.connect(dsn) as conn:  # no command connected and migrated the schema
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{pg_cluster.port}:argv:stockade:{pg_cluster.password}\n")
    passfile.chmod(0o600)
    private = dsn.replace(f":{pg_cluster.password}@", "@") + f"?passfile={passfile}"
    done = run_cli("store", "migrate", "--store", private, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    via_env = run_cli("store", "migrate", cwd=tmp_path, env={**env, "STOCKADE_STORE": dsn})
    assert via_env.returncode == 0 and "is current" in via_env.stdout, via_env.stderr
