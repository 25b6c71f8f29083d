"""Deprecated: ``host.schema`` moved to :mod:`host.formats.schema` (imports from here warn).

Kept because docs/design.md §11 listed it among the paths host apps and outside suites
use; import from :mod:`host.formats.schema` instead.
"""

from __future__ import annotations

import warnings

from host.formats import schema as _moved
from host.formats.schema import *  # noqa: F403 - the whole former module

__all__ = list(_moved.__all__)

warnings.warn(
    "host.schema moved to host.formats.schema; import from there", DeprecationWarning, stacklevel=2
)
