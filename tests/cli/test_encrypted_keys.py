"""Passphrase-encrypted signing keys.

Attacks defended: a signing key copied off a disk (it is encrypted at rest), a passphrase
read from ``ps``/shell history (never an argument), a wrong passphrase silently producing
some other key or a traceback (a clear refusal with a stable code).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from host.trust.lock import TrustedKeys
from sdk.bundle import KeyPassphraseRequired, KeyPassphraseWrong, generate_keypair, load_private_key
from sdk.commands import _passphrase
from sdk.commands._common import CommandFailed
from tests.support.bundles import make_manifest, write_bundle
from tests.support.cli import cli_env, json_out, run_cli
from tests.support.wat import echo_component

PASSPHRASE = "correct horse battery staple"


def _env(**extra: str) -> dict[str, str]:
    """The CLI environment with no passphrase source but those in ``extra``."""
    env = cli_env()
    for name in ("STOCKADE_KEY_PASSPHRASE", "STOCKADE_KEY_PASSPHRASE_FD"):
        env.pop(name, None)
    return {**env, **extra}


def _keygen_with_fd(root: Path, passphrase: str) -> subprocess.CompletedProcess[str]:
    """``keygen --encrypt`` reading the passphrase from a pipe on fd 3 (as a script would)."""
    read, write = os.pipe()
    os.write(write, passphrase.encode() + b"\n")
    os.close(write)
    try:
        return subprocess.run(
            [sys.executable, "-m", "sdk.cli", "keygen", "--out", "key.pem", "--keys-file", "keys.json",
             "--encrypt", "--json"],
            cwd=root, capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL,
            env=_env(STOCKADE_KEY_PASSPHRASE_FD=str(read)), pass_fds=(read,),
        )  # fmt: skip
    finally:
        os.close(read)


def _bundle(root: Path) -> Path:
    module = echo_component()
    return write_bundle(root / "bundles" / "tracker", make_manifest(module_bytes=module), module)


def test_encrypted_key_from_a_descriptor_signs_and_verifies(tmp_path: Path) -> None:
    made = _keygen_with_fd(tmp_path, PASSPHRASE)
    assert made.returncode == 0, made.stderr
    info = json_out(made)
    assert info["encrypted"] is True
    pem = (tmp_path / "key.pem").read_bytes()
    assert pem.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----")
    assert PASSPHRASE.encode() not in pem and PASSPHRASE not in made.stdout + made.stderr
    signed = run_cli(
        "sign", str(_bundle(tmp_path)), "--key", "key.pem", "--json", cwd=tmp_path,
        env=_env(STOCKADE_KEY_PASSPHRASE=PASSPHRASE),
    )  # fmt: skip
    assert signed.returncode == 0, signed.stderr
    fields = json_out(signed)
    assert fields["key_id"] == info["key_id"]
    TrustedKeys.load(tmp_path / "keys.json").verify(
        fields["package"], fields["version"], fields["manifest_sha256"], fields["module_sha256"],
        signature=fields["signature"], key_id=fields["key_id"],
    )  # fmt: skip


def test_encrypted_key_signs_a_lock_entry(tmp_path: Path) -> None:
    assert _keygen_with_fd(tmp_path, PASSPHRASE).returncode == 0
    added = run_cli(
        "lock", "add", str(_bundle(tmp_path)), "--key", "key.pem", "--json", cwd=tmp_path,
        env=_env(STOCKADE_KEY_PASSPHRASE=PASSPHRASE),
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    ok = run_cli(
        "lock", "verify", "--trusted-keys", "keys.json", "--require-signatures", cwd=tmp_path, env=_env()
    )
    assert ok.returncode == 0, ok.stderr


def test_encrypted_key_with_a_wrong_passphrase_refused(tmp_path: Path) -> None:
    assert _keygen_with_fd(tmp_path, PASSPHRASE).returncode == 0
    proc = run_cli(
        "sign", str(_bundle(tmp_path)), "--key", "key.pem", "--json", cwd=tmp_path,
        env=_env(STOCKADE_KEY_PASSPHRASE="not the passphrase"),
    )  # fmt: skip
    assert proc.returncode == 1
    error = json_out(proc)["error"]
    assert error["code"] == "KEY_PASSPHRASE_WRONG"
    assert "the passphrase does not decrypt key.pem" in error["message"]
    assert "Traceback" not in proc.stderr
    plain = run_cli(
        "sign",
        str(_bundle(tmp_path)),
        "--key",
        "key.pem",
        cwd=tmp_path,
        env=_env(STOCKADE_KEY_PASSPHRASE="nope"),
    )
    assert "error: KEY_PASSPHRASE_WRONG" in plain.stderr


def test_encrypted_key_without_any_passphrase_source_refused(tmp_path: Path) -> None:
    # No descriptor, no variable, and standard input is not a terminal: nothing to ask.
    assert _keygen_with_fd(tmp_path, PASSPHRASE).returncode == 0
    proc = run_cli("sign", str(_bundle(tmp_path)), "--key", "key.pem", cwd=tmp_path, env=_env())
    assert proc.returncode == 1
    assert "error: KEY_PASSPHRASE_REQUIRED: key.pem is encrypted and no passphrase was given" in proc.stderr
    again = run_cli("keygen", "--out", "other.pem", "--encrypt", cwd=tmp_path, env=_env())
    assert "error: KEY_PASSPHRASE_REQUIRED" in again.stderr and not (tmp_path / "other.pem").exists()


def test_passphrase_is_never_a_command_line_argument(tmp_path: Path) -> None:
    for command in ("keygen", "sign", "lock"):
        helped = run_cli(command, "--help", cwd=tmp_path, env=_env())
        assert "--passphrase" not in helped.stdout, command
    refused = run_cli(
        "keygen", "--out", "k.pem", "--encrypt", "--passphrase", PASSPHRASE, cwd=tmp_path, env=_env()
    )
    assert refused.returncode != 0 and not (tmp_path / "k.pem").exists()


def test_keygen_refuses_a_short_passphrase(tmp_path: Path) -> None:
    proc = run_cli(
        "keygen", "--out", "k.pem", "--encrypt", cwd=tmp_path, env=_env(STOCKADE_KEY_PASSPHRASE="short")
    )
    assert proc.returncode == 1 and "error: KEY_PASSPHRASE_TOO_SHORT" in proc.stderr
    assert not (tmp_path / "k.pem").exists()


def test_unencrypted_keys_still_sign_with_a_passphrase_set(tmp_path: Path) -> None:
    made = run_cli("keygen", "--out", "key.pem", cwd=tmp_path, env=_env())
    assert made.returncode == 0 and (tmp_path / "key.pem").read_bytes().startswith(
        b"-----BEGIN PRIVATE KEY-----"
    )
    signed = run_cli(
        "sign",
        str(_bundle(tmp_path)),
        "--key",
        "key.pem",
        cwd=tmp_path,
        env=_env(STOCKADE_KEY_PASSPHRASE="ignored"),
    )
    assert signed.returncode == 0, signed.stderr


def test_library_load_of_an_encrypted_key() -> None:
    pem, public = generate_keypair(PASSPHRASE.encode())
    with pytest.raises(KeyPassphraseRequired):
        load_private_key(pem)
    with pytest.raises(KeyPassphraseWrong):
        load_private_key(pem, b"wrong passphrase")
    key = load_private_key(pem, PASSPHRASE.encode())
    assert key.public_key().public_bytes_raw() == public
    with pytest.raises(ValueError, match="at least 8"):
        generate_keypair(b"short")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_passphrase_prompt_on_a_terminal_asks_twice_for_a_new_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STOCKADE_KEY_PASSPHRASE", raising=False)
    monkeypatch.delenv("STOCKADE_KEY_PASSPHRASE_FD", raising=False)
    monkeypatch.setattr(sys, "stdin", _Tty())
    answers = iter([PASSPHRASE, PASSPHRASE, PASSPHRASE, "typo"])
    prompts: list[str] = []

    def fake_getpass(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr(_passphrase.getpass, "getpass", fake_getpass)
    assert _passphrase.passphrase_for(Path("k.pem"), new=True) == PASSPHRASE.encode()
    assert prompts == ["new passphrase for k.pem: ", "repeat the passphrase for k.pem: "]
    with pytest.raises(CommandFailed) as caught:
        _passphrase.passphrase_for(Path("k.pem"), new=True)
    assert caught.value.code == "KEY_PASSPHRASE_MISMATCH"


def test_passphrase_descriptor_that_is_not_open_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOCKADE_KEY_PASSPHRASE_FD", "987")
    with pytest.raises(CommandFailed) as caught:
        _passphrase.passphrase_for(Path("k.pem"))
    assert caught.value.code == "KEY_PASSPHRASE_UNREADABLE"
    monkeypatch.setenv("STOCKADE_KEY_PASSPHRASE_FD", "three")
    with pytest.raises(CommandFailed, match="must be a file descriptor number"):
        _passphrase.passphrase_for(Path("k.pem"))
