"""OAuth-refreshed credentials: the host obtains, refreshes and rotates access tokens itself.

A credential mapping that declares ``oauth = {grant, token_url, scopes, client}`` keeps,
under its secret name, the *token state* rather than a static value: a
``stockade.oauth-token/1`` JSON document (:class:`TokenState`) with the access token, the
refresh token and the expiry, encrypted like every secret (AES-256-GCM, associated data
binding scope, principal and name). ``client`` names a second secret holding
``{"client_id": ..., "client_secret": ...}``. The guest never sees any of them: the router
injects the current access token where the mapping says, and ``secret-available``
reports availability only.

Invariants:

- **Refresh in the host, through the host's egress.** A token request is an
  :class:`~host.egress.session.EgressSession` request like a guest's: the token URL must be
  admitted by the package's allowlist or its ``http.token_hosts`` (the manifest checks it;
  the session checks it again), DNS is vetted and pinned, redirects are re-checked hop by
  hop (at most 3), the response is bounded (:data:`MAX_TOKEN_RESPONSE_BYTES`, one
  ``gzip``/``deflate`` layer at most, within the decoding ratio). No credential mapping
  applies to it. The client authenticates with ``client_secret_post`` (RFC 6749 §2.3.1):
  the secret travels in the body, never in a header the egress hygiene would refuse.
- **Expiry with a skew.** A token that expires within ``skew_s`` seconds (default 60) of
  the reference time is refreshed before the call's guest starts. A token with no
  declared expiry is used until the API answers 401.
- **401 → refresh once, retry once.** :meth:`OAuthStage.reauth` is the session's hook; the
  session replays the request once with the new token (the guest's body is bytes the host
  still holds, so every request is replayable), and never a second time.
- **Single flight.** One refresh per (scope, principal, secret) at a time: a
  ``threading.Lock`` per key in-process, and :meth:`~host.secrets.store.SecretsStore.exclusive`
  (an ``flock``) across processes sharing the store. Whoever holds both re-reads the state
  and refreshes only if it is still stale, so a refresh token is never spent twice.
- **Rotation written back.** A response carrying a new refresh token replaces the old one;
  the new state is written with :meth:`~host.secrets.store.SecretsStore.set` (temporary file,
  fsync, ``os.replace``) before the lock is released.
- **Fail closed, say why.** :class:`~host.errors.CredentialUnavailable` with ``reason``
  ``oauth_expired`` (no token and no way to get one), ``oauth_refresh_failed`` (the server
  refused: ``invalid_grant``, ``invalid_client``, a malformed answer) or
  ``oauth_unreachable`` (DNS, TLS, refusal by egress policy, timeout, 5xx, too large), and
  a hint with the command that fixes it.
- **Never visible.** :attr:`OAuthStage.values` lists every access token, refresh token and
  client secret seen in the call, for the call's redactor; audit records
  (``credential.refreshed``, ``credential.refresh_failed``) hold names, expiry and reasons,
  never values.

Example::

    broker = OAuthBroker(store, resolver=system_resolver, audit=audit.append)
    stage = OAuthStage(broker, project="p", subject="alice", mappings=http.credentials,
                       policy=token_policy(http.allow, http.token_hosts), staged=raw)
    stage.staged["gh_token"]   # SecretValue of the current access token
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from host.egress.policy import EgressPolicy, Resolver
from host.egress.port import HttpFailure, HttpRequest
from host.egress.session import MAX_REDIRECTS, EgressSession
from host.egress.urls import parse_host_pattern
from host.errors import CredentialUnavailable, SecretsUnavailable
from host.secrets.redact import Redactor
from host.secrets.store import SecretsStore, SecretValue, check_secret

if TYPE_CHECKING:  # the transport (httpcore2, ssl) loads with the first session, not here
    from host.egress.transport import TransportFactory

__all__ = [
    "DEFAULT_SKEW_S",
    "MAX_TOKEN_RESPONSE_BYTES",
    "TOKEN_FORMAT",
    "ClientSecret",
    "OAuthBroker",
    "OAuthStage",
    "TokenEndpoint",
    "TokenRefused",
    "TokenState",
    "oauth_login_hint",
    "token_policy",
]

TOKEN_FORMAT: Final = "stockade.oauth-token/1"  # noqa: S105  # a format name, not a password
DEFAULT_SKEW_S: Final = 60  # seconds before expiry at which a token is refreshed
MAX_TOKEN_RESPONSE_BYTES: Final = 64 * 1024  # bytes of a token endpoint's decoded answer
MAX_TOKEN_REQUEST_BYTES: Final = 16 * 1024  # bytes of a token request's form body
TOKEN_TIMEOUT_MS: Final = 10_000  # ms for one token request, its redirects included

Reason = Literal["oauth_expired", "oauth_refresh_failed", "oauth_unreachable"]
AuditHook = Callable[[str, Mapping[str, object]], object]


class OAuthLike(Protocol):
    """What the broker reads of a mapping's ``oauth`` (``host.formats.manifest.OAuthConfig``)."""

    @property
    def grant(self) -> str: ...

    @property
    def token_url(self) -> str: ...

    @property
    def scopes(self) -> Sequence[str]: ...

    @property
    def client(self) -> str: ...


class OAuthMappingLike(Protocol):
    """What the broker reads of a credential mapping."""

    @property
    def secret(self) -> str: ...

    @property
    def optional(self) -> bool: ...

    @property
    def oauth(self) -> OAuthLike | None: ...


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class TokenState(_Model):
    """The stored value of an OAuth mapping's secret (``stockade.oauth-token/1``)."""

    format: Literal["stockade.oauth-token/1"] = TOKEN_FORMAT
    access_token: str | None = None
    refresh_token: str | None = None
    expires_at: int | None = None  # Unix seconds; None: unknown (used until a 401)
    token_type: str = "Bearer"  # noqa: S105  # the RFC 6750 token type, not a password
    scope: str | None = None

    def to_secret(self) -> str:
        """Compact JSON, the form stored in the secrets store."""
        return self.model_dump_json(exclude_none=True)

    @classmethod
    def from_secret(cls, value: SecretValue) -> TokenState:
        """Parse a stored state.

        Raises:
            ValueError: not a ``stockade.oauth-token/1`` document (the message holds no value).
        """
        try:
            return cls.model_validate_json(value.reveal())
        except ValidationError:
            raise ValueError(f"not a {TOKEN_FORMAT} document") from None

    def fresh(self, now: float, skew_s: float) -> bool:
        """Whether the access token may be sent now (present, not expiring within the skew)."""
        if not self.access_token:
            return False
        return self.expires_at is None or self.expires_at - skew_s > now

    def secret_values(self) -> list[str]:
        """The values to redact."""
        return [v for v in (self.access_token, self.refresh_token) if v]


class ClientSecret(_Model):
    """The stored value of an OAuth mapping's ``client`` secret."""

    client_id: str = Field(min_length=1, max_length=1024)
    client_secret: str | None = Field(default=None, min_length=1, max_length=4096)

    @classmethod
    def from_secret(cls, value: SecretValue) -> ClientSecret:
        """Parse ``{"client_id": ..., "client_secret": ...}``.

        Raises:
            ValueError: anything else (the message holds no value).
        """
        try:
            return cls.model_validate_json(value.reveal())
        except ValidationError:
            raise ValueError('not a {"client_id": ..., "client_secret": ...} document') from None


class TokenRefused(Exception):
    """Internal to the host: a token request failed (``reason``, and the OAuth ``error`` code)."""

    def __init__(self, reason: Reason, detail: str, error: str = "") -> None:
        super().__init__(detail)
        self.reason: Reason = reason
        self.detail = detail
        self.error = error


@dataclass(frozen=True, slots=True)
class _Limits:
    max_request_bytes: int
    max_response_bytes: int
    timeout_ms: int


def token_policy(allow: Iterable[object], token_hosts: Iterable[str]) -> EgressPolicy:
    """The policy of a package's token requests: its allowlist plus POST to ``token_hosts``.

    Raises:
        ValueError: a bad entry (a validated manifest never has one).
    """
    entries: list[object] = list(allow)
    for text in token_hosts:
        pattern = parse_host_pattern(text)
        entries.append({
            "scheme": pattern.scheme, "host": ("*." if pattern.wildcard else "") + pattern.host,
            "port": pattern.port, "path_prefix": "/", "methods": ["POST"],
        })  # fmt: skip
    return EgressPolicy.from_allow(entries)


class TokenEndpoint:
    """POSTs token requests through a fresh :class:`EgressSession` each (no credential mapping).

    Args:
        resolver: the DNS port.
        transport_factory: the transport (default: pinned, system CAs plus ``ca_file``).
        ca_file: extra trusted CA bundle.
        allow_loopback: TEST ONLY (``HostConfig.unsafe_allow_loopback``).
        timeout_ms: the whole request, redirects included.
        max_response_bytes: the decoded answer's bound.
    """

    def __init__(
        self,
        *,
        resolver: Resolver,
        transport_factory: TransportFactory | None = None,
        ca_file: Path | None = None,
        allow_loopback: bool = False,
        timeout_ms: int = TOKEN_TIMEOUT_MS,
        max_response_bytes: int = MAX_TOKEN_RESPONSE_BYTES,
    ) -> None:
        self._resolver = resolver
        self._factory = transport_factory
        self._ca_file = ca_file
        self._allow_loopback = allow_loopback
        self._limits = _Limits(MAX_TOKEN_REQUEST_BYTES, max_response_bytes, timeout_ms)

    def post(self, policy: EgressPolicy, url: str, form: str) -> dict[str, Any]:
        """POST an ``application/x-www-form-urlencoded`` body; return the JSON answer.

        Raises:
            TokenRefused: ``oauth_unreachable`` (egress refusal, network, timeout, too
                large, 5xx, not JSON on a non-4xx) or ``oauth_refresh_failed`` (a 4xx, with
                the OAuth ``error`` code when the answer names one).
        """
        session = EgressSession(
            self._limits, policy, package="oauth", credentials=(), staged={},
            max_requests=1 + MAX_REDIRECTS, deadline=time.monotonic() + self._limits.timeout_ms / 1000,
            resolver=self._resolver, transport_factory=self._factory, ca_file=self._ca_file,
            allow_loopback=self._allow_loopback, redactor=Redactor(()),
        )  # fmt: skip
        headers = (("Content-Type", "application/x-www-form-urlencoded"), ("Accept", "application/json"))
        with session:
            answer = session.send(HttpRequest("POST", url, headers, form.encode("ascii"), None))
        if isinstance(answer, HttpFailure):
            outcome = session.usage.requests[-1].outcome if session.usage.requests else answer.kind
            raise TokenRefused("oauth_unreachable", f"token request failed: {outcome}")
        try:
            document = json.loads(answer.body)
        except (ValueError, UnicodeError):
            document = None
        if 400 <= answer.status < 500:
            error = document.get("error") if isinstance(document, dict) else None
            code = error if isinstance(error, str) and error.isascii() and error.isidentifier() else ""
            raise TokenRefused(
                "oauth_refresh_failed",
                f"the token endpoint refused: HTTP {answer.status} {code or '(no OAuth error code)'}",
                code[:64],
            )
        if answer.status != 200:
            raise TokenRefused("oauth_unreachable", f"the token endpoint answered HTTP {answer.status}")
        if not isinstance(document, dict):
            raise TokenRefused("oauth_refresh_failed", "the token endpoint's answer is not a JSON object")
        return document


def _state_from_answer(document: Mapping[str, Any], old: TokenState | None, now: float) -> TokenState:
    access = document.get("access_token")
    expires_in = document.get("expires_in")
    refresh = document.get("refresh_token")
    scope = document.get("scope")
    token_type = document.get("token_type", "Bearer")
    try:
        if not isinstance(access, str):
            raise ValueError("no access_token")
        check_secret("access_token", access)
        if refresh is not None:
            if not isinstance(refresh, str):
                raise ValueError("refresh_token is not a string")
            check_secret("refresh_token", refresh)
        if expires_in is not None and (isinstance(expires_in, bool) or not isinstance(expires_in, int)):
            raise ValueError("expires_in is not an integer")
        if not isinstance(token_type, str) or token_type.lower() != "bearer":
            raise ValueError("token_type is not Bearer")
    except ValueError as exc:
        raise TokenRefused(
            "oauth_refresh_failed", f"the token endpoint's answer is unusable: {exc}"
        ) from None
    return TokenState(
        access_token=access,
        refresh_token=refresh if refresh is not None else (old.refresh_token if old else None),
        expires_at=int(now) + max(0, expires_in) if expires_in is not None else None,
        scope=scope if isinstance(scope, str) else (old.scope if old else None),
    )


def oauth_login_hint(secret: str, grant: str, client: str, project: str, subject: str) -> str:
    """The command that makes an OAuth credential available again."""
    who = f"--project {shlex.quote(project)} --subject {shlex.quote(subject)}"
    if grant == "client_credentials":
        return (
            f"Check the client credentials with `stockade secrets set {shlex.quote(client)} {who}` "
            '(standard input: {"client_id": ..., "client_secret": ...}) and that the token URL is reachable.'
        )
    return f"Log in once with `stockade secrets oauth-login {shlex.quote(secret)} {who}`."


@dataclass(frozen=True, slots=True)
class Obtained:
    """An access token ready to inject, and what the call must redact."""

    value: SecretValue
    refreshed: bool
    expires_at: int | None
    values: tuple[str, ...]  # access token, refresh token, client secret (for redaction)


class OAuthBroker:
    """Obtains current access tokens for OAuth mappings; one per host, shared by its calls.

    Args:
        store: the secrets store holding token states and client secrets.
        endpoint: how token requests are sent (through the host's egress).
        audit: ``audit.append`` (``credential.refreshed``, ``credential.refresh_failed``).
        skew_s: refresh a token expiring within this many seconds.
        clock: Unix time, for expiry (injectable in tests).
    """

    def __init__(
        self,
        store: SecretsStore,
        *,
        endpoint: TokenEndpoint,
        audit: AuditHook | None = None,
        skew_s: float = DEFAULT_SKEW_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._endpoint = endpoint
        self._audit = audit
        self._skew_s = skew_s
        self._clock = clock
        self._guard = threading.Lock()
        self._flights: dict[tuple[str, str, str], threading.Lock] = {}
        self.refreshes = 0  # token requests sent by this broker (for tests and metrics)

    def peek(self, raw: SecretValue | None) -> Obtained | None:
        """The access token of an already staged state if it is fresh; ``None`` means
        :meth:`obtain` must decide (under the locks). Spares the common case the locks and a
        second read of the store."""
        if raw is None:
            return None
        try:
            state = TokenState.from_secret(raw)
        except ValueError:
            return None
        if not state.fresh(self._clock(), self._skew_s) or state.access_token is None:
            return None
        values = tuple(state.secret_values())
        return Obtained(SecretValue(state.access_token), False, state.expires_at, values)

    def obtain(
        self,
        project: str,
        subject: str,
        secret: str,
        oauth: OAuthLike,
        policy: EgressPolicy,
        *,
        rejected: SecretValue | None = None,
    ) -> Obtained:
        """The current access token of ``secret``, refreshed first if stale.

        Args:
            project, subject: the principal's scope and subject.
            secret: the mapping's secret (the token state).
            oauth: the mapping's declaration.
            policy: from :func:`token_policy` of the package.
            rejected: an access token the API just answered 401 to: refresh unless the
                stored one already differs (another call refreshed meanwhile).

        Raises:
            CredentialUnavailable: ``reason`` ``oauth_expired``, ``oauth_refresh_failed`` or
                ``oauth_unreachable``, with the fixing command as hint.
            SecretsUnavailable: the store cannot be read or written.
        """
        key = (project, subject, secret)
        with self._guard:
            flight = self._flights.setdefault(key, threading.Lock())
        with flight, self._store.exclusive(project, subject, secret):
            stored = self._store.get(project, subject, secret)
            try:
                state = TokenState.from_secret(stored) if stored is not None else None
            except ValueError:
                state = None  # a value that is not a token state: only a login repairs it
                if oauth.grant != "client_credentials":
                    raise self._unavailable(key, oauth, "oauth_expired", f"secret {secret!r} holds no "
                                            f"{TOKEN_FORMAT} document") from None  # fmt: skip
            now = self._clock()
            usable = state is not None and state.fresh(now, self._skew_s)
            if usable and state is not None and state.access_token is not None:
                again = rejected is not None and state.access_token == rejected.reveal()
                if not again:
                    return Obtained(SecretValue(state.access_token), False, state.expires_at,
                                    tuple(state.secret_values()))  # fmt: skip
            return self._refresh(key, oauth, policy, state, now)

    def _refresh(
        self,
        key: tuple[str, str, str],
        oauth: OAuthLike,
        policy: EgressPolicy,
        state: TokenState | None,
        now: float,
    ) -> Obtained:
        project, subject, secret = key
        client = self._client(key, oauth)
        scope = " ".join(oauth.scopes) or None
        params: dict[str, str] = {"client_id": client.client_id}
        if client.client_secret:
            params["client_secret"] = client.client_secret
        if scope:
            params["scope"] = scope
        if oauth.grant == "refresh_token":
            if state is None or not state.refresh_token:
                raise self._unavailable(
                    key,
                    oauth,
                    "oauth_expired",
                    f"secret {secret!r} has no usable access token and no refresh token",
                )
            params["refresh_token"] = state.refresh_token
        from authlib.oauth2.rfc6749.parameters import prepare_token_request  # noqa: PLC0415 - only when a token is requested

        form = prepare_token_request(oauth.grant, body="", **params)
        with self._guard:
            self.refreshes += 1
        try:
            answer = self._endpoint.post(policy, oauth.token_url, form)
            fresh = _state_from_answer(answer, state, now)
        except TokenRefused as exc:
            raise self._unavailable(key, oauth, exc.reason, exc.detail, error=exc.error) from None
        self._store.set(project, subject, secret, fresh.to_secret())
        rotated = bool(state and state.refresh_token and fresh.refresh_token != state.refresh_token)
        self._record("credential.refreshed", {
            "secret": secret, "project": project, "subject": subject, "grant": oauth.grant,
            "expires_at": fresh.expires_at, "rotated": rotated,
        })  # fmt: skip
        values = [*fresh.secret_values(), *(state.secret_values() if state else [])]
        if client.client_secret:
            values.append(client.client_secret)
        if fresh.access_token is None:  # _state_from_answer never leaves it empty
            raise RuntimeError("refreshed state without an access token")
        return Obtained(SecretValue(fresh.access_token), True, fresh.expires_at, tuple(values))

    def _client(self, key: tuple[str, str, str], oauth: OAuthLike) -> ClientSecret:
        project, subject, _ = key
        stored = self._store.get(project, subject, oauth.client)
        if stored is None:
            raise self._unavailable(
                key, oauth, "oauth_expired", f"client secret {oauth.client!r} is not stored"
            )
        try:
            return ClientSecret.from_secret(stored)
        except ValueError as exc:
            raise self._unavailable(
                key, oauth, "oauth_expired", f"client secret {oauth.client!r} is {exc}"
            ) from None

    def _unavailable(
        self, key: tuple[str, str, str], oauth: OAuthLike, reason: Reason, detail: str, *, error: str = ""
    ) -> CredentialUnavailable:
        project, subject, secret = key
        record: dict[str, object] = {"secret": secret, "project": project, "subject": subject,
                                     "grant": oauth.grant, "reason": reason}  # fmt: skip
        if error:
            record["error"] = error
        self._record("credential.refresh_failed", record)
        if reason == "oauth_unreachable":
            hint = (f"The token endpoint {oauth.token_url} could not be reached through egress; "
                    "check the network and http.allow / http.token_hosts, then retry.")  # fmt: skip
        else:
            hint = oauth_login_hint(secret, oauth.grant, oauth.client, project, subject)
        return CredentialUnavailable(
            f"OAuth credential {secret!r} is unavailable ({reason}): {detail}",
            hint=hint, secret=secret, reason=reason, project=project, subject=subject,
        )  # fmt: skip

    def _record(self, kind: str, payload: Mapping[str, object]) -> None:
        if self._audit is not None:
            self._audit(kind, payload)


class OAuthStage:
    """The OAuth part of one call's staged secrets (pre-flight, and the 401 hook).

    Args:
        broker: the host's broker.
        project, subject: the call's principal.
        mappings: the package's credential mappings (only those with ``oauth`` are used).
        policy: :func:`token_policy` of the package.
        staged: the raw staged secrets (token states under the OAuth names).
        usernames: the package's basic-auth usernames (for the redactor).

    Raises:
        CredentialUnavailable: a required OAuth credential cannot be obtained.
        SecretsUnavailable: the store fails.
    """

    def __init__(
        self,
        broker: OAuthBroker,
        *,
        project: str,
        subject: str,
        mappings: Sequence[OAuthMappingLike],
        policy: EgressPolicy,
        staged: Mapping[str, SecretValue],
        usernames: Sequence[str] = (),
    ) -> None:
        self._broker = broker
        self._project, self._subject = project, subject
        self._policy = policy
        self._usernames = tuple(usernames)
        self._oauth: dict[str, OAuthLike] = {}
        self._lock = threading.Lock()
        self.refreshed: list[str] = []
        self.renewed = False  # whether reauth refreshed a token during the call
        oauth_names = {m.secret for m in mappings if m.oauth is not None}
        # A raw state is never injected and its tokens are redacted one by one: redacting the
        # whole JSON document too would only cost (a long value has many forms: ~10 ms).
        self.values: list[str] = [v.reveal() for k, v in staged.items() if k not in oauth_names]
        out = dict(staged)
        for mapping in mappings:
            if mapping.oauth is None or mapping.secret in self._oauth:
                continue
            self._oauth[mapping.secret] = mapping.oauth
            out.pop(mapping.secret, None)  # never the raw state: only an access token is injected
            try:
                got = broker.peek(staged.get(mapping.secret)) or broker.obtain(
                    project, subject, mapping.secret, mapping.oauth, policy
                )
            except CredentialUnavailable:
                if mapping.optional:
                    continue
                raise
            self._take(mapping.secret, got)
            out[mapping.secret] = got.value
        self.staged: dict[str, SecretValue] = out

    @property
    def names(self) -> frozenset[str]:
        """The secrets of OAuth mappings."""
        return frozenset(self._oauth)

    def _take(self, secret: str, got: Obtained) -> None:
        self.values.extend(got.values)
        if got.refreshed:
            self.refreshed.append(secret)

    def redactor(self) -> Redactor:
        """A redactor of every value this call has seen (staged, refreshed, rotated)."""
        with self._lock:
            return Redactor(list(self.values), basic_usernames=self._usernames)

    def reauth(self, secret: str, rejected: SecretValue) -> tuple[SecretValue, Redactor] | None:
        """The session's 401 hook: a new access token for ``secret`` and the widened redactor.

        Returns:
            ``None`` if ``secret`` is not an OAuth mapping's or cannot be refreshed (the
            session then answers ``credential-unavailable``; the failure is audited).
        """
        oauth = self._oauth.get(secret)
        if oauth is None:
            return None
        try:
            got = self._broker.obtain(self._project, self._subject, secret, oauth, self._policy,
                                      rejected=rejected)  # fmt: skip
        except (CredentialUnavailable, SecretsUnavailable):
            return None
        with self._lock:
            self._take(secret, got)
            self.staged[secret] = got.value
            self.renewed = True
        return got.value, self.redactor()
