"""Egress: every outbound HTTP request a guest makes, performed by the host (docs/design.md §8).

Stable entry points (docs/design.md §11): :class:`EgressPolicy` (``from_allow``, ``check``,
``vet``), :class:`EgressTarget` and :func:`is_public_address`.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from host.egress.addresses import is_public_address
from host.egress.policy import EgressPolicy, EgressTarget, Resolver, system_resolver
from host.egress.urls import DenyReason

if _typing.TYPE_CHECKING:
    from host.egress.session import EgressSession, EgressUsage, RequestRecord

# The session (and httpx2 under it) is imported on first use (PEP 562): importing
# host.egress.urls, as host.formats.manifest does, must not cost httpx2's import time, which every
# command reading a manifest (``inspect``, ``lock verify``) would pay.
_LAZY: dict[str, str] = {
    "EgressSession": "host.egress.session",
    "EgressUsage": "host.egress.session",
    "RequestRecord": "host.egress.session",
}

__all__ = [
    "DenyReason",
    "EgressPolicy",
    "EgressSession",
    "EgressTarget",
    "EgressUsage",
    "RequestRecord",
    "Resolver",
    "is_public_address",
    "system_resolver",
]


def __getattr__(name: str) -> object:
    """Import a session name from its module on first access (see ``_LAZY``)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'host.egress' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
