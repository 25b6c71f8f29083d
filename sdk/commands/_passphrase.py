"""Where the CLI gets the passphrase of an encrypted signing key.

Never from the command line (argv is visible to every user in ``ps`` and lands in shell
history). In order:

1. ``$STOCKADE_KEY_PASSPHRASE_FD``: a file descriptor number the caller opened (a pipe,
   ``3< file``); read once to its end (at most 64 KiB, one trailing newline dropped) and
   reused for every key the command loads;
2. ``$STOCKADE_KEY_PASSPHRASE``: the passphrase itself (for CI secrets);
3. a prompt on the terminal (``getpass``, no echo) when standard input is one; keygen
   asks twice.

With none of them a command refuses with ``KEY_PASSPHRASE_REQUIRED``.
"""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path
from typing import Final

from sdk.commands._common import CommandFailed

__all__ = ["PASSPHRASE_ENV", "PASSPHRASE_FD_ENV", "passphrase_for"]

PASSPHRASE_ENV: Final = "STOCKADE_KEY_PASSPHRASE"  # noqa: S105 (a variable name, not a password)
PASSPHRASE_FD_ENV: Final = "STOCKADE_KEY_PASSPHRASE_FD"  # noqa: S105 (a variable name)
MAX_PASSPHRASE_BYTES: Final = 64 * 1024
_HINT: Final = (
    f"set ${PASSPHRASE_FD_ENV} to a file descriptor to read it from, or ${PASSPHRASE_ENV}, or run "
    "the command in a terminal to be prompted (a passphrase is never a command-line argument)"
)
_from_fd: dict[int, bytes] = {}


def _strip_newline(data: bytes) -> bytes:
    if data.endswith(b"\r\n"):
        return data[:-2]
    return data[:-1] if data.endswith(b"\n") else data


def _read_fd(text: str) -> bytes:
    try:
        fd = int(text)
    except ValueError:
        raise CommandFailed(
            "KEY_PASSPHRASE_UNREADABLE",
            f"${PASSPHRASE_FD_ENV} must be a file descriptor number, not {text!r}",
        ) from None
    if fd in _from_fd:
        return _from_fd[fd]
    chunks: list[bytes] = []
    size = 0
    try:
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_PASSPHRASE_BYTES:
                raise CommandFailed(
                    "KEY_PASSPHRASE_UNREADABLE",
                    f"the passphrase on fd {fd} is over {MAX_PASSPHRASE_BYTES} bytes",
                )
    except OSError as exc:
        raise CommandFailed(
            "KEY_PASSPHRASE_UNREADABLE",
            f"cannot read the passphrase from fd {fd}: {exc.strerror}",
            hint=_HINT,
        ) from None
    _from_fd[fd] = _strip_newline(b"".join(chunks))
    return _from_fd[fd]


def passphrase_for(path: Path, *, new: bool = False) -> bytes:
    """The passphrase for the key at ``path`` (``new``: one being created, asked twice).

    Raises:
        CommandFailed: KEY_PASSPHRASE_REQUIRED (no source), KEY_PASSPHRASE_UNREADABLE (a
            bad descriptor), KEY_PASSPHRASE_MISMATCH (the two prompts differ).
    """
    fd_text = os.environ.get(PASSPHRASE_FD_ENV, "").strip()
    if fd_text:
        return _read_fd(fd_text)
    value = os.environ.get(PASSPHRASE_ENV)
    if value:
        return value.encode("utf-8")
    if sys.stdin is not None and sys.stdin.isatty():
        what = "new passphrase" if new else "passphrase"
        first = getpass.getpass(f"{what} for {path}: ")
        if new and getpass.getpass(f"repeat the passphrase for {path}: ") != first:
            raise CommandFailed(
                "KEY_PASSPHRASE_MISMATCH", "the two passphrases differ", hint="run keygen again"
            )
        return first.encode("utf-8")
    raise CommandFailed(
        "KEY_PASSPHRASE_REQUIRED",
        f"{path} is encrypted and no passphrase was given" if not new else "--encrypt needs a passphrase",
        hint=_HINT,
    )
