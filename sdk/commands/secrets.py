"""``stockade secrets set|list|delete``: the encrypted secrets store.

Values are read from standard input or a hidden prompt, never from the command line
(argv is visible to other users through ``ps``). ``list`` shows names and dates only.
The master key comes from ``STOCKADE_MASTER_KEY`` or ``<state-dir>/master.key``
(mode 0600); ``secrets init-key`` creates that file.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

from host.secrets import MasterKey, SecretsStore, generate_key_file
from sdk.commands._common import add_state_dir, state_dir


def register(sub: Any) -> None:
    """Add the ``secrets`` subcommand."""
    parser = sub.add_parser(
        "secrets",
        help="manage encrypted secrets",
        description=(
            "Manage secrets a package's credential mappings inject at the host boundary. "
            "Secrets are stored per project and subject; a plugin never sees their values."
        ),
    )
    inner = parser.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    init = inner.add_parser("init-key", help="create <state-dir>/master.key (mode 0600)")
    add_state_dir(init)
    init.set_defaults(func=run_init_key)
    for name, helptext, func in (
        ("set", "store a secret read from stdin or a hidden prompt", run_set),
        ("list", "list secret names and dates (never values)", run_list),
        ("delete", "delete a secret", run_delete),
    ):
        action = inner.add_parser(name, help=helptext, description=helptext)
        if name != "list":
            action.add_argument("name", help="secret name, e.g. tracker_token")
        action.add_argument("--project", required=True, help="project (scope) of the secret")
        action.add_argument("--subject", required=True, help="subject (principal) of the secret")
        action.add_argument("--json", action="store_true", help="machine-readable output")
        add_state_dir(action)
        action.set_defaults(func=func)


def _store(args: argparse.Namespace) -> SecretsStore:
    root = state_dir(args)
    key = MasterKey.load(env=os.environ, key_file=root / "master.key")
    return SecretsStore(root / "secrets.json", key)


def run_init_key(args: argparse.Namespace) -> int:
    """Create a new master key file; refuses to overwrite one."""
    path = state_dir(args) / "master.key"
    if path.exists():
        print(f"error: {path} exists; refusing to overwrite a master key", file=sys.stderr)
        return 1
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    generate_key_file(path)
    print(f"created {path} (mode 0600). Back it up: without it the secrets cannot be read.")
    return 0


def _read_value() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("secret value (hidden): ")
    return sys.stdin.read().rstrip("\r\n")


def run_set(args: argparse.Namespace) -> int:
    """Store one secret."""
    value = _read_value()
    if not value:
        print("error: empty secret value; nothing stored", file=sys.stderr)
        return 1
    _store(args).set(args.project, args.subject, args.name, value)
    print(json.dumps({"ok": True, "name": args.name}) if args.json else f"stored {args.name}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    """List names and metadata."""
    infos = _store(args).list(args.project, args.subject)
    rows = [{"name": i.name, "created_at": i.created_at, "updated_at": i.updated_at} for i in infos]
    if args.json:
        print(json.dumps(rows, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"secrets of {args.subject} in {args.project}")
    for column in ("name", "created", "updated"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], str(row["created_at"]), str(row["updated_at"]))
    Console().print(table)
    return 0


def run_delete(args: argparse.Namespace) -> int:
    """Delete one secret; 1 if it did not exist."""
    removed = _store(args).delete(args.project, args.subject, args.name)
    if args.json:
        print(json.dumps({"ok": removed, "name": args.name}))
    else:
        print(f"deleted {args.name}" if removed else f"no secret named {args.name}")
    return 0 if removed else 1

