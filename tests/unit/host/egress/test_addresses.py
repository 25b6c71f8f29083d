"""The address table of docs/design.md §8, range edge by range edge, with a public neighbour.

These cases test the table itself, not Python's ``ipaddress`` flags: the last test
shows where the library's ``is_global`` would have let a blocked address through.
"""

from __future__ import annotations

import ipaddress

import pytest

from host.egress.addresses import (
    canonical_address,
    is_loopback_address,
    is_public_address,
    parse_ipv4_canonical,
)

# (id, text, is public)
IPV4_TABLE: list[tuple[str, str, bool]] = [
    ("this-network-first", "0.0.0.0", False),
    ("this-network-last", "0.255.255.255", False),
    ("after-this-network", "1.0.0.0", True),
    ("before-10", "9.255.255.255", True),
    ("10-first", "10.0.0.0", False),
    ("10-last", "10.255.255.255", False),
    ("after-10", "11.0.0.0", True),
    ("before-cgnat", "100.63.255.255", True),
    ("cgnat-first", "100.64.0.0", False),
    ("cgnat-last", "100.127.255.255", False),
    ("after-cgnat", "100.128.0.0", True),
    ("before-loopback", "126.255.255.255", True),
    ("loopback", "127.0.0.1", False),
    ("loopback-last", "127.255.255.255", False),
    ("after-loopback", "128.0.0.0", True),
    ("before-link-local", "169.253.255.255", True),
    ("link-local-first", "169.254.0.0", False),
    ("cloud-metadata", "169.254.169.254", False),
    ("link-local-last", "169.254.255.255", False),
    ("after-link-local", "169.255.0.0", True),
    ("before-172-16", "172.15.255.255", True),
    ("172-16-first", "172.16.0.0", False),
    ("172-16-last", "172.31.255.255", False),
    ("after-172-16", "172.32.0.0", True),
    ("before-192-0-0", "191.255.255.255", True),
    ("ietf-192-0-0-first", "192.0.0.0", False),
    ("ietf-192-0-0-last", "192.0.0.255", False),
    ("between-192-0-0-and-test-net-1", "192.0.1.0", True),
    ("test-net-1-first", "192.0.2.0", False),
    ("test-net-1-last", "192.0.2.255", False),
    ("after-test-net-1", "192.0.3.0", True),
    ("before-192-168", "192.167.255.255", True),
    ("192-168-first", "192.168.0.0", False),
    ("192-168-last", "192.168.255.255", False),
    ("after-192-168", "192.169.0.0", True),
    ("before-benchmark", "198.17.255.255", True),
    ("benchmark-first", "198.18.0.0", False),
    ("benchmark-last", "198.19.255.255", False),
    ("after-benchmark", "198.20.0.0", True),
    ("before-test-net-2", "198.51.99.255", True),
    ("test-net-2-first", "198.51.100.0", False),
    ("test-net-2-last", "198.51.100.255", False),
    ("after-test-net-2", "198.51.101.0", True),
    ("before-test-net-3", "203.0.112.255", True),
    ("test-net-3-first", "203.0.113.0", False),
    ("test-net-3-last", "203.0.113.255", False),
    ("after-test-net-3", "203.0.114.0", True),
    ("before-multicast", "223.255.255.255", True),
    ("multicast-first", "224.0.0.0", False),
    ("multicast-last", "239.255.255.255", False),
    ("reserved-first", "240.0.0.0", False),
    ("reserved-high", "255.255.255.254", False),
    ("broadcast", "255.255.255.255", False),
    ("public-dns", "8.8.8.8", True),
    ("public-web", "93.184.216.34", True),
]

NON_CANONICAL_IPV4: list[tuple[str, str, bool]] = [
    ("decimal-integer", "2130706433", False),
    ("decimal-integer-public", "134744072", False),
    ("octal", "0177.0.0.1", False),
    ("octal-public", "010.010.010.010", False),
    ("hex-octet", "0x7f.0.0.1", False),
    ("hex-integer", "0x7f000001", False),
    ("short-two", "127.1", False),
    ("short-three", "127.0.1", False),
    ("leading-zero-last", "8.8.8.08", False),
    ("leading-zero-first", "08.8.8.8", False),
    ("overflow", "256.1.1.1", False),
    ("five-parts", "1.2.3.4.5", False),
    ("three-parts", "1.2.3", False),
    ("leading-space", " 8.8.8.8", False),
    ("trailing-space", "8.8.8.8 ", False),
    ("trailing-newline", "8.8.8.8\n", False),
    ("trailing-dot", "8.8.8.8.", False),
    ("plus-sign", "+8.8.8.8", False),
    ("fullwidth-digits", "８.８.８.８", False),
    ("arabic-indic-digits", "٨.٨.٨.٨", False),
    ("bracketed-ipv4", "[8.8.8.8]", False),
    ("empty", "", False),
    ("host-name", "example.com", False),
]

IPV6_TABLE: list[tuple[str, str, bool]] = [
    ("public", "2606:4700:4700::1111", True),
    ("public-bracketed", "[2606:4700:4700::1111]", True),
    ("public-uppercase", "2606:4700:4700::ABCD", True),
    ("zone-id", "2606:4700:4700::1111%eth0", False),
    ("zone-id-bracketed", "[2606:4700:4700::1111%25eth0]", False),
    ("link-local-zone-id", "fe80::1%eth0", False),
    ("unspecified", "::", False),
    ("loopback", "::1", False),
    ("loopback-bracketed", "[::1]", False),
    # IPv4-mapped ::ffff:0:0/96 is judged by the embedded IPv4
    ("mapped-public", "::ffff:8.8.8.8", True),
    ("mapped-public-hex", "::ffff:808:808", True),
    ("mapped-loopback", "::ffff:127.0.0.1", False),
    ("mapped-private", "::ffff:10.0.0.1", False),
    ("mapped-metadata", "::ffff:169.254.169.254", False),
    ("mapped-zero", "::ffff:0.0.0.0", False),
    ("mapped-cgnat-edge", "::ffff:100.64.0.0", False),
    ("mapped-after-cgnat", "::ffff:100.128.0.0", True),
    ("mapped-non-canonical-octal", "::ffff:0177.0.0.1", False),
    # NAT64 64:ff9b::/96 is judged by the embedded IPv4
    ("nat64-public", "64:ff9b::8.8.8.8", True),
    ("nat64-public-hex", "64:ff9b::808:808", True),
    ("nat64-loopback", "64:ff9b::127.0.0.1", False),
    ("nat64-metadata-hex", "64:ff9b::a9fe:a9fe", False),
    ("nat64-private-last", "64:ff9b::ac1f:ffff", False),
    ("nat64-outside-96", "64:ff9b::1:808:808", False),
    # always blocked
    ("nat64-local-use-public", "64:ff9b:1::808:808", False),
    ("nat64-local-use-last", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", False),
    ("ipv4-compatible-public", "::8.8.8.8", False),
    ("ipv4-compatible-last", "::ffff:ffff", False),
    ("ipv4-translated-public", "::ffff:0:808:808", False),
    ("teredo-first", "2001::", False),
    ("teredo-example", "2001:0:4136:e378:8000:63bf:3fff:fdd2", False),
    ("teredo-last", "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("6to4-first", "2002::", False),
    ("6to4-of-public-ipv4", "2002:808:808::1", False),
    ("6to4-last", "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("after-6to4", "2003::", True),
    # 2000::/3 minus 2001::/23, 2001:db8::/32, 3fff::/20
    ("below-global-unicast", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("global-unicast-first", "2000::", True),
    ("ietf-2001-23-inner", "2001:1::1", False),
    ("ietf-2001-23-last", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("after-ietf-2001-23", "2001:200::", True),
    ("before-documentation", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", True),
    ("documentation-first", "2001:db8::", False),
    ("documentation-last", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("after-documentation", "2001:db9::", True),
    ("before-3fff", "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True),
    ("documentation-3fff-first", "3fff::", False),
    ("documentation-3fff-last", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("after-3fff-20", "3fff:1000::", True),
    ("global-unicast-last", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True),
    ("after-global-unicast", "4000::", False),
    ("discard-only", "100::1", False),
    ("unique-local-fc", "fc00::1", False),
    ("unique-local-fd", "fd12:3456::1", False),
    ("link-local", "fe80::1", False),
    ("site-local", "fec0::1", False),
    ("multicast-link", "ff02::1", False),
    ("multicast-global", "ff0e::1", False),
    # malformed
    ("triple-colon", ":::1", False),
    ("two-double-colons", "1::2::3", False),
    ("hextet-too-long", "12345::", False),
    ("nine-hextets", "1:2:3:4:5:6:7:8:9", False),
]


def _ids(cases: list[tuple[str, str, bool]]) -> list[str]:
    return [case[0] for case in cases]


ALL_CASES = (
    [(f"v4-{i}", text, public) for i, text, public in IPV4_TABLE]
    + [(f"v4-noncanonical-{i}", text, public) for i, text, public in NON_CANONICAL_IPV4]
    + [(f"v6-{i}", text, public) for i, text, public in IPV6_TABLE]
)


def test_address_corpus_is_large() -> None:
    assert len(ALL_CASES) >= 40
    assert len(_ids(ALL_CASES)) == len(set(_ids(ALL_CASES)))


@pytest.mark.parametrize(("case_id", "text", "public"), ALL_CASES, ids=_ids(ALL_CASES))
def test_address_table(case_id: str, text: str, public: bool) -> None:
    assert is_public_address(text) is public


@pytest.mark.parametrize(
    ("text", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.255.254", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("128.0.0.1", False),
        ("126.255.255.255", False),
        ("127.1", False),
        ("0177.0.0.1", False),
        ("2130706433", False),
        ("::ffff:10.0.0.1", False),
        ("::127.0.0.1", False),
        ("64:ff9b::7f00:1", False),
        ("::1%lo", False),
        ("localhost", False),
    ],
    ids=["v4", "v4-last", "v6", "v6-bracketed", "mapped", "unspecified-v4", "unspecified-v6", "private",
         "after-127", "before-127", "short", "octal", "integer", "mapped-private", "ipv4-compatible", "nat64",
         "zone-id", "name"],
)  # fmt: skip
def test_loopback_table(text: str, loopback: bool) -> None:
    assert is_loopback_address(text) is loopback


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.8.8.8", "8.8.8.8"),
        ("0.0.0.0", "0.0.0.0"),
        ("2606:4700:0:0:0:0:0:1111", "2606:4700::1111"),
        ("[2606:4700::ABCD]", "2606:4700::abcd"),
        ("::ffff:808:808", "::ffff:8.8.8.8"),
        ("127.1", None),
        ("fe80::1%eth0", None),
        ("example.com", None),
    ],
    ids=["v4", "v4-zero", "v6-compressed", "v6-bracketed-lowercased", "mapped-dotted", "short-v4", "zone", "name"],
)
def test_canonical_address(text: str, expected: str | None) -> None:
    assert canonical_address(text) == expected


def test_parse_ipv4_canonical_refuses_every_alternative_spelling() -> None:
    assert parse_ipv4_canonical("1.2.3.4") == ipaddress.IPv4Address("1.2.3.4")
    for text, _ in [(case[1], case[2]) for case in NON_CANONICAL_IPV4]:
        assert parse_ipv4_canonical(text) is None, text


@pytest.mark.parametrize(
    "text",
    ["64:ff9b::7f00:1", "2002:7f00:1::1", "64:ff9b:1::808:808", "::8.8.8.8", "3fff::1", "192.0.0.9"],
    ids=["nat64-of-loopback", "6to4-of-loopback", "nat64-local-use", "ipv4-compatible", "documentation-3fff",
         "ietf-192-0-0"],
)  # fmt: skip
def test_table_blocks_what_ipaddress_is_global_allows(text: str) -> None:
    # Python 3.11's ipaddress calls every one of these is_global (the answer has
    # changed between versions); the docs/design.md §8 table blocks them all.
    assert is_public_address(text) is False
