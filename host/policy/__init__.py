"""Policy: the PolicyEngine port, the layered tool policy and session grants (docs/design.md §6).

- :mod:`host.policy.engine` — ``PolicyEngine`` port, ``Decision``/``Fence``,
  :func:`check_fences`, and the file-backed default engine.
- :mod:`host.policy.toolpolicy` — tri-state tool policy (managed cap, user selectors,
  class defaults) persisted per (account, workspace), with quarantine.
- :mod:`host.policy.grants` — "always for this session" grants and
  :func:`final_decision`, the one place the three are combined.
"""

from __future__ import annotations

from host.policy.engine import (
    Decision,
    FilePolicyEngine,
    PolicyEngine,
    PrincipalRef,
    Verdict,
    aggregate,
    check_fences,
)
from host.policy.grants import SessionGrants, final_decision
from host.policy.toolpolicy import (
    ClassSelector,
    Selector,
    ServiceSelector,
    ToolMode,
    ToolPolicyStore,
    ToolSelector,
    UserToolPolicy,
    service_of,
)
from host.types import Fence

__all__ = [
    "ClassSelector",
    "Decision",
    "Fence",
    "FilePolicyEngine",
    "PolicyEngine",
    "PrincipalRef",
    "Selector",
    "ServiceSelector",
    "SessionGrants",
    "ToolMode",
    "ToolPolicyStore",
    "ToolSelector",
    "UserToolPolicy",
    "Verdict",
    "aggregate",
    "check_fences",
    "final_decision",
    "service_of",
]
