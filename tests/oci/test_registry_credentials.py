"""Registry credentials: from the Docker config file or the secrets store, never argv,
never printed; against a real registry with htpasswd auth over TLS (test CA)."""

from __future__ import annotations

import base64
import json
import secrets
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.ocicreds import secret_name_for
from tests.oci.conftest import REQUIRE_REGISTRY, Cli, echo_bundle, store_entries
from tests.support.registry import RegistryServer
from tests.support.secrets import key_text
from tests.support.tls import CertAuthority

USER = "ci-bot"
PASSWORD = "pw-" + secrets.token_hex(12)


def _bcrypt(password: str) -> str:
    """A bcrypt hash for htpasswd (the registry accepts nothing else)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt  # noqa: PLC0415 - deprecated module, only for this test's htpasswd

        hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        if hashed and hashed.startswith("$2"):
            return hashed
    except ImportError:
        pass
    reason = "no bcrypt implementation (Python's crypt module) to write the registry's htpasswd"
    if REQUIRE_REGISTRY:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory, test_ca: CertAuthority) -> Iterator[RegistryServer]:
    from tests.oci.conftest import _need_registry  # noqa: PLC0415

    _need_registry()
    htpasswd = f"{USER}:{_bcrypt(PASSWORD)}\n"
    with RegistryServer.start(tmp_path_factory.mktemp("registry-auth"), tls=test_ca, htpasswd=htpasswd) as server:
        yield server


def _docker_config(cli: Cli, registry: str, user: str, password: str) -> None:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    (Path(cli.env["DOCKER_CONFIG"]) / "config.json").write_text(json.dumps({"auths": {registry: {"auth": auth}}}))


def _no_secret_in(proc: object, *values: str) -> None:
    text = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    for value in values:
        assert value not in text
        assert base64.b64encode(f"{USER}:{value}".encode()).decode() not in text


def test_credentials_from_docker_config_push_and_pull(auth_registry: RegistryServer, cli: Cli, tmp_path: Path) -> None:
    _docker_config(cli, auth_registry.address, USER, PASSWORD)
    ca = ("--registry-ca", str(auth_registry.ca_file))
    ref = f"{auth_registry.address}/team/private"
    pushed = cli("push", str(echo_bundle(tmp_path / "b").directory), f"{ref}:1.0.0", *ca)
    assert pushed.returncode == 0, pushed.stderr
    pinned = pushed.stdout.strip().splitlines()[-1]
    pulled = cli("--debug", "pull", pinned, *ca)
    assert pulled.returncode == 0, pulled.stderr
    _no_secret_in(pushed, PASSWORD)
    _no_secret_in(pulled, PASSWORD)


def test_credentials_from_secrets_store(auth_registry: RegistryServer, cli: Cli, tmp_path: Path) -> None:
    ca = ("--registry-ca", str(auth_registry.ca_file))
    _docker_config(cli, auth_registry.address, USER, PASSWORD)
    pushed = cli("push", str(echo_bundle(tmp_path / "b").directory), f"{auth_registry.address}/team/vault:1", *ca)
    assert pushed.returncode == 0, pushed.stderr
    (Path(cli.env["DOCKER_CONFIG"]) / "config.json").unlink()  # only the secrets store now
    cli.env["STOCKADE_MASTER_KEY"] = key_text()
    name = secret_name_for(auth_registry.address)
    stored = cli("secrets", "set", name, "--project", "stockade", "--subject", "registry", stdin=f"{USER}:{PASSWORD}")
    assert stored.returncode == 0, stored.stderr
    pulled = cli("pull", pushed.stdout.strip().splitlines()[-1], *ca)
    assert pulled.returncode == 0, pulled.stderr
    _no_secret_in(pulled, PASSWORD)


def test_registry_asking_for_credentials_without_any_refused(auth_registry: RegistryServer, cli: Cli) -> None:
    proc = cli("pull", f"{auth_registry.address}/team/private@sha256:{'0' * 64}",
               "--registry-ca", str(auth_registry.ca_file))
    assert proc.returncode == 1
    assert "error: REGISTRY_REFUSED:" in proc.stderr and "none are configured" in proc.stderr
    assert store_entries(cli.cwd / "bundle-store") == []


def test_wrong_password_refused_and_never_echoed(auth_registry: RegistryServer, cli: Cli) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    _docker_config(cli, auth_registry.address, USER, wrong)
    proc = cli("pull", f"{auth_registry.address}/team/private@sha256:{'0' * 64}",
               "--registry-ca", str(auth_registry.ca_file), "--json")
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "REGISTRY_REFUSED" and error["details"]["status"] == 401
    _no_secret_in(proc, wrong)


def test_no_command_line_option_takes_a_credential(cli: Cli) -> None:
    for command in ("push", "pull"):
        text = cli(command, "--help").stdout.lower()
        assert "--password" not in text and "--username" not in text and "--token" not in text
