"""The egress allowlist and DNS vetting: docs/design.md §8 "Egress" steps 3–5.

:meth:`EgressPolicy.check` normalizes a URL (:func:`host.egress.urls.normalize_url`)
and matches it against the manifest's ``http.allow`` entries without touching the
network. :meth:`EgressPolicy.vet` then resolves the host **once** through a
:data:`Resolver` port and returns the vetted addresses; the transport connects only to
those (DNS pinning), so a second, different answer to the same name is never used.

Invariants:

* An empty allowlist denies everything (``empty_allowlist``).
* A URL is allowed if one entry admits its scheme, host, port, path and method
  together. ``http`` is reachable only where an entry says ``http``.
* Every address of the answer must be public (:func:`is_public_address`); one
  private address among public ones refuses the whole request (``blocked_address``),
  because the connection could otherwise be steered to it.
* A resolver failure or an empty answer is ``dns_failure``; anything the resolver
  returns that is not an IP address is ``blocked_address`` (fail closed). DNS failures
  raise :class:`~host.errors.EgressUnreachable` (code ``EGRESS_UNREACHABLE``, a subclass
  of ``EgressDenied``): the name may be fine, the network was not.
* With a ``deadline``, the resolver runs in a pooled worker thread that is abandoned when
  the deadline passes (``dns_timeout``; ``getaddrinfo`` cannot be interrupted). At most
  :data:`MAX_PENDING_LOOKUPS` such threads exist per process, abandoned ones included;
  beyond that a lookup is refused at once (``dns_busy``) instead of queueing
  (:mod:`host.egress._lookups`).
* Only the first :data:`MAX_DNS_ANSWERS` answers are considered (the rest are never
  vetted, so never pinned, so never connected to); duplicates are removed in linear time.

Example::

    policy = EgressPolicy.from_allow([{"scheme": "https", "host": "api.tracker.example",
                                       "port": None, "path_prefix": "/v1/issues",
                                       "methods": ["GET"]}])
    target = policy.check("GET", "https://API.tracker.example/v1/issues/7#x")
    target.url                                   # 'https://api.tracker.example/v1/issues/7'
    addresses = policy.vet(target, system_resolver)   # ('93.184.216.34',) or EgressDenied

Deny reasons are the :data:`DenyReason` literal (defined in :mod:`host.egress.urls`).
"""

from __future__ import annotations

import itertools
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, final

from host.egress._lookups import LookupBusy, LookupPool, LookupTimeout
from host.egress.addresses import canonical_address, is_loopback_address, is_public_address
from host.egress.urls import (
    DenyReason,
    HostKind,
    HostPattern,
    NormalizedUrl,
    make_host_pattern,
    normalize_path_prefix,
    normalize_url,
    path_matches,
)
from host.errors import EgressDenied, EgressUnreachable

__all__ = [
    "ALLOW_ENTRY_FIELDS",
    "ALLOW_ENTRY_OPTIONAL",
    "MAX_DNS_ANSWERS",
    "MAX_PENDING_LOOKUPS",
    "AllowRule",
    "DenyReason",
    "EgressPolicy",
    "EgressTarget",
    "Resolver",
    "system_resolver",
]

Resolver = Callable[[str], Sequence[str]]
"""The DNS port: ``resolver(host) -> addresses``. Raises on failure (any exception is
reported as ``dns_failure``). :func:`system_resolver` is the real one."""

ALLOW_ENTRY_FIELDS: Final = ("scheme", "host", "port", "path_prefix", "methods")
"""The required fields of one manifest ``http.allow`` entry (docs/design.md §3)."""

ALLOW_ENTRY_OPTIONAL: Final = ("propagate_trace",)
"""The optional fields of an ``http.allow`` entry (absent: ``False``)."""

MAX_DNS_ANSWERS: Final = 64  # answers of one resolution considered; the rest are ignored
MAX_PENDING_LOOKUPS: Final = 32  # resolver threads alive per process, abandoned ones included

_METHOD = re.compile(r"[A-Z][A-Z0-9_-]{0,31}")
_lookups = LookupPool(MAX_PENDING_LOOKUPS)


@dataclass(frozen=True, slots=True)
class EgressTarget:
    """A request destination that passed :meth:`EgressPolicy.check`.

    Attributes:
        scheme: ``"http"`` or ``"https"``.
        host: normalized host (A-label DNS name, canonical IPv4, or IPv6 without brackets).
        port: effective port.
        path: normalized path (dot segments resolved); what is sent.
        query: the query without ``?`` (``""`` if none).
        host_kind: ``"dns"``, ``"ipv4"`` or ``"ipv6"``.
        url: the exact URL to send (no fragment, no default port).
        propagate_trace: an allow entry that admits the request opts in to carrying the
            call's W3C trace context (``traceparent``, ``tracestate``).
    """

    scheme: str
    host: str
    port: int
    path: str
    query: str
    host_kind: HostKind
    url: str
    propagate_trace: bool = False

    @classmethod
    def from_normalized(cls, normalized: NormalizedUrl, *, propagate_trace: bool = False) -> EgressTarget:
        """The target for an already normalized URL."""
        return cls(
            propagate_trace=propagate_trace,
            scheme=normalized.scheme,
            host=normalized.host,
            port=normalized.port,
            path=normalized.path,
            query=normalized.query,
            host_kind=normalized.host_kind,
            url=normalized.url(),
        )

    def normalized(self) -> NormalizedUrl:
        """The same URL as a :class:`NormalizedUrl` (for :meth:`HostPattern.matches`)."""
        return NormalizedUrl(
            scheme=self.scheme,
            host=self.host,
            port=self.port,
            path=self.path,
            query=self.query,
            host_kind=self.host_kind,
        )


@dataclass(frozen=True, slots=True)
class AllowRule:
    """One parsed ``http.allow`` entry.

    Attributes:
        pattern: scheme, host (literal or ``*.suffix``) and port.
        path_prefix: normalized prefix, matched at a segment boundary.
        methods: the upper-case methods allowed.
        propagate_trace: requests it admits carry the call's trace context.
    """

    pattern: HostPattern
    path_prefix: str
    methods: frozenset[str]
    propagate_trace: bool = False


def _deny(reason: DenyReason, message: str, *, address: str | None = None) -> EgressDenied:
    if address is None:
        return EgressDenied(message, reason=reason)
    return EgressDenied(message, reason=reason, address=address)


def _entry_field(entry: object, name: str, index: int) -> object:
    if isinstance(entry, Mapping):
        if name not in entry:
            raise ValueError(f"allow[{index}]: missing field {name!r}")
        return entry[name]
    missing = object()
    value = getattr(entry, name, missing)
    if value is missing:
        raise ValueError(f"allow[{index}]: {type(entry).__name__} has no field {name!r}")
    return value


def _parse_methods(value: object, index: int) -> frozenset[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"allow[{index}].methods must be a list of method names, not {value!r}")
    methods = list(value)
    if not methods:
        raise ValueError(f"allow[{index}].methods must name at least one method")
    for method in methods:
        if not isinstance(method, str) or _METHOD.fullmatch(method) is None:
            raise ValueError(f"allow[{index}].methods: {method!r} is not an upper-case method name")
    return frozenset(methods)


def _rule_from_entry(entry: object, index: int) -> AllowRule:
    if isinstance(entry, Mapping):
        known = (*ALLOW_ENTRY_FIELDS, *ALLOW_ENTRY_OPTIONAL)
        unknown = sorted(str(key) for key in entry if key not in known)
        if unknown:
            raise ValueError(f"allow[{index}]: unknown fields {unknown}")
    scheme, host, port, prefix, methods = (_entry_field(entry, name, index) for name in ALLOW_ENTRY_FIELDS)
    if not isinstance(scheme, str) or not isinstance(host, str) or not isinstance(prefix, str):
        raise ValueError(f"allow[{index}]: scheme, host and path_prefix must be strings")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
        raise ValueError(f"allow[{index}].port must be null or an integer, not {port!r}")
    try:
        pattern = make_host_pattern(scheme, host, port)
        path_prefix = normalize_path_prefix(prefix)
    except ValueError as exc:
        raise ValueError(f"allow[{index}]: {exc}") from None
    propagate = entry.get("propagate_trace", False) if isinstance(entry, Mapping) else (
        getattr(entry, "propagate_trace", False)
    )
    if not isinstance(propagate, bool):
        raise ValueError(f"allow[{index}].propagate_trace must be true or false, not {propagate!r}")
    return AllowRule(
        pattern=pattern,
        path_prefix=path_prefix,
        methods=_parse_methods(methods, index),
        propagate_trace=propagate,
    )


@final
class EgressPolicy:
    """A package's egress allowlist (immutable). Build it with :meth:`from_allow`.

    Args:
        rules: parsed entries. :meta private:
    """

    __slots__ = ("_rules",)

    def __init__(self, rules: tuple[AllowRule, ...]) -> None:
        self._rules = tuple(rules)

    @classmethod
    def from_allow(cls, entries: Iterable[object]) -> EgressPolicy:
        """Parse a manifest's ``http.allow`` entries.

        Args:
            entries: each a Mapping with exactly the keys ``scheme``, ``host``, ``port``,
                ``path_prefix``, ``methods`` (and optionally ``propagate_trace``), or an
                object with those attributes (the manifest's ``AllowEntry``). ``port`` may
                be ``None`` (scheme default).

        Raises:
            ValueError: naming the entry and what is wrong; a bad entry is never widened.

        Returns:
            The policy (an empty list gives a policy that denies everything).
        """
        if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Iterable):
            raise ValueError("http.allow must be a list of entries")
        return cls(tuple(_rule_from_entry(entry, index) for index, entry in enumerate(entries)))

    @property
    def rules(self) -> tuple[AllowRule, ...]:
        """The parsed entries, in manifest order."""
        return self._rules

    def check(self, method: str, url: str) -> EgressTarget:
        """Normalize ``url`` and match it against the allowlist; no DNS.

        Args:
            method: the request method, exactly as sent (``"GET"``; case-sensitive).
            url: the URL the guest asked for (untrusted).

        Raises:
            EgressDenied: with ``reason`` from :func:`normalize_url`, or
                ``empty_allowlist``, ``insecure_scheme``, ``host_not_allowed``,
                ``scheme_not_allowed``, ``port_not_allowed``, ``path_not_allowed``,
                ``method_not_allowed``, checked in that order.

        Returns:
            The target to vet and send.
        """
        normalized = normalize_url(url)
        if not self._rules:
            raise _deny("empty_allowlist", "this package's manifest allows no network access")
        hosts = [rule for rule in self._rules if rule.pattern.matches_host(normalized)]
        if normalized.scheme == "http" and not any(
            rule.pattern.scheme == "http" for rule in (hosts or self._rules)
        ):
            raise _deny("insecure_scheme", f"http:// to {normalized.host} is not allowed; use https")
        if not hosts:
            raise _deny("host_not_allowed", f"host {normalized.host} is not in the allowlist")
        schemes = [rule for rule in hosts if rule.pattern.scheme == normalized.scheme]
        if not schemes:
            raise _deny("scheme_not_allowed", f"{normalized.scheme} is not allowed for {normalized.host}")
        ports = [rule for rule in schemes if rule.pattern.port == normalized.port]
        if not ports:
            raise _deny("port_not_allowed", f"port {normalized.port} is not allowed for {normalized.host}")
        paths = [rule for rule in ports if path_matches(rule.path_prefix, normalized.path)]
        if not paths:
            raise _deny(
                "path_not_allowed", f"path {normalized.path[:200]} is not allowed on {normalized.host}"
            )
        admitting = [rule for rule in paths if isinstance(method, str) and method in rule.methods]
        if not admitting:
            raise _deny("method_not_allowed", f"method {str(method)[:32]!r} is not allowed there")
        # One admitting entry that opts in is enough: it says this destination may get it.
        propagate = any(rule.propagate_trace for rule in admitting)
        return EgressTarget.from_normalized(normalized, propagate_trace=propagate)

    def vet(
        self,
        target: EgressTarget,
        resolver: Resolver,
        *,
        allow_loopback: bool = False,
        deadline: float | None = None,
    ) -> tuple[str, ...]:
        """Resolve ``target.host`` once and refuse unless every address is public.

        Args:
            target: from :meth:`check`. An IP-literal target is vetted without DNS.
            resolver: the DNS port, called at most once.
            allow_loopback: TEST ONLY (host setting ``unsafe_allow_loopback``): loopback
                addresses are accepted too; nothing else is.
            deadline: ``time.monotonic()`` value by which resolution must answer; the
                resolver then runs in an abandonable worker thread. ``None``: no bound.

        Raises:
            EgressUnreachable: ``dns_failure`` if resolution fails or returns nothing,
                ``dns_timeout`` past ``deadline``, ``dns_busy`` with too many lookups
                pending (a subclass of ``EgressDenied``, code ``EGRESS_UNREACHABLE``).
            EgressDenied: ``blocked_address`` if any considered address is not public
                (or not an address).

        Returns:
            The vetted addresses in canonical text, deduplicated, in answer order: the
            only addresses the transport may connect to.
        """
        if target.host_kind == "dns":
            answers = _resolve_once(target.host, resolver, deadline)
        else:
            answers = [target.host]
        vetted: dict[str, None] = {}
        for answer in answers:
            address = canonical_address(answer) if isinstance(answer, str) else None
            if address is None:
                raise _deny(
                    "blocked_address", f"{target.host} resolved to something that is not an IP address"
                )
            public = is_public_address(address) or (allow_loopback and is_loopback_address(address))
            if not public:
                raise _deny(
                    "blocked_address",
                    f"{target.host} is or resolves to a non-public address",
                    address=address,
                )
            vetted[address] = None
        return tuple(vetted)


def _unreachable(reason: str, message: str) -> EgressUnreachable:
    return EgressUnreachable(message, reason=reason)


def _answers(host: str, resolver: Resolver) -> list[object]:
    answers = resolver(host)
    if isinstance(answers, (str, bytes)):
        return []
    return list(itertools.islice(answers, MAX_DNS_ANSWERS))


def _resolve_within(host: str, resolver: Resolver, deadline: float) -> list[object]:
    """Run the resolver in a pooled worker thread; abandon it when ``deadline`` passes."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _unreachable("dns_timeout", f"no time left to resolve {host}")
    try:
        return _lookups.run(lambda: _answers(host, resolver), timeout=remaining)
    except LookupBusy:
        raise _unreachable("dns_busy", f"too many DNS lookups pending; {host} was not resolved") from None
    except LookupTimeout:
        raise _unreachable("dns_timeout", f"{host} did not resolve before the deadline") from None


def _resolve_once(host: str, resolver: Resolver, deadline: float | None) -> list[object]:
    try:
        if deadline is None:
            listed = _answers(host, resolver)
        else:
            listed = _resolve_within(host, resolver, deadline)
    except EgressDenied:
        raise
    except Exception as exc:
        # The resolver is a port: whatever it raises means "no trustworthy answer".
        raise _unreachable("dns_failure", f"could not resolve {host}") from exc
    if not listed:
        raise _unreachable("dns_failure", f"{host} did not resolve to any address")
    return listed


def system_resolver(host: str) -> list[str]:
    """Resolve ``host`` with the operating system (``socket.getaddrinfo``, TCP).

    Args:
        host: a normalized DNS name.

    Raises:
        EgressUnreachable: ``dns_failure`` when resolution fails.

    Returns:
        The IPv4 and IPv6 addresses, deduplicated (linear time), in the resolver's order.
    """
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise _unreachable("dns_failure", f"could not resolve {host}") from exc
    addresses: dict[str, None] = {}
    for family, _type, _proto, _name, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            addresses[str(sockaddr[0])] = None
    return list(addresses)
