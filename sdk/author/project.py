"""Plugin projects: ``stockade.toml`` and how it maps onto the manifest (docs/design.md §3).

``stockade.toml`` mirrors ``manifest.json`` section by section, so the mapping is one
to one; the build adds ``format`` and ``module`` and fills a few defaults::

    [package]                      # -> manifest "package"
    name = "tracker"
    version = "1.2.0"
    description = "Issue tracker tools"
    homepage = "https://tracker.example"     # optional (manifest: null)
    language = "python"            # build only: "python" or "javascript"
    source = "app.py"              # build only: default app.py / app.js
    dependencies = ["humanize==4.9.0"]   # build only, Python: exact pins (sdk/author/_pydeps.py)

    [limits]                       # -> "limits"; each key defaults to DEFAULT_LIMITS
    fuel = 2_000_000_000
    memory_bytes = 134_217_728

    [http]                         # -> "http"; no allow entries = no network at all
    allow = [{ host = "api.tracker.example", path_prefix = "/v1/issues", methods = ["GET"] }]
    # allow entries: scheme defaults to "https", port to the scheme's default (null)
    timeout_ms = 30_000            # also max_request_bytes, max_response_bytes (DEFAULT_HTTP)

    [workspace]                    # -> "workspace"; optional: no workspace files at all
    read = ["docs", "src"]         # read-only preopens at /workspace/<path>, where granted

    [[http.credentials]]           # -> "http.credentials", key for key
    secret = "tracker_token"
    location = { type = "bearer" }
    hosts = ["api.tracker.example"]
    path_prefixes = ["/v1"]

    [[tools]]                      # -> "tools", key for key
    name = "tracker.list-issues"   # must start with the package name and a dot
    version = "1.2.0"              # default: the package version
    description = "List open issues"
    effect = "read"                # required: read | write | execute | external
    risk = "low"                   # required: low | medium | high
    permissions = ["issues.read"]  # default []
    timeout_s = 30                 # default 30
    output_schema = { type = "array", maxItems = 100, items = { type = "string", maxLength = 500 } }
    sensitive_params = []          # optional
    rate_limit = { per_minute = 60, per_hour = 1000 }   # optional

    [tools.input_schema]           # a table works as well as an inline table
    type = "object"
    additionalProperties = false
    properties = { repo = { type = "string", maxLength = 200 } }
    required = ["repo"]

TOML has no ``null``: leave a key out to get the manifest's ``null`` (``homepage``,
allow ``port``, ``output_schema``, ``rate_limit``). Security-relevant fields (``effect``,
``risk``, the allowlist) have no defaults. Every other key is passed through, so a key
the manifest does not know is refused by the manifest models with its location, and
``format``/``module`` may not be written by hand.

Example::

    project = load_project(Path("examples/python-hello"))
    project.manifest_dict(module_sha256="0" * 64)
"""

from __future__ import annotations

import copy
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from host.canonical import canonical_json
from host.errors import ManifestInvalid
from host.formats.manifest import MANIFEST_FORMAT, PackageManifest
from sdk.author._diagnostics import format_problems, toml_problems
from sdk.author._pydeps import DependencyError, check_dependencies

# tomllib is standard from Python 3.11; tomli (the same code) is a dependency below that.
# Imported by name so that mypy, pinned to 3.10, does not need tomli installed.
tomllib: Any = importlib.import_module("tomllib" if sys.version_info >= (3, 11) else "tomli")

__all__ = [
    "DEFAULT_HTTP",
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT_S",
    "LANGUAGES",
    "PLACEHOLDER_SHA256",
    "PROJECT_FILE",
    "WORLD",
    "Language",
    "Project",
    "load_project",
    "validate_project",
]

PROJECT_FILE: Final = "stockade.toml"
MAX_PROJECT_FILE_BYTES: Final = 1024 * 1024  # bytes; like the manifest it becomes
WORLD: Final = "stockade:plugin/tool@1.1.0"
PLACEHOLDER_SHA256: Final = "0" * 64
Language = Literal["python", "javascript"]
LANGUAGES: Final[dict[str, str]] = {"python": "app.py", "javascript": "app.js"}
"""Supported languages and the default ``source`` of each."""

DEFAULT_LIMITS: Final[dict[str, int]] = {
    "fuel": 2_000_000_000,  # wasm fuel units
    "memory_bytes": 128 * 1024 * 1024,  # bytes
    "timeout_ms": 10_000,  # ms
    "max_http_requests": 16,  # requests per call
    "max_log_bytes": 64 * 1024,  # bytes
}
DEFAULT_HTTP: Final[dict[str, int]] = {
    "max_request_bytes": 1024 * 1024,  # bytes
    "max_response_bytes": 10 * 1024 * 1024,  # bytes
    "timeout_ms": 30_000,  # ms
}
DEFAULT_TIMEOUT_S: Final = 30
_BUILD_ONLY_KEYS: Final = ("language", "source", "dependencies")
_BUILD_OWNED: Final = ("format", "module")


@dataclass(frozen=True, slots=True)
class Project:
    """A parsed ``stockade.toml``.

    Attributes:
        root: the project directory.
        language: ``"python"`` or ``"javascript"``.
        source: the entry source, relative to ``root`` (``app.py``, ``pkg/main.py``,
            ``app.js``).
        document: the TOML document as parsed (build-only keys included).
        dependencies: the pure-Python dependencies to bundle (exact pins, checked).
    """

    root: Path
    language: Language
    source: str
    document: dict[str, Any]
    dependencies: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """The package name as written (validated by the manifest models)."""
        return str(self.document["package"].get("name", ""))

    @property
    def version(self) -> str:
        """The package version as written (validated by the manifest models)."""
        return str(self.document["package"].get("version", ""))

    def manifest_dict(self, *, module_sha256: str) -> dict[str, Any]:
        """The manifest this project describes, with ``module.sha256`` set.

        Args:
            module_sha256: the module digest, or :data:`PLACEHOLDER_SHA256` before building.

        Returns:
            A JSON-able dict, not yet validated (``PackageManifest.from_json`` does that).
        """
        doc = copy.deepcopy(self.document)
        package = {k: v for k, v in doc.pop("package").items() if k not in _BUILD_ONLY_KEYS}
        manifest: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "package": {"homepage": None, **package},
            "module": {"file": "module.wasm", "sha256": module_sha256, "world": WORLD},
            "limits": _with_defaults(doc.pop("limits", {}), DEFAULT_LIMITS),
            "http": _http(doc.pop("http", {})),
            "tools": _tools(doc.pop("tools", []), package.get("version")),
        }
        manifest.update(doc)  # anything else is refused by the models, with its location
        return manifest

    def tool_names(self) -> list[str]:
        """The names of the tools declared, in order (strings only)."""
        tools = self.document.get("tools")
        if not isinstance(tools, list):
            return []
        return [t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)]


def _with_defaults(section: Any, defaults: dict[str, Any]) -> Any:
    return {**defaults, **section} if isinstance(section, dict) else section


def _http(section: Any) -> Any:
    if not isinstance(section, dict):
        return section
    http = _with_defaults(section, {"allow": [], "credentials": [], **DEFAULT_HTTP})
    if isinstance(http["allow"], list):
        http["allow"] = [_with_defaults(entry, {"scheme": "https", "port": None}) for entry in http["allow"]]
    return http


def _tools(section: Any, version: Any) -> Any:
    if not isinstance(section, list):
        return section
    defaults = {"permissions": [], "timeout_s": DEFAULT_TIMEOUT_S}
    if isinstance(version, str):
        defaults["version"] = version
    return [_with_defaults(tool, defaults) for tool in section]


def _invalid(loc: str, msg: str) -> ManifestInvalid:
    return ManifestInvalid(
        f"{PROJECT_FILE}: {loc or '(document)'}: {msg}", problems=[{"loc": loc, "msg": msg}]
    )


def _read_document(path: Path) -> dict[str, Any]:
    try:
        size = path.stat().st_size
        if size > MAX_PROJECT_FILE_BYTES:
            raise _invalid("", f"{size} bytes, over {MAX_PROJECT_FILE_BYTES}")
        with path.open("rb") as handle:
            document: dict[str, Any] = tomllib.load(handle)
            return document
    except FileNotFoundError:
        raise _invalid("", f"no {PROJECT_FILE} in {path.parent}") from None
    except tomllib.TOMLDecodeError as exc:
        raise _invalid("", f"not valid TOML: {exc}") from None


def _check_source(root: Path, language: str, source: Any) -> str:
    if not isinstance(source, str) or not source:
        raise _invalid("package.source", "must be a non-empty relative path")
    rel = Path(source)
    if rel.is_absolute() or ".." in rel.parts:
        raise _invalid("package.source", f"{source!r} must be a path inside the project")
    suffixes = (".py",) if language == "python" else (".js", ".mjs")
    if rel.suffix not in suffixes:
        raise _invalid("package.source", f"{source!r} must end with {' or '.join(suffixes)}")
    if language == "python" and not all(part.isidentifier() for part in rel.with_suffix("").parts):
        raise _invalid("package.source", f"{source!r} is not an importable module path")
    if not (root / rel).is_file():
        raise _invalid("package.source", f"{source!r} does not exist in {root}")
    return rel.as_posix()


def load_project(root: Path) -> Project:
    """Read and check ``root/stockade.toml`` (its build-only keys; the rest is the manifest's).

    Args:
        root: the project directory.

    Raises:
        ManifestInvalid: the file is missing, not TOML, names no supported language or
            no existing source, writes ``format``/``module`` by hand, or has no
            ``[package]`` table.

    Returns:
        The project.
    """
    root = Path(root)
    doc = _read_document(root / PROJECT_FILE)
    for key in _BUILD_OWNED:
        if key in doc:
            raise _invalid(key, "is written by stockade build, not in stockade.toml")
    package = doc.get("package")
    if not isinstance(package, dict):
        raise _invalid("package", "a [package] table is required")
    language = package.get("language")
    if language not in LANGUAGES:
        raise _invalid("package.language", f"must be one of {sorted(LANGUAGES)}, got {language!r}")
    source = _check_source(root, language, package.get("source", LANGUAGES[language]))
    lang: Language = "python" if language == "python" else "javascript"
    deps: list[str] = []
    if "dependencies" in package:
        if lang != "python":
            raise _invalid("package.dependencies", "is for Python plugins; JavaScript uses package.json")
        try:
            deps = check_dependencies(package["dependencies"])
        except DependencyError as exc:
            raise _invalid("package.dependencies", str(exc)) from None
    return Project(root=root, language=lang, source=source, document=doc, dependencies=tuple(deps))


def validate_project(project: Project) -> dict[str, Any]:
    """The manifest ``project`` describes (placeholder digest), validated by the manifest models.

    Problems are reported against ``stockade.toml``: every one of them, each with its
    table, key path, line where it can be found and a "did you mean" for a misspelled
    key (:mod:`sdk.author._diagnostics`).

    Raises:
        ManifestInvalid: the manifest is invalid; ``details["problems"]`` holds
            ``{"loc", "msg", "where", "line"}`` for each problem.

    Returns:
        The manifest dict (``module.sha256`` is :data:`PLACEHOLDER_SHA256`).
    """
    manifest = project.manifest_dict(module_sha256=PLACEHOLDER_SHA256)
    try:
        PackageManifest.from_json(canonical_json(manifest))
    except ManifestInvalid as exc:
        path = project.root / PROJECT_FILE
        text = path.read_text("utf-8", errors="replace")
        found = toml_problems(exc.details.get("problems", []), project.document, text)
        raise ManifestInvalid(
            format_problems(PROJECT_FILE, found),
            hint="fix each key listed; see the key reference in sdk/author/project.py and the JSON Schema "
            "sdk/schemas/stockade.toml.schema.json (docs/authors.md: editor set-up)",
            problems=[p.as_dict() for p in found],
            file=str(path),
        ) from None
    return manifest
