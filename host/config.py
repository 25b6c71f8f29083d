"""Host-wide configuration and resource ceilings (CONTRIBUTING.md principle 9).

Every limit a manifest may ask for has a ceiling here, with its unit. A manifest asking
for more than a ceiling is refused when it loads (MANIFEST_INVALID), never clamped.

Example::

    config = HostConfig(state_dir=Path("~/.stockade").expanduser())
    config.ceilings.memory_bytes   # 512 MiB
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

__all__ = ["DEFAULT_CEILINGS", "Ceilings", "CommandEntry", "HostConfig", "WorkspaceGrant"]

_log = logging.getLogger("stockade.config")

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Ceilings:
    """The most any manifest may ask for. Units are in the field names' comments."""

    fuel: int = 20_000_000_000  # wasm fuel units (about one per instruction)
    memory_bytes: int = 512 * MiB  # bytes, summed over all linear memories of a call
    timeout_ms: int = 300_000  # ms, wall clock of one call (limits.timeout_ms)
    tool_timeout_s: int = 3600  # s, a tool's timeout_s (docs/design.md §3: 1–3600)
    max_http_requests: int = 64  # outbound requests per call
    max_request_bytes: int = 8 * MiB  # bytes of one outbound request body
    max_response_bytes: int = 32 * MiB  # bytes of one inbound response body
    http_timeout_ms: int = 120_000  # ms, one outbound request
    max_log_bytes: int = 1 * MiB  # bytes of guest log kept per call
    max_tools: int = 128  # tools in one registry (docs/design.md §5)
    max_permissions: int = 16  # permissions one tool may require
    max_input_bytes: int = 64 * 1024  # bytes of canonical input (docs/design.md §5)
    max_output_bytes: int = 256 * 1024  # bytes of canonical output (docs/design.md §5)
    trap_text_bytes: int = 4096  # bytes of trap text kept (docs/design.md §8)
    max_scope_s: int = 86_400  # s, the longest a scope (stockade.scope/1) may live

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Ceilings.{name} must be a positive int, got {value!r}")


DEFAULT_CEILINGS = Ceilings()


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkspaceGrant:
    """A workspace root the operator grants to a project's principals (``fs.*`` host tools).

    The root comes only from here (the host configuration), never from the model, a
    client, MCP Roots or a manifest. The host opens it as a directory fd at ``Host.open``.

    Args:
        root: the workspace directory.
        project: the project whose principals get it.
        subjects: only these subjects of the project (empty: every subject).
        deny: glob patterns (``fnmatch``) of relative paths refused for reads and writes
            and hidden from ``fs.list``; a pattern matching a directory covers what is
            beneath it.
        protected: extra relative paths refused for writes (``.git`` and the Stockade
            state, lock and audit files inside the root are always protected).
        max_file_bytes: bytes, the largest file ``fs.read_file``/``fs.edit_file`` open
            (checked with ``fstat`` before reading).
        page_bytes: bytes of one ``fs.read_file`` reply's content (JSON-encoded).
        max_line_bytes: bytes of one line in a reply; longer lines are cut with a marker.
        max_diff_bytes: bytes of an edit's unified diff; a larger diff is refused.
        max_list_entries: entries of one ``fs.list`` reply (at most 256).
    """

    root: Path
    project: str
    subjects: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    protected: tuple[str, ...] = ()
    max_file_bytes: int = 8 * MiB  # bytes
    page_bytes: int = 64_000  # bytes
    max_line_bytes: int = 4096  # bytes
    max_diff_bytes: int = 128 * 1024  # bytes
    max_list_entries: int = 256  # entries

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        for name in ("max_file_bytes", "page_bytes", "max_line_bytes", "max_diff_bytes", "max_list_entries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"WorkspaceGrant.{name} must be a positive int, got {value!r}")
        if self.max_list_entries > 256:
            raise ValueError("WorkspaceGrant.max_list_entries is at most 256 (the schema subset's maxItems)")
        if self.page_bytes > 128 * 1024:
            raise ValueError("WorkspaceGrant.page_bytes must leave room under the 256 KiB output ceiling")

    def grants(self, project: str, subject: str) -> bool:
        """Whether this grant is for (project, subject)."""
        return project == self.project and (not self.subjects or subject in self.subjects)


MAX_READY_INSTANCES: Final = 16  # ready instances per (component, limits)
MAX_POOL_INSTANCES: Final = 1024  # pooling-allocator slots (each reserves ~4 GiB of address space)
_COMMAND_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# The sandbox sets these itself (a fixed PATH, HOME in the private /tmp, LANG, TZ); the
# loader variables would let an entry's environment change what the binary links against.
# The proxy variables are the sandbox's too (network egress points them at its relay).
_ENV_RESERVED: Final = frozenset({
    "PATH", "HOME", "LANG", "TZ", "TMPDIR", "PWD", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
    "http_proxy", "https_proxy", "all_proxy", "no_proxy",
})  # fmt: skip
_ALLOW_FIELDS: Final = ("scheme", "host", "port", "path_prefix", "methods")  # a manifest's http.allow entry
COMMAND_OUTPUT_CEILING: Final = 512 * 1024  # bytes kept of one stream (stdout or stderr)
COMMAND_TIMEOUT_CEILING_MS: Final = 3_600_000  # ms, the longest max_timeout_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandEntry:
    """A command the operator lets ``exec.run`` start (``[[command]]`` in the host file).

    The model names an entry by ``name`` as ``argv[0]``; the binary is ``path``, an
    absolute path resolved once when the Host opens (never looked up in ``PATH`` per
    call). It runs in the bubblewrap sandbox (:mod:`host.sandbox`) with the principal's
    workspace bound at ``/workspace``.

    Args:
        name: what ``argv[0]`` must be (letters, digits, ``._+-``; at most 64).
        path: the absolute path of the executable.
        max_timeout_ms: ms, the longest deadline a call may ask for (default 30 s).
        network: ``"none"`` (a fresh network namespace, non-``AF_UNIX`` sockets refused by
            seccomp) or ``"egress"``: still a fresh namespace, and a host-run forward proxy
            (:mod:`host.sandbox.proxy`) reached through ``HTTP_PROXY``/``HTTPS_PROXY``
            admits what ``allow`` lists, with the egress rules of plugin HTTP.
        allow: with ``egress`` (and only then; at least one): entries in the grammar of
            a manifest's ``http.allow`` (``scheme``, ``host``, ``port``, ``path_prefix``,
            ``methods``). A tunnel (``CONNECT``, https) needs ``path_prefix = "/"``.
        max_egress_bytes: bytes through the proxy per call, both directions together.
        landlock: ``"auto"`` (Landlock as a second filesystem and TCP layer where the
            kernel has it; audited ``unavailable`` otherwise) or ``"required"`` (no
            Landlock: ``SANDBOX_UNAVAILABLE``).
        workspace: ``"ro"`` or ``"rw"``: how the workspace root is bound (``.git`` and
            Stockade's files inside it are always re-bound read-only).
        env: variables set in the cleared environment, literal values (visible to the
            process and everything it runs). ``PATH``, ``HOME``, ``LANG``, ``TZ``,
            ``TMPDIR``, ``PWD`` and ``LD_*`` are refused.
        secret_env: variable name -> secret name: the caller's stored secret is staged for
            the call and set as that variable (visible to the process and to everything it
            runs; scrubbed from the output and the records). Same name rules as ``env``.
        effect: what the command does, shown in the preview and bound into the action
            digest (``execute`` by default; the tool's effect is ``execute`` either way).
        risk: ``low``, ``medium`` or ``high`` (default), shown and bound the same way.
        max_output_bytes: bytes kept of stdout and of stderr each (head and tail;
            default 64 KiB, at most 512 KiB).
        cpu_s: s of CPU time (``RLIMIT_CPU``).
        memory_bytes: bytes of address space (``RLIMIT_AS``).
        max_processes: processes (``RLIMIT_NPROC``, counted in the sandbox's user namespace).
        max_file_bytes: bytes, the largest file the command may write (``RLIMIT_FSIZE``).
        max_open_files: open file descriptors (``RLIMIT_NOFILE``).

    Raises:
        ValueError: a field out of its range or a reserved variable.
    """

    name: str
    path: Path
    max_timeout_ms: int = 30_000  # ms
    network: Literal["none", "egress"] = "none"
    allow: tuple[Mapping[str, object], ...] = ()
    max_egress_bytes: int = 64 * MiB  # bytes, per call
    landlock: Literal["auto", "required"] = "auto"
    workspace: Literal["ro", "rw"] = "ro"
    env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict)
    effect: Literal["read", "write", "execute", "external"] = "execute"
    risk: Literal["low", "medium", "high"] = "high"
    max_output_bytes: int = 64 * 1024  # bytes, per stream
    cpu_s: int = 60  # s
    memory_bytes: int = 4 * 1024 * MiB  # bytes
    max_processes: int = 256  # processes
    max_file_bytes: int = 256 * MiB  # bytes
    max_open_files: int = 256  # descriptors

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _COMMAND_NAME.fullmatch(self.name):
            raise ValueError(f"command name {self.name!r}: letters, digits and ._+- (at most 64)")
        text = str(self.path)
        if "\x00" in text or not Path(text).is_absolute():
            raise ValueError(f"command {self.name}: path must be absolute, got {text!r}")
        object.__setattr__(self, "path", Path(text))
        for name in ("max_timeout_ms", "max_output_bytes", "max_egress_bytes", "cpu_s", "memory_bytes",
                     "max_processes", "max_file_bytes", "max_open_files"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"command {self.name}: {name} must be a positive int, got {value!r}")
        if self.max_timeout_ms > COMMAND_TIMEOUT_CEILING_MS:
            raise ValueError(f"command {self.name}: max_timeout_ms is at most {COMMAND_TIMEOUT_CEILING_MS}")
        if self.max_output_bytes > COMMAND_OUTPUT_CEILING:
            raise ValueError(f"command {self.name}: max_output_bytes is at most {COMMAND_OUTPUT_CEILING}")
        _one_of(self.name, "network", self.network, ("none", "egress"))
        _one_of(self.name, "landlock", self.landlock, ("auto", "required"))
        object.__setattr__(self, "allow", _allow_entries(self.name, self.network, self.allow))
        _one_of(self.name, "workspace", self.workspace, ("ro", "rw"))
        _one_of(self.name, "effect", self.effect, ("read", "write", "execute", "external"))
        _one_of(self.name, "risk", self.risk, ("low", "medium", "high"))
        for table in ("env", "secret_env"):
            self._check_env(table, getattr(self, table))
            object.__setattr__(self, table, dict(sorted(getattr(self, table).items())))
        if set(self.env) & set(self.secret_env):
            raise ValueError(f"command {self.name}: a variable is in both env and secret_env")

    def _check_env(self, table: str, values: object) -> None:
        if not isinstance(values, Mapping):
            raise ValueError(f"command {self.name}: {table} must be a table of strings")
        for key, value in values.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"command {self.name}: {table} name {key!r} is not a variable name")
            if key in _ENV_RESERVED or key.startswith("LD_"):
                raise ValueError(f"command {self.name}: {table} {key} is set by the sandbox or refused")
            if not isinstance(value, str) or "\x00" in value or (table == "secret_env" and not value):
                raise ValueError(f"command {self.name}: {table} {key} must be a non-empty string without NUL")

    def definition(self) -> dict[str, object]:
        """The entry as JSON data (what the action digest binds and ``inspect`` shows)."""
        return {
            "name": self.name, "path": str(self.path), "max_timeout_ms": self.max_timeout_ms,
            "network": self.network, "allow": [dict(a) for a in self.allow],
            "max_egress_bytes": self.max_egress_bytes, "landlock": self.landlock,
            "workspace": self.workspace, "env": dict(self.env),
            "secret_env": dict(self.secret_env),
            "effect": self.effect, "risk": self.risk, "max_output_bytes": self.max_output_bytes,
            "cpu_s": self.cpu_s, "memory_bytes": self.memory_bytes, "max_processes": self.max_processes,
            "max_file_bytes": self.max_file_bytes, "max_open_files": self.max_open_files,
        }  # fmt: skip


def _allow_entries(command: str, network: str, entries: object) -> tuple[Mapping[str, object], ...]:
    """``allow``'s shape: tables with the fields of a manifest's ``http.allow`` entry
    (``port`` may be left out: the scheme's default). Their grammar is the egress
    allowlist's own parser's (``EgressPolicy.from_allow``), run by the host file loader
    and by ``exec.run`` when the Host opens: this core module imports nothing above it."""
    if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, (list, tuple)):
        raise ValueError(f"command {command}: allow must be a list of tables")
    if network != "egress":
        if entries:
            raise ValueError(f'command {command}: allow needs network = "egress"')
        return ()
    if not entries:
        raise ValueError(f'command {command}: network = "egress" needs at least one allow entry')
    parsed: list[Mapping[str, object]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"command {command}: allow[{index}] must be a table")
        unknown = sorted(str(key) for key in entry if key not in _ALLOW_FIELDS)
        missing = [name for name in _ALLOW_FIELDS if name != "port" and name not in entry]
        if unknown or missing:
            raise ValueError(f"command {command}: allow[{index}]: unknown {unknown}, missing {missing}")
        methods = entry["methods"]
        listed = list(methods) if isinstance(methods, (list, tuple)) else methods
        data = {"port": None, **entry, "methods": listed}
        parsed.append(MappingProxyType({name: data[name] for name in _ALLOW_FIELDS}))
    return tuple(parsed)


def _one_of(command: str, key: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"command {command}: {key} must be one of {', '.join(allowed)}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostConfig:
    """Configuration of one Host. Keyword arguments only (``HostConfig(state_dir=...)``):
    most fields are flags whose meaning a position would hide.

    Args:
        state_dir: where the host keeps accepted lock state, the artifact cache and its
            HMAC key, secrets and policy files. Created with mode 0700 if missing.
        ceilings: host-wide resource ceilings.
        require_signatures: refuse any locked package without a valid signature, even
            when no trusted keys are configured (every package is then refused).
        trusted_keys_file: JSON file of trusted Ed25519 public keys (see host.trust.lock).
            Configuring trusted keys makes package signatures required (an unsigned
            package is SIGNATURE_INVALID) unless ``unsafe_allow_unsigned``.
        trusted_operator_keys_file: JSON file (same format) of the operator keys trusted
            to sign whole locks. When set, every lock must carry a valid lock signature
            by one of them (SIGNATURE_INVALID otherwise); see host.trust.lock.
        admin_policy_dir: directory of the administrator's managed policy cap; if it is
            named but unreadable, every tool is disabled (fail closed).
        approver_key_file: the approver private key (a ``stockade keygen`` PEM, mode
            0600) a host that approves in-band signs approvals with on a shared
            (PostgreSQL) store (:mod:`host.approverkey`); unused by the local store.
        trusted_approver_keys_file: ``stockade.keys/1`` file of the approver public keys
            a host verifies approvals against on a shared store. Without either, an
            approval there fails closed (APPROVER_KEY_MISSING).
        extra_ca_file: PEM bundle added to the system trust store for egress TLS.
        unsafe_allow_loopback: TEST ONLY. Lets egress reach loopback addresses (and
            only those, besides public ones). A manifest cannot set it; using it logs a
            warning and is recorded in the audit log.
        unsafe_allow_unsigned: accept unsigned packages although trusted keys are
            configured (a signature that is present is still verified). Weakens the
            host: using it logs a warning and is recorded in the ``lock.accepted`` audit
            record. Contradicts ``require_signatures`` (ValueError).
        audit_durability: ``"full"`` (default: a call returns only after its outcome
            record is on disk; concurrent calls share fsyncs) or ``"flush"`` (written to
            the OS before the call returns; fsynced within ``audit_flush_interval_ms``
            and on close). Intent records of non-read calls are on disk before the
            guest starts in both modes (see :mod:`host.audit.log`).
        audit_flush_interval_ms: ms, the longest a ``flush``-mode record waits for fsync.
        audit_checkpoint_every: records between two signed audit checkpoints (at most).
        audit_checkpoint_interval_s: s, the longest records wait for a signed checkpoint
            while the host runs (one is also written on close).
        artifact_cache_dir: a compiled-artifact cache shared with other hosts of the same
            user (its HMAC key ``artifact.key`` lives inside it, 0600), for example
            :func:`host.runtime.cache.user_artifact_dir`; ``None`` keeps the cache in
            ``state_dir``. Pruned to ``artifact_cache_max_bytes`` (least recently used
            first) after each write.
        artifact_cache_max_bytes: size cap of ``artifact_cache_dir`` in bytes.
        debug_guest_errors: put a failing guest's traceback (Python) or stack (JavaScript)
            into ``CallResult.error.details["guest_traceback"]``, scrubbed of staged
            secrets. For authors (the harness, ``stockade dev``, ``stockade call
            --debug``); off by default so a model never sees guest internals unless the
            host app asks.
        workspaces: workspace roots granted to principals; with at least one, the
            ``fs.*`` host tools are in the registry (:mod:`host.tools`). A principal
            gets the first grant that matches it.
        ready_instances: fresh instances kept instantiated ahead of calls, per component
            and limits, for components slow to instantiate (componentize-py and -js);
            0 turns it off (:mod:`host.runtime.ready`). Each costs the memory of one
            idle instance (a few MB resident for a Python plugin).
        pool_instances: component instances the engine's pooling allocator keeps slots
            for (:mod:`host.runtime.engine`; default 64, 0..1024); 0 turns the pooling
            allocator off (every store allocates on demand). Each slot reserves about
            4 GiB of address space (not memory); a call past a full pool runs on an
            on-demand engine instead of failing.
        commands: the commands ``exec.run`` may start (:class:`CommandEntry`, distinct
            names); with at least one (and a workspace), ``exec.run`` is in the registry.
        unsafe_exec_without_sandbox: run ``exec.run`` commands without bubblewrap when
            ``bwrap`` is not on the host's ``PATH``, instead of refusing with
            SANDBOX_UNAVAILABLE (a bwrap that fails to set a sandbox up still refuses).
            The command then runs with the rights of the host's user: logs a warning and
            is recorded in the ``lock.accepted`` audit record and in each call's outcome.
    """

    state_dir: Path
    ceilings: Ceilings = field(default=DEFAULT_CEILINGS)
    require_signatures: bool = False
    trusted_keys_file: Path | None = None
    trusted_operator_keys_file: Path | None = None
    admin_policy_dir: Path | None = None
    approver_key_file: Path | None = None
    trusted_approver_keys_file: Path | None = None
    extra_ca_file: Path | None = None
    unsafe_allow_loopback: bool = False
    unsafe_allow_unsigned: bool = False
    audit_durability: Literal["full", "flush"] = "full"
    audit_flush_interval_ms: int = 50
    audit_checkpoint_every: int = 1000
    audit_checkpoint_interval_s: float = 60.0
    artifact_cache_dir: Path | None = None
    artifact_cache_max_bytes: int = 4 * 1024**3  # bytes; a Python plugin's artifact is ~40 MB
    debug_guest_errors: bool = False
    workspaces: tuple[WorkspaceGrant, ...] = ()
    ready_instances: int = 2  # instances per (component, limits); 0: off
    pool_instances: int = 64  # pooling-allocator component-instance slots; 0: on-demand allocation
    commands: tuple[CommandEntry, ...] = ()
    unsafe_exec_without_sandbox: bool = False

    def __post_init__(self) -> None:
        # Accept str at run time for convenience; the field is always a Path afterwards.
        object.__setattr__(self, "state_dir", Path(self.state_dir))
        object.__setattr__(self, "workspaces", tuple(self.workspaces))
        object.__setattr__(self, "commands", tuple(self.commands))
        names = [c.name for c in self.commands]
        if len(set(names)) != len(names):
            raise ValueError(f"HostConfig.commands: two entries share a name ({', '.join(sorted(names))})")
        if self.commands and not self.workspaces:
            raise ValueError("HostConfig.commands: exec.run runs in a workspace; grant one ([[workspace]])")
        widest = max((c.max_output_bytes for c in self.commands), default=0)
        if 2 * widest + 4096 > self.ceilings.max_output_bytes:
            raise ValueError(
                f"HostConfig.commands: max_output_bytes {widest} for stdout and stderr does not fit "
                f"the output ceiling of {self.ceilings.max_output_bytes} bytes"
            )
        if self.unsafe_exec_without_sandbox:
            _log.warning(
                "unsafe_exec_without_sandbox is on: exec.run commands run without bubblewrap, with "
                "the rights of this user, when bwrap is not on PATH."
            )
        if self.audit_durability not in ("full", "flush"):
            raise ValueError(f"audit_durability must be 'full' or 'flush', got {self.audit_durability!r}")
        for name in ("audit_flush_interval_ms", "audit_checkpoint_every", "audit_checkpoint_interval_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"HostConfig.{name} must be positive, got {value!r}")
            if not math.isfinite(value):  # no infinite (never) or NaN times
                raise ValueError(f"HostConfig.{name} must be finite, got {value!r}")
        ready = self.ready_instances
        if isinstance(ready, bool) or not isinstance(ready, int) or not 0 <= ready <= MAX_READY_INSTANCES:
            raise ValueError(f"HostConfig.ready_instances must be an int in 0..16, got {ready!r}")
        slots = self.pool_instances
        if isinstance(slots, bool) or not isinstance(slots, int) or not 0 <= slots <= MAX_POOL_INSTANCES:
            raise ValueError(f"HostConfig.pool_instances must be an int in 0..1024, got {slots!r}")
        if self.unsafe_allow_loopback:
            _log.warning(
                "unsafe_allow_loopback is on: plugins may reach 127.0.0.0/8 and ::1. "
                "Use it only in tests."
            )
        if self.unsafe_allow_unsigned:
            if self.require_signatures:
                raise ValueError("HostConfig: require_signatures and unsafe_allow_unsigned contradict")
            _log.warning(
                "unsafe_allow_unsigned is on: packages without a signature are accepted although "
                "trusted keys may be configured."
            )

    def signatures_required(self, *, keys_trusted: bool) -> bool:
        """Whether a package without a signature is refused (SIGNATURE_INVALID).

        Args:
            keys_trusted: whether trusted package keys are configured for this load.

        Returns:
            True with ``require_signatures``; True when keys are trusted, unless
            ``unsafe_allow_unsigned``; False otherwise.
        """
        return self.require_signatures or (keys_trusted and not self.unsafe_allow_unsigned)

    @property
    def artifact_dir(self) -> Path:
        """Directory of compiled-artifact cache entries."""
        if self.artifact_cache_dir is not None:
            return Path(self.artifact_cache_dir)
        return self.state_dir / "artifacts"

    @property
    def artifact_key_file(self) -> Path:
        """The HMAC key of the compiled-artifact cache (docs/design.md §8)."""
        if self.artifact_cache_dir is not None:
            return Path(self.artifact_cache_dir) / "artifact.key"
        return self.state_dir / "artifact.key"
