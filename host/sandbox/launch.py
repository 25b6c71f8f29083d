"""The launcher that runs inside the sandbox before the command: Landlock and the relay.

bwrap cannot apply Landlock (a Landlock domain forbids the mounts bwrap makes), so the
sandbox's first process after ``prlimit`` is this file, run by the system's
``/usr/bin/python3 -I -S`` (isolated, no site packages: nothing of the workspace or the
environment changes what it imports). Its options (``--landlock MODE``, ``--relay PATH``,
``--read PATH``, ``--write PATH``, repeatable, then ``--`` and the command) are plain
argv, not JSON: importing ``json`` (and ``re`` under it) would cost every command more
than the rest of the launcher. It then:

1. with ``relay`` set (``network = "egress"``), binds ``127.0.0.1:RELAY_PORT`` in the
   sandbox's *own* network namespace (only its loopback exists there) and double-forks a
   relay that copies each accepted connection to the host's proxy socket bound into the
   sandbox. The relay is Landlock-restricted to nothing at all (no file, no TCP) before it
   accepts anything; it dies with the sandbox's PID namespace;
2. restricts itself with Landlock (``PR_SET_NO_NEW_PRIVS``, then a ruleset handling every
   filesystem right the kernel's ABI knows and, ABI >= 4, TCP bind and connect, with rules
   for exactly the granted paths and the relay's port; ABI >= 6 also scopes abstract Unix
   sockets and signals to the sandbox);
3. ``execve`` s the command. Landlock domains are inherited and cannot be widened, so
   everything the command starts stays inside them.

A step that fails exits with status 1 and a ``stockade-launch:`` line on stderr before the
command ran; the host turns that into ``SANDBOX_UNAVAILABLE``. With ``landlock`` set to
``"auto"`` an ABI of 0 (no Landlock) skips step 2; ``"required"`` refuses instead.

This module imports only the standard library, and the host imports it too (for
:func:`abi`), so one implementation of the syscalls is reviewed.
"""

from __future__ import annotations

import os
import sys

try:
    import ctypes
except ImportError as _missing:  # a python3 without its stdlib: refuse, never run the command
    sys.stderr.write(f"stockade-launch: {_missing}\n")
    sys.exit(1)

TYPE_CHECKING = False  # not typing's: importing typing costs the launcher more than the rest of it
if TYPE_CHECKING:
    import socket
    from typing import Final

RELAY_PORT: Final = 3128  # in the sandbox's own network namespace
LAUNCH_ERROR: Final = "stockade-launch: "

# Syscall numbers of the generic table (x86_64 and aarch64 alike).
_CREATE_RULESET: Final = 444
_ADD_RULE: Final = 445
_RESTRICT_SELF: Final = 446
_CREATE_RULESET_VERSION: Final = 1
_RULE_PATH_BENEATH: Final = 1
_RULE_NET_PORT: Final = 2
_PR_SET_NO_NEW_PRIVS: Final = 38

FS_EXECUTE: Final = 1 << 0
FS_WRITE_FILE: Final = 1 << 1
FS_READ_FILE: Final = 1 << 2
FS_READ_DIR: Final = 1 << 3
FS_TRUNCATE: Final = 1 << 14
FS_IOCTL_DEV: Final = 1 << 15
# The rights each ABI handles (ABI 1: bits 0-12; 2: REFER; 3: TRUNCATE; 5: IOCTL_DEV).
_FS_BY_ABI: Final = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1}
_FS_LATEST: Final = (1 << 16) - 1
_FILE_RIGHTS: Final = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
READ: Final = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
NET_BIND_TCP: Final = 1 << 0
NET_CONNECT_TCP: Final = 1 << 1
_SCOPE_ALL: Final = (1 << 0) | (1 << 1)  # abstract Unix sockets, signals


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


class _NetPort(ctypes.Structure):
    _fields_ = (("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def abi() -> int:
    """The kernel's Landlock ABI version (0: Landlock is missing or disabled)."""
    version = _libc.syscall(
        _CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
    )
    return max(int(version), 0)


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def restrict(version: int, *, read: list[str], write: list[str], connect: list[int]) -> None:
    """Restrict this process (and everything it starts) to ``read`` paths (read and
    execute), ``write`` paths (every right) and TCP connects to ``connect`` ports (none
    bound). A path that does not exist is skipped.

    Raises:
        OSError: a Landlock call failed.
    """
    handled_fs = _FS_BY_ABI.get(version, _FS_LATEST)
    attr = _RulesetAttr(
        handled_fs, NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 else 0, _SCOPE_ALL if version >= 6 else 0
    )
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 16 if version >= 4 else 8
    ruleset = _check(
        _libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    try:
        for paths, rights in ((read, READ), (write, handled_fs)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
                    allowed = rights & handled_fs & (rights if is_dir else _FILE_RIGHTS)
                    rule = _PathBeneath(allowed, fd)
                    _check(
                        _libc.syscall(
                            _ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), ctypes.c_uint32(0)
                        ),
                        f"landlock_add_rule {path}",
                    )
                finally:
                    os.close(fd)
        if version >= 4:
            for port in connect:
                net = _NetPort(NET_CONNECT_TCP, port)
                _check(
                    _libc.syscall(_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(net), ctypes.c_uint32(0)),
                    "landlock_add_rule port",
                )
        _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_libc.syscall(_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)), "landlock_restrict_self")
    finally:
        os.close(ruleset)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy both directions until both ends closed (one relayed connection)."""
    import select  # noqa: PLC0415 - only the relay pays for it
    import socket  # noqa: PLC0415

    peers = {a: b, b: a}
    open_ends = {a, b}
    while open_ends:
        ready, _, _ = select.select(list(open_ends), [], [])
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                try:
                    peers[sock].sendall(data)
                    continue
                except OSError:
                    pass
            open_ends.discard(sock)
            try:
                peers[sock].shutdown(socket.SHUT_WR)
            except OSError:
                pass


def _relay(listener: socket.socket, target: str, version: int) -> None:
    """The relay process: accept on the sandbox's loopback, connect each to ``target``."""
    import socket  # noqa: PLC0415 - only the relay pays for it

    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if version >= 1:
        restrict(version, read=[], write=[], connect=[])
    while True:
        client, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(target)
                _pipe(client, upstream)
            finally:
                os._exit(0)
        client.close()
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass


def _start_relay(target: str, version: int) -> None:
    import socket  # noqa: PLC0415 - only network egress pays for it

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", RELAY_PORT))
    listener.listen(64)
    child = os.fork()
    if child == 0:  # double fork: the relay is PID 1's child, never the command's
        if os.fork() == 0:
            try:
                _relay(listener, target, version)
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(child, 0)
    listener.close()


def _options(argv: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    options: dict[str, list[str]] = {"--landlock": [], "--relay": [], "--read": [], "--write": []}
    index = 1
    while index < len(argv) and argv[index] != "--":
        if argv[index] not in options or index + 1 >= len(argv):
            raise ValueError(f"unknown launcher option {argv[index]!r}")
        options[argv[index]].append(argv[index + 1])
        index += 2
    command = argv[index + 1 :]
    if index >= len(argv) or not command or len(options["--landlock"]) != 1 or len(options["--relay"]) > 1:
        raise ValueError(
            "usage: launch.py --landlock MODE [--relay PATH] [--read P]... [--write P]... -- COMMAND..."
        )
    return options, command


def main(argv: list[str]) -> int:
    """``launch.py OPTIONS -- COMMAND...`` (see the module docstring)."""
    try:
        options, command = _options(argv)
        mode, relay = options["--landlock"][0], next(iter(options["--relay"]), None)
        version = abi() if mode != "off" else 0
        if mode == "required" and version < 1:
            raise OSError(0, "Landlock is required and this kernel has none")
        if relay:
            _start_relay(relay, version)
        if version >= 1:
            connect = [RELAY_PORT] if relay else []
            restrict(version, read=options["--read"], write=options["--write"], connect=connect)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{LAUNCH_ERROR}{exc}\n")
        return 1
    try:
        os.execv(command[0], command)  # noqa: S606 - argv only, by design
    except OSError as exc:
        sys.stderr.write(f"{LAUNCH_ERROR}cannot run {command[0]}: {exc.strerror}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
