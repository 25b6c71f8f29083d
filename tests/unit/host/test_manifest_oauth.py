"""The ``oauth`` declaration of a credential mapping: validated at the manifest edge, shown by
``inspect``, and every widening flagged by ``diff`` as an escalation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from host.errors import ManifestInvalid
from host.formats.manifest import PackageManifest
from sdk.commands.inspect import _credential_rows
from sdk.review._manifestdiff import manifest_changes
from sdk.review.report import _http_report
from tests.support.bundles import make_manifest

TOKEN_URL = "https://auth.tracker.example/oauth/token"


def _oauth(**overrides: Any) -> dict[str, Any]:
    fields = {"grant": "refresh_token", "token_url": TOKEN_URL, "scopes": ["issues:read"], "client": "tracker_client"}
    return {**fields, **overrides}


def manifest(oauth: dict[str, Any] | None = None, *, token_hosts: list[str] | None = None,
             allow_extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:  # fmt: skip
    doc = make_manifest()
    mapping = doc["http"]["credentials"][0]
    if oauth is not None:
        mapping["oauth"] = oauth
    doc["http"]["token_hosts"] = ["https://auth.tracker.example"] if token_hosts is None else token_hosts
    doc["http"]["allow"].extend(allow_extra or [])
    return doc


def parse(doc: dict[str, Any]) -> PackageManifest:
    return PackageManifest.from_json(json.dumps(doc).encode())


def problems(doc: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(ManifestInvalid) as caught:
        parse(doc)
    return caught.value.details["problems"]  # type: ignore[no-any-return]


def test_oauth_mapping_accepted_and_parsed() -> None:
    parsed = parse(manifest(_oauth()))
    oauth = parsed.http.credentials[0].oauth
    assert oauth is not None and oauth.grant == "refresh_token" and oauth.scopes == ("issues:read",)
    assert parsed.http.token_hosts == ("https://auth.tracker.example",)


@pytest.mark.parametrize(
    ("oauth", "loc", "msg"),
    [
        (_oauth(token_url="http://auth.tracker.example/oauth/token"), "token_url", "must be https"),
        (_oauth(token_url="https://auth.tracker.example/t?client_secret=x"), "token_url", "query"),
        (_oauth(token_url="https://user@auth.tracker.example/t"), "token_url", "not a valid token URL"),
        (_oauth(scopes=["read write"]), "scopes.0", "scope token"),
        (_oauth(scopes=["a", "a"]), "scopes", ""),
        (_oauth(grant="password"), "grant", ""),
        (_oauth(client="Not-A-Name"), "client", "secret name"),
        ({**_oauth(), "client_secret": "inline"}, "client_secret", ""),
    ],
    ids=["plain-http", "query-credential", "userinfo", "scope-with-space", "duplicate-scope",
         "password-grant", "bad-client-name", "secret-in-manifest"],
)  # fmt: skip
def test_bad_oauth_declaration_refused(oauth: dict[str, Any], loc: str, msg: str) -> None:
    found = problems(manifest(oauth))
    assert any(p["loc"].startswith(f"http.credentials.0.oauth.{loc}") and msg in p["msg"] for p in found), found


def test_token_url_not_admitted_by_allow_or_token_hosts_refused() -> None:
    found = problems(manifest(_oauth(), token_hosts=[]))
    assert found == [{"loc": "http.credentials.0.oauth.token_url",
                      "msg": f"token_url {TOKEN_URL!r} is not admitted by an http.allow entry for POST "
                             "nor by http.token_hosts"}]  # fmt: skip


def test_token_url_admitted_by_an_allow_entry_for_post() -> None:
    entry = {"scheme": "https", "host": "auth.tracker.example", "port": None, "path_prefix": "/oauth",
             "methods": ["POST"]}  # fmt: skip
    parse(manifest(_oauth(), token_hosts=[], allow_extra=[entry]))
    get_only = {**entry, "methods": ["GET"]}
    assert problems(manifest(_oauth(), token_hosts=[], allow_extra=[get_only]))


def test_inspect_shows_the_oauth_mapping() -> None:
    report = {"http": _http_report(parse(manifest(_oauth())))}
    (row,) = _credential_rows(report)
    assert "oauth refresh_token refreshed by the host at " + TOKEN_URL in row[1]
    assert "scopes issues:read" in row[1] and "client secret tracker_client" in row[1]


def _escalations(old: dict[str, Any], new: dict[str, Any]) -> dict[str, bool]:
    return {c.kind: c.escalation for c in manifest_changes("tracker", parse(old), parse(new))}


@pytest.mark.parametrize(
    ("new", "kind"),
    [
        (_oauth(token_url="https://auth.tracker.example/other"), "credential.oauth_token_url"),
        (_oauth(scopes=["issues:read", "issues:write"]), "credential.oauth_scopes"),
        (_oauth(grant="client_credentials"), "credential.oauth_grant"),
        (_oauth(client="other_client"), "credential.oauth_client"),
    ],
    ids=["new-token-url", "wider-scope", "grant-change", "client-change"],
)
def test_diff_flags_oauth_widening_as_escalation(new: dict[str, Any], kind: str) -> None:
    assert _escalations(manifest(_oauth()), manifest(new)).get(kind) is True


def test_diff_static_secret_becoming_oauth_escalates_and_narrower_scope_does_not() -> None:
    assert _escalations(manifest(None), manifest(_oauth())).get("credential.oauth") is True
    wide = manifest(_oauth(scopes=["issues:read", "issues:write"]))
    assert _escalations(wide, manifest(_oauth())) == {}


def test_diff_flags_a_new_token_host() -> None:
    changes = _escalations(manifest(_oauth()), manifest(_oauth(), token_hosts=["https://auth.tracker.example",
                                                                               "https://other.example"]))  # fmt: skip
    assert changes == {"http.token_host": True}
