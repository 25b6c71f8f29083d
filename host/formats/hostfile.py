"""The operator's host config file: ``stockade.host.toml`` (format ``stockade.host/1``).

One place for what every host command would otherwise repeat (docs/design.md
§12 "one host configuration file")::

    format = "stockade.host/1"

    [host]
    state_dir = ".stockade"                  # accepted lock state, policy.json, secrets, audit.log
    lock = "stockade.lock"
    trusted_keys = "trusted-keys.json"       # stockade.keys/1
    trusted_operator_keys = "operator-keys.json"  # optional: the whole lock must be signed by one
    require_signatures = true
    # unsafe_allow_unsigned = true           # development only: trusted keys without required signatures
    store = "local"                          # state-store backend: "local" or a postgresql:// URL
    audit = ".stockade/audit.log"            # default: <state_dir>/audit.log
    admin_policy_dir = "/etc/stockade/admin" # managed cap (cap.json); optional
    approver_key = "approver.pem"            # postgresql store, hosts that approve: signs approvals (0600)
    trusted_approver_keys = "approver-keys.json"  # postgresql store: approver public keys (stockade.keys/1)

    [[workspace]]                            # optional, repeatable: fs.* host tools (host.tools)
    root = "/srv/projects/p"                 # the directory granted; opened as an fd at Host.open
    project = "p"                            # for this project's principals ...
    subjects = ["alice"]                     # ... only these (omitted: every subject)
    deny = ["secrets", "*.pem"]              # globs refused for reads and writes, hidden from fs.list
    protected = ["vendor"]                   # refused for writes (.git and Stockade's files always are)
    max_file_bytes = 8388608                 # bytes; larger files are refused unread

    [[command]]                              # optional, repeatable: exec.run (docs/commands.md)
    name = "git"                             # what argv[0] must be
    path = "/usr/bin/git"                    # absolute; fixed when the Host opens
    max_timeout_ms = 30000                   # ms, the longest deadline a call may ask for
    network = "none"                         # a fresh network namespace ("egress": the host's proxy)
    # allow = [{ scheme = "https", host = "github.com", path_prefix = "/", methods = ["GET"] }]  # egress
    landlock = "auto"                        # the second layer where the kernel has it ("required")
    workspace = "ro"                         # the workspace bound read-only ("rw": writable)
    env = { GIT_CONFIG_NOSYSTEM = "1" }      # literal values, visible to the process
    secret_env = { GH_TOKEN = "github" }     # the caller's stored secret, staged per call
    effect = "execute"                       # shown and bound into the action digest
    risk = "high"

Rules (fail closed): every key is optional, unknown keys and wrong types are errors
(:class:`~host.errors.ConfigInvalid` listing every problem); relative paths are relative
to the directory holding the file, ``~`` is expanded. Options given on a command line win
over the file; the file wins over built-in defaults. ``require_signatures = true`` cannot
be switched off from the command line. With ``trusted_keys`` set, package signatures are
required unless ``unsafe_allow_unsigned = true`` (``HostConfig.unsafe_allow_unsigned``).
``[[command]]`` tables are checked by :class:`~host.config.CommandEntry` itself (one
implementation of its rules); ``unsafe_exec_without_sandbox = true`` in ``[host]`` lets
``exec.run`` run a command bare when bubblewrap cannot be set up (audited).

Which file (:func:`find_host_file`): ``--config FILE``, else ``$STOCKADE_CONFIG`` (both
must exist), else ``./stockade.host.toml``, else ``<state dir>/stockade.host.toml`` where
the state dir is ``--state-dir``, ``$STOCKADE_HOME`` or ``~/.stockade``; none found means
built-in defaults.

This module imports only the standard library: the CLI reads it on every host command.

Example::

    path = find_host_file(None, env=os.environ, cwd=Path.cwd(), state_dir=None)
    settings = load_host_file(path) if path else None
    lock = settings.lock if settings and settings.lock else Path("stockade.lock")
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from host._files import UnsafePermissions, check_trusted
from host.config import CommandEntry
from host.errors import ConfigInvalid

# tomllib is standard from Python 3.11, tomli (the same code) below; imported by name so
# that mypy, pinned to 3.10, does not need tomli installed (as sdk/author/project.py does).
tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

__all__ = [
    "CONFIG_ENV",
    "FILE_NAME",
    "HOST_FILE_FORMAT",
    "HostFile",
    "find_host_file",
    "load_host_file",
    "render_host_file",
]

HOST_FILE_FORMAT: Final = "stockade.host/1"
FILE_NAME: Final = "stockade.host.toml"
CONFIG_ENV: Final = "STOCKADE_CONFIG"
MAX_FILE_BYTES: Final = 64 * 1024  # bytes; a larger config file is refused

_PATHS: Final = (
    "state_dir", "lock", "trusted_keys", "trusted_operator_keys", "audit", "admin_policy_dir",
    "approver_key", "trusted_approver_keys",
)  # fmt: skip
_STORE_SCHEMES: Final = ("postgresql://", "postgres://")


@dataclass(frozen=True, slots=True)
class HostFile:
    """A parsed host config file; ``None`` means "not set in the file".

    Args:
        path: the file it was read from.
        state_dir, lock, trusted_keys, trusted_operator_keys, audit, admin_policy_dir:
            absolute paths (``trusted_operator_keys``: keys one of which must sign the
            whole lock, for commands that support operator-signed locks).
        require_signatures: refuse unsigned packages.
        unsafe_allow_unsigned: accept unsigned packages although trusted keys are set.
        store: the state-store backend (``"local"`` or a PostgreSQL URL).
        approver_key: the approver private key that signs approvals on a PostgreSQL
            store (hosts that approve in-band; ``stockade approvals approve``).
        trusted_approver_keys: the approver public keys (``stockade.keys/1``) approvals
            on a PostgreSQL store are verified against.
        commands: the ``[[command]]`` entries (``exec.run``), validated.
        unsafe_exec_without_sandbox: run commands bare when the sandbox cannot be set up.
    """

    path: Path
    state_dir: Path | None = None
    lock: Path | None = None
    trusted_keys: Path | None = None
    trusted_operator_keys: Path | None = None
    require_signatures: bool | None = None
    unsafe_allow_unsigned: bool | None = None
    store: str | None = None
    audit: Path | None = None
    admin_policy_dir: Path | None = None
    approver_key: Path | None = None
    trusted_approver_keys: Path | None = None
    workspaces: tuple[Mapping[str, Any], ...] = ()  # [[workspace]] tables, checked, root absolute
    commands: tuple[CommandEntry, ...] = ()  # [[command]] tables
    unsafe_exec_without_sandbox: bool | None = None


def find_host_file(
    explicit: Path | None, *, env: Mapping[str, str], cwd: Path, state_dir: Path | None
) -> Path | None:
    """The config file that applies (order in the module docstring), or ``None``.

    Raises:
        ConfigInvalid: a file named by ``--config`` or ``$STOCKADE_CONFIG`` does not exist.
    """
    for named, source in ((explicit, "--config"), (env.get(CONFIG_ENV) or None, f"${CONFIG_ENV}")):
        if named is not None:
            path = Path(named).expanduser()
            if not path.is_file():
                raise ConfigInvalid(
                    f"host config file not found: {path} (named by {source})",
                    hint="Check the path, or write one with `stockade init`.",
                    file=str(path),
                )
            return path
    local = cwd / FILE_NAME
    if local.is_file():
        return local
    home = state_dir or Path(env.get("STOCKADE_HOME") or "~/.stockade")
    candidate = home.expanduser() / FILE_NAME
    return candidate if candidate.is_file() else None


def load_host_file(path: Path) -> HostFile:
    """Read and validate a host config file.

    Raises:
        ConfigInvalid: unreadable, too large, not TOML, unknown format, unknown keys or
            wrong types (every problem listed in ``details["problems"]``); or a file
            another user could change (group- or world-writable, theirs, or in a directory
            they can write).
    """
    path = Path(path).expanduser()
    try:
        with path.open("rb") as handle:
            check_trusted(path, os.fstat(handle.fileno()), what="host config file")
            data = handle.read(MAX_FILE_BYTES + 1)
    except UnsafePermissions as exc:
        raise ConfigInvalid(exc.message, hint=exc.hint, file=str(path)) from None
    except OSError as exc:
        raise ConfigInvalid(
            f"cannot read host config file {path}: {exc.strerror or exc}", file=str(path)
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigInvalid(f"host config file {path} is over {MAX_FILE_BYTES} bytes", file=str(path))
    try:
        document = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigInvalid(f"host config file {path} is not valid TOML: {exc}", file=str(path)) from None
    problems: list[dict[str, str]] = []
    values = _check(document, problems)
    workspaces = _check_workspaces(document.get("workspace", []), problems)
    commands = _check_commands(document.get("command", []), problems)
    if problems:
        summary = "; ".join(f"{p['loc']}: {p['msg']}" for p in problems[:5])
        raise ConfigInvalid(
            f"host config file {path} is invalid: {summary}", file=str(path), problems=problems
        )
    base = path.resolve().parent
    resolved: dict[str, Any] = {
        key: (base / Path(value).expanduser()) if key in _PATHS else value for key, value in values.items()
    }
    rooted = tuple({**w, "root": base / Path(w["root"]).expanduser()} for w in workspaces)
    return HostFile(path=path, **resolved, workspaces=rooted, commands=commands)


_COMMAND_KEYS: Final = frozenset(CommandEntry.__dataclass_fields__)


def _check_commands(tables: object, problems: list[dict[str, str]]) -> tuple[CommandEntry, ...]:
    """``[[command]]`` tables: known keys only, then :class:`CommandEntry`'s own rules."""
    if not isinstance(tables, list):
        problems.append({"loc": "command", "msg": "must be an array of tables ([[command]])"})
        return ()
    entries: list[CommandEntry] = []
    for index, table in enumerate(tables):
        loc = f"command.{index}"
        if not isinstance(table, dict):
            problems.append({"loc": loc, "msg": "must be a table"})
            continue
        unknown = sorted(set(table) - _COMMAND_KEYS)
        for key in unknown:
            problems.append({"loc": f"{loc}.{key}", "msg": "unknown key"})
        if unknown:
            continue
        if not isinstance(table.get("name"), str) or not isinstance(table.get("path"), str):
            problems.append({"loc": loc, "msg": "name and path are required strings"})
            continue
        try:
            entry = CommandEntry(**{**table, "path": Path(table["path"])})
            _check_allow(entry)
            entries.append(entry)
        except (ValueError, TypeError) as exc:
            problems.append({"loc": loc, "msg": str(exc)})
    names = [e.name for e in entries]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append({"loc": "command", "msg": f"two entries are named {name!r}"})
    return tuple(entries)


def _check_allow(entry: CommandEntry) -> None:
    """An egress entry's ``allow`` list through the egress allowlist's own parser.

    Raises:
        ValueError: an entry the allowlist refuses (a bad host pattern, method, prefix).
    """
    if not entry.allow:
        return
    from host.egress.policy import EgressPolicy  # noqa: PLC0415 - idna only for egress entries

    try:
        EgressPolicy.from_allow(entry.allow)
    except ValueError as exc:
        raise ValueError(f"command {entry.name}: {exc}") from None


_WORKSPACE_LISTS: Final = ("subjects", "deny", "protected")
_WORKSPACE_INTS: Final = (
    "max_file_bytes", "page_bytes", "max_line_bytes", "max_diff_bytes", "max_list_entries",
)


def _check_workspaces(tables: object, problems: list[dict[str, str]]) -> list[dict[str, Any]]:
    """``[[workspace]]`` tables: ``root`` and ``project`` required; lists of strings; positive ints."""
    if not isinstance(tables, list):
        problems.append({"loc": "workspace", "msg": "must be an array of tables ([[workspace]])"})
        return []
    checked: list[dict[str, Any]] = []
    for index, table in enumerate(tables):
        loc = f"workspace.{index}"
        if not isinstance(table, dict):
            problems.append({"loc": loc, "msg": "must be a table"})
            continue
        entry: dict[str, Any] = {}
        for key in ("root", "project"):
            value = table.get(key)
            if not isinstance(value, str) or not value or "\x00" in value:
                problems.append({"loc": f"{loc}.{key}", "msg": "is required: a non-empty string"})
            else:
                entry[key] = value
        for key, value in table.items():
            if key in ("root", "project"):
                continue
            if key in _WORKSPACE_LISTS:
                if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                    problems.append({"loc": f"{loc}.{key}", "msg": "must be a list of non-empty strings"})
                else:
                    entry[key] = tuple(value)
            elif key in _WORKSPACE_INTS:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    problems.append({"loc": f"{loc}.{key}", "msg": "must be a positive integer"})
                else:
                    entry[key] = value
            else:
                problems.append({"loc": f"{loc}.{key}", "msg": "unknown key"})
        checked.append(entry)
    return checked


def _check(document: Mapping[str, Any], problems: list[dict[str, str]]) -> dict[str, Any]:
    if document.get("format") != HOST_FILE_FORMAT:
        problems.append(
            {"loc": "format", "msg": f"must be {HOST_FILE_FORMAT!r}, got {document.get('format')!r}"}
        )
    for key in sorted(set(document) - {"format", "host", "workspace", "command"}):
        problems.append({"loc": key, "msg": "unknown key"})
    table = document.get("host", {})
    if not isinstance(table, dict):
        problems.append({"loc": "host", "msg": "must be a table"})
        return {}
    values: dict[str, Any] = {}
    for key, value in table.items():
        loc = f"host.{key}"
        if key in _PATHS:
            if not isinstance(value, str) or not value or "\x00" in value:
                problems.append({"loc": loc, "msg": "must be a non-empty path string"})
            else:
                values[key] = value
        elif key in ("require_signatures", "unsafe_allow_unsigned", "unsafe_exec_without_sandbox"):
            if not isinstance(value, bool):
                problems.append({"loc": loc, "msg": "must be true or false"})
            else:
                values[key] = value
        elif key == "store":
            if not isinstance(value, str) or not (value == "local" or value.startswith(_STORE_SCHEMES)):
                problems.append({"loc": loc, "msg": 'must be "local" or a postgresql:// URL'})
            else:
                values[key] = value
        else:
            problems.append({"loc": loc, "msg": "unknown key"})
    if values.get("require_signatures") is True and values.get("unsafe_allow_unsigned") is True:
        problems.append({"loc": "host.unsafe_allow_unsigned", "msg": "contradicts require_signatures = true"})
    return values


_TOML_ESCAPES: Final = {
    "\\": "\\\\",
    '"': '\\"',
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string: every control character escaped.

    TOML forbids U+0000-U+001F and U+007F unescaped in a basic string, so a state
    directory named ``$'st\\nate'`` must be written ``"st\\nate"``, never a raw newline.
    """
    out = []
    for char in value:
        if char in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def render_host_file(
    *,
    state_dir: str,
    lock: str,
    trusted_keys: str | None,
    require_signatures: bool,
    store: str = "local",
    audit: str | None = None,
    unsafe_allow_unsigned: bool = False,
) -> str:
    """The TOML text of a host config file (what ``stockade init`` writes).

    Paths are written as given (relative ones are read relative to the file).
    """
    lines = [
        "# Stockade host configuration: read by every host command (stockade call, tools, policy,",
        "# secrets, log, lock verify, inspect, diff). Relative paths are relative to this file.",
        f"format = {_toml_string(HOST_FILE_FORMAT)}",
        "",
        "[host]",
        f"state_dir = {_toml_string(state_dir)}",
        f"lock = {_toml_string(lock)}",
    ]
    if trusted_keys is not None:
        lines.append(f"trusted_keys = {_toml_string(trusted_keys)}")
    lines.append(f"require_signatures = {'true' if require_signatures else 'false'}")
    if unsafe_allow_unsigned:
        lines.append("unsafe_allow_unsigned = true  # trusted keys, yet unsigned packages are accepted")
    lines.append(f"store = {_toml_string(store)}")
    if audit is not None:
        lines.append(f"audit = {_toml_string(audit)}")
    return "\n".join(lines) + "\n"
