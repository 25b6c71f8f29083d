"""Shared options, host opening and output helpers for CLI subcommands.

Host-using commands (``tools``, ``call``) share one convention:

- ``--lock`` (default ``./stockade.lock``);
- ``--state-dir`` (default ``$STOCKADE_HOME`` or ``~/.stockade``), holding
  ``policy.json`` (:class:`~host.FilePolicyEngine`), ``audit.log``, ``secrets.json``
  and the accepted lock generation;
- the secrets master key from ``STOCKADE_MASTER_KEY`` or ``<state-dir>/master.key``;
  with neither, the host runs without a secrets store (packages that need a secret
  fail their calls with CREDENTIAL_UNAVAILABLE);
- ``--trusted-keys FILE`` and ``--require-signatures`` for lock verification.

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

if TYPE_CHECKING:  # imported where used: start-up time (issue 13, item 9)
    from rich.console import Console

    from host import Host, HostConfig, SecretsStore
    from host.runtime import ProgressEvent

__all__ = [
    "DEFAULT_LOCK",
    "DEFAULT_STATE_DIR",
    "EXIT_ESCALATION",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CommandFailed",
    "UsageFailed",
    "add_host_options",
    "add_state_dir",
    "cell",
    "open_host",
    "open_secrets",
    "print_json",
    "safe_text",
    "state_dir",
    "stderr_console",
    "stdout_console",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_ESCALATION: Final = 3

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
        help="host state directory (default: $STOCKADE_HOME or ~/.stockade)",
    )


def state_dir(args: argparse.Namespace) -> Path:
    """The state directory the user chose, expanded."""
    chosen = args.state_dir or Path(os.environ.get("STOCKADE_HOME", str(DEFAULT_STATE_DIR)))
    return Path(chosen).expanduser()


def add_host_options(parser: argparse.ArgumentParser) -> None:
    """Add the options every host-opening command shares (see the module docstring)."""
    parser.add_argument(
        "--lock", type=Path, default=DEFAULT_LOCK, help="the lock file to load (default: ./stockade.lock)"
    )
    add_state_dir(parser)
    parser.add_argument(
        "--trusted-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="trusted Ed25519 keys (stockade.keys/1); needed when the lock holds signatures",
    )
    parser.add_argument(
        "--require-signatures",
        action="store_true",
        help="refuse any package of the lock that is not signed by a trusted key",
    )
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
    from host.secrets import MASTER_KEY_ENV, MasterKey, SecretsStore

    key_file = root / "master.key"
    if MASTER_KEY_ENV not in os.environ and not os.path.lexists(key_file):
        return None
    key = MasterKey.load(env=os.environ, key_file=key_file)
    return SecretsStore(root / "secrets.json", key)


def _host_config(args: argparse.Namespace, root: Path) -> HostConfig:
    from host.config import HostConfig

    return HostConfig(
        state_dir=root,
        require_signatures=bool(args.require_signatures),
        trusted_keys_file=args.trusted_keys,
        trusted_operator_keys_file=args.trusted_operator_keys,
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
    from host.gateway import Host
    from host.policy.engine import FilePolicyEngine

    root = state_dir(args)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    secrets = open_secrets(root)
    policy = FilePolicyEngine(root / "policy.json")
    config = _host_config(args, root)
    with _compile_progress(enabled=progress) as callback:
        return Host.open(
            args.lock,
            config=config,
            secrets=secrets,
            policy=policy,
            audit=root / "audit.log",
            progress=callback,
        )


@contextmanager
def _compile_progress(*, enabled: bool) -> Iterator[Callable[[ProgressEvent], None] | None]:
    console = stderr_console()
    if not enabled or not console.is_terminal:
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


def stdout_console() -> Console:
    """A rich console on stdout (tables for people)."""
    from rich.console import Console

    return Console()


def stderr_console() -> Console:
    """A rich console on stderr (progress, prompts, warnings)."""
    from rich.console import Console

    return Console(stderr=True)


_UNSAFE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
"""Control characters (terminal escapes), C1 controls, zero-width and bidi overrides."""


def safe_text(value: object) -> str:
    """``str(value)`` with terminal control, zero-width and bidi characters shown as ``\\uXXXX``.

    Manifests, guest errors and schemas are untrusted: printed raw, an ESC sequence could
    rewrite the terminal and a bidi override could reorder what a reviewer reads.
    """
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", str(value))


def cell(value: object) -> str:
    """:func:`safe_text`, with rich markup escaped: for table cells and rich prints."""
    from rich.markup import escape

    return escape(safe_text(value))


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON on stdout (what programs read with ``--json``)."""
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=False, default=str) + "\n")
