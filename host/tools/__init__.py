"""Host tools: tools the host runs itself, served through the one call pipeline.

A host tool (:class:`~host.tools.base.HostTool`) is a name, an exact version, schemas in
the bounded subset, an effect, a risk, permissions and a handler (``run``, plus
``prepare`` for tools that change something). A :class:`~host.tools.base.HostToolSet` is
one built-in package (``stockade.host``) of the frozen registry, so a host tool call goes
through the same steps as a package tool: registry, policy before input, layered tool
policy, input validation, action digest, approval, rate limit, audit intent and outcome.
What a write would do is computed by ``prepare`` before approval and bound into the
action digest (:func:`~host.tools.base.bind_digest`), so an approval covers exactly that
effect and ``run`` refuses with ``APPROVAL_INVALID reason: "stale"`` when it changed.

Modules:

- :mod:`host.tools.base` — the mechanism (``HostTool``, ``Prepared``, ``Ran``, ``HostToolSet``);
- :mod:`host.tools.paths` — workspace path grammar and race-free resolution beneath a root fd;
- :mod:`host.tools.atomic` — atomic, durable replace and create beneath a directory fd;
- :mod:`host.tools.fs` — ``fs.read_file``, ``fs.edit_file``, ``fs.list``;
- :mod:`host.tools.fs_write` — ``fs.write_file`` (create only);
- :mod:`host.tools.fs_search` — ``fs.search`` (literal, bounded);
- :mod:`host.tools.preopens` — plugins' read-only workspace preopens (``workspace.read``);
- :mod:`host.tools.exec` — ``exec.run`` (operator-declared commands in :mod:`host.sandbox`).

Resources (workspace roots, command entries) come from the operator's
:class:`~host.config.HostConfig`, never from the model, a client or a manifest.
:func:`host_tools_for` builds the set a Host serves from its configuration.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from host.config import HostConfig
from host.egress.policy import Resolver
from host.tools.base import HOST_PACKAGE, HostCall, HostTool, HostToolSet, Prepared, Ran, bind_digest

__all__ = [
    "HOST_PACKAGE",
    "HostCall",
    "HostTool",
    "HostToolSet",
    "Prepared",
    "Ran",
    "bind_digest",
    "host_tools_for",
]


def host_tools_for(
    config: HostConfig, *, protected: Sequence[Path], resolver: Resolver | None = None
) -> HostToolSet | None:
    """The host tools of a configuration: the ``fs.*`` tools when a workspace is granted,
    and ``exec.run`` when commands are declared too.

    Args:
        config: the host configuration (``workspaces``, ``commands``).
        protected: Stockade's own files (state dir, lock, audit log), write-protected
            wherever they lie inside a workspace root (and read-only inside the sandbox).
        resolver: the DNS port of ``exec.run``'s egress proxy (default: the system's).

    Raises:
        ToolFailed: a workspace root cannot be opened.
        ConfigInvalid: a command's binary is not an executable file.
    """
    if not config.workspaces:
        return None
    # The tools' modules (and exec's sandbox, bwrap and seccomp) load only for a host that
    # serves them: a host without workspaces, and the CLI, start without them.
    from host.tools.exec import Commands, exec_tool  # noqa: PLC0415
    from host.tools.fs import Workspaces, edit_tool, list_tool, read_tool  # noqa: PLC0415
    from host.tools.fs_search import search_tool  # noqa: PLC0415
    from host.tools.fs_write import write_tool  # noqa: PLC0415

    workspaces = Workspaces(config.workspaces, protected=[config.state_dir, *protected])
    tools = [read_tool(workspaces), edit_tool(workspaces), write_tool(workspaces), list_tool(workspaces),
             search_tool(workspaces)]  # fmt: skip
    if config.commands:
        try:
            commands = Commands(
                config.commands, path_env=os.environ.get("PATH"),
                unsafe_without_sandbox=config.unsafe_exec_without_sandbox, resolver=resolver,
                allow_loopback=config.unsafe_allow_loopback,
            )  # fmt: skip
        except BaseException:
            workspaces.close()
            raise
        tools.append(exec_tool(commands, workspaces))
    return HostToolSet(
        tools, ceilings=config.ceilings, close=workspaces.close, plugin_reads=workspaces.plugin_reads
    )
