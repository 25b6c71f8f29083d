"""Stockade host: the library host apps embed (DESIGN §1, §11).

Only the names in ``__all__`` are the stable API; everything else may move.
"""

from __future__ import annotations

from host.config import Ceilings, HostConfig
from host.errors import StockadeError

__all__ = [
    "Ceilings",
    "HostConfig",
    "StockadeError",
]
