"""Subcommands of the ``stockade`` CLI, one module each, listed in :data:`COMMANDS`.

To add a command ``frob``: write ``sdk/commands/frob.py`` with ``register(sub)`` (it adds
its parser with ``sub.add_parser("frob", ...)`` and sets ``func(args) -> int``), then add
one :class:`Command` line below. ``sdk.cli`` imports only the module of the command being
run (start-up time: ``stockade --help`` stays cheap), so a command module may import heavy libraries
(wasmtime, httpx2, rich) at its top; this package must not. ``tests/cli/test_cli_basics.py``
checks that every module here with a ``register(sub)`` is listed (shared helpers are
best named with a leading ``_``).

A command that passes arguments on (``stockade test -- -k name``) sets a
``passthrough`` default; ``sdk.cli`` puts everything after ``--`` there. Host commands
get their ``--lock``/``--state-dir``/``--trusted-keys``/``--require-signatures``/
``--unsafe-allow-unsigned`` filled from the host config file before they run
(``sdk.commands._common.apply_host_file``).
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """One subcommand: ``sdk/commands/<module>.py`` provides it.

    Args:
        name: what the user types (``stockade NAME``).
        summary: the one-line help shown in ``stockade --help`` (without importing the module).
        module: the module name under ``sdk.commands`` (default: ``name``, with ``-`` as ``_``).
    """

    name: str
    summary: str
    module: str = ""

    @property
    def import_path(self) -> str:
        """The dotted module path to import."""
        return f"sdk.commands.{self.module or self.name.replace('-', '_')}"


COMMANDS: tuple[Command, ...] = (
    # set-up
    Command("init", "write a host config, policy file and secrets key; print the next commands"),
    # package authors
    Command("new", "start a plugin project (Python or JavaScript) with a passing test"),
    Command("build", "build a plugin project into a bundle"),
    Command("test", "build a plugin project and run its tests through the harness"),
    Command("dev", "run one tool call of a project or bundle through a real, throw-away host"),
    Command("watch", "rebuild and rerun a project's tests on every save"),
    Command("cassette", "verify or show an HTTP cassette recorded by the test harness"),
    Command("toolchain", "install or check the pinned JavaScript toolchain (per user)"),
    Command("cache", "the per-user build and compiled-artifact caches: info, prune"),
    Command("keygen", "make an Ed25519 signing key"),
    Command("sign", "sign a bundle with an Ed25519 key"),
    # security reviewers
    Command("inspect", "capability report of a bundle or every package of a lock"),
    Command("verify-build", "rebuild a project in a clean cache; compare with a bundle or locked package"),
    Command("lock", "add, remove and verify locked packages"),
    Command("diff", "what a lock change adds or widens (exit 3 on escalation)"),
    # distribution
    Command("push", "publish a bundle to an OCI registry (prints the digest to pin)"),
    Command("pull", "fetch a bundle from an OCI registry by digest, verified before it is written"),
    # host operators
    Command("tools", "print model-facing tool schemas (JSON)"),
    Command("call", "call a tool through the host pipeline"),
    Command("policy", "roles and bindings: init, role, grant, revoke, show, explain, grant-tool"),
    Command("secrets", "manage encrypted secrets"),
    Command("log", "the audit log: show, verify, export"),
    Command("store", "the state store: migrate a PostgreSQL store's schema"),
    Command("demo", "run the scripted security demo (loopback only)"),
    # MCP
    Command("serve", "serve the lock's tools to MCP clients (stdio or HTTP)"),
    Command("tokens", "bearer tokens for the MCP HTTP server"),
    Command("approvals", "list, approve or deny queued approvals (MCP clients without elicitation)"),
    Command("scopes", "grant, list, show or revoke scopes: exact calls an unattended job may make"),
    Command("completion", "print a shell completion script (bash, zsh, fish)"),
)
"""Every subcommand, in ``stockade --help`` order."""


def find(name: str) -> Command | None:
    """The command called ``name``, or ``None``."""
    return next((command for command in COMMANDS if command.name == name), None)
