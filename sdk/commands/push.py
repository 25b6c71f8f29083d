"""``stockade push BUNDLE_DIR REF``: publish a bundle to an OCI registry.

``REF`` is ``registry.example[:port]/path:tag`` (``oci://`` optional). The bundle is
checked (manifest valid, module digest as pinned), uploaded as a Stockade bundle artifact
(media types in docs/registries.md), and
tagged. ``--key KEY.pem`` adds a signature layer. The digest-pinned reference is printed
last on stdout (``registry/path@sha256:…``): that, not the tag, is what consumers pull
and lock.

Credentials come from the secrets store or the Docker config file, never from options.

Exit codes: 0 pushed, 1 refused (REGISTRY_UNAVAILABLE, REGISTRY_REFUSED, MANIFEST_INVALID,
…), 2 usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sdk.bundle import read_bundle, sign_package
from sdk.commands._common import EXIT_OK, UsageFailed, print_json
from sdk.commands._registry import add_registry_options, open_registry
from sdk.commands.sign import load_key
from sdk.oci.artifact import push_bundle
from sdk.oci.client import parse_reference


def register(sub: Any) -> None:
    """Add the ``push`` subcommand."""
    parser = sub.add_parser(
        "push",
        help="publish a bundle to an OCI registry (prints the digest to pin)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "bundle", type=Path, metavar="BUNDLE_DIR", help="directory with manifest.json and module.wasm"
    )
    parser.add_argument("ref", metavar="REF", help="registry.example[:port]/path:tag")
    parser.add_argument("--key", type=Path, default=None, metavar="KEY.pem", help="add a signature layer")
    add_registry_options(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check, upload, tag, print the pinned reference."""
    try:
        reference = parse_reference(args.ref)
    except ValueError as exc:
        raise UsageFailed(
            "REFERENCE_INVALID", str(exc), hint="write registry.example[:port]/path:tag"
        ) from None
    if reference.digest is not None or reference.tag is None:
        raise UsageFailed(
            "REFERENCE_INVALID",
            "push takes a tag, not a digest (the digest is computed)",
            hint="write registry.example[:port]/path:tag",
        )
    bundle = read_bundle(args.bundle)
    package = bundle.manifest.package
    signature = None
    if args.key is not None:
        signature = sign_package(
            load_key(args.key), package.name, package.version, bundle.manifest_sha256, bundle.module_sha256
        )
    with open_registry(args, reference.registry) as client:
        digest = push_bundle(client, reference, bundle, signature=signature)
    pinned = f"{reference.repository}@{digest}"
    if args.json:
        print_json(
            {
                "ok": True,
                "package": package.name,
                "version": package.version,
                "tag": reference.tag,
                "repository": reference.repository,
                "digest": digest,
                "reference": pinned,
                "signed_by": signature[1] if signature else None,
            }
        )
        return EXIT_OK
    print(f"pushed {package.name}@{package.version} to {reference}")
    print(f"  signed  {'by key ' + signature[1] if signature else 'no'}")
    print(pinned)
    return EXIT_OK
