"""Outbound HTTP through the host (the WIT ``http-request`` import).

The host performs every request itself: it checks the manifest's allowlist, injects
credentials the guest never sees, follows redirects and bounds the response. A refusal
or failure raises the :class:`stockade.HttpError` subclass of its WIT case.

Example::

    r = http.get("https://api.tracker.example/v1/issues", headers={"Accept": "application/json"})
    issues = r.json()
    http.post("https://api.tracker.example/v1/issues", json={"title": "x"})

Crossing the boundary (``stockade:plugin@1.1.0``): headers travel as one JSON text of
``[name, value]`` pairs and bodies as latin-1 text (byte b is the character U+00b), so
the host moves each with one copy. This module applies both mappings: authors pass and
receive ``bytes``/``str`` bodies and header lists exactly as before.
"""

from __future__ import annotations

import json as _json

from stockade import errors
from stockade._bindings import Err, host, types

__all__ = ["Headers", "Response", "get", "post", "request"]

_MAX_U32 = 2**32 - 1

_ERRORS = {
    "HttpError_Denied": errors.HttpDenied,
    "HttpError_CredentialUnavailable": errors.CredentialUnavailable,
    "HttpError_InvalidRequest": errors.InvalidRequest,
    "HttpError_TooLarge": errors.TooLarge,
    "HttpError_Timeout": errors.HttpTimeout,
    "HttpError_BudgetExhausted": errors.BudgetExhausted,
    "HttpError_Network": errors.NetworkError,
}


class Headers:
    """Response headers: case-insensitive lookup, repeated names kept in order."""

    __slots__ = ("_items",)

    def __init__(self, items):
        self._items = tuple((str(n), str(v)) for n, v in items)

    def get(self, name, default=None):
        """The first value of header ``name`` (any case), or ``default``."""
        wanted = name.lower()
        for n, v in self._items:
            if n.lower() == wanted:
                return v
        return default

    def get_all(self, name):
        """Every value of header ``name`` (any case), in order."""
        wanted = name.lower()
        return [v for n, v in self._items if n.lower() == wanted]

    def items(self):
        """All ``(name, value)`` pairs as received."""
        return list(self._items)

    def __getitem__(self, name):
        value = self.get(name)
        if value is None:
            raise KeyError(name)
        return value

    def __contains__(self, name):
        return self.get(name) is not None

    def __iter__(self):
        return iter([n for n, _ in self._items])

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        return f"Headers({list(self._items)!r})"


class Response:
    """A response the host delivered: ``status``, ``headers`` and ``body`` (bytes)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers if isinstance(headers, Headers) else Headers(headers)
        self.body = bytes(body)

    @property
    def ok(self):
        """True for a 2xx status."""
        return 200 <= self.status < 300

    @property
    def text(self):
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        """The body parsed as JSON. Raises ``ValueError`` if it is not JSON."""
        return _json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} ({len(self.body)} bytes)>"


def _header_block(headers):
    """Headers (mapping or pairs) as the WIT header block: JSON ``[[name, value], ...]``."""
    if headers is None:
        return "[]"
    pairs = headers.items() if hasattr(headers, "items") else headers
    out = []
    for name, value in pairs:
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError("header names and values must be str")
        out.append([name, value])
    return _json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def _parse_header_block(text):
    """The host's header block as ``(name, value)`` pairs (empty if it is malformed)."""
    try:
        items = _json.loads(text) if text else []
    except ValueError:
        return []
    if not isinstance(items, list):
        return []
    return [(str(item[0]), str(item[1])) for item in items if isinstance(item, list) and len(item) == 2]


def _body_text(body):
    """A body (bytes, or str sent as UTF-8) as latin-1 text: one character per byte."""
    if body is None:
        return None
    if isinstance(body, str):
        body = body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body).decode("latin-1")
    raise TypeError("body must be bytes, str or None")


def _check_timeout(timeout_ms):
    if timeout_ms is None:
        return None
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or not 0 < timeout_ms <= _MAX_U32:
        raise ValueError("timeout_ms must be a positive int (milliseconds)")
    return timeout_ms


def _raise_http_error(case):
    cls = _ERRORS.get(type(case).__name__, errors.NetworkError)
    detail = getattr(case, "value", "")
    raise cls(detail if isinstance(detail, str) else "")


def request(method, url, *, headers=None, body=None, timeout_ms=None):
    """Send one request through the host and return its :class:`Response`.

    Args:
        method: HTTP method, e.g. ``"GET"``.
        url: absolute ``https://`` URL within the manifest's ``http.allow``.
        headers: mapping or list of ``(name, value)``; credential headers are refused
            by the host (it injects credentials itself).
        body: bytes or str (sent as UTF-8), or None.
        timeout_ms: per-request timeout; the host may shorten it.

    Raises:
        HttpDenied, CredentialUnavailable, InvalidRequest, TooLarge, HttpTimeout,
        BudgetExhausted, NetworkError: the host refused or the request failed.
        TypeError, ValueError: the arguments have the wrong type.

    Returns:
        The response, whatever its status (a 404 is a response, not an error).
    """
    if not isinstance(method, str) or not isinstance(url, str):
        raise TypeError("method and url must be str")
    req = types.Request(
        method=method.upper(),
        url=url,
        headers=_header_block(headers),
        body=_body_text(body),
        timeout_ms=_check_timeout(timeout_ms),
    )
    try:
        resp = host.http_request(req)
    except Err as err:
        _raise_http_error(err.value)
    return Response(resp.status, _parse_header_block(resp.headers), resp.body.encode("latin-1"))


def get(url, *, headers=None, timeout_ms=None):
    """``request("GET", url, ...)``."""
    return request("GET", url, headers=headers, timeout_ms=timeout_ms)


_NO_JSON = object()


def post(url, *, json=_NO_JSON, body=None, headers=None, timeout_ms=None):
    """``request("POST", url, ...)`` with a raw ``body`` or a ``json`` value.

    With ``json=``, the value is serialized compactly and ``Content-Type:
    application/json`` is added unless ``headers`` sets one.

    Raises:
        ValueError: both ``json`` and ``body`` were given.
    """
    if json is not _NO_JSON:
        if body is not None:
            raise ValueError("give json= or body=, not both")
        body = _json.dumps(json, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        pairs = list(headers.items() if hasattr(headers, "items") else headers or [])
        if not any(n.lower() == "content-type" for n, _ in pairs):
            pairs.append(("Content-Type", "application/json"))
        headers = pairs
    return request("POST", url, headers=headers, body=body, timeout_ms=timeout_ms)
