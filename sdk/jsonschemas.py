"""JSON Schemas for ``stockade.toml`` and ``manifest.json``, generated from the models.

Editors validate and complete ``stockade.toml`` with the schema (Taplo / Even Better
TOML: put ``#:schema <path or URL>`` on the first line). Both files are generated from
:class:`host.formats.manifest.PackageManifest` and checked in under ``sdk/schemas/``; a test
regenerates them and fails if they differ (run ``python -m sdk.jsonschemas`` to update).

``stockade.toml`` is the manifest minus what the build writes (``format``, ``module``),
plus the build-only ``package.language`` / ``package.source``, with the keys the build
fills in made optional (``limits``, ``http`` and their keys, a tool's ``version``,
``permissions`` and ``timeout_s``, an allow entry's ``scheme`` and ``port``). The
schemas check shape only; the manifest models still decide (ceilings, the tool-schema
subset, cross-field rules), and ``stockade build`` reports those against the toml.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Final

from host.formats.manifest import PackageManifest
from sdk.author.project import LANGUAGES

__all__ = ["SCHEMA_DIR", "manifest_schema", "project_schema", "render", "write"]

SCHEMA_DIR: Final = Path(__file__).resolve().parent / "schemas"
_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_OPTIONAL_IN_TOML: Final = {
    "PackageManifest": ("format", "module", "limits", "http"),
    "Limits": ("fuel", "memory_bytes", "timeout_ms", "max_http_requests", "max_log_bytes"),
    "HttpConfig": ("allow", "max_request_bytes", "max_response_bytes", "timeout_ms"),
    "AllowEntry": ("scheme",),
    "ToolSpec": ("version", "permissions", "timeout_s"),
}
_TOOL_SCHEMA_NOTE: Final = (
    "A JSON Schema in Stockade's bounded subset: every object lists additionalProperties = false, "
    "properties and required (required may be empty); every string has maxLength, every number "
    "minimum and maximum, every array maxItems and items."
)


def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of ``manifest.json``."""
    schema = PackageManifest.model_json_schema()
    schema = {"$schema": _DIALECT, "title": "Stockade package manifest (manifest.json)", **schema}
    _note_tool_schemas(schema)
    return schema


def project_schema() -> dict[str, Any]:
    """The JSON Schema of ``stockade.toml`` (see the module docstring)."""
    schema = copy.deepcopy(manifest_schema())
    schema["title"] = "Stockade plugin project (stockade.toml)"
    for key in ("format", "module"):
        schema["properties"].pop(key)
    defs = schema["$defs"]
    defs.pop("ModuleInfo")
    package = defs["PackageInfo"]["properties"]
    package["language"] = {"enum": sorted(LANGUAGES), "description": "build only: the plugin's language"}
    package["source"] = {"type": "string", "description": "build only: entry source (default app.py, app.js)"}
    package["dependencies"] = {
        "type": "array",
        "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]*==\\S+"},
        "description": "build only, Python: pure-Python packages, exact pins (name==version [--hash=...])",
    }
    defs["PackageInfo"]["required"] = [*defs["PackageInfo"]["required"], "language"]
    for name, optional in _OPTIONAL_IN_TOML.items():
        target = schema if name == "PackageManifest" else defs[name]
        target["required"] = [k for k in target["required"] if k not in optional]
    return schema


def _note_tool_schemas(schema: dict[str, Any]) -> None:
    props = schema["$defs"]["ToolSpec"]["properties"]
    for key in ("input_schema", "output_schema"):
        props[key]["description"] = _TOOL_SCHEMA_NOTE


def render() -> dict[str, str]:
    """``{file name: text}`` of both schemas, as checked in."""
    return {
        "manifest.schema.json": json.dumps(manifest_schema(), indent=2, sort_keys=True) + "\n",
        "stockade.toml.schema.json": json.dumps(project_schema(), indent=2, sort_keys=True) + "\n",
    }


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write both schemas into ``directory``; returns the paths."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        (directory / name).write_text(text, "utf-8")
        written.append(directory / name)
    return written


if __name__ == "__main__":
    for path in write():
        sys.stdout.write(f"wrote {path}\n")
