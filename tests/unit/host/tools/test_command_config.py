"""Command entries come from the operator: ``[[command]]`` in ``stockade.host.toml``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from host.config import CommandEntry, HostConfig
from host.errors import ConfigInvalid
from host.formats.hostfile import load_host_file


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "stockade.host.toml"
    path.write_text('format = "stockade.host/1"\n' + body)
    return path


def test_command_tables_parsed_into_entries(tmp_path: Path) -> None:
    settings = load_host_file(_write(tmp_path, (
        '[host]\nunsafe_exec_without_sandbox = false\n'
        '[[command]]\nname = "git"\npath = "/usr/bin/git"\nworkspace = "rw"\nmax_timeout_ms = 5000\n'
        'env = { GIT_CONFIG_NOSYSTEM = "1" }\nrisk = "medium"\nsecret_env = { GH_TOKEN = "github" }\n'
        '[[command]]\nname = "python3"\npath = "/usr/bin/python3"\n'
    )))  # fmt: skip
    git, python = settings.commands
    assert (git.name, git.path, git.workspace, git.max_timeout_ms) == ("git", Path("/usr/bin/git"), "rw", 5000)
    assert dict(git.env) == {"GIT_CONFIG_NOSYSTEM": "1"} and git.risk == "medium"
    assert dict(git.secret_env) == {"GH_TOKEN": "github"}
    assert (python.network, python.workspace, python.effect, python.risk) == ("none", "ro", "execute", "high")
    assert settings.unsafe_exec_without_sandbox is False


@pytest.mark.parametrize(
    ("body", "loc", "msg"),
    [
        ('[[command]]\nname = "git"\npath = "git"\n', "command.0", "absolute"),
        ('[[command]]\nname = "git"\n', "command.0", "required"),
        ('[[command]]\nname = "g it"\npath = "/usr/bin/git"\n', "command.0", "letters"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nshell = true\n', "command.0.shell", "unknown"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nnetwork = "egress"\n', "command.0", "egress"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nnetwork = "host"\n', "command.0", "network"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nworkspace = "rwx"\n', "command.0", "workspace"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nmax_timeout_ms = 0\n', "command.0", "positive"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nmax_timeout_ms = 3600001\n', "command.0", "at most"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nmax_output_bytes = 524289\n', "command.0", "at most"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nenv = { LD_PRELOAD = "/x.so" }\n', "command.0", "LD_"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nenv = { PATH = "/tmp" }\n', "command.0", "PATH"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nenv = { A = 1 }\n', "command.0", "string"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\n[[command]]\nname = "git"\npath = "/bin/git"\n',
         "command", "two entries"),
        ('command = "git"\n', "command", "array"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nenv = { T = "1" }\nsecret_env = { T = "tok" }\n',
         "command.0", "both"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nsecret_env = { T = "" }\n', "command.0", "non-empty"),
        ('[[command]]\nname = "git"\npath = "/usr/bin/git"\nsecret_env = { LD_AUDIT = "x" }\n', "command.0", "LD_"),
    ],
    ids=["relative_path", "no_path", "bad_name", "unknown_key", "egress_not_yet", "unknown_network",
         "unknown_workspace_mode", "zero_timeout", "timeout_over_ceiling", "output_over_ceiling",
         "loader_variable", "reserved_variable", "env_not_string", "duplicate_name", "not_tables",
         "variable_literal_and_secret", "empty_secret_name", "secret_loader_variable"],
)  # fmt: skip
def test_invalid_command_tables_refused(tmp_path: Path, body: str, loc: str, msg: str) -> None:
    with pytest.raises(ConfigInvalid) as caught:
        load_host_file(_write(tmp_path, body))
    problems = [p for p in caught.value.details["problems"] if p["loc"] == loc]
    assert problems and msg in problems[0]["msg"], caught.value.details["problems"]


def test_host_config_refuses_duplicate_command_names(tmp_path: Path) -> None:
    entry = CommandEntry(name="git", path=Path("/usr/bin/git"))
    with pytest.raises(ValueError, match="share a name"):
        HostConfig(state_dir=tmp_path, commands=(entry, entry))


def test_unsafe_exec_without_sandbox_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="stockade.config"):
        HostConfig(state_dir=tmp_path, unsafe_exec_without_sandbox=True)
    assert "unsafe_exec_without_sandbox is on" in caplog.text and "bwrap is not on PATH" in caplog.text
