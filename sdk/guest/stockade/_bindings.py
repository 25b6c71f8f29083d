"""The one place the SDK touches the bindings componentize-py generates for the world.

componentize-py generates ``wit_world`` (the world, its ``WitWorld`` protocol and the
imported interfaces) and ``componentize_py_types`` (``Ok``/``Err``) at build time.
Everything the guest imports must be imported at the top level so that it is in the
pre-initialised snapshot (componentize-py runs the top level once at build time and
snapshots the result; a module first imported during a call is not in it). Unit tests run the SDK under plain
CPython against the same generated bindings, produced with ``componentize-py bindings``.
"""

from __future__ import annotations

from componentize_py_types import Err
from wit_world import WitWorld as WorldProtocol
from wit_world.imports import host, types

__all__ = ["Err", "WorldProtocol", "host", "types"]
