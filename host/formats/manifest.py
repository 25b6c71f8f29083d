"""Package manifest models: ``bundle/manifest.json``, format ``stockade.manifest/1`` (docs/design.md §3).

The manifest is untrusted input. :meth:`PackageManifest.from_json` is the only edge: it
parses the bytes strictly (no duplicate keys, no NaN, at most 1 MiB), validates them into
frozen models, and raises :class:`~host.errors.ManifestInvalid` listing *every* problem it
found, each as ``{"loc": "tools.0.name", "msg": "..."}``. Code after the edge never
re-checks a manifest.

Invariants of a valid manifest:

- no unknown field anywhere; every closed set is an enum or a literal;
- package and tool names match ``^[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*$`` (at most 64
  characters) and every tool name starts with the package name and a dot
  (``tracker.list-issues`` in package ``tracker``), so two packages can never define
  the same tool;
- versions are canonical SemVer 2.0.0 (``1.2.0``, ``1.2.0-rc.1+build.5``; never
  ``v1.2.0``, ``1.2`` or ``01.2.0``);
- every limit is at most the host ceiling (:class:`~host.config.Ceilings`): a manifest
  asking for more is refused, never clamped;
- every allow entry and credential host is a valid host pattern, every path prefix is
  already in normal form (docs/design.md §8): a bad entry makes the manifest invalid, it never
  widens scope;
- every credential host is admitted by some allow entry (same scheme, host and port; a
  wildcard credential host needs a wildcard allow entry with the same suffix);
- tool schemas are inside the bounded subset (``check_schema``), the input root is an
  object, ``sensitive_params`` name top-level input properties.

Example::

    manifest = PackageManifest.from_json(Path("bundle/manifest.json").read_bytes())
    manifest.tools[0].effect is Effect.READ
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import Enum
from typing import Annotated, Any, Final, Literal, NoReturn

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
)

from host.canonical import canonical_json, parse_json
from host.config import DEFAULT_CEILINGS, Ceilings
from host.egress.urls import (
    HostPattern,
    NormalizedUrl,
    make_host_pattern,
    normalize_path_prefix,
    normalize_url,
    parse_host_pattern,
    path_matches,
)
from host.errors import EgressDenied, InputInvalid, ManifestInvalid, SchemaInvalid
from host.formats.relpath import parse_path
from host.formats.schema import check_schema
from host.formats.schemaprofile import PROFILE_EXTERNAL, check_external

__all__ = [
    "HTTP_METHODS",
    "MANIFEST_FORMAT",
    "MAX_MANIFEST_BYTES",
    "SUPPORTED_WORLDS",
    "AllowEntry",
    "BasicLocation",
    "BearerLocation",
    "CredentialLocation",
    "CredentialMapping",
    "Effect",
    "HeaderLocation",
    "HttpConfig",
    "Limits",
    "ModuleInfo",
    "OAuthConfig",
    "PackageInfo",
    "PackageManifest",
    "QueryLocation",
    "RateLimit",
    "Risk",
    "ToolSpec",
    "WorkspaceAccess",
    "is_name",
    "is_semver",
]

MANIFEST_FORMAT: Final = "stockade.manifest/1"
# 1.1.0 is what `stockade build` targets; a 1.0.0 manifest stays readable, but its
# component is refused at load with a rebuild hint (host.runtime.checks).
SUPPORTED_WORLDS: Final = ("stockade:plugin/tool@1.0.0", "stockade:plugin/tool@1.1.0")
MAX_MANIFEST_BYTES: Final = 1024 * 1024  # bytes; a manifest is metadata, never data
MAX_PROBLEMS: Final = 100  # problems listed in one ManifestInvalid; the rest are counted
MAX_TOOLS: Final = 128  # docs/design.md §5; Ceilings.max_tools may only lower it
MAX_PERMISSIONS: Final = 16  # docs/design.md §3; Ceilings.max_permissions may only lower it
MAX_TOOL_TIMEOUT_S: Final = 3600  # docs/design.md §3
MAX_WORKSPACE_PATHS: Final = 16  # entries of workspace.read
MAX_WORKSPACE_PATH_CHARS: Final = 1024  # characters of one workspace.read entry
HTTP_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")

_NAME_RE: Final = re.compile(r"[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*")
_SECRET_RE: Final = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SHA256_RE: Final = re.compile(r"[0-9a-f]{64}")
# RFC 9110 §5.6.2 token characters.
_TOKEN_RE: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SCOPE_RE: Final = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
# semver.org's recommended expression, with ASCII digits only ("\d" is Unicode in Python).
_SEMVER_RE: Final = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
    r"(?:\.(?:0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
# Headers a credential must never be written into: routing and message framing
# (request smuggling), besides the ones the egress layer already owns.
_FORBIDDEN_CREDENTIAL_HEADERS: Final = frozenset(
    {
        "host", "content-length", "transfer-encoding", "connection", "te", "trailer",
        "upgrade", "keep-alive", "proxy-connection", "expect",
    }
)


def is_name(text: str) -> bool:
    """Whether ``text`` is a package or tool name (lowercase segments, at most 64 characters).

    Args:
        text: the candidate name.

    Returns:
        True for ``tracker`` or ``tracker.list-issues``; False for ``Tracker`` or ``a..b``.
    """
    return len(text) <= 64 and _NAME_RE.fullmatch(text) is not None


def is_semver(text: str) -> bool:
    """Whether ``text`` is an exact, canonical SemVer 2.0.0 version.

    Args:
        text: the candidate version.

    Returns:
        True for ``1.2.0`` or ``1.0.0-rc.1+b.7``; False for ``v1.0.0``, ``1.0``, ``01.0.0``.
    """
    return len(text) <= 128 and _SEMVER_RE.fullmatch(text) is not None


# --- field checks (each raises ValueError, which pydantic records with its location) ---


def _check_name(value: str) -> str:
    if not is_name(value):
        raise ValueError(
            f"{value[:80]!r} is not a name: use lowercase segments like 'tracker.list-issues' "
            "(a-z, 0-9, separated by '.', '_' or '-'), at most 64 characters"
        )
    return value


def _check_semver(value: str) -> str:
    if not is_semver(value):
        raise ValueError(
            f"{value[:80]!r} is not a canonical SemVer 2.0.0 version such as '1.2.0' "
            "(no 'v', no leading zeros, three numbers)"
        )
    return value


def _check_secret_name(value: str) -> str:
    if _SECRET_RE.fullmatch(value) is None:
        raise ValueError(f"{value[:80]!r} is not a secret name (^[a-z][a-z0-9_]{{0,63}}$)")
    return value


def _check_sha256(value: str) -> str:
    if _SHA256_RE.fullmatch(value) is None:
        raise ValueError("must be 64 lowercase hexadecimal characters (sha256)")
    return value


def _check_plain_text(value: str) -> str:
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise ValueError("must not contain control characters (CR/LF would inject headers)")
    return value


def _check_path_prefix(value: str) -> str:
    try:
        normal = normalize_path_prefix(value)
    except ValueError as exc:
        raise ValueError(f"{value[:200]!r} is not a valid path prefix: {exc}") from None
    if normal != value:
        raise ValueError(f"path prefix {value[:200]!r} is not in normal form; write {normal!r}")
    return value


def _check_credential_host(value: str) -> str:
    try:
        parse_host_pattern(value)
    except ValueError as exc:
        raise ValueError(f"{value[:200]!r} is not a valid host pattern: {exc}") from None
    return value


def _check_allow_host(value: str, info: ValidationInfo) -> str:
    # The port does not change whether a host is valid; the scheme is read if it was valid.
    scheme = info.data.get("scheme", "https")
    try:
        make_host_pattern(scheme, value, None)
    except ValueError as exc:
        raise ValueError(f"{value[:200]!r} is not a valid host pattern: {exc}") from None
    return value


def _check_token(value: str) -> str:
    if _TOKEN_RE.fullmatch(value) is None:
        raise ValueError(f"{value[:80]!r} is not an HTTP token (RFC 9110 §5.6.2)")
    return value


def _check_username(value: str) -> str:
    _check_plain_text(value)
    if ":" in value:
        raise ValueError("a basic-auth username may not contain ':' (RFC 7617)")
    return value


def _check_homepage(value: str) -> str:
    _check_plain_text(value)
    if not value.startswith(("https://", "http://")) or " " in value:
        raise ValueError("homepage must be an absolute http(s) URL")
    return value


def _ceilings(info: ValidationInfo) -> Ceilings:
    context = info.context
    if isinstance(context, dict) and isinstance(context.get("ceilings"), Ceilings):
        return context["ceilings"]  # type: ignore[no-any-return]  # checked just above
    return DEFAULT_CEILINGS


def _ceiling(field: str, *, hard: int | None = None) -> AfterValidator:
    """A validator refusing a value above ``Ceilings.<field>`` (and above ``hard``)."""

    def check(value: int, info: ValidationInfo) -> int:
        limit = getattr(_ceilings(info), field)
        if hard is not None:
            limit = min(limit, hard)
        if value > limit:
            raise ValueError(
                f"{value} is over the host ceiling {limit} (Ceilings.{field}); "
                "the host refuses a manifest over a ceiling, it does not clamp it"
            )
        return value

    return AfterValidator(check)


def _unique(value: tuple[str, ...]) -> tuple[str, ...]:
    seen: set[str] = set()
    for item in value:
        if item in seen:
            raise ValueError(f"{item!r} is listed twice")
        seen.add(item)
    return value


def _check_permissions(value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
    limit = min(_ceilings(info).max_permissions, MAX_PERMISSIONS)
    if len(value) > limit:
        raise ValueError(f"{len(value)} permissions, at most {limit} are allowed")
    return _unique(value)


def _schema_checker(*, root_object: bool) -> AfterValidator:
    def check(value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        try:
            if info.data.get("schema_profile") == PROFILE_EXTERNAL:
                context = info.context
                if not (isinstance(context, dict) and context.get("external_schemas") is True):
                    raise ValueError("only a pinned MCP tool uses the external schema profile")
                check_external(value, root_object=root_object)
            else:
                check_schema(value, root_object=root_object)
        except SchemaInvalid as exc:
            pointer = exc.details.get("pointer", "")
            rule = exc.details.get("rule", "")
            raise ValueError(f"schema outside the subset at {pointer!r} ({rule}): {exc.message}") from None
        return value

    return AfterValidator(check)


def _check_workspace_path(value: str) -> str:
    try:
        normal = parse_path(value).text
    except InputInvalid as exc:
        raise ValueError(exc.message) from None
    if normal != value:
        raise ValueError(f"{value!r} is not in normal form (write {normal!r})")
    return value


def _check_workspace_paths(value: tuple[str, ...]) -> tuple[str, ...]:
    _unique(value)
    for path in value:
        for other in value:
            if other != path and (other == "." or path.startswith(other + "/")):
                raise ValueError(f"{path!r} is already covered by {other!r}")
    return value


Name = Annotated[str, AfterValidator(_check_name)]
SemVer = Annotated[str, AfterValidator(_check_semver)]
Sha256Hex = Annotated[str, AfterValidator(_check_sha256)]
SecretName = Annotated[str, AfterValidator(_check_secret_name)]
Token = Annotated[str, Field(min_length=1, max_length=128), AfterValidator(_check_token)]
PathPrefix = Annotated[str, Field(min_length=1, max_length=1024), AfterValidator(_check_path_prefix)]
CredentialHost = Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_check_credential_host)]
Method = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
Description = Annotated[str, Field(max_length=4096)]
JsonSchema = dict[str, Any]
WorkspacePath = Annotated[
    str, Field(min_length=1, max_length=MAX_WORKSPACE_PATH_CHARS), AfterValidator(_check_workspace_path)
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Effect(str, Enum):
    """What a tool does to the world; ``read`` is allowed by default, the rest ask (docs/design.md §6)."""

    READ = "read"
    WRITE = "write"
    EXECUTE = "execute"
    EXTERNAL = "external"


class Risk(str, Enum):
    """The author's statement of how much harm a wrong call can do."""

    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    CRITICAL = "critical"  # the hard floor: a person approves every call (no grant, no scope)


class PackageInfo(_Model):
    """``package``: the identity of the package (its name prefixes every tool name)."""

    name: Name
    version: SemVer
    description: Description = ""
    homepage: Annotated[str, Field(max_length=2048), AfterValidator(_check_homepage)] | None = None


class ModuleInfo(_Model):
    """``module``: the component file of the bundle, its digest and its WIT world."""

    file: Literal["module.wasm"]
    sha256: Sha256Hex
    world: Literal["stockade:plugin/tool@1.0.0", "stockade:plugin/tool@1.1.0"]


class Limits(_Model):
    """``limits``: per-call sandbox limits, each at most its host ceiling."""

    fuel: Annotated[int, Field(ge=1), _ceiling("fuel")]  # wasm fuel units
    memory_bytes: Annotated[int, Field(ge=65536), _ceiling("memory_bytes")]  # bytes
    timeout_ms: Annotated[int, Field(ge=1), _ceiling("timeout_ms")]  # ms
    max_http_requests: Annotated[int, Field(ge=0), _ceiling("max_http_requests")]  # requests
    max_log_bytes: Annotated[int, Field(ge=0), _ceiling("max_log_bytes")]  # bytes


class AllowEntry(_Model):
    """One ``http.allow`` entry: scheme, host pattern, port, path prefix and methods."""

    scheme: Literal["https", "http"]
    host: Annotated[str, Field(min_length=1, max_length=300), AfterValidator(_check_allow_host)]
    port: Annotated[int, Field(ge=1, le=65535)] | None = None  # None: the scheme's default
    path_prefix: PathPrefix
    methods: Annotated[tuple[Method, ...], Field(min_length=1), AfterValidator(_unique)]
    # Whether requests this entry admits carry the W3C trace context (traceparent,
    # tracestate) of the call's egress span. Off by default: a trace id is metadata that
    # links the request to everything else the host did in the trace, which a third party
    # should learn only when the author (and the reviewer of the lock) chose to send it.
    propagate_trace: bool = False

    def host_pattern(self) -> HostPattern:
        """The entry's scheme, host and port as a :class:`HostPattern` (valid by construction)."""
        return make_host_pattern(self.scheme, self.host, self.port)



class BearerLocation(_Model):
    """``Authorization: Bearer <secret>``."""

    type: Literal["bearer"]


class BasicLocation(_Model):
    """``Authorization: Basic base64(username:secret)``."""

    type: Literal["basic"]
    username: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_check_username)]


def _check_header_name(value: str) -> str:
    if value.lower() in _FORBIDDEN_CREDENTIAL_HEADERS:
        raise ValueError(f"a credential may not be written into the {value!r} header")
    return value


class HeaderLocation(_Model):
    """``<name>: <prefix><secret>``."""

    type: Literal["header"]
    name: Annotated[Token, AfterValidator(_check_header_name)]
    prefix: Annotated[str, Field(max_length=64), AfterValidator(_check_plain_text)] = ""


class QueryLocation(_Model):
    """``?<name>=<secret>`` appended to the query."""

    type: Literal["query"]
    name: Token


CredentialLocation = Annotated[
    BearerLocation | BasicLocation | HeaderLocation | QueryLocation, Field(discriminator="type")
]


def _check_token_url(value: str) -> str:
    try:
        url = normalize_url(value)
    except EgressDenied as exc:
        raise ValueError(f"{value[:200]!r} is not a valid token URL: {exc.message}") from None
    if url.scheme != "https":
        raise ValueError(f"token URL {value[:200]!r} must be https (it carries the client secret)")
    if url.query:
        raise ValueError(f"token URL {value[:200]!r} must not have a query")
    return value


def _check_scope_token(value: str) -> str:
    # RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
    if _SCOPE_RE.fullmatch(value) is None:
        raise ValueError(f"{value[:80]!r} is not an OAuth scope token (RFC 6749 §3.3)")
    return value


ScopeToken = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_check_scope_token)]


class OAuthConfig(_Model):
    """``oauth`` of a credential mapping: the host obtains and refreshes the access token.

    The mapping's secret then holds the token state (``stockade.oauth-token/1`` JSON, written
    by ``stockade secrets oauth-login`` or by the host itself); ``client`` names the secret
    holding ``{"client_id": ..., "client_secret": ...}``. Nothing secret is in the manifest.
    """

    grant: Literal["refresh_token", "client_credentials"]
    token_url: Annotated[str, Field(min_length=1, max_length=2048), AfterValidator(_check_token_url)]
    scopes: Annotated[tuple[ScopeToken, ...], Field(max_length=64), AfterValidator(_unique)] = ()
    client: SecretName
    authorize_url: Annotated[
        str, Field(min_length=1, max_length=2048), AfterValidator(_check_token_url)
    ] | None = None
    device_url: Annotated[
        str, Field(min_length=1, max_length=2048), AfterValidator(_check_token_url)
    ] | None = None

    def token_target(self) -> NormalizedUrl:
        """The normalized token URL (valid by construction)."""
        return normalize_url(self.token_url)


class CredentialMapping(_Model):
    """One ``http.credentials`` entry: which secret goes where, for which hosts and paths."""

    secret: SecretName
    location: CredentialLocation
    hosts: Annotated[tuple[CredentialHost, ...], Field(min_length=1, max_length=16), AfterValidator(_unique)]
    path_prefixes: Annotated[
        tuple[PathPrefix, ...], Field(min_length=1, max_length=16), AfterValidator(_unique)
    ]
    optional: bool = False
    oauth: OAuthConfig | None = None


class HttpConfig(_Model):
    """``http``: the allowlist, the credential mappings and the egress byte/time limits."""

    allow: Annotated[tuple[AllowEntry, ...], Field(max_length=64)]
    credentials: Annotated[tuple[CredentialMapping, ...], Field(max_length=64)] = ()
    # Hosts the HOST may POST OAuth token requests to (never the guest); a token URL must
    # be admitted by one of these or by an ``allow`` entry.
    token_hosts: Annotated[
        tuple[CredentialHost, ...], Field(max_length=16), AfterValidator(_unique)
    ] = ()
    max_request_bytes: Annotated[int, Field(ge=0), _ceiling("max_request_bytes")]  # bytes
    max_response_bytes: Annotated[int, Field(ge=0), _ceiling("max_response_bytes")]  # bytes
    timeout_ms: Annotated[int, Field(ge=1), _ceiling("http_timeout_ms")]  # ms


class RateLimit(_Model):
    """``rate_limit``: calls per (principal, tool) per minute and per hour."""

    per_minute: Annotated[int, Field(ge=1, le=1_000_000)]
    per_hour: Annotated[int, Field(ge=1, le=1_000_000)]


class ToolSpec(_Model):
    """One ``tools`` entry: everything the host needs to decide about a call to it."""

    name: Name
    version: SemVer
    description: Annotated[str, Field(min_length=1, max_length=4096)]
    # None: the bounded subset (docs/design.md §5). The external profile (host.formats.schemaprofile) is
    # only accepted for the synthetic manifest of a pinned MCP source, never from a bundle.
    schema_profile: Literal["stockade.schema-profile/external-1"] | None = None
    input_schema: Annotated[JsonSchema, _schema_checker(root_object=True)]
    output_schema: Annotated[JsonSchema, _schema_checker(root_object=False)] | None = None
    effect: Effect
    risk: Risk
    permissions: Annotated[tuple[Name, ...], AfterValidator(_check_permissions)]
    timeout_s: Annotated[int, Field(ge=1, le=MAX_TOOL_TIMEOUT_S), _ceiling("tool_timeout_s")]
    sensitive_params: Annotated[tuple[str, ...], Field(max_length=64), AfterValidator(_unique)] = ()
    rate_limit: RateLimit | None = None


class WorkspaceAccess(_Model):
    """``workspace``: the parts of the principal's workspace the package's tools may read.

    Each entry is a directory relative to the workspace root the operator granted to the
    calling principal (the grammar of :mod:`host.formats.relpath`, already in normal
    form; ``.`` is the whole root; no entry beneath another). A call gets each as a
    read-only WASI preopen at ``/workspace/<path>`` (``/workspace`` for ``.``) only when
    the operator granted that principal a root; a package never chooses the root, and
    never gets write access (edits go through the host's ``fs.*`` tools, where the person
    approves the diff).
    """

    read: Annotated[
        tuple[WorkspacePath, ...],
        Field(min_length=1, max_length=MAX_WORKSPACE_PATHS),
        AfterValidator(_check_workspace_paths),
    ]


class PackageManifest(_Model):
    """The whole ``manifest.json`` of a bundle (docs/design.md §3).

    Build one only with :meth:`from_json`; it reports every problem at once.
    """

    format: Literal["stockade.manifest/1"]
    package: PackageInfo
    module: ModuleInfo
    limits: Limits
    http: HttpConfig
    tools: tuple[ToolSpec, ...]
    workspace: WorkspaceAccess | None = None  # None: the package reads no workspace files

    @classmethod
    def from_json(
        cls, data: bytes | str, *, ceilings: Ceilings = DEFAULT_CEILINGS, external_schemas: bool = False
    ) -> PackageManifest:
        """Parse and validate manifest bytes.

        Args:
            data: the bytes of ``manifest.json`` (strict JSON, UTF-8, at most 1 MiB).
            ceilings: the host-wide ceilings every limit must stay under.
            external_schemas: accept tools with ``schema_profile`` external-1; only the
                synthetic manifest of a pinned MCP source sets it (a bundle never may).

        Raises:
            ManifestInvalid: with ``details["problems"]`` listing every problem found, each
                ``{"loc": "tools.0.name", "msg": "..."}`` (``loc`` is ``""`` for the whole
                document).

        Returns:
            The valid, frozen manifest.
        """
        raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
        if not isinstance(raw, bytes):
            raise TypeError("PackageManifest.from_json takes bytes")
        if len(raw) > MAX_MANIFEST_BYTES:
            _raise([{"loc": "", "msg": f"manifest is {len(raw)} bytes, over {MAX_MANIFEST_BYTES}"}])
        try:
            value = parse_json(raw, max_bytes=MAX_MANIFEST_BYTES)
        except InputInvalid as exc:
            _raise([{"loc": "", "msg": f"not strict JSON: {exc.message}"}])
        if not isinstance(value, dict):
            _raise([{"loc": "", "msg": "the manifest must be a JSON object"}])
        problems: list[dict[str, str]] = []
        manifest: PackageManifest | None = None
        try:
            # JSON mode keeps strictness (no "1" for 1, no 1.0 for 1, no true for 1) while
            # accepting arrays for tuples and values for enums; the strict parse above has
            # already refused duplicate keys, NaN and lone surrogates.
            manifest = cls.model_validate_json(
                raw, strict=True, context={"ceilings": ceilings, "external_schemas": external_schemas}
            )
        except ValidationError as exc:
            problems.extend(_pydantic_problems(exc))
        problems.extend(_cross_problems(value, ceilings))
        if problems or manifest is None:
            _raise(problems or [{"loc": "", "msg": "invalid manifest"}])
        return manifest

    def to_json(self) -> bytes:
        """The manifest as RFC 8785 canonical JSON bytes."""
        doc = self.model_dump(mode="json")
        if doc.get("workspace") is None:  # a package's bytes stay as before the field existed
            doc.pop("workspace", None)
        for entry in doc["http"]["allow"]:  # a package's bytes stay as before the trace field existed
            if entry.get("propagate_trace") is False:
                entry.pop("propagate_trace")
        for tool in doc["tools"]:  # a package's bytes stay as before the profile field existed
            if tool.get("schema_profile") is None:
                tool.pop("schema_profile", None)
        return canonical_json(doc)


def _raise(problems: list[dict[str, str]]) -> NoReturn:
    total = len(problems)
    shown = problems[:MAX_PROBLEMS]
    if total > MAX_PROBLEMS:
        shown.append({"loc": "", "msg": f"... and {total - MAX_PROBLEMS} more problems"})
    summary = "; ".join(f"{p['loc'] or '(document)'}: {p['msg']}" for p in shown[:3])
    more = f" (and {total - 3} more)" if total > 3 else ""
    raise ManifestInvalid(
        f"manifest has {total} problem{'s' if total != 1 else ''}: {summary}{more}", problems=shown
    )


def _pydantic_problems(exc: ValidationError) -> Iterator[dict[str, str]]:
    errors = exc.errors(include_url=False)
    failed_items = {error["loc"][:-1] for error in errors if error["loc"]}
    for error in errors:
        if error["type"] == "too_short" and error["loc"] in failed_items:
            continue  # "at least 1 item" only because its items were refused: noise
        loc = ".".join(str(part) for part in error["loc"])
        msg = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] in ("literal_error", "enum"):
            msg = f"{msg}, got {_shown(error.get('input'))}"  # name the refused value
        yield {"loc": loc, "msg": msg}


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "…"


# --- cross-field checks, run on the parsed JSON so that they are reported even when
# --- other fields are broken (every problem is listed, not just the first).


def _cross_problems(doc: dict[str, Any], ceilings: Ceilings) -> list[dict[str, str]]:
    problems: list[dict[str, str]] = []
    tools = doc.get("tools")
    package = doc.get("package")
    package_name = package.get("name") if isinstance(package, dict) else None
    if isinstance(tools, list):
        limit = min(ceilings.max_tools, MAX_TOOLS)
        if len(tools) > limit:
            problems.append({"loc": "tools", "msg": f"{len(tools)} tools, at most {limit} are allowed"})
        problems.extend(_tool_name_problems(tools, package_name))
        problems.extend(_sensitive_param_problems(tools))
    http = doc.get("http")
    if isinstance(http, dict):
        problems.extend(_credential_host_problems(http))
        problems.extend(_token_url_problems(http))
    workspace = doc.get("workspace")
    if isinstance(workspace, dict) and set(workspace) - {"read"}:
        problems.append({
            "loc": "workspace",
            "msg": "a package gets only read access to the workspace (`read`); changes go through the "
            "host's fs.edit_file / fs.write_file, whose diff a person approves",
        })
    return problems


def _tool_name_problems(tools: list[Any], package_name: Any) -> Iterator[dict[str, str]]:
    first_index: dict[str, int] = {}
    prefix_ok = isinstance(package_name, str) and is_name(package_name)
    for index, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str):
            continue
        loc = f"tools.{index}.name"
        if name in first_index:
            yield {"loc": loc, "msg": f"duplicate tool name {name!r} (also tools.{first_index[name]})"}
        else:
            first_index[name] = index
        if prefix_ok and is_name(name) and not name.startswith(f"{package_name}."):
            yield {"loc": loc, "msg": f"tool name {name!r} must start with {package_name + '.'!r}"}


def _sensitive_param_problems(tools: list[Any]) -> Iterator[dict[str, str]]:
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            continue
        params = tool.get("sensitive_params")
        schema = tool.get("input_schema")
        properties = schema.get("properties") if isinstance(schema, dict) else None
        if not isinstance(params, list) or not isinstance(properties, dict):
            continue
        for position, param in enumerate(params):
            if isinstance(param, str) and param not in properties:
                yield {
                    "loc": f"tools.{index}.sensitive_params.{position}",
                    "msg": f"{param[:80]!r} is not a top-level property of input_schema",
                }


def _allow_patterns(http: dict[str, Any]) -> list[HostPattern]:
    patterns: list[HostPattern] = []
    allow = http.get("allow")
    for entry in allow if isinstance(allow, list) else []:
        if not isinstance(entry, dict):
            continue
        scheme, host, port = entry.get("scheme"), entry.get("host"), entry.get("port")
        if scheme not in ("http", "https") or not isinstance(host, str):
            continue
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
            continue
        try:
            patterns.append(make_host_pattern(scheme, host, port))
        except ValueError:
            continue  # reported by AllowEntry
    return patterns


def _credential_host_problems(http: dict[str, Any]) -> Iterator[dict[str, str]]:
    patterns = _allow_patterns(http)
    credentials = http.get("credentials")
    for index, mapping in enumerate(credentials if isinstance(credentials, list) else []):
        hosts = mapping.get("hosts") if isinstance(mapping, dict) else None
        for position, text in enumerate(hosts if isinstance(hosts, list) else []):
            if not isinstance(text, str):
                continue
            try:
                pattern = parse_host_pattern(text)
            except ValueError:
                continue  # reported by CredentialMapping
            if not any(allowed.covers(pattern) for allowed in patterns):
                yield {
                    "loc": f"http.credentials.{index}.hosts.{position}",
                    "msg": f"credential host {text[:200]!r} is not admitted by any http.allow entry"
                    + _credential_host_advice(text, pattern, patterns),
                }


def _token_admitted(http: dict[str, Any], url: NormalizedUrl) -> bool:
    """Whether an allow entry (for POST, under its path prefix) or a ``token_hosts``
    entry admits ``url``."""
    allow = http.get("allow")
    for entry in allow if isinstance(allow, list) else []:
        if not isinstance(entry, dict) or "POST" not in (entry.get("methods") or ()):
            continue
        prefix, scheme, host = entry.get("path_prefix"), entry.get("scheme"), entry.get("host")
        if not isinstance(scheme, str) or not isinstance(host, str):
            continue
        try:
            pattern = make_host_pattern(scheme, host, entry.get("port"))
            if pattern.matches(url) and isinstance(prefix, str) and path_matches(prefix, url.path):
                return True
        except (ValueError, TypeError):
            continue  # reported by AllowEntry
    hosts = http.get("token_hosts")
    for text in hosts if isinstance(hosts, list) else []:
        try:
            if isinstance(text, str) and parse_host_pattern(text).matches(url):
                return True
        except ValueError:
            continue  # reported by HttpConfig
    return False


def _token_url_problems(http: dict[str, Any]) -> Iterator[dict[str, str]]:
    credentials = http.get("credentials")
    for index, mapping in enumerate(credentials if isinstance(credentials, list) else []):
        oauth = mapping.get("oauth") if isinstance(mapping, dict) else None
        if not isinstance(oauth, dict):
            continue
        for key in ("token_url", "device_url"):
            text = oauth.get(key)
            if not isinstance(text, str):
                continue
            try:
                url = normalize_url(text)
            except EgressDenied:
                continue  # reported by OAuthConfig
            if url.scheme == "https" and not _token_admitted(http, url):
                yield {
                    "loc": f"http.credentials.{index}.oauth.{key}",
                    "msg": f"{key} {text[:200]!r} is not admitted by an http.allow entry for POST "
                    "nor by http.token_hosts",
                }


def _spelled(pattern: HostPattern) -> str:
    """``scheme://host[:port]`` as a credential ``hosts`` entry (the port when not the default)."""
    host = f"[{pattern.host}]" if ":" in pattern.host else pattern.host
    port = "" if pattern.port == {"http": 80, "https": 443}[pattern.scheme] else f":{pattern.port}"
    return f"{pattern.scheme}://{'*.' if pattern.wildcard else ''}{host}{port}"


def _credential_host_advice(text: str, pattern: HostPattern, allowed: list[HostPattern]) -> str:
    """Why a credential host missed its allow entry: a scheme-less, port-less entry is
    ``https`` on 443, so ``127.0.0.1`` misses ``http://127.0.0.1:18080``; name the
    spelling that matches when an allow entry differs only in scheme or port."""
    read_as = f" (read as {_spelled(pattern)}"
    read_as += ": a credential host without a scheme or port is https on 443)" if "://" not in text else ")"
    fits = [
        _spelled(other)
        for other in allowed
        if other.covers(HostPattern(scheme=other.scheme, host=pattern.host, port=other.port,
                                    wildcard=pattern.wildcard))
    ]  # fmt: skip
    if fits:
        return f"{read_as}; to match the allow entry, write " + " or ".join(map(repr, dict.fromkeys(fits)))
    return read_as
