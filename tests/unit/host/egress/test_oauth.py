"""OAuth-refreshed credentials against a real authorization server (authlib) on loopback TLS.

Every token request goes through the host's egress (policy, DNS vetting, pinning, TLS with
the test CA, bounded decoding); the server is authlib's ``AuthorizationServer`` with its
refresh-token (rotating), client-credentials, PKCE and device grants.
"""

from __future__ import annotations

import base64
import gzip
import json
import secrets as _random
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from host.egress.oauth import ClientSecret, OAuthBroker, OAuthStage, TokenEndpoint, TokenState, token_policy
from host.egress.policy import EgressPolicy
from host.egress.session import EgressSession
from host.errors import CredentialUnavailable
from host.formats.manifest import HttpConfig
from host.secrets.store import MasterKey, SecretsStore
from sdk.oauthlogin import LoginFailed, LoginSpec, login_with_device, login_with_pkce
from tests.support.egress_session import FakeResolver, allow, get, http_config
from tests.support.oauth_server import AUTH_HOST, OAuthServer
from tests.support.tls import CertAuthority

CLIENT_ID, CLIENT_SECRET = "stockade-test", "cs-" + "s3cr3t" * 4
P, S = "proj", "alice"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    return CertAuthority.create(tmp_path_factory.mktemp("oauth-ca"))


@pytest.fixture
def auth(ca: CertAuthority) -> Iterator[OAuthServer]:
    with OAuthServer(ca, expires_in=3600) as server:
        server.add_client(CLIENT_ID, CLIENT_SECRET, redirect_uris=["http://127.0.0.1/callback"])
        yield server


@pytest.fixture
def resolver() -> FakeResolver:
    return FakeResolver({AUTH_HOST: ["127.0.0.1"], "api.example": ["127.0.0.1"]})


@pytest.fixture
def key_bytes() -> bytes:
    return _random.token_bytes(32)


@pytest.fixture
def store(tmp_path: Path, key_bytes: bytes) -> SecretsStore:
    store = SecretsStore(tmp_path / "secrets.json", MasterKey.from_bytes(key_bytes))
    store.set(P, S, "api_client", json.dumps({"client_id": CLIENT_ID, "client_secret": CLIENT_SECRET}))
    return store


class Audit:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()

    def __call__(self, kind: str, payload: Any) -> str:
        with self._lock:
            self.records.append((kind, dict(payload)))
        return str(len(self.records))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.records]


def http(auth: OAuthServer, *, grant: str = "refresh_token", token_path: str = "/token") -> HttpConfig:
    port = auth.http.port
    mapping = {
        "secret": "api_token", "location": {"type": "bearer"}, "hosts": [f"https://api.example:{port}"],
        "path_prefixes": ["/v1"], "optional": False,
        "oauth": {"grant": grant, "token_url": auth.url(token_path), "scopes": ["read"], "client": "api_client"},
    }  # fmt: skip
    config = http_config([allow("api.example", port, scheme="https", methods=["GET"])], [mapping])
    return config.model_copy(update={"token_hosts": (f"https://{AUTH_HOST}:{port}",)})


def broker(store: SecretsStore, resolver: FakeResolver, ca: CertAuthority, audit: Audit,
           *, clock: Any = time.time) -> OAuthBroker:  # fmt: skip
    endpoint = TokenEndpoint(resolver=resolver, ca_file=ca.ca_file, allow_loopback=True)
    return OAuthBroker(store, endpoint=endpoint, audit=audit, clock=clock)


def login(store: SecretsStore, auth: OAuthServer, *, expired: bool = False) -> dict[str, Any]:
    """What `stockade secrets oauth-login` leaves in the store."""
    pair = auth.issue(client_id=CLIENT_ID)
    expires_at = int(time.time()) + (-10 if expired else 3600)
    state = TokenState(access_token=pair["access_token"], refresh_token=pair["refresh_token"], expires_at=expires_at)
    store.set(P, S, "api_token", state.to_secret())
    return pair


def stage(b: OAuthBroker, store: SecretsStore, config: HttpConfig) -> OAuthStage:
    raw = store.stage(P, S, [c.secret for c in config.credentials])
    return OAuthStage(b, project=P, subject=S, mappings=config.credentials,
                      policy=token_policy(config.allow, config.token_hosts), staged=raw)  # fmt: skip


def session(config: HttpConfig, oauth: OAuthStage, resolver: FakeResolver, ca: CertAuthority) -> EgressSession:
    return EgressSession(
        config, EgressPolicy.from_allow(config.allow), package="api", credentials=config.credentials,
        staged=oauth.staged, max_requests=8, deadline=time.monotonic() + 20, resolver=resolver,
        ca_file=ca.ca_file, allow_loopback=True, redactor=oauth.redactor(),
        reauth=oauth.reauth, reauth_secrets=oauth.names,
    )  # fmt: skip


def stored(store: SecretsStore) -> TokenState:
    value = store.get(P, S, "api_token")
    assert value is not None
    return TokenState.from_secret(value)


# --- expiry ----------------------------------------------------------------------------------


def test_fresh_token_is_injected_without_a_refresh(store, auth, resolver, ca) -> None:
    pair = login(store, auth)
    audit = Audit()
    oauth = stage(broker(store, resolver, ca, audit), store, http(auth))
    assert oauth.staged["api_token"].reveal() == pair["access_token"]
    assert auth.token_requests == {} and oauth.refreshed == [] and audit.records == []


def test_expiry_driven_refresh_rotates_and_writes_back(store, auth, resolver, ca) -> None:
    old = login(store, auth, expired=True)
    audit = Audit()
    config = http(auth)
    oauth = stage(broker(store, resolver, ca, audit), store, config)
    state = stored(store)
    assert auth.token_requests["refresh_token"] == 1 and oauth.refreshed == ["api_token"]
    assert state.access_token == oauth.staged["api_token"].reveal() != old["access_token"]
    assert state.refresh_token not in (None, old["refresh_token"])  # rotated, written back
    assert state.expires_at is not None and state.expires_at > time.time() + 3000
    assert auth.by_refresh[old["refresh_token"]].revoked  # the server revoked the old one
    kind, record = audit.records[-1]
    assert kind == "credential.refreshed" and record["rotated"] is True and record["secret"] == "api_token"
    with session(config, oauth, resolver, ca) as s:
        answer = s.send(get(f"https://api.example:{auth.http.port}/v1/me"))
    assert answer.status == 200 and json.loads(answer.body)["user"] == "alice"


def test_token_within_the_skew_is_refreshed_early(store, auth, resolver, ca) -> None:
    login(store, auth)  # expires in 3600 s
    late = lambda: time.time() + 3600 - 30  # noqa: E731  # 30 s before expiry, inside the 60 s skew
    stage(broker(store, resolver, ca, Audit(), clock=late), store, http(auth))
    assert auth.token_requests["refresh_token"] == 1


def test_client_credentials_needs_no_login(store, auth, resolver, ca) -> None:
    audit = Audit()
    oauth = stage(broker(store, resolver, ca, audit), store, http(auth, grant="client_credentials"))
    assert auth.token_requests["client_credentials"] == 1
    assert stored(store).access_token == oauth.staged["api_token"].reveal()


# --- 401 ---------------------------------------------------------------------------------------


def test_401_refreshes_once_and_retries_once(store, auth, resolver, ca) -> None:
    pair = login(store, auth)
    auth.by_access.pop(pair["access_token"])  # the server forgot it: the API answers 401
    config = http(auth)
    oauth = stage(broker(store, resolver, ca, Audit()), store, config)
    with session(config, oauth, resolver, ca) as s:
        answer = s.send(get(f"https://api.example:{auth.http.port}/v1/me"))
        outcomes = [r.outcome for r in s.usage.requests]
    assert answer.status == 200
    assert outcomes == ["unauthorized:refresh", "ok"]
    assert auth.token_requests["refresh_token"] == 1
    sent = [r.header("authorization") for r in auth.http.requests if r.path == "/v1/me"]
    assert sent[0] == f"Bearer {pair['access_token']}" and sent[1] != sent[0]
    # The API reflected the new token (its echo): redacted by the widened redactor.
    assert stored(store).access_token.encode() not in answer.body and b"[REDACTED]" in answer.body


def test_401_after_refresh_is_returned_not_retried_again(store, auth, resolver, ca) -> None:
    login(store, auth)
    auth.http.route("/v1/me", lambda ex: ex.respond(401, b"no"))  # always 401
    config = http(auth)
    oauth = stage(broker(store, resolver, ca, Audit()), store, config)
    with session(config, oauth, resolver, ca) as s:
        answer = s.send(get(f"https://api.example:{auth.http.port}/v1/me"))
    assert answer.status == 401
    assert auth.token_requests["refresh_token"] == 1
    assert len([r for r in auth.http.requests if r.path == "/v1/me"]) == 2


def test_401_with_a_revoked_grant_is_credential_unavailable_to_the_guest(store, auth, resolver, ca) -> None:
    pair = login(store, auth)
    auth.by_access.pop(pair["access_token"])
    auth.by_refresh[pair["refresh_token"]].revoked = True
    config, audit = http(auth), Audit()
    oauth = stage(broker(store, resolver, ca, audit), store, config)
    with session(config, oauth, resolver, ca) as s:
        answer = s.send(get(f"https://api.example:{auth.http.port}/v1/me"))
    assert (getattr(answer, "kind", None), getattr(answer, "detail", None)) == ("credential-unavailable", "api_token")
    assert audit.records[-1][1]["reason"] == "oauth_refresh_failed"
    assert len([r for r in auth.http.requests if r.path == "/v1/me"]) == 1  # nothing sent without a token


# --- fail closed -------------------------------------------------------------------------------


def test_invalid_grant_is_credential_unavailable_oauth_refresh_failed(store, auth, resolver, ca) -> None:
    pair = login(store, auth, expired=True)
    auth.by_refresh[pair["refresh_token"]].revoked = True  # the user revoked the grant
    audit = Audit()
    with pytest.raises(CredentialUnavailable) as caught:
        stage(broker(store, resolver, ca, audit), store, http(auth))
    assert caught.value.details["reason"] == "oauth_refresh_failed"
    assert "stockade secrets oauth-login api_token --project proj --subject alice" in caught.value.hint
    assert audit.records[-1] == ("credential.refresh_failed", {
        "secret": "api_token", "project": P, "subject": S, "grant": "refresh_token",
        "reason": "oauth_refresh_failed", "error": "invalid_grant"})  # fmt: skip
    assert stored(store).refresh_token == pair["refresh_token"]  # state unchanged


def test_no_token_and_no_login_is_oauth_expired(store, auth, resolver, ca) -> None:
    with pytest.raises(CredentialUnavailable) as caught:
        stage(broker(store, resolver, ca, Audit()), store, http(auth))
    assert caught.value.details["reason"] == "oauth_expired"
    assert auth.token_requests == {}


def test_unreachable_token_endpoint_is_oauth_unreachable(store, auth, resolver, ca) -> None:
    login(store, auth, expired=True)
    gone = FakeResolver({})  # NXDOMAIN for the token host
    with pytest.raises(CredentialUnavailable) as caught:
        stage(broker(store, gone, ca, Audit()), store, http(auth))
    assert caught.value.details["reason"] == "oauth_unreachable"


# --- single flight -----------------------------------------------------------------------------


def test_eight_threads_on_an_expired_token_refresh_exactly_once(store, auth, resolver, ca) -> None:
    login(store, auth, expired=True)
    auth.delay_s = 0.2  # the first refresh is still in flight when the others arrive
    b, config, got = broker(store, resolver, ca, Audit()), http(auth), []
    barrier = threading.Barrier(8)

    def one() -> None:
        barrier.wait()
        got.append(stage(b, store, config).staged["api_token"].reveal())

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert auth.token_requests["refresh_token"] == 1 and b.refreshes == 1
    assert len(got) == 8 and len(set(got)) == 1


_WORKER = textwrap.dedent("""
    import base64, sys, time
    from pathlib import Path
    from host.egress.oauth import OAuthBroker, OAuthStage, TokenEndpoint, token_policy
    from host.formats.manifest import HttpConfig
    from host.secrets.store import MasterKey, SecretsStore
    from tests.support.egress_session import FakeResolver
    path, key, ca_file, config_json, go = sys.argv[1:6]
    store = SecretsStore(Path(path), MasterKey.from_bytes(base64.b64decode(key)))
    config = HttpConfig.model_validate_json(config_json)
    resolver = FakeResolver({"auth.example": ["127.0.0.1"]})
    b = OAuthBroker(store, endpoint=TokenEndpoint(resolver=resolver, ca_file=Path(ca_file), allow_loopback=True))
    print("ready", flush=True)
    while not Path(go).exists():
        time.sleep(0.005)
    raw = store.stage("proj", "alice", ["api_token"])
    OAuthStage(b, project="proj", subject="alice", mappings=config.credentials,
               policy=token_policy(config.allow, config.token_hosts), staged=raw)
    print(b.refreshes)
""")


def test_two_processes_on_one_store_refresh_exactly_once(store, auth, ca, key_bytes, tmp_path) -> None:
    login(store, auth, expired=True)
    auth.delay_s = 0.3
    go = tmp_path / "go"
    argv = [sys.executable, "-c", _WORKER, str(store.path), base64.b64encode(key_bytes).decode(),
            str(ca.ca_file), http(auth).model_dump_json(), str(go)]  # fmt: skip
    root = Path(__file__).resolve().parents[4]
    workers = [subprocess.Popen(argv, cwd=root, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    for w in workers:
        assert w.stdout is not None and w.stdout.readline().strip() == "ready"  # imported, waiting
    go.touch()
    counts = [int(w.communicate(timeout=60)[0].strip()) for w in workers]
    assert sorted(counts) == [0, 1]
    assert auth.token_requests["refresh_token"] == 1


# --- the token endpoint is untrusted: the host's egress rules apply to it ----------------------


def test_token_endpoint_redirecting_to_a_private_address_is_refused(store, auth, ca) -> None:
    login(store, auth, expired=True)
    port = auth.http.port
    auth.http.route("/token", lambda ex: ex.respond(307, b"", [("Location", f"https://metadata.example:{port}/t")]))
    resolver = FakeResolver({AUTH_HOST: ["127.0.0.1"], "metadata.example": ["169.254.169.254"]})
    config = http(auth)
    config = config.model_copy(update={"token_hosts": (*config.token_hosts, f"https://metadata.example:{port}")})
    with pytest.raises(CredentialUnavailable) as caught:
        stage(broker(store, resolver, ca, Audit()), store, config)
    assert caught.value.details["reason"] == "oauth_unreachable"
    assert "blocked_address" in caught.value.message
    assert [r.path for r in auth.http.requests] == ["/token"]  # nothing followed the redirect
    assert stored(store).refresh_token is not None  # state unchanged


def test_token_endpoint_gzip_bomb_is_bounded(store, auth, resolver, ca) -> None:
    login(store, auth, expired=True)
    bomb = gzip.compress(b'{"access_token":"' + b"A" * (8 << 20) + b'"}', compresslevel=9)  # 8 MiB inflated
    auth.http.route("/token", lambda ex: ex.respond(
        200, bomb, [("Content-Type", "application/json"), ("Content-Encoding", "gzip")]))  # fmt: skip
    started = time.monotonic()
    with pytest.raises(CredentialUnavailable) as caught:
        stage(broker(store, resolver, ca, Audit()), store, http(auth))
    assert caught.value.details["reason"] == "oauth_unreachable"
    assert "too-large" in caught.value.message
    assert time.monotonic() - started < 5  # stopped at the bound, not after inflating 8 MiB


def test_token_url_outside_allow_and_token_hosts_is_refused_by_egress(store, auth, resolver, ca) -> None:
    login(store, auth, expired=True)
    config = http(auth).model_copy(update={"token_hosts": ()})  # the manifest edge would refuse it too
    with pytest.raises(CredentialUnavailable) as caught:
        stage(broker(store, resolver, ca, Audit()), store, config)
    assert caught.value.details["reason"] == "oauth_unreachable"
    assert auth.http.requests == []


def test_guest_cannot_reach_the_token_host_through_token_hosts(store, auth, resolver, ca) -> None:
    """``token_hosts`` admits the HOST's token requests only: a guest request there is denied."""
    login(store, auth)
    config = http(auth)
    oauth = stage(broker(store, resolver, ca, Audit()), store, config)
    with session(config, oauth, resolver, ca) as s:
        answer = s.send(get(auth.url("/token")))
    assert getattr(answer, "kind", None) == "denied"
    assert [r for r in auth.http.requests if r.path == "/token"] == []


# --- getting the first token: stockade secrets oauth-login ----------------------------------


def _browser(ca: CertAuthority, port: int) -> Any:
    """A 'browser': an HTTP client that follows the authorization URL and its redirect."""
    context = ssl.create_default_context(cafile=str(ca.ca_file))

    def open_url(url: str) -> None:
        direct = url.replace(f"https://{AUTH_HOST}:{port}", f"https://127.0.0.1:{port}")
        with httpx2.Client(verify=context) as client:
            answer = client.get(direct)
            assert answer.status_code == 302, answer.text
            back = httpx2.get(answer.headers["location"])  # the loopback redirect (RFC 8252)
            assert back.status_code == 200

    return open_url


def _spec(auth: OAuthServer) -> Any:
    return LoginSpec(token_url=auth.url("/token"), scopes=("read",), authorize_url=auth.url("/authorize"),
                     device_url=auth.url("/device"))  # fmt: skip


def _client() -> Any:
    return ClientSecret(client_id=CLIENT_ID, client_secret=CLIENT_SECRET)


def test_oauth_login_pkce_flow_with_loopback_redirect(store, auth, resolver, ca) -> None:
    endpoint = TokenEndpoint(resolver=resolver, ca_file=ca.ca_file, allow_loopback=True)
    state = login_with_pkce(_spec(auth), _client(), endpoint=endpoint, open_url=_browser(ca, auth.http.port),
                            timeout_s=10)  # fmt: skip
    assert auth.token_requests["authorization_code"] == 1
    assert state.access_token in auth.by_access and state.refresh_token in auth.by_refresh
    authorize = next(r for r in auth.http.requests if r.path == "/authorize")
    assert "code_challenge_method=S256" in authorize.query and "state=" in authorize.query
    exchange = next(r for r in auth.http.requests if r.path == "/token")
    assert b"code_verifier=" in exchange.body  # PKCE: the verifier proves the same client
    store.set(P, S, "api_token", state.to_secret())
    oauth = stage(broker(store, resolver, ca, Audit()), store, http(auth))  # the host uses it as is
    assert oauth.staged["api_token"].reveal() == state.access_token and oauth.refreshed == []


def test_oauth_login_redirect_with_another_state_is_refused(store, auth, resolver, ca) -> None:
    """A forged redirect (CSRF: another state) never reaches the token endpoint."""
    def forged(url: str) -> None:
        redirect = parse_qs(urlsplit(url).query)["redirect_uri"][0]
        httpx2.get(f"{redirect}?code=stolen-code-123&state=not-the-state")

    endpoint = TokenEndpoint(resolver=resolver, ca_file=ca.ca_file, allow_loopback=True)
    with pytest.raises(LoginFailed, match="mismatching_state"):
        login_with_pkce(_spec(auth), _client(), endpoint=endpoint, open_url=forged, timeout_s=10)
    assert auth.token_requests == {}


def test_oauth_login_device_flow(store, auth, resolver, ca) -> None:
    shown: list[tuple[str, str]] = []
    polls: list[float] = []

    def approve_on_second_poll(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 1:  # the user approves while the device polls (authorization_pending first)
            url = shown[0][0].replace(f"https://{AUTH_HOST}:", "https://127.0.0.1:")
            assert httpx2.get(url, verify=ssl_context(ca)).status_code == 200

    endpoint = TokenEndpoint(resolver=resolver, ca_file=ca.ca_file, allow_loopback=True)
    state = login_with_device(_spec(auth), _client(), endpoint=endpoint,
                              show=lambda url, code: shown.append((url, code)), sleep=approve_on_second_poll)  # fmt: skip
    assert auth.token_requests["urn:ietf:params:oauth:grant-type:device_code"] == 2  # pending, then granted
    assert state.access_token in auth.by_access and shown[0][1] in shown[0][0]


def ssl_context(ca: CertAuthority) -> Any:
    return ssl.create_default_context(cafile=str(ca.ca_file))
