"""``stockade lock add|remove|sign|verify``: edit, sign and check ``stockade.lock``.

``add BUNDLE_DIR`` checks the bundle (manifest, digests, and the component with the
host's own load-time checks: COMPONENT_REFUSED for a component the host would refuse)
and adds it (or replaces the package of the same name); ``remove NAME`` drops a package.
Each edit writes the next generation: the generation grows by one and ``previous`` names
the digest of the lock it replaces, so a host can refuse rollbacks and forks. The bundle
must live under the lock's directory. ``add oci://REF@sha256:…`` pulls a registry
artifact by digest, verified as ``stockade pull`` does, into ``bundle-store/`` next to the
lock and records its ``source``; ``fetch`` pulls every registry package the lock names
(hosts never use the network).

Lock signatures: an operator key signs the whole lock body (generation, previous and
every entry; tag ``stockade/lock@1``). A host configured with trusted operator keys
refuses a lock without one. ``add --key`` signs the entry and the new lock with the same
key (``--operator-key`` signs the lock with another one); ``remove --key`` signs the new
lock; ``sign --key`` signs the current lock in place (same generation and digest). An
edit without a key writes an unsigned generation.

``verify`` checks what a host would check before compiling anything: the lock signature
(``--trusted-operator-keys``), every digest, every package signature (``--trusted-keys``,
``--require-signatures``) and every manifest; then it compiles each package into the
per-user artifact cache ``stockade serve`` and hosts load from (one line per package
compiled now), so a server started afterwards starts warm; ``--components`` also refuses
a component that fails the host's import/export checks, and ``--state-dir`` compares the
generation and package versions with a host's accepted state (read only). Nothing but the
artifact cache is written.

Exit codes: 0 ok, 1 refused (the error code says why), 2 usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from host.errors import ComponentRefused
from host.trust.lock import LoadedLock, LockEntry, LockState
from sdk.author._stale import project_of, staleness
from sdk.author.project import PROJECT_FILE
from sdk.commands._common import (
    EXIT_OK,
    CommandFailed,
    add_unsigned_option,
    cell,
    print_json,
    signatures_waived,
    stderr_console,
)
from sdk.commands._registry import add_registry_options, add_verify_options
from sdk.commands._warm import say_compiling, warm_packages
from sdk.commands.lockmcp import register_add_mcp
from sdk.commands.pull import pull_for_lock, run_fetch
from sdk.commands.sign import load_key
from sdk.review.lockfile import LockUpdate, add_package, remove_package, sign_lock
from sdk.review.report import load_for_review

_SAY_BYTES = 512 * 1024 * 1024  # bytes; larger modules are refused by add_package anyway


def register(sub: Any) -> None:
    """Add the ``lock`` subcommand and its actions."""
    parser = sub.add_parser(
        "lock",
        help="add, remove and verify locked packages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inner = parser.add_subparsers(dest="lock_command", metavar="ACTION", required=True)
    add = inner.add_parser(
        "add",
        help="add or replace a package (a new generation)",
        description="Check BUNDLE_DIR (or pull oci://REF@sha256:… into the bundle store next to "
        "the lock, recording the source) and add it to the lock as a new generation.",
    )
    add.add_argument(
        "bundle", metavar="BUNDLE_DIR|PROJECT_DIR|oci://REF@sha256:…",
        help="bundle directory under the lock's directory, a plugin project (built first into its "
        "dist/), or a digest-pinned registry reference",
    )
    add.add_argument(
        "--strict",
        action="store_true",
        help="refuse a bundle older than its project's sources or stockade.toml (default: warn)",
    )
    add.add_argument(
        "--key",
        type=Path,
        default=None,
        metavar="KEY.pem",
        help="sign the package entry, and the new lock body unless --operator-key is given",
    )
    add.add_argument(
        "--operator-key",
        type=Path,
        default=None,
        metavar="KEY.pem",
        help="sign the new lock body (generation, previous, entries) with this operator key",
    )
    _lock_and_json(add)
    add_verify_options(add)
    add_registry_options(add)
    add.set_defaults(func=run_add)
    fetch = inner.add_parser(
        "fetch",
        help="pull every registry package of the lock into the local bundle store",
        description="Pull each package with an oci source, by its pinned digest, into the bundle "
        "store next to the lock (Host.open never uses the network).",
    )
    _lock_and_json(fetch)
    add_verify_options(fetch)
    add_registry_options(fetch)
    fetch.set_defaults(func=run_fetch)
    remove = inner.add_parser(
        "remove",
        help="remove a package (a new generation)",
        description="Remove package NAME from the lock as a new generation.",
    )
    remove.add_argument("name", metavar="NAME", help="package name")
    remove.add_argument(
        "--key", type=Path, default=None, metavar="KEY.pem", help="sign the new lock body with this key"
    )
    _lock_and_json(remove)
    remove.set_defaults(func=run_remove)
    sign = inner.add_parser(
        "sign",
        help="sign the whole lock with an operator key (same generation)",
        description="Sign the lock body (format, generation, previous, every entry; statement "
        "tag stockade/lock@1) with an Ed25519 operator key from `stockade keygen`, in place. "
        "The signature is not part of the lock digest: the generation and digest stay the same. "
        "Hosts configured with trusted operator keys refuse a lock without such a signature.",
    )
    sign.add_argument(
        "--key", type=Path, required=True, metavar="KEY.pem", help="operator private key from stockade keygen"
    )
    _lock_and_json(sign)
    sign.set_defaults(func=run_sign)
    verify = inner.add_parser(
        "verify",
        help="verify digests, signatures and manifests (writes nothing)",
        description="Verify a lock as a host would before loading it. Exit 0 ok, 1 refused.",
    )
    _lock_and_json(verify)
    verify.add_argument("--trusted-keys", type=Path, default=None, metavar="FILE", help="trusted keys file")
    verify.add_argument(
        "--trusted-operator-keys",
        type=Path,
        default=None,
        metavar="FILE",
        help="trusted operator keys file: the lock must carry a valid lock signature by one",
    )
    verify.add_argument("--require-signatures", action="store_true", help="refuse unsigned packages")
    add_unsigned_option(verify)
    verify.add_argument(
        "--components",
        action="store_true",
        help="also refuse a component the host would refuse (its imports and exports); every "
        "package is compiled into the artifact cache `stockade serve` uses either way",
    )
    verify.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="also check the generation and package versions against this host state directory "
        "(read only)",
    )
    verify.set_defaults(func=run_verify)
    register_add_mcp(inner)


def _lock_and_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lock", type=Path, default=None, help="lock file (default: the config file's, ./stockade.lock)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _entry_dict(entry: LockEntry | None) -> dict[str, Any] | None:
    return entry.model_dump(mode="json") if entry is not None else None


def _report(update: LockUpdate, args: argparse.Namespace, verb: str) -> int:
    if args.json:
        print_json(
            {
                "ok": True,
                "lock": str(update.path),
                "generation": update.generation,
                "digest": update.digest,
                "previous": update.previous,
                "entry": _entry_dict(update.entry),
                "replaced": _entry_dict(update.replaced),
                "lock_key_id": update.lock_key_id,
            }
        )
        return EXIT_OK
    subject = update.entry or update.replaced
    named = f" {subject.name}@{subject.version}" if subject else ""
    if subject is None:  # `lock sign`: same generation, same digest
        print(f"{verb} {update.path}: generation {update.generation} (unchanged)")
    else:
        print(f"{verb}{named}: {update.path} is now generation {update.generation}")
    print(f"  digest    {update.digest}")
    print(f"  previous  {update.previous}")
    if update.entry is not None:
        print(f"  bundle    {update.entry.bundle}")
        if update.entry.source is not None:
            print(f"  source    {update.entry.source.display()}")
        print(f"  signed    {'by key ' + update.entry.key_id if update.entry.key_id else 'no'}")
    print(f"  lock signed {'by key ' + update.lock_key_id if update.lock_key_id else 'no'}")
    return EXIT_OK


def _warn_if_lock_signature_dropped(update: LockUpdate) -> None:
    if update.was_signed and update.lock_key_id is None:
        stderr_console().print(
            "[yellow]warning:[/] the previous generation was signed; this one is not "
            "(pass --key, or run `stockade lock sign --key KEY.pem`)"
        )


def run_add(args: argparse.Namespace) -> int:
    """Add or replace one package."""
    key = load_key(args.key) if args.key else None
    operator = load_key(args.operator_key) if args.operator_key else key
    bundle, source, signature = Path(args.bundle), None, None
    if args.bundle.startswith("oci://"):
        bundle, source, signature = pull_for_lock(args)
    elif (bundle / PROJECT_FILE).is_file():
        bundle = _build_project(bundle, show=not args.json)
    else:
        _refuse_stale(bundle, strict=args.strict)
    module = bundle / "module.wasm"
    if not args.json and module.is_file() and module.stat().st_size <= _SAY_BYTES:  # add_package compiles it
        say_compiling(bundle.name, module.read_bytes())
    update = add_package(
        args.lock, bundle, private_key=key, operator_key=operator, source=source, signature=signature
    )
    _warn_if_lock_signature_dropped(update)
    if (
        update.replaced is not None
        and update.replaced.signature
        and update.entry
        and not update.entry.signature
    ):
        stderr_console().print(
            f"[yellow]warning:[/] {update.entry.name} was signed; the new entry is not (pass --key)"
        )
    verb = "replaced" if update.replaced is not None else "added"
    return _report(update, args, verb)


def _build_project(project: Path, *, show: bool) -> Path:
    """``lock add PROJECT_DIR``: build it into its ``dist/`` as ``stockade build`` does."""
    from sdk.commands.build import build_reported  # the build toolchain only when building

    result = build_reported(project, show=show)
    if show:
        stderr_console().print(f"built {cell(str(result.bundle_dir))}", highlight=False)
    return result.bundle_dir


def _refuse_stale(bundle: Path, *, strict: bool) -> None:
    """Refuse a bundle in ``PROJECT/dist/`` that is not what the project builds now.

    ``stockade test`` and ``dev`` build into temporary directories, so ``dist/`` keeps the
    last ``stockade build``: locking it after an edit would lock the old manifest silently.

    Raises:
        CommandFailed: BUNDLE_STALE, the manifest differs (or, under ``strict``, a project
            file is newer than the bundle).
    """
    project = project_of(bundle)
    if project is None:
        return
    found = staleness(project, bundle)
    where = str(project)
    hint = f"run `stockade build {where}` first, or `stockade lock add {where}` to build and lock it"
    if found.different:
        raise CommandFailed("BUNDLE_STALE", f"{bundle} is stale: {found.different}", hint=hint)
    if not found.newer:
        return
    files = ", ".join(found.newer[:5]) + (f" and {len(found.newer) - 5} more" if len(found.newer) > 5 else "")
    message = f"{bundle} is older than {files} in {project}"
    if strict:
        raise CommandFailed("BUNDLE_STALE", message, hint=hint)
    stderr_console().print(f"[yellow]warning:[/] {cell(message)}; {cell(hint)} (--strict refuses)",
                           soft_wrap=True, highlight=False)


def run_remove(args: argparse.Namespace) -> int:
    """Remove one package."""
    operator = load_key(args.key) if args.key else None
    try:
        update = remove_package(args.lock, args.name, operator_key=operator)
    except KeyError:
        raise CommandFailed(
            "PACKAGE_NOT_IN_LOCK",
            f"no package named {args.name!r} in {args.lock}",
            hint="list the packages with `stockade inspect LOCK`",
        ) from None
    _warn_if_lock_signature_dropped(update)
    return _report(update, args, "removed")


def run_sign(args: argparse.Namespace) -> int:
    """Sign the current lock in place."""
    update = sign_lock(args.lock, load_key(args.key))
    return _report(update, args, "signed")


def _warm(loaded: LoadedLock, *, refuse: bool, show: bool) -> None:
    """Compile every package into the artifact cache ``stockade serve`` loads from; with
    ``refuse``, a component the host would refuse fails the command."""
    refused = warm_packages([(p.binding.package, p.module_bytes) for p in loaded.packages], show=show)
    if refuse:
        for name, refusal in refused.items():
            raise ComponentRefused(f"package {name}: {refusal['message']}", package=name)


def run_verify(args: argparse.Namespace) -> int:
    """Verify without writing; exit 1 with the error code on the first failure."""
    loaded = load_for_review(
        args.lock,
        trusted_keys=args.trusted_keys,
        require_signatures=args.require_signatures,
        operator_keys=args.trusted_operator_keys,
        unsafe_allow_unsigned=signatures_waived(args),
    )
    _warm(loaded, refuse=args.components, show=not args.json)  # a later `stockade serve` starts warm
    if args.state_dir is not None:
        LockState(args.state_dir.expanduser()).check(loaded)
    packages = [
        {
            "name": e.name,
            "version": e.version,
            "bundle": e.bundle,
            "signed": e.signature is not None,
            "key_id": e.key_id,
        }
        for e in loaded.lock.packages
    ]
    if args.json:
        print_json(
            {
                "ok": True,
                "lock": str(args.lock),
                "generation": loaded.generation,
                "digest": loaded.digest,
                "previous": loaded.previous,
                "packages": packages,
                "components_checked": args.components,
                "lock_key_id": loaded.lock_key_id,
                "lock_signature_verified": args.trusted_operator_keys is not None,
            }
        )
        return EXIT_OK
    print(f"ok: {args.lock} generation {loaded.generation}, {len(packages)} package(s) verified")
    print(f"  digest  {loaded.digest}")
    if loaded.lock_key_id is None:
        print("  lock    unsigned")
    elif args.trusted_operator_keys is not None:
        print(f"  lock    signed by {loaded.lock_key_id} (verified)")
    else:
        print(f"  lock    signed by {loaded.lock_key_id} (not checked: pass --trusted-operator-keys)")
    for p in packages:
        signed = f"signed by {p['key_id']}" if p["signed"] else "unsigned"
        print(f"  {p['name']}@{p['version']}  {signed}")
    return EXIT_OK
