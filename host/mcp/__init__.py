"""Stockade as an MCP server (optional extra ``stockade[mcp]``; docs/design.md §12).

:mod:`host.mcp.server` (the server; needs the ``mcp`` SDK), :mod:`host.mcp.transport`
(stdio, Streamable HTTP, reload triggers), :mod:`host.mcp.state` (single-use
``requestState``), :mod:`host.mcp.tokens` (bearer tokens; no SDK needed). Names are
imported lazily so ``stockade tokens`` works without the extra; ``host`` itself never
imports this package.

Example::

    from host.mcp import ServeOptions, StockadeMCP

    app = StockadeMCP(lambda: Host.open(...), options=ServeOptions(state_dir=d, principal=p))
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "APPROVAL_KEY",
    "META_KEY",
    "RequestStates",
    "ServeOptions",
    "StockadeMCP",
    "TokenEntry",
    "TokenFile",
]

_HOMES = {
    "APPROVAL_KEY": "host.mcp.server",
    "META_KEY": "host.mcp.server",
    "ServeOptions": "host.mcp.server",
    "StockadeMCP": "host.mcp.server",
    "RequestStates": "host.mcp.state",
    "TokenEntry": "host.mcp.tokens",
    "TokenFile": "host.mcp.tokens",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'host.mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
