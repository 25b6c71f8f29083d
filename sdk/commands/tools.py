"""``stockade tools --format openai|anthropic|mcp``: the tool schemas a model is offered.

Opens the host (verifies the lock and compiles its components, see ``--lock`` and
``--state-dir``) and prints the registry's tool schemas as JSON in the chosen format.
OpenAI and Anthropic names replace ``.`` by ``__`` (``tracker__list-issues``); MCP keeps
the dotted name.
"""

from __future__ import annotations

import argparse
from typing import Any

from sdk.commands._common import EXIT_OK, add_host_options, open_host, print_json


def register(sub: Any) -> None:
    """Add the ``tools`` subcommand."""
    parser = sub.add_parser(
        "tools",
        help="print model-facing tool schemas (JSON)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--format",
        choices=("openai", "anthropic", "mcp"),
        default="openai",
        help="schema format (default openai)",
    )
    add_host_options(parser)
    parser.add_argument(
        "--json", action="store_true", help="accepted for symmetry: the output is always JSON"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the schemas."""
    with open_host(args) as host:
        print_json(host.tools(args.format))
    return EXIT_OK
