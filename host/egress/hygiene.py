"""Request and response hygiene for host-performed egress (docs/design.md §8 steps 2 and 9).

The guest never supplies credentials, routing or message framing: the host does. This
module decides, from names alone, which request headers and query parameters a guest may
send and which response headers a guest may see. It holds no secrets and does no I/O.

Rules (each refusal raises :class:`~host.errors.EgressDenied` with the ``reason`` shown;
the egress session maps ``invalid_*`` reasons to the ``invalid-request`` error of the WIT
and every other reason to ``denied``):

- method: an RFC 9110 token of at most 16 characters (``invalid_method``); whether the
  allow entry admits it is the policy's decision (``method_not_allowed``);
- header names: RFC 9110 tokens (no controls, spaces or ``:``) of at most 256 characters;
  values: visible ASCII, space and HTAB only, no leading or trailing whitespace, at most
  8 KiB; at most :data:`MAX_HEADERS` headers and :data:`MAX_HEADER_BYTES` in all
  (``invalid_header``);
- host-owned headers (``Host``, framing and hop-by-hop headers such as ``Content-Length``
  and ``Transfer-Encoding``, any ``Proxy-*``) are refused (``forbidden_header``): letting a
  guest set them invites request smuggling;
- re-routing headers (:data:`REROUTING_HEADERS`: method overrides such as
  ``X-HTTP-Method-Override``, URL rewrites such as ``X-Original-URL``, ``Forwarded``,
  any ``X-Forwarded-*``, client-address headers such as ``X-Real-IP``) are refused
  (``forbidden_header``): common servers and frameworks honour them and would
  turn an allowed request into another method, path or origin next to the injected
  credentials;
- every header name is compared after case-folding and mapping ``_`` to ``-``
  (:func:`fold_header_name`): ``Content_Length`` or ``X_Forwarded_For`` is the host-owned
  header, since many servers (nginx with ``underscores_in_headers``, CGI/WSGI environ
  keys) treat the two spellings as one;
- credential-like headers are refused (``credential_header``): the names listed in
  :data:`CREDENTIAL_HEADERS` and any name whose letters and digits contain one of
  :data:`CREDENTIAL_HEADER_WORDS` (``token``, ``secret``, ``password``, ``credential``,
  ``auth``, ...), compared case-insensitively with ``-`` and ``_`` ignored;
- credential-like query parameters are refused (``credential_query``): after
  percent-decoding, lower-casing and dropping everything but letters and digits, a name
  equal to one of :data:`CREDENTIAL_QUERY_NAMES` or containing one of
  :data:`CREDENTIAL_QUERY_WORDS`. ``auth`` is matched exactly here (``author`` is an
  ordinary parameter), ``&`` and ``;`` both separate parameters.

Trace context headers (:data:`TRACE_CONTEXT_HEADERS`: ``traceparent``, ``tracestate``)
a guest sends are dropped, not refused (:func:`strip_trace_context`): the trace context
of a request is the host's to give, from the call's egress span, and only where the allow
entry opts in (``propagate_trace``); a guest-chosen one would let a plugin join the
third party's traces to a trace of its choosing, or pass for the host's own context.

Response headers the guest never sees (:func:`sanitize_response_headers`): ``Set-Cookie``,
``Set-Cookie2``, every credential-like name above, hop-by-hop headers, and
``Content-Length``/``Content-Encoding`` (the host decodes and redacts the body, so the
original framing no longer describes it).

Example::

    check_request_headers([("Accept", "application/json")])      # fine
    check_request_headers([("X-Auth-Token", "abc")])             # EgressDenied(credential_header)
    check_query("page=2&api_key=abc")                            # EgressDenied(credential_query)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final
from urllib.parse import unquote_plus

from host.errors import EgressDenied

__all__ = [
    "CREDENTIAL_HEADERS",
    "CREDENTIAL_HEADER_WORDS",
    "CREDENTIAL_QUERY_NAMES",
    "CREDENTIAL_QUERY_WORDS",
    "HOST_OWNED_HEADERS",
    "INVALID_REQUEST_REASONS",
    "MAX_HEADERS",
    "MAX_HEADER_BYTES",
    "REROUTING_HEADERS",
    "REROUTING_PREFIXES",
    "TRACE_CONTEXT_HEADERS",
    "check_method",
    "check_query",
    "check_request_headers",
    "fold_header_name",
    "is_credential_header_name",
    "is_credential_query_name",
    "sanitize_response_headers",
    "strip_trace_context",
]

MAX_HEADERS: Final = 64  # headers in one guest request
MAX_HEADER_BYTES: Final = 32 * 1024  # bytes, sum of names and values of one guest request
MAX_HEADER_NAME_CHARS: Final = 256  # characters
MAX_HEADER_VALUE_CHARS: Final = 8 * 1024  # characters
MAX_METHOD_CHARS: Final = 16  # characters

INVALID_REQUEST_REASONS: Final = frozenset(
    {"invalid_method", "invalid_header", "invalid_url", "control_character"}
)
"""Reasons that mean "malformed" (WIT ``invalid-request``) rather than "not allowed"."""

CREDENTIAL_HEADERS: Final = frozenset(
    {
        "authorization", "proxy-authorization", "cookie", "cookie2", "x-api-key", "api-key",
        "x-auth-token", "x-token", "x-access-token", "x-session-token", "x-csrf-token",
        "x-xsrf-token", "x-secret", "x-api-secret", "set-cookie", "set-cookie2",
    }
)
"""Credential headers refused (request) or dropped (response) by exact name."""

CREDENTIAL_HEADER_WORDS: Final = (
    "token", "secret", "password", "passwd", "credential", "auth", "cookie", "apikey",
    "accesskey", "privatekey", "session", "signature", "csrf", "xsrf",
)
"""A header name whose letters and digits contain one of these is credential-like."""

HOST_OWNED_HEADERS: Final = frozenset(
    {
        "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te",
        "trailer", "upgrade", "expect", "proxy-connection", "forwarded", "x-forwarded-for",
        "x-forwarded-host", "x-forwarded-proto", "x-real-ip",
    }
)
"""Routing, framing and hop-by-hop headers only the host may write (request smuggling)."""

REROUTING_HEADERS: Final = frozenset(
    {
        "x-http-method-override", "x-http-method", "x-method-override", "x-original-method",
        "x-original-url", "x-rewrite-url", "x-override-url", "x-original-uri",
        "x-original-host", "x-host", "forwarded", "x-real-ip", "true-client-ip",
        "x-client-ip", "x-cluster-client-ip", "client-ip", "x-originating-ip", "x-remote-ip",
        "x-remote-addr", "x-proxyuser-ip",
    }
)
"""Headers that make common servers re-route a request (method, URL, origin): refused."""

REROUTING_PREFIXES: Final = ("x-forwarded-", "proxy-")
"""Folded header-name prefixes refused like :data:`REROUTING_HEADERS`."""

TRACE_CONTEXT_HEADERS: Final = frozenset({"traceparent", "tracestate"})
"""W3C Trace Context headers: only the host writes them (folded names, see above)."""

CREDENTIAL_QUERY_NAMES: Final = frozenset(
    {
        "key", "auth", "oauth", "sig", "pwd", "pass", "jwt", "bearer", "sid", "session",
        "sessid", "otp", "hmac", "xsrf", "csrf",
    }
)
"""Query parameter names (letters and digits, lower-cased) refused exactly."""

CREDENTIAL_QUERY_WORDS: Final = (
    "token", "secret", "password", "passwd", "credential", "apikey", "accesskey",
    "privatekey", "signature", "sessionid", "authorization", "clientsecret", "authkey",
)
"""A query parameter name containing one of these (letters and digits only) is refused."""

_RESPONSE_DROPPED: Final = frozenset(
    {
        "connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
        "proxy-connection", "content-length", "content-encoding",
    }
)

_TOKEN_RE: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE_RE: Final = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?")
_NOT_ALNUM_RE: Final = re.compile(r"[^0-9a-z]+")


def fold_header_name(name: str) -> str:
    """The spelling header names are compared in: lower-case, ``_`` mapped to ``-``.

    Args:
        name: a header name as sent.

    Returns:
        ``"x-forwarded-for"`` for ``X_Forwarded_For``, ``x-forwarded-for`` and so on.
    """
    return name.lower().replace("_", "-")


def _squash(name: str) -> str:
    """Lower-case ``name`` and drop everything but ASCII letters and digits."""
    return _NOT_ALNUM_RE.sub("", name.lower())


def is_credential_header_name(name: str) -> bool:
    """Whether a header name is credential-like (docs/design.md §8 step 2).

    Args:
        name: a header name, any case.

    Returns:
        True for ``Authorization``, ``X-Api-Key``, ``My-Auth-Thing``, ``Cookie`` and so on.
    """
    lowered = fold_header_name(name)
    if lowered in CREDENTIAL_HEADERS:
        return True
    squashed = _squash(lowered)
    return any(word in squashed for word in CREDENTIAL_HEADER_WORDS)


def is_credential_query_name(name: str) -> bool:
    """Whether a (raw, possibly percent-encoded) query parameter name is credential-like.

    Args:
        name: the name as it appears in the query string.

    Returns:
        True for ``api_key``, ``access_token``, ``X-Amz-Signature``, ``key`` and so on.
    """
    squashed = _squash(unquote_plus(name, errors="replace"))
    if squashed in CREDENTIAL_QUERY_NAMES:
        return True
    return any(word in squashed for word in CREDENTIAL_QUERY_WORDS)


def check_method(method: str) -> str:
    """Check that ``method`` is a well-formed HTTP method token.

    Args:
        method: the guest's method, exactly as sent (methods are case-sensitive).

    Returns:
        ``method`` unchanged.

    Raises:
        EgressDenied: reason ``invalid_method``.
    """
    if not isinstance(method, str):
        raise EgressDenied("the HTTP method must be a string", reason="invalid_method")
    if len(method) > MAX_METHOD_CHARS or _TOKEN_RE.fullmatch(method) is None:
        raise EgressDenied(f"invalid HTTP method {method[:32]!r}", reason="invalid_method")
    return method


def _check_header(name: str, value: str) -> None:
    if len(name) > MAX_HEADER_NAME_CHARS or _TOKEN_RE.fullmatch(name) is None:
        raise EgressDenied(
            f"invalid header name {name[:64]!r}: must be an HTTP token without control "
            "characters, spaces or ':'",
            reason="invalid_header",
        )
    if len(value) > MAX_HEADER_VALUE_CHARS or _VALUE_RE.fullmatch(value) is None:
        raise EgressDenied(
            f"invalid value for header {name!r}: only visible ASCII, space and tab are allowed "
            "(no CR, LF, NUL or other control characters, no surrounding whitespace)",
            reason="invalid_header",
        )
    folded = fold_header_name(name)
    if folded in HOST_OWNED_HEADERS or folded.startswith("proxy-"):
        raise EgressDenied(
            f"header {name!r} is set by the host, not by the plugin", reason="forbidden_header"
        )
    if folded in REROUTING_HEADERS or folded.startswith(REROUTING_PREFIXES):
        raise EgressDenied(
            f"header {name!r} would make servers re-route the request (method, URL or "
            "client address); it may not be sent",
            reason="forbidden_header",
        )
    if is_credential_header_name(folded):
        raise EgressDenied(
            f"header {name!r} looks like a credential; credentials are injected by the host "
            "from the manifest's http.credentials",
            reason="credential_header",
        )


def check_request_headers(headers: Sequence[tuple[str, str]]) -> None:
    """Check every guest-supplied request header (docs/design.md §8 step 2).

    Args:
        headers: the guest's headers as (name, value) pairs.

    Raises:
        EgressDenied: reason ``invalid_header`` (malformed, too many or too large),
            ``forbidden_header`` (host-owned) or ``credential_header``.
    """
    if len(headers) > MAX_HEADERS:
        raise EgressDenied(
            f"{len(headers)} headers, at most {MAX_HEADERS} are allowed", reason="invalid_header"
        )
    total = 0
    for pair in headers:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise EgressDenied("each header must be a (name, value) pair", reason="invalid_header")
        name, value = pair
        if not isinstance(name, str) or not isinstance(value, str):
            raise EgressDenied("header names and values must be strings", reason="invalid_header")
        total += len(name) + len(value)
        if total > MAX_HEADER_BYTES:
            raise EgressDenied(
                f"headers exceed {MAX_HEADER_BYTES} bytes in all", reason="invalid_header"
            )
        _check_header(name, value)


def strip_trace_context(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The guest's headers without any :data:`TRACE_CONTEXT_HEADERS` (in any spelling).

    Args:
        headers: headers that passed :func:`check_request_headers`.

    Returns:
        The other pairs, in order.
    """
    return [(name, value) for name, value in headers if fold_header_name(name) not in TRACE_CONTEXT_HEADERS]


def _query_names(query: str) -> Iterable[str]:
    """The raw parameter names of a query string (``&`` and ``;`` both separate)."""
    for part in re.split(r"[&;]", query):
        if part:
            yield part.split("=", 1)[0]


def check_query(query: str | None) -> None:
    """Refuse credential-like parameter names in a guest's query string.

    Args:
        query: the query without ``?`` (``None`` or empty for none).

    Raises:
        EgressDenied: reason ``credential_query``.
    """
    if not query:
        return
    for name in _query_names(query):
        if is_credential_query_name(name):
            raise EgressDenied(
                f"query parameter {name[:64]!r} looks like a credential; credentials are "
                "injected by the host from the manifest's http.credentials",
                reason="credential_query",
            )


def sanitize_response_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Drop the response headers a guest must not see (docs/design.md §8 step 9).

    Args:
        headers: the server's headers as (name, value) pairs.

    Returns:
        The kept pairs, in order. Values are not redacted here (the session does that).
    """
    kept: list[tuple[str, str]] = []
    for name, value in headers:
        lowered = fold_header_name(name)
        if lowered in _RESPONSE_DROPPED or lowered.startswith("proxy-"):
            continue
        if is_credential_header_name(lowered):
            continue
        kept.append((name, value))
    return kept
