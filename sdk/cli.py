"""The ``stockade`` command: parsing and presentation only (STYLE §15).

Each subcommand lives in ``sdk/commands/<name>.py`` with ``register(subparsers)``; its
parsers set ``func(args) -> int``. Errors are printed as ``error: CODE: message`` plus
``what to do: hint`` on stderr (with ``--json``, as ``{"ok": false, "error": {...}}`` on
stdout), never a traceback (``stockade --debug ...`` shows one).

Exit codes: 0 ok; 1 refused or failed (a StockadeError or a refusal the CLI detects);
2 usage error; 3 ``diff`` found an escalation.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from host.errors import StockadeError
from sdk.build import BuildError
from sdk.commands._common import (
    EXIT_ESCALATION,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CommandFailed,
    UsageFailed,
    safe_text,
)

__all__ = ["EXIT_ESCALATION", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]

_COMMANDS = (
    # authors
    "new", "build", "test", "dev", "watch", "toolchain", "cache", "keygen", "sign",
    # reviewers
    "inspect", "lock", "diff",
    # distribution
    "push", "pull",
    # host operators
    "tools", "call", "policy", "secrets", "log", "store", "demo",
    # MCP
    "serve", "tokens", "approvals",
)  # fmt: skip
"""Subcommand modules under ``sdk/commands/``, in ``--help`` order. Each module has
``register(subparsers)`` and sets ``func`` on its parsers."""


def _parser(argv: Sequence[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stockade",
        description=(
            "Stockade: a WebAssembly-sandbox plugin host for AI agents that call tools.\n"
            "The model proposes a tool call; the host decides."
        ),
        epilog=(
            "Exit codes: 0 ok, 1 refused or failed, 2 usage error, 3 diff found an escalation.\n"
            "Run `stockade COMMAND --help` for each command."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _wanted(argv):
        importlib.import_module(f"sdk.commands.{name}").register(sub)
    return parser


def _wanted(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules to import: only the one named (each imports what it needs, and
    startup time matters for scripts), or all of them for top-level help and errors."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)  # --debug takes no value
    return (first,) if first in _COMMANDS else _COMMANDS


def _report(args: argparse.Namespace, code: str, message: str, hint: str, payload: dict[str, Any]) -> None:
    if getattr(args, "debug", False):
        traceback.print_exc()
    if getattr(args, "json", False):
        print(json.dumps({"ok": False, "error": payload}, default=str))
        return
    print(f"error: {code}: {safe_text(message)}", file=sys.stderr)
    if hint:
        print(f"  what to do: {safe_text(hint)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stockade`` console script.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status (0 ok, 1 refused or failed, 2 usage error, 3 escalation).
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = _parser(arguments)
    try:
        args = parser.parse_args(arguments)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except StockadeError as exc:
        _report(args, exc.code, exc.message, exc.hint, exc.to_dict())
        return EXIT_FAILED
    except CommandFailed as exc:
        _report(args, exc.code, exc.message, exc.hint, exc.to_dict())
        return EXIT_USAGE if isinstance(exc, UsageFailed) else EXIT_FAILED
    except BuildError as exc:
        _report(args, "BUILD_FAILED", str(exc), "", {"code": "BUILD_FAILED", "message": str(exc)})
        return EXIT_FAILED
    except ValueError as exc:  # caller input refused before reaching host (e.g. a bad secret name)
        hint = f"see `stockade {args.command} --help`"
        _report(args, "USAGE", str(exc), hint, {"code": "USAGE", "message": str(exc)})
        return EXIT_USAGE
    except OSError as exc:
        message = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        _report(args, "IO_ERROR", message, "check the path and its permissions", {"code": "IO_ERROR"})
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
