"""Trust files another user could change are refused, as OpenSSH refuses such key files;
every file Stockade writes for itself is private whatever the umask.

Before, only key files were checked: a world-writable state directory, ``policy.json``,
trusted-keys file or tokens file was used silently (anyone on the machine could grant
themselves tools, trust their own signing key or mint a token), and ``stockade.host.toml``
followed the umask (0666 under umask 000).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from host.errors import ConfigInvalid, LockInvalid, PolicyUnavailable, RequestInvalid, StoreUnavailable
from host.formats.hostfile import load_host_file, render_host_file
from host.mcp.tokens import TokenFile
from host.signing import TrustedKeys
from sdk.bundle import generate_keypair, write_keys_file
from tests.support.hosts import ALICE, make_host, write_policy

ROOT = os.geteuid() == 0


def _policy(tmp: Path) -> Path:
    write_policy(tmp / "policy.json", allow=["tool.call:echo.say"])
    return tmp / "policy.json"


def _keys(tmp: Path) -> Path:
    path = tmp / "trusted.keys"
    _, public = generate_keypair()
    write_keys_file(path, [public])
    return path


def _tokens(tmp: Path) -> Path:
    TokenFile(tmp / "tokens.json").add(project="p", subject="alice", ttl_s=None)
    return tmp / "tokens.json"


def _host_file(tmp: Path) -> Path:
    path = tmp / "stockade.host.toml"
    path.write_text(render_host_file(state_dir="state", lock="stockade.lock", trusted_keys=None,
                                     require_signatures=False))
    path.chmod(0o600)
    return path


def _use_policy(path: Path) -> None:
    from host.policy.engine import FilePolicyEngine  # noqa: PLC0415

    FilePolicyEngine(path).authorize(ALICE, "p", "tool.call:echo.say")


def _use_tokens(path: Path) -> None:
    TokenFile(path).entries()


TRUST_FILES: list[tuple[str, Callable[[Path], Path], Callable[[Path], object], type[Exception]]] = [
    ("policy", _policy, _use_policy, PolicyUnavailable),
    ("trusted-keys", _keys, TrustedKeys.load, LockInvalid),
    ("tokens", _tokens, _use_tokens, RequestInvalid),
    ("host-config", _host_file, load_host_file, ConfigInvalid),
]
IDS = [case[0] for case in TRUST_FILES]


@pytest.fixture
def umask_000() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("name", "make", "use", "error"), TRUST_FILES, ids=IDS)
@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602], ids=["world-and-group", "group", "world"])
def test_trust_file_writable_by_others_refused(
    tmp_path: Path, name: str, make: Callable[[Path], Path], use: Callable[[Path], object],
    error: type[Exception], mode: int,
) -> None:
    path = make(tmp_path)
    use(path)  # private: accepted
    path.chmod(mode)
    before = path.read_bytes()
    with pytest.raises(error, match=r"writable by .*refused") as caught:
        use(path)
    assert f"chmod go-w {path}" in caught.value.hint  # type: ignore[attr-defined]
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == mode  # nothing touched


@pytest.mark.parametrize(("name", "make", "use", "error"), TRUST_FILES, ids=IDS)
def test_trust_file_in_directory_others_can_write_refused(
    tmp_path: Path, name: str, make: Callable[[Path], Path], use: Callable[[Path], object],
    error: type[Exception],
) -> None:
    directory = tmp_path / "shared"
    directory.mkdir()
    path = make(directory)
    directory.chmod(0o777)  # anyone may rename another file over it
    with pytest.raises(error, match="which another user can change") as caught:
        use(path)
    assert f"chmod go-w {directory}" in caught.value.hint  # type: ignore[attr-defined]
    directory.chmod(0o1777)  # sticky, like /tmp: others cannot replace our file
    use(path)


@pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")
@pytest.mark.parametrize(("name", "make", "use", "error"), TRUST_FILES, ids=IDS)
def test_trust_file_of_another_user_refused(
    tmp_path: Path, name: str, make: Callable[[Path], Path], use: Callable[[Path], object],
    error: type[Exception],
) -> None:
    path = make(tmp_path)
    os.chown(path, 65534, 65534)  # nobody
    with pytest.raises(error, match="owned by another user"):
        use(path)


def test_world_writable_state_dir_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    state.chmod(0o777)
    with pytest.raises(StoreUnavailable, match=r"state directory .* writable by group and others") as caught:
        make_host(tmp_path)
    assert f"chmod go-w {state}" in caught.value.hint
    assert sorted(p.name for p in state.iterdir()) == []  # nothing written into it
    state.chmod(0o700)
    (tmp_path / "policy.json").unlink()
    make_host(tmp_path).host.close()


def test_files_stockade_writes_are_private_under_umask_000(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask_000: None
) -> None:
    """``stockade init`` under umask 000 wrote a 0666 ``stockade.host.toml``."""
    from sdk.cli import main  # noqa: PLC0415

    monkeypatch.chdir(tmp_path)
    assert main(["init", "--json"]) == 0
    config = tmp_path / "stockade.host.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    state = tmp_path / ".stockade"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for path in state.rglob("*"):
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))
        assert stat.S_IMODE(path.stat().st_mode) & 0o700 == expected & 0o700 or not path.is_dir()
    load_host_file(config)  # and it passes its own check
