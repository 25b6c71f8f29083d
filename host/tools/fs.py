"""Workspace files: ``fs.read_file``, ``fs.edit_file`` and ``fs.list`` host tools.

Each tool resolves paths with :mod:`host.tools.paths` (grammar first, then the kernel's
resolution beneath the root fd). ``fs.edit_file`` is a write: its ``prepare`` computes the
new content and the unified diff; the pre-image sha256 and the diff sha256 are bound into
the action digest, the diff is the approval preview, and ``run`` writes only if the file
still has the approved pre-image (``APPROVAL_INVALID reason: "stale"`` otherwise), by temp
file + fsync + rename + directory fsync (:func:`atomic_replace`).

Text rules: UTF-8 only (invalid UTF-8 or a NUL byte anywhere is ``INPUT_INVALID reason:
"not_text"``); lines are split at ``\\n`` only (``"a\\nb\\n"`` has 2 lines); a CRLF file
stays CRLF when the model sends LF text; bytes outside the replaced spans, a BOM and the
final-newline state are kept; replacement is literal (no ``$&``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from host.canonical import sha256_hex
from host.config import WorkspaceGrant
from host.errors import InputInvalid, ToolNotFound
from host.formats.manifest import Effect, Risk
from host.text import escape_unsafe
from host.tools.atomic import TEMP_PREFIX, atomic_replace, sweep_temp_files
from host.tools.base import HostCall, HostTool, Prepared, Ran
from host.tools.paths import MAX_PATH_BYTES, RelPath, Workspace, parse_path
from host.tools.preopens import PluginReads, open_plugin_reads
from host.types import Principal

__all__ = [
    "Workspaces",
    "edit_tool",
    "line_ending",
    "list_tool",
    "read_tool",
    "split_lines",
]

VERSION: Final = "1.0.0"
_MAX_LINE: Final = 2**31 - 1
_TEXT_MAX: Final = 65536  # characters of old_text/new_text (the input is ≤ 64 KiB anyway)
_PATH_SCHEMA: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_PATH_BYTES,
    "description": "Path relative to the workspace root ('.' is the root).",
}
_SHA_SCHEMA: Final = {"type": "string", "maxLength": 64}
_COUNT: Final = {"type": "integer", "minimum": 0, "maximum": _MAX_LINE}


class Workspaces:
    """The workspace roots of one Host, opened as directory fds (one per grant).

    Args:
        grants: the operator's grants.
        protected: absolute paths of Stockade files (state dir, lock, audit log) made
            write-protected when they lie inside a root.

    Raises:
        ToolFailed: a root cannot be opened.
    """

    def __init__(self, grants: Sequence[WorkspaceGrant], *, protected: Sequence[Path]) -> None:
        self._items: list[tuple[WorkspaceGrant, Workspace]] = []
        self._internal: list[tuple[str, ...]] = []  # Stockade's own files inside each root
        try:
            for grant in grants:
                root = Path(grant.root).resolve()
                inside = tuple(p for p in (_relative(root, Path(p)) for p in protected) if p)
                guarded = (".git", *inside, *grant.protected)
                self._items.append((grant, Workspace(root, protected=guarded, deny=grant.deny)))
                self._internal.append(inside)
        except BaseException:
            self.close()
            raise
        for _, ws in self._items:
            sweep_temp_files(ws.fd)  # a crash between temp write and rename left one behind

    def for_principal(self, principal: Principal) -> tuple[WorkspaceGrant, Workspace]:
        """The first grant for this principal.

        Raises:
            ToolNotFound: no workspace is granted to the principal (the tools are not theirs).
        """
        for grant, ws in self._items:
            if grant.grants(principal.project, principal.subject):
                return grant, ws
        raise ToolNotFound(
            f"no workspace is granted to {principal.subject!r} in {principal.project!r}",
            hint="An operator grants a workspace root in the host configuration ([[workspace]]).",
            reason="no_workspace",
        )

    def plugin_reads(self, principal: Principal, declared: Sequence[str]) -> PluginReads:
        """A plugin call's read-only preopens of ``declared`` (:mod:`host.tools.preopens`)
        beneath the principal's root; all withheld (``no_workspace``) without a grant."""
        for (grant, ws), internal in zip(self._items, self._internal, strict=True):
            if grant.grants(principal.project, principal.subject):
                return open_plugin_reads(ws, declared, internal=internal)
        return open_plugin_reads(None, declared, internal=())

    def close(self) -> None:
        """Close every root fd."""
        for _, ws in self._items:
            ws.close()


def _relative(root: Path, path: Path) -> str | None:
    try:
        inner = Path(path).resolve().relative_to(root)
    except ValueError:
        return None
    text = inner.as_posix()
    return None if text == "." else text


# -- text -------------------------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """Lines split at ``\\n`` only (a final newline does not start another line)."""
    if text == "":
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def line_ending(data: bytes) -> str:
    """``lf``, ``crlf``, ``mixed`` or ``none`` (no line break)."""
    crlf = data.count(b"\r\n")
    lf = data.count(b"\n") - crlf
    if crlf == 0 and lf == 0:
        return "none"
    if lf == 0:
        return "crlf"
    return "lf" if crlf == 0 else "mixed"


def _read_text(fd: int, info: os.stat_result, rel: RelPath, grant: WorkspaceGrant) -> tuple[bytes, str]:
    limit = grant.max_file_bytes
    if info.st_size > limit:
        raise _too_large(rel, info.st_size, limit)
    chunks: list[bytes] = []
    total = 0
    while True:  # bounded even if the file grows after fstat
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise _too_large(rel, total, limit)
    data = b"".join(chunks)
    if b"\x00" in data:
        raise _not_text(rel, "contains a NUL byte (binary)")
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _not_text(rel, f"is not valid UTF-8 (byte {exc.start})") from exc


def _too_large(rel: RelPath, size: int, limit: int) -> InputInvalid:
    return InputInvalid(
        f"{rel.text!r} is {size} bytes, more than the workspace limit of {limit}",
        pointer="/path",
        reason="too_large",
        size=size,
        limit=limit,
        hint="Large files are not read or edited through fs.* tools.",
    )


def _not_text(rel: RelPath, why: str) -> InputInvalid:
    return InputInvalid(
        f"{rel.text!r} {why}: fs.* tools handle UTF-8 text only", pointer="/path", reason="not_text"
    )


def _load(
    workspaces: Workspaces, call: HostCall, *, write: bool
) -> tuple[WorkspaceGrant, Workspace, RelPath]:
    rel = parse_path(call.input["path"])
    grant, ws = workspaces.for_principal(call.principal)
    if write:
        ws.check_write(rel)
    else:
        ws.check_read(rel)
    return grant, ws, rel


# -- fs.read_file -----------------------------------------------------------------------


def read_tool(workspaces: Workspaces) -> HostTool:
    def run(call: HostCall, _: Prepared | None) -> Ran:
        grant, ws, rel = _load(workspaces, call, write=False)
        fd, info = ws.open_file(rel, follow=True)
        try:
            data, text = _read_text(fd, info, rel, grant)
        finally:
            os.close(fd)
        return Ran(_page(rel, data, text, call.input, grant))

    return HostTool(
        name="fs.read_file",
        version=VERSION,
        description="Read a UTF-8 text file of the workspace. Lines come prefixed with their number "
        "('12: text'); long files come in pages: call again with start_line = next_start_line.",
        input_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "start_line": {"type": "integer", "minimum": 1, "maximum": _MAX_LINE},
                "end_line": {"type": "integer", "minimum": 1, "maximum": _MAX_LINE},
            },
            ["path"],
        ),
        output_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "content": {"type": "string", "maxLength": 256 * 1024},
                "start_line": _COUNT,
                "end_line": _COUNT,
                "total_lines": _COUNT,
                "truncated": {"type": "boolean"},
                "next_start_line": _COUNT,
                "line_ending": {"type": "string", "enum": ["lf", "crlf", "mixed", "none"], "maxLength": 5},
                "sha256": _SHA_SCHEMA,
            },
            [
                "path",
                "content",
                "start_line",
                "end_line",
                "total_lines",
                "truncated",
                "line_ending",
                "sha256",
            ],
        ),
        effect=Effect.READ,
        risk=Risk.LOW,
        permissions=("fs.read",),
        run=run,
    )


def _page(
    rel: RelPath, data: bytes, text: str, given: Mapping[str, Any], grant: WorkspaceGrant
) -> dict[str, Any]:
    style = line_ending(data)
    lines = split_lines(text)
    total = len(lines)
    start = int(given.get("start_line", 1))
    end = int(given.get("end_line", total))
    if start > max(total, 1) or end < start - 1 or end > total or (total and end < start):
        raise InputInvalid(
            f"lines {start}-{end} are outside {rel.text!r}, which has {total} lines",
            pointer="/start_line",
            reason="out_of_range",
            total_lines=total,
        )
    strip_cr = style == "crlf"
    out: list[str] = []
    used = 0
    truncated = False
    line_no = start
    while line_no <= end:
        line = lines[line_no - 1]
        if strip_cr:
            line = line[:-1]
        line, cut = _cut_line(line, grant.max_line_bytes)
        entry = f"{line_no}: {line}"
        cost = len(json.dumps(entry, ensure_ascii=False).encode("utf-8")) - 1  # + "\n" - quotes
        if out and used + cost > grant.page_bytes:
            truncated = True
            break
        out.append(entry)
        used += cost
        truncated |= cut
        line_no += 1
    result: dict[str, Any] = {
        "path": rel.text,
        "content": "\n".join(out),
        "start_line": start,
        "end_line": line_no - 1,
        "total_lines": total,
        "truncated": truncated or line_no <= end,
        "line_ending": style,
        "sha256": sha256_hex(data),
    }
    if line_no <= end:
        result["next_start_line"] = line_no
    return result


def _cut_line(line: str, limit: int) -> tuple[str, bool]:
    raw = line.encode("utf-8")
    if len(raw) <= limit:
        return line, False
    kept = raw[:limit].decode("utf-8", errors="ignore")
    return f"{kept}…[line cut: {len(raw) - len(kept.encode('utf-8'))} more bytes]", True


# -- fs.edit_file -----------------------------------------------------------------------


def edit_tool(workspaces: Workspaces) -> HostTool:
    def prepare(call: HostCall) -> Prepared:
        grant, ws, rel = _load(workspaces, call, write=True)
        target = _open_target(ws, rel)
        try:
            fd, info = target
            data, text = _read_text(fd, info, rel, grant)
        finally:
            os.close(target[0])
        return _prepare_edit(rel, data, text, info, given=call.input, grant=grant)

    def run(call: HostCall, prepared: Prepared | None) -> Ran:
        if prepared is None:  # pragma: no cover - the host always prepares a tool with prepare
            raise RuntimeError("fs.edit_file runs only prepared")
        grant, ws, rel = _load(workspaces, call, write=True)
        new: bytes = prepared.state["new"]
        before = prepared.bound["sha256_before"]
        dir_fd = ws.open_dir(RelPath(rel.parts[:-1]), follow=False)
        try:
            sweep_temp_files(dir_fd)
            atomic_replace(
                dir_fd,
                rel.parts[-1],
                new,
                expect_sha256=before,
                max_bytes=grant.max_file_bytes,
                tool="fs.edit_file",
            )
        finally:
            os.close(dir_fd)
        outcome = {
            "path": rel.text,
            "sha256_before": before,
            "sha256_after": sha256_hex(new),
            "replacements": prepared.state["replacements"],
            "lines_added": prepared.state["added"],
            "lines_removed": prepared.state["removed"],
        }
        return Ran(outcome, record=outcome)

    return HostTool(
        name="fs.edit_file",
        version=VERSION,
        description="Replace old_text with new_text in a workspace file. old_text must match the current "
        "content exactly, once (or set replace_all). The host shows the diff to a person before writing.",
        input_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "old_text": {"type": "string", "minLength": 1, "maxLength": _TEXT_MAX},
                "new_text": {"type": "string", "maxLength": _TEXT_MAX},
                "replace_all": {"type": "boolean"},
                "expected_sha256": _SHA_SCHEMA,
            },
            ["path", "old_text", "new_text"],
        ),
        output_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "sha256_before": _SHA_SCHEMA,
                "sha256_after": _SHA_SCHEMA,
                "replacements": _COUNT,
                "lines_added": _COUNT,
                "lines_removed": _COUNT,
            },
            ["path", "sha256_before", "sha256_after", "replacements", "lines_added", "lines_removed"],
        ),
        effect=Effect.WRITE,
        risk=Risk.MEDIUM,
        permissions=("fs.write",),
        run=run,
        prepare=prepare,
        sensitive_params=("old_text", "new_text"),
    )


def _open_target(ws: Workspace, rel: RelPath) -> tuple[int, os.stat_result]:
    """The file an edit replaces: no symlink anywhere on its path, one hard link, regular."""
    return ws.open_file(rel, follow=False)


def _prepare_edit(
    rel: RelPath,
    data: bytes,
    text: str,
    info: os.stat_result,
    *,
    given: Mapping[str, Any],
    grant: WorkspaceGrant,
) -> Prepared:
    before = sha256_hex(data)
    expected = given.get("expected_sha256")
    if expected is not None and expected != before:
        raise InputInvalid(
            f"{rel.text!r} changed: its sha256 is not expected_sha256",
            pointer="/expected_sha256",
            reason="stale",
            sha256=before,
            hint="Read the file again.",
        )
    old, new = str(given["old_text"]), str(given["new_text"])
    if old == new:
        raise InputInvalid(
            "old_text and new_text are the same: nothing to change", pointer="/new_text", reason="no_change"
        )
    if line_ending(data) == "crlf" and "\r" not in old + new:
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")  # keep the file's style
    count = text.count(old)
    if count == 0:
        raise InputInvalid(
            f"old_text was not found in {rel.text!r}: the model's context is stale or the path is wrong",
            pointer="/old_text",
            reason="not_found",
            hint="Read the file again and copy old_text exactly.",
        )
    replace_all = bool(given.get("replace_all", False))
    if count > 1 and not replace_all:
        raise InputInvalid(
            f"old_text occurs {count} times in {rel.text!r}; make it unique or set replace_all",
            pointer="/old_text",
            reason="ambiguous",
            count=count,
            lines=_match_lines(text, old, 5),
        )
    updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)  # literal: no $& etc.
    new_bytes = updated.encode("utf-8")
    if len(new_bytes) > grant.max_file_bytes:
        raise _too_large(rel, len(new_bytes), grant.max_file_bytes)
    first = text.find(old)
    last = text.rfind(old) if replace_all else first  # covers the last non-overlapping match
    diff, added, removed = _unified_diff(rel, text, updated, (first, last + len(old)))
    raw_diff = diff.encode("utf-8")
    if len(raw_diff) > grant.max_diff_bytes:
        raise InputInvalid(
            f"the diff of this edit is {len(raw_diff)} bytes, more than {grant.max_diff_bytes}",
            pointer="/new_text",
            reason="diff_too_large",
            limit=grant.max_diff_bytes,
            hint="Make smaller edits.",
        )
    bound = {
        "path": rel.text,
        "sha256_before": before,
        "diff_sha256": sha256_hex(raw_diff),
        "size_before": len(data),
        "size_after": len(new_bytes),
        "mode": stat.S_IMODE(info.st_mode),
    }
    record = {
        "path": rel.text,
        "sha256_before": before,
        "diff_sha256": bound["diff_sha256"],
        "size_before": len(data),
        "size_after": len(new_bytes),
    }
    state = {
        "new": new_bytes,
        "replacements": count if replace_all else 1,
        "added": added,
        "removed": removed,
    }
    return Prepared(bound=bound, preview=escape_unsafe(diff, keep_layout=True), record=record, state=state)


def _match_lines(text: str, needle: str, limit: int) -> list[int]:
    found: list[int] = []
    at = text.find(needle)
    while at >= 0 and len(found) < limit:
        found.append(text.count("\n", 0, at) + 1)
        at = text.find(needle, at + len(needle))
    return found


def _unified_diff(
    rel: RelPath, before: str, after: str, span: tuple[int, int] | None = None
) -> tuple[str, int, int]:
    """The unified diff (3 lines of context) of ``before`` → ``after``.

    ``span`` (start, end in ``before``) covers every replaced character: only the lines
    around it, plus context, are compared, so an edit of one line of a 30,000-line file
    costs a few string searches, not a line split and a matcher over the whole file.
    Outside the span both texts are equal, so the window's diff shifted by its first line
    number is the whole file's diff.
    """
    start, end = (0, len(before)) if span is None else span
    low = before.rfind("\n", 0, start) + 1
    for _ in range(3):
        if low > 0:
            low = before.rfind("\n", 0, low - 1) + 1
    high = end
    for _ in range(4):
        found = before.find("\n", high)
        high = len(before) if found < 0 else found + 1
    delta = len(after) - len(before)
    offset = before.count("\n", 0, low)
    old, new = _keep(before[low:high]), _keep(after[low : high + delta])
    lines = list(difflib.unified_diff(old, new, f"a/{rel.text}", f"b/{rel.text}", n=3))
    lines = [_shift_hunk(line, offset) if line.startswith("@@") else line for line in lines]
    added = sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in lines if line.startswith("-") and not line.startswith("---"))
    text = "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )
    return text, added, removed


def _shift_hunk(header: str, offset: int) -> str:
    """``@@ -a,b +c,d @@`` with ``a`` and ``c`` moved down by ``offset`` lines."""
    if offset == 0:
        return header
    match = _HUNK.match(header)
    if match is None:  # pragma: no cover - difflib always writes this form
        return header
    a, b, c, d = match.groups()
    return f"@@ -{int(a) + offset}{b or ''} +{int(c) + offset}{d or ''} @@\n"


_HUNK: Final = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _keep(text: str) -> list[str]:
    """Lines split at ``\\n`` only, each keeping its ending."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


# -- fs.list ----------------------------------------------------------------------------


def list_tool(workspaces: Workspaces) -> HostTool:
    def run(call: HostCall, _: Prepared | None) -> Ran:
        grant, ws, rel = _load(workspaces, call, write=False)
        depth = int(call.input.get("depth", 1))
        fd = ws.open_dir(rel, follow=False)
        entries: list[dict[str, Any]] = []
        state = {"bytes": 0, "truncated": False}
        try:
            _walk(ws, fd, rel, depth, entries=entries, state=state, limit=grant.max_list_entries)
        finally:
            os.close(fd)
        return Ran({"path": rel.text, "entries": entries, "truncated": state["truncated"]})

    entry = _object(
        {
            "path": _PATH_SCHEMA,
            "kind": {"type": "string", "enum": ["file", "dir", "symlink", "other"], "maxLength": 7},
            "size": {"type": "integer", "minimum": 0, "maximum": 2**53 - 1},
        },
        ["path", "kind", "size"],
    )
    return HostTool(
        name="fs.list",
        version=VERSION,
        description="List a directory of the workspace (depth 1-8). Symlinks are listed, never followed.",
        input_schema=_object(
            {"path": _PATH_SCHEMA, "depth": {"type": "integer", "minimum": 1, "maximum": 8}}, ["path"]
        ),
        output_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "entries": {"type": "array", "maxItems": 256, "items": entry},
                "truncated": {"type": "boolean"},
            },
            ["path", "entries", "truncated"],
        ),
        effect=Effect.READ,
        risk=Risk.LOW,
        permissions=("fs.read",),
        run=run,
    )


_LIST_BYTES: Final = 192 * 1024  # bytes of listed paths in one reply (under the output ceiling)


def _walk(
    ws: Workspace,
    fd: int,
    rel: RelPath,
    depth: int,
    *,
    entries: list[dict[str, Any]],
    state: dict[str, Any],
    limit: int,
) -> None:
    with os.scandir(fd) as found:
        names = sorted(e.name for e in found)
    for name in names:
        child = RelPath((*rel.parts, name))
        if ws.is_denied(child.text) or ws.is_protected(child.text) or name.startswith(TEMP_PREFIX):
            continue
        if len(entries) >= limit or state["bytes"] + len(child.text) > _LIST_BYTES:
            state["truncated"] = True
            return
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        kind = (
            "dir"
            if stat.S_ISDIR(info.st_mode)
            else "file"
            if stat.S_ISREG(info.st_mode)
            else "symlink"
            if stat.S_ISLNK(info.st_mode)
            else "other"
        )
        entries.append({"path": child.text, "kind": kind, "size": info.st_size if kind == "file" else 0})
        state["bytes"] += len(child.text)
        if kind == "dir" and depth > 1:
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                continue
            try:
                _walk(ws, sub, child, depth - 1, entries=entries, state=state, limit=limit)
            finally:
                os.close(sub)
            if state["truncated"]:
                return


def _object(properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": dict(properties),
        "required": required,
    }
