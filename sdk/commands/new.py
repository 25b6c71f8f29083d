"""``stockade new NAME [--lang python|javascript] [--template T] [--dir DIR]``: start a plugin project.

Writes ``stockade.toml``, ``app.py`` (or ``app.js``), ``README.md``, ``.gitignore`` and
``tests/test_tools.py`` into ``DIR`` (default ``./NAME``), which must not exist or be
empty. The project builds as is and its tests pass: ``stockade test DIR``. Templates:
``read-api`` (default: a pure tool and a GET with a host-injected token),
``write-with-approval`` (a POST tool the host asks a person to approve) and ``compute``
(a pure function; no network at all).

Exit codes: 0 written; 1 the directory is not empty; 2 invalid name or options.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sdk.author.scaffold import TEMPLATE_NAMES, ScaffoldError, scaffold_project
from sdk.commands._common import EXIT_OK, CommandFailed, UsageFailed, cell, print_json, stdout_console


def register(sub: Any) -> None:
    """Add the ``new`` subcommand."""
    parser = sub.add_parser(
        "new",
        help="start a plugin project (Python or JavaScript) with a passing test",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="package name, e.g. my-tools (prefixes every tool)")
    parser.add_argument(
        "--lang", choices=("python", "javascript"), default="python", help="plugin language (default python)"
    )
    parser.add_argument(
        "--template", choices=TEMPLATE_NAMES, default="read-api",
        help="read-api (default: a pure tool and an authenticated GET), write-with-approval "
        "(a write tool a person approves), compute (no network at all)",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, default=None, help="project directory (default ./NAME)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Scaffold the project and say what to do next."""
    directory: Path = args.dir if args.dir is not None else Path(args.name)
    try:
        written = scaffold_project(directory, args.name, language=args.lang, template=args.template)
    except ScaffoldError as exc:
        if exc.code in ("NAME_INVALID", "TEMPLATE_UNKNOWN"):
            raise UsageFailed(exc.code, exc.message, hint="e.g. `stockade new my-tools`") from None
        hint = "choose a new or empty directory with --dir"
        raise CommandFailed(exc.code, exc.message, hint=hint) from None
    if args.json:
        print_json({"ok": True, "project": str(directory), "files": [str(p) for p in written]})
        return EXIT_OK
    console = stdout_console()
    console.print(f"created {cell(args.lang)} plugin project [bold]{cell(args.name)}[/] in {cell(directory)}")
    for path in written:
        console.print(f"  {cell(path)}")
    console.print("next:")
    console.print(f"  stockade build {cell(directory)}")
    console.print(f"  stockade test {cell(directory)}")
    return EXIT_OK
