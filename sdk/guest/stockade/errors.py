"""Exceptions a tool author raises or catches.

Raise :class:`ToolInputError` when the input makes no sense to the tool (the host reports
INPUT_INVALID) and :class:`ToolError` for any other failure (TOOL_FAILED). Any other
exception escaping a tool is reported as TOOL_FAILED with a short message too: an
exception never crashes the sandbox.

Each case of the WIT ``http-error`` variant is one subclass of :class:`HttpError`::

    denied                  HttpDenied             the host's egress rules refused it
    credential-unavailable  CredentialUnavailable  a secret the request needs is missing
    invalid-request         InvalidRequest         malformed method, URL or header
    too-large               TooLarge               request or response over its byte limit
    timeout                 HttpTimeout            the request ran out of time
    budget-exhausted        BudgetExhausted        no more requests allowed in this call
    network                 NetworkError           connection or protocol failure
"""

from __future__ import annotations

__all__ = [
    "BudgetExhausted",
    "CredentialUnavailable",
    "HttpDenied",
    "HttpError",
    "HttpTimeout",
    "InvalidRequest",
    "NetworkError",
    "TooLarge",
    "ToolError",
    "ToolInputError",
]


class ToolError(Exception):
    """The tool failed; the message is reported to the caller (TOOL_FAILED)."""


class ToolInputError(ToolError):
    """The input is unusable; the message is reported to the caller (INPUT_INVALID)."""


class HttpError(Exception):
    """An outbound request failed. ``kind`` is the WIT case, ``detail`` the host's text."""

    kind = "http-error"

    def __init__(self, detail=""):
        self.detail = detail
        super().__init__(f"{self.kind}: {detail}" if detail else self.kind)


class HttpDenied(HttpError):
    """The host's egress rules refused the request (host, path, method or header)."""

    kind = "denied"


class CredentialUnavailable(HttpError):
    """A secret that the request's credential mapping needs is not available."""

    kind = "credential-unavailable"


class InvalidRequest(HttpError):
    """The request is malformed (method, URL or headers)."""

    kind = "invalid-request"


class TooLarge(HttpError):
    """The request or the response body is over its byte limit."""

    kind = "too-large"


class HttpTimeout(HttpError):
    """The request did not complete in time."""

    kind = "timeout"


class BudgetExhausted(HttpError):
    """The call has used all the outbound requests its manifest allows."""

    kind = "budget-exhausted"


class NetworkError(HttpError):
    """Connection, TLS or protocol failure."""

    kind = "network"
