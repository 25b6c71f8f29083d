"""The values one tool call carries, from the envelope to the result: plain data, no logic.

Every layer above the core reads these, so they live at the bottom of the stack
(``docs/architecture.md``): the policy engine's :class:`Fence`, the approval queue's
:class:`Approval` and :class:`InvocationPlan`, the stores' keys (:attr:`Principal.key`)
and the gateway's :class:`CallResult` are the same objects at every step, and no module
needs to import the pipeline to name them.

- the envelope: :class:`CallRequest` (:meth:`CallRequest.from_json`,
  :func:`validate_envelope`), its :class:`Principal` and an optional :class:`Approval`;
- what :func:`host.call.prepare.prepare` makes of it: an :class:`InvocationPlan` with
  its :class:`Preview` and the policy :class:`Fence` it was decided under;
- what a call returns: :class:`CallResult`, :class:`ErrorInfo`, :class:`Usage`.

Invariant: nothing here reads a file, a clock, the network or policy; the pydantic
models refuse extra fields, coercion and non-finite times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from host.canonical import parse_json
from host.errors import RequestInvalid, StockadeError
from host.text import has_unsafe

__all__ = [
    "MAX_ENVELOPE_BYTES",
    "Approval",
    "CallRequest",
    "CallResult",
    "ErrorInfo",
    "Fence",
    "InvocationPlan",
    "Preview",
    "Principal",
    "Usage",
    "validate_envelope",
]

MAX_ENVELOPE_BYTES = 128 * 1024  # bytes of a JSON call envelope (input budget + room)

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


def _identifier(value: str) -> str:
    """Refuse control, zero-width and bidi characters in an identifier of the envelope.

    One rule for every transport (Python, CLI, stdio, HTTP tokens, OAuth ``sub``): a NUL
    or an escape in a principal would break the stores that key on it (PostgreSQL text
    cannot hold NUL) and mislead the person who reads it in a listing or the audit log.
    """
    if has_unsafe(value):
        raise ValueError("must not contain control, zero-width or bidi characters")
    return value


class Principal(BaseModel):
    """Who is calling: a stable subject inside a project.

    Args:
        project: the project (scope of policy and secrets).
        subject: the stable subject id (a person or an agent).
        expires_at: unix time after which the principal is refused; ``None`` = no expiry.
            Must be finite: NaN and infinities are refused (NaN never expired).
    """

    model_config = _STRICT

    project: str = Field(min_length=1, max_length=128)
    subject: str = Field(min_length=1, max_length=256)
    expires_at: float | None = Field(default=None, allow_inf_nan=False)

    @field_validator("project", "subject")
    @classmethod
    def _printable(cls, value: str) -> str:
        return _identifier(value)

    @property
    def key(self) -> tuple[str, str]:
        """(project, subject): the key of rate limits, grants and secrets."""
        return (self.project, self.subject)


class Approval(BaseModel):
    """A person's approval of one exact action, issued by :class:`host.approvals.ApprovalAuthority`."""

    model_config = _STRICT

    action_digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    project: str
    subject: str
    session: str
    expires_at: float = Field(allow_inf_nan=False)
    nonce: str = Field(pattern=r"^[0-9a-f]{32}$")
    # Exactly one authenticator: ``mac`` (the local store's per-process key) or
    # ``signature`` + ``key_id`` (an approver key, stockade/approval@1: shared stores).
    mac: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    signature: str | None = Field(default=None, pattern=r"^[A-Za-z0-9+/]{86}==$")
    key_id: str | None = Field(default=None, pattern=r"^[0-9a-f]{16}$")

    @model_validator(mode="after")
    def _one_authenticator(self) -> Approval:
        signed = self.signature is not None and self.key_id is not None
        if (self.signature is None) != (self.key_id is None) or (self.mac is None) == (not signed):
            raise ValueError("an approval carries either a mac, or a signature and its key_id")
        return self


class CallRequest(BaseModel):
    """The call envelope the model (through the host app) proposes.

    ``input`` is only checked to be an object here; it is validated against the tool's
    schema after policy has allowed the call.
    """

    model_config = _STRICT

    principal: Principal
    session: str = Field(min_length=1, max_length=256)
    tool: str = Field(min_length=1, max_length=64)
    version: str = Field(min_length=1, max_length=64)
    input: dict[str, Any]
    approval: Approval | None = None

    @field_validator("session")
    @classmethod
    def _printable(cls, value: str) -> str:
        return _identifier(value)

    @classmethod
    def from_json(cls, data: bytes | str) -> CallRequest:
        """Parse an envelope from untrusted JSON.

        Raises:
            RequestInvalid: not strict JSON, too large, extra or missing fields.
        """
        try:
            raw = parse_json(data, max_bytes=MAX_ENVELOPE_BYTES)
        except StockadeError as exc:
            raise RequestInvalid(f"call envelope is not valid JSON: {exc.message}") from exc
        return validate_envelope(raw)


def validate_envelope(raw: object) -> CallRequest:
    try:
        if isinstance(raw, CallRequest):
            return raw
        return CallRequest.model_validate(raw)
    except ValidationError as exc:
        problems = [{"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]} for err in exc.errors()]
        raise RequestInvalid("call envelope is invalid", problems=problems) from exc


@dataclass(frozen=True, slots=True)
class Preview:
    """What a person sees before approving; holds no input values and no secrets."""

    tool: str
    version: str
    package: str
    package_version: str
    generation: int
    effect: str
    risk: str
    permissions: tuple[str, ...]
    hosts: tuple[str, ...]
    secrets: tuple[str, ...]
    action_digest: str
    detail: str | None = None  # a host tool's prepared effect, e.g. an edit's diff (escaped)
    rebind: Mapping[str, str] | None = None  # {"recorded", "current"}: asks because of a rebind

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``diff`` only when the tool prepared one, ``rebind`` only on a rebind)."""
        extra = ({} if self.detail is None else {"diff": self.detail}) | (
            {} if self.rebind is None else {"rebind": dict(self.rebind)})
        return extra | {
            "tool": self.tool,
            "version": self.version,
            "package": self.package,
            "package_version": self.package_version,
            "generation": self.generation,
            "effect": self.effect,
            "risk": self.risk,
            "permissions": list(self.permissions),
            "hosts": list(self.hosts),
            "secrets": list(self.secrets),
            "action_digest": self.action_digest,
        }

    def lines(self) -> list[str]:
        """The preview for a person, one field per line, every value whole: the action
        digest is never shortened (a person may compare it with an audit record)."""
        return [
            f"tool            {self.tool}@{self.version}",
            f"package         {self.package}@{self.package_version}, lock generation {self.generation}",
            f"effect / risk   {self.effect} / {self.risk}",
            f"permissions     {', '.join(self.permissions) or '-'}",
            f"may reach       {', '.join(self.hosts) or '(no network)'}",
            f"secrets         {', '.join(self.secrets) or '-'}",
            f"action digest   {self.action_digest}",
            *([] if self.detail is None else ["change", *self.detail.splitlines()]),
            *self._rebind_lines(),
        ]

    def _rebind_lines(self) -> list[str]:
        if self.rebind is None:
            return []
        recorded = self.rebind.get("recorded") or "(none: not bound)"
        return [
            "asks because    REBIND: your allow of this tool was recorded for another binding",
            f"allowed for     binding {recorded}",
            f"now bound to    binding {self.rebind.get('current') or '(unknown)'}",
            "                (what the tool can reach is listed above; compare the locks with "
            "`stockade diff OLD NEW`)",
        ]

    def __str__(self) -> str:
        return "\n".join(self.lines())


@dataclass(frozen=True, slots=True)
class InvocationPlan:
    """A prepared call: pure data (no handles, clients, files or clocks).

    ``status`` is ``ready`` or ``approval_required``. ``canonical_input`` is the
    validated, canonical input; ``action_digest`` the §7 digest; ``fence`` the policy
    versions every decision agreed on.
    """

    status: Literal["ready", "approval_required"]
    request: CallRequest
    tool: str
    version: str
    canonical_input: bytes
    input_sha256: str
    action_digest: str
    fence: Fence
    preview: Preview
    effect: Mapping[str, Any] | None = None  # a host tool's prepared effect (host.tools)
    tool_policy: Mapping[str, Any] = field(default_factory=dict)
    """How the tool policy decided (for audit records): ``mode``, ``binding`` (the tool's
    binding digest) and ``allow`` — ``"bound"`` (a user allow honoured with its binding),
    ``"rebind"`` (a user allow turned into ask: its recorded binding differs or is
    missing) or ``"none"`` (no user allow of this tool decided)."""
    discharged_by: str | None = None
    """What let the call run without asking a person now: ``policy`` (nothing asked),
    ``session_grant``, ``approval:<action digest>`` or ``scope:<id>``; ``None`` while
    an approval-required plan waits for one (every outcome record carries it)."""


@dataclass(frozen=True, slots=True)
class Fence:
    """The versions a decision was made under; deliberately unvalidated.

    :func:`host.policy.engine.check_fences` says why.

    Args:
        policy_version: version of the role definitions.
        role_binding_version: version of the role bindings.
    """

    policy_version: int
    role_binding_version: int


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A refusal as the caller sees it: stable code, message, hint, safe details."""

    code: str
    message: str
    hint: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Usage:
    """What a call consumed."""

    fuel: int = 0
    duration_ms: float = 0.0
    http_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (for audit records)."""
        return {
            "fuel": self.fuel,
            "duration_us": round(self.duration_ms * 1000),
            "http_requests": self.http_requests,
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
        }


@dataclass(frozen=True, slots=True)
class CallResult:
    """The answer to a call: ``output`` when ``ok``, else ``error``.

    ``audit_id`` is the hash of the outcome record; ``log`` the guest's captured log
    (scrubbed of staged secrets).
    """

    ok: bool
    output: Any = None
    error: ErrorInfo | None = None
    audit_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    log: str = ""
    action_digest: str | None = None
