"""The reviewer's view of a host file's ``[[command]]`` entries (``exec.run``).

``stockade inspect stockade.host.toml`` reports each entry as the Host would serve it
(the binary it resolves to and that binary's sha256, the sandbox's availability), and
``stockade diff OLD.host.toml NEW.host.toml`` lists what changed between two host files'
entries, flagging escalations: a new entry, another binary, a read-write workspace where
it was read-only, a network where there was none, a new egress allow entry, Landlock no
longer required, a raised limit or deadline, a new or changed variable, another effect, a
higher risk, and ``unsafe_exec_without_sandbox`` switched on. Removals and lowered limits
are shown, not flagged. Nothing runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from host.config import CommandEntry
from host.formats.hostfile import HostFile, load_host_file

__all__ = ["CommandChange", "command_changes", "command_report", "is_host_file"]

_LIMITS: Final = (
    "max_timeout_ms", "max_output_bytes", "max_egress_bytes", "cpu_s", "memory_bytes", "max_processes",
    "max_file_bytes", "max_open_files",
)  # fmt: skip
_RISK: Final = {"low": 0, "medium": 1, "high": 2}


def is_host_file(path: Path) -> bool:
    """Whether ``path`` names a host config file (``*.toml``) rather than a lock."""
    return path.suffix == ".toml" and path.is_file()


def command_report(path: Path) -> dict[str, Any]:
    """The command entries of the host file at ``path``, each with its resolved binary.

    Raises:
        ConfigInvalid: the file is invalid (every problem listed).
    """
    from host.sandbox.launch import abi as landlock_abi  # noqa: PLC0415 - host files only: the sandbox (pyseccomp) stays out of `inspect LOCK`

    settings = load_host_file(path)
    bwrap = shutil.which("bwrap")
    return {
        "host_file": str(path),
        "tool": "exec.run" if settings.commands and settings.workspaces else None,
        "sandbox": {"bwrap": os.path.realpath(bwrap) if bwrap else None, "landlock_abi": landlock_abi(),
                    "unsafe_exec_without_sandbox": bool(settings.unsafe_exec_without_sandbox)},
        "workspaces": [str(w["root"]) for w in settings.workspaces],
        "commands": [_entry_report(e) for e in settings.commands],
    }  # fmt: skip


def _entry_report(entry: CommandEntry) -> dict[str, Any]:
    real = os.path.realpath(entry.path)
    try:
        with open(real, "rb") as handle:
            digest: str | None = hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        digest = None  # the Host refuses to open (CONFIG_INVALID)
    return {**entry.definition(), "binary": real, "binary_sha256": digest}


@dataclass(frozen=True, slots=True)
class CommandChange:
    """One difference between two host files' command entries."""

    command: str
    detail: str
    escalation: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON data (``stockade diff --json``)."""
        return {"kind": "command", "command": self.command, "detail": self.detail,
                "escalation": self.escalation}  # fmt: skip


def command_changes(old: HostFile, new: HostFile) -> list[CommandChange]:
    """Every difference of the ``[[command]]`` entries from ``old`` to ``new``."""
    changes: list[CommandChange] = []
    if not old.unsafe_exec_without_sandbox and new.unsafe_exec_without_sandbox:
        changes.append(CommandChange("*", "unsafe_exec_without_sandbox switched on", True))
    elif old.unsafe_exec_without_sandbox and not new.unsafe_exec_without_sandbox:
        changes.append(CommandChange("*", "unsafe_exec_without_sandbox switched off", False))
    before = {e.name: e for e in old.commands}
    after = {e.name: e for e in new.commands}
    for name in sorted(before.keys() | after.keys()):
        changes.extend(_entry_changes(name, before.get(name), after.get(name)))
    return changes


def _entry_changes(name: str, old: CommandEntry | None, new: CommandEntry | None) -> Iterator[CommandChange]:
    if old is None and new is not None:
        detail = f"new command {new.path} (workspace {new.workspace}, network {new.network})"
        yield CommandChange(name, detail, True)
        return
    if new is None or old is None:
        yield CommandChange(name, "command removed", False)
        return
    if old.path != new.path:
        yield CommandChange(name, f"path {old.path} -> {new.path}", True)
    if old.workspace != new.workspace:
        yield CommandChange(name, f"workspace {old.workspace} -> {new.workspace}", new.workspace == "rw")
    if old.network != new.network:
        yield CommandChange(name, f"network {old.network} -> {new.network}", new.network != "none")
    yield from _allow_changes(name, old.allow, new.allow)
    if old.landlock != new.landlock:
        yield CommandChange(name, f"landlock {old.landlock} -> {new.landlock}", new.landlock != "required")
    for key in _LIMITS:
        was, now = getattr(old, key), getattr(new, key)
        if was != now:
            yield CommandChange(name, f"{key} {was} -> {now}", now > was)
    yield from _env_changes(name, old.env, new.env)
    yield from _env_changes(name, old.secret_env, new.secret_env, what="secret_env")
    if old.effect != new.effect:
        yield CommandChange(name, f"effect {old.effect} -> {new.effect}", True)
    if old.risk != new.risk:
        yield CommandChange(name, f"risk {old.risk} -> {new.risk}", _RISK[new.risk] > _RISK[old.risk])


def _allow_changes(
    name: str, old: tuple[Mapping[str, object], ...], new: tuple[Mapping[str, object], ...]
) -> Iterator[CommandChange]:
    def show(entry: Mapping[str, object]) -> str:
        port = f":{entry['port']}" if entry["port"] is not None else ""
        return f"{entry['methods']} {entry['scheme']}://{entry['host']}{port}{entry['path_prefix']}"

    before, after = {show(e) for e in old}, {show(e) for e in new}
    for shown in sorted(after - before):
        yield CommandChange(name, f"allow {shown} added", True)
    for shown in sorted(before - after):
        yield CommandChange(name, f"allow {shown} removed", False)


def _env_changes(
    name: str, old: Mapping[str, str], new: Mapping[str, str], *, what: str = "env"
) -> Iterator[CommandChange]:
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            yield CommandChange(name, f"{what} {key} removed", False)
        elif key not in old:
            yield CommandChange(name, f"{what} {key} added", True)
        elif old[key] != new[key]:
            yield CommandChange(name, f"{what} {key} changed", True)
