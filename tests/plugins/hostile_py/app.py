"""Hostile test plugin: every tool tries to leave or exhaust the sandbox.

Tools report what happened instead of raising where that tells the test more.
"""

import encodings.idna  # noqa: F401 - socket needs it for host names; imported at build time
import os
import socket
import sys
import time

from stockade import tool


def _attempt(fn):
    try:
        return {"ok": True, "value": repr(fn())[:200]}
    except BaseException as exc:  # report whatever the sandbox answered
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200]}


def _write():
    with open("/tmp/stockade-hostile-probe", "w") as handle:
        handle.write("escaped")


@tool("hostile.files")
def files(input):
    return {
        "read_passwd": _attempt(lambda: open("/etc/passwd").read(100)),
        "read_relative": _attempt(lambda: open("stockade.toml").read(100)),
        "write_tmp": _attempt(_write),
        "list_root": _attempt(lambda: os.listdir("/")),
        "list_cwd": _attempt(lambda: os.listdir(".")),
    }


@tool("hostile.env")
def env(input):
    return {"environ": dict(os.environ), "argv": list(sys.argv), "cwd": _attempt(os.getcwd)}


@tool("hostile.socket")
def connect(input):
    def go():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as conn:
            conn.connect(("127.0.0.1", input["port"]))
            conn.sendall(b"escaped")
            return "connected"

    return {"connect": _attempt(go), "resolve": _attempt(lambda: socket.getaddrinfo("localhost", 80))}


@tool("hostile.flood")
def flood(input):
    chunk = "x" * 65536
    remaining = input["bytes"]
    while remaining > 0:
        part = chunk[: min(remaining, len(chunk))]
        sys.stdout.write(part)
        sys.stderr.write(part)
        remaining -= len(part)
    sys.stdout.flush()
    sys.stderr.flush()
    return input["bytes"]


@tool("hostile.alloc")
def alloc(input):
    block = bytearray(input["bytes"])
    for i in range(0, len(block), 65536):
        block[i] = 1
    return len(block)


@tool("hostile.spin")
def spin(input):
    n = 0
    while True:
        n += 1


@tool("hostile.sleep")
def sleep(input):
    # wasi-libc sleeps through wasi:clocks subscribe-duration + wasi:io/poll block: a
    # host function, where epoch interruption never fires (issue 9).
    time.sleep(input["seconds"])
    return "slept"
