"""``sdk.cli`` parsing that needs no subprocess: global options, pass-through, the demo's
``--ci`` without a terminal, and help text without reST."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest

import sdk.commands.demo as demo
from sdk.cli import plain_text, split_globals


def test_global_options_are_taken_from_anywhere_before_double_dash() -> None:
    rest, found = split_globals(["lock", "--json", "verify", "--config=x.toml", "--debug", "--", "--json"])
    assert rest == ["lock", "verify", "--", "--json"]
    assert found == {"json": True, "debug": True, "version": False, "config": Path("x.toml")}


def test_rest_markup_is_removed_from_help() -> None:
    text = "Uses ``--lock`` and :class:`~host.errors.LockInvalid`; :func:`verify`.\nExample::\n"
    assert plain_text(text) == "Uses `--lock` and LockInvalid; verify.\nExample:\n"


@pytest.mark.parametrize(("tty", "flag", "ci"), [(False, False, True), (True, False, False), (True, True, True)],
                         ids=["pipe", "terminal", "terminal-with-ci"])
def test_demo_runs_as_ci_when_stdin_is_not_a_terminal(monkeypatch: pytest.MonkeyPatch, tty: bool, flag: bool,
                                                      ci: bool) -> None:
    seen: dict[str, object] = {}

    class Stdin(io.StringIO):
        def isatty(self) -> bool:
            return tty

    monkeypatch.setattr("sys.stdin", Stdin())
    monkeypatch.setattr(demo, "run_demo", lambda **kwargs: seen.update(kwargs) or 0)
    assert demo.run(argparse.Namespace(ci=flag, workdir=None)) == 0
    assert seen["ci"] is ci


def test_host_file_store_is_used_when_the_command_line_names_none(tmp_path: Path) -> None:
    # A config file naming a shared store must not be ignored in favour of a local one
    # (that would silently split approvals, rate limits and the audit chain).
    import argparse  # noqa: PLC0415

    from sdk.commands._common import apply_host_file  # noqa: PLC0415

    config = tmp_path / "stockade.host.toml"
    config.write_text('format = "stockade.host/1"\n\n[host]\nstore = "postgresql://fleet@db.internal/stockade"\n')
    args = argparse.Namespace(config=config, store=None, state_dir=None)
    apply_host_file(args)
    assert args.store == "postgresql://fleet@db.internal/stockade"
    given = argparse.Namespace(config=config, store="local", state_dir=None)
    apply_host_file(given)
    assert given.store == "local"  # the command line wins
