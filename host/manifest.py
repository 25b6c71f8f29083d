"""Deprecated: ``host.manifest`` moved to :mod:`host.formats.manifest` (imports from here warn).

Kept because docs/design.md §11 listed it among the paths host apps and outside suites
use; import from :mod:`host.formats.manifest` instead.
"""

from __future__ import annotations

import warnings

from host.formats import manifest as _moved
from host.formats.manifest import *  # noqa: F403 - the whole former module

__all__ = list(_moved.__all__)

warnings.warn(
    "host.manifest moved to host.formats.manifest; import from there", DeprecationWarning, stacklevel=2
)
