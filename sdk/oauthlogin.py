"""Getting the first OAuth token: ``stockade secrets oauth-login`` (authorization code + PKCE, or device).

- **Authorization code with PKCE** (RFC 6749 §4.1, RFC 7636 S256) and a **loopback
  redirect** (RFC 8252 §7.3): a one-shot HTTP listener on ``127.0.0.1`` and an ephemeral
  port receives the redirect; ``state`` is checked (a mismatch is refused, never retried);
  the code is exchanged with the verifier.
- **Device authorization** (RFC 8628): the user opens the verification URL on any device;
  this side polls the token endpoint at the server's interval (``slow_down`` adds 5 s)
  until it answers, the user refuses (``access_denied``) or the code expires.

The protocol pieces are authlib's (``prepare_grant_uri``, ``create_s256_code_challenge``,
``parse_authorization_code_response``, ``prepare_token_request``, ``generate_token``):
maintained, RFC-checked code rather than ours. Every request to the authorization server
goes through the host's egress (:class:`host.egress.oauth.TokenEndpoint`: DNS vetting,
pinning, redirect re-checks, bounded decoding). The result is written to the secrets store
as a ``stockade.oauth-token/1`` document under the mapping's secret name; nothing is printed
but the URL to open (and the user code).

Example::

    state = login_with_pkce(spec, client, endpoint=TokenEndpoint(resolver=system_resolver),
                            open_url=webbrowser.open)
    store.set(project, subject, name, state.to_secret())
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from authlib.common.security import generate_token
from authlib.common.urls import url_encode
from authlib.oauth2.rfc6749.errors import OAuth2Error
from authlib.oauth2.rfc6749.parameters import (
    parse_authorization_code_response,
    prepare_grant_uri,
    prepare_token_request,
)
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from host.egress.oauth import ClientSecret, TokenEndpoint, TokenRefused, TokenState, token_policy
from host.egress.policy import EgressPolicy
from host.egress.urls import normalize_url

__all__ = ["LoginFailed", "LoginSpec", "login_with_device", "login_with_pkce"]

DEVICE_GRANT: Final = "urn:ietf:params:oauth:grant-type:device_code"
CALLBACK_PATH: Final = "/callback"
LOGIN_TIMEOUT_S: Final = 300.0  # seconds the loopback listener waits for the browser


class LoginFailed(Exception):
    """The login did not produce a token (the message says why; it holds no secret)."""


@dataclass(frozen=True, slots=True)
class LoginSpec:
    """Where to log in: from the manifest's ``oauth`` of the mapping, or from flags."""

    token_url: str
    scopes: Sequence[str]
    authorize_url: str | None = None
    device_url: str | None = None

    def policy(self) -> EgressPolicy:
        """POST to the token (and device) endpoint's origin only."""
        origins = []
        for url in (self.token_url, self.device_url):
            if url:
                target = normalize_url(url)
                origins.append(f"{target.scheme}://{target.host}:{target.port}")
        return token_policy([], origins)


def _client_params(client: ClientSecret) -> dict[str, str]:
    params = {"client_id": client.client_id}
    if client.client_secret:
        params["client_secret"] = client.client_secret  # client_secret_post (RFC 6749 §2.3.1)
    return params


def _state(answer: dict[str, Any]) -> TokenState:
    access, refresh, expires_in = (
        answer.get("access_token"),
        answer.get("refresh_token"),
        answer.get("expires_in"),
    )
    if not isinstance(access, str) or (refresh is not None and not isinstance(refresh, str)):
        raise LoginFailed("the token endpoint's answer has no usable access_token")
    expires_at = (
        int(time.time()) + expires_in
        if isinstance(expires_in, int) and not isinstance(expires_in, bool)
        else None
    )
    scope = answer.get("scope")
    return TokenState(access_token=access, refresh_token=refresh, expires_at=expires_at,
                      scope=scope if isinstance(scope, str) else None)  # fmt: skip


class _Callback(http.server.BaseHTTPRequestHandler):
    server: _Listener

    def do_GET(self) -> None:  # reason: the http.server hook name
        if self.path.split("?", 1)[0] != CALLBACK_PATH or self.server.received is not None:
            self.send_error(404)
            return
        self.server.received = f"http://127.0.0.1:{self.server.server_address[1]}{self.path}"
        body = b"Stockade received the authorization. You can close this window.\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.server.done.set()

    def log_message(self, format: str, *args: Any) -> None:
        return None  # the query holds the code: never logged


class _Listener(http.server.HTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Callback)
        self.received: str | None = None
        self.done = threading.Event()


def login_with_pkce(
    spec: LoginSpec,
    client: ClientSecret,
    *,
    endpoint: TokenEndpoint,
    open_url: Callable[[str], object],
    timeout_s: float = LOGIN_TIMEOUT_S,
) -> TokenState:
    """Authorization code + PKCE with a loopback redirect; returns the token state.

    Args:
        spec: the declaration (``authorize_url`` required).
        client: the client id and secret.
        endpoint: how the code is exchanged (the host's egress).
        open_url: opens the authorization URL (a browser, or printing it).
        timeout_s: how long to wait for the redirect.

    Raises:
        LoginFailed: no authorize URL, a state mismatch, an error redirect, no redirect in
            time, or a refused exchange.
    """
    if not spec.authorize_url:
        raise LoginFailed(
            "the mapping declares no oauth.authorize_url (use --device, or pass --authorize-url)"
        )
    verifier = generate_token(64)  # RFC 7636 §4.1: 43-128 unreserved characters
    state = generate_token(32)
    listener = _Listener()
    redirect_uri = f"http://127.0.0.1:{listener.server_address[1]}{CALLBACK_PATH}"
    thread = threading.Thread(target=listener.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        url = prepare_grant_uri(
            spec.authorize_url, client.client_id, "code", redirect_uri=redirect_uri,
            scope=" ".join(spec.scopes) or None, state=state,
            code_challenge=create_s256_code_challenge(verifier), code_challenge_method="S256",
        )  # fmt: skip
        open_url(url)
        if not listener.done.wait(timeout_s) or listener.received is None:
            raise LoginFailed(f"no redirect reached {redirect_uri} within {timeout_s:g} s")
        try:
            params = parse_authorization_code_response(listener.received, state=state)
        except OAuth2Error as exc:
            raise LoginFailed(f"the authorization failed: {exc.error}") from None
        except Exception as exc:  # authlib raises its own exception types for a bad state or code
            raise LoginFailed(f"the authorization redirect was refused: {type(exc).__name__}") from None
    finally:
        listener.shutdown()
        listener.server_close()
    form = prepare_token_request(
        "authorization_code", body="", code=params["code"], redirect_uri=redirect_uri,
        code_verifier=verifier, **_client_params(client),
    )  # fmt: skip
    try:
        return _state(endpoint.post(spec.policy(), spec.token_url, form))
    except TokenRefused as exc:
        raise LoginFailed(f"the code exchange failed: {exc.detail}") from None


def login_with_device(
    spec: LoginSpec,
    client: ClientSecret,
    *,
    endpoint: TokenEndpoint,
    show: Callable[[str, str], object],
    sleep: Callable[[float], object] = time.sleep,
) -> TokenState:
    """The device authorization grant (RFC 8628); returns the token state.

    Args:
        spec: the declaration (``device_url`` required).
        client: the client id and secret.
        endpoint: how requests are sent (the host's egress).
        show: receives the verification URL and the user code, for the user.
        sleep: waits between polls (injectable in tests).

    Raises:
        LoginFailed: no device URL, a refused request, ``access_denied`` or ``expired_token``.
    """
    if not spec.device_url:
        raise LoginFailed("the mapping declares no oauth.device_url (pass --device-url)")
    params = _client_params(client)
    scope = " ".join(spec.scopes)
    form = url_encode([*params.items(), *([("scope", scope)] if scope else [])])
    try:
        device = endpoint.post(spec.policy(), spec.device_url, form)
    except TokenRefused as exc:
        raise LoginFailed(f"the device authorization failed: {exc.detail}") from None
    code, user_code = device.get("device_code"), device.get("user_code")
    if not isinstance(code, str) or not isinstance(user_code, str):
        raise LoginFailed("the device authorization answer has no device_code or user_code")
    show(str(device.get("verification_uri_complete") or device.get("verification_uri") or ""), user_code)
    interval = float(device.get("interval") or 5)
    deadline = time.monotonic() + float(device.get("expires_in") or 600)
    poll = prepare_token_request(DEVICE_GRANT, body="", device_code=code, **params)
    while time.monotonic() < deadline:
        try:
            return _state(endpoint.post(spec.policy(), spec.token_url, poll))
        except TokenRefused as exc:
            if exc.error == "slow_down":
                interval += 5  # RFC 8628 §3.5
            elif exc.error != "authorization_pending":
                raise LoginFailed(f"the device login failed: {exc.detail}") from None
        sleep(interval)
    raise LoginFailed("the device code expired before the user approved it")
