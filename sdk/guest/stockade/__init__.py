"""Stockade guest SDK: write tools as plain Python functions.

Compiled into the plugin by ``stockade build`` (componentize-py); standard library only.
Authors never see the WIT bindings::

    from stockade import tool, http, log, secret_available, ToolInputError

    @tool("tracker.list-issues")
    def list_issues(input):
        if not input.get("repo"):
            raise ToolInputError("repo is required")
        r = http.get("https://api.tracker.example/v1/issues", headers={"Accept": "application/json"})
        log.info("got %d", r.status)
        return r.json()

Each call runs in a fresh instance: module-level state never survives a call.
"""

from __future__ import annotations

from stockade import http, log
from stockade._bindings import host as _host
from stockade._dispatch import registered_tools, tool
from stockade.errors import (
    BudgetExhausted,
    CredentialUnavailable,
    HttpDenied,
    HttpError,
    HttpTimeout,
    InvalidRequest,
    NetworkError,
    TooLarge,
    ToolError,
    ToolInputError,
)
from stockade.http import Response

__all__ = [
    "BudgetExhausted",
    "CredentialUnavailable",
    "HttpDenied",
    "HttpError",
    "HttpTimeout",
    "InvalidRequest",
    "NetworkError",
    "Response",
    "TooLarge",
    "ToolError",
    "ToolInputError",
    "http",
    "log",
    "registered_tools",
    "secret_available",
    "tool",
]


def secret_available(name):
    """Whether secret ``name`` is staged for this call. The value is never visible here."""
    if not isinstance(name, str):
        raise TypeError("secret name must be str")
    return bool(_host.secret_available(name))
