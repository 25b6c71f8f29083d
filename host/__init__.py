"""Stockade host: the library host apps embed (docs/design.md §1, §11).

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

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from host.audit.log import AuditLog
    from host.call.host import Host
    from host.config import Ceilings, HostConfig
    from host.errors import StockadeError
    from host.policy.engine import FilePolicyEngine
    from host.secrets.store import MasterKey, SecretsStore
    from host.types import Approval, CallRequest, CallResult, ErrorInfo, InvocationPlan, Principal, Usage

# Each public name is imported from its module on first use (PEP 562), so that
# ``import host.errors`` or ``import host.audit.log`` stays cheap: the CLI's start-up time
# depends on it; ``from host import Host`` still works unchanged.
_EXPORTS: dict[str, str] = {
    "AuditLog": "host.audit.log",
    "Ceilings": "host.config",
    "HostConfig": "host.config",
    "StockadeError": "host.errors",
    "Host": "host.call.host",
    "Approval": "host.types",
    "CallRequest": "host.types",
    "CallResult": "host.types",
    "ErrorInfo": "host.types",
    "InvocationPlan": "host.types",
    "Principal": "host.types",
    "Usage": "host.types",
    "FilePolicyEngine": "host.policy.engine",
    "MasterKey": "host.secrets.store",
    "SecretsStore": "host.secrets.store",
}

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


def __getattr__(name: str) -> object:
    """Import a public name from its module on first access (see ``_EXPORTS``)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'host' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
