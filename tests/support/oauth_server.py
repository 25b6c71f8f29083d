"""A real OAuth 2.0 authorization server on loopback TLS, built from authlib's server components.

Not a stub: the protocol is authlib's ``AuthorizationServer`` with its grants —
authorization code with PKCE (RFC 7636, S256 required), refresh token with rotation
(the old refresh token is revoked when a new one is issued), client credentials, and the
device authorization grant (RFC 8628) — mounted on a :class:`LoopbackServer`. What this
module adds is the storage (dicts) and the HTTP glue. A protected resource ``/v1/me``
answers 200 to a live access token and 401 otherwise, so the host's 401 path is real.

Endpoints: ``/authorize`` (consent is automatic for user ``alice``), ``/token``,
``/device`` (device authorization), ``/device/verify?user_code=...`` (the user approves),
``/v1/me``. Counters: :attr:`OAuthServer.token_requests` by grant type.

Example::

    with OAuthServer(ca, expires_in=3600) as auth:
        auth.add_client("cid", "csecret-123456", redirect_uris=["http://127.0.0.1/cb"])
        state = auth.issue(client_id="cid")          # a token pair, as a login would leave
        auth.url("/token")                            # https://auth.example:PORT/token
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from authlib.common.security import generate_token
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    ClientMixin,
    OAuth2Payload,
    OAuth2Request,
    TokenMixin,
    grants,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint, DeviceCodeGrant, DeviceCredentialDict

from tests.support.servers import Exchange, LoopbackServer
from tests.support.tls import CertAuthority

__all__ = ["AUTH_HOST", "OAuthServer"]

AUTH_HOST = "auth.example"  # the name tests map to the loopback address (FakeResolver)


class _Client(ClientMixin):
    def __init__(self, client_id: str, secret: str | None, redirect_uris: list[str], scope: str) -> None:
        self.client_id, self.secret, self.redirect_uris, self.scope = client_id, secret, redirect_uris, scope

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if self.redirect_uris else None

    def get_allowed_scope(self, scope: str) -> str:
        allowed = set(self.scope.split())
        return " ".join(s for s in (scope or "").split() if s in allowed)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        # RFC 8252 §7.3: a loopback redirect may use any port.
        parts = urlsplit(redirect_uri)
        return any(
            (urlsplit(u).scheme, urlsplit(u).hostname, urlsplit(u).path) == (parts.scheme, parts.hostname, parts.path)
            for u in self.redirect_uris
        )

    def check_client_secret(self, client_secret: str) -> bool:
        return self.secret is not None and client_secret == self.secret

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == ("client_secret_post" if self.secret else "none") or (
            self.secret is not None and method == "client_secret_basic"
        )

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return True


class _Token(TokenMixin):
    def __init__(self, data: dict[str, Any], client_id: str, user: str | None) -> None:
        self.data, self.client_id, self.user = data, client_id, user
        self.issued_at = time.time()
        self.revoked = False

    def check_client(self, client: ClientMixin) -> bool:
        return bool(client.get_client_id() == self.client_id)

    def get_scope(self) -> str:
        return str(self.data.get("scope", ""))

    def get_expires_in(self) -> int:
        return int(self.data.get("expires_in", 0))

    def is_expired(self) -> bool:
        return time.time() > self.issued_at + self.get_expires_in()

    def is_revoked(self) -> bool:
        return self.revoked


class _Payload(OAuth2Payload):
    def __init__(self, values: dict[str, list[str]]) -> None:
        self._values = values

    @property
    def data(self) -> dict[str, str]:
        return {k: v[0] for k, v in self._values.items()}

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return defaultdict(list, self._values)


class _Request(OAuth2Request):
    def __init__(self, method: str, uri: str, headers: dict[str, str], form: dict[str, list[str]],
                 args: dict[str, list[str]]) -> None:  # fmt: skip
        super().__init__(method=method, uri=uri, headers=headers)
        self._form, self._args = form, args
        self.payload = _Payload({**args, **form})

    @property
    def args(self) -> dict[str, str]:
        return {k: v[0] for k, v in self._args.items()}

    @property
    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in self._form.items()}


class _Server(AuthorizationServer):  # type: ignore[misc]  # reason: authlib ships no types
    def __init__(self, owner: OAuthServer) -> None:
        super().__init__(scopes_supported=None)
        self.owner = owner
        self.register_token_generator("default", BearerTokenGenerator(
            access_token_generator=lambda *a, **k: "at-" + generate_token(32),
            refresh_token_generator=lambda *a, **k: "rt-" + generate_token(32),
            expires_generator=lambda *a, **k: owner.expires_in,
        ))  # fmt: skip

    def query_client(self, client_id: str) -> _Client | None:
        return self.owner.clients.get(client_id)

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        self.owner.save(token, request.client.get_client_id(), getattr(request, "user", None))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        return request  # type: ignore[no-any-return]  # reason: already an _Request

    def handle_response(self, status: int, body: Any, headers: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
        data = json.dumps(body).encode() if isinstance(body, dict) else (body or b"")
        return status, data if isinstance(data, bytes) else str(data).encode(), list(headers)


class _Code(dict[str, Any]):
    def get_redirect_uri(self) -> str:
        return str(self["redirect_uri"])

    def get_scope(self) -> str:
        return str(self.get("scope", ""))

    @property
    def code_challenge(self) -> str | None:
        return self.get("code_challenge")

    @property
    def code_challenge_method(self) -> str | None:
        return self.get("code_challenge_method")


def _grants(owner: OAuthServer) -> tuple[type, ...]:
    post = ("client_secret_basic", "client_secret_post", "none")

    class CodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]  # reason: untyped base
        TOKEN_ENDPOINT_AUTH_METHODS = post

        def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
            owner.codes[code] = _Code(
                client_id=request.client.get_client_id(), redirect_uri=request.payload.redirect_uri,
                scope=request.payload.scope, user="alice",
                code_challenge=request.payload.data.get("code_challenge"),
                code_challenge_method=request.payload.data.get("code_challenge_method"),
            )  # fmt: skip

        def query_authorization_code(self, code: str, client: ClientMixin) -> _Code | None:
            item = owner.codes.get(code)
            return item if item and item["client_id"] == client.get_client_id() else None

        def delete_authorization_code(self, authorization_code: _Code) -> None:
            owner.codes = {k: v for k, v in owner.codes.items() if v is not authorization_code}

        def authenticate_user(self, authorization_code: _Code) -> str:
            return str(authorization_code["user"])

    class RefreshGrant(grants.RefreshTokenGrant):  # type: ignore[misc]  # reason: untyped base
        TOKEN_ENDPOINT_AUTH_METHODS = post
        INCLUDE_NEW_REFRESH_TOKEN = True  # rotation

        def authenticate_refresh_token(self, refresh_token: str) -> _Token | None:
            token = owner.by_refresh.get(refresh_token)
            return token if token is not None and not token.revoked else None

        def authenticate_user(self, refresh_token: _Token) -> str:
            return refresh_token.user or "alice"

        def revoke_old_credential(self, refresh_token: _Token) -> None:
            refresh_token.revoked = True

    class ClientGrant(grants.ClientCredentialsGrant):  # type: ignore[misc]  # reason: untyped base
        TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_basic", "client_secret_post")

    class DeviceGrant(DeviceCodeGrant):  # type: ignore[misc]  # reason: untyped base
        TOKEN_ENDPOINT_AUTH_METHODS = post

        def query_device_credential(self, device_code: str) -> DeviceCredentialDict | None:
            return owner.devices.get(device_code)

        def query_user_grant(self, user_code: str) -> tuple[str, bool] | None:
            return ("alice", True) if user_code in owner.approved else None

        def should_slow_down(self, credential: Any) -> bool:
            return False

    return CodeGrant, RefreshGrant, ClientGrant, DeviceGrant


class OAuthServer:
    """The authorization server and a protected resource, on one loopback TLS listener.

    Args:
        ca: the test CA (the certificate names :data:`AUTH_HOST` and ``api.example``).
        expires_in: lifetime in seconds of every access token it issues.
    """

    def __init__(self, ca: CertAuthority, *, expires_in: int = 3600) -> None:
        self.expires_in = expires_in
        self.clients: dict[str, _Client] = {}
        self.codes: dict[str, _Code] = {}
        self.devices: dict[str, DeviceCredentialDict] = {}
        self.approved: set[str] = set()
        self.by_access: dict[str, _Token] = {}
        self.by_refresh: dict[str, _Token] = {}
        self.token_requests: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.delay_s = 0.0  # sleep before answering /token (widens races in tests)
        self.server = _Server(self)
        code, refresh, client, device = _grants(self)
        self.server.register_grant(code, [CodeChallenge(required=True)])
        self.server.register_grant(refresh)
        self.server.register_grant(client)
        self.server.register_grant(device)
        owner = self

        class Devices(DeviceAuthorizationEndpoint):  # type: ignore[misc]  # reason: untyped base
            def get_verification_uri(self) -> str:
                return owner.url("/device/verify")

            def save_device_credential(self, client_id: str, scope: str, data: dict[str, Any]) -> None:
                owner.devices[data["device_code"]] = DeviceCredentialDict(client_id=client_id, scope=scope, **data)

        self.server.register_endpoint(Devices)
        self.http = LoopbackServer(
            tls=ca.server_context([AUTH_HOST, "api.example", "127.0.0.1"]),
            routes={"/token": self._token, "/authorize": self._authorize, "/device": self._device,
                    "/device/verify": self._verify, "/v1/me": self._me},
        )  # fmt: skip

    # -- setup ----------------------------------------------------------------------------

    def add_client(self, client_id: str, secret: str | None, *, redirect_uris: list[str] = (),  # type: ignore[assignment]
                   scope: str = "read write") -> None:  # fmt: skip
        self.clients[client_id] = _Client(client_id, secret, list(redirect_uris), scope)

    def issue(self, *, client_id: str, scope: str = "read") -> dict[str, Any]:
        """A token pair for ``alice``, as a completed login would have left it."""
        data = {"token_type": "Bearer", "access_token": "at-" + generate_token(32),
                "refresh_token": "rt-" + generate_token(32), "expires_in": self.expires_in, "scope": scope}  # fmt: skip
        self.save(data, client_id, "alice")
        return data

    def save(self, data: dict[str, Any], client_id: str, user: str | None) -> None:
        token = _Token(dict(data), client_id, user)
        with self.lock:
            self.by_access[data["access_token"]] = token
            if data.get("refresh_token"):
                self.by_refresh[data["refresh_token"]] = token

    def url(self, path: str) -> str:
        return f"https://{AUTH_HOST}:{self.http.port}{path}"

    def __enter__(self) -> OAuthServer:
        self.http.__enter__()
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.http.__exit__(t, e, tb)

    # -- HTTP glue -------------------------------------------------------------------------

    def _request(self, ex: Exchange) -> _Request:
        r = ex.request
        form = parse_qs(r.body.decode("ascii", "replace"), keep_blank_values=True) if r.body else {}
        args = parse_qs(r.query, keep_blank_values=True)
        return _Request(r.method, self.url(r.target), dict(r.headers), form, args)

    def _send(self, ex: Exchange, answer: tuple[int, bytes, list[tuple[str, str]]]) -> None:
        status, body, headers = answer
        ex.respond(status, body, headers)

    def _token(self, ex: Exchange) -> None:
        request = self._request(ex)
        with self.lock:
            self.token_requests[request.form.get("grant_type", "?")] += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        self._send(ex, self.server.create_token_response(request))

    def _authorize(self, ex: Exchange) -> None:
        request = self._request(ex)
        grant = self.server.get_consent_grant(request=request, end_user="alice")  # consent is automatic
        self._send(ex, self.server.create_authorization_response(request, grant_user="alice", grant=grant))

    def _device(self, ex: Exchange) -> None:
        self._send(ex, self.server.create_endpoint_response("device_authorization", self._request(ex)))

    def _verify(self, ex: Exchange) -> None:
        code = parse_qs(ex.request.query).get("user_code", [""])[0]
        self.approved.add(code)
        ex.respond(200, b"approved", [("Content-Type", "text/plain")])

    def _me(self, ex: Exchange) -> None:
        auth = ex.request.header("authorization") or ""
        token = self.by_access.get(auth.removeprefix("Bearer "))
        if token is None or token.is_expired() or not auth.startswith("Bearer "):
            ex.respond(401, b'{"error":"invalid_token"}', [("WWW-Authenticate", 'Bearer error="invalid_token"'),
                                                           ("Content-Type", "application/json")])  # fmt: skip
            return
        ex.respond(200, json.dumps({"user": token.user, "echo": auth}).encode(), [("Content-Type", "application/json")])
