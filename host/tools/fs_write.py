"""``fs.write_file``: create a new workspace file, never replace one.

Creating is a separate, explicit mode (``create_only`` must be ``true``): an edit of a file
that does not exist is ``not_found``, and an existing name here is ``reason: "exists"``.
Like an edit, it is a write: the diff (from ``/dev/null``) is the approval, its sha256 and
the absence of the file are bound into the action digest, and the file appears by
``link`` of a fsynced temp file, which never replaces an entry created in the meantime.
The parent directory must exist (no implicit ``mkdir -p``) and is reached without symlinks.
"""

from __future__ import annotations

import difflib
import os
import stat

from host.canonical import sha256_hex
from host.errors import InputInvalid
from host.formats.manifest import Effect, Risk
from host.text import escape_unsafe
from host.tools.atomic import atomic_create
from host.tools.base import HostCall, HostTool, Prepared, Ran
from host.tools.fs import (
    _COUNT,
    _PATH_SCHEMA,
    _SHA_SCHEMA,
    _TEXT_MAX,
    VERSION,
    Workspaces,
    _load,
    _not_text,
    _object,
    _too_large,
)
from host.tools.paths import RelPath

__all__ = ["write_tool"]


def write_tool(workspaces: Workspaces) -> HostTool:
    """The ``fs.write_file`` host tool over ``workspaces``."""

    def prepare(call: HostCall) -> Prepared:
        if call.input["create_only"] is not True:
            raise InputInvalid(
                "fs.write_file only creates new files (create_only must be true); use fs.edit_file",
                pointer="/create_only",
                reason="create_only_required",
            )
        grant, ws, rel = _load(workspaces, call, write=True)
        dir_fd = ws.open_dir(RelPath(rel.parts[:-1]), follow=False)
        try:
            try:
                os.stat(rel.parts[-1], dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                pass
            else:
                raise InputInvalid(
                    f"{rel.text!r} already exists; change it with fs.edit_file",
                    pointer="/path",
                    reason="exists",
                )
        finally:
            os.close(dir_fd)
        text = str(call.input["content"])
        data = text.encode("utf-8")
        if "\x00" in text:
            raise _not_text(rel, "would contain a NUL byte")
        if len(data) > grant.max_file_bytes:
            raise _too_large(rel, len(data), grant.max_file_bytes)
        lines = text.splitlines(keepends=True) if text else []
        diff = "".join(
            line if line.endswith("\n") else line + "\n\\ No newline at end of file\n"
            for line in difflib.unified_diff([], lines, "/dev/null", f"b/{rel.text}", n=3)
        )
        if len(diff.encode("utf-8")) > grant.max_diff_bytes:
            raise InputInvalid(
                f"the new file's diff is more than {grant.max_diff_bytes} bytes",
                pointer="/content",
                reason="diff_too_large",
            )
        added = sum(1 for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++"))
        bound = {"path": rel.text, "absent": True, "diff_sha256": sha256_hex(diff.encode("utf-8")),
                 "size_after": len(data)}  # fmt: skip
        record = dict(bound)
        return Prepared(
            bound=bound,
            preview=escape_unsafe(diff, keep_layout=True),
            record=record,
            state={"data": data, "added": added},
        )

    def run(call: HostCall, prepared: Prepared | None) -> Ran:
        if prepared is None:  # pragma: no cover - the host always prepares a tool with prepare
            raise RuntimeError("fs.write_file runs only prepared")
        _, ws, rel = _load(workspaces, call, write=True)
        data: bytes = prepared.state["data"]
        dir_fd = ws.open_dir(RelPath(rel.parts[:-1]), follow=False)
        try:
            atomic_create(
                dir_fd, rel.parts[-1], data, mode=stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH
            )
        finally:
            os.close(dir_fd)
        outcome = {"path": rel.text, "sha256_after": sha256_hex(data), "lines_added": prepared.state["added"],
                   "lines_removed": 0}  # fmt: skip
        return Ran(outcome, record=outcome)

    return HostTool(
        name="fs.write_file",
        version=VERSION,
        description="Create a new text file in the workspace (create_only must be true; existing files are "
        "changed with fs.edit_file). The host shows the new content as a diff to a person before writing.",
        input_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "content": {"type": "string", "maxLength": _TEXT_MAX},
                "create_only": {"type": "boolean"},
            },
            ["path", "content", "create_only"],
        ),
        output_schema=_object(
            {
                "path": _PATH_SCHEMA,
                "sha256_after": _SHA_SCHEMA,
                "lines_added": _COUNT,
                "lines_removed": _COUNT,
            },
            ["path", "sha256_after", "lines_added", "lines_removed"],
        ),
        effect=Effect.WRITE,
        risk=Risk.MEDIUM,
        permissions=("fs.write",),
        run=run,
        prepare=prepare,
        sensitive_params=("content",),
    )
