"""Which IP addresses egress may connect to: the address table of docs/design.md §8.

Invariants:

* Only *canonical* IPv4 text is an IPv4 address here: four decimal octets 0–255 without
  leading zeros (``1.2.3.4``). Decimal integers (``2130706433``), octal (``0177.0.0.1``),
  hex (``0x7f.0.0.1``), short (``127.1``) and overflowed (``256.0.0.1``) forms are not
  addresses, so :func:`is_public_address` says ``False`` for them; the URL layer refuses
  them outright (they are the classic way to smuggle ``127.0.0.1`` past a string check).
* IPv6 text may be bare (``2606:4700::1``) or bracketed (``[2606:4700::1]``); a zone id
  (``fe80::1%eth0``) is refused.
* The table is written out below and tested range by range. Python's
  :mod:`ipaddress` is used only to parse and do prefix arithmetic, never to classify:
  its ``is_global``/``is_private`` flags disagree with docs/design.md §8 for several ranges
  (for example NAT64, 6to4 and Teredo, which embed an IPv4 address that decides
  where a packet really goes).

Example::

    is_public_address("93.184.216.34")        # True
    is_public_address("::ffff:10.0.0.1")      # False: IPv4-mapped, judged by 10.0.0.1
    is_public_address("2002:5db8:d822::1")    # False: 6to4 is always blocked
    is_public_address("0x7f.0.0.1")           # False: not canonical IPv4
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

__all__ = [
    "BLOCKED_IPV4",
    "canonical_address",
    "format_ipv6",
    "is_loopback_address",
    "is_public_address",
    "parse_address",
    "parse_ipv4_canonical",
    "parse_ipv6",
]

# docs/design.md §8 "Addresses": every IPv4 range that egress refuses.
BLOCKED_IPV4: tuple[IPv4Network, ...] = tuple(
    IPv4Network(cidr)
    for cidr in (
        "0.0.0.0/8",  # "this network"; 0.0.0.0 reaches the local host on Linux
        "10.0.0.0/8",  # private (RFC 1918)
        "100.64.0.0/10",  # carrier-grade NAT (RFC 6598)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local, cloud metadata (169.254.169.254)
        "172.16.0.0/12",  # private (RFC 1918)
        "192.0.0.0/24",  # IETF protocol assignments (RFC 6890)
        "192.0.2.0/24",  # documentation TEST-NET-1
        "192.168.0.0/16",  # private (RFC 1918)
        "198.18.0.0/15",  # benchmarking (RFC 2544)
        "198.51.100.0/24",  # documentation TEST-NET-2
        "203.0.113.0/24",  # documentation TEST-NET-3
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved
        "255.255.255.255/32",  # limited broadcast (inside 240/4; listed as docs/design.md §8 does)
    )
)

# IPv6 prefixes whose last 32 bits are an IPv4 address that decides the destination.
_EMBEDDING_IPV6 = (
    IPv6Network("::ffff:0:0/96"),  # IPv4-mapped
    IPv6Network("64:ff9b::/96"),  # NAT64 well-known prefix (RFC 6052)
)

# IPv6 prefixes that are always blocked, whatever they embed.
_ALWAYS_BLOCKED_IPV6 = (
    IPv6Network("64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215)
    IPv6Network("::/96"),  # IPv4-compatible (deprecated), includes :: and ::1
    IPv6Network("::ffff:0:0:0/96"),  # IPv4-translated (SIIT, RFC 2765)
    IPv6Network("2001::/32"),  # Teredo
    IPv6Network("2002::/16"),  # 6to4
)

_GLOBAL_UNICAST = IPv6Network("2000::/3")

# Carved out of 2000::/3.
_NON_PUBLIC_IN_GLOBAL = (
    IPv6Network("2001::/23"),  # IETF protocol assignments (RFC 2928)
    IPv6Network("2001:db8::/32"),  # documentation (RFC 3849)
    IPv6Network("3fff::/20"),  # documentation (RFC 9637)
)

_LOOPBACK_V4 = IPv4Network("127.0.0.0/8")
_LOOPBACK_V6 = IPv6Address("::1")

# Four decimal octets, no sign, no leading zeros, ASCII digits only.
_OCTET = r"(?:0|[1-9][0-9]{0,2})"
_IPV4_CANONICAL = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}")
# Hex digits, colons and (for an embedded IPv4 tail) dots; nothing else, no zone id.
_IPV6_CHARS = re.compile(r"[0-9A-Fa-f:.]+")


def parse_ipv4_canonical(text: str) -> IPv4Address | None:
    """Parse IPv4 written only as canonical dotted decimal.

    Args:
        text: candidate text, for example ``"192.0.2.1"``.

    Returns:
        The address, or ``None`` for anything else (``"127.1"``, ``"0177.0.0.1"``,
        ``"0x7f.0.0.1"``, ``"2130706433"``, ``"256.1.1.1"``, surrounding spaces, ...).
    """
    if not isinstance(text, str) or _IPV4_CANONICAL.fullmatch(text) is None:
        return None
    if any(int(octet) > 255 for octet in text.split(".")):
        return None
    return IPv4Address(text)


def parse_ipv6(text: str) -> IPv6Address | None:
    """Parse IPv6 text, bare (``::1``) or bracketed (``[::1]``); a zone id is refused.

    Args:
        text: candidate text.

    Returns:
        The address, or ``None`` if ``text`` is not IPv6 without a zone id.
    """
    if isinstance(text, str) and text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if not isinstance(text, str) or ":" not in text or _IPV6_CHARS.fullmatch(text) is None:
        return None
    try:
        return IPv6Address(text)
    except ValueError:
        return None


def parse_address(text: str) -> IPv4Address | IPv6Address | None:
    """Parse canonical IPv4 or IPv6 (bare or bracketed, no zone id); ``None`` otherwise."""
    v4 = parse_ipv4_canonical(text)
    return v4 if v4 is not None else parse_ipv6(text)


def format_ipv6(address: IPv6Address) -> str:
    """RFC 5952 text of ``address``, stable across Python versions.

    IPv4-mapped addresses are written ``::ffff:a.b.c.d`` (Python 3.13 changed how
    :class:`~ipaddress.IPv6Address` prints them; we pin one spelling).
    """
    mapped = address.ipv4_mapped
    if mapped is not None:
        return f"::ffff:{mapped}"
    return address.compressed


def canonical_address(text: str) -> str | None:
    """The canonical text of an IP address (IPv6 without brackets), or ``None``."""
    address = parse_address(text)
    if address is None:
        return None
    if isinstance(address, IPv6Address):
        return format_ipv6(address)
    return str(address)


def _ipv4_is_public(address: IPv4Address) -> bool:
    return not any(address in network for network in BLOCKED_IPV4)


def _embedded_ipv4(address: IPv6Address) -> IPv4Address:
    return IPv4Address(int(address) & 0xFFFF_FFFF)


def _ipv6_is_public(address: IPv6Address) -> bool:
    # Order matters: the embedding prefixes lie outside 2000::/3 but are judged by the
    # IPv4 address they carry, so they are decided before the global-unicast rule.
    if any(address in network for network in _EMBEDDING_IPV6):
        return _ipv4_is_public(_embedded_ipv4(address))
    if any(address in network for network in _ALWAYS_BLOCKED_IPV6):
        return False
    if address not in _GLOBAL_UNICAST:
        return False
    return not any(address in network for network in _NON_PUBLIC_IN_GLOBAL)


def is_public_address(text: str) -> bool:
    """Whether egress may connect to the address ``text`` (docs/design.md §8 address table).

    Args:
        text: any text; canonical IPv4, or IPv6 bare or in brackets.

    Returns:
        ``True`` only for a public address. Non-canonical IPv4, IPv6 with a zone id,
        host names and garbage are ``False`` (fail closed).
    """
    address = parse_address(text)
    if isinstance(address, IPv4Address):
        return _ipv4_is_public(address)
    if isinstance(address, IPv6Address):
        return _ipv6_is_public(address)
    return False


def is_loopback_address(text: str) -> bool:
    """Whether ``text`` is a loopback address: ``127/8``, ``::1`` or ``::ffff:127.x.y.z``.

    Used only by the test-only host setting ``unsafe_allow_loopback``.

    Args:
        text: any text, as for :func:`is_public_address`.

    Returns:
        ``True`` for a loopback address written canonically; ``False`` otherwise.
    """
    address = parse_address(text)
    if isinstance(address, IPv6Address):
        if address == _LOOPBACK_V6:
            return True
        mapped = address.ipv4_mapped
        return mapped is not None and mapped in _LOOPBACK_V4
    if isinstance(address, IPv4Address):
        return address in _LOOPBACK_V4
    return False
