"""Shared option handling for CLI subcommands."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_STATE_DIR = Path("~/.stockade")


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    """Add ``--state-dir`` (default ``$STOCKADE_HOME`` or ``~/.stockade``)."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="host state directory (default: $STOCKADE_HOME or ~/.stockade)",
    )


def state_dir(args: argparse.Namespace) -> Path:
    """The state directory the user chose, expanded."""
    chosen = args.state_dir or Path(os.environ.get("STOCKADE_HOME", str(DEFAULT_STATE_DIR)))
    return Path(chosen).expanduser()
