"""``stockade sign BUNDLE_DIR --key KEY.pem``: sign a bundle for a lock.

Checks the bundle (manifest valid, module digest as pinned) and signs the statement
``{"statement": "stockade/package@1", package, version, manifest_sha256, module_sha256}``
(RFC 8785 canonical JSON; the domain tag keeps a package signature from ever verifying
as a lock signature) with an Ed25519 key from ``stockade keygen``. Prints the signature
and key id that go into the lock entry; ``stockade lock add BUNDLE_DIR --key KEY.pem``
signs while adding (and signs the new lock body too); ``stockade lock sign`` signs a
whole lock.
"""

from __future__ import annotations

import argparse
import os
import stat
from pathlib import Path
from typing import Any

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from host.errors import LockInvalid
from host.files import read_regular
from sdk.bundle import KeyPassphraseWrong, is_encrypted_pem, load_private_key, read_bundle, sign_package
from sdk.commands._common import EXIT_OK, CommandFailed, print_json, stderr_console
from sdk.commands._passphrase import passphrase_for

MAX_KEY_FILE_BYTES = 64 * 1024  # bytes; a PEM Ed25519 key is about 120


def register(sub: Any) -> None:
    """Add the ``sign`` subcommand."""
    parser = sub.add_parser(
        "sign",
        help="sign a bundle with an Ed25519 key",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "bundle", type=Path, metavar="BUNDLE_DIR", help="directory with manifest.json and module.wasm"
    )
    parser.add_argument(
        "--key", type=Path, required=True, metavar="KEY.pem", help="private key from stockade keygen"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def read_key(path: Path) -> bytes:
    """Read a private key file, warning when others may read it.

    Raises:
        CommandFailed: KEY_UNREADABLE.
    """
    try:
        data = read_regular(path, MAX_KEY_FILE_BYTES, what="key file", error=LockInvalid)
    except LockInvalid as exc:
        raise CommandFailed(
            "KEY_UNREADABLE", exc.message, hint="pass the file written by `stockade keygen`"
        ) from None
    if stat.S_IMODE(os.stat(path).st_mode) & 0o077:
        stderr_console().print(f"[yellow]warning:[/] {path} is readable by other users; chmod 600 it")
    return data


def load_key(path: Path) -> Ed25519PrivateKey:
    """Read and parse a private key file from ``stockade keygen``.

    An encrypted key (``keygen --encrypt``) is decrypted with the passphrase from
    :func:`sdk.commands._passphrase.passphrase_for` (a descriptor, the environment or a
    prompt; never an argument).

    Raises:
        CommandFailed: KEY_UNREADABLE; KEY_INVALID when it is not an Ed25519 private key;
            KEY_PASSPHRASE_REQUIRED / KEY_PASSPHRASE_WRONG for an encrypted key without a
            passphrase or with one that does not decrypt it.
    """
    data = read_key(path)
    passphrase = passphrase_for(path) if is_encrypted_pem(data) else None
    try:
        return load_private_key(data, passphrase)
    except KeyPassphraseWrong:
        raise CommandFailed(
            "KEY_PASSPHRASE_WRONG",
            f"the passphrase does not decrypt {path}",
            hint="check $STOCKADE_KEY_PASSPHRASE / $STOCKADE_KEY_PASSPHRASE_FD, or retype it at the prompt",
        ) from None
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise CommandFailed(
            "KEY_INVALID",
            f"{path} is not an Ed25519 private key",
            hint="make one with `stockade keygen --out KEY.pem`",
        ) from None


def run(args: argparse.Namespace) -> int:
    """Sign and print the lock entry fields."""
    key = load_key(args.key)
    bundle = read_bundle(args.bundle)
    package = bundle.manifest.package
    signature, key_id = sign_package(
        key, package.name, package.version, bundle.manifest_sha256, bundle.module_sha256
    )
    fields = {
        "package": package.name,
        "version": package.version,
        "manifest_sha256": bundle.manifest_sha256,
        "module_sha256": bundle.module_sha256,
        "signature": signature,
        "key_id": key_id,
    }
    if args.json:
        print_json({"ok": True, **fields})
        return EXIT_OK
    print(f"signed {package.name}@{package.version}")
    for name, value in fields.items():
        if name not in ("package", "version"):
            print(f"  {name:<16}{value}")
    stderr_console().print(
        f"nothing needs this output: `stockade lock add {args.bundle} --key {args.key}` signs the lock "
        "entry itself (these are the fields it records; compare them to check a key or a bundle)",
        markup=False, highlight=False, soft_wrap=True,
    )  # fmt: skip
    return EXIT_OK
