"""Fixtures for the OCI distribution tests: a real registry (CNCF distribution, Debian
package ``docker-registry``) on loopback, plain HTTP and TLS with the test CA.

When the binary is missing the tests fail with ``STOCKADE_REQUIRE_REGISTRY=1`` (CI sets
it in ``.ci/run``) and skip with the reason otherwise. The variable is read at import,
before the autouse fixture scrubs ``STOCKADE_*`` from the environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sdk.bundle import Bundle, read_bundle
from sdk.oci.client import RegistryClient
from tests.support.bundles import write_bundle
from tests.support.cli import cli_env, run_cli
from tests.support.hosts import echo_manifest, echo_tool
from tests.support.registry import RegistryServer, registry_binary
from tests.support.tls import CertAuthority
from tests.support.wat import echo_component

REQUIRE_REGISTRY = os.environ.get("STOCKADE_REQUIRE_REGISTRY") == "1"


def _need_registry() -> None:
    if registry_binary() is not None:
        return
    reason = (
        "REGISTRY TESTS NOT RUN: the docker-registry binary (Debian package docker-registry, "
        "CNCF distribution) is not installed; `apt-get install -y docker-registry`"
    )
    if REQUIRE_REGISTRY:
        pytest.fail(reason + " (STOCKADE_REQUIRE_REGISTRY=1)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A plain-HTTP registry on 127.0.0.1 (tests use a fresh repository name each)."""
    _need_registry()
    with RegistryServer.start(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    return CertAuthority.create(tmp_path_factory.mktemp("registry-ca"))


@pytest.fixture(scope="session")
def tls_registry(tmp_path_factory: pytest.TempPathFactory, test_ca: CertAuthority) -> Iterator[RegistryServer]:
    """An HTTPS registry whose certificate (for 127.0.0.1) is issued by the test CA."""
    _need_registry()
    with RegistryServer.start(tmp_path_factory.mktemp("registry-tls"), tls=test_ca) as server:
        yield server


@pytest.fixture
def client(registry: RegistryServer) -> Iterator[RegistryClient]:
    with RegistryClient(registry.address, insecure=True, credential=None, timeout_s=10) as c:
        yield c


_REPOS = iter(range(1_000_000))


@pytest.fixture
def repo(registry: RegistryServer) -> str:
    """A repository of its own for each test: ``127.0.0.1:PORT/team/echo-N``."""
    return f"{registry.address}/team/echo-{next(_REPOS)}"


def custom_section(module: bytes, payload: bytes, name: bytes = b"stockade-test") -> bytes:
    """``module`` with a custom section appended: other bytes, still a valid component."""

    def leb(n: int) -> bytes:
        out = bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            out.append(byte | (0x80 if n else 0))
            if not n:
                return bytes(out)

    body = leb(len(name)) + name + payload
    return module + b"\x00" + leb(len(body)) + body


def echo_bundle(directory: Path, *, module: bytes | None = None, description: str = "Echo.") -> Bundle:
    """Write the echo bundle (a real WAT component) and read it back checked."""
    module = echo_component() if module is None else module
    package = {"name": "echo", "version": "1.0.0", "description": description, "homepage": None}
    manifest = echo_manifest([echo_tool()], module, package=package)
    return read_bundle(write_bundle(directory, manifest, module))


@dataclass
class Cli:
    """Runs ``stockade`` in ``cwd`` with its own state dir and Docker config (never the machine's)."""

    cwd: Path
    env: dict[str, str]

    def __call__(self, *args: str, stdin: str | None = None) -> Any:
        return run_cli(*args, cwd=self.cwd, env=self.env, stdin=stdin)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    work = tmp_path / "work"
    work.mkdir()
    docker = tmp_path / "docker"
    docker.mkdir()
    env = cli_env(STOCKADE_HOME=str(tmp_path / "state"), DOCKER_CONFIG=str(docker))
    return Cli(work, env)


def store_entries(root: Path) -> list[str]:
    """Everything under a bundle store (hidden staging directories included)."""
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))
