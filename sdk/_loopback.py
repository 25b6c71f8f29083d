"""Reach an API on the author's own machine: an explicit ``host → 127.0.0.1:PORT`` remap.

Used only by ``stockade dev --allow-loopback`` and the test harness; ``host`` never
imports it, so a production :class:`host.Host`, ``stockade call`` and ``stockade serve``
cannot reach loopback through it. Three gates:

1. an explicit switch per host: ``HOST=127.0.0.1:PORT`` (the host must still be in the
   manifest's allowlist: the remap changes where the vetted request connects, not what
   the allowlist lets through);
2. loopback targets only (``127.0.0.0/8`` or ``::1``); anything else is refused;
3. every other host keeps the public-address rule: a name that is not remapped and
   resolves to a loopback, private or otherwise non-public address is refused, although
   the host runs with ``unsafe_allow_loopback`` (which the remap needs, and which the
   host logs and audits).

How: the resolver answers each remapped host with a token address ``127.77.0.N``; the
pinned transport's socket backend connects a token to its target ``address:port``. TLS
still verifies the certificate against the *host name* (a local HTTPS server needs a
certificate for it; pass its CA with ``ca_file``).

Example::

    remap = LoopbackRemap.parse(["api.example.com=127.0.0.1:8443"])
    resolver, factory = remap.resolver(system_resolver), remap.transport_factory(ca_file=None)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import httpcore2
import httpx2

from host.egress.addresses import is_public_address
from host.egress.policy import Resolver
from host.egress.transport import PinnedTransport, Pins, TransportFactory, tls_context
from host.egress.urls import normalize_url
from host.errors import EgressDenied

__all__ = ["LoopbackRemap"]

_TOKEN_PREFIX: Final = "127.77.0."  # noqa: S105 (an address prefix, not a password)
_MAX_REMAPS: Final = 32  # remapped hosts in one run


class LoopbackRemap:
    """Remapped hosts and their loopback targets (see the module docstring).

    Args:
        targets: ``{host: (loopback address, port)}``.

    Raises:
        ValueError: a target is not a loopback address, a port is out of range, or more
            than 32 hosts are remapped.
    """

    def __init__(self, targets: dict[str, tuple[str, int]]) -> None:
        if len(targets) > _MAX_REMAPS:
            raise ValueError(f"at most {_MAX_REMAPS} hosts can be remapped to loopback")
        for host, (address, port) in targets.items():
            if not ipaddress.ip_address(address).is_loopback:
                raise ValueError(
                    f"--allow-loopback {host}: {address} is not a loopback address (127.0.0.0/8, ::1)"
                )
            if not 1 <= port <= 65535:
                raise ValueError(f"--allow-loopback {host}: port {port} is out of range")
        self.targets = dict(targets)
        self._tokens = {host: f"{_TOKEN_PREFIX}{index + 1}" for index, host in enumerate(sorted(targets))}
        self._by_token = {token: targets[host] for host, token in self._tokens.items()}

    @classmethod
    def parse(cls, specs: Iterable[str]) -> LoopbackRemap:
        """Parse ``HOST=127.0.0.1:PORT`` (or ``HOST=[::1]:PORT``) entries.

        Raises:
            ValueError: an entry is not of that form or not a loopback target.
        """
        targets: dict[str, tuple[str, int]] = {}
        for spec in specs:
            host, sep, target = spec.partition("=")
            address, colon, port = target.rpartition(":")
            if not sep or not host or not colon or not port.isdigit():
                raise ValueError(f"--allow-loopback {spec!r}: write HOST=127.0.0.1:PORT")
            try:
                name = normalize_url(f"https://{host}/").host
                ipaddress.ip_address(address.strip("[]"))
            except EgressDenied as exc:
                raise ValueError(f"--allow-loopback {spec!r}: {exc.message}") from None
            except ValueError as exc:
                raise ValueError(f"--allow-loopback {spec!r}: {exc}") from None
            targets[name] = (address.strip("[]"), int(port))
        return cls(targets)

    def describe(self) -> list[str]:
        """``host → address:port`` lines, for stderr."""
        return [f"{host} → {address}:{port}" for host, (address, port) in sorted(self.targets.items())]

    def resolver(self, inner: Resolver) -> Resolver:
        """Remapped hosts → their token; every other host through ``inner``, public only."""

        def resolve(host: str) -> Sequence[str]:
            token = self._tokens.get(host.lower().rstrip("."))
            if token is not None:
                return [token]
            answers = list(inner(host))
            if not all(is_public_address(a) for a in answers):
                raise OSError(
                    f"{host} resolves to a non-public address and is not remapped with --allow-loopback"
                )
            return answers

        return resolve

    def transport_factory(self, *, ca_file: Path | None) -> TransportFactory:
        """The pinned transport, whose sockets connect a token to its loopback target."""
        context = tls_context(ca_file)
        backend = _RemapBackend(self._by_token)

        def factory(pins: Pins) -> httpx2.BaseTransport:
            return PinnedTransport(pins, ssl_context=context, socket_backend=backend)

        return factory


class _RemapBackend(httpcore2.SyncBackend):
    """Connects a token address to its loopback target; any other address as given."""

    def __init__(self, by_token: dict[str, tuple[str, int]]) -> None:
        self._by_token = by_token

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore2.SOCKET_OPTION] | None = None,
    ) -> httpcore2.NetworkStream:
        target = self._by_token.get(host)
        if target is not None:
            host, port = target
        elif host.startswith(_TOKEN_PREFIX):
            raise httpcore2.ConnectError(f"{host} is not a remapped loopback target")
        return super().connect_tcp(host, port, timeout, local_address, socket_options)
