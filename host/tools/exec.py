"""``exec.run``: run an operator-declared command, argv only, in the process sandbox.

The model sends ``{argv, cwd?, timeout_ms?, stdin?}``. There is no shell: ``argv`` goes to
``execve`` as given. ``argv[0]`` must be the ``name`` of a ``[[command]]`` entry of the
host configuration (:class:`~host.config.CommandEntry`); anything else is
``POLICY_DENIED reason: "command_not_allowed"``. The entry's binary was resolved (symlinks
followed) and hashed when the Host opened; it is what runs, whatever ``PATH`` says.

The command allowlist is not the boundary: a declared ``git`` runs anything through
``-c alias.x='!sh …'``, a declared ``python3`` through ``-c``. The boundary is the
sandbox (:mod:`host.sandbox`): the principal's workspace at ``/workspace`` (read-only or
read-write per entry, ``.git`` and Stockade's files read-only, the grant's literal deny
paths hidden), no network (or, ``network = "egress"``, only the entry's ``allow`` list
through a host-run proxy, :mod:`host.sandbox.proxy`), Landlock where the kernel has it,
a cleared environment, seccomp, rlimits, a deadline. A grant
whose deny list has glob patterns cannot be enforced by bind mounts, so ``exec.run``
refuses there (``POLICY_DENIED reason: "deny_unenforceable"``).

``prepare`` computes the deadline and the sandbox profile and binds, into the action
digest, the argv, cwd, deadline, stdin's sha256, the entry's definition (with the
binary's path and sha256) and the profile's digest; the preview shows them. ``run``
starts the process. The tool's effect is ``execute`` (ask by default).
"""

from __future__ import annotations

import hashlib
import math
import os
import shlex
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from host.canonical import sha256_hex
from host.config import COMMAND_OUTPUT_CEILING, COMMAND_TIMEOUT_CEILING_MS, CommandEntry
from host.egress.policy import EgressPolicy, Resolver, system_resolver
from host.errors import CallCancelled, ConfigInvalid, InputInvalid, PolicyDenied, SandboxUnavailable
from host.formats.manifest import Effect, Risk
from host.sandbox import Captured, Limits, Outcome, SandboxProfile, find_bwrap, run_bare, run_sandboxed
from host.sandbox.bwrap import LAUNCH_PYTHON, WORKSPACE
from host.sandbox.launch import abi as landlock_abi
from host.sandbox.proxy import EgressProxy
from host.text import escape_unsafe
from host.tools.base import HostCall, HostTool, Prepared, Ran
from host.tools.fs import Workspaces
from host.tools.paths import MAX_PATH_BYTES, parse_path

__all__ = ["Commands", "ResolvedCommand", "exec_tool", "render_stream"]

VERSION: Final = "1.0.0"
MAX_ARGS: Final = 256  # argv entries
MAX_ARG_CHARS: Final = 4096  # code points of one argv entry
MAX_STDIN_CHARS: Final = 32768  # code points of stdin (the whole input is at most 64 KiB)
_GLOB: Final = frozenset("*?[")
_MAX_BYTES: Final = 2**53 - 1


@dataclass(frozen=True, slots=True)
class ResolvedCommand:
    """A command entry with its binary fixed at ``Host.open``."""

    entry: CommandEntry
    binary: Path  # the resolved path (symlinks followed)
    sha256: str  # of the binary's bytes when the Host opened

    def definition(self) -> dict[str, object]:
        """The entry as bound into the action digest (with the binary it resolved to)."""
        return {**self.entry.definition(), "binary": str(self.binary), "binary_sha256": self.sha256}


class Commands:
    """The command entries of one Host, each binary resolved once.

    Args:
        entries: the operator's entries.
        path_env: the ``PATH`` bwrap is looked up on (the host's own, at open).
        unsafe_without_sandbox: ``HostConfig.unsafe_exec_without_sandbox``.
        resolver: the DNS port of the egress proxy (``Host.open``'s ``resolver``).
        allow_loopback: ``HostConfig.unsafe_allow_loopback`` (TEST ONLY): the proxy
            admits loopback addresses too.

    Raises:
        ConfigInvalid: an entry's path is not an executable regular file.
    """

    def __init__(
        self,
        entries: Sequence[CommandEntry],
        *,
        path_env: str | None,
        unsafe_without_sandbox: bool,
        resolver: Resolver | None = None,
        allow_loopback: bool = False,
    ) -> None:
        self._by_name = {e.name: _resolve(e) for e in entries}
        self.bwrap = find_bwrap(path_env)
        self.unsafe_without_sandbox = unsafe_without_sandbox
        self.resolver: Resolver = resolver or system_resolver
        self.allow_loopback = allow_loopback
        self.landlock_abi = landlock_abi() if os.access(LAUNCH_PYTHON, os.X_OK) else 0
        self.policies = {e.name: _policy(e) for e in entries if e.network == "egress"}

    @property
    def names(self) -> list[str]:
        """The declared names, sorted."""
        return sorted(self._by_name)

    @property
    def entries(self) -> list[ResolvedCommand]:
        """The resolved entries, by name."""
        return [self._by_name[n] for n in self.names]

    def get(self, name: str) -> ResolvedCommand:
        """The entry named ``name``.

        Raises:
            PolicyDenied: no such entry (``reason: "command_not_allowed"``).
        """
        found = self._by_name.get(name)
        if found is None:
            raise PolicyDenied(
                f"exec.run: {name[:100]!r} is not a declared command (declared: {', '.join(self.names)})",
                reason="command_not_allowed",
                hint="argv[0] must name a [[command]] entry of the host configuration; an operator adds one.",
            )
        return found


def _policy(entry: CommandEntry) -> EgressPolicy:
    try:
        return EgressPolicy.from_allow(entry.allow)
    except ValueError as exc:
        raise ConfigInvalid(
            f"command {entry.name}: {exc}", hint="Write allow entries as a manifest's http.allow entries."
        ) from None


def _resolve(entry: CommandEntry) -> ResolvedCommand:
    real = Path(os.path.realpath(entry.path))
    try:
        with real.open("rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
                raise OSError(0, "not an executable regular file")
            digest = hashlib.sha256()
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise ConfigInvalid(
            f"command {entry.name}: {entry.path} cannot be used: {exc.strerror or exc}",
            hint="Give the absolute path of an installed executable in [[command]].",
        ) from None
    return ResolvedCommand(entry, real, digest.hexdigest())


def exec_tool(commands: Commands, workspaces: Workspaces) -> HostTool:
    """The ``exec.run`` host tool over ``commands``, in the principals' workspaces."""
    ceiling_ms = max((c.entry.max_timeout_ms for c in commands.entries), default=1000)
    timeout_s = min(math.ceil(ceiling_ms / 1000) + 5, 3600)  # the grace period and setup fit

    def prepare(call: HostCall) -> Prepared:
        return _prepare(commands, workspaces, call, tool_timeout_ms=timeout_s * 1000)

    def run(call: HostCall, prepared: Prepared | None) -> Ran:
        if prepared is None:  # pragma: no cover - the host always prepares a tool with prepare
            raise RuntimeError("exec.run runs only prepared")
        return _run(commands, call, prepared)

    return HostTool(
        name="exec.run",
        version=VERSION,
        description="Run a command the operator declared, in a sandbox: argv only (no shell), argv[0] is the "
        "command's name, cwd relative to the workspace. Returns exit code, stdout and stderr (capped).",
        input_schema=_INPUT_SCHEMA,
        output_schema=_OUTPUT_SCHEMA,
        effect=Effect.EXECUTE,
        risk=Risk.HIGH,
        permissions=("exec.run",),
        run=run,
        prepare=prepare,
        secrets=lambda call: _secret_names(commands, call),
        timeout_s=timeout_s,
        sensitive_params=("stdin",),
    )


def _object(properties: Mapping[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": dict(properties),
            "required": required}  # fmt: skip


_INPUT_SCHEMA: Final = _object(
    {
        "argv": {
            "type": "array", "minItems": 1, "maxItems": MAX_ARGS,
            "items": {"type": "string", "maxLength": MAX_ARG_CHARS},
            "description": "The command line: argv[0] is a declared command's name; no shell.",
        },
        "cwd": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_BYTES,
                "description": "Working directory relative to the workspace root (default '.')."},
        "timeout_ms": {"type": "integer", "minimum": 1, "maximum": COMMAND_TIMEOUT_CEILING_MS},
        "stdin": {"type": "string", "maxLength": MAX_STDIN_CHARS},
    },
    ["argv"],
)  # fmt: skip
_BYTES: Final = {"type": "integer", "minimum": 0, "maximum": _MAX_BYTES}
_TEXT: Final = {"type": "string", "maxLength": COMMAND_OUTPUT_CEILING + 256}
_OUTPUT_SCHEMA: Final = _object(
    {
        "exit_code": {"type": "integer", "minimum": -1, "maximum": 255},
        "signal": {"type": "integer", "minimum": 0, "maximum": 128},
        "timed_out": {"type": "boolean"},
        "stdout": _TEXT, "stderr": _TEXT,
        "stdout_bytes": _BYTES, "stderr_bytes": _BYTES,
        "stdout_truncated": {"type": "boolean"}, "stderr_truncated": {"type": "boolean"},
        "duration_ms": {"type": "integer", "minimum": 0, "maximum": _MAX_BYTES},
    },
    ["exit_code", "signal", "timed_out", "stdout", "stderr", "stdout_bytes", "stderr_bytes",
     "stdout_truncated", "stderr_truncated", "duration_ms"],
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Plan:
    command: ResolvedCommand
    profile: SandboxProfile
    argv: list[str]
    cwd: str
    stdin: bytes
    deadline_ms: int


def _prepare(commands: Commands, workspaces: Workspaces, call: HostCall, *, tool_timeout_ms: int) -> Prepared:
    argv = list(call.input["argv"])
    for index, arg in enumerate(argv):
        if "\x00" in arg:
            raise InputInvalid(
                f"argv[{index}] contains a NUL character", pointer=f"/argv/{index}", reason="nul"
            )
    command = commands.get(argv[0])
    entry = command.entry
    grant, ws = workspaces.for_principal(call.principal)
    rel = parse_path(call.input.get("cwd", "."), pointer="/cwd")
    ws.check_read(rel)
    os.close(ws.open_dir(rel, follow=False))  # a directory beneath the root, no symlink on the way
    globbed = [p for p in grant.deny if _GLOB & set(p)]
    if globbed:
        raise PolicyDenied(
            f"exec.run: the workspace's deny list has glob patterns ({', '.join(globbed[:5])}) that a "
            "sandbox bind cannot hide",
            reason="deny_unenforceable",
            hint="Use literal paths in the grant's deny list, or a workspace without glob denials.",
        )
    masked = tuple(p.strip("/") for p in grant.deny)
    sandbox = _sandbox_mode(commands, entry)
    profile = SandboxProfile(
        workspace=ws.root.resolve(), mode=entry.workspace, read_only=tuple(p for p in ws.protected if p),
        masked=masked, binary=command.binary, network=entry.network,
        landlock=_landlock(commands, entry, bare=sandbox == "none"), env=entry.env,
        secret_env=entry.secret_env,
        limits=Limits(cpu_s=entry.cpu_s, memory_bytes=entry.memory_bytes, max_processes=entry.max_processes,
                      max_file_bytes=entry.max_file_bytes, max_open_files=entry.max_open_files),
    )  # fmt: skip
    profile_digest = profile.digest() if sandbox == "bwrap" else "none"
    requested = call.input.get("timeout_ms", entry.max_timeout_ms)
    deadline_ms = min(requested, entry.max_timeout_ms, tool_timeout_ms)
    stdin = call.input.get("stdin", "").encode("utf-8")
    plan = _Plan(command, profile, argv, rel.text, stdin, deadline_ms)
    bound = {
        "argv": argv, "cwd": rel.text, "timeout_ms": deadline_ms, "stdin_sha256": sha256_hex(stdin),
        "stdin_bytes": len(stdin), "command": command.definition(), "sandbox": sandbox,
        "profile_digest": profile_digest,
    }  # fmt: skip
    record = {"command": entry.name, "network": entry.network, "workspace": entry.workspace,
              "sandbox": sandbox, "profile_digest": profile_digest, "landlock": profile.landlock}  # fmt: skip
    return Prepared(bound=bound, preview=_preview(plan, sandbox), record=record, state=plan)


def _secret_names(commands: Commands, call: HostCall) -> tuple[str, ...]:
    """The secrets the call's command maps into its environment (staged by the pipeline)."""
    argv = call.input["argv"]
    try:
        entry = commands.get(argv[0]).entry
    except PolicyDenied:
        return ()  # prepare refuses it
    return tuple(sorted(set(entry.secret_env.values())))


def _landlock(commands: Commands, entry: CommandEntry, *, bare: bool) -> str:
    """``"abi N"`` when the launcher applies Landlock, else ``"unavailable"`` (always when
    the command runs ``bare``, without the sandbox).

    Raises:
        SandboxUnavailable: the entry requires Landlock and the kernel (or the system's
            ``/usr/bin/python3``, which runs the launcher) has none (``reason: "landlock"``).
    """
    if commands.landlock_abi >= 1 and not bare:
        return f"abi {commands.landlock_abi}"
    if entry.landlock == "required":
        raise SandboxUnavailable(
            f"exec.run: command {entry.name} requires Landlock, and this host has none "
            f"(kernel ABI 0 or no {LAUNCH_PYTHON}); the command was not run",
            reason="landlock",
            hint="Run on Linux >= 5.13 with Landlock enabled (lsm=landlock), or set landlock = \"auto\".",
        )
    return "unavailable"


def _sandbox_mode(commands: Commands, entry: CommandEntry) -> str:
    """``"bwrap"``, or ``"none"`` when bwrap is missing and the operator allowed running bare.

    Raises:
        SandboxUnavailable: no bwrap on the host's ``PATH`` (``reason: "no_bwrap"``); a
            command with network ``egress`` without the launcher's ``/usr/bin/python3``
            (``reason: "launcher"``). Egress never runs bare: the proxy is only
            reachable from inside a sandbox.
    """
    if entry.network == "egress" and not os.access(LAUNCH_PYTHON, os.X_OK):
        raise SandboxUnavailable(
            f"exec.run: network egress needs the sandbox's launcher, and {LAUNCH_PYTHON} is missing",
            reason="launcher",
        )
    if commands.bwrap is not None:
        return "bwrap"
    if entry.network == "egress":
        raise SandboxUnavailable(
            "exec.run: bubblewrap (bwrap) is not on the host's PATH; network egress never runs bare",
            reason="no_bwrap",
        )
    if commands.unsafe_without_sandbox:
        return "none"
    raise SandboxUnavailable(
        "exec.run: bubblewrap (bwrap) is not on the host's PATH; the command was not run",
        reason="no_bwrap",
    )


def _preview(plan: _Plan, sandbox: str) -> str:
    entry = plan.command.entry
    where = WORKSPACE if plan.cwd == "." else f"{WORKSPACE}/{plan.cwd}"
    lines = [
        f"Run {entry.name} ({plan.command.binary}; effect {entry.effect}, risk {entry.risk})",
        f"argv: {shlex.join(_one_line(a) for a in plan.argv)}",
        f"cwd: {where} (workspace {entry.workspace}, {plan.profile.workspace})",
        f"network: {entry.network}" + _allow_summary(entry),
        f"landlock: {plan.profile.landlock}",
        f"timeout: {plan.deadline_ms} ms",
        f"stdin: {len(plan.stdin)} bytes",
        f"sandbox: {sandbox}" + ("" if sandbox == "bwrap" else " (UNSAFE: unsafe_exec_without_sandbox)"),
    ]
    if entry.env:
        lines.append("env: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in entry.env.items()))
    return escape_unsafe("\n".join(lines), keep_layout=True)


def _allow_summary(entry: CommandEntry) -> str:
    if entry.network != "egress":
        return ""
    shown = [f"{a['methods']} {a['scheme']}://{a['host']}{':' + str(a['port']) if a['port'] else ''}"
             f"{a['path_prefix']}" for a in entry.allow]  # fmt: skip
    return " (through the host's proxy, only: " + "; ".join(shown) + ")"


def _one_line(arg: str) -> str:
    """An argument on one preview line: a newline in argv must not forge a preview line."""
    return arg.replace("\n", "\\n").replace("\t", "\\t")


def _run(commands: Commands, call: HostCall, prepared: Prepared) -> Ran:
    plan: _Plan = prepared.state
    sandbox = prepared.bound["sandbox"]
    cap = plan.command.entry.max_output_bytes
    command = [str(plan.command.binary), *plan.argv[1:]]
    deadline_s = plan.deadline_ms / 1000
    secrets = {name: value.reveal() for name, value in call.secrets.items()}
    proxy: EgressProxy | None = None
    if sandbox == "bwrap" and commands.bwrap is not None:
        entry = plan.command.entry
        if entry.network == "egress":
            proxy = EgressProxy(
                commands.policies[entry.name], commands.resolver, allow_loopback=commands.allow_loopback,
                max_bytes=entry.max_egress_bytes, deadline=time.monotonic() + deadline_s,
            )  # fmt: skip
        try:
            outcome = run_sandboxed(
                plan.profile, commands.bwrap, command, cwd=plan.cwd, stdin=plan.stdin, deadline_s=deadline_s,
                cancel=call.cancel, max_output_bytes=cap, secrets=secrets,
                proxy_socket=proxy.socket_path if proxy is not None else None,
            )  # fmt: skip
        finally:
            if proxy is not None:
                proxy.close()
    else:
        env = plan.profile.environment(secrets)
        outcome = run_bare(
            command, cwd=plan.profile.workspace / plan.cwd, env={**env, "HOME": str(plan.profile.workspace)},
            stdin=plan.stdin, deadline_s=deadline_s, cancel=call.cancel, max_output_bytes=cap,
        )  # fmt: skip
    record = _outcome_record(outcome, prepared)
    if proxy is not None:
        record["egress"] = proxy.records
        record["egress_connections"] = proxy.connections
    if outcome.cancelled:
        raise CallCancelled("the caller cancelled exec.run; the command's process tree was killed", **record)
    stdout, stdout_cut = render_stream(outcome.stdout, cap)
    stderr, stderr_cut = render_stream(outcome.stderr, cap)
    output = {
        "exit_code": outcome.exit_code, "signal": outcome.signal, "timed_out": outcome.timed_out,
        "stdout": stdout, "stderr": stderr, "stdout_bytes": outcome.stdout.total,
        "stderr_bytes": outcome.stderr.total, "stdout_truncated": stdout_cut, "stderr_truncated": stderr_cut,
        "duration_ms": round(outcome.duration_ms),
    }  # fmt: skip
    return Ran(output, record=record)


def _outcome_record(outcome: Outcome, prepared: Prepared) -> dict[str, Any]:
    return {
        "command": prepared.record["command"], "sandbox": prepared.bound["sandbox"],
        "profile_digest": prepared.bound["profile_digest"], "landlock": prepared.record["landlock"],
        "exit_code": outcome.exit_code,
        "signal": outcome.signal, "timed_out": outcome.timed_out, "cancelled": outcome.cancelled,
        "stdout_bytes": outcome.stdout.total, "stderr_bytes": outcome.stderr.total,
        "duration_ms": round(outcome.duration_ms),
    }  # fmt: skip


def render_stream(captured: Captured, budget: int) -> tuple[str, bool]:
    """A stream as text (UTF-8 with replacement) whose JSON encoding fits ``budget`` bytes,
    and whether anything was left out. Head and tail are kept around a marker naming
    how many bytes were dropped."""
    if not captured.truncated:
        text = (captured.head + captured.tail).decode("utf-8", "replace")
        if _json_len(text) <= budget:
            return text, False
        head, tail = text, text
    else:
        head = captured.head.decode("utf-8", "replace")
        tail = captured.tail.decode("utf-8", "replace")
    dropped = captured.total - len(captured.head) - len(captured.tail)
    marker = f"\n[... {dropped} bytes omitted ...]\n" if dropped else "\n[... omitted ...]\n"
    half = max((budget - _json_len(marker)) // 2, 0)
    return _take(head, half, from_end=False) + marker + _take(tail, half, from_end=True), True


def _cost(ch: str) -> int:
    code = ord(ch)
    if ch in '"\\\b\f\n\r\t':
        return 2
    if code < 0x20:
        return 6  # \\u00XX
    return 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4


def _json_len(text: str) -> int:
    if text.isascii() and text.isprintable():  # the common case: one byte per character
        return len(text)
    return sum(_cost(ch) for ch in text)


def _take(text: str, budget: int, *, from_end: bool) -> str:
    """The longest prefix (or suffix) of ``text`` whose JSON encoding fits ``budget``."""
    chars = reversed(text) if from_end else iter(text)
    used = count = 0
    for ch in chars:
        used += _cost(ch)
        if used > budget:
            break
        count += 1
    if from_end:
        return text[len(text) - count :] if count else ""
    return text[:count]
