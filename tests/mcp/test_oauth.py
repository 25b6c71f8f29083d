"""OAuth 2.1 resource-server mode: JWT access tokens checked for signature, issuer, audience."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from jwt.algorithms import OKPAlgorithm

from tests.mcp.conftest import World
from tests.mcp.test_http import Served, _tools, grant_carol_reader, http_server, post

ISSUER = "https://idp.example"
AUDIENCE = "stockade-mcp"


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def jwks(path: Path, key: Ed25519PrivateKey) -> Path:
    public = json.loads(OKPAlgorithm.to_jwk(key.public_key()))
    path.write_text(json.dumps({"keys": [public | {"kid": "k1", "use": "sig"}]}))
    return path


def token(key: Ed25519PrivateKey, **claims: Any) -> str:
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 600} | claims
    return jwt.encode(body, key, algorithm="EdDSA", headers={"kid": "k1"})


@pytest.fixture
def oauth(world: World, key: Ed25519PrivateKey) -> Iterator[Served]:
    grant_carol_reader(world)
    keys = jwks(world.root / "jwks.json", key)
    with http_server(
        world,
        "--oauth-issuer",
        ISSUER,
        "--oauth-audience",
        AUDIENCE,
        "--oauth-jwks",
        str(keys),
        "--project",
        "p",
    ) as server:
        yield server


def test_jwt_for_this_audience_gets_its_principals_tools(oauth: Served, key: Ed25519PrivateKey) -> None:
    async def body() -> None:
        names, said = await _tools(oauth, token(key), call=True)
        assert names == ["echo.say", "echo.write", "spin.forever"]
        assert said is not None and said.structured_content == {"message": "over http"}
        names, _ = await _tools(oauth, token(key, sub="carol"))
        assert names == ["echo.say"]

    anyio.run(body)


@pytest.mark.parametrize(
    "claims",
    [
        {"iss": "https://evil.example"},
        {"aud": "another-api"},
        {"exp": int(time.time()) - 3600},
        {"sub": None},
        {"exp": str(int(time.time()) + 600)},
        {"exp": True},
        {"nbf": str(int(time.time()) - 10)},
        {"exp": int(time.time()) - 60},
        {"sub": "ali\x00ce"},
        {"sub": "ali\u202ece"},
        {"stockade_project": "p\x1b[2J"},
    ],
    ids=[
        "foreign-issuer", "other-audience", "expired", "no-subject", "exp-numeric-string",
        "exp-boolean", "nbf-numeric-string", "expired-past-the-leeway", "sub-with-nul", "sub-with-rlo",
        "project-with-escape",
    ],
)
def test_jwt_with_wrong_claims_is_401(oauth: Served, key: Ed25519PrivateKey, claims: dict[str, Any]) -> None:
    fields = {k: v for k, v in claims.items() if v is not None}
    bad = token(key, **fields)
    if claims.get("sub", "") is None:
        bad = jwt.encode(
            {"iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 600}, key, algorithm="EdDSA",
            headers={"kid": "k1"},
        )  # fmt: skip
    assert post(oauth, Authorization=f"Bearer {bad}").status_code == 401


def test_jwt_signed_by_another_key_is_401(oauth: Served) -> None:
    forged = token(Ed25519PrivateKey.generate())
    assert post(oauth, Authorization=f"Bearer {forged}").status_code == 401


def test_hs256_token_keyed_with_the_public_key_is_401(oauth: Served, key: Ed25519PrivateKey) -> None:
    # Algorithm confusion: an HMAC "signature" keyed with the public JWK (made by hand;
    # PyJWT itself refuses to produce one).
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    public = OKPAlgorithm.to_jwk(key.public_key()).encode()
    header = b64(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 600}
    payload = b64(json.dumps(claims).encode())
    signature = b64(hmac.new(public, f"{header}.{payload}".encode(), hashlib.sha256).digest())
    confused = f"{header}.{payload}.{signature}"
    assert post(oauth, Authorization=f"Bearer {confused}").status_code == 401


def test_jwt_expired_within_the_documented_leeway_is_accepted(oauth: Served, key: Ed25519PrivateKey) -> None:
    # README: 30 s of clock skew on exp. The SDK's bearer middleware compared exp to the
    # clock without it, so a token PyJWT accepted within the leeway was still 401.
    skewed = token(key, exp=int(time.time()) - 10)
    assert post(oauth, Authorization=f"Bearer {skewed}").status_code == 200
