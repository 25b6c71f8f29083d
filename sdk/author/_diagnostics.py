"""Manifest problems reported against what the author wrote: ``stockade.toml``.

``PackageManifest.from_json`` lists every problem with a dotted location in
``manifest.json`` (``tools.0.input_schema.properties.q``). Authors never see that file
before it builds, so :func:`toml_problems` restates each problem in ``stockade.toml``
terms: the table (``[[tools]] "hello.greet"``), the key path inside it, the line where
the key (or failing that, its table) is written, and "did you mean ..." for a misspelled
key (the closest field name at that place, or the closest schema keyword). Every problem
is listed, not just the first few.

Example::

    stockade.toml:21: [[tools]] "hello.greet": efect: unknown key (did you mean 'effect'?)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from host.formats.manifest import (
    AllowEntry,
    BasicLocation,
    CredentialMapping,
    HeaderLocation,
    HttpConfig,
    Limits,
    PackageInfo,
    PackageManifest,
    QueryLocation,
    RateLimit,
    ToolSpec,
)

__all__ = ["TomlProblem", "format_problems", "toml_problems"]

_EXTRA: Final = "Extra inputs are not permitted"
_SCHEMA_KEYWORDS: Final = (
    "type", "properties", "required", "additionalProperties", "items", "maxItems", "minItems",
    "uniqueItems", "maxLength", "minLength", "enum", "minimum", "maximum", "description",
)  # fmt: skip
_LOCATION_FIELDS: Final = sorted(
    {"type", *BasicLocation.model_fields, *HeaderLocation.model_fields, *QueryLocation.model_fields}
)
_FIELDS: Final[dict[str, list[str]]] = {
    "": sorted(set(PackageManifest.model_fields) - {"format", "module"}),
    "package": sorted({*PackageInfo.model_fields, "language", "source", "dependencies"}),
    "limits": sorted(Limits.model_fields),
    "http": sorted(HttpConfig.model_fields),
    "http.allow.N": sorted(AllowEntry.model_fields),
    "http.credentials.N": sorted(CredentialMapping.model_fields),
    "http.credentials.N.location": _LOCATION_FIELDS,
    "tools.N": sorted(ToolSpec.model_fields),
    "tools.N.rate_limit": sorted(RateLimit.model_fields),
}
"""The keys allowed at each place of stockade.toml (``N``: any array index)."""


@dataclass(frozen=True, slots=True)
class TomlProblem:
    """One problem, located in stockade.toml.

    Attributes:
        where: the table and key path, e.g. ``[[tools]] "hello.greet": effect``.
        msg: what is wrong (with "did you mean ..." when a close key exists).
        line: 1-based line in stockade.toml, or None when it cannot be found.
        loc: the original manifest location (``tools.0.effect``).
    """

    where: str
    msg: str
    line: int | None
    loc: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form for ``ManifestInvalid.details["problems"]``."""
        return {"loc": self.loc, "msg": self.msg, "where": self.where, "line": self.line}


def _shape(parts: list[str]) -> str:
    return ".".join("N" if p.isdigit() else p for p in parts)


def _suggest(loc: list[str], msg: str) -> str:
    """``msg`` plus "did you mean" for a misspelled key or schema keyword."""
    if not loc:
        return msg
    key = loc[-1]
    candidates: Iterable[str] = ()
    if msg == _EXTRA:
        msg = "unknown key"
        candidates = _FIELDS.get(_shape(loc[:-1]), ())
    elif match := re.search(r"keyword '([^']*)' is not allowed", msg):
        key, candidates = match.group(1), _SCHEMA_KEYWORDS
    close = difflib.get_close_matches(key, list(candidates), n=1, cutoff=0.6)
    if close and close[0] != key:
        return f"{msg} (did you mean {close[0]!r}?)"
    return msg


def _where(loc: list[str], document: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The table label and the key path inside it."""
    if not loc:
        return "(document)", []
    head = loc[0]
    if head == "tools" and len(loc) > 1 and loc[1].isdigit():
        index = int(loc[1])
        tools = document.get("tools")
        name = tools[index].get("name") if isinstance(tools, list) and index < len(tools) else None
        label = f'[[tools]] "{name}"' if isinstance(name, str) else f"[[tools]] #{index + 1}"
        return label, loc[2:]
    if head == "http" and len(loc) > 2 and loc[1] == "credentials" and loc[2].isdigit():
        return f"[[http.credentials]] #{int(loc[2]) + 1}", loc[3:]
    if head in ("package", "limits", "http"):
        return f"[{head}]", loc[1:]
    return "(top level)", loc


class _Lines:
    """Finds where a table or key is written (a best effort: TOML parsers keep no positions)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()

    def _headers(self, pattern: str) -> list[int]:
        rx = re.compile(pattern)
        return [i for i, line in enumerate(self.lines) if rx.match(line)]

    def block(self, loc: list[str]) -> tuple[int, int] | None:
        """``(first, end)`` line indexes of the table a location lives in."""
        if not loc:
            return None
        tables = self._headers(r"\s*\[")
        if loc[0] == "tools" and len(loc) > 1 and loc[1].isdigit():
            starts = self._headers(r"\s*\[\[\s*tools\s*\]\]")
        elif loc[0] == "http" and len(loc) > 2 and loc[1] == "credentials" and loc[2].isdigit():
            starts = self._headers(r"\s*\[\[\s*http\.credentials\s*\]\]")
        else:
            starts = self._headers(rf"\s*\[\s*{re.escape(loc[0])}\s*\]")
            if not starts:
                return None
            end = next((t for t in tables if t > starts[0]), len(self.lines))
            return starts[0], end
        index = int(loc[2] if loc[0] == "http" else loc[1])
        if index >= len(starts):
            return None
        end = starts[index + 1] if index + 1 < len(starts) else len(self.lines)
        return starts[index], end

    def find(self, loc: list[str], keys: list[str]) -> int | None:
        """The 1-based line of the innermost key of ``keys`` written in the block of ``loc``."""
        block = self.block(loc)
        if block is None:
            return None
        first, end = block
        for key in reversed([k for k in keys if not k.isdigit()]):
            rx = re.compile(rf"(^|[\s.{{,\[]){re.escape(key)}\s*(=|\]|\.)")
            for i in range(first, end):
                if rx.search(self.lines[i].split("#", 1)[0]):
                    return i + 1
        return first + 1


def toml_problems(
    problems: Iterable[Mapping[str, Any]], document: Mapping[str, Any], text: str
) -> list[TomlProblem]:
    """Restate manifest problems in stockade.toml terms (see the module docstring).

    Args:
        problems: ``ManifestInvalid.details["problems"]`` (``loc``, ``msg``).
        document: the parsed stockade.toml.
        text: its text (for line numbers).
    """
    lines = _Lines(text)
    out = []
    for problem in problems:
        loc_text = str(problem.get("loc", ""))
        loc = [p for p in loc_text.split(".") if p] if loc_text else []
        label, keys = _where(loc, document)
        msg = _suggest(loc, str(problem.get("msg", "")))
        pointer = re.search(r"at '(/[^']*)'", msg)  # a schema problem: extend the key path
        if pointer and keys and keys[-1].endswith("_schema"):
            keys = keys + [part for part in pointer.group(1).split("/") if part]
        where = f"{label}: {'.'.join(keys)}" if keys else label
        out.append(TomlProblem(where=where, msg=msg, line=lines.find(loc, keys), loc=loc_text))
    return sorted(out, key=lambda p: (p.line or 0))


def format_problems(path: str, problems: list[TomlProblem]) -> str:
    """One line per problem: ``stockade.toml:12: [[tools]] "x": effect: msg``."""
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    body = "\n".join(f"  {path}{f':{p.line}' if p.line else ''}: {p.where}: {p.msg}" for p in problems)
    return f"{path} has {count}:\n{body}"
