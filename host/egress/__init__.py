"""Egress: every outbound HTTP request a guest makes, performed by the host (DESIGN §8).

Stable entry points (DESIGN §11): :class:`EgressPolicy` (``from_allow``, ``check``,
``vet``), :class:`EgressTarget` and :func:`is_public_address`.
"""

from __future__ import annotations

from host.egress.addresses import is_public_address
from host.egress.policy import EgressPolicy, EgressTarget, Resolver, system_resolver
from host.egress.session import EgressSession, EgressUsage, RequestRecord
from host.egress.urls import DenyReason

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
