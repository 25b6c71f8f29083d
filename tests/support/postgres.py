"""A throw-away PostgreSQL cluster for tests: ``initdb`` in a temp dir, a loopback port.

The server binaries come from the system (Debian's ``postgresql`` package; ``.ci/run``
installs it when ``pg_ctl`` is missing). PostgreSQL refuses to run as root, so when the
tests run as root (CI) the cluster is created and run as the ``postgres`` user through
``runuser``, in a data directory that user owns. Password authentication (SCRAM) is on
for TCP, so every test connects with a DSN that carries a password — the same path a
fleet deployment takes, and the one whose password must never leak.

Missing binaries: :func:`find_bin_dir` returns ``None``; the fixture then skips with a
loud reason, or fails when ``STOCKADE_REQUIRE_POSTGRES=1`` (CI).

Example::

    cluster = Cluster.start()
    try:
        dsn = cluster.dsn()
    finally:
        cluster.stop()
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

USER = "stockade"  # the cluster's superuser in tests
REQUIRE_ENV = "STOCKADE_REQUIRE_POSTGRES"


def find_bin_dir() -> Path | None:
    """Directory holding ``initdb``, ``pg_ctl`` and ``postgres``, or None."""
    initdb = shutil.which("initdb")
    if initdb:
        real = Path(os.path.realpath(initdb)).parent
        if (real / "pg_ctl").exists() and (real / "postgres").exists():
            return real
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        path = Path(candidate)
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Cluster:
    """A running throw-away cluster (see the module docstring)."""

    bin_dir: Path
    data_dir: Path
    port: int
    password: str
    run_as: str | None  # the OS user running the server (None: the current user)

    @classmethod
    def start(cls) -> Cluster:
        """initdb a new cluster in a fresh temp dir and start it on a free loopback port.

        The dir is made directly under the system temp dir (not pytest's ``tmp_path``,
        whose parents are private to root), so the ``postgres`` user can reach it.
        """
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
        run_as = "postgres" if os.geteuid() == 0 else None
        root = Path(tempfile.mkdtemp(prefix="stockade-pg-"))
        password = secrets.token_hex(16)
        pwfile = root / "pwfile"
        pwfile.write_text(password + "\n")
        cluster = cls(bin_dir, root / "data", _free_port(), password, run_as)
        if run_as is not None:
            entry = pwd.getpwnam(run_as)
            os.chmod(root, 0o700)
            os.chown(root, entry.pw_uid, entry.pw_gid)
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        cluster._run(
            "initdb", "-D", str(cluster.data_dir), "-U", USER, f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256", "--auth-local=peer", "-E", "UTF8", "--no-instructions",
        )
        pwfile.unlink()
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={cluster.port} -c unix_socket_directories='' "
            "-c max_connections=100 -c shared_buffers=16MB -c log_min_messages=warning"
        )
        cluster._run("pg_ctl", "-D", str(cluster.data_dir), "-l", str(root / "server.log"),
                     "-o", options, "-w", "-t", "60", "start")
        return cluster

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")

    def dsn(self, dbname: str = "postgres") -> str:
        """A libpq URL for ``dbname`` with the superuser's password."""
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        """Create a fresh database and return its DSN."""
        import psycopg  # noqa: PLC0415 - only when the cluster is used

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # name comes from the test itself
        return self.dsn(name)

    def pg_stop(self) -> None:
        """Stop the server fast (used by the fault tests), keeping the data."""
        self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop")

    def pg_start(self) -> None:
        """Start a stopped server again on the same port."""
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories='' "
            "-c max_connections=100 -c shared_buffers=16MB -c log_min_messages=warning"
        )
        self._run("pg_ctl", "-D", str(self.data_dir), "-l", str(self.data_dir.parent / "server.log"),
                  "-o", options, "-w", "-t", "60", "start")

    def stop(self) -> None:
        """Stop the server (immediate) and remove its data directory."""
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)
