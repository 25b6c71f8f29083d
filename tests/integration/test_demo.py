"""``stockade demo --ci`` end to end, through the real entry point in a subprocess.

The demo builds the tracker and hostile plugins (cached in ``.stockade-cache/demo``),
starts a loopback HTTPS fake API and runs the scripted session; it exits 0 only if every
step behaved as expected. These tests also check what a viewer must never see: the demo
secret, in the output or anywhere at rest in the workspace.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sdk.demo import DEMO_TOKEN
from tests.support.cli import REPO, cli_env

CACHE = REPO / ".stockade-cache" / "demo"


def run_demo(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", "demo", "--ci", *args],
        cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        env=cli_env(STOCKADE_CACHE=str(CACHE)), check=False,
    )


@pytest.fixture(scope="module")
def demo_output() -> str:
    proc = run_demo()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    return output


@pytest.mark.slow
@pytest.mark.parametrize(
    "needle",
    [
        "Bearer ****" + DEMO_TOKEN[-4:],   # the server received the injected token
        "INPUT_INVALID",                    # invalid input refused
        "APPROVAL_REQUIRED",                # the write waited for a person
        "APPROVAL_INVALID",                 # and its approval could not be replayed
        "redirect refused: host evil.example is not in the allowlist",
        "header 'Authorization' looks like a credential",
        "secret_available('tracker_token')",
        "ESCALATES",                        # stockade diff flagged the upgrade
        "stockade diff (exit 3)",
        "chain intact",                     # the audit log verified
        "unsafe_allow_loopback",            # the test-only setting is announced
        "all 13 steps behaved as expected",
    ],
    ids=["token-injected-on-the-wire", "input-invalid", "approval-required", "approval-replay",
         "redirect-to-forbidden-host", "guest-authorization-header", "secret-read-attempt",
         "diff-escalation", "diff-exit-3", "audit-chain", "unsafe-setting-announced", "summary"],
)
def test_demo_shows_every_step_contained(demo_output: str, needle: str) -> None:
    assert needle in demo_output


@pytest.mark.slow
def test_demo_endless_loop_stopped_by_fuel_or_deadline(demo_output: str) -> None:
    assert "SANDBOX_FUEL_EXHAUSTED" in demo_output or "SANDBOX_TIMEOUT" in demo_output


@pytest.mark.slow
def test_demo_memory_flood_contained(demo_output: str) -> None:
    assert "SANDBOX_MEMORY" in demo_output
    assert "(the host still serves) → ok" in demo_output


@pytest.mark.slow
def test_demo_output_never_contains_the_secret(demo_output: str) -> None:
    assert DEMO_TOKEN not in demo_output
    assert DEMO_TOKEN[:-4] not in demo_output  # not even the part the mask hides


@pytest.mark.slow
def test_demo_workspace_holds_no_plaintext_secret_and_its_log_verifies(tmp_path: Path) -> None:
    workdir = tmp_path / "ws"
    proc = run_demo("--workdir", str(workdir))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
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
