"""The local store serves one host process per state dir, and says so.

Its approvals, rate limits and grants live in process memory, so two processes on one
state dir would each admit a full rate-limit window and honour only their own grants.
The second one is refused instead (STORE_UNAVAILABLE, naming the postgres store).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from host.audit.log import AuditLog
from host.store import LocalStore


def test_stores_of_one_process_share_the_state_dir_lock(tmp_path: Path) -> None:
    # A host reloading its lock opens the new Host before closing the old one.
    first = LocalStore(tmp_path / "state", audit=AuditLog(tmp_path / "a.log"), owns_audit=True)
    second = LocalStore(tmp_path / "state", audit=AuditLog(tmp_path / "b.log"), owns_audit=True)
    first.close()
    third = LocalStore(tmp_path / "state", audit=AuditLog(tmp_path / "a.log"), owns_audit=True)
    second.close()
    third.close()


def test_second_process_on_one_state_dir_refused_instead_of_splitting_rate_limits(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from host.audit.log import AuditLog\n"
        "from host.errors import StoreUnavailable\n"
        "from host.store import LocalStore\n"
        "root = Path(sys.argv[1])\n"
        "try:\n"
        "    LocalStore(root / 'state', audit=AuditLog(root / 'other.log'), owns_audit=True)\n"
        "except StoreUnavailable as exc:\n"
        "    print(exc.code)\n"
        "    print(exc.message)\n"
        "    print(exc.hint)\n"
    )
    with LocalStore(tmp_path / "state", audit=AuditLog(tmp_path / "a.log"), owns_audit=True):
        done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                              text=True, timeout=120, check=True, cwd=Path(__file__).parents[2])
    code, message, hint = done.stdout.strip().splitlines()
    assert code == "STORE_UNAVAILABLE"
    assert "in use by another host process" in message
    assert "postgresql://" in hint
