"""``stockade toolchain install|status``: the JavaScript build toolchain.

JavaScript plugins are built with componentize-js, their npm dependencies bundled with
esbuild (Node.js >= 20 and npm required). Their versions are pinned by the lock file
shipped with Stockade; ``install`` runs ``npm ci --ignore-scripts`` into the per-user cache
(``$STOCKADE_CACHE_DIR`` or ``~/.cache/stockade``, under ``toolchain/``), and the first
JavaScript build does the same by itself. ``status`` says what is installed where.
``$STOCKADE_JS_TOOLCHAIN`` may name another directory holding the pinned ``node_modules``.

Exit codes: 0 installed (or already complete); 1 npm missing or the install failed.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from sdk.author.toolchain import (
    JS_TOOLCHAIN_ENV,
    ToolchainError,
    ensure_js_toolchain,
    install_js_toolchain,
    js_toolchain_dir,
    pinned_packages,
    toolchain_problems,
)
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    CommandFailed,
    add_verb,
    cell,
    print_json,
    stderr_console,
)


def register(sub: Any) -> None:
    """Add the ``toolchain`` subcommand."""
    parser = sub.add_parser(
        "toolchain",
        help="install or check the JavaScript build toolchain (componentize-js, esbuild)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    add_verb(verbs, "install", "install the pinned toolchain into the per-user cache", run_install)
    add_verb(verbs, "status", "where the toolchain is and whether it is complete", run_status)


def run_install(args: argparse.Namespace) -> int:
    """Install (or confirm) the toolchain, printing progress lines on stderr."""
    console = stderr_console()
    started = time.monotonic()
    last = [-10.0]

    def report(stage: str, fraction: float) -> None:
        del fraction
        now = time.monotonic()
        if now - last[0] >= 5.0:  # one line every 5 s: readable in logs and terminals
            last[0] = now
            console.print(cell(stage), soft_wrap=True)

    try:
        if os.environ.get(JS_TOOLCHAIN_ENV):  # a named toolchain is checked, never installed into
            toolchain = ensure_js_toolchain()
        else:
            toolchain = install_js_toolchain(report=None if args.json else report)
    except ToolchainError as exc:
        raise CommandFailed(
            "TOOLCHAIN_FAILED", str(exc), hint="install Node.js >= 20 with npm, check network access, retry"
        ) from None
    elapsed = time.monotonic() - started
    if args.json:
        print_json(
            {"ok": True, "root": str(toolchain.root), "versions": toolchain.versions,
             "installed_now": toolchain.installed_now, "elapsed_s": round(elapsed, 1)}
        )  # fmt: skip
        return EXIT_OK
    verb = "installed" if toolchain.installed_now else "already installed"
    pins = ", ".join(f"{name} {version}" for name, version in toolchain.versions.items())
    console.print(f"JavaScript toolchain {verb} in {cell(toolchain.root)} ({elapsed:.1f} s): {cell(pins)}")
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    """Report the toolchain's directory and problems; 1 when it is incomplete."""
    root = js_toolchain_dir()
    problems = toolchain_problems(root)
    if args.json:
        print_json({"ok": not problems, "root": str(root), "pins": pinned_packages(), "problems": problems})
    else:
        console = stderr_console()
        console.print(f"JavaScript toolchain: {cell(root)}")
        for problem in problems or ["complete"]:
            console.print(f"  {cell(problem)}")
        if problems:
            console.print("  run `stockade toolchain install` (the first JavaScript build also installs it)")
    return EXIT_FAILED if problems else EXIT_OK
