"""An OAuth-refreshed credential end to end: the echo_py plugin's ``echo.fetch`` calls a
protected API through the Host; the host refreshes the expired token at a real authlib
authorization server (loopback TLS), injects it, and no form of any token reaches the
guest's output, its logs, the call result or the audit log.
"""

from __future__ import annotations

import base64
import json
import secrets as _random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from host import HostConfig
from host.egress.oauth import TokenState
from host.secrets.store import MasterKey, SecretsStore
from tests.support.egress_session import FakeResolver
from tests.support.hosts import HostFixture, make_host
from tests.support.oauth_server import AUTH_HOST, OAuthServer
from tests.support.plugins import SHARED_ARTIFACTS_DIR, build_test_plugin
from tests.support.tls import CertAuthority

pytestmark = [pytest.mark.slow]

CLIENT_ID, CLIENT_SECRET = "stockade-e2e", "cs-e2e-" + "k3y" * 6


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[HostFixture, OAuthServer, SecretsStore]]:
    ca = CertAuthority.create(tmp_path / "ca")
    build = build_test_plugin("echo_py")
    manifest = json.loads(build.manifest_path.read_bytes())
    fetch = next(t for t in manifest["tools"] if t["name"] == "echo.fetch")
    with OAuthServer(ca, expires_in=3600) as auth:
        auth.add_client(CLIENT_ID, CLIENT_SECRET)
        port = auth.http.port
        http = {
            "allow": [{"scheme": "https", "host": "api.example", "port": port, "path_prefix": "/v1",
                       "methods": ["GET"]}],
            "credentials": [{
                "secret": "api_token", "location": {"type": "bearer"},
                "hosts": [f"https://api.example:{port}"], "path_prefixes": ["/v1"], "optional": False,
                "oauth": {"grant": "refresh_token", "token_url": auth.url("/token"), "scopes": ["read"],
                          "client": "api_client"},
            }],
            "token_hosts": [f"https://{AUTH_HOST}:{port}"],
            "max_request_bytes": 1024, "max_response_bytes": 65536, "timeout_ms": 5000,
        }  # fmt: skip
        store = SecretsStore(tmp_path / "secrets.json", MasterKey.from_bytes(_random.token_bytes(32)))
        store.set("p", "alice", "api_client", json.dumps({"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}))
        fx = make_host(
            tmp_path, tools=[fetch], module=build.module_path.read_bytes(), allow=("tool.call:echo.fetch",),
            manifest_overrides={"http": http, "limits": manifest["limits"]}, secrets=store,
            config=HostConfig(state_dir=tmp_path / "state", unsafe_allow_loopback=True, extra_ca_file=ca.ca_file,
                              artifact_cache_dir=SHARED_ARTIFACTS_DIR),  # compiled once per session
            resolver=FakeResolver({AUTH_HOST: ["127.0.0.1"], "api.example": ["127.0.0.1"]}),
        )  # fmt: skip
        with fx.host:
            yield fx, auth, store


def _forms(value: str) -> list[str]:
    raw = value.encode()
    return [value, quote(value, safe=""), base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()]


def test_expired_token_refreshed_injected_and_never_visible(world: Any) -> None:
    fx, auth, store = world
    pair = auth.issue(client_id=CLIENT_ID)
    expired = TokenState(access_token=pair["access_token"], refresh_token=pair["refresh_token"],
                         expires_at=int(time.time()) - 5)  # fmt: skip
    store.set("p", "alice", "api_token", expired.to_secret())
    result = fx.host.call(fx.request("echo.fetch", {"url": f"https://api.example:{auth.http.port}/v1/me"}))
    assert result.ok, result.error
    assert result.output["status"] == 200 and json.loads(result.output["body"])["user"] == "alice"
    assert "[REDACTED]" in result.output["body"]  # the API echoed the header: scrubbed
    assert auth.token_requests["refresh_token"] == 1
    fresh = TokenState.from_secret(store.get("p", "alice", "api_token"))  # type: ignore[arg-type]
    audit = fx.audit_path.read_text()
    records = [json.loads(line) for line in audit.splitlines()]
    refreshed = [r for r in records if r["kind"] == "credential.refreshed"]
    assert len(refreshed) == 1 and refreshed[0]["secret"] == "api_token" and refreshed[0]["rotated"] is True
    outcome = next(r for r in records if r["kind"] == "call.outcome")
    assert outcome["outcome"]["credentials"] == {"injected": ["api_token"], "refreshed": ["api_token"]}
    visible = json.dumps(result.output) + result.log + repr(result) + audit
    for value in (pair["access_token"], pair["refresh_token"], fresh.access_token or "", fresh.refresh_token or "",
                  CLIENT_SECRET):  # fmt: skip
        for form in _forms(value):
            assert form not in visible, "a token form leaked"


def test_revoked_grant_fails_closed_before_the_guest_starts(world: Any) -> None:
    fx, auth, store = world
    pair = auth.issue(client_id=CLIENT_ID)
    auth.by_refresh[pair["refresh_token"]].revoked = True
    state = TokenState(access_token=pair["access_token"], refresh_token=pair["refresh_token"],
                       expires_at=int(time.time()) - 5)  # fmt: skip
    store.set("p", "alice", "api_token", state.to_secret())
    result = fx.host.call(fx.request("echo.fetch", {"url": f"https://api.example:{auth.http.port}/v1/me"}))
    assert result.error is not None and result.error.code == "CREDENTIAL_UNAVAILABLE"
    assert result.error.details["reason"] == "oauth_refresh_failed"
    assert "oauth-login api_token" in (result.error.hint or "")
    assert [r.path for r in auth.http.requests] == ["/token"]  # the API never saw a request
