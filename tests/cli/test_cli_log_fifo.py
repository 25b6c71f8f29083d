"""``stockade log verify`` on something that is not a regular file.

Attack: pointing the verifier at a FIFO (or a directory, a device) used to block it for
ever waiting for a writer; it must refuse at once, with the same non-blocking
regular-file check as every other read.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import json_out, run_cli


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_log_verify_of_a_fifo_refused_instead_of_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "audit.log"
    os.mkfifo(fifo)
    proc = run_cli("log", "verify", str(fifo), cwd=tmp_path, timeout=60)  # hung for ever before
    assert proc.returncode == 1
    assert "error: AUDIT_LOG_BROKEN" in proc.stderr and "is not a regular file" in proc.stderr


def test_log_verify_of_a_directory_refused_as_json(tmp_path: Path) -> None:
    proc = run_cli("log", "verify", str(tmp_path), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    error = json_out(proc)["error"]
    assert error["code"] == "AUDIT_LOG_BROKEN" and "is not a regular file" in error["message"]
