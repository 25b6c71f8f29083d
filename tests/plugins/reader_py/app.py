"""Reads the workspace through read-only preopens; every refusal is reported, not raised."""

import os

from stockade import tool


def _refused(exc):
    return {"ok": False, "error": f"{type(exc).__name__}: {getattr(exc, 'errno', '')}"[:1000]}


@tool("reader.read")
def read(input):
    try:
        with open(input["path"], "rb") as handle:
            return {"ok": True, "text": handle.read(1_000_000).decode("utf-8", "replace")}
    except (OSError, ValueError) as exc:
        return _refused(exc)


@tool("reader.list")
def listing(input):
    try:
        return {"ok": True, "entries": sorted(os.listdir(input["path"]))[:256]}
    except (OSError, ValueError) as exc:
        return _refused(exc)


@tool("reader.change")
def change(input):
    path, action = input["path"], input["action"]
    try:
        if action == "create":
            with open(path, "x") as handle:
                handle.write("planted")
        elif action == "append":
            with open(path, "a") as handle:
                handle.write("appended")
        elif action == "mkdir":
            os.mkdir(path)
        elif action == "symlink":
            os.symlink(input.get("target", "/etc/passwd"), path)
        elif action == "rename":
            os.rename(path, input.get("target", path + ".moved"))
        else:
            os.unlink(path)
    except (OSError, ValueError) as exc:
        return _refused(exc)
    return {"ok": True}
