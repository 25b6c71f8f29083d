"""Declaring and pinning an external MCP server as a tool source (docs/design.md §12).

Three documents, each versioned and parsed strictly (unknown fields refused):

- **Declaration** (``stockade.mcp/1``, written by an operator): the source ``name`` and
  ``version``, the ``transport`` (``stdio``: absolute ``command``, ``args``, optional
  ``cwd``; or ``http``: an ``https`` ``url``), the plain ``env`` it gets, the ``secrets``
  it may receive (each from the secrets store under ``secrets_scope``, delivered as an
  environment variable for stdio or an HTTP header for http, never one the host or the
  SDK sets — values never appear in the file), and its ``limits`` (call timeout, answer
  bytes, concurrent calls, optional address-space bytes for stdio).
- **Pin** (``stockade.mcp-pin/1``, written by ``stockade lock add-mcp``): the declaration
  plus, for every tool the server listed and the reviewer accepted, its remote ``name``,
  the namespaced Stockade name ``<source>.<name>``, the exact ``definition`` the server
  sent (name, title, description, inputSchema, outputSchema, annotations), its
  ``digest`` = ``sha256(canonical_json(definition))`` and the reviewer's ``effect`` and
  ``risk`` (default ``external`` / ``high``: every call asks).
- **Lock entry** (in ``stockade.lock``'s ``mcp`` list): ``name``, ``version``, ``pin``
  (relative path of the pin file), ``pin_sha256`` and an optional Ed25519 ``signature``
  by ``key_id`` over :func:`source_statement` (domain tag ``stockade/mcp-source@1``, so a
  package signature never verifies as a source signature).

A pinned tool becomes an ordinary registry entry through :func:`pinned_manifest`: a
synthetic manifest whose module digest is the pin digest, so the binding (and with it
the action digest of every call) changes whenever the pin changes. Its schemas pass the
same bounded subset as package schemas (docs/design.md §5); a tool whose schema does not is
refused at pin time, never loosened.
"""

from __future__ import annotations

import hmac
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Final, Literal, TypeVar, final

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from host._files import read_regular
from host.canonical import canonical_json, digest_json, parse_json, sha256_hex
from host.config import Ceilings
from host.errors import DigestMismatch, InputInvalid, LockInvalid, ManifestInvalid, SignatureInvalid
from host.formats.manifest import Effect, PackageManifest, Risk, is_name, is_semver
from host.formats.schemaprofile import PROFILE_EXTERNAL, unbounded
from host.signing import STATEMENT_MCP_SOURCE, signed_statement

__all__ = [
    "DECLARATION_FORMAT",
    "PIN_FORMAT",
    "SOURCE_STATEMENT",
    "HttpTransport",
    "McpDeclaration",
    "McpLimits",
    "McpLockEntry",
    "McpPin",
    "PinnedSource",
    "PinnedTool",
    "RefusedTool",
    "SecretDelivery",
    "StdioTransport",
    "effective_input_schema",
    "isolation_text",
    "load_pinned_sources",
    "namespaces_conflict",
    "pinned_manifest",
    "source_statement",
    "stockade_tool_name",
    "text_output_schema",
    "tool_digest",
    "tool_unbounded",
]

DECLARATION_FORMAT: Final = "stockade.mcp/1"
PIN_FORMAT: Final = "stockade.mcp-pin/1"
SOURCE_STATEMENT: Final = STATEMENT_MCP_SOURCE
MAX_PIN_BYTES: Final = 1024 * 1024  # bytes of one pin file (schemas of up to 128 tools)
MAX_DECLARATION_BYTES: Final = 64 * 1024  # bytes of one declaration file
MAX_CALL_TIMEOUT_MS: Final = 3_600_000  # ms, docs/design.md §3's longest tool timeout
MAX_CONCURRENT: Final = 64  # calls in flight to one server

_T = TypeVar("_T", bound=BaseModel)


def _name(value: str) -> str:
    if not is_name(value):
        raise ValueError(f"{value[:80]!r} is not a source name (lowercase segments, at most 64 chars)")
    return value


def _semver(value: str) -> str:
    if not is_semver(value):
        raise ValueError(f"{value[:80]!r} is not a canonical SemVer version")
    return value


def _sha256(value: str) -> str:
    if len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value):
        raise ValueError("must be 64 lowercase hexadecimal characters (sha256)")
    return value


def _env_name(value: str) -> str:
    if not value or not (value[0].isascii() and (value[0].isalpha() or value[0] == "_")) or not all(
        ch.isascii() and (ch.isalnum() or ch == "_") for ch in value
    ):
        raise ValueError(f"{value[:80]!r} is not an environment variable name")
    return value


_HEADER_TOKEN: Final = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)
# Headers the host or the SDK set: a credential may never replace them.
_RESERVED_HEADERS: Final = frozenset({
    "host", "content-length", "content-type", "content-encoding", "transfer-encoding", "connection",
    "accept", "accept-encoding", "cookie", "te", "upgrade", "expect", "mcp-session-id",
    "mcp-protocol-version", "mcp-method", "mcp-name", "last-event-id",
})


def _header_name(value: str) -> str:
    if not value or not set(value) <= _HEADER_TOKEN:
        raise ValueError(f"{value[:80]!r} is not an HTTP header name")
    if value.lower() in _RESERVED_HEADERS:
        raise ValueError(f"header {value!r} is set by the host; a secret cannot be sent in it")
    return value


def _plain(value: str) -> str:
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value) or "\x00" in value:
        raise ValueError("may not hold control characters")
    return value


def _absolute(value: str) -> str:
    if not value.startswith("/") or "\x00" in value:
        raise ValueError("must be an absolute path (no PATH lookup: the environment is scrubbed)")
    return value


def _pin_path(value: str) -> str:
    if value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in value.split("/")):
        raise ValueError("pin path must be relative to the lock's directory, without '..' or '.'")
    return value


class _Model(BaseModel):
    # defer_build: validators are built on first use, not at import (CLI start-up time):
    # the MCP pin models are validated only for a lock with MCP sources.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


Name = Annotated[str, AfterValidator(_name)]
SemVer = Annotated[str, AfterValidator(_semver)]
Sha256 = Annotated[str, AfterValidator(_sha256)]
EnvName = Annotated[str, Field(max_length=128), AfterValidator(_env_name)]
Plain = Annotated[str, Field(max_length=4096), AfterValidator(_plain)]


class StdioTransport(_Model):
    """``transport`` of a server the host starts as a child process (newline-delimited JSON-RPC)."""

    type: Literal["stdio"]
    command: Annotated[str, Field(min_length=2, max_length=4096), AfterValidator(_absolute)]
    args: Annotated[tuple[Plain, ...], Field(max_length=64)] = ()
    cwd: Annotated[str, Field(max_length=4096), AfterValidator(_absolute)] | None = None  # None: private dir
    # "bwrap": the server runs in the process sandbox (host/sandbox): no network, the host's
    # files absent except /usr, selected /etc files, read_paths (read-only) and its cwd.
    sandbox: Literal["native", "bwrap"] = "native"
    read_paths: Annotated[
        tuple[Annotated[str, Field(max_length=4096), AfterValidator(_absolute)], ...], Field(max_length=32)
    ] = ()

    @model_validator(mode="after")
    def _read_paths_need_sandbox(self) -> StdioTransport:
        if self.read_paths and self.sandbox != "bwrap":
            raise ValueError('read_paths need transport.sandbox = "bwrap" (a native server reads everything)')
        return self

    def identity(self) -> dict[str, Any]:
        """The transport as bound into a tool's binding digest: the native default adds no
        keys, so pins made before ``sandbox`` existed keep their bindings."""
        data = self.model_dump(mode="json")
        if self.sandbox == "native":
            data.pop("sandbox")
            data.pop("read_paths")
        return data


class HttpTransport(_Model):
    """``transport`` of a server reached over Streamable HTTP (through the egress policy)."""

    type: Literal["http"]
    url: Annotated[str, Field(min_length=9, max_length=2048), AfterValidator(_plain)]

    def identity(self) -> dict[str, Any]:
        """The transport as bound into a tool's binding digest."""
        return self.model_dump(mode="json")

    @model_validator(mode="after")
    def _https_only(self) -> HttpTransport:
        if not self.url.startswith("https://"):
            raise ValueError("an MCP server URL must be https://")
        return self


class SecretDelivery(_Model):
    """One secret the server may receive: ``env`` (stdio) or ``header`` (+ ``prefix``, http)."""

    secret: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_]{0,63}$")]
    env: EnvName | None = None
    header: Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_header_name)] | None = None
    prefix: Annotated[str, Field(max_length=64), AfterValidator(_plain)] = ""

    @model_validator(mode="after")
    def _one_place(self) -> SecretDelivery:
        if (self.env is None) == (self.header is None):
            raise ValueError("a secret goes to exactly one of 'env' or 'header'")
        return self


class SecretsScope(_Model):
    """Where in the secrets store the source's secrets live (one server serves every caller)."""

    project: Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_plain)]
    subject: Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_plain)]


class McpLimits(_Model):
    """``limits`` of one source; each is enforced by the host, never by the server."""

    call_timeout_ms: Annotated[int, Field(ge=1, le=MAX_CALL_TIMEOUT_MS)]  # ms, wall time of one call
    max_output_bytes: Annotated[int, Field(ge=1024, le=32 * 1024 * 1024)]  # bytes of one JSON-RPC message
    max_concurrent_calls: Annotated[int, Field(ge=1, le=MAX_CONCURRENT)]  # calls in flight
    memory_bytes: Annotated[int, Field(ge=16 * 1024 * 1024)] | None = None  # RLIMIT_AS of a stdio server
    startup_timeout_ms: Annotated[int, Field(ge=1, le=300_000)] = 30_000  # ms, start + handshake + list


class McpDeclaration(_Model):
    """An MCP source declaration, format ``stockade.mcp/1``. Build with :meth:`from_json`."""

    format: Literal["stockade.mcp/1"]
    name: Name
    version: SemVer
    transport: Annotated[StdioTransport | HttpTransport, Field(discriminator="type")]
    env: Annotated[dict[EnvName, Plain], Field(max_length=64)] = Field(default_factory=dict)
    secrets: Annotated[tuple[SecretDelivery, ...], Field(max_length=16)] = ()
    secrets_scope: SecretsScope | None = None
    limits: McpLimits

    @model_validator(mode="after")
    def _consistent(self) -> McpDeclaration:
        if self.secrets and self.secrets_scope is None:
            raise ValueError("'secrets' needs 'secrets_scope' (the store scope the host reads them from)")
        stdio = self.transport.type == "stdio"
        for item in self.secrets:
            if stdio and item.env is None:
                raise ValueError(f"secret {item.secret!r}: a stdio server receives secrets as 'env'")
            if not stdio and item.header is None:
                raise ValueError(f"secret {item.secret!r}: an http server receives secrets as 'header'")
            if item.env is not None and item.env in self.env:
                raise ValueError(f"secret {item.secret!r} would overwrite env {item.env!r}")
        headers = [item.header.lower() for item in self.secrets if item.header is not None]
        if len(set(headers)) != len(headers):
            raise ValueError("two secrets are sent in the same header")
        if not stdio and (self.env or self.limits.memory_bytes is not None):
            raise ValueError("'env' and 'limits.memory_bytes' apply to stdio servers only")
        return self

    @classmethod
    def from_json(cls, data: bytes) -> McpDeclaration:
        """Parse a declaration.

        Raises:
            ManifestInvalid: not strict JSON, unknown or missing fields, bad values.
        """
        return _parse(cls, data, MAX_DECLARATION_BYTES, "MCP declaration")


class PinnedTool(_Model):
    """One reviewed tool of a pinned source."""

    name: Annotated[str, Field(min_length=1, max_length=128)]  # the server's name (what the host sends)
    tool: Name  # the Stockade name: <source>.<stockade_tool_name(name)>
    digest: Sha256  # sha256(canonical_json(definition))
    definition: dict[str, Any]  # exactly what the server listed (see tool_digest)
    effect: Effect = Effect.EXTERNAL
    risk: Risk = Risk.HIGH
    # The schema profile the tool's schemas were checked against (host.formats.schemaprofile).
    schema_profile: Literal["stockade.schema-profile/external-1"] = PROFILE_EXTERNAL
    # The reviewer's tighter input schema (``add-mcp --schema TOOL=FILE``): an input must
    # satisfy it and the server's own; signed with the pin.
    review_schema: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _digest_matches(self) -> PinnedTool:
        if not hmac.compare_digest(tool_digest(self.definition), self.digest):
            raise ValueError(f"tool {self.name!r}: digest does not match its definition")
        return self


class RefusedTool(_Model):
    """A tool the server listed that the pin refused, with every reason (shown by ``inspect``
    and in the ``TOOL_NOT_FOUND`` of a call to it)."""

    name: Annotated[str, Field(min_length=1, max_length=128)]  # the server's name
    tool: Annotated[str, Field(max_length=200)]  # the Stockade name it would have had ("" if none)
    reasons: Annotated[tuple[Annotated[str, Field(max_length=400)], ...], Field(min_length=1, max_length=16)]


class McpPin(_Model):
    """A pin file, format ``stockade.mcp-pin/1``. Build with :meth:`from_json`."""

    format: Literal["stockade.mcp-pin/1"]
    source: McpDeclaration
    tools: Annotated[tuple[PinnedTool, ...], Field(max_length=128)]
    refused: Annotated[tuple[RefusedTool, ...], Field(max_length=256)] = ()

    @model_validator(mode="after")
    def _namespaced(self) -> McpPin:
        seen: set[str] = set()
        for item in self.tools:
            expected = f"{self.source.name}.{stockade_tool_name(item.name)}"
            if item.tool != expected:
                raise ValueError(f"tool {item.name!r} must be pinned as {expected}")
            if item.tool in seen:
                raise ValueError(f"tool {item.tool!r} pinned twice")
            seen.add(item.tool)
        return self

    @classmethod
    def from_json(cls, data: bytes) -> McpPin:
        """Parse a pin file.

        Raises:
            ManifestInvalid: not strict JSON, unknown or missing fields, a digest that does
                not match its definition, a tool outside the source's namespace.
        """
        return _parse(cls, data, MAX_PIN_BYTES, "MCP pin")

    def to_json(self) -> bytes:
        """RFC 8785 canonical JSON of the pin (what ``pin_sha256`` covers)."""
        return canonical_json(self.model_dump(mode="json"))


class McpLockEntry(_Model):
    """One MCP source of a lock (the lock's ``mcp`` list)."""

    name: Name
    version: SemVer
    pin: Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_pin_path)]
    pin_sha256: Sha256
    signature: Annotated[str, Field(min_length=88, max_length=88)] | None = None
    key_id: Annotated[str, Field(min_length=16, max_length=16)] | None = None

    @model_validator(mode="after")
    def _signature_and_key_together(self) -> McpLockEntry:
        if (self.signature is None) != (self.key_id is None):
            raise ValueError("signature and key_id must both be set or both be null")
        return self


def _parse(cls: type[_T], data: bytes, limit: int, what: str) -> _T:
    if len(data) > limit:
        raise ManifestInvalid(f"{what} is {len(data)} bytes, over {limit}")
    try:
        parse_json(data, max_bytes=limit)
        return cls.model_validate_json(data, strict=True)
    except InputInvalid as exc:
        raise ManifestInvalid(f"{what} is not strict JSON: {exc.message}") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(document)"
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ManifestInvalid(f"{what} is invalid: {loc}: {msg}") from None


# --- digests and statements -------------------------------------------------------------

_DEFINITION_KEYS: Final = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")


def tool_digest(definition: Mapping[str, Any]) -> str:
    """``sha256(canonical_json(definition))`` over the fields a tool's meaning depends on.

    ``definition`` is reduced to ``name``, ``title``, ``description``, ``inputSchema``,
    ``outputSchema`` and ``annotations`` (absent ones as ``null``), so a server changing
    any of them — the rug pull — changes the digest, while ``_meta`` or icons do not.
    """
    return digest_json({key: definition.get(key) for key in _DEFINITION_KEYS})


def definition_of(live: Mapping[str, Any]) -> dict[str, Any]:
    """The pinned form of a tool the server listed (the digested fields only)."""
    return {key: live.get(key) for key in _DEFINITION_KEYS}


def source_statement(name: str, version: str, pin_sha256: str) -> bytes:
    """The exact bytes a source signature covers (domain tag ``stockade/mcp-source@1``)."""
    return signed_statement(SOURCE_STATEMENT, {"source": name, "version": version, "pin_sha256": pin_sha256})


def stockade_tool_name(remote: str) -> str:
    """The Stockade name of a server's tool name (deterministic; collisions are refused at pin).

    camelCase is split (``getTinyImage`` → ``get-tiny-image``), letters are lower-cased,
    every run of characters other than ``[a-z0-9]`` becomes one ``-`` (``read_text_file``
    → ``read-text-file``, ``a.b`` → ``a-b``), and leading/trailing separators are dropped.
    The result may still not be a Stockade name (empty, leading digit, over 64
    characters); :func:`host.formats.manifest.is_name` decides, and the tool is refused if not.
    """
    text = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", remote[:200])
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def namespaces_conflict(a: str, b: str) -> bool:
    """Whether tool names under namespace ``a`` could collide with names under ``b``.

    ``tracker`` and ``tracker`` conflict, and so do ``tracker`` and ``tracker.issues``
    (``tracker.issues.list`` would be in both); ``tracker`` and ``tracker2`` do not.
    """
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


# --- the synthetic manifest ----------------------------------------------------------------


def isolation_text(decl: McpDeclaration) -> str:
    """What the host can and cannot bound about a source (approval preview, ``inspect``)."""
    if decl.transport.type == "stdio" and decl.transport.sandbox == "bwrap":
        return ("a process in the bubblewrap sandbox: no network, only the system directories, its "
                "read_paths and its working directory; the host also bounds its environment, call timeout, "
                "answer size and concurrent calls")
    if decl.transport.type == "stdio":
        return ("a native process, not a sandbox: it may reach anything the host user can (files, network, "
                "other processes); the host bounds only its environment, working directory, process group, "
                "call timeout, answer size and concurrent calls")
    return ("a remote server reached through the egress rules: the host bounds the connection, call timeout, "
            "answer size and concurrent calls, not what the server does on its side")


def text_output_schema(max_bytes: int) -> dict[str, Any]:
    """The output schema of a tool without ``outputSchema``: its text content, joined, and
    its other content blocks (image, audio, resource, resource_link), typed, if any."""
    block = {
        "type": "object",
        "required": ["type"],
        "properties": {
            "type": {"enum": ["image", "audio", "resource", "resource_link"]},
            "data": {"type": "string", "maxLength": max_bytes},
            "mimeType": {"type": "string", "maxLength": 256},
            "uri": {"type": "string", "maxLength": 4096},
            "name": {"type": "string", "maxLength": 1024},
            "title": {"type": "string", "maxLength": 1024},
            "description": {"type": "string", "maxLength": 4096},
            "size": {"type": "integer", "minimum": 0},
            "resource": {"type": "object", "additionalProperties": False, "properties": {
                "uri": {"type": "string", "maxLength": 4096},
                "mimeType": {"type": "string", "maxLength": 256},
                "text": {"type": "string", "maxLength": max_bytes},
                "blob": {"type": "string", "maxLength": max_bytes},
            }},
        },
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string", "maxLength": max_bytes},
            "content": {"type": "array", "maxItems": 256, "items": block},
        },
        "required": ["text"],
    }


def effective_input_schema(tool: PinnedTool) -> Any:
    """The input schema a call must satisfy: the server's, and the reviewer's tighter one.

    The reviewer's schema joins the server's ``allOf`` at the root, so both apply and the
    server's local ``$ref`` still resolve (a review schema holds no ``$ref`` of its own).
    """
    server = tool.definition.get("inputSchema")
    if tool.review_schema is None or not isinstance(server, dict):
        return server
    review = {k: v for k, v in tool.review_schema.items() if k != "$schema"}
    return {**server, "allOf": [*server.get("allOf", []), review]}


def tool_unbounded(tool: PinnedTool) -> list[str]:
    """What a pinned tool's input schema leaves open, after the reviewer's tightening."""
    server = tool.definition.get("inputSchema")
    return unbounded(server, review=tool.review_schema) if isinstance(server, dict) else []


def _spec(source: McpDeclaration, tool: PinnedTool, ceilings: Ceilings) -> dict[str, Any]:
    definition = tool.definition
    output = definition.get("outputSchema")
    description = definition.get("description") or definition.get("title") or tool.name
    timeout_s = max(1, math.ceil(source.limits.call_timeout_ms / 1000))
    return {
        "name": tool.tool,
        "version": source.version,
        "description": str(description)[:4096],
        "schema_profile": tool.schema_profile,
        "input_schema": effective_input_schema(tool),
        "output_schema": output if output is not None else text_output_schema(ceilings.max_output_bytes),
        "effect": tool.effect.value,
        "risk": tool.risk.value,
        "permissions": [],
        "timeout_s": min(timeout_s, ceilings.tool_timeout_s),
    }


def pinned_manifest(
    source: McpDeclaration, tools: Sequence[PinnedTool], pin_sha256: str, *, ceilings: Ceilings
) -> PackageManifest:
    """The manifest under which ``tools`` enter the frozen registry.

    Its module digest is ``pin_sha256`` (the binding then names the pin), it has no
    ``http.allow`` (a call to a source never gets the host's egress) and its ``timeout_ms``
    is the source's call timeout.

    Raises:
        ManifestInvalid: a tool's name or schemas leave Stockade's rules (docs/design.md §3, §5).
    """
    doc = {
        "format": "stockade.manifest/1",
        "package": {"name": source.name, "version": source.version,
                    "description": f"MCP source: {isolation_text(source)}"},
        "module": {"file": "module.wasm", "sha256": pin_sha256, "world": "stockade:plugin/tool@1.0.0"},
        "limits": {
            "fuel": 1,
            "memory_bytes": 65536,
            "timeout_ms": min(source.limits.call_timeout_ms, ceilings.timeout_ms),
            "max_http_requests": 0,
            "max_log_bytes": 1,  # no log: a source has none, but SandboxLimits needs > 0
        },
        "http": {
            "allow": [], "credentials": [], "max_request_bytes": 0, "max_response_bytes": 0, "timeout_ms": 1,
        },
        "tools": [_spec(source, tool, ceilings) for tool in tools],
    }
    return PackageManifest.from_json(canonical_json(doc), ceilings=ceilings, external_schemas=True)


# --- loading from a lock ---------------------------------------------------------------------


@final
@dataclass(frozen=True, slots=True)
class PinnedSource:
    """One verified source of a lock: its entry, pin, synthetic manifest."""

    entry: McpLockEntry
    pin: McpPin = field(repr=False)
    manifest: PackageManifest = field(repr=False)


def load_pinned_sources(
    lock_path: Path,
    entries: Sequence[McpLockEntry],
    *,
    ceilings: Ceilings,
    require_signatures: bool,
    keys: Any,
) -> tuple[PinnedSource, ...]:
    """Read and verify every source a lock names (digest, then signature, then parse).

    Raises:
        LockInvalid: unreadable pin file, or a pin naming another source or version.
        DigestMismatch: a pin file does not match ``pin_sha256``.
        SignatureInvalid: a signature is missing where required, by an untrusted key, or bad.
        ManifestInvalid: a (digest-verified) pin is invalid.
    """
    base = Path(lock_path).parent.resolve()
    loaded = []
    for entry in entries:
        path = (base / PurePosixPath(entry.pin)).resolve()
        if base not in path.parents:
            raise LockInvalid(f"pin of MCP source {entry.name} resolves outside the lock's directory")
        data = read_regular(path, MAX_PIN_BYTES, what="MCP pin file", error=LockInvalid)
        actual = sha256_hex(data)
        if not hmac.compare_digest(actual, entry.pin_sha256):
            raise DigestMismatch(
                f"pin of MCP source {entry.name} has sha256 {actual}, the lock pins {entry.pin_sha256}",
                package=entry.name, file=entry.pin, expected=entry.pin_sha256, actual=actual,
            )
        if require_signatures or entry.signature is not None:
            _verify(entry, keys)
        pin = McpPin.from_json(data)
        if (pin.source.name, pin.source.version) != (entry.name, entry.version):
            raise LockInvalid(
                f"lock entry {entry.name}@{entry.version} points at the pin of {pin.source.name}"
            )
        manifest = pinned_manifest(pin.source, pin.tools, entry.pin_sha256, ceilings=ceilings)
        loaded.append(PinnedSource(entry=entry, pin=pin, manifest=manifest))
    return tuple(loaded)


def _verify(entry: McpLockEntry, keys: Any) -> None:
    who = f"MCP source {entry.name}@{entry.version}"
    if keys is None or entry.signature is None or entry.key_id is None:
        raise SignatureInvalid(f"{who} is not signed, or no trusted keys are configured", package=entry.name)
    keys.verify_statement(
        source_statement(entry.name, entry.version, entry.pin_sha256),
        signature=entry.signature, key_id=entry.key_id, what=who,
    )
