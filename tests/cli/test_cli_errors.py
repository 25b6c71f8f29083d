"""How the CLI reports failures: stable codes, the right exit status, never "usage" for a bug.

Defect guarded: every ``ValueError`` used to be reported as ``USAGE`` (exit 2), so a bug
in Stockade told the user their command line was wrong; build failures all shared one
``BUILD_FAILED`` code.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from sdk import cli
from sdk.author.build import BUILD_ERROR_CODES, BuildError
from sdk.author.scaffold import SCAFFOLD_ERROR_CODES, ScaffoldError
from sdk.commands._common import EXIT_INTERNAL, EXIT_USAGE
from tests.support.cli import cli_env, json_out, run_cli


def _args(func: object, *, as_json: bool) -> argparse.Namespace:
    return argparse.Namespace(command="tools", func=func, json=as_json, debug=False)


def _raise(exc: Exception) -> object:
    def run(args: argparse.Namespace) -> int:
        raise exc

    return run


def test_unexpected_value_error_is_an_internal_error_not_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status = cli._run(_args(_raise(ValueError("invalid literal for int()")), as_json=True))
    assert status == EXIT_INTERNAL == 70
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "INTERNAL_ERROR"
    assert error["message"] == "ValueError: invalid literal for int()"
    assert "bug" in error["hint"]


def test_unexpected_error_text_output_names_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._run(_args(_raise(KeyError("x")), as_json=False)) == EXIT_INTERNAL
    assert capsys.readouterr().err.startswith("error: INTERNAL_ERROR: KeyError: 'x'")


def test_build_error_reports_its_own_code_and_output_tail(capsys: pytest.CaptureFixture[str]) -> None:
    exc = BuildError("componentize-py failed with exit status 1", code="BUILD_TOOL_FAILED", output_tail="boom")
    assert cli._run(_args(_raise(exc), as_json=True)) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error == {
        "code": "BUILD_TOOL_FAILED",
        "message": "componentize-py failed with exit status 1",
        "details": {"output_tail": "boom"},
    }


def test_error_codes_are_pinned() -> None:
    assert BUILD_ERROR_CODES == (
        "BUILD_PROJECT_INVALID", "BUILD_TOOL_MISSING", "BUILD_DEPENDENCY_FAILED", "BUILD_DEPENDENCY_REFUSED",
        "BUILD_TOOL_FAILED", "BUILD_WRITE_FAILED",
    )
    assert SCAFFOLD_ERROR_CODES == ("NAME_INVALID", "TEMPLATE_UNKNOWN", "DIR_NOT_EMPTY")
    with pytest.raises(ValueError, match="unknown build error code"):
        BuildError("x", code="BUILD_FAILED")
    with pytest.raises(ValueError, match="unknown scaffold error code"):
        ScaffoldError("NOPE", "x")


def test_build_of_a_project_shadowing_the_sdk_refused_with_its_code(tmp_path: Path) -> None:
    assert run_cli("new", "shadow", cwd=tmp_path).returncode == 0
    (tmp_path / "shadow" / "stockade.py").write_text("# shadows the guest SDK\n")
    proc = run_cli("build", "shadow", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    error = json_out(proc)["error"]
    assert error["code"] == "BUILD_PROJECT_INVALID"
    assert "shadows the Stockade SDK" in error["message"]
    text = run_cli("build", "shadow", cwd=tmp_path)
    assert "error: BUILD_PROJECT_INVALID:" in text.stderr


def test_new_with_a_bad_name_is_a_usage_error_and_a_full_directory_a_refusal(tmp_path: Path) -> None:
    bad = run_cli("new", "Bad Name", "--json", cwd=tmp_path)
    assert bad.returncode == EXIT_USAGE
    assert json_out(bad)["error"]["code"] == "NAME_INVALID"
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    full = run_cli("new", "full", "--json", cwd=tmp_path)
    assert full.returncode == 1
    assert json_out(full)["error"]["code"] == "DIR_NOT_EMPTY"


def test_malformed_dev_secret_is_an_explicit_usage_error(tmp_path: Path) -> None:
    assert run_cli("new", "devsecret", cwd=tmp_path).returncode == 0
    proc = run_cli("dev", "x.y", "--secret", "token", "--json", cwd=tmp_path / "devsecret")
    assert proc.returncode == EXIT_USAGE, proc.stderr
    error = json_out(proc)["error"]
    assert error["code"] == "USAGE" and "NAME=@FILE or NAME=env:VAR" in error["message"]


def test_bad_secret_name_in_rm_is_an_explicit_usage_error(tmp_path: Path) -> None:
    state = ["--state-dir", str(tmp_path / "state")]
    assert run_cli("secrets", "init-key", *state, cwd=tmp_path).returncode == 0
    proc = run_cli("secrets", "delete", "Bad-Name", "--project", "p", "--subject", "alice", *state, "--json",
                   cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    error = json_out(proc)["error"]
    assert error["code"] == "USAGE" and "secret name 'Bad-Name' must match" in error["message"]


def test_output_piped_into_head_exits_quietly_on_epipe(tmp_path: Path) -> None:
    # `stockade log show | head` answered "IO_ERROR: Broken pipe … check the path and its permissions".
    log = tmp_path / "audit.log"
    log.write_text("".join(f'{{"kind": "call.outcome", "ok": true, "time": {n}}}\n' for n in range(20000)))
    script = f"{sys.executable} -m sdk.cli log show {log} | head -1; echo \"status ${{PIPESTATUS[0]}}\" >&2"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=cli_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert len(proc.stdout.splitlines()) == 1
    assert proc.stderr.strip() == "status 141"  # 128 + SIGPIPE, as a shell reports it; nothing else said
