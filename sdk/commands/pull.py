"""``stockade pull REF@sha256:…``: fetch a bundle from an OCI registry, by digest only.

Everything is verified before anything is written: the OCI manifest's sha256 is the
pinned digest, the artifact has exactly the Stockade layout, every blob matches its
digest and size, the manifest passes the Stockade rules and pins the module's sha256,
and the signature layer verifies against ``--trusted-keys`` when given
(``--require-signatures`` refuses an unsigned artifact). The bundle then appears in one
rename, in the content-addressed store next to ``--lock``
(``bundle-store/sha256/<hex>/``) or in ``--out DIR`` (which must not exist).

A tag alone is refused: tags move. ``--resolve-tag`` resolves it once, prints a warning
with the digest it resolved to, and pulls that digest (so a tag moved afterwards cannot
change what is pulled). Pin the printed digest in scripts and locks.

Exit codes: 0 pulled, 1 refused (TAG_NOT_PINNED, DIGEST_MISMATCH, ARTIFACT_INVALID,
SIGNATURE_INVALID, REGISTRY_UNAVAILABLE, REGISTRY_REFUSED, …; nothing written), 2 usage.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from host.trust.bundlestore import SOURCE_FORMAT, OciSource
from sdk.commands._common import EXIT_OK, CommandFailed, UsageFailed, print_json, stderr_console
from sdk.commands._registry import (
    add_registry_options,
    add_verify_options,
    open_registry,
    store_root,
    trusted_keys,
)
from sdk.oci.artifact import PulledBundle, pull_bundle
from sdk.oci.client import OciReference, RegistryClient, parse_reference
from sdk.review.lockfile import read_lock

__all__ = ["pull_for_lock", "register", "run", "run_fetch"]


def register(sub: Any) -> None:
    """Add the ``pull`` subcommand."""
    parser = sub.add_parser(
        "pull",
        help="fetch a bundle from an OCI registry by digest, verified before it is written",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("ref", metavar="REF", help="registry.example[:port]/path@sha256:<hex>")
    parser.add_argument(
        "--resolve-tag", action="store_true", help="accept REF:tag: resolve it once and pull that digest"
    )
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="write the bundle here instead")
    parser.add_argument(
        "--lock", type=Path, default=None, help="the store is next to this lock (default: ./stockade.lock)"
    )
    add_verify_options(parser)
    add_registry_options(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def _parse(text: str) -> OciReference:
    try:
        return parse_reference(text)
    except ValueError as exc:
        raise UsageFailed(
            "REFERENCE_INVALID", str(exc), hint="write registry.example[:port]/path@sha256:<hex>"
        ) from None


def _require_pin(reference: OciReference, *, resolve_tag: bool) -> None:
    """Refuse a tag-only reference unless ``--resolve-tag`` (before any network traffic)."""
    if reference.digest is None and not resolve_tag:
        raise CommandFailed(
            "TAG_NOT_PINNED",
            f"{reference} names a tag, and tags move: pulls are by digest only",
            hint="pin it as REF@sha256:<hex> (stockade push prints it), or pass --resolve-tag",
        )


def _pin(client: RegistryClient, reference: OciReference, *, resolve_tag: bool) -> OciReference:
    """The reference with a digest; a tag is resolved exactly once, and only when allowed."""
    _require_pin(reference, resolve_tag=resolve_tag)
    if reference.digest is not None:
        return reference
    _, digest = client.get_manifest(reference.path, str(reference.tag))
    stderr_console().print(
        f"[bold yellow]warning:[/] resolved tag {reference.tag} of {reference.repository} to {digest} "
        f"(tags move; pin it: {reference.repository}@{digest})"
    )
    return reference.pinned(digest)


def run(args: argparse.Namespace) -> int:
    """Pull, verify, write; print where and what."""
    reference = _parse(args.ref)
    _require_pin(reference, resolve_tag=args.resolve_tag)
    try:
        with open_registry(args, reference.registry) as client:
            pinned = _pin(client, reference, resolve_tag=args.resolve_tag)
            pulled = pull_bundle(
                client,
                pinned,
                store_root=None if args.out else store_root(args),
                out_dir=args.out,
                trusted_keys=trusted_keys(args),
                require_signatures=args.require_signatures,
            )
    except FileExistsError:
        raise CommandFailed(
            "OUT_EXISTS", f"{args.out} already exists", hint="choose a new --out directory"
        ) from None
    _report(pulled, args)
    return EXIT_OK


def _report(pulled: PulledBundle, args: argparse.Namespace) -> None:
    name, version = pulled.manifest.package.name, pulled.manifest.package.version
    signer = pulled.signature[1] if pulled.signature else None
    if args.json:
        print_json(
            {
                "ok": True,
                "package": name,
                "version": version,
                "digest": pulled.digest,
                "reference": f"{pulled.reference.repository}@{pulled.digest}",
                "directory": str(pulled.directory),
                "manifest_sha256": pulled.manifest_sha256,
                "module_sha256": pulled.module_sha256,
                "signed_by": signer,
                "signature_verified": pulled.signature_verified,
                "reused": pulled.reused,
            }
        )
        return
    print(f"pulled {name}@{version} from {pulled.reference.repository}@{pulled.digest}")
    print(f"  into       {pulled.directory}{' (already present, verified)' if pulled.reused else ''}")
    if signer is None:
        print("  signature  none")
    elif pulled.signature_verified:
        print(f"  signature  verified, key {signer}")
    else:
        print(f"  signature  by key {signer}, NOT verified (pass --trusted-keys)")


def pull_for_lock(args: argparse.Namespace) -> tuple[Path, OciSource, tuple[str, str] | None]:
    """For ``stockade lock add oci://REF@sha256:…``: pull into the store next to the lock.

    Returns:
        ``(bundle directory, source for the lock entry, (signature, key_id) or None)``.

    Raises:
        CommandFailed: TAG_NOT_PINNED (a lock pins digests; no tag resolution here).
        StockadeError: as ``stockade pull``.
    """
    reference = _parse(args.bundle)
    if reference.digest is None:
        raise CommandFailed(
            "TAG_NOT_PINNED",
            f"{reference} names a tag; a lock pins digests",
            hint="see the digest with `stockade pull REF:tag --resolve-tag`, review it, "
            "then lock REF@sha256:<hex>",
        )
    with open_registry(args, reference.registry) as client:
        pulled = pull_bundle(
            client,
            reference,
            store_root=store_root(args),
            trusted_keys=trusted_keys(args),
            require_signatures=args.require_signatures,
        )
    if pulled.signature is not None and not pulled.signature_verified and args.key is None:
        stderr_console().print(
            f"[yellow]warning:[/] the artifact's signature (key {pulled.signature[1]}) was not verified "
            "here (pass --trusted-keys); hosts verify it when they load the lock"
        )
    source = OciSource(
        format=SOURCE_FORMAT, repository=reference.repository, digest=pulled.digest, tag=reference.tag
    )
    return pulled.directory, source, pulled.signature


def _sourced(lock_path: Path) -> Iterator[tuple[Any, OciSource]]:
    lock = read_lock(lock_path)
    if lock is None:
        raise CommandFailed("LOCK_MISSING", f"no lock file at {lock_path}", hint="pass --lock LOCK")
    for entry in lock.packages:
        if entry.source is not None:
            yield entry, entry.source


def run_fetch(args: argparse.Namespace) -> int:
    """``stockade lock fetch``: pull every registry-sourced package of the lock into the store."""
    results = []
    for entry, source in _sourced(args.lock):
        reference = parse_reference(source.reference())
        with open_registry(args, reference.registry) as client:
            pulled = pull_bundle(
                client,
                reference,
                store_root=store_root(args),
                trusted_keys=trusted_keys(args),
                require_signatures=args.require_signatures,
                expected_sha256=(entry.manifest_sha256, entry.module_sha256),
            )
        results.append(
            {
                "name": entry.name,
                "version": entry.version,
                "source": source.display(),
                "directory": str(pulled.directory),
                "reused": pulled.reused,
            }
        )
    if args.json:
        print_json({"ok": True, "lock": str(args.lock), "fetched": results})
        return EXIT_OK
    for r in results:
        state = "present" if r["reused"] else "fetched"
        print(f"{state}  {r['name']}@{r['version']}  {r['source']}")
    print(f"{len(results)} registry package(s) of {args.lock} are in the local store")
    return EXIT_OK
