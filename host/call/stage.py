"""What a call is given before its guest starts, private to the gateway (docs/design.md §6 step 8).

- :func:`stage_package_secrets`: pre-flight of a package's secrets for one principal;
  every required secret must be stored, or the call fails with CREDENTIAL_UNAVAILABLE
  and a hint naming the exact command, before the guest starts;
- :func:`redactor_for`: the redactor that scrubs the staged values (and basic-auth user
  names) from everything that leaves the call;
- :func:`limits_for`: a tool's sandbox limits;
- :func:`egress_session`: the egress port of a call whose package has an allowlist;
- :class:`ReportingEgress`: an egress port that reports each request to a progress hook.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from host.config import HostConfig
from host.egress.oauth import OAuthBroker, OAuthStage, token_policy
from host.egress.policy import EgressPolicy, Resolver
from host.egress.port import EgressPort, HttpFailure, HttpRequest, HttpResponse
from host.egress.session import EgressSession
from host.errors import CredentialUnavailable
from host.runtime import SandboxLimits
from host.secrets.redact import Redactor
from host.secrets.store import SecretsStore, SecretValue
from host.trust.registry import ToolDefinition
from host.types import InvocationPlan, Principal

if TYPE_CHECKING:  # an annotation: the transport (httpcore2) loads with the first egress session
    from host.egress.transport import TransportFactory

__all__ = [
    "ReportingEgress",
    "egress_session",
    "limits_for",
    "redactor_for",
    "stage_package_secrets",
    "store_secret_hint",
]


def stage_package_secrets(
    secrets: SecretsStore | None, plan: InvocationPlan, tool: ToolDefinition
) -> dict[str, SecretValue]:
    """Stage every secret the tool's package maps to a credential, for this principal.

    An OAuth mapping's secret holds token state, not a value to inject: it is staged raw
    here (absent is fine: :class:`~host.egress.oauth.OAuthStage` decides) and replaced by
    the access token in :func:`stage_oauth`.

    Raises:
        CredentialUnavailable: a non-optional secret is not stored (or no store is open).
    """
    http = tool.package.http
    if http is None or not http.credentials:
        return {}
    principal = plan.request.principal
    names = sorted({c.secret for c in http.credentials})
    staged = secrets.stage(principal.project, principal.subject, names) if secrets else {}
    for mapping in http.credentials:
        if mapping.oauth is not None and secrets is not None:
            continue
        if not mapping.optional and mapping.secret not in staged:
            raise CredentialUnavailable(
                f"secret {mapping.secret!r} is required by package {tool.binding.package!r} "
                f"but is not stored for {principal.subject!r} in {principal.project!r}",
                hint=store_secret_hint(mapping.secret, principal, has_store=secrets is not None),
                secret=mapping.secret,
                project=principal.project,
                subject=principal.subject,
            )
    return staged


def stage_oauth(
    broker: OAuthBroker | None, plan: InvocationPlan, tool: ToolDefinition, staged: Mapping[str, SecretValue]
) -> OAuthStage | None:
    """Obtain the current access token of each OAuth mapping (refreshing stale ones).

    Returns:
        ``None`` when the package declares no OAuth mapping (or no store is open).

    Raises:
        CredentialUnavailable: a required OAuth credential cannot be obtained
            (``reason``: ``oauth_expired``, ``oauth_refresh_failed``, ``oauth_unreachable``).
        SecretsUnavailable: the store fails.
    """
    http = tool.package.http
    if broker is None or http is None or not any(c.oauth is not None for c in http.credentials):
        return None
    principal = plan.request.principal
    return OAuthStage(
        broker,
        project=principal.project,
        subject=principal.subject,
        mappings=http.credentials,
        policy=token_policy(http.allow, http.token_hosts),
        staged=staged,
        usernames=[c.location.username for c in http.credentials if c.location.type == "basic"],
    )


def stage_host_tool_secrets(
    secrets: SecretsStore | None, plan: InvocationPlan, names: Sequence[str]
) -> dict[str, SecretValue]:
    """Stage the secrets a host tool's call needs (``exec.run``'s ``secret_env``), all required.

    Raises:
        CredentialUnavailable: one is not stored for this principal (or no store is open).
    """
    if not names:
        return {}
    principal = plan.request.principal
    staged = secrets.stage(principal.project, principal.subject, sorted(set(names))) if secrets else {}
    for name in sorted(set(names)):
        if name not in staged:
            raise CredentialUnavailable(
                f"secret {name!r} is required by {plan.tool} but is not stored for {principal.subject!r} "
                f"in {principal.project!r}",
                hint=store_secret_hint(name, principal, has_store=secrets is not None),
                secret=name, project=principal.project, subject=principal.subject,
            )  # fmt: skip
    return staged


def redactor_for(tool: ToolDefinition, staged: Mapping[str, SecretValue]) -> Redactor:
    """A redactor of the staged values and the package's basic-auth user names."""
    http = tool.package.http
    usernames = []
    if http is not None:
        usernames = [c.location.username for c in http.credentials if c.location.type == "basic"]
    return Redactor((v.reveal() for v in staged.values()), basic_usernames=usernames)


def limits_for(tool: ToolDefinition) -> SandboxLimits:
    """The sandbox limits of a tool's calls: its package's limits, the timeout capped by
    the tool's own ``timeout_s``."""
    limits = tool.package.limits
    return SandboxLimits(
        fuel=limits.fuel,
        memory_bytes=limits.memory_bytes,
        timeout_ms=min(tool.timeout_s * 1000, limits.timeout_ms),
        max_log_bytes=limits.max_log_bytes,
    )


def egress_session(
    tool: ToolDefinition,
    policy: EgressPolicy,
    staged: Mapping[str, SecretValue],
    redactor: Redactor,
    *,
    deadline: float,
    resolver: Resolver,
    transport_factory: TransportFactory | None,
    config: HostConfig,
    oauth: OAuthStage | None = None,
) -> EgressSession:
    """The egress session of one call of a package with an allowlist (the caller closes it).

    Raises:
        ValueError: the tool's package has no ``http`` section (a caller bug).
    """
    http = tool.package.http
    if http is None:
        raise ValueError(f"package {tool.binding.package!r} declares no http section")
    return EgressSession(
        http,
        policy,
        package=tool.binding.package,
        credentials=http.credentials,
        staged=staged,
        max_requests=tool.package.limits.max_http_requests,
        deadline=deadline,
        resolver=resolver,
        transport_factory=transport_factory,
        ca_file=config.extra_ca_file,
        allow_loopback=config.unsafe_allow_loopback,
        redactor=redactor,
        reauth=oauth.reauth if oauth is not None else None,
        reauth_secrets=oauth.names if oauth is not None else frozenset(),
    )


class ReportingEgress:
    """An egress port that reports each request's outcome to a progress hook."""

    __slots__ = ("_inner", "_report")

    def __init__(self, inner: EgressPort, report: Callable[[str, Mapping[str, Any]], None]) -> None:
        self._inner = inner
        self._report = report

    def send(self, request: HttpRequest) -> HttpResponse | HttpFailure:
        """Send through the wrapped port, then report method and outcome."""
        answer = self._inner.send(request)
        outcome = answer.status if isinstance(answer, HttpResponse) else answer.kind
        self._report("http_request", {"method": request.method[:16], "outcome": outcome})
        return answer


def store_secret_hint(secret: str, principal: Principal, *, has_store: bool) -> str:
    """The exact commands that make a missing secret available.

    Every tool of a package is pre-flighted for all of the package's required secrets
    (docs/design.md §6 step 8): the manifest does not say which tools make requests, and finding
    a secret missing halfway through a call, after other requests went out, is worse than
    refusing before the guest starts. A mapping that some tools do without is declared
    ``optional``.
    """
    store = (
        f"`stockade secrets set {shlex.quote(secret)} --project {shlex.quote(principal.project)} "
        f"--subject {shlex.quote(principal.subject)}` (it reads the value from standard input)"
    )
    if has_store:
        return f"Store it with {store}."
    return (
        "No secrets store is open (no master key): create one with `stockade secrets init-key`, "
        f"then {store}."
    )
