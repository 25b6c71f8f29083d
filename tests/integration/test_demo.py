"""``stockade demo --ci`` end to end, through the real entry point in a subprocess.

The demo builds the tracker and hostile plugins (cached in ``.stockade-cache/demo``),
starts a loopback HTTPS fake API and runs the scripted session; it exits 0 only if every
step behaved as expected. These tests do not take the demo's word for it: they check the
audit log the host wrote, rerun ``stockade diff`` on its locks, and check what a viewer
must never see: the demo secret, in the output or anywhere at rest in the workspace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sdk.demo import DEMO_TOKEN
from tests.support.cli import REPO, cli_env

CACHE_ROOT = REPO / ".stockade-cache" / "stockade"  # the demo caches under CACHE_ROOT/demo


def run_demo(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", "demo", "--ci", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env=cli_env(STOCKADE_CACHE_DIR=str(CACHE_ROOT)), check=False,
    )


@dataclass(frozen=True)
class DemoRun:
    output: str
    workdir: Path

    def records(self) -> list[dict[str, Any]]:
        """The audit log the host wrote, read as plain JSON lines (not through the demo)."""
        lines = (self.workdir / "state" / "audit.log").read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]

    def outcomes(self, tool: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["kind"] == "call.outcome" and r["tool"] == tool]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    workdir = tmp_path_factory.mktemp("demo") / "ws"
    proc = run_demo("--workdir", str(workdir))
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    return DemoRun(output, workdir)


def _error_code(record: dict[str, Any]) -> str | None:
    return (record.get("error") or {}).get("code")


# The demo prints its own verdict per step; these tests check the evidence the host left
# behind instead: its audit log (read as JSON, its chain verified by `stockade log
# verify`), the fake API's acceptance of the injected token (status 200: it answers 401
# without it), and `stockade diff` run again on the demo's two locks.


@pytest.mark.slow
def test_demo_host_injected_the_token_the_api_requires(demo: DemoRun) -> None:
    (first, *_, last) = demo.outcomes("tracker.list-issues")
    for record in (first, last):
        assert record["ok"] is True
        assert [(h["host"], h["method"], h["status"]) for h in record["http"]] == [
            ("api.tracker.example", "GET", 200)
        ]


@pytest.mark.slow
def test_demo_refusals_are_audited_with_their_codes(demo: DemoRun) -> None:
    create = [_error_code(r) for r in demo.outcomes("tracker.create-issue")]
    assert create == ["INPUT_INVALID", "APPROVAL_REQUIRED", None, "APPROVAL_INVALID"]
    assert [r["ok"] for r in demo.outcomes("tracker.create-issue")] == [False, False, True, False]
    assert _error_code(demo.outcomes("tracker.list-issues")[1]) == "INPUT_INVALID"


@pytest.mark.slow
def test_demo_approved_write_has_a_durable_intent_before_its_outcome(demo: DemoRun) -> None:
    records = demo.records()
    intents = [r for r in records if r["kind"] == "call.intent"]
    assert [(r["tool"], r["effect"]) for r in intents] == [("tracker.create-issue", "write"), ("fs.edit_file", "write")]
    (done,) = [r for r in demo.outcomes("tracker.create-issue") if r["ok"]]
    assert intents[0]["seq"] < done["seq"] and intents[0]["action_digest"] == done["action_digest"]
    assert [(h["method"], h["status"]) for h in done["http"]] == [("POST", 201)]


@pytest.mark.slow
def test_demo_file_edit_is_approved_with_its_diff_then_written(demo: DemoRun) -> None:
    assert "--- a/service.toml" in demo.output and "+debug = false" in demo.output
    (edit,) = [r for r in demo.outcomes("fs.edit_file") if r["ok"]]
    assert edit["outcome"]["lines_added"] == 1 and edit["outcome"]["lines_removed"] == 1


@pytest.mark.slow
def test_demo_hostile_plugin_contained_per_audit(demo: DemoRun) -> None:
    (redirect,) = demo.outcomes("hostile.fetch-asset")
    assert _error_code(redirect) == "EGRESS_DENIED"
    assert "redirect refused: host evil.example is not in the allowlist" in redirect["error"]["message"]
    (auth,) = demo.outcomes("hostile.send-auth")
    assert _error_code(auth) == "EGRESS_DENIED"
    assert "header 'Authorization' looks like a credential" in auth["error"]["message"]
    (steal,) = demo.outcomes("hostile.steal-secret")
    assert [h["outcome"] for h in steal["http"]] == ["denied:host_not_allowed"]
    assert all(h["bytes_sent"] == 0 and h["status"] is None for h in steal["http"])
    (spin,) = demo.outcomes("hostile.spin")
    assert _error_code(spin) in ("SANDBOX_FUEL_EXHAUSTED", "SANDBOX_TIMEOUT")
    (flood,) = demo.outcomes("hostile.flood")
    assert _error_code(flood) == "SANDBOX_MEMORY"
    # The host still served the call after the flood: the last record is a successful read.
    calls = [r for r in demo.records() if r["kind"] == "call.outcome"]
    assert calls[-1]["tool"] == "tracker.list-issues" and calls[-1]["ok"] is True


@pytest.mark.slow
def test_demo_lock_acceptance_records_the_unsafe_loopback_setting(demo: DemoRun) -> None:
    (accepted,) = [r for r in demo.records() if r["kind"] == "lock.accepted"]
    assert accepted["unsafe_allow_loopback"] is True
    assert accepted["unsafe_accept_rollback"] is False
    assert "unsafe_allow_loopback" in demo.output  # and the operator was told


@pytest.mark.slow
def test_demo_lock_upgrade_flagged_by_an_independent_diff(demo: DemoRun) -> None:
    ws = demo.workdir
    proc = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "diff", str(ws / "stockade.lock"), str(ws / "stockade.lock.next"),
         "--trusted-keys", str(ws / "trusted-keys.json")],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=cli_env(), check=False,
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "ESCALATES" in proc.stdout


@pytest.mark.slow
def test_demo_egress_steps_say_what_was_refused(demo: DemoRun) -> None:
    # 5b said "refused its request to a malformed URL" for a refused Authorization header, and
    # the summary expected TOOL_FAILED where the result (correctly) is EGRESS_DENIED.
    assert "malformed URL" not in demo.output and "TOOL_FAILED" not in demo.output
    assert "refused its GET request (credential_header)" in demo.output
    assert _error_code(demo.outcomes("hostile.send-auth")[0]) == "EGRESS_DENIED"


@pytest.mark.slow
def test_demo_summary_and_no_secret_in_output(demo: DemoRun) -> None:
    assert "all 14 steps behaved as expected" in demo.output
    assert "Bearer ****" + DEMO_TOKEN[-4:] in demo.output  # shown masked
    assert DEMO_TOKEN not in demo.output
    assert DEMO_TOKEN[:-4] not in demo.output  # not even the part the mask hides


@pytest.mark.slow
def test_demo_workspace_holds_no_plaintext_secret_and_its_log_verifies(demo: DemoRun) -> None:
    workdir = demo.workdir
    files = [p for p in workdir.rglob("*") if p.is_file() and not p.is_symlink()
             and "artifacts" not in p.relative_to(workdir).parts]
    assert workdir / "state" / "secrets.json" in files and workdir / "state" / "audit.log" in files
    for path in files:
        assert DEMO_TOKEN.encode() not in path.read_bytes(), path
    verified = subprocess.run(
        [sys.executable, "-m", "sdk.cli", "log", "verify", str(workdir / "state" / "audit.log")],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=cli_env(), check=False,
    )
    assert verified.returncode == 0 and "chain intact" in verified.stdout
    assert len(demo.records()) >= 15


def test_demo_refuses_non_empty_workdir(tmp_path: Path) -> None:
    workdir = tmp_path / "ws"
    workdir.mkdir()
    (workdir / "notes.txt").write_text("mine")
    proc = run_demo("--workdir", str(workdir), timeout=120)
    assert proc.returncode == 2
    assert "not empty" in proc.stderr
    assert [p.name for p in workdir.iterdir()] == ["notes.txt"]
    assert (workdir / "notes.txt").read_text() == "mine"


def test_demo_help_names_its_options() -> None:
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "demo", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env=cli_env(), check=False)
    assert proc.returncode == 0
    assert "--ci" in proc.stdout and "--workdir" in proc.stdout and "loopback" in proc.stdout
