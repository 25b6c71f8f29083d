"""``stockade keygen --out KEY.pem``: make an Ed25519 signing key for packages.

Writes the private key as PKCS#8 PEM with mode 0600 (an existing file is never
overwritten) and prints its key id and public key. ``--encrypt`` encrypts it with a
passphrase (at least 8 characters) read from the file descriptor named by
$STOCKADE_KEY_PASSPHRASE_FD, from $STOCKADE_KEY_PASSPHRASE, or asked twice at the terminal;
never from the command line. Every command taking ``--key`` reads it the same way.
``--keys-file FILE`` also adds the public key to a trusted keys file (format
``stockade.keys/1``, created if missing) that hosts pass as ``--trusted-keys``.

Keep the private key out of version control; share only the public key.
"""

from __future__ import annotations

import argparse
import base64
import os
from pathlib import Path
from typing import Any

from host.trust.lock import TrustedKeys, key_id_for
from sdk.bundle import MIN_PASSPHRASE_CHARS, add_trusted_key, generate_keypair, write_private_key
from sdk.commands._common import EXIT_OK, CommandFailed, print_json
from sdk.commands._passphrase import passphrase_for


def register(sub: Any) -> None:
    """Add the ``keygen`` subcommand."""
    parser = sub.add_parser(
        "keygen",
        help="make an Ed25519 signing key",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", type=Path, required=True, metavar="KEY.pem", help="where to write the private key"
    )
    parser.add_argument(
        "--keys-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="also add the public key to this trusted keys file",
    )
    parser.add_argument(
        "--encrypt",
        action="store_true",
        help="encrypt the key with a passphrase (from $STOCKADE_KEY_PASSPHRASE_FD, "
        "$STOCKADE_KEY_PASSPHRASE or a prompt; never an argument)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the key, optionally trust it, and print its id."""
    if args.keys_file is not None and os.path.lexists(args.keys_file):
        TrustedKeys.load(args.keys_file)  # refuse a bad keys file before writing anything
    if os.path.lexists(args.out):  # before asking for a passphrase
        raise CommandFailed(
            "KEY_EXISTS",
            f"{args.out} already exists",
            hint="choose another --out; a key is never overwritten",
        )
    passphrase = passphrase_for(args.out, new=True) if args.encrypt else None
    if passphrase is not None and len(passphrase) < MIN_PASSPHRASE_CHARS:
        raise CommandFailed(
            "KEY_PASSPHRASE_TOO_SHORT",
            f"the passphrase has fewer than {MIN_PASSPHRASE_CHARS} characters",
            hint="choose a longer one (a few random words)",
        )
    pem, public = generate_keypair(passphrase)
    try:
        write_private_key(args.out, pem)
    except FileExistsError:
        raise CommandFailed(
            "KEY_EXISTS",
            f"{args.out} already exists",
            hint="choose another --out; a key is never overwritten",
        ) from None
    except OSError as exc:
        raise CommandFailed("KEY_UNWRITABLE", f"cannot write {args.out}: {exc.strerror}") from None
    key_id = key_id_for(public)
    public_b64 = base64.b64encode(public).decode("ascii")
    added = add_trusted_key(args.keys_file, public) if args.keys_file else False
    if args.json:
        print_json(
            {
                "ok": True,
                "key_file": str(args.out),
                "key_id": key_id,
                "public_key": public_b64,
                "keys_file": str(args.keys_file) if args.keys_file else None,
                "encrypted": passphrase is not None,
            }
        )
        return EXIT_OK
    how = (
        "encrypted with your passphrase, mode 0600" if passphrase is not None else "mode 0600; keep it secret"
    )
    print(f"wrote private key {args.out} ({how})")
    print(f"  key id      {key_id}")
    print(f"  public key  {public_b64}")
    if args.keys_file:
        print(f"  {'added to' if added else 'already in'} trusted keys file {args.keys_file}")
    return EXIT_OK
