"""The manifest edge (docs/design.md §3): every defect refused with MANIFEST_INVALID and its location.

One fixture per defect lives in tests/fixtures/manifests/<defect>.json; each differs from
valid.json (the docs/design.md §3 example) in one place.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from host.config import DEFAULT_CEILINGS
from host.errors import ManifestInvalid
from host.formats.manifest import MAX_MANIFEST_BYTES, Effect, PackageManifest, Risk, is_semver
from tests.support.bundles import make_manifest, make_tool, manifest_bytes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "manifests"

# (fixture name, location of the problem it must be reported at)
DEFECTS: list[tuple[str, str]] = [
    ("unknown_field_top_level", "signature"),
    ("unknown_field_in_tool", "tools.0.handler"),
    ("unknown_field_in_allow_entry", "http.allow.0.any_port"),
    ("unknown_field_in_credential_location", "http.credentials.0.location.bearer.header"),
    ("package_name_uppercase", "package.name"),
    ("tool_name_double_dot", "tools.0.name"),
    ("tool_name_without_package_prefix", "tools.0.name"),
    ("tool_name_too_long", "tools.0.name"),
    ("semver_two_parts", "package.version"),
    ("semver_v_prefix", "package.version"),
    ("semver_leading_zero", "package.version"),
    ("tool_semver_leading_zero_prerelease", "tools.0.version"),
    ("format_unknown_version", "format"),
    ("module_world_unsupported", "module.world"),
    ("module_file_path_escape", "module.file"),
    ("module_sha256_uppercase", "module.sha256"),
    ("method_lowercase", "http.allow.0.methods.0"),
    ("method_trace", "http.allow.0.methods.0"),
    ("method_duplicate", "http.allow.0.methods"),
    ("methods_empty", "http.allow.0.methods"),
    ("secret_name_uppercase", "http.credentials.0.secret"),
    ("secret_name_too_long", "http.credentials.0.secret"),
    ("credential_host_not_in_allowlist", "http.credentials.0.hosts.0"),
    ("credential_host_other_scheme", "http.credentials.0.hosts.0"),
    ("credential_host_other_port", "http.credentials.0.hosts.0"),
    ("credential_wildcard_wider_than_allow", "http.credentials.0.hosts.0"),
    ("credential_host_bare_wildcard", "http.credentials.0.hosts.0"),
    ("allow_host_bare_wildcard", "http.allow.0.host"),
    ("allow_host_noncanonical_ipv4", "http.allow.0.host"),
    ("allow_host_with_userinfo", "http.allow.0.host"),
    ("allow_port_zero", "http.allow.0.port"),
    ("path_prefix_dot_segment", "http.allow.0.path_prefix"),
    ("path_prefix_encoded_dot_segment", "http.allow.0.path_prefix"),
    ("path_prefix_not_normalized", "http.allow.0.path_prefix"),
    ("credential_path_prefix_dot_segment", "http.credentials.0.path_prefixes.0"),
    ("credential_path_prefixes_empty", "http.credentials.0.path_prefixes"),
    ("header_credential_into_host_header", "http.credentials.0.location.header.name"),
    ("header_credential_name_not_token", "http.credentials.0.location.header.name"),
    ("header_credential_prefix_crlf", "http.credentials.0.location.header.prefix"),
    ("query_credential_empty_name", "http.credentials.0.location.query.name"),
    ("basic_credential_username_colon", "http.credentials.0.location.basic.username"),
    ("credential_location_unknown_type", "http.credentials.0.location"),
    ("limit_fuel_over_ceiling", "limits.fuel"),
    ("limit_memory_bytes_over_ceiling", "limits.memory_bytes"),
    ("limit_timeout_ms_over_ceiling", "limits.timeout_ms"),
    ("limit_max_http_requests_over_ceiling", "limits.max_http_requests"),
    ("limit_max_log_bytes_over_ceiling", "limits.max_log_bytes"),
    ("http_max_request_bytes_over_ceiling", "http.max_request_bytes"),
    ("http_max_response_bytes_over_ceiling", "http.max_response_bytes"),
    ("http_timeout_ms_over_ceiling", "http.timeout_ms"),
    ("limit_fuel_as_string", "limits.fuel"),
    ("limit_fuel_as_float", "limits.fuel"),
    ("limit_fuel_negative", "limits.fuel"),
    ("timeout_s_zero", "tools.0.timeout_s"),
    ("timeout_s_3601", "tools.0.timeout_s"),
    ("timeout_s_boolean", "tools.0.timeout_s"),
    ("permissions_17", "tools.0.permissions"),
    ("permissions_duplicate", "tools.0.permissions"),
    ("effect_unknown", "tools.0.effect"),
    ("risk_unknown", "tools.0.risk"),
    ("input_schema_pattern_keyword", "tools.0.input_schema"),
    ("input_schema_string_without_max_length", "tools.0.input_schema"),
    ("input_schema_root_not_object", "tools.0.input_schema"),
    ("input_schema_ref", "tools.0.input_schema"),
    ("output_schema_any_of", "tools.0.output_schema"),
    ("sensitive_param_not_in_input_schema", "tools.0.sensitive_params.0"),
    ("duplicate_tool", "tools.1.name"),
    ("rate_limit_zero", "tools.0.rate_limit.per_minute"),
    ("duplicate_json_key", ""),
    ("nan_number", ""),
    ("not_an_object", ""),
]


def refuse(data: bytes, **kwargs: object) -> list[dict[str, str]]:
    with pytest.raises(ManifestInvalid) as caught:
        PackageManifest.from_json(data, **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "MANIFEST_INVALID"
    problems = caught.value.details["problems"]
    assert problems and all(set(p) == {"loc", "msg"} for p in problems)
    return problems


def test_valid_fixture_is_the_design_example() -> None:
    manifest = PackageManifest.from_json((FIXTURES / "valid.json").read_bytes())
    tool = manifest.tools[0]
    assert (manifest.package.name, tool.name, tool.effect, tool.risk) == (
        "tracker", "tracker.list-issues", Effect.READ, Risk.LOW,
    )
    assert manifest.http.credentials[0].location.type == "bearer"


def test_every_fixture_is_listed() -> None:
    named = {name for name, _ in DEFECTS} | {"valid"}
    assert {p.stem for p in FIXTURES.glob("*.json")} == named


@pytest.mark.parametrize(("fixture", "loc"), DEFECTS, ids=[name for name, _ in DEFECTS])
def test_manifest_defect_refused_with_location(fixture: str, loc: str) -> None:
    problems = refuse((FIXTURES / f"{fixture}.json").read_bytes())
    assert loc in [p["loc"] for p in problems], problems


def test_every_problem_is_listed_not_just_the_first() -> None:
    manifest = make_manifest(
        package={"name": "Tracker", "version": "v1", "description": ""},
        tools=[make_tool(timeout_s=0, permissions=[f"p{i}" for i in range(17)]), make_tool()],
    )
    manifest["http"]["allow"][0]["methods"] = ["TRACE"]
    manifest["http"]["credentials"][0]["secret"] = "Bad-Name"
    manifest["http"]["credentials"][0]["hosts"] = ["evil.example"]
    manifest["limits"]["fuel"] = 10**15
    locs = {p["loc"] for p in refuse(manifest_bytes(manifest))}
    assert {
        "package.name", "package.version", "tools.0.timeout_s", "tools.0.permissions",
        "tools.1.name", "http.allow.0.methods.0", "http.credentials.0.secret",
        "http.credentials.0.hosts.0", "limits.fuel",
    } <= locs


def test_refused_value_is_named_in_the_problem() -> None:
    problems = refuse((FIXTURES / "method_trace.json").read_bytes())
    assert "'TRACE'" in problems[0]["msg"]


@pytest.mark.parametrize(
    ("field", "ceiling"),
    [
        ("fuel", "fuel"),
        ("memory_bytes", "memory_bytes"),
        ("timeout_ms", "timeout_ms"),
        ("max_http_requests", "max_http_requests"),
        ("max_log_bytes", "max_log_bytes"),
    ],
    ids=str,
)
def test_limit_at_ceiling_accepted_one_over_refused(field: str, ceiling: str) -> None:
    limit = getattr(DEFAULT_CEILINGS, ceiling)
    at = make_manifest()
    at["limits"][field] = limit
    assert getattr(PackageManifest.from_json(manifest_bytes(at)).limits, field) == limit
    over = make_manifest()
    over["limits"][field] = limit + 1
    assert [p["loc"] for p in refuse(manifest_bytes(over))] == [f"limits.{field}"]


@pytest.mark.parametrize(
    ("field", "ceiling"),
    [("max_request_bytes", "max_request_bytes"), ("max_response_bytes", "max_response_bytes"),
     ("timeout_ms", "http_timeout_ms")],
    ids=str,
)
def test_http_limit_at_ceiling_accepted_one_over_refused(field: str, ceiling: str) -> None:
    limit = getattr(DEFAULT_CEILINGS, ceiling)
    at = make_manifest()
    at["http"][field] = limit
    PackageManifest.from_json(manifest_bytes(at))
    over = make_manifest()
    over["http"][field] = limit + 1
    assert [p["loc"] for p in refuse(manifest_bytes(over))] == [f"http.{field}"]


def test_lower_host_ceiling_refuses_what_the_default_accepts() -> None:
    data = manifest_bytes(make_manifest(tools=[make_tool(permissions=["issues.read", "issues.list"])]))
    ceilings = replace(DEFAULT_CEILINGS, fuel=1000, tool_timeout_s=10, max_permissions=1)
    locs = {p["loc"] for p in refuse(data, ceilings=ceilings)}
    assert locs == {"limits.fuel", "tools.0.timeout_s", "tools.0.permissions"}


@pytest.mark.parametrize(("count", "ok"), [(16, True), (17, False)], ids=["16-ok", "17-refused"])
def test_permissions_limit_at_edge(count: int, ok: bool) -> None:
    data = manifest_bytes(make_manifest(tools=[make_tool(permissions=[f"perm.p{i}" for i in range(count)])]))
    if ok:
        assert len(PackageManifest.from_json(data).tools[0].permissions) == 16
    else:
        assert [p["loc"] for p in refuse(data)] == ["tools.0.permissions"]


@pytest.mark.parametrize(("timeout", "ok"), [(1, True), (3600, True), (0, False), (3601, False)], ids=str)
def test_tool_timeout_range(timeout: int, ok: bool) -> None:
    data = manifest_bytes(make_manifest(tools=[make_tool(timeout_s=timeout)]))
    if ok:
        assert PackageManifest.from_json(data).tools[0].timeout_s == timeout
    else:
        assert [p["loc"] for p in refuse(data)] == ["tools.0.timeout_s"]


@pytest.mark.parametrize(("count", "ok"), [(128, True), (129, False)], ids=["128-ok", "129-refused"])
def test_tool_count_limit_at_edge(count: int, ok: bool) -> None:
    tools = [make_tool(name=f"tracker.t{i}") for i in range(count)]
    data = manifest_bytes(make_manifest(tools=tools))
    if ok:
        assert len(PackageManifest.from_json(data).tools) == 128
    else:
        assert [p["loc"] for p in refuse(data)] == ["tools"]


def test_oversized_manifest_refused_before_parsing() -> None:
    data = b" " * (MAX_MANIFEST_BYTES + 1)
    assert "over" in refuse(data)[0]["msg"]


def test_not_utf8_refused() -> None:
    refuse(manifest_bytes(make_manifest()).replace(b"tracker", b"tr\xffcker", 1))


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("1.2.0", True), ("0.0.0", True), ("1.0.0-rc.1", True), ("1.0.0-alpha-1.0+build.5", True),
        ("1.0.0+20130313144700", True), ("1.0", False), ("v1.0.0", False), ("01.0.0", False),
        ("1.01.0", False), ("1.0.0-01", False), ("1.0.0-", False), ("1.0.0+", False),
        ("1.0.0\n", False), ("١.٢.٣", False), ("1.0.0-rc..1", False), (" 1.0.0", False),
    ],
    ids=repr,
)
def test_semver_is_exact_and_canonical(version: str, ok: bool) -> None:
    assert is_semver(version) is ok


def test_wildcard_credential_host_admitted_by_same_wildcard_allow() -> None:
    manifest = make_manifest()
    manifest["http"]["allow"][0]["host"] = "*.tracker.example"
    manifest["http"]["credentials"][0]["hosts"] = ["*.tracker.example", "api.tracker.example"]
    parsed = PackageManifest.from_json(manifest_bytes(manifest))
    assert parsed.http.credentials[0].hosts == ("*.tracker.example", "api.tracker.example")


def test_credential_host_on_another_port_names_the_default_and_the_spelling_that_matches() -> None:
    # `hosts = ["127.0.0.1"]` beside an http allow entry on port 18080 said only "not admitted".
    manifest = make_manifest()
    manifest["http"]["allow"][0].update(scheme="http", host="127.0.0.1", port=18080)
    manifest["http"]["credentials"][0]["hosts"] = ["127.0.0.1"]
    [problem] = refuse(manifest_bytes(manifest))
    assert problem["loc"] == "http.credentials.0.hosts.0"
    assert "read as https://127.0.0.1: a credential host without a scheme or port is https on 443" in problem["msg"]
    assert "write 'http://127.0.0.1:18080'" in problem["msg"]
    manifest["http"]["credentials"][0]["hosts"] = ["http://127.0.0.1:18080"]
    assert PackageManifest.from_json(manifest_bytes(manifest)).http.credentials[0].hosts == ("http://127.0.0.1:18080",)


def test_credential_host_outside_every_allow_entry_gets_no_spelling() -> None:
    manifest = make_manifest()
    manifest["http"]["credentials"][0]["hosts"] = ["https://evil.example"]
    [problem] = refuse(manifest_bytes(manifest))
    assert problem["msg"].endswith("(read as https://evil.example)")


def test_wildcard_allow_does_not_admit_credential_for_its_apex() -> None:
    manifest = make_manifest()
    manifest["http"]["allow"][0]["host"] = "*.tracker.example"
    manifest["http"]["credentials"][0]["hosts"] = ["tracker.example"]
    assert [p["loc"] for p in refuse(manifest_bytes(manifest))] == ["http.credentials.0.hosts.0"]


def test_credential_host_admitted_by_second_allow_entry() -> None:
    manifest = make_manifest()
    manifest["http"]["allow"].append(
        {"scheme": "https", "host": "upload.tracker.example", "port": 8443, "path_prefix": "/", "methods": ["PUT"]}
    )
    manifest["http"]["credentials"][0]["hosts"] = ["upload.tracker.example:8443"]
    parsed = PackageManifest.from_json(manifest_bytes(manifest))
    assert parsed.http.credentials[0].hosts == ("upload.tracker.example:8443",)
    assert [entry.host for entry in parsed.http.allow][-1] == "upload.tracker.example"


def test_manifest_is_frozen() -> None:
    manifest = PackageManifest.from_json(manifest_bytes(make_manifest()))
    with pytest.raises(ValidationError):
        manifest.tools[0].timeout_s = 3600  # type: ignore[misc]
    assert isinstance(manifest.tools, tuple)
    assert isinstance(manifest.tools[0].permissions, tuple)


def test_to_json_is_canonical_and_round_trips() -> None:
    manifest = PackageManifest.from_json(manifest_bytes(make_manifest()))
    data = manifest.to_json()
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    assert PackageManifest.from_json(data) == manifest


def test_allow_entry_sends_trace_context_only_when_it_says_so() -> None:
    off = PackageManifest.from_json(manifest_bytes(make_manifest()))
    assert off.http.allow[0].propagate_trace is False
    assert "propagate_trace" not in json.loads(off.to_json())["http"]["allow"][0]  # bytes as before
    raw = make_manifest()
    raw["http"]["allow"][0]["propagate_trace"] = True
    on = PackageManifest.from_json(manifest_bytes(raw))
    assert on.http.allow[0].propagate_trace is True
    assert json.loads(on.to_json())["http"]["allow"][0]["propagate_trace"] is True
    raw["http"]["allow"][0]["propagate_trace"] = "yes"
    with pytest.raises(ManifestInvalid, match="propagate_trace"):
        PackageManifest.from_json(manifest_bytes(raw))


def test_optional_fields_default_to_least_privilege() -> None:
    raw = make_manifest()
    del raw["http"]["credentials"]
    tool = raw["tools"][0]
    for key in ("output_schema", "sensitive_params", "rate_limit"):
        del tool[key]
    manifest = PackageManifest.from_json(manifest_bytes(raw))
    assert manifest.http.credentials == ()
    assert manifest.tools[0].output_schema is None  # the tool may only return null
    assert manifest.tools[0].rate_limit is None


def test_str_input_with_lone_surrogate_refused() -> None:
    text = manifest_bytes(make_manifest()).decode().replace("Issue tracker", "\ud800", 1)
    refuse(text)  # type: ignore[arg-type]


def _allow(i: int) -> dict:
    host = "api.tracker.example" if i == 0 else f"h{i}.tracker.example"
    return {"scheme": "https", "host": host, "path_prefix": "/", "methods": ["GET"]}


def _cred(i: int) -> dict:
    return {"secret": f"s{i}", "location": {"type": "bearer"}, "hosts": ["api.tracker.example"],
            "path_prefixes": ["/v1"]}


def _set(path: str, value: object):  # type: ignore[no-untyped-def]
    def apply(manifest: dict) -> None:
        *parents, last = path.split(".")
        node = manifest
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value
    return apply


def _both(*steps):  # type: ignore[no-untyped-def]
    def apply(manifest: dict) -> None:
        for step in steps:
            step(manifest)
    return apply


_WILDCARD_ALLOW = _set("http.allow.0.host", "*.tracker.example")

# (id, limit, mutation at the limit, mutation one over, problem location)
SIZE_LIMITS = [
    ("allow-entries", _set("http.allow", [_allow(i) for i in range(64)]),
     _set("http.allow", [_allow(i) for i in range(65)]), "http.allow"),
    ("credentials", _set("http.credentials", [_cred(i) for i in range(64)]),
     _set("http.credentials", [_cred(i) for i in range(65)]), "http.credentials"),
    ("credential-hosts",
     _both(_WILDCARD_ALLOW, _set("http.credentials.0.hosts", [f"h{i}.tracker.example" for i in range(16)])),
     _both(_WILDCARD_ALLOW, _set("http.credentials.0.hosts", [f"h{i}.tracker.example" for i in range(17)])),
     "http.credentials.0.hosts"),
    ("credential-path-prefixes", _set("http.credentials.0.path_prefixes", [f"/p{i}" for i in range(16)]),
     _set("http.credentials.0.path_prefixes", [f"/p{i}" for i in range(17)]), "http.credentials.0.path_prefixes"),
    ("tool-description", _set("tools.0.description", "d" * 4096), _set("tools.0.description", "d" * 4097),
     "tools.0.description"),
    ("package-description", _set("package.description", "d" * 4096), _set("package.description", "d" * 4097),
     "package.description"),
    ("homepage", _set("package.homepage", "https://x.example/" + "a" * 2030),
     _set("package.homepage", "https://x.example/" + "a" * 2031), "package.homepage"),
    ("header-prefix", _set("http.credentials.0.location", {"type": "header", "name": "X-Token", "prefix": "p" * 64}),
     _set("http.credentials.0.location", {"type": "header", "name": "X-Token", "prefix": "p" * 65}),
     "http.credentials.0.location.header.prefix"),
    ("header-name", _set("http.credentials.0.location", {"type": "header", "name": "x" * 128}),
     _set("http.credentials.0.location", {"type": "header", "name": "x" * 129}),
     "http.credentials.0.location.header.name"),
    ("basic-username", _set("http.credentials.0.location", {"type": "basic", "username": "u" * 256}),
     _set("http.credentials.0.location", {"type": "basic", "username": "u" * 257}),
     "http.credentials.0.location.basic.username"),
    ("rate-limit", _set("tools.0.rate_limit", {"per_minute": 1, "per_hour": 1_000_000}),
     _set("tools.0.rate_limit", {"per_minute": 1, "per_hour": 1_000_001}), "tools.0.rate_limit.per_hour"),
    ("memory-floor", _set("limits.memory_bytes", 65536), _set("limits.memory_bytes", 65535), "limits.memory_bytes"),
    ("version-length", _set("package.version", "1.2.0-" + "a" * 122), _set("package.version", "1.2.0-" + "a" * 123),
     "package.version"),
    ("sensitive-params", _set("tools.0.input_schema.properties", {f"p{i}": {"type": "null"} for i in range(64)}),
     None, "tools.0.sensitive_params"),
]


@pytest.mark.parametrize(("at", "over", "loc"), [c[1:] for c in SIZE_LIMITS], ids=[c[0] for c in SIZE_LIMITS])
def test_every_size_limit_at_edge_and_crossed(at, over, loc) -> None:  # type: ignore[no-untyped-def]
    manifest = make_manifest()
    at(manifest)
    if loc == "tools.0.sensitive_params":
        manifest["tools"][0]["input_schema"]["required"] = []
        manifest["tools"][0]["sensitive_params"] = [f"p{i}" for i in range(64)]
        PackageManifest.from_json(manifest_bytes(manifest))
        manifest["tools"][0]["input_schema"]["properties"]["p64"] = {"type": "null"}
        manifest["tools"][0]["sensitive_params"].append("p64")
        assert "tools.0.sensitive_params" in [p["loc"] for p in refuse(manifest_bytes(manifest))]
        return
    PackageManifest.from_json(manifest_bytes(manifest))
    manifest = make_manifest()
    over(manifest)
    assert loc in [p["loc"] for p in refuse(manifest_bytes(manifest))]


def test_problem_list_is_capped() -> None:
    tools = [make_tool(name=f"Bad{i}") for i in range(128)]
    problems = refuse(manifest_bytes(make_manifest(tools=tools)))
    assert len(problems) == 101
    assert problems[-1]["msg"].startswith("... and ")


LONG_PATH = "/".join(["d" * 200] * 5) + "/" + "d" * 19  # 1,024 characters, components under 255


@pytest.mark.parametrize(
    ("read", "loc"),
    [
        (["../x"], "workspace.read.0"),
        (["/etc"], "workspace.read.0"),
        (["a\x00b"], "workspace.read.0"),
        (["./docs"], "workspace.read.0"),  # not in normal form
        (["docs/"], "workspace.read.0"),
        ([""], "workspace.read.0"),
        ([], "workspace.read"),
        (["docs", "docs"], "workspace.read"),
        (["docs", "docs/api"], "workspace.read"),  # already covered
        (["docs", "."], "workspace.read"),
        ([f"d{i}" for i in range(17)], "workspace.read"),  # one over the 16 entries
        ([LONG_PATH + "d"], "workspace.read.0"),  # one over 1024 characters
    ],
)
def test_workspace_read_entry_refused_with_location(read: list[str], loc: str) -> None:
    problems = refuse(manifest_bytes({**make_manifest(), "workspace": {"read": read}}))
    assert [p["loc"] for p in problems] == [loc]


def test_workspace_read_in_normal_form_accepted_and_kept_in_the_bytes() -> None:
    read = ["docs", "src/lib", "..notes"]
    manifest = PackageManifest.from_json(manifest_bytes({**make_manifest(), "workspace": {"read": read}}))
    assert manifest.workspace is not None and manifest.workspace.read == tuple(read)
    assert json.loads(manifest.to_json())["workspace"] == {"read": read}
    assert "workspace" not in json.loads(PackageManifest.from_json(manifest_bytes(make_manifest())).to_json())
    limit = PackageManifest.from_json(manifest_bytes({**make_manifest(), "workspace": {"read": [f"d{i}" for i in range(16)]}}))
    assert limit.workspace is not None and len(limit.workspace.read) == 16
    longest = PackageManifest.from_json(manifest_bytes({**make_manifest(), "workspace": {"read": [LONG_PATH]}}))
    assert longest.workspace is not None and longest.workspace.read == (LONG_PATH,)


@pytest.mark.parametrize("access", [{"read": ["docs"], "write": ["docs"]}, {"write": ["."]}, {"read": ["docs"], "rw": True}])
def test_workspace_write_access_is_manifest_invalid(access: dict[str, object]) -> None:
    problems = refuse(manifest_bytes({**make_manifest(), "workspace": access}))
    assert any(p["loc"] == "workspace" and "only read access" in p["msg"] for p in problems)
