"""The credential router: which staged secret goes into which request (docs/design.md §8 step 6).

A :class:`CredentialRouter` is built from the credential mappings of ONE package's
manifest (``http.credentials``); an egress session owns one router, so a mapping of one
package can never apply to another package's request. For each outgoing request (and each
redirect hop) the router:

1. finds the mappings whose host pattern and path prefix match the normalized URL, by the
   same rules as the allowlist (:meth:`HostPattern.matches` and :func:`path_matches`);
2. orders them most specific last: a longer matching path prefix is more specific, and
   at equal length a literal host is more specific than a wildcard; ties keep manifest
   order (the order is that of the injected headers and query parameters);
3. refuses the request if two matching mappings write the same location
   (``EgressDenied(reason="credential_conflict")``): bearer and basic both write
   ``Authorization``, a header mapping writes its header name (case-insensitive), a
   query mapping its parameter name. Conflicts are decided on the *matching mappings*,
   whether or not their secrets are staged, so the outcome never depends on which
   optional secrets happen to exist;
4. injects each secret: ``bearer`` → ``Authorization: Bearer <v>``, ``basic`` →
   ``Authorization: Basic base64(username:v)``, ``header`` → ``<name>: <prefix><v>``,
   ``query`` → ``<name>=<percent-encoded v>`` appended to the query. A required secret
   that is not staged fails closed (:class:`~host.errors.CredentialUnavailable` naming
   it); an optional one is skipped. A secret that cannot be written into a header
   (control characters, non-ASCII) is unavailable too: never a header injection.

A location the host writes must not also come from the guest: a guest header or query
parameter with the same name refuses the request (``credential_conflict``). Names are
compared the way servers may read them: header names case-folded with ``_``
mapped to ``-`` (``X_Admin_Key`` is ``X-Admin-Key``); query names percent-decoded,
case-folded, with array suffixes (``appid[]``, ``appid[0]``) removed and everything but
letters and digits dropped (``APPID``, ``app_id``, ``appid%00`` are ``appid``).

Matching is indexed by literal host, by wildcard suffix and by path prefix, so it costs a
few dictionary lookups per request however many mappings a package declares.

Example::

    router = CredentialRouter(manifest.http.credentials)
    routes = router.match(normalize_url("https://api.tracker.example/v1/issues"))
    injections = router.inject(routes, staged)
    url, headers = apply_injections(url, headers, injections)
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol
from urllib.parse import quote, unquote_plus

from host.egress.urls import (
    HostPattern,
    NormalizedUrl,
    normalize_path_prefix,
    parse_host_pattern,
    path_matches,
)
from host.errors import CredentialUnavailable, EgressDenied
from host.secrets.store import SecretValue

__all__ = [
    "CredentialMappingLike",
    "CredentialRouter",
    "Injection",
    "Route",
    "apply_injections",
]

_HEADER_SAFE_RE: Final = re.compile(r"[\x20-\x7e]*")

RouteKind = Literal["bearer", "basic", "header", "query"]


class CredentialMappingLike(Protocol):
    """What the router reads of a credential mapping (``host.formats.manifest.CredentialMapping``)."""

    @property
    def secret(self) -> str: ...

    @property
    def location(self) -> Any: ...

    @property
    def hosts(self) -> Sequence[str]: ...

    @property
    def path_prefixes(self) -> Sequence[str]: ...

    @property
    def optional(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Route:
    """One compiled credential mapping. Holds secret *names* only, never values.

    Attributes:
        order: position in the manifest (ties in specificity keep this order).
        secret: the secret's name.
        kind: ``bearer``, ``basic``, ``header`` or ``query``.
        slot: the location written, for conflict detection (``header:authorization``,
            ``query:api_key``).
        name: the header or query parameter name written.
        prefix: text put before the secret (``Bearer ``, a header mapping's prefix).
        username: the basic-auth username (``""`` for other kinds).
        optional: whether a missing secret is skipped rather than failing the request.
    """

    order: int
    secret: str
    kind: RouteKind
    slot: str
    name: str
    prefix: str
    username: str
    optional: bool


@dataclass(frozen=True, slots=True)
class Injection:
    """One secret, ready to be written; ``value`` holds the secret and is never shown.

    Attributes:
        secret: the secret's name.
        kind: ``"header"`` or ``"query"``.
        name: header or query parameter name.
        value: the full header value or the raw parameter value (secret inside).
    """

    secret: str
    kind: Literal["header", "query"]
    name: str
    value: str = field(repr=False)


_Entry = tuple[Route, HostPattern]


def _compile_route(order: int, mapping: CredentialMappingLike) -> Route:
    location = mapping.location
    kind = getattr(location, "type", None)
    if kind == "bearer":
        return Route(order, mapping.secret, "bearer", "header:authorization", "Authorization",
                     "Bearer ", "", bool(mapping.optional))
    if kind == "basic":
        return Route(order, mapping.secret, "basic", "header:authorization", "Authorization",
                     "Basic ", str(location.username), bool(mapping.optional))
    if kind == "header":
        name = str(location.name)
        return Route(order, mapping.secret, "header", f"header:{name.lower()}", name,
                     str(getattr(location, "prefix", "") or ""), "", bool(mapping.optional))
    if kind == "query":
        name = str(location.name)
        return Route(order, mapping.secret, "query", f"query:{name}", name, "", "",
                     bool(mapping.optional))
    raise ValueError(f"unknown credential location type {kind!r}")


def _ancestors(path: str) -> list[str]:
    """Every prefix that could match ``path`` at a segment boundary, longest first."""
    found = [path]
    index = path.rfind("/", 0, len(path))
    while index > 0:
        found.append(path[:index])
        index = path.rfind("/", 0, index)
    if path != "/":
        found.append("/")
    return found


class CredentialRouter:
    """Routes one package's credential mappings onto requests.

    Args:
        mappings: the package's ``http.credentials`` (``CredentialMapping`` objects or
            anything with the same attributes). Only these are ever applied.

    Raises:
        ValueError: a mapping has an invalid host pattern, path prefix or location (a
            manifest that passed validation never does: a bad entry never widens scope).
    """

    __slots__ = ("_literal", "_routes", "_wildcard")

    def __init__(self, mappings: Iterable[CredentialMappingLike]) -> None:
        self._literal: dict[str, dict[str, list[_Entry]]] = {}
        self._wildcard: dict[str, dict[str, list[_Entry]]] = {}
        routes: list[Route] = []
        for order, mapping in enumerate(mappings):
            route = _compile_route(order, mapping)
            routes.append(route)
            prefixes = {normalize_path_prefix(prefix) for prefix in mapping.path_prefixes}
            for text in mapping.hosts:
                pattern = parse_host_pattern(text)
                index = self._wildcard if pattern.wildcard else self._literal
                by_prefix = index.setdefault(pattern.host, {})
                for prefix in sorted(prefixes):
                    by_prefix.setdefault(prefix, []).append((route, pattern))
        self._routes = tuple(routes)

    @property
    def routes(self) -> tuple[Route, ...]:
        """Every compiled mapping, in manifest order."""
        return self._routes

    def match(self, url: NormalizedUrl) -> tuple[Route, ...]:
        """The mappings that apply to ``url``, most specific last.

        Args:
            url: the normalized destination (scheme, host, port, path, host kind).

        Raises:
            EgressDenied: reason ``credential_conflict`` when two of them write one location.

        Returns:
            The matching routes, ordered by (path prefix length, literal host, manifest order).
        """
        best: dict[int, tuple[int, int, int]] = {}
        chosen: dict[int, Route] = {}
        groups = [(self._literal.get(url.host), 1)]
        _, dot, parent = url.host.partition(".")
        if dot:
            groups.append((self._wildcard.get(parent), 0))
        for by_prefix, literal in groups:
            if not by_prefix:
                continue
            for prefix in _ancestors(url.path):
                for route, pattern in by_prefix.get(prefix, ()):
                    if not (pattern.matches(url) and path_matches(prefix, url.path)):
                        continue
                    key = (len(prefix), literal, route.order)
                    if key > best.get(route.order, (-1, -1, -1)):
                        best[route.order] = key
                        chosen[route.order] = route
        if not chosen:
            return ()
        ordered = tuple(chosen[order] for order in sorted(best, key=best.__getitem__))
        _check_conflicts(ordered)
        return ordered

    def inject(
        self, routes: Sequence[Route], staged: Mapping[str, SecretValue]
    ) -> tuple[Injection, ...]:
        """Turn matched routes into injections with the staged secret values.

        Args:
            routes: from :meth:`match`.
            staged: the secrets staged for this call, by name.

        Raises:
            CredentialUnavailable: a required secret is not staged, or a secret cannot be
                written into an HTTP header; ``details["secret"]`` names it.

        Returns:
            The injections, in the order of ``routes`` (optional missing ones skipped).
        """
        out: list[Injection] = []
        for route in routes:
            staged_value = staged.get(route.secret)
            if staged_value is None:
                if route.optional:
                    continue
                raise CredentialUnavailable(
                    f"required secret {route.secret!r} is not available for this call",
                    secret=route.secret,
                )
            out.append(_injection(route, staged_value.reveal()))
        return tuple(out)


def _check_conflicts(routes: Sequence[Route]) -> None:
    seen: dict[str, Route] = {}
    for route in routes:
        other = seen.get(route.slot)
        if other is not None:
            raise EgressDenied(
                f"credential conflict: secrets {other.secret!r} and {route.secret!r} both "
                f"write {route.slot!r} for this URL",
                reason="credential_conflict",
            )
        seen[route.slot] = route


def _injection(route: Route, value: str) -> Injection:
    if route.kind == "query":
        return Injection(route.secret, "query", route.name, value)
    if route.kind == "basic":
        pair = f"{route.username}:{value}".encode()
        text = route.prefix + base64.b64encode(pair).decode("ascii")
    else:
        text = route.prefix + value
    if not value or _HEADER_SAFE_RE.fullmatch(text) is None or text != text.strip():
        # Never let a stored value inject CR/LF or break header syntax.
        raise CredentialUnavailable(
            f"secret {route.secret!r} cannot be sent in an HTTP header (empty, or characters "
            "outside visible ASCII)",
            secret=route.secret,
        )
    return Injection(route.secret, "header", route.name, text)


_ARRAY_SUFFIX_RE: Final = re.compile(r"(?:\[[^\[\]]*\])+$")
_NOT_ALNUM_RE: Final = re.compile(r"[\W_]+")


def _fold_header(name: str) -> str:
    return name.lower().replace("_", "-")


def _fold_query(name: str) -> str:
    """A query parameter name as servers may read it: decoded, case-folded, bare letters."""
    decoded = unquote_plus(name, errors="replace").casefold()
    return _NOT_ALNUM_RE.sub("", _ARRAY_SUFFIX_RE.sub("", decoded))


def _query_names(query: str) -> set[str]:
    names: set[str] = set()
    for part in re.split(r"[&;]", query):
        if part:
            names.add(_fold_query(part.split("=", 1)[0]))
    return names


def apply_injections(
    url: NormalizedUrl, headers: Sequence[tuple[str, str]], injections: Sequence[Injection]
) -> tuple[str, list[tuple[str, str]]]:
    """Write the injections into a request's URL and headers.

    Args:
        url: the normalized destination.
        headers: the headers that will be sent besides the credentials.
        injections: from :meth:`CredentialRouter.inject`.

    Raises:
        EgressDenied: reason ``credential_conflict`` when a header or query parameter the
            host writes is already present in the request.

    Returns:
        The URL to send (with query credentials appended) and the full header list.
    """
    out_headers = list(headers)
    present = {_fold_header(name) for name, _ in headers}
    query = url.query
    query_present = _query_names(query) if query else set()
    for item in injections:
        if item.kind == "header":
            if _fold_header(item.name) in present:
                raise EgressDenied(
                    f"header {item.name!r} (in any spelling) is written by the host for secret "
                    f"{item.secret!r}; the request may not set it",
                    reason="credential_conflict",
                )
            present.add(_fold_header(item.name))
            out_headers.append((item.name, item.value))
            continue
        if _fold_query(item.name) in query_present:
            raise EgressDenied(
                f"query parameter {item.name!r} (in any spelling) is written by the host for "
                f"secret {item.secret!r}; the request may not set it",
                reason="credential_conflict",
            )
        query_present.add(_fold_query(item.name))
        pair = f"{quote(item.name, safe='')}={quote(item.value, safe='')}"
        query = f"{query}&{pair}" if query else pair
    if query == url.query:
        return url.url(), out_headers
    base = url.url().split("?", 1)[0]
    return f"{base}?{query}", out_headers
