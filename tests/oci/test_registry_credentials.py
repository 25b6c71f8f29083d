"""Registry credentials: from the Docker config file or the secrets store, never argv,
never printed; against a real registry with htpasswd auth over TLS (test CA)."""

from __future__ import annotations

import base64
import json
import secrets
import time
import urllib.parse
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from sdk.oci.creds import secret_name_for
from tests.oci.conftest import REQUIRE_REGISTRY, Cli, echo_bundle, store_entries
from tests.support.registry import RegistryServer
from tests.support.secrets import key_text
from tests.support.servers import Exchange, LoopbackServer
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


# --- bearer tokens: the registry delegates auth to a token service (as GHCR, Docker Hub) ---


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


@dataclass
class TokenService:
    """A loopback HTTPS token service issuing ES256 JWTs the real registry verifies against
    the test CA (``x5c`` chain), for ``USER``/``PASSWORD`` only. ``requests`` records what it saw."""

    server: LoopbackServer
    key: ec.EllipticCurvePrivateKey
    cert_der: bytes
    requests: list[tuple[str, str]]

    def jwt(self, scope: str) -> str:
        _, name, actions = scope.split(":")
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "x5c": [base64.b64encode(self.cert_der).decode()]}
        claims = {"iss": "stockade-test-issuer", "sub": USER, "aud": "stockade-test-registry",
                  "exp": now + 300, "nbf": now - 10, "iat": now, "jti": secrets.token_hex(8),
                  "access": [{"type": "repository", "name": name, "actions": actions.split(",")}]}
        signing_input = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        return f"{signing_input}.{_b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def handle(self, ex: Exchange) -> None:
        query = urllib.parse.parse_qs(ex.request.query)
        authorization = ex.request.header("authorization") or ""
        self.requests.append((authorization, query.get("scope", [""])[0]))
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if authorization != expected:
            ex.respond(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', [("Content-Type", "application/json")])
            return
        token = self.jwt(query["scope"][0])
        ex.respond(200, json.dumps({"token": token}).encode(), [("Content-Type", "application/json")])


@pytest.fixture(scope="module")
def token_registry(
    tmp_path_factory: pytest.TempPathFactory, test_ca: CertAuthority
) -> Iterator[tuple[RegistryServer, TokenService]]:
    from tests.oci.conftest import _need_registry  # noqa: PLC0415

    _need_registry()
    cert_file, key_file = test_ca.issue(["stockade-test-issuer"])
    key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
    with LoopbackServer(tls=test_ca.server_context(["127.0.0.1"])) as server:
        service = TokenService(server, key, cert.public_bytes(serialization.Encoding.DER), [])
        server.routes["/token"] = service.handle
        auth = {"token": {"realm": server.url("/token"), "service": "stockade-test-registry",
                          "issuer": "stockade-test-issuer", "rootcertbundle": str(test_ca.ca_file)}}
        with RegistryServer.start(tmp_path_factory.mktemp("registry-token"), tls=test_ca, auth=auth) as registry:
            yield registry, service


def test_bearer_token_challenge_answered_over_https(
    token_registry: tuple[RegistryServer, TokenService], cli: Cli, tmp_path: Path
) -> None:
    registry, service = token_registry
    _docker_config(cli, registry.address, USER, PASSWORD)
    ca = ("--registry-ca", str(registry.ca_file))
    pushed = cli("push", str(echo_bundle(tmp_path / "b").directory), f"{registry.address}/team/tok:1", *ca)
    assert pushed.returncode == 0, pushed.stderr
    pulled = cli("pull", pushed.stdout.strip().splitlines()[-1], *ca)
    assert pulled.returncode == 0, pulled.stderr
    scopes = {(scope.rsplit(":", 1)[0], frozenset(scope.rsplit(":", 1)[1].split(","))) for _, scope in service.requests}
    assert scopes == {("repository:team/tok", frozenset({"push", "pull"})), ("repository:team/tok", frozenset({"pull"}))}
    _no_secret_in(pushed, PASSWORD)
    _no_secret_in(pulled, PASSWORD)


def test_token_service_refusing_credentials_gives_registry_refused(
    token_registry: tuple[RegistryServer, TokenService], cli: Cli
) -> None:
    registry, _ = token_registry
    wrong = "wrong-" + secrets.token_hex(8)
    _docker_config(cli, registry.address, USER, wrong)
    proc = cli("pull", f"{registry.address}/team/tok@sha256:{'0' * 64}", "--registry-ca", str(registry.ca_file))
    assert proc.returncode == 1
    assert "error: REGISTRY_REFUSED:" in proc.stderr and "token" in proc.stderr
    _no_secret_in(proc, wrong)


# --- a look-alike registry: the credential belongs to one exact authority ---


class _EveryPath(dict[str, object]):
    """Routes answering every path with one handler (a hostile registry's catch-all)."""

    def __init__(self, handler: object) -> None:
        super().__init__()
        self._handler = handler

    def get(self, key: str, default: object = None) -> object:  # type: ignore[override]
        return self._handler


def test_registry_credential_never_sent_to_look_alike_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The password stored for registry.example.test:PORT went to registry-example.test:PORT
    (both names of one hostile server on loopback here): the lossy secret name was shared."""
    import socket  # noqa: PLC0415

    from host.secrets.store import MasterKey, SecretsStore  # noqa: PLC0415
    from sdk.cli import main  # noqa: PLC0415
    from sdk.oci.creds import REGISTRY_SECRET_PRINCIPAL, REGISTRY_SECRET_SCOPE  # noqa: PLC0415

    real_getaddrinfo = socket.getaddrinfo

    def resolve(host: object, *args: object, **kwargs: object) -> object:
        name = host.decode() if isinstance(host, bytes) else host
        loopback = isinstance(name, str) and name.endswith(".test")
        return real_getaddrinfo("127.0.0.1" if loopback else host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    seen: list[str] = []

    def hostile(ex: Exchange) -> None:
        seen.append(ex.request.header("authorization") or "")
        ex.respond(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                   [("Content-Type", "application/json"), ("WWW-Authenticate", 'Basic realm="r"')])

    key = key_text()
    monkeypatch.setenv("STOCKADE_MASTER_KEY", key)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    monkeypatch.chdir(tmp_path)
    with LoopbackServer() as server:
        server.routes = _EveryPath(hostile)
        genuine, look_alike = f"registry.example.test:{server.port}", f"registry-example.test:{server.port}"
        state = tmp_path / "state"
        state.mkdir()
        store = SecretsStore(state / "secrets.json", MasterKey.load(env={"STOCKADE_MASTER_KEY": key}))
        store.set(REGISTRY_SECRET_SCOPE, REGISTRY_SECRET_PRINCIPAL, secret_name_for(genuine), f"{USER}:{PASSWORD}")

        def pull(registry: str) -> int:
            return main(["pull", f"{registry}/team/private@sha256:{'0' * 64}", "--insecure-registry", registry,
                         "--state-dir", str(state), "--registry-timeout", "5"])

        assert pull(look_alike) == 1
        assert "none are configured" in capsys.readouterr().err
        assert seen and all(value == "" for value in seen)  # asked, and never given the password
        seen.clear()
        assert pull(genuine) == 1  # the genuine authority does get it (the probe works)
    expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert expected in seen
