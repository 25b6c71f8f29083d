"""Stockade SDK: everything for people who make and review packages.

The SDK may import ``host``; ``host`` never imports the SDK (docs/design.md §1).
"""

from __future__ import annotations

__all__: list[str] = []
