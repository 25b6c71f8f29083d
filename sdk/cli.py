"""The ``stockade`` command: parsing and presentation only (STYLE §15).

Each subcommand lives in ``sdk/commands/<name>.py`` with ``register(subparsers)`` and a
``run(args) -> int``. Errors are printed as ``CODE: message`` plus what to do, never a
traceback (``--debug`` shows one).

Exit codes: 0 ok; 1 refused or failed (a StockadeError); 2 usage error; 3 ``diff`` found
an escalation.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from collections.abc import Sequence

from host.errors import StockadeError
from sdk.build import BuildError

__all__ = ["EXIT_ESCALATION", "EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_ESCALATION = 3

_COMMANDS = (
    # authors
    "new", "build", "test", "keygen", "sign",
    # reviewers
    "inspect", "lock", "diff",
    # host operators
    "tools", "call", "secrets", "log", "demo",
)
"""Subcommand modules under ``sdk/commands/``, in ``--help`` order. Each module has
``register(subparsers)`` and sets ``func`` on its parsers."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stockade",
        description=(
            "Stockade: a WebAssembly-sandbox plugin host for AI agents that call tools.\n"
            "The model proposes a tool call; the host decides."
        ),
        epilog="Exit codes: 0 ok, 1 refused or failed, 2 usage error, 3 diff found an escalation.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show a traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMANDS:
        importlib.import_module(f"sdk.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stockade`` console script. Returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except StockadeError as exc:
        if args.debug:
            traceback.print_exc()
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "error": exc.to_dict()}, default=str))
        else:
            print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
            if exc.hint:
                print(f"  what to do: {exc.hint}", file=sys.stderr)
        return EXIT_FAILED
    except BuildError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: BUILD_FAILED: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ValueError as exc:  # caller input refused before reaching host (e.g. a bad secret name)
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
