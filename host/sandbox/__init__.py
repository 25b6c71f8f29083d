"""The process sandbox: bubblewrap, seccomp and resource limits for the commands
``exec.run`` starts (and, later, stdio MCP servers).

WASI gives a plugin no way to create a process, so every process Stockade starts for a
model is started here, by the host, from an operator-declared binary. The boundary is the
sandbox, not the command allowlist (``git -c alias.x='!sh …'`` and ``python3 -c`` run
arbitrary code): every call gets fresh namespaces (user, mount, PID, network, IPC, UTS,
cgroup), read-only system directories, the workspace bound read-only or read-write with
``.git`` and Stockade's own files re-bound read-only, a private ``/tmp``, a minimal
``/dev`` and ``/proc``, a cleared environment, a seccomp filter, ``PR_SET_NO_NEW_PRIVS``,
no capabilities and rlimits. If any part cannot be set up the call is refused with
``SANDBOX_UNAVAILABLE``; nothing runs bare unless the operator set
``unsafe_exec_without_sandbox``.

Modules:

- :mod:`host.sandbox.seccomp` — the seccomp filter (libseccomp through ``pyseccomp``);
- :mod:`host.sandbox.bwrap` — the profile (what is bound, limits) and bwrap's argv;
- :mod:`host.sandbox.process` — spawn, deadline and cancellation, bounded capture.
"""

from __future__ import annotations

from host.sandbox.bwrap import Limits, SandboxProfile, find_bwrap
from host.sandbox.process import Captured, Outcome, run_bare, run_sandboxed

__all__ = ["Captured", "Limits", "Outcome", "SandboxProfile", "find_bwrap", "run_bare", "run_sandboxed"]
