"""The seccomp filter of a sandboxed command, as a BPF program for ``bwrap --seccomp FD``.

Built with libseccomp (Debian ``libseccomp2``) through ``pyseccomp``, a ctypes binding
with the API of libseccomp's own Python module: libseccomp resolves syscall numbers per
architecture and emits the architecture check, so no hand-written BPF is reviewed here.
The default action is allow; the listed calls fail with ``EPERM`` (a denial list in the
spirit of Docker's profile, aimed at what would widen the sandbox: new namespaces,
mounts, tracing other processes, kernel keyrings, BPF, io_uring, module loading).
``ioctl`` ``TIOCSTI``/``TIOCLINUX`` fail too (no typing into a terminal). ``clone3`` fails
with ``ENOSYS`` so that libc falls back to ``clone``, whose namespace
flags the filter can inspect (``clone3`` passes them in memory). With network ``none``,
``socket`` with a family other than ``AF_UNIX`` fails with ``EPERM`` as well (the network
namespace is empty already; this is the second layer); with network ``egress``, every
family but ``AF_UNIX`` and ``AF_INET`` (the namespace has only its own loopback, where the
launcher's relay listens; Landlock narrows TCP connects to the relay's port). A syscall from another
architecture (32-bit ``int 0x80``) kills the process: libseccomp's default for a foreign
architecture.
"""

from __future__ import annotations

import errno
import functools
import socket
import tempfile
from typing import Any, Final

from host.canonical import sha256_hex
from host.errors import SandboxUnavailable

__all__ = ["DENIED_SYSCALLS", "NAMESPACE_FLAGS", "build_filter"]

DENIED_SYSCALLS: Final = (
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "pivot_root", "chroot",
    "unshare", "setns", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at", "name_to_handle_at",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "lookup_dcookie",
)  # fmt: skip
TTY_IOCTLS: Final = (
    0x5412,  # TIOCSTI: push a byte into a terminal's input queue
    0x541C,  # TIOCLINUX: the console's selection paste
)
NAMESPACE_FLAGS: Final = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)


try:
    import pyseccomp  # type: ignore[import-untyped]  # a ctypes binding without py.typed

    _MISSING: str | None = None
except (ImportError, OSError) as _exc:  # the package, or libseccomp.so.2, is missing
    pyseccomp = None
    _MISSING = str(_exc)


def _library() -> Any:
    if pyseccomp is None:
        raise SandboxUnavailable(
            f"the seccomp filter cannot be built: {_MISSING}",
            reason="seccomp",
            hint="Install libseccomp2 (Debian) and the pyseccomp package.",
        )
    return pyseccomp


@functools.cache
def build_filter(network: str) -> tuple[bytes, str]:
    """The BPF program for ``network`` (``"none"`` or ``"egress"``) and its sha256.

    Raises:
        SandboxUnavailable: libseccomp or its binding is missing, or refused a rule.
    """
    lib = _library()
    try:
        flt = lib.SyscallFilter(lib.ALLOW)
        deny = lib.ERRNO(errno.EPERM)
        for name in DENIED_SYSCALLS:
            flt.add_rule(deny, name)
        flt.add_rule(lib.ERRNO(errno.ENOSYS), "clone3")
        for request in TTY_IOCTLS:
            flt.add_rule(deny, "ioctl", lib.Arg(1, lib.MASKED_EQ, 0xFFFFFFFF, request))
        for flag in NAMESPACE_FLAGS:
            flt.add_rule(deny, "clone", lib.Arg(0, lib.MASKED_EQ, flag, flag))
        if network == "none":
            flt.add_rule(deny, "socket", lib.Arg(0, lib.NE, socket.AF_UNIX))
        else:  # egress: AF_UNIX and AF_INET (to the relay on the sandbox's own loopback) only
            flt.add_rule(deny, "socket", lib.Arg(0, lib.GT, socket.AF_INET))
        with tempfile.TemporaryFile() as out:
            flt.export_bpf(out)
            out.seek(0)
            program = out.read()
    except (OSError, RuntimeError, ValueError) as exc:
        raise SandboxUnavailable(f"the seccomp filter cannot be built: {exc}", reason="seccomp") from exc
    return program, sha256_hex(program)
