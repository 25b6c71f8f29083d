"""The sandbox profile of a command and the bubblewrap argv that builds it.

A :class:`SandboxProfile` is everything that decides what a command can reach, apart from
the command line itself: the workspace root and its mode, the paths re-bound read-only
inside it, the binary, the network mode, the environment, the limits and the seccomp
filter's sha256. Its :meth:`~SandboxProfile.digest` is bound into the action digest, so
an approval given under one profile never runs under another.

What the sandbox sees (bwrap 0.8, Debian 12)::

    /usr, selected /etc files    read-only (/bin, /lib, /lib64, /sbin: the merged-usr symlinks)
    /workspace                   the workspace root, ro or rw; .git and Stockade's files ro
    /tmp                         a private tmpfs (HOME=/tmp)
    /dev, /proc                  bwrap's minimal /dev; a procfs of the sandbox's PID namespace

``/etc/shadow``, ``/home``, ``/root``, ``/run`` (and its sockets), ``/var`` and the rest
of the host are absent. The command runs as uid 65534 in a fresh user namespace with
every capability dropped, under ``--die-with-parent``, through ``prlimit`` for the
rlimits. It has no controlling terminal: the launcher starts bwrap in a new session
(``start_new_session``) with pipes for stdin, stdout and stderr, and seccomp refuses the
``TIOCSTI`` and ``TIOCLINUX`` ioctls, so nothing can be typed into the host's terminal.
bwrap's own ``--new-session`` would do the same for about 8 ms more per command
(measured here), so it is not used.

The process limit: ``RLIMIT_NPROC`` does not bind a process whose real uid outside is root
(the kernel exempts it), so a host running as root also puts the sandbox in a pids cgroup
with ``pids.max`` (cgroup v1 ``/sys/fs/cgroup/pids`` or a cgroup v2 root with the ``pids``
controller); a root host with neither refuses with ``SANDBOX_UNAVAILABLE``.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from host.canonical import digest_json
from host.errors import SandboxUnavailable
from host.sandbox.launch import RELAY_PORT
from host.sandbox.seccomp import build_filter

__all__ = ["FIXED_ENV", "WORKSPACE", "Limits", "PidsCgroup", "SandboxProfile", "find_bwrap", "server_argv"]

WORKSPACE: Final = "/workspace"
SANDBOX_UID: Final = 65534
SANDBOX_TMP: Final = "/tmp"  # noqa: S108 - a private tmpfs inside the sandbox, not the host's /tmp
FIXED_ENV: Final = {
    "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": SANDBOX_TMP, "LANG": "C.UTF-8", "TZ": "UTC",
}  # fmt: skip
PRLIMIT: Final = "/usr/bin/prlimit"
LAUNCH_PYTHON: Final = "/usr/bin/python3"  # the system's: bound read-only with /usr
LAUNCH_DIR: Final = "/.stockade"  # inside the sandbox: the launcher and the proxy socket (never granted)
_LAUNCH_SOURCE: Final = Path(__file__).with_name("launch.py")
RELAY_URL: Final = f"http://127.0.0.1:{RELAY_PORT}"
PROXY_ENV: Final = {
    "HTTP_PROXY": RELAY_URL, "HTTPS_PROXY": RELAY_URL, "http_proxy": RELAY_URL, "https_proxy": RELAY_URL,
    "ALL_PROXY": RELAY_URL, "all_proxy": RELAY_URL, "NO_PROXY": "", "no_proxy": "",
}  # fmt: skip
_MERGED: Final = ("bin", "lib", "lib64", "sbin", "lib32", "libx32")
# The /etc files programs need to start (dynamic loader, locale, TLS roots, names); never
# the whole /etc (shadow, ssh host keys, the host's own configuration).
_ETC: Final = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime",
    "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/ssl/certs", "/etc/ca-certificates",
    "/etc/mime.types",
)  # fmt: skip
_SYSTEM: Final = ("/usr",)
_CGROUP_ROOTS: Final = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def find_bwrap(path_env: str | None) -> str | None:
    """The absolute path of ``bwrap`` on ``path_env`` (the host's ``PATH``), or ``None``."""
    found = shutil.which("bwrap", path=path_env)
    return os.path.realpath(found) if found else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """The rlimits of one command (units in the names) and its process ceiling."""

    cpu_s: int
    memory_bytes: int
    max_processes: int
    max_file_bytes: int
    max_open_files: int

    def prlimit_args(self) -> list[str]:
        """``prlimit`` options setting soft = hard for each limit (and no core files)."""
        return [
            f"--cpu={self.cpu_s}", f"--as={self.memory_bytes}", f"--nproc={self.max_processes}",
            f"--fsize={self.max_file_bytes}", f"--nofile={self.max_open_files}", "--core=0",
        ]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class SandboxProfile:
    """What one command may reach (see the module docstring).

    Args:
        workspace: the workspace root (resolved, absolute).
        mode: ``"ro"`` or ``"rw"``.
        read_only: relative paths inside the root re-bound read-only when they exist.
        masked: relative paths hidden inside the sandbox (the grant's deny list): a
            directory by an empty tmpfs, a file by ``/dev/null``.
        binary: the executable's resolved absolute path (bound read-only if outside /usr).
        network: ``"none"``, or ``"egress"``: the proxy variables of :data:`PROXY_ENV` point
            at the launcher's relay on the sandbox's own loopback (:mod:`host.sandbox.proxy`).
        landlock: ``"abi N"`` (the launcher applies Landlock of that ABI) or
            ``"unavailable"`` (the kernel has none; bwrap and seccomp alone).
        env: the entry's variables (added to :data:`FIXED_ENV`).
        secret_env: variable -> secret name (the values are given per call, never bound).
        limits: the rlimits.
    """

    workspace: Path
    mode: Literal["ro", "rw"]
    read_only: tuple[str, ...]
    masked: tuple[str, ...] = ()
    binary: Path
    network: Literal["none", "egress"]
    landlock: str = "unavailable"
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict)
    limits: Limits

    def description(self) -> dict[str, object]:
        """The profile as JSON data: what :meth:`digest` covers."""
        _, filter_sha256 = build_filter(self.network)
        return {
            "sandbox": "bwrap",
            "namespaces": "all",
            "uid": SANDBOX_UID,
            "workspace": str(self.workspace),
            "mode": self.mode,
            "read_only": list(self.read_only),
            "masked": list(self.masked),
            "binary": str(self.binary),
            "network": self.network,
            "landlock": self.landlock,
            "landlock_grants": self.landlock_grants() if self.uses_launcher else None,
            "env": self._fixed_env(),
            "secret_env": dict(self.secret_env),
            "system": [*_SYSTEM, *_ETC],
            "limits": self.limits.prlimit_args(),
            "seccomp_sha256": filter_sha256,
        }

    def digest(self) -> str:
        """The sha256 of :meth:`description` (canonical JSON)."""
        return digest_json(self.description())

    def environment(self, secrets: Mapping[str, str]) -> dict[str, str]:
        """The command's whole environment: fixed, the entry's, and each ``secret_env``
        variable with its value from ``secrets`` (by secret name). It is bwrap's own
        environment (passed to ``execve``, never on a command line another user could
        read in ``/proc``), so nothing of the host's environment is in it.

        Raises:
            KeyError: a secret of ``secret_env`` is not in ``secrets`` (caller misuse).
        """
        return {**self._fixed_env(), **{var: secrets[name] for var, name in self.secret_env.items()}}

    def _fixed_env(self) -> dict[str, str]:
        return {**FIXED_ENV, **(PROXY_ENV if self.network == "egress" else {}), **self.env}

    @property
    def uses_launcher(self) -> bool:
        """Whether the command starts through :mod:`host.sandbox.launch` (Landlock, relay)."""
        return self.landlock != "unavailable" or self.network == "egress"

    def landlock_grants(self) -> dict[str, list[str]]:
        """The paths (inside the sandbox) Landlock grants: ``read`` (read and execute) and
        ``write`` (every right). Nothing else is reachable, whatever bwrap binds."""
        read = [*_SYSTEM, "/etc", "/proc"]
        read += [f"/{n}" for n in _MERGED if (Path("/") / n).is_dir() and not (Path("/") / n).is_symlink()]
        if not str(self.binary).startswith(tuple(f"{s}/" for s in _SYSTEM)):
            read.append(str(self.binary))
        write = [SANDBOX_TMP, "/dev"]
        (write if self.mode == "rw" else read).append(WORKSPACE)
        return {"read": read, "write": write}

    def _launcher(self, command: list[str], proxy_socket: Path | None) -> tuple[list[str], list[str]]:
        """The binds and the argv prefix of the launcher (empty when it is not used)."""
        if not self.uses_launcher:
            return [], command
        if self.network == "egress" and proxy_socket is None:
            raise RuntimeError("network egress runs with a proxy socket")
        binds = ["--ro-bind", str(_LAUNCH_SOURCE), f"{LAUNCH_DIR}/launch.py"]
        relay = None
        if proxy_socket is not None:
            relay = f"{LAUNCH_DIR}/proxy.sock"
            binds += ["--bind", str(proxy_socket), relay]
        options = ["--landlock", "off" if self.landlock == "unavailable" else "required"]
        if relay is not None:
            options += ["--relay", relay]
        grants = self.landlock_grants()
        for kind in ("read", "write"):
            for path in grants[kind]:
                options += [f"--{kind}", path]
        return binds, [LAUNCH_PYTHON, "-I", "-S", f"{LAUNCH_DIR}/launch.py", *options, "--", *command]

    def argv(
        self, bwrap: str, *, seccomp_fd: int, status_fd: int, cwd: str, command: list[str],
        proxy_socket: Path | None = None,
    ) -> list[str]:
        """bwrap's argv running ``command`` (``command[0]`` is the binary's path) in ``cwd``
        (a relative path beneath the workspace, already checked to be a directory), with
        ``proxy_socket`` (network ``egress``) bound where the launcher's relay finds it.

        Raises:
            SandboxUnavailable: a protected path inside the workspace is a symlink (it
                cannot be re-bound read-only without binding its target).
        """
        uid = str(SANDBOX_UID)
        args = [bwrap, "--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid,
                "--cap-drop", "ALL", "--die-with-parent",
                "--hostname", "sandbox", "--json-status-fd", str(status_fd)]  # fmt: skip
        args += _system_binds()
        if not str(self.binary).startswith(tuple(f"{s}/" for s in _SYSTEM)):
            args += ["--ro-bind", str(self.binary), str(self.binary)]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP]
        args += ["--bind" if self.mode == "rw" else "--ro-bind", str(self.workspace), WORKSPACE]
        for rel in self.read_only:
            if _present(self.workspace, rel):
                args += ["--ro-bind", str(self.workspace / rel), f"{WORKSPACE}/{rel}"]
        for rel in self.masked:
            if _present(self.workspace, rel):
                inside = f"{WORKSPACE}/{rel}"
                if (self.workspace / rel).is_dir():
                    args += ["--tmpfs", inside, "--remount-ro", inside]
                else:
                    args += ["--ro-bind", "/dev/null", inside]
        binds, command = self._launcher(command, proxy_socket)
        args += binds
        args += ["--chdir", WORKSPACE if cwd == "." else f"{WORKSPACE}/{cwd}", "--seccomp", str(seccomp_fd)]
        return [*args, "--", PRLIMIT, *self.limits.prlimit_args(), "--", *command]


def _system_binds() -> list[str]:
    args: list[str] = []
    for system in _SYSTEM:
        args += ["--ro-bind", system, system]
    for name in _MERGED:
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    for etc in _ETC:
        args += ["--ro-bind-try", etc, etc]
    return args


def server_argv(
    bwrap: str, *, command: str, read_paths: tuple[str, ...], cwd: Path, seccomp_fd: int
) -> list[str]:
    """The argv prefix running a stdio MCP server under bubblewrap (``transport.sandbox =
    "bwrap"``): every namespace new (no network), uid 65534 without capabilities, the system
    directories, ``read_paths`` and the command read-only, its working directory ``cwd``
    read-write at the same path, a private ``/tmp``, the seccomp filter of network ``none``.
    The environment is the server's own (the launcher passes exactly the declared one).
    The command and its arguments follow the returned list.
    """
    uid = str(SANDBOX_UID)
    args = [bwrap, "--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid, "--cap-drop", "ALL",
            "--die-with-parent", *_system_binds(), "--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP]
    for path in (*read_paths, command):  # after the tmpfs, which would hide a path under /tmp
        if not path.startswith(tuple(f"{s}/" for s in _SYSTEM)):
            args += ["--ro-bind", path, path]
    return [*args, "--bind", str(cwd), str(cwd), "--chdir", str(cwd), "--seccomp", str(seccomp_fd), "--"]


class PidsCgroup:
    """A pids cgroup for one sandbox (hosts running as root, where ``RLIMIT_NPROC`` does
    not bind): created with ``pids.max``, entered by the launcher before it execs bwrap,
    emptied and removed by :meth:`close`.

    Raises:
        SandboxUnavailable: the host runs as root and no pids cgroup can be created.
    """

    def __init__(self, max_processes: int) -> None:
        self.path: Path | None = None
        if os.geteuid() != 0:
            return  # RLIMIT_NPROC binds a non-root user
        for root in _CGROUP_ROOTS:
            if not _has_pids(root):
                continue
            parent = root / "stockade-exec"
            try:
                parent.mkdir(exist_ok=True)
                if root == Path("/sys/fs/cgroup"):  # v2: only our own cgroup's controllers change
                    (parent / "cgroup.subtree_control").write_text("+pids")
                path = parent / uuid.uuid4().hex
                path.mkdir()
                (path / "pids.max").write_text(str(max_processes))
            except OSError:
                continue
            self.path = path
            return
        raise SandboxUnavailable(
            "the host runs as root, where RLIMIT_NPROC does not bind, and no pids cgroup can be created",
            reason="process_limit",
            hint="Run the host as an unprivileged user, or give it a writable pids cgroup.",
        )

    def launcher(self) -> list[str]:
        """The argv prefix that moves the launcher into the cgroup, then execs the rest."""
        if self.path is None:
            return []
        return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def close(self) -> None:
        """Kill what is left in the cgroup (nothing, normally) and remove it."""
        if self.path is None:
            return
        for _ in range(50):
            try:
                pids = (self.path / "cgroup.procs").read_text().split()
                for pid in pids:
                    try:
                        os.kill(int(pid), 9)
                    except ProcessLookupError:
                        pass
                self.path.rmdir()
                break
            except OSError:
                time.sleep(0.01)  # killed processes leave the cgroup once reaped
        self.path = None


def _present(root: Path, rel: str) -> bool:
    """Whether ``rel`` exists beneath ``root``.

    Raises:
        SandboxUnavailable: it is a symlink (re-binding it would bind its target, which
            may lie outside the workspace, and leave the link itself writable).
    """
    inside = root / rel
    if inside.is_symlink():
        raise SandboxUnavailable(
            f"{rel!r} in the workspace is a symlink: it cannot be protected or hidden inside the sandbox",
            reason="protected_symlink",
            hint="Replace the symlink with what it points to, or change the grant.",
        )
    return inside.exists()


def _has_pids(root: Path) -> bool:
    if root.name == "pids":
        return (root / "pids.max").exists() or (root / "cgroup.procs").exists()
    controllers = root / "cgroup.controllers"
    try:
        return "pids" in controllers.read_text().split()
    except OSError:
        return False
