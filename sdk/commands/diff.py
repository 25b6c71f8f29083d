"""``stockade diff OLD_LOCK NEW_LOCK`` or ``stockade diff --from-git REV [LOCK]``:
what a lock change adds or widens.

``stockade diff OLD.host.toml NEW.host.toml`` compares two host config files'
``[[command]]`` entries instead (:mod:`sdk.review.command`): a new command, another
binary, a read-write workspace, a network, a raised limit, a new variable, a higher risk
or ``unsafe_exec_without_sandbox`` switched on escalates (exit 3).

Both locks are verified first (digests, signatures with ``--trusted-keys``, manifests);
no host state is touched. Every difference is listed; escalations are flagged: new
packages and tools, any effect change, higher risk, permissions added or removed,
widened schemas, new hosts, wildcards, plain http, other ports, shorter or new path
prefixes, new methods, new credentials or new places a secret is sent, raised limits,
dropped signatures. Reductions are shown but not flagged.

``--from-git REV`` compares LOCK (default: the host config's, or ./stockade.lock) as it
is at git revision REV with the working tree: the old lock and its bundles are read
from REV (a bundle not committed there, such as a build output, is taken from the
working tree: its digests are verified against the old lock either way). A CI job on a
pull request gates on it::

    stockade diff --from-git origin/main stockade.lock --trusted-keys trusted-keys.json

Exit codes: 0 nothing escalates, 1 a lock failed verification (or git failed), 2 usage
error, 3 at least one escalation, 4 the new lock is not the direct successor of the old
one (a rollback, a fork or skipped generations: a host would refuse it as
LOCK_ROLLBACK); 4 wins over 3.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from host.formats.hostfile import load_host_file
from sdk.commands._common import (
    DEFAULT_LOCK,
    EXIT_ESCALATION,
    EXIT_NOT_SUCCESSOR,
    EXIT_OK,
    CommandFailed,
    UsageFailed,
    add_state_dir,
    add_unsigned_option,
    cell,
    print_json,
    signatures_waived,
    state_dir,
    stdout_console,
)
from sdk.review.command import command_changes, is_host_file
from sdk.review.report import LockDiff, allows_that_ask_again, diff_locks


def register(sub: Any) -> None:
    """Add the ``diff`` subcommand."""
    parser = sub.add_parser(
        "diff",
        help="what a lock change adds or widens (exit 3 on escalation, 4 on a non-successor)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("old", nargs="?", type=Path, metavar="OLD_LOCK", help="the lock in force")
    parser.add_argument("new", nargs="?", type=Path, metavar="NEW_LOCK", help="the proposed lock")
    parser.add_argument(
        "--from-git",
        default=None,
        metavar="REV",
        help="compare the lock at git revision REV (old) with the working tree (new); "
        "then the only positional is the lock file",
    )
    parser.add_argument(
        "--trusted-keys", type=Path, default=None, metavar="FILE",
        help="trusted keys; when given, every package must be signed by one of them",
    )
    add_unsigned_option(parser)
    add_state_dir(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable diff (format stockade.diff/1)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Diff, print, and exit 4 on a non-successor, else 3 when anything escalates."""
    if args.from_git is None:
        if args.old is None or args.new is None:
            raise UsageFailed(
                "USAGE",
                "diff needs OLD_LOCK and NEW_LOCK (or --from-git REV [LOCK])",
                hint="see `stockade diff --help`",
            )
        if is_host_file(args.old) and is_host_file(args.new):
            return _host_files(args.old, args.new, as_json=args.json)
        diff = diff_locks(
            args.old, args.new, trusted_keys=args.trusted_keys, unsafe_allow_unsigned=signatures_waived(args)
        )
    else:
        if args.new is not None:
            raise UsageFailed(
                "USAGE",
                "with --from-git, name at most one lock file",
                hint="stockade diff --from-git REV [LOCK]",
            )
        settings = getattr(args, "host_file", None)
        lock = args.old or (settings.lock if settings is not None and settings.lock else DEFAULT_LOCK)
        with tempfile.TemporaryDirectory(prefix="stockade-diff-") as scratch:
            old = lock_at_revision(Path(lock), args.from_git, Path(scratch))
            diff = diff_locks(
                old, Path(lock), trusted_keys=args.trusted_keys, unsafe_allow_unsigned=signatures_waived(args)
            )
    rebinds = allows_that_ask_again(diff, state_dir(args) / "tool-policy")
    if args.json:
        print_json({**diff.to_dict(), "allows_that_ask_again": rebinds})
    else:
        render(diff)
        render_rebinds(rebinds)
    if diff.relation not in ("same", "successor"):
        return EXIT_NOT_SUCCESSOR
    return EXIT_ESCALATION if diff.escalations else EXIT_OK


def _host_files(old: Path, new: Path, *, as_json: bool) -> int:
    """The command-entry diff of two host files; exit 3 when anything escalates."""
    changes = command_changes(load_host_file(old), load_host_file(new))
    escalations = [c for c in changes if c.escalation]
    if as_json:
        print_json({"old": str(old), "new": str(new), "changes": [c.to_dict() for c in changes],
                    "escalations": len(escalations)})  # fmt: skip
    else:
        from sdk.commands._layout import emit

        console = stdout_console()
        rows = [("ESCALATES" if c.escalation else "-", c.command, c.detail) for c in changes]
        emit(console, "command changes", ("flag", "command", "change"), rows, empty="no changes")
        if escalations:
            count = len(escalations)
            console.print(f"[bold red]{count} escalation(s)[/]: review before using the new host file")
    return EXIT_ESCALATION if escalations else EXIT_OK


def render_rebinds(rebinds: list[dict[str, Any]]) -> None:
    """Print the user allows the new lock would turn back into asks (one per line)."""
    if not rebinds:
        return
    print(f"user allows that would ask again ({len(rebinds)}): their recorded binding no longer holds")
    for item in rebinds:
        now = ", ".join(item["new"]) or "(tool gone)"
        print(
            f"  {cell(item['account'])} in {cell(item['workspace'])}: allow {cell(item['tool'])} "
            f"recorded for binding {item['recorded']}, new binding {now} -> ask (rebind)"
        )
    print("  after review, re-bind with "
          "`stockade policy grant-tool PROJECT SUBJECT TOOL@VERSION --role R --allow`")


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, check=False, timeout=120)
    except OSError as exc:
        raise CommandFailed(
            "GIT_FAILED",
            f"cannot run git: {exc.strerror or exc}",
            hint="install git, or compare two lock files",
        ) from None
    if proc.returncode != 0:
        message = proc.stderr.decode("utf-8", "replace").strip()[:500]
        raise CommandFailed(
            "GIT_FAILED", f"git {argv[0]} failed: {message}", hint="check the revision and path"
        )
    return proc


def lock_at_revision(lock: Path, revision: str, scratch: Path) -> Path:
    """Write the tree at ``revision`` into ``scratch`` and return the lock's path in it.

    Bundles the old lock names that git does not hold at ``revision`` are copied from the
    working tree (their digests are checked against the old lock when it loads).

    Raises:
        CommandFailed: git fails, or the lock does not exist at ``revision``.
    """
    lock = lock.absolute()
    root = Path(_git(lock.parent, "rev-parse", "--show-toplevel").stdout.decode().strip())
    relative = lock.resolve().relative_to(root.resolve())
    archive = scratch / "tree.tar"
    archive.write_bytes(_git(root, "archive", "--format=tar", revision).stdout)
    tree = scratch / "tree"
    with tarfile.open(archive) as bundle:
        bundle.extractall(tree, filter="data")  # no absolute paths, links out or devices
    old = tree / relative
    if not old.is_file():
        raise CommandFailed(
            "LOCK_NOT_IN_GIT",
            f"{relative} does not exist at {revision}",
            hint="name the lock file as committed, or compare two lock files",
        )
    _fill_uncommitted_bundles(old, lock)
    return old


def _fill_uncommitted_bundles(old: Path, lock: Path) -> None:
    import json

    try:
        packages = json.loads(old.read_bytes()).get("packages", [])
    except (ValueError, AttributeError):
        return  # verification reports the malformed lock
    for entry in packages if isinstance(packages, list) else []:
        bundle = entry.get("bundle") if isinstance(entry, dict) else None
        if not isinstance(bundle, str) or Path(bundle).is_absolute() or ".." in Path(bundle).parts:
            continue
        source, target = lock.parent / bundle, old.parent / bundle
        if not target.exists() and source.is_dir():
            shutil.copytree(source, target, symlinks=True)


def render(diff: LockDiff) -> None:
    """Print a diff: a table if it fits the width, else one field per line."""
    console = stdout_console()
    old, new = diff.old, diff.new
    console.print(f"[bold]old[/] {cell(old.path)} generation {old.generation}\n    digest {old.digest}")
    console.print(f"[bold]new[/] {cell(new.path)} generation {new.generation}\n    digest {new.digest}")
    console.print(f"    previous {new.previous}")
    relation = diff.relation
    if relation not in ("same", "successor"):
        console.print(
            f"[bold red]NOT A SUCCESSOR ({relation}):[/] the new lock does not directly follow the old one; "
            "a host that accepted the old lock refuses it (LOCK_ROLLBACK). Exit 4."
        )
    if not diff.changes:
        console.print("no changes")
        return
    from sdk.commands._layout import emit

    rows = [
        (c.kind, "ESCALATES" if c.escalation else "-", c.package, c.tool or "-", c.detail)
        for c in diff.changes
    ]
    emit(console, "changes", ("kind", "flag", "package", "tool", "change"), rows)
    count = len(diff.escalations)
    if count:
        console.print(f"[bold red]{count} escalation(s)[/]: review before trusting the new lock")
    else:
        console.print("[green]no escalation[/]")
