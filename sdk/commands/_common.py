"""Shared options, host opening and output helpers for CLI subcommands.

Host-using commands (``tools``, ``call``) share one convention:

- ``--lock`` (default ``./stockade.lock``);
- ``--state-dir`` (default ``$STOCKADE_HOME`` or ``~/.stockade``), holding
  ``policy.json`` (:class:`~host.FilePolicyEngine`), ``audit.log``, ``secrets.json``
  and the accepted lock generation;
- the secrets master key from ``STOCKADE_MASTER_KEY`` or ``<state-dir>/master.key``;
  with neither, the host runs without a secrets store (packages that need a secret
  fail their calls with CREDENTIAL_UNAVAILABLE);
- ``--trusted-keys FILE`` and ``--require-signatures`` for lock verification;
- ``--store`` (default ``$STOCKADE_STORE`` or ``local``): where the audit chain,
  approvals, rate limits, session grants and lock generations live — ``local`` (files
  under the state dir, one host process) or ``postgresql://…`` (shared by many hosts).

Every option above may come from the host config file instead (``stockade.host.toml``,
see :mod:`host.formats.hostfile`): :func:`apply_host_file` fills the options a command line left
unset before the command runs; the audit log path comes from it too (:func:`audit_path`).

Failures a command detects itself (not a :class:`~host.errors.StockadeError`) raise
:class:`CommandFailed`; ``sdk.cli`` prints both the same way and exits 1.

Example::

    def run(args):
        with open_host(args) as host:
            print_json(host.tools("openai"))
        return EXIT_OK
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # imported where used: start-up time
    from rich.console import Console

    from host import Host, HostConfig, SecretsStore
    from host.runtime import ProgressEvent
    from host.trust.lock import LoadedLock

__all__ = [
    "DEFAULT_LOCK",
    "DEFAULT_STATE_DIR",
    "EXIT_ESCALATION",
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_NOT_SUCCESSOR",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandFailed",
    "UsageFailed",
    "add_host_options",
    "add_state_dir",
    "add_store_option",
    "add_verb",
    "apply_host_file",
    "approver_options",
    "audit_path",
    "cell",
    "checkpoint_options",
    "localize_hint",
    "location_flags",
    "open_host",
    "open_secrets",
    "open_store_spec",
    "print_json",
    "safe_text",
    "state_dir",
    "stderr_console",
    "stdout_console",
    "user_input",
    "verified_lock",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_ESCALATION: Final = 3
EXIT_NOT_SUCCESSOR: Final = 4  # `stockade diff`: the new lock does not directly follow the old one
EXIT_INTERNAL: Final = 70  # an exception no command expected: a bug (sysexits EX_SOFTWARE)

DEFAULT_STATE_DIR: Final = Path("~/.stockade")
DEFAULT_LOCK: Final = Path("stockade.lock")


class CommandFailed(Exception):
    """A refusal the CLI itself detected (a file already exists, a package is not in the lock).

    Args:
        code: a stable upper-case code (``KEY_EXISTS``, ``PACKAGE_NOT_IN_LOCK``, ...).
        message: what went wrong, for a person.
        hint: what to do about it.
    """

    def __init__(self, code: str, message: str, *, hint: str = "") -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.hint = hint

    def to_dict(self) -> dict[str, Any]:
        """JSON form, shaped like ``StockadeError.to_dict``."""
        return {"code": self.code, "message": self.message, "hint": self.hint, "details": {}}


class UsageFailed(CommandFailed):
    """Like :class:`CommandFailed`, for input the user must correct; exits 2."""


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    """Add ``--state-dir`` (default ``$STOCKADE_HOME`` or ``~/.stockade``)."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="host state directory (default: the config file's, $STOCKADE_HOME or ~/.stockade)",
    )


def state_dir(args: argparse.Namespace) -> Path:
    """The state directory: ``--state-dir``, the config file's, ``$STOCKADE_HOME`` or ``~/.stockade``."""
    chosen = args.state_dir or Path(os.environ.get("STOCKADE_HOME", str(DEFAULT_STATE_DIR)))
    return Path(chosen).expanduser()


STORE_ENV: Final = "STOCKADE_STORE"


class _StoreOnCommandLine(argparse.Action):
    """Store ``--store``'s value and note that it came from the command line, where every
    user of the machine can read it (``ps``, ``/proc/PID/cmdline``): a password there is
    refused by :func:`apply_host_file` before the command runs."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        namespace.store_on_command_line = True


def _refuse_password_on_command_line(args: argparse.Namespace) -> None:
    if not getattr(args, "store_on_command_line", False):
        return  # host.store imports the approval queue and policy: only pay for it when asked
    from host.store import dsn_has_password

    if dsn_has_password(args.store or ""):
        raise UsageFailed(
            "STORE_PASSWORD_ON_COMMAND_LINE",
            "--store names a database password on the command line, where any user of this "
            "machine can read it in the process list; refused",
            hint=(
                f"give the DSN in ${STORE_ENV} or in the host config file (stockade.host.toml, "
                "store = ...), or keep the password in a libpq passfile (~/.pgpass or "
                "passfile=/path in the DSN) and drop it from --store"
            ),
        )


def add_store_option(parser: argparse.ArgumentParser, *, local: bool = True) -> None:
    """Add ``--store`` (default: ``$STOCKADE_STORE``, else the host config file's ``store``,
    else ``local`` when allowed: an unset option stays ``None`` until :func:`apply_host_file`
    has had its say, and ``None`` means ``local`` to the commands that allow it). A DSN
    with a password given as ``--store`` itself is refused (``STORE_PASSWORD_ON_COMMAND_LINE``)."""
    parser.add_argument(
        "--store",
        default=os.environ.get(STORE_ENV),
        action=_StoreOnCommandLine,
        metavar="local|postgresql://…",
        help=(
            f"the state store: {'local (default: files under the state dir) or ' if local else ''}"
            f"a PostgreSQL DSN shared by many host processes (also ${STORE_ENV}); "
            f"a password belongs in ${STORE_ENV}, the config file or a passfile, never here"
        ),
    )


def open_store_spec(spec: str, **options: Any) -> Any:
    """Open the PostgreSQL store a ``--store`` value names (``options``: PostgresStore's).

    Raises:
        UsageFailed: the value is neither ``local`` nor ``postgresql://…``.
        StoreUnavailable: the store cannot be opened.
    """
    from host.store import is_postgres_spec, open_postgres

    if not is_postgres_spec(spec):
        raise UsageFailed("STORE_INVALID", "--store must be 'local' or a postgresql:// DSN")
    return open_postgres(spec, **options)


_HOST_OPTIONS: Final = (
    "lock", "state_dir", "trusted_keys", "trusted_operator_keys", "require_signatures", "store",
    "unsafe_allow_unsigned",
)  # fmt: skip


def apply_host_file(args: argparse.Namespace) -> None:
    """Fill the host options a command line left unset from the host config file.

    Does nothing for commands without host options (``new``, ``build``, ...), so a
    broken config file never blocks them. Sets ``args.host_file`` (the parsed file or
    ``None``) and ``args.given`` (the host options given on the command line).

    Raises:
        ConfigInvalid: the file named by ``--config``/``$STOCKADE_CONFIG`` is missing,
            or the file found is invalid.
    """
    from host.formats.hostfile import find_host_file, load_host_file

    _refuse_password_on_command_line(args)
    present = [name for name in _HOST_OPTIONS if hasattr(args, name)]
    args.given = {name for name in present if getattr(args, name)}
    args.host_file = None
    if not present:
        return
    explicit = getattr(args, "config", None)
    chosen_state = getattr(args, "state_dir", None)
    path = find_host_file(explicit, env=os.environ, cwd=Path.cwd(), state_dir=chosen_state)
    settings = load_host_file(path) if path is not None else None
    args.host_file = settings
    if settings is not None:
        for name in present:
            configured = getattr(settings, name)
            if not getattr(args, name) and configured is not None:
                setattr(args, name, configured)
    if "lock" in present and args.lock is None:
        args.lock = DEFAULT_LOCK


def audit_path(args: argparse.Namespace) -> Path:
    """The audit log: the config file's ``audit``, else ``<state dir>/audit.log``."""
    settings = getattr(args, "host_file", None)
    if settings is not None and settings.audit is not None:
        return Path(settings.audit)
    return state_dir(args) / "audit.log"


def location_flags(args: argparse.Namespace, *, lock: bool = False) -> str:
    """The options a suggested command needs to act on the same files as this one.

    Hints print commands to run "as written": when this command
    found its files through ``--config``, ``--state-dir`` or ``--lock`` on the command
    line, the suggested command needs the same options (with absolute paths).
    """
    flags: list[str] = []
    config = getattr(args, "config", None)
    if config is not None:
        flags.append(f"--config {_quote(Path(config).expanduser().resolve())}")
    given: set[str] = getattr(args, "given", set())
    if "state_dir" in given:
        flags.append(f"--state-dir {_quote(state_dir(args).resolve())}")
    if lock and "lock" in given:
        flags.append(f"--lock {_quote(Path(args.lock).resolve())}")
    return "".join(f" {flag}" for flag in flags)


_SUGGESTED: Final = re.compile(r"`(stockade (policy|secrets|tools)\b ?([a-z-]*)[^`]*)`")
_NEEDS_LOCK: Final = ("grant-tool", "explain", "tools")


def localize_hint(hint: str, args: argparse.Namespace) -> str:
    """``hint`` with this command's location options added to each suggested ``stockade
    policy ...`` / ``stockade secrets ...`` / ``stockade tools`` command, so that it runs as
    written.

    The host writes hints for the default set-up; a command line that named its files
    (``--config``, ``--state-dir``, ``--lock``) needs the same options on the suggested one.
    """

    def extend(match: re.Match[str]) -> str:
        command, action = match.group(1), match.group(3) or match.group(2)
        wanted = location_flags(args, lock=action in _NEEDS_LOCK).split(" --")[1:]
        extra = "".join(f" --{flag}" for flag in wanted if f"--{flag.split(' ', 1)[0]} " not in command)
        return f"`{command}{extra}`"

    return _SUGGESTED.sub(extend, hint)


def _quote(path: Path) -> str:
    import shlex

    return shlex.quote(str(path))


def add_host_options(parser: argparse.ArgumentParser) -> None:
    """Add the options every host-opening command shares (see the module docstring)."""
    add_store_option(parser)
    parser.add_argument(
        "--lock",
        type=Path,
        default=None,
        help="the lock file to load (default: the config file's, ./stockade.lock)",
    )
    add_state_dir(parser)
    parser.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="trusted Ed25519 keys (stockade.keys/1); needed when the lock holds signatures "
        "(default: the config file's trusted_keys)",
    )
    parser.add_argument(
        "--require-signatures",
        action="store_true",
        help="refuse any package of the lock that is not signed by a trusted key",
    )
    add_unsigned_option(parser)
    parser.add_argument(
        "--trusted-operator-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="operator keys (stockade.keys/1); when given, the whole lock must be signed by one "
        "(`stockade lock sign`)",
    )


def open_secrets(root: Path) -> SecretsStore | None:
    """The secrets store of a state directory, or ``None`` when no master key exists.

    Args:
        root: the state directory.

    Raises:
        SecretsUnavailable: a master key exists but is unusable (weak, badly protected,
            not base64) or the store file cannot be opened with it: fail closed.

    Returns:
        The store, or ``None`` when neither ``STOCKADE_MASTER_KEY`` nor
        ``<root>/master.key`` exists.
    """
    from host.secrets.store import MASTER_KEY_ENV, MasterKey, SecretsStore

    key_file = root / "master.key"
    if MASTER_KEY_ENV not in os.environ and not os.path.lexists(key_file):
        return None
    key = MasterKey.load(env=os.environ, key_file=key_file)
    return SecretsStore(root / "secrets.json", key)


def add_verb(
    verbs: Any, name: str, help_text: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    """Add the verb ``name`` (with ``--json``) running ``func`` to a command's verbs.

    Args:
        verbs: what ``parser.add_subparsers(...)`` returned.
        name: the verb.
        help_text: its one-line help.
        func: ``func(args) -> exit status``.

    Returns:
        The verb's parser, for further options.
    """
    verb: argparse.ArgumentParser = verbs.add_parser(name, help=help_text)
    verb.add_argument("--json", action="store_true", help="machine-readable output")
    verb.set_defaults(func=func)
    return verb


@contextmanager
def user_input(hint: str) -> Iterator[None]:
    """Report a ``ValueError`` raised while the user's own arguments are applied (a bad
    name, a malformed ``--secret``) as a usage error; wrap only such code, so that any
    other ``ValueError`` stays an internal error (``INTERNAL_ERROR``, exit 70).

    Raises:
        UsageFailed: ``USAGE`` with the ValueError's message and ``hint``.
    """
    try:
        yield
    except ValueError as exc:
        raise UsageFailed("USAGE", str(exc), hint=hint) from None


def add_unsigned_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--unsafe-allow-unsigned`` (read back with :func:`signatures_waived`)."""
    parser.add_argument(
        "--unsafe-allow-unsigned",
        action="store_true",
        help="accept unsigned packages although trusted keys are configured (development only; "
        "logged, and recorded in the lock.accepted audit record of a host)",
    )


def signatures_waived(args: argparse.Namespace) -> bool:
    """The ``--unsafe-allow-unsigned`` choice (or the config file's), checked against
    ``--require-signatures``.

    Raises:
        UsageFailed: both are set (they contradict each other).
    """
    waived = bool(getattr(args, "unsafe_allow_unsigned", False))
    if waived and getattr(args, "require_signatures", False):
        raise UsageFailed(
            "USAGE",
            "--unsafe-allow-unsigned contradicts --require-signatures "
            "(or the config file's require_signatures)",
            hint="drop one of them",
        )
    return waived


def verified_lock(
    lock: Path, *, trusted_keys: Path | None, require_signatures: bool, unsafe_allow_unsigned: bool = False
) -> LoadedLock:
    """A lock with every digest, signature and manifest verified; nothing compiled or persisted.

    For commands that read what a lock declares (``policy grant-tool``, ``policy
    explain``, ``init``) without opening a host (which compiles components).

    Raises:
        LockInvalid, DigestMismatch, SignatureInvalid, ManifestInvalid: from ``load_lock``
            (with trusted keys, an unsigned package is SIGNATURE_INVALID unless
            ``unsafe_allow_unsigned``).
    """
    import tempfile

    from host.config import HostConfig
    from host.trust.lock import TrustedKeys, load_lock

    keys = TrustedKeys.load(trusted_keys) if trusted_keys is not None else None
    with tempfile.TemporaryDirectory(prefix="stockade-read-") as scratch:
        config = HostConfig(
            state_dir=Path(scratch), require_signatures=require_signatures,
            unsafe_allow_unsigned=unsafe_allow_unsigned,
        )
        return load_lock(Path(lock), config=config, trusted_keys=keys)


def host_config(args: argparse.Namespace, root: Path) -> HostConfig:
    """The HostConfig of the shared convention (module docstring), rooted at ``root``."""
    from host.config import HostConfig, WorkspaceGrant
    from host.runtime.cache import user_artifact_dir

    settings = getattr(args, "host_file", None)
    workspaces = tuple(WorkspaceGrant(**w) for w in settings.workspaces) if settings is not None else ()
    return HostConfig(
        state_dir=root,
        require_signatures=bool(args.require_signatures),
        unsafe_allow_unsigned=signatures_waived(args),
        trusted_keys_file=args.trusted_keys,
        trusted_operator_keys_file=args.trusted_operator_keys,
        artifact_cache_dir=user_artifact_dir(),  # one compiled-artifact cache per user
        debug_guest_errors=bool(getattr(args, "debug", False)),  # --debug: guest tracebacks
        admin_policy_dir=settings.admin_policy_dir if settings is not None else None,
        approver_key_file=settings.approver_key if settings is not None else None,
        trusted_approver_keys_file=settings.trusted_approver_keys if settings is not None else None,
        workspaces=workspaces,  # [[workspace]] of the host config file: the fs.* host tools
        commands=settings.commands if settings is not None else (),  # [[command]]: exec.run
        unsafe_exec_without_sandbox=bool(settings is not None and settings.unsafe_exec_without_sandbox),
    )


def open_host(args: argparse.Namespace, *, progress: bool = True) -> Host:
    """Open the Host of the shared convention (module docstring), with a compile progress bar.

    Args:
        args: parsed options from :func:`add_host_options`.
        progress: show a progress bar on stderr while components compile (only when
            stderr is a terminal).

    Raises:
        LockInvalid, LockRollback, DigestMismatch, SignatureInvalid, ManifestInvalid,
        ComponentRefused, AuditUnavailable, SecretsUnavailable: from ``Host.open`` and
        :func:`open_secrets`.

    Returns:
        The open host; close it (``with``).
    """
    from host.call.host import Host
    from host.policy.engine import FilePolicyEngine

    root = state_dir(args)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    secrets = open_secrets(root)
    policy = FilePolicyEngine(root / "policy.json")
    config = host_config(args, root)
    spec = getattr(args, "store", None) or "local"
    shared = None if spec == "local" else open_store_spec(spec, **checkpoint_options(config))
    with _compile_progress(enabled=progress) as callback:
        if shared is None:
            return Host.open(
                args.lock, config=config, secrets=secrets, policy=policy,
                audit=audit_path(args), progress=callback,
            )
        return Host.open(
            args.lock, config=config, secrets=secrets, policy=policy,
            store=shared, own_store=True, progress=callback,
        )


def checkpoint_options(config: HostConfig) -> dict[str, Any]:
    """A host's shared store signs audit checkpoints with the state dir's audit key, at
    the cadence of the local audit log, and approvals with the configured approver key
    (:func:`approver_options`)."""
    from host.audit.key import AuditKey

    return {
        "signer": AuditKey.load_or_create(config.state_dir),
        "checkpoint_every": config.audit_checkpoint_every,
        "checkpoint_interval_s": config.audit_checkpoint_interval_s,
        **approver_options(config.approver_key_file, config.trusted_approver_keys_file),
    }


def approver_options(key_file: Path | None, trusted_file: Path | None) -> dict[str, Any]:
    """PostgresStore's ``approver`` / ``trusted_approver_keys`` from the configured files.

    Raises:
        ConfigInvalid: the approver key file is unsafe or invalid.
        LockInvalid: the trusted approver keys file is unreadable or invalid.
    """
    from host.approverkey import ApproverKey
    from host.signing import TrustedKeys

    return {
        "approver": None if key_file is None else ApproverKey.load(Path(key_file)),
        "trusted_approver_keys": None if trusted_file is None else TrustedKeys.load(Path(trusted_file)),
    }


@contextmanager
def _compile_progress(*, enabled: bool) -> Iterator[Callable[[ProgressEvent], None] | None]:
    if not enabled or not _may_be_terminal():  # rich's import costs start-up time: skip it
        yield None
        return
    console = stderr_console()
    if not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("loading components", total=None)

        def report(event: ProgressEvent) -> None:
            verb = {"cached": "loaded", "compiling": "compiling", "compiled": "compiled"}[event.stage]
            bar.update(task, description=f"{verb} {event.name}", completed=event.done, total=event.total)

        yield report


def _may_be_terminal() -> bool:
    """Whether rich could judge stderr a terminal: it is a tty, or rich's overrides
    (``TTY_COMPATIBLE``, ``FORCE_COLOR``) are set; without them a bar is never drawn."""
    if os.environ.get("TTY_COMPATIBLE") or os.environ.get("FORCE_COLOR") is not None:
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


def stdout_console() -> Console:
    """A rich console on stdout (tables for people)."""
    from rich.console import Console

    return Console()


def stderr_console() -> Console:
    """A rich console on stderr (progress, prompts, warnings)."""
    from rich.console import Console

    return Console(stderr=True)


def safe_text(value: object) -> str:
    """``str(value)`` with terminal control, zero-width and bidi characters shown as ``\\uXXXX``.

    Manifests, guest errors and schemas are untrusted: printed raw, an ESC sequence could
    rewrite the terminal and a bidi override could reorder what a reviewer reads. The
    rule is the host's own (:func:`host.text.escape_unsafe`), so the CLI and the MCP
    server's approval previews escape the same characters.
    """
    from host.text import escape_unsafe  # lazily: importing host is slow (start-up time)

    return escape_unsafe(value)


def cell(value: object) -> str:
    """:func:`safe_text`, with rich markup escaped: for table cells and rich prints."""
    from rich.markup import escape

    return escape(safe_text(value))


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (what programs read with ``--json``)."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
