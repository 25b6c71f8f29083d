"""The ``stockade`` command: parsing and presentation only (CONTRIBUTING.md principle 15).

Each subcommand lives in ``sdk/commands/<name>.py`` with ``register(subparsers)``; its
parsers set ``func(args) -> int``. The list of commands is ``sdk.commands.COMMANDS``;
only the module of the command being run is imported, so ``stockade --help`` and light
commands start fast: nothing here imports wasmtime, httpx2, pydantic or
rich.

Global options, accepted anywhere on the command line before a ``--``: ``--json``
(machine-readable output, errors and usage errors included), ``--debug`` (a traceback
on errors), ``--config FILE`` (the host config file, see ``host.formats.hostfile``) and
``--version``.

Errors are printed as ``error: CODE: message`` plus ``what to do: hint`` on stderr (with
``--json``, as ``{"ok": false, "error": {...}}`` on stdout), never a traceback.

Exit codes: 0 ok; 1 refused or failed (a StockadeError, a ``BuildError`` with its
``BUILD_*`` code, or a refusal the CLI detects); 2 usage error (only where a command
raises ``UsageFailed``: input the user must correct); 3 ``diff`` found an escalation; 4
``diff``: the new lock is not a direct successor of the old one; 70 internal error
(``INTERNAL_ERROR``: an exception no command expected, such as a stray ``ValueError``
: a bug, reported with its type; ``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from host.errors import StockadeError
from sdk.commands import COMMANDS, find
from sdk.commands._common import (
    EXIT_ESCALATION,
    EXIT_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_USAGE,
    CommandFailed,
    UsageFailed,
    apply_host_file,
    localize_hint,
    safe_text,
)

if TYPE_CHECKING:
    from sdk.author.build import BuildError

__all__ = ["EXIT_ESCALATION", "EXIT_FAILED", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "main"]

_FLAGS = ("--json", "--debug", "--version")
"""Global switches, accepted anywhere before ``--``."""


class _UsageError(Exception):
    """argparse refused the command line (raised instead of printing and exiting)."""

    def __init__(self, message: str, usage: str, prog: str) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage
        self.prog = prog


_REST = (
    (re.compile(r":[a-z]+:`~?(?:[\w.]+\.)?([\w]+)`"), r"\1"),  # :class:`~host.X` -> X
    (re.compile(r"``([^`]+)``"), r"`\1`"),  # ``code`` -> `code`
    (re.compile(r"::$", re.MULTILINE), ":"),  # "Example::" -> "Example:"
)


def plain_text(text: str) -> str:
    """Help text without reST markup (module docstrings double as ``--help`` descriptions)."""
    for pattern, replacement in _REST:
        text = pattern.sub(replacement, text)
    return text


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`_UsageError` and prints help without reST.

    Subparsers inherit the class (``add_subparsers`` uses ``type(self)``), so every
    command's usage error reaches :func:`main`, which prints it as text or as JSON.
    """

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message, self.format_usage(), self.prog)

    def format_help(self) -> str:
        return plain_text(super().format_help())


def split_globals(argv: Sequence[str]) -> tuple[list[str], dict[str, Any]]:
    """Take the global options out of ``argv`` (wherever they are, up to ``--``).

    Returns:
        The remaining arguments and ``{"json", "debug", "version", "config"}``.

    Raises:
        _UsageError: ``--config`` without a value.
    """
    rest: list[str] = []
    found: dict[str, Any] = {"json": False, "debug": False, "version": False, "config": None}
    items = iter(argv)
    for arg in items:
        if arg == "--":
            rest.append(arg)
            rest.extend(items)
            break
        if arg in _FLAGS:
            found[arg[2:]] = True
        elif arg == "--config":
            value = next(items, None)
            if value is None:
                raise _UsageError("argument --config: expected one argument", "", "stockade")
            found["config"] = Path(value)
        elif arg.startswith("--config="):
            found["config"] = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return rest, found


def _split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """Split ``A -- B`` into ``(A, B)``: everything after the first ``--`` goes verbatim to
    commands that pass arguments on (``stockade test -- -k name``; they set a
    ``passthrough`` default); ``None`` when there is no ``--``."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1 :]


def _parser(command: str | None) -> _Parser:
    parser = _Parser(
        prog="stockade",
        description=(
            "Stockade: a WebAssembly-sandbox plugin host for AI agents that call tools.\n"
            "The model proposes a tool call; the host decides."
        ),
        epilog=(
            "Global options (--json, --debug, --config, --version) may appear anywhere.\n"
            "Exit codes: 0 ok, 1 refused or failed, 2 usage error, 3 diff found an escalation,\n"
            "4 diff: the new lock is not a direct successor, 70 internal error (a bug),\n"
            "141 the reader of the output went away (`stockade … | head`).\n"
            "Run `stockade COMMAND --help` for each command; `stockade init` to set up a host."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    parser.add_argument("--json", action="store_true", help="machine-readable output (errors too)")
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    parser.add_argument(
        "--config", metavar="FILE", help="host config file (default: $STOCKADE_CONFIG, ./stockade.host.toml)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for entry in COMMANDS:
        if entry.name == command:
            importlib.import_module(entry.import_path).register(sub)
        else:  # listed in --help without importing its module
            sub.add_parser(entry.name, help=entry.summary, add_help=False)
    return parser


def version_info() -> dict[str, str]:
    """The versions of stockade, wasmtime and Python (read from metadata, nothing imported)."""
    from importlib import metadata  # noqa: PLC0415  # only for --version

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return _checkout_version() if name == "stockade" else "not installed"

    python = ".".join(str(part) for part in sys.version_info[:3])
    return {"stockade": version("stockade"), "wasmtime": version("wasmtime"), "python": python}


def _checkout_version() -> str:
    """The version in ``pyproject.toml`` when running from a source checkout."""
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        match = re.search(r'^version = "([^"]+)"', pyproject.read_text(encoding="utf-8"), re.MULTILINE)
    except OSError:
        match = None
    return match.group(1) if match else "unknown"


def _report(args: argparse.Namespace, code: str, message: str, hint: str, payload: dict[str, Any]) -> None:
    if getattr(args, "debug", False):
        traceback.print_exc()
    if getattr(args, "json", False):
        if payload.get("hint"):
            payload = {**payload, "hint": localize_hint(str(payload["hint"]), args)}
        print(json.dumps({"ok": False, "error": payload}, default=str))
        return
    hint = localize_hint(hint, args)
    print(f"error: {code}: {safe_text(message)}", file=sys.stderr)
    if hint:
        print(f"  what to do: {safe_text(hint)}", file=sys.stderr)


def _usage_error(exc: _UsageError, *, as_json: bool) -> int:
    hint = f"see `{exc.prog} --help`"
    if as_json:
        details = {"usage": exc.usage.strip()}
        payload = {"code": "USAGE", "message": exc.message, "hint": hint, "details": details}
        print(json.dumps({"ok": False, "error": payload}))
    else:
        sys.stderr.write(exc.usage)
        print(f"{exc.prog}: error: {exc.message}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stockade`` console script.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status (0 ok, 1 refused or failed, 2 usage error, 3 escalation,
        4 non-successor lock in ``diff``, 70 internal error).
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in arguments[: arguments.index("--")] if "--" in arguments else "--json" in arguments
    try:
        rest, found = split_globals(arguments)
        if found["version"]:
            return _print_version(as_json=found["json"])
        rest, passthrough = _split_passthrough(rest)
        command = rest[0] if rest and not rest[0].startswith("-") else None
        parser = _parser(command if command and find(command) else None)
        args = parser.parse_args(rest)
        if passthrough is not None:
            if not hasattr(args, "passthrough"):
                parser.error(f"`stockade {args.command}` takes no arguments after --")
            args.passthrough = passthrough
    except _UsageError as exc:
        return _usage_error(exc, as_json=as_json)
    except SystemExit as exc:  # --help exits 0
        return int(exc.code or 0)
    for name, value in found.items():
        if value or not hasattr(args, name):
            setattr(args, name, value)
    if args.command is None:
        if found["json"]:
            missing = _UsageError("a command is required", parser.format_usage(), "stockade")
            return _usage_error(missing, as_json=True)
        parser.print_help()
        return EXIT_USAGE
    status = _run(args)
    try:
        sys.stdout.flush()  # here, not at interpreter exit, where EPIPE prints a traceback
    except BrokenPipeError:
        return _reader_gone()
    return status


EXIT_PIPE: Final = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader left


def _reader_gone() -> int:
    """Exit quietly when stdout's reader went away (EPIPE): point stdout at /dev/null so the
    interpreter's final flush does not fail again, and say nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE


def _print_version(*, as_json: bool) -> int:
    info = version_info()
    if as_json:
        print(json.dumps(info))
    else:
        print(f"stockade {info['stockade']} (wasmtime {info['wasmtime']}, Python {info['python']})")
    return EXIT_OK


def _run(args: argparse.Namespace) -> int:
    try:
        apply_host_file(args)
        return int(args.func(args))
    except StockadeError as exc:
        _report(args, exc.code, exc.message, exc.hint, exc.to_dict())
        return EXIT_FAILED
    except CommandFailed as exc:
        _report(args, exc.code, exc.message, exc.hint, exc.to_dict())
        return EXIT_USAGE if isinstance(exc, UsageFailed) else EXIT_FAILED
    except BrokenPipeError:  # `stockade … | head`: the reader has what it wanted
        return _reader_gone()
    except OSError as exc:
        message = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        _report(args, "IO_ERROR", message, "check the path and its permissions", {"code": "IO_ERROR"})
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        build_error = _as_build_error(exc)
        if build_error is not None:
            code = build_error.code
            details = {"output_tail": build_error.output_tail}
            payload = {"code": code, "message": build_error.message, "details": details}
            _report(args, code, str(exc), "", payload)
            return EXIT_FAILED
        # Caller input is refused as UsageFailed/StockadeError where it is read; anything
        # else reaching here is a bug, not the user's fault: never call it a usage error.
        message = f"{type(exc).__name__}: {exc}"
        hint = "this is a bug in stockade; rerun with --debug for the traceback and report it"
        payload = {"code": "INTERNAL_ERROR", "message": message, "hint": hint}
        _report(args, "INTERNAL_ERROR", message, hint, payload)
        return EXIT_INTERNAL


def _as_build_error(exc: Exception) -> BuildError | None:
    """``exc`` if it is a ``sdk.author.build.BuildError`` (without importing sdk.author.build: a
    BuildError can only exist if the module was imported), else ``None``."""
    build = sys.modules.get("sdk.author.build")
    return exc if build is not None and isinstance(exc, build.BuildError) else None


if __name__ == "__main__":
    sys.exit(main())
