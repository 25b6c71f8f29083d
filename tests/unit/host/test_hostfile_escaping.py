"""The host config file ``stockade init`` writes always parses back.

Attack/bug: ``stockade init --state-dir $'st\\nate'`` wrote a raw newline into a TOML
basic string; the file could not be parsed, and every later ``init`` answered
CONFIG_EXISTS. Paths are now escaped (every control character) and init never leaves a
file that does not read back.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from host.formats.hostfile import load_host_file, render_host_file
from tests.support.cli import cli_env, json_out, run_cli

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40))
def test_rendered_host_file_round_trips_any_path_text(path: str) -> None:
    text = render_host_file(state_dir=path, lock=path + "x", trusted_keys=path, require_signatures=False)
    host = tomllib.loads(text)["host"]
    assert host["state_dir"] == path and host["lock"] == path + "x" and host["trusted_keys"] == path


@pytest.mark.parametrize(
    "name", ["st\nate", "st\rate", "tab\there", "nul\x00", "del\x7f", 'q"uote\\', "\x1b[31m"]
)
def test_init_with_a_control_character_in_the_state_dir_writes_a_parseable_file(
    tmp_path: Path, name: str
) -> None:
    if "\x00" in name:  # argv cannot carry NUL: the renderer alone
        text = render_host_file(
            state_dir=name, lock="stockade.lock", trusted_keys=None, require_signatures=False
        )
        assert tomllib.loads(text)["host"]["state_dir"] == name
        return
    proc = run_cli("init", "--state-dir", name, "--json", cwd=tmp_path, env=cli_env())
    assert proc.returncode == 0, proc.stderr
    settings = load_host_file(tmp_path / "stockade.host.toml")
    assert settings.state_dir == (tmp_path / name).resolve()
    assert json_out(proc)["state_dir"] == str(settings.state_dir)
    assert (tmp_path / name).is_dir()


def test_init_with_a_path_that_is_not_text_leaves_no_file(tmp_path: Path) -> None:
    raw = os.fsencode(str(tmp_path)) + b"/st\xffate"  # not UTF-8: no TOML file can hold it
    proc = run_cli("init", "--state-dir", os.fsdecode(raw), cwd=tmp_path, env=cli_env())
    assert proc.returncode == 1
    assert "error: CONFIG_INVALID" in proc.stderr and "nothing was written" in proc.stderr
    assert not (tmp_path / "stockade.host.toml").exists()
    again = run_cli("init", cwd=tmp_path, env=cli_env())  # and a retry is not CONFIG_EXISTS
    assert again.returncode == 0, again.stderr


def test_hypothesis_ci_profile_fixes_the_seed() -> None:
    ci = hypothesis_settings.get_profile("ci")
    assert ci.derandomize is True and ci.print_blob is True and ci.database is None and ci.deadline is None
    if os.environ.get("CI"):  # .ci/run: the loaded profile is the deterministic one
        assert hypothesis_settings.default.derandomize is True
