"""``stockade demo [--ci] [--workdir DIR]``: the scripted security demo, on loopback only.

Builds the first-party tracker plugin and a hostile plugin (cached after the first run),
signs and locks them, stores a demo secret, starts a fake tracker API on 127.0.0.1 over
HTTPS with a CA made for the run, and runs a scripted agent session: the tool list, an
allowed read with the credential injected by the host, invalid input refused, a write
approved by a person, the hostile plugin's tricks contained, a lock upgrade reviewed with
``stockade diff``, and the audit log verified. Nothing is sent beyond loopback.

Without a terminal on standard input (a pipe, CI) it runs as ``--ci``.

Caches: demo/ under the per-user cache ($STOCKADE_CACHE_DIR, default ~/.cache/stockade).

Exit codes: 0 every step behaved as expected, 1 a step did not (or setup failed),
2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sdk.commands._common import UsageFailed
from sdk.demo.run import WorkdirNotEmpty, run_demo


def register(sub: Any) -> None:
    """Add the ``demo`` subcommand."""
    parser = sub.add_parser(
        "demo",
        help="run the scripted security demo (loopback only)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--ci", action="store_true", help="no pauses and no prompts (the write is approved automatically)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        metavar="DIR",
        help="keep the workspace in DIR (new or empty); default: a temporary directory, removed afterwards",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; 0 if every step behaved as expected, else 1."""
    # without a terminal on stdin nobody can answer a prompt: behave as --ci
    ci = bool(args.ci) or not sys.stdin.isatty()
    try:
        return run_demo(ci=ci, workdir=args.workdir)
    except WorkdirNotEmpty as exc:
        raise UsageFailed("USAGE", str(exc), hint="pass a new or empty directory to --workdir") from None
