"""The ``stockade`` command (placeholder until the CLI issue lands)."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``stockade`` console script. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="stockade",
        description="Stockade: a WebAssembly-sandbox plugin host for AI agents that call tools.",
    )
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
