"""``fs.search``: find a literal string in the workspace's text files (a read tool).

The walk starts at ``path``, opens every directory and file beneath the root fd with
``O_NOFOLLOW`` (symlinks are never followed), skips what ``fs.list`` hides (denied and
protected paths, edit temp files), files with more than one hard link, files over
``max_file_bytes`` and files that are not UTF-8 text. It stops at 100 matches, at
:data:`MAX_SCANNED_BYTES` bytes read or :data:`MAX_FILES` files opened, and says so with
``truncated``. Matching is literal (no regular expressions: no engine to bound).
"""

from __future__ import annotations

import os
import stat
from typing import Any, Final

from host.formats.manifest import Effect, Risk
from host.tools.atomic import TEMP_PREFIX
from host.tools.base import HostCall, HostTool, Prepared, Ran
from host.tools.fs import _COUNT, _PATH_SCHEMA, VERSION, Workspaces, _cut_line, _load, _object
from host.tools.paths import RelPath, Workspace

__all__ = ["MAX_FILES", "MAX_MATCHES", "MAX_SCANNED_BYTES", "search_tool"]

MAX_MATCHES: Final = 100  # matches in one reply
MAX_SCANNED_BYTES: Final = 32 * 1024 * 1024  # bytes read by one search
MAX_FILES: Final = 5000  # files opened by one search
_MATCH_LINE_BYTES: Final = 400  # bytes of a matching line shown


def search_tool(workspaces: Workspaces) -> HostTool:
    """The ``fs.search`` host tool over ``workspaces``."""

    def run(call: HostCall, _: Prepared | None) -> Ran:
        grant, ws, rel = _load(workspaces, call, write=False)
        needle = str(call.input["text"])
        state: dict[str, Any] = {"matches": [], "bytes": 0, "files": 0, "truncated": False,
                                 "limit": grant.max_file_bytes}  # fmt: skip
        fd = ws.open_dir(rel, follow=False)
        try:
            _scan(ws, fd, rel, needle, state, depth=0)
        finally:
            os.close(fd)
        output = {"path": rel.text, "matches": state["matches"], "truncated": state["truncated"],
                  "files_scanned": state["files"], "bytes_scanned": state["bytes"]}  # fmt: skip
        return Ran(output)

    match = _object(
        {"path": _PATH_SCHEMA, "line": _COUNT, "text": {"type": "string", "maxLength": 1024}},
        ["path", "line", "text"],
    )
    return HostTool(
        name="fs.search",
        version=VERSION,
        description="Find a literal string in the workspace's UTF-8 text files beneath path; at most 100 "
        "matches, each with its line number. Symlinks are not followed.",
        input_schema=_object(
            {"path": _PATH_SCHEMA, "text": {"type": "string", "minLength": 1, "maxLength": 1024}},
            ["path", "text"],
        ),
        output_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "matches": {"type": "array", "maxItems": MAX_MATCHES, "items": match},
                "truncated": {"type": "boolean"},
                "files_scanned": _COUNT,
                "bytes_scanned": _COUNT,
            },
            ["path", "matches", "truncated", "files_scanned", "bytes_scanned"],
        ),
        effect=Effect.READ,
        risk=Risk.LOW,
        permissions=("fs.read",),
        run=run,
    )


def _scan(ws: Workspace, fd: int, rel: RelPath, needle: str, state: dict[str, Any], *, depth: int) -> None:
    with os.scandir(fd) as found:
        names = sorted(e.name for e in found)
    for name in names:
        if state["truncated"]:
            return
        child = RelPath((*rel.parts, name))
        if ws.is_denied(child.text) or ws.is_protected(child.text) or name.startswith(TEMP_PREFIX):
            continue
        try:
            handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError:
            continue
        try:
            info = os.fstat(handle)
            if stat.S_ISDIR(info.st_mode) and depth < 32:
                sub = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                try:
                    _scan(ws, sub, child, needle, state, depth=depth + 1)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(info.st_mode) and info.st_nlink == 1 and info.st_size <= state["limit"]:
                _scan_file(handle, info, child, needle, state)
        finally:
            os.close(handle)


def _scan_file(handle: int, info: os.stat_result, rel: RelPath, needle: str, state: dict[str, Any]) -> None:
    if state["files"] >= MAX_FILES or state["bytes"] + info.st_size > MAX_SCANNED_BYTES:
        state["truncated"] = True
        return
    fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        data = os.read(fd, info.st_size + 1)
    finally:
        os.close(fd)
    state["files"] += 1
    state["bytes"] += len(data)
    if b"\x00" in data:
        return
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    if needle not in text:
        return
    for number, line in enumerate(text.split("\n"), 1):
        if needle in line:
            if len(state["matches"]) >= MAX_MATCHES:
                state["truncated"] = True
                return
            shown, _ = _cut_line(line.rstrip("\r"), _MATCH_LINE_BYTES)
            state["matches"].append({"path": rel.text, "line": number, "text": shown})
