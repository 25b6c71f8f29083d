"""The one exception tree of Stockade (docs/design.md §9).

Every refusal that reaches a user is a :class:`StockadeError` with a stable ``code``,
a message a person can act on, an optional ``hint`` (what to do about it) and
structured ``details`` with secret values removed. Codes never change once shipped:
programs branch on ``code``, people read ``message``.

Tree (kept in step with the classes below; ``tests/unit/host/test_errors.py`` checks it)::

    StockadeError
    ├── RequestInvalid            REQUEST_INVALID         the call envelope is malformed
    ├── ToolNotFound              TOOL_NOT_FOUND          no tool with that exact name and version
    ├── InputInvalid              INPUT_INVALID           input fails the tool's schema or canonical form
    ├── OutputInvalid             OUTPUT_INVALID          the guest returned output outside its schema
    ├── SchemaInvalid             SCHEMA_INVALID          a tool schema leaves the bounded subset (§5)
    ├── PolicyDenied              POLICY_DENIED           policy said no
    ├── PolicyUnavailable         POLICY_UNAVAILABLE      policy could not be decided: fail closed
    ├── ApprovalRequired          APPROVAL_REQUIRED       a person must approve this action first
    ├── ApprovalInvalid           APPROVAL_INVALID        approval absent, used, expired or for another action
    ├── ApprovalDenied            APPROVAL_DENIED         a person declined (or dismissed) the approval
    ├── ApprovalQueueFull         APPROVAL_QUEUE_FULL     the principal (or the queue) is at its pending bound
    ├── ApproverKeyMissing        APPROVER_KEY_MISSING    no approver key configured for a shared store
    ├── ScopeInvalid              SCOPE_INVALID           a scope refused at issue, or no such scope
    ├── Busy                      BUSY                    serve or an MCP source is at its concurrency cap
    ├── CallCancelled             CANCELLED               the caller cancelled the call; the guest was stopped
    ├── RateLimited               RATE_LIMITED            per (principal, tool) window exhausted
    ├── CredentialUnavailable     CREDENTIAL_UNAVAILABLE  a required secret is missing
    ├── EgressDenied              EGRESS_DENIED           an outbound request broke the egress rules
    │   └── EgressUnreachable     EGRESS_UNREACHABLE      DNS failed or timed out (not a policy denial)
    ├── SandboxTrap               SANDBOX_TRAP            the guest trapped
    │   ├── SandboxFuelExhausted  SANDBOX_FUEL_EXHAUSTED  ran out of fuel
    │   ├── SandboxTimeout        SANDBOX_TIMEOUT         passed its wall-clock deadline
    │   └── SandboxMemory         SANDBOX_MEMORY          hit its memory limit
    ├── SandboxUnavailable        SANDBOX_UNAVAILABLE     exec.run cannot set up its bubblewrap sandbox
    ├── ToolFailed                TOOL_FAILED             the guest reported a failure
    ├── ManifestInvalid           MANIFEST_INVALID        the package manifest is invalid
    ├── ComponentRefused          COMPONENT_REFUSED       the module is not an acceptable component
    ├── LockInvalid               LOCK_INVALID            the lock file is malformed
    │   ├── LockRollback          LOCK_ROLLBACK           rollback, fork, generation jump, package downgrade
    │   ├── DigestMismatch        DIGEST_MISMATCH         a file does not match its pinned sha256
    │   ├── SignatureInvalid      SIGNATURE_INVALID       signature missing, unknown key or bad signature
    │   └── BundleMissing         BUNDLE_MISSING          a locked registry bundle is not in the local store
    ├── SecretsUnavailable        SECRETS_UNAVAILABLE     the secrets store cannot be opened or read
    ├── AuditUnavailable          AUDIT_UNAVAILABLE       the audit log cannot be written
    ├── RegistryUnavailable       REGISTRY_UNAVAILABLE    an OCI registry is unreachable, hangs or answers 5xx
    ├── RegistryRefused           REGISTRY_REFUSED        an OCI registry refused: not found, unauthorized
    ├── ArtifactInvalid           ARTIFACT_INVALID        an OCI artifact is not a Stockade bundle artifact
    ├── McpUnavailable            MCP_UNAVAILABLE         an MCP server crashed, broke JSON-RPC, cannot start
    │   └── McpTimeout            MCP_TIMEOUT             an MCP server did not answer within the call timeout
    ├── McpToolChanged            MCP_TOOL_CHANGED        an MCP tool differs from its pin: withheld
    ├── StoreUnavailable          STORE_UNAVAILABLE       the state store cannot be reached or used
    ├── ConfigInvalid             CONFIG_INVALID          the host config file is missing or invalid
    ├── CassetteInvalid           CASSETTE_INVALID        an HTTP cassette is malformed, too large or unsafe
    └── CassetteUnmatched         CASSETTE_UNMATCHED      a replayed request has no recorded interaction

"Untrusted input was bad" is a ``StockadeError``; "the caller misused the API" is a
``TypeError``/``ValueError``/``RuntimeError`` (CONTRIBUTING.md principle 3).

Example::

    try:
        host.call(request)
    except StockadeError as exc:
        print(exc.code, exc.message, exc.hint)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

__all__ = [
    "ApprovalDenied",
    "ApprovalInvalid",
    "ApprovalQueueFull",
    "ApprovalRequired",
    "ApproverKeyMissing",
    "ArtifactInvalid",
    "AuditUnavailable",
    "BundleMissing",
    "Busy",
    "CallCancelled",
    "CassetteInvalid",
    "CassetteUnmatched",
    "ComponentRefused",
    "ConfigInvalid",
    "CredentialUnavailable",
    "DigestMismatch",
    "EgressDenied",
    "EgressUnreachable",
    "InputInvalid",
    "LockInvalid",
    "LockRollback",
    "ManifestInvalid",
    "McpTimeout",
    "McpToolChanged",
    "McpUnavailable",
    "OutputInvalid",
    "PolicyDenied",
    "PolicyUnavailable",
    "RateLimited",
    "RegistryRefused",
    "RegistryUnavailable",
    "RequestInvalid",
    "SandboxFuelExhausted",
    "SandboxMemory",
    "SandboxTimeout",
    "SandboxTrap",
    "SandboxUnavailable",
    "SchemaInvalid",
    "ScopeInvalid",
    "SecretsUnavailable",
    "SignatureInvalid",
    "StockadeError",
    "StoreUnavailable",
    "ToolFailed",
    "ToolNotFound",
    "all_error_classes",
]

MAX_MESSAGE_CHARS = 4096
"""Messages are capped so a hostile guest or server cannot flood logs through an error."""


def _cap(text: str) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    return text[: MAX_MESSAGE_CHARS - 14] + "…[truncated]"


class StockadeError(Exception):
    """Base of every refusal Stockade reports.

    Args:
        message: what went wrong, for a person; capped at 4 KiB.
        hint: what to do about it (optional; each class has a default).
        details: structured, JSON-able facts (never secret values).

    Attributes:
        code: the stable machine-readable code of the class.
    """

    code: ClassVar[str] = "STOCKADE_ERROR"
    default_hint: ClassVar[str] = ""

    def __init__(self, message: str, *, hint: str | None = None, **details: Any) -> None:
        self.message = _cap(message)
        self.hint = hint if hint is not None else self.default_hint
        self.details: Mapping[str, Any] = dict(details)
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r})"

    def to_dict(self) -> dict[str, Any]:
        """The error as a JSON-able mapping: ``code``, ``message``, ``hint``, ``details``."""
        return {
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
            "details": dict(self.details),
        }


class RequestInvalid(StockadeError):
    """The call envelope (principal, session, tool, version, input, approval) is malformed."""

    code = "REQUEST_INVALID"
    default_hint = "Send exactly the fields of CallRequest; name the tool's exact version."


class ToolNotFound(StockadeError):
    """No tool with that exact (name, version) in the frozen registry."""

    code = "TOOL_NOT_FOUND"
    default_hint = "List tools with `stockade tools`; versions are exact, never 'latest'."


class InputInvalid(StockadeError):
    """The input fails the tool's schema or cannot be canonical JSON.

    ``details["pointer"]`` is the JSON pointer of the offending value when known.
    """

    code = "INPUT_INVALID"
    default_hint = "Fix the value at the JSON pointer given and call again."


class OutputInvalid(StockadeError):
    """The guest returned output outside its ``output_schema`` or over the output budget."""

    code = "OUTPUT_INVALID"
    default_hint = "The plugin is at fault; report it to its author."


class SchemaInvalid(StockadeError):
    """A tool schema leaves the bounded JSON Schema subset (docs/design.md §5).

    ``details["pointer"]`` locates the schema node, ``details["rule"]`` names the rule.
    """

    code = "SCHEMA_INVALID"
    default_hint = "Use only the schema subset of docs/design.md §5, with explicit bounds."


class PolicyDenied(StockadeError):
    """The policy engine or the tool policy denied the call."""

    code = "POLICY_DENIED"
    default_hint = "Ask an administrator for the permission named in the details."


class PolicyUnavailable(StockadeError):
    """Policy could not be decided (store error, missing or mixed fence): fail closed."""

    code = "POLICY_UNAVAILABLE"
    default_hint = "Check the policy store; nothing runs until policy can be read."


class ApprovalRequired(StockadeError):
    """The action needs a person's approval; ``details["action_digest"]`` names it."""

    code = "APPROVAL_REQUIRED"
    default_hint = "Show the preview to a person and execute the plan with their approval."


class ApprovalInvalid(StockadeError):
    """The approval is missing, used, expired or bound to another action (one opaque error)."""

    code = "APPROVAL_INVALID"
    default_hint = "Prepare the call again and obtain a fresh approval."


class ApproverKeyMissing(StockadeError):
    """An approval on a shared (PostgreSQL) store needs an approver key and none is
    configured: the approver's private key to approve, trusted approver public keys to
    redeem. Fails closed; never falls back to trusting the database's rows."""

    code = "APPROVER_KEY_MISSING"
    default_hint = (
        "Set `approver_key` (to approve) or `trusted_approver_keys` (to redeem) in the "
        "[host] table of stockade.host.toml (docs/design.md §13, approvals)."
    )


class ScopeInvalid(StockadeError):
    """A scope (``stockade.scope/1``) was refused at issue — an end that is not finite, in
    the past or past the host's ceiling, a zero count, an unknown tool — or names no
    scope the store holds."""

    code = "SCOPE_INVALID"
    default_hint = "Grant a scope with `stockade scopes grant`; list them with `stockade scopes list`."


class ApprovalDenied(StockadeError):
    """A person declined the approval request, or dismissed it without answering."""

    code = "APPROVAL_DENIED"
    default_hint = "The call did not run; ask the person why before proposing it again."


class ApprovalQueueFull(StockadeError):
    """The pending-approval queue refuses a new entry: this principal already has its
    maximum of pending approvals (``details["bound"]``), or the whole queue is full. Other
    principals are unaffected by one principal's share."""

    code = "APPROVAL_QUEUE_FULL"
    default_hint = (
        "Ask a person to decide the pending approvals (`stockade approvals list`), or wait "
        "for them to expire; then call again."
    )


class Busy(StockadeError):
    """The server (``stockade serve --max-concurrency``) or an MCP source
    (``limits.max_concurrent_calls``) already runs as many calls as its cap allows; the
    call is refused at once, not queued."""

    code = "BUSY"
    default_hint = "Retry after a running call finishes, or raise --max-concurrency."


class CallCancelled(StockadeError):
    """The caller cancelled the call; a running guest was interrupted (its store stopped)."""

    code = "CANCELLED"
    default_hint = "Nothing to do; call again if the result is still wanted."


class RateLimited(StockadeError):
    """A per (principal, tool) window is exhausted; ``details["retry_after_s"]`` says when."""

    code = "RATE_LIMITED"
    default_hint = "Wait for the number of seconds in retry_after_s."


class CredentialUnavailable(StockadeError):
    """A required secret of the package is missing; ``details["secret"]`` names it."""

    code = "CREDENTIAL_UNAVAILABLE"
    default_hint = "Store it with `stockade secrets set NAME`."


class EgressDenied(StockadeError):
    """An outbound request broke the egress rules (docs/design.md §8).

    ``reason`` is a short typed token such as ``host_not_allowed`` or ``userinfo``.
    """

    code = "EGRESS_DENIED"
    default_hint = "Only hosts, ports, paths and methods in the manifest's http.allow are reachable."

    def __init__(
        self, message: str, *, reason: str, hint: str | None = None, **details: Any
    ) -> None:
        super().__init__(message, hint=hint, reason=reason, **details)
        self.reason = reason


class EgressUnreachable(EgressDenied):
    """The destination could not be resolved in time: a network fact, not a policy denial.

    ``reason`` is ``dns_failure`` (the resolver failed or answered nothing),
    ``dns_timeout`` (no answer before the request or call deadline) or ``dns_busy`` (too
    many lookups pending in this process). A subclass of :class:`EgressDenied` so code
    that catches every ``EgressPolicy.vet`` refusal keeps working; the code differs.
    """

    code = "EGRESS_UNREACHABLE"
    default_hint = "Check the destination's DNS; the request can be retried later."


class SandboxTrap(StockadeError):
    """The guest trapped; the message is the (scrubbed, capped) trap text."""

    code = "SANDBOX_TRAP"
    default_hint = "The plugin crashed; report it to its author."


class SandboxFuelExhausted(SandboxTrap):
    """The guest used all the fuel its manifest grants."""

    code = "SANDBOX_FUEL_EXHAUSTED"
    default_hint = "The call did too much work; raise limits.fuel in the manifest if intended."


class SandboxTimeout(SandboxTrap):
    """The guest ran past its wall-clock deadline."""

    code = "SANDBOX_TIMEOUT"
    default_hint = "The call ran too long; raise the tool's timeout_s if intended."


class SandboxMemory(SandboxTrap):
    """The guest hit its memory limit."""

    code = "SANDBOX_MEMORY"
    default_hint = "The call needed more memory; raise limits.memory_bytes if intended."


class SandboxUnavailable(StockadeError):
    """The process sandbox of ``exec.run`` cannot be set up (no ``bwrap``, no user
    namespaces, the seccomp filter cannot be built or loaded): nothing ran."""

    code = "SANDBOX_UNAVAILABLE"
    default_hint = (
        "Install bubblewrap (Debian: apt-get install bubblewrap) and allow unprivileged user "
        "namespaces; a command never runs outside the sandbox unless the operator sets "
        "unsafe_exec_without_sandbox."
    )


class ToolFailed(StockadeError):
    """The guest returned its ``failed`` tool error."""

    code = "TOOL_FAILED"
    default_hint = "The tool reported a failure; read the message."


class ManifestInvalid(StockadeError):
    """The package manifest is invalid; ``details["problems"]`` lists every problem.

    Each problem is ``{"loc": "tools.0.name", "msg": "..."}``.
    """

    code = "MANIFEST_INVALID"
    default_hint = "Fix every problem listed and rebuild the bundle."


class ComponentRefused(StockadeError):
    """The module is not a component, has the wrong ``call`` type or a forbidden import."""

    code = "COMPONENT_REFUSED"
    default_hint = "Build against sdk/wit/stockade.wit with wasi:http disabled."


class LockInvalid(StockadeError):
    """The lock file is malformed or names bundles that cannot be read."""

    code = "LOCK_INVALID"
    default_hint = "Regenerate the lock with `stockade lock add`."


class LockRollback(LockInvalid):
    """The lock is older than, forks or jumps too far ahead of the accepted generation, or
    downgrades a package below its highest accepted version (``details["reason"]``)."""

    code = "LOCK_ROLLBACK"
    default_hint = (
        "Use a lock with a higher generation; an operator may override with "
        "unsafe_accept_rollback, which is audited."
    )


class DigestMismatch(LockInvalid):
    """A file does not match the sha256 pinned for it."""

    code = "DIGEST_MISMATCH"
    default_hint = "The bundle was changed after it was locked; rebuild and relock it."


class SignatureInvalid(LockInvalid):
    """A signature is missing where required, by an unknown key, or does not verify."""

    code = "SIGNATURE_INVALID"
    default_hint = "Sign the bundle with a key listed in the trusted keys file."


class BundleMissing(LockInvalid):
    """A lock entry pulled from a registry (it has a ``source``) names a bundle that is not in
    the local store. ``Host.open`` never uses the network (docs/design.md §12)."""

    code = "BUNDLE_MISSING"
    default_hint = "Fetch it first: `stockade lock fetch` (or `stockade pull oci://REF@sha256:...`)."


class SecretsUnavailable(StockadeError):
    """The secrets store cannot be opened, decrypted or read (one opaque error)."""

    code = "SECRETS_UNAVAILABLE"
    default_hint = "Set STOCKADE_MASTER_KEY or provide a key file with mode 0600."


class AuditUnavailable(StockadeError):
    """The audit log cannot be written; the call is refused and nothing runs."""

    code = "AUDIT_UNAVAILABLE"
    default_hint = "Free disk space or fix permissions of the audit log."


class RegistryUnavailable(StockadeError):
    """An OCI registry could not be reached, did not answer in time, or answered 5xx/429.
    Nothing was written."""

    code = "REGISTRY_UNAVAILABLE"
    default_hint = (
        "Check the registry address and that it is up, then retry; a registry speaking plain "
        "HTTP needs --insecure-registry HOST:PORT."
    )


class RegistryRefused(StockadeError):
    """An OCI registry answered a 4xx: unknown repository, tag or digest, missing or wrong
    credentials, or access denied. ``details["status"]`` holds the HTTP status."""

    code = "REGISTRY_REFUSED"
    default_hint = (
        "Check the reference; for credentials use the secrets store or ~/.docker/config.json "
        "(see docs/registries.md)."
    )


class ArtifactInvalid(StockadeError):
    """An OCI manifest is not a Stockade bundle artifact: wrong media types, missing or extra
    layers, sizes over the limits, or annotations that contradict the bundle."""

    code = "ARTIFACT_INVALID"
    default_hint = "Push the bundle with `stockade push`; other artifacts are refused."


class McpUnavailable(StockadeError):
    """An external MCP server cannot start, crashed, hung up, sent a message over its size
    limit or malformed JSON-RPC, or (over HTTP) cannot be reached or answered an HTTP error
    (``details["reason"]``); its process group was killed (or its HTTP session closed) and
    the next call restarts it (with backoff after repeated failures)."""

    code = "MCP_UNAVAILABLE"
    default_hint = "Retry later; if it persists, read the server's stderr and check its declaration."


class McpTimeout(McpUnavailable):
    """An external MCP server did not answer within the source's ``call_timeout_ms``; it was
    killed (a wedged server is never reused) and is restarted on the next call."""

    code = "MCP_TIMEOUT"
    default_hint = "Retry; raise limits.call_timeout_ms in the declaration and re-pin if the tool is slow."


class McpToolChanged(StockadeError):
    """The live definition of an MCP tool (description, schemas, annotations) differs from
    the pinned one — a possible rug pull — so it is not offered; ``details["diff"]`` says what."""

    code = "MCP_TOOL_CHANGED"
    default_hint = "Review the change (`stockade diff`) and re-pin with `stockade lock add-mcp`."


class StoreUnavailable(StockadeError):
    """The state store (approvals, rate limits, grants, lock generations) cannot be
    reached or used; the operation fails closed and nothing runs."""

    code = "STORE_UNAVAILABLE"
    default_hint = (
        "Check that the store's database is reachable and migrated (`stockade store migrate`); "
        "a local state dir is used by one host process at a time."
    )


class ConfigInvalid(StockadeError):
    """The operator's host config file (``stockade.host.toml``) is missing or invalid.

    ``details["problems"]`` lists every problem (``{"loc": "host.lock", "msg": "..."}``).
    """

    code = "CONFIG_INVALID"
    default_hint = "Fix the file named in the message, or write a new one with `stockade init`."


class CassetteInvalid(StockadeError):
    """An HTTP cassette (``stockade.cassette/1``) cannot be used or must not be written.

    ``details["reason"]`` is one of ``malformed``, ``too_large``, ``wrong_package``,
    ``missing`` (replay without a file), ``secret_in_cassette`` (the final scan found a
    staged secret: nothing was written; ``details["interaction"]`` is its index),
    ``unsupported_encoding`` or ``oauth_not_recordable`` (recording a package with an
    OAuth credential mapping: the tokens the host obtains are not staged values).
    """

    code = "CASSETTE_INVALID"
    default_hint = (
        "Re-record the cassette (`stockade test --record-mode all`), or check it with "
        "`stockade cassette verify FILE`."
    )


class CassetteUnmatched(StockadeError):
    """A request made during replay matches no unused recorded interaction.

    ``details`` names ``method`` and ``url`` (secrets as ``<secret:NAME>``). The call fails
    with this error even if the plugin handled the failed request itself.
    """

    code = "CASSETTE_UNMATCHED"
    default_hint = (
        "The plugin sent a request the cassette did not record: record it with "
        "`stockade test --record-mode new_episodes`, or fix the plugin's request."
    )


def all_error_classes() -> tuple[type[StockadeError], ...]:
    """Every concrete error class, base first, in tree order."""
    seen: list[type[StockadeError]] = []

    def walk(cls: type[StockadeError]) -> None:
        seen.append(cls)
        for sub in cls.__subclasses__():
            if sub.__module__ == __name__:
                walk(sub)

    walk(StockadeError)
    return tuple(seen)
