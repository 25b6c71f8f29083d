"""Egress allowlist and DNS vetting (docs/design.md §8 "Egress" steps 3–5)."""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

import host.egress.policy as policy_module
from host.egress.policy import (
    MAX_DNS_ANSWERS,
    MAX_PENDING_LOOKUPS,
    EgressPolicy,
    EgressTarget,
    system_resolver,
)
from host.egress.urls import parse_host_pattern
from host.errors import EgressDenied, EgressUnreachable


@dataclass
class FakeResolver:
    """A resolver port fake: answers from a table and counts every call."""

    answers: dict[str, list[list[str]]]
    calls: list[str] = field(default_factory=list)

    def __call__(self, host: str) -> Sequence[str]:
        self.calls.append(host)
        queue = self.answers[host]
        return queue[min(len(self.calls), len(queue)) - 1]


class RaisingResolver:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.calls = 0

    def __call__(self, host: str) -> Sequence[str]:
        self.calls += 1
        raise self.exc


def _never(host: str) -> Sequence[str]:
    raise AssertionError(f"resolver must not be called for {host}")


def _entry(scheme: str, host: str, port: int | None, prefix: str, methods: list[str]) -> dict[str, object]:
    return {"scheme": scheme, "host": host, "port": port, "path_prefix": prefix, "methods": methods}


ALLOW = [
    _entry("https", "api.example.com", None, "/v1", ["GET", "POST"]),
    _entry("https", "*.cdn.example", None, "/", ["GET"]),
    _entry("http", "legacy.example", 8080, "/api/", ["GET"]),
    _entry("https", "93.184.216.34", None, "/ip", ["GET"]),
    _entry("https", "api.example.com", 8443, "/admin", ["DELETE"]),
    _entry("https", "10.0.0.1", None, "/", ["GET"]),
    _entry("https", "[::ffff:127.0.0.1]", None, "/", ["GET"]),
    _entry("https", "127.0.0.1", 9443, "/", ["GET"]),
]


@pytest.fixture
def policy() -> EgressPolicy:
    return EgressPolicy.from_allow(ALLOW)


ALLOWED: list[tuple[str, str, str, str]] = [
    ("prefix-exact", "GET", "https://api.example.com/v1", "https://api.example.com/v1"),
    ("below-prefix", "GET", "https://api.example.com/v1/issues", "https://api.example.com/v1/issues"),
    ("query-kept", "POST", "https://api.example.com/v1?q=1", "https://api.example.com/v1?q=1"),
    (
        "normalized-before-match",
        "GET",
        "https://API.EXAMPLE.COM./v1/a/./b/../c#frag",
        "https://api.example.com/v1/a/c",
    ),
    ("wildcard-one-label", "GET", "https://img.cdn.example/a.png", "https://img.cdn.example/a.png"),
    ("wildcard-one-letter-label", "GET", "https://i.cdn.example/a.png", "https://i.cdn.example/a.png"),
    ("http-where-entry-says-http", "GET", "http://legacy.example:8080/api/x", "http://legacy.example:8080/api/x"),
    ("ip-literal-listed", "GET", "https://93.184.216.34/ip/x", "https://93.184.216.34/ip/x"),
    ("second-entry-same-host", "DELETE", "https://api.example.com:8443/admin/1", "https://api.example.com:8443/admin/1"),
]


@pytest.mark.parametrize(("case_id", "method", "url", "sent"), ALLOWED, ids=[c[0] for c in ALLOWED])
def test_allowed_request_returns_normalized_target(
    policy: EgressPolicy, case_id: str, method: str, url: str, sent: str
) -> None:
    target = policy.check(method, url)
    assert target.url == sent
    assert target == EgressTarget.from_normalized(target.normalized())


DENIED: list[tuple[str, str, str, str]] = [
    ("sibling-path-v10", "GET", "https://api.example.com/v10", "path_not_allowed"),
    ("dotdot-out-of-prefix", "GET", "https://api.example.com/v1/../admin", "path_not_allowed"),
    ("encoded-dotdot-out-of-prefix", "GET", "https://api.example.com/v1/%2e%2e/admin", "path_not_allowed"),
    ("encoded-slash-dotdot", "GET", "https://api.example.com/v1%2f..%2fadmin", "encoded_separator"),
    ("tomcat-dotdot-semicolon", "GET", "https://api.example.com/v1/..;/admin", "dot_segment"),
    ("method-not-listed", "DELETE", "https://api.example.com/v1/x", "method_not_allowed"),
    ("method-lowercase", "get", "https://api.example.com/v1/x", "method_not_allowed"),
    ("method-with-crlf", "GET\r\n", "https://api.example.com/v1/x", "method_not_allowed"),
    ("other-port-other-prefix", "GET", "https://api.example.com:8443/v1", "path_not_allowed"),
    ("port-not-listed", "GET", "https://api.example.com:444/v1", "port_not_allowed"),
    ("http-downgrade", "GET", "http://api.example.com/v1", "insecure_scheme"),
    ("http-downgrade-wildcard", "GET", "http://img.cdn.example/", "insecure_scheme"),
    ("https-where-only-http-listed", "GET", "https://legacy.example:8080/api", "scheme_not_allowed"),
    ("http-default-port", "GET", "http://legacy.example/api", "port_not_allowed"),
    ("host-not-listed", "GET", "https://evil.example/v1", "host_not_allowed"),
    ("host-suffix-attack", "GET", "https://api.example.com.evil.example/v1", "host_not_allowed"),
    ("host-prefix-attack", "GET", "https://evilapi.example.com/v1", "host_not_allowed"),
    ("wildcard-apex", "GET", "https://cdn.example/", "host_not_allowed"),
    ("wildcard-two-labels", "GET", "https://a.b.cdn.example/", "host_not_allowed"),
    ("ip-not-listed", "GET", "https://93.184.216.35/ip", "host_not_allowed"),
    ("listed-ip-as-integer", "GET", "https://1572395042/ip", "ip_literal"),
    ("listed-ip-as-mapped-ipv6", "GET", "https://[::ffff:93.184.216.34]/ip", "host_not_allowed"),
    ("userinfo", "GET", "https://user@api.example.com/v1", "userinfo"),
    ("userinfo-to-listed-host", "GET", "https://api.example.com@evil.example/v1", "userinfo"),
    ("localhost", "GET", "https://localhost/v1", "localhost"),
    ("ftp", "GET", "ftp://api.example.com/v1", "scheme_not_allowed"),
    ("control-character", "GET", "https://api.example.com/v1/\n", "control_character"),
    ("relative", "GET", "/v1/issues", "invalid_url"),
]


@pytest.mark.parametrize(("case_id", "method", "url", "reason"), DENIED, ids=[c[0] for c in DENIED])
def test_request_outside_allowlist_refused(
    policy: EgressPolicy, case_id: str, method: str, url: str, reason: str
) -> None:
    with pytest.raises(EgressDenied) as caught:
        policy.check(method, url)
    assert caught.value.reason == reason


@pytest.mark.parametrize("host", ["evilexample.com", "evil-example.com", "xexample.com"])
def test_wildcard_needs_its_dot_evilexample_com_refused(host: str) -> None:
    # '*.example.com' is one label *and a dot* below example.com: a host that merely ends
    # in 'example.com' is another registrable domain.
    policy = EgressPolicy.from_allow([_entry("https", "*.example.com", None, "/", ["GET"])])
    assert policy.check("GET", "https://api.example.com/").host == "api.example.com"
    with pytest.raises(EgressDenied) as caught:
        policy.check("GET", f"https://{host}/")
    assert caught.value.reason == "host_not_allowed"


def test_empty_allowlist_denies_everything() -> None:
    empty = EgressPolicy.from_allow([])
    for url in ("https://api.example.com/", "https://93.184.216.34/", "http://a.example/"):
        with pytest.raises(EgressDenied) as caught:
            empty.check("GET", url)
        assert caught.value.reason == "empty_allowlist"


def test_url_allowed_if_any_matching_entry_admits_it() -> None:
    policy = EgressPolicy.from_allow(
        [
            _entry("https", "api.example.com", None, "/", ["GET"]),
            _entry("https", "api.example.com", None, "/v1", ["POST"]),
        ]
    )
    assert policy.check("GET", "https://api.example.com/v1/x").path == "/v1/x"
    assert policy.check("POST", "https://api.example.com/v1/x").path == "/v1/x"
    with pytest.raises(EgressDenied) as caught:
        policy.check("POST", "https://api.example.com/v2")
    assert caught.value.reason == "method_not_allowed"


def test_target_fields(policy: EgressPolicy) -> None:
    target = policy.check("GET", "https://api.example.com/v1/./x?q=%2F#f")
    assert (target.scheme, target.host, target.port, target.path, target.query, target.host_kind) == (
        "https",
        "api.example.com",
        443,
        "/v1/x",
        "q=%2F",
        "dns",
    )


def test_from_allow_accepts_objects_with_attributes() -> None:
    entry = SimpleNamespace(scheme="https", host="api.example.com", port=None, path_prefix="/v1", methods=("GET",))
    policy = EgressPolicy.from_allow([entry])
    assert policy.check("GET", "https://api.example.com/v1").url == "https://api.example.com/v1"
    assert len(policy.rules) == 1


BAD_ENTRIES: list[tuple[str, object, str]] = [
    ("missing-field", {"scheme": "https", "host": "a.example", "port": None, "methods": ["GET"]}, "path_prefix"),
    ("unknown-field", {**_entry("https", "a.example", None, "/", ["GET"]), "path_prefixes": ["/"]}, "unknown"),
    ("object-missing-attr", SimpleNamespace(scheme="https", host="a.example", port=None, methods=["GET"]),
     "path_prefix"),
    ("wildcard-tld", _entry("https", "*.com", None, "/", ["GET"]), "two labels"),
    ("star-alone", _entry("https", "*", None, "/", ["GET"]), r"'\*'"),
    ("non-canonical-ip", _entry("https", "0x7f.0.0.1", None, "/", ["GET"]), "canonical"),
    ("localhost", _entry("https", "localhost", None, "/", ["GET"]), "by name"),
    ("port-string", _entry("https", "a.example", "443", "/", ["GET"]), "port"),  # type: ignore[arg-type]
    ("port-bool", _entry("https", "a.example", True, "/", ["GET"]), "port"),
    ("port-zero", _entry("https", "a.example", 0, "/", ["GET"]), "1–65535"),
    ("scheme-ftp", _entry("ftp", "a.example", None, "/", ["GET"]), "http or https"),
    ("prefix-relative", _entry("https", "a.example", None, "v1", ["GET"]), "starting with '/'"),
    ("prefix-dotdot", _entry("https", "a.example", None, "/v1/../x", ["GET"]), "dot segments"),
    ("prefix-encoded-slash", _entry("https", "a.example", None, "/v1%2f", ["GET"]), "'/'"),
    ("methods-string", {**_entry("https", "a.example", None, "/", []), "methods": "GET"}, "list"),
    ("methods-empty", _entry("https", "a.example", None, "/", []), "at least one"),
    ("methods-lowercase", _entry("https", "a.example", None, "/", ["get"]), "upper-case"),
    ("methods-crlf", _entry("https", "a.example", None, "/", ["GET\r\n"]), "upper-case"),
    ("host-not-string", _entry("https", None, None, "/", ["GET"]), "strings"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("case_id", "entry", "message"), BAD_ENTRIES, ids=[c[0] for c in BAD_ENTRIES])
def test_bad_allow_entry_refused_never_widened(case_id: str, entry: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EgressPolicy.from_allow([_entry("https", "ok.example", None, "/", ["GET"]), entry])


@pytest.mark.parametrize("entries", [{"scheme": "https"}, "https://a.example", None], ids=["dict", "str", "none"])
def test_allow_list_must_be_a_list(entries: object) -> None:
    with pytest.raises(ValueError, match="list"):
        EgressPolicy.from_allow(entries)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("credential_host", "admitted"),
    [
        ("api.example.com", True),
        ("https://api.example.com:443", True),
        ("img.cdn.example", True),
        ("*.cdn.example", True),
        ("cdn.example", False),
        ("a.b.cdn.example", False),
        ("http://api.example.com", False),
        ("api.example.com:8444", False),
        ("*.example.com", False),
        ("evil.example", False),
    ],
    ids=["literal", "explicit-default", "under-wildcard", "same-wildcard", "wildcard-apex", "two-below-wildcard",
         "http", "other-port", "wider-wildcard", "unlisted"],
)  # fmt: skip
def test_credential_host_must_be_admitted_by_allowlist(
    policy: EgressPolicy, credential_host: str, admitted: bool
) -> None:
    # the manifest's rule (host/formats/manifest.py): some allow entry covers the credential's host
    assert any(rule.pattern.covers(parse_host_pattern(credential_host)) for rule in policy.rules) is admitted


# --- vet(): resolve once, refuse any non-public answer ---------------------------


def _api_target(policy: EgressPolicy) -> EgressTarget:
    return policy.check("GET", "https://api.example.com/v1")


@pytest.mark.parametrize(
    "answer",
    [
        ["127.0.0.1"],
        ["169.254.169.254"],
        ["93.184.216.34", "10.0.0.1"],
        ["10.0.0.1", "93.184.216.34"],
        ["93.184.216.34", "::ffff:10.0.0.1"],
        ["2606:4700::1111", "fd00::1"],
        ["93.184.216.34", "fe80::1%eth0"],
        ["0.0.0.0"],
        ["::"],
        ["2002:7f00:1::1"],
        ["93.184.216.34", "0177.0.0.1"],
        ["not-an-address"],
        ["93.184.216.34", 2130706433],
    ],
    ids=["loopback", "cloud-metadata", "mixed-public-first", "mixed-private-first", "mixed-mapped-private",
         "mixed-ula", "link-local-with-zone", "unspecified-v4", "unspecified-v6", "6to4-of-loopback",
         "non-canonical-answer", "garbage-answer", "integer-answer"],
)  # fmt: skip
def test_public_name_resolving_to_blocked_address_refused(policy: EgressPolicy, answer: list[str]) -> None:
    resolver = FakeResolver({"api.example.com": [answer]})
    with pytest.raises(EgressDenied) as caught:
        policy.vet(_api_target(policy), resolver)
    assert caught.value.reason == "blocked_address"
    assert resolver.calls == ["api.example.com"]


def test_public_answer_vetted_deduplicated_in_order(policy: EgressPolicy) -> None:
    resolver = FakeResolver(
        {"api.example.com": [["93.184.216.34", "2606:4700:0::1111", "93.184.216.34", "[2606:4700::1111]"]]}
    )
    assert policy.vet(_api_target(policy), resolver) == ("93.184.216.34", "2606:4700::1111")
    assert resolver.calls == ["api.example.com"]


def test_dns_rebinding_second_answer_never_consulted(policy: EgressPolicy) -> None:
    resolver = FakeResolver({"api.example.com": [["93.184.216.34"], ["127.0.0.1"]]})
    target = _api_target(policy)
    assert policy.vet(target, resolver) == ("93.184.216.34",)
    assert len(resolver.calls) == 1


@pytest.mark.parametrize(
    "exc",
    [OSError("no route"), socket.gaierror(socket.EAI_NONAME, "Name or service not known"), TimeoutError(),
     UnicodeError("label too long"), RuntimeError("resolver bug")],
    ids=["oserror", "gaierror", "timeout", "unicode", "runtime"],
)  # fmt: skip
def test_resolver_failure_is_dns_failure(policy: EgressPolicy, exc: BaseException) -> None:
    resolver = RaisingResolver(exc)
    with pytest.raises(EgressDenied) as caught:
        policy.vet(_api_target(policy), resolver)
    assert caught.value.reason == "dns_failure"
    assert caught.value.__cause__ is exc
    assert resolver.calls == 1


@pytest.mark.parametrize("answer", [[], (), "93.184.216.34"], ids=["empty-list", "empty-tuple", "bare-string"])
def test_empty_or_malformed_answer_is_dns_failure(policy: EgressPolicy, answer: Sequence[str]) -> None:
    with pytest.raises(EgressDenied) as caught:
        policy.vet(_api_target(policy), lambda host: answer)
    assert caught.value.reason == "dns_failure"


def test_resolver_egress_denied_passes_through(policy: EgressPolicy) -> None:
    with pytest.raises(EgressDenied) as caught:
        policy.vet(_api_target(policy), RaisingResolver(EgressDenied("nope", reason="dns_failure")))
    assert caught.value.message == "nope"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://93.184.216.34/ip", ("93.184.216.34",)),
        ("https://10.0.0.1/", None),
        ("https://[::ffff:127.0.0.1]/", None),
    ],
    ids=["public-ipv4", "private-ipv4-listed", "mapped-loopback-listed"],
)
def test_ip_literal_vetted_without_dns(policy: EgressPolicy, url: str, expected: tuple[str, ...] | None) -> None:
    target = policy.check("GET", url)
    if expected is not None:
        assert policy.vet(target, _never) == expected
        return
    with pytest.raises(EgressDenied) as caught:
        policy.vet(target, _never)
    assert caught.value.reason == "blocked_address"


@pytest.mark.parametrize(
    ("answer", "allowed"),
    [
        (["127.0.0.1"], True),
        (["::1"], True),
        (["::ffff:127.0.0.1"], True),
        (["127.0.0.1", "93.184.216.34"], True),
        (["10.0.0.1"], False),
        (["127.0.0.1", "10.0.0.1"], False),
        (["0.0.0.0"], False),
        (["169.254.169.254"], False),
        (["::"], False),
    ],
    ids=["v4", "v6", "mapped", "loopback-and-public", "private", "loopback-and-private", "unspecified",
         "metadata", "unspecified-v6"],
)  # fmt: skip
def test_allow_loopback_admits_loopback_and_nothing_else(
    policy: EgressPolicy, answer: list[str], allowed: bool
) -> None:
    resolver = FakeResolver({"api.example.com": [answer]})
    target = _api_target(policy)
    if allowed:
        assert policy.vet(target, resolver, allow_loopback=True)
    else:
        with pytest.raises(EgressDenied) as caught:
            policy.vet(target, resolver, allow_loopback=True)
        assert caught.value.reason == "blocked_address"
    with pytest.raises(EgressDenied):
        policy.vet(target, resolver)  # without the unsafe setting, loopback is refused too


def test_allow_loopback_ip_literal(policy: EgressPolicy) -> None:
    target = policy.check("GET", "https://127.0.0.1:9443/x")
    assert policy.vet(target, _never, allow_loopback=True) == ("127.0.0.1",)
    with pytest.raises(EgressDenied):
        policy.vet(target, _never)


def test_blocked_address_kept_out_of_message_but_in_details(policy: EgressPolicy) -> None:
    resolver = FakeResolver({"api.example.com": [["10.1.2.3"]]})
    with pytest.raises(EgressDenied) as caught:
        policy.vet(_api_target(policy), resolver)
    assert "10.1.2.3" not in caught.value.message
    assert caught.value.details["address"] == "10.1.2.3"


def test_system_resolver_failure_is_dns_failure() -> None:
    # A 64-character label fails inside getaddrinfo's IDNA step: no network traffic.
    with pytest.raises(EgressDenied) as caught:
        system_resolver("a" * 64 + ".example")
    assert caught.value.reason == "dns_failure"


def test_system_resolver_resolves_loopback_name() -> None:
    # /etc/hosts answers without any network traffic.
    addresses = system_resolver("localhost")
    assert addresses
    assert set(addresses) <= {"127.0.0.1", "::1"}


# -- issue 18.1 / 18.6: DNS failures are their own code; answers are capped ------------------


def test_dns_failure_is_egress_unreachable_not_a_denial(policy: EgressPolicy) -> None:
    with pytest.raises(EgressUnreachable) as caught:
        policy.vet(_api_target(policy), RaisingResolver(OSError("NXDOMAIN")))
    assert caught.value.code == "EGRESS_UNREACHABLE"
    assert caught.value.reason == "dns_failure"


def test_dns_answer_flood_is_capped_and_deduplicated(policy: EgressPolicy) -> None:
    # 50,000 distinct public answers (quadratic duplicate removal took 26 s): only the first
    # MAX_DNS_ANSWERS are vetted, so only those can ever be pinned and connected to.
    flood = [f"93.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}" for i in range(1, 50_001)]
    vetted = policy.vet(_api_target(policy), lambda host: flood)
    assert vetted == tuple(flood[:MAX_DNS_ANSWERS])


def test_private_answer_beyond_the_cap_is_never_vetted(policy: EgressPolicy) -> None:
    answers = ["93.184.216.34"] * MAX_DNS_ANSWERS + ["10.0.0.1"]
    assert policy.vet(_api_target(policy), lambda host: answers) == ("93.184.216.34",)
    with pytest.raises(EgressDenied):
        policy.vet(_api_target(policy), lambda host: ["10.0.0.1", *answers])


def test_endless_resolver_answer_is_capped(policy: EgressPolicy) -> None:
    endless = itertools.cycle(["93.184.216.34", "93.184.216.35"])
    assert policy.vet(_api_target(policy), lambda host: endless, deadline=time.monotonic() + 5) == (
        "93.184.216.34", "93.184.216.35")


def test_resolver_answer_within_deadline_is_used(policy: EgressPolicy) -> None:
    resolver = FakeResolver({"api.example.com": [["93.184.216.34"]]})
    assert policy.vet(_api_target(policy), resolver, deadline=time.monotonic() + 5) == ("93.184.216.34",)


def test_resolver_failure_in_worker_keeps_its_cause(policy: EgressPolicy) -> None:
    exc = OSError("no route")
    with pytest.raises(EgressUnreachable) as caught:
        policy.vet(_api_target(policy), RaisingResolver(exc), deadline=time.monotonic() + 5)
    assert caught.value.reason == "dns_failure" and caught.value.__cause__ is exc


def test_deadline_already_passed_never_calls_the_resolver(policy: EgressPolicy) -> None:
    with pytest.raises(EgressUnreachable) as caught:
        policy.vet(_api_target(policy), _never, deadline=time.monotonic() - 1)
    assert caught.value.reason == "dns_timeout"


def test_hung_lookups_cannot_pile_up_threads(policy: EgressPolicy) -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def hung(host: str) -> Sequence[str]:
        started.release()
        release.wait(10)
        return ["93.184.216.34"]

    target = _api_target(policy)
    assert policy_module._lookups.wait_quiet(10)  # no lookup of an earlier test still running
    try:
        for _ in range(MAX_PENDING_LOOKUPS):
            with pytest.raises(EgressUnreachable) as caught:
                policy.vet(target, hung, deadline=time.monotonic() + 0.01)
            assert caught.value.reason == "dns_timeout"
        for _ in range(MAX_PENDING_LOOKUPS):
            assert started.acquire(timeout=10)
        with pytest.raises(EgressUnreachable) as caught:
            policy.vet(target, _never, deadline=time.monotonic() + 5)
        assert caught.value.reason == "dns_busy"
    finally:
        release.set()
    # Once the hung lookups return, their workers are free again.
    assert policy_module._lookups.wait_quiet(10)
    assert policy.vet(target, lambda host: ["93.184.216.34"], deadline=time.monotonic() + 5)
