"""Stockade host: the library host apps embed (DESIGN §1, §11).

Only the names in ``__all__`` are the stable API; everything else may move.

Example::

    from host import CallRequest, FilePolicyEngine, Host, HostConfig, Principal

    with Host.open("stockade.lock", config=HostConfig(state_dir=state), secrets=None,
                   policy=FilePolicyEngine(state / "policy.json"),
                   audit=state / "audit.log") as host:
        result = host.call(CallRequest(principal=Principal(project="p", subject="alice"),
                                       session="s1", tool="jsonkit.query", version="1.0.0",
                                       input={"document": "{\"a\": 1}", "path": "a"}))
"""

from __future__ import annotations

from host.audit import AuditLog
from host.config import Ceilings, HostConfig
from host.errors import StockadeError
from host.gateway import CallResult, ErrorInfo, Host, Usage
from host.plan import Approval, CallRequest, InvocationPlan, Principal
from host.policy.engine import FilePolicyEngine
from host.secrets import MasterKey, SecretsStore

__all__ = [
    "Approval",
    "AuditLog",
    "CallRequest",
    "CallResult",
    "Ceilings",
    "ErrorInfo",
    "FilePolicyEngine",
    "Host",
    "HostConfig",
    "InvocationPlan",
    "MasterKey",
    "Principal",
    "SecretsStore",
    "StockadeError",
    "Usage",
]
