"""OAuth 2.1 resource-server mode: accept access tokens (JWTs) an authorization server issued.

``stockade serve --transport http --oauth-issuer URL --oauth-audience AUD --oauth-jwks FILE``
verifies each bearer token as a JWT signed by one of the keys of a local JWKS file (the
host never fetches keys at run time: the file is pinned like the lock), with:

- the algorithm from an allowlist (RS256, ES256, EdDSA), matched to the key by ``kid``;
- ``iss`` equal to the configured issuer and ``aud`` naming the configured audience;
- ``exp`` required and in the future (``nbf``/``iat`` honoured), each a JSON number
  (a numeric *string* such as ``"9999999999"`` is refused: RFC 7519 NumericDate), with
  :data:`LEEWAY_S` of clock skew applied everywhere the expiry is checked (the token, the
  SDK's bearer middleware and the principal's ``expires_at`` all use ``exp + leeway``);
- ``sub`` required: the principal's subject; the project is the token's
  ``stockade_project`` claim, or the configured default project when it has none; both
  are refused when they hold a control, zero-width or bidi character (the envelope's
  rule, :mod:`host.text`).

Anything else is ``None`` (HTTP 401). The SDK's bearer middleware calls
:meth:`JwtVerifier.verify_token`; its protected-resource metadata names the issuer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Final

import jwt
from mcp.server.auth.provider import AccessToken

from host._files import read_regular
from host.errors import RequestInvalid
from host.text import has_unsafe

__all__ = ["ALGORITHMS", "JwtVerifier"]

ALGORITHMS: Final = ("RS256", "ES256", "EdDSA")
PROJECT_CLAIM: Final = "stockade_project"
LEEWAY_S: Final = 30  # s of clock skew accepted on exp/nbf/iat
MAX_JWKS_BYTES: Final = 256 * 1024  # bytes of the JWKS file
MAX_TOKEN_CHARS: Final = 8192  # characters of one access token


class JwtVerifier:
    """The SDK's ``TokenVerifier`` for JWT access tokens (see the module docstring).

    Args:
        issuer: the exact ``iss`` accepted.
        audience: the ``aud`` value the token must name (this server's resource id).
        jwks_file: a JWKS document (``{"keys": [...]}``) with the issuer's public keys.
        default_project: the project of tokens without a ``stockade_project`` claim
            (``None``: such tokens are refused).

    Raises:
        RequestInvalid: the JWKS file is unreadable, malformed or holds no usable key.
    """

    def __init__(self, *, issuer: str, audience: str, jwks_file: Path, default_project: str | None) -> None:
        raw = read_regular(Path(jwks_file), MAX_JWKS_BYTES, what="JWKS file", error=RequestInvalid)
        try:
            keys = jwt.PyJWKSet.from_dict(json.loads(raw))
        except (ValueError, jwt.PyJWTError) as exc:
            raise RequestInvalid(f"the JWKS file is not usable: {exc}") from None
        self._keys = {k.key_id: k for k in keys.keys if k.key_id}
        if not self._keys:
            raise RequestInvalid("the JWKS file has no key with a kid")
        self._issuer = issuer
        self._audience = audience
        self._default_project = default_project

    async def verify_token(self, token: str) -> AccessToken | None:
        """The principal of a valid token as an AccessToken; ``None`` (HTTP 401) otherwise."""
        claims = self._claims(token)
        if claims is None:
            return None
        project = claims.get(PROJECT_CLAIM, self._default_project)
        subject = claims.get("sub")
        if not _identifier(project) or not _identifier(subject):
            return None
        client = claims.get("azp") or claims.get("client_id") or subject
        return AccessToken(
            token="jwt:" + str(claims.get("jti", "")),  # never keep the token itself
            client_id=str(client),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]) + LEEWAY_S,  # the leeway, applied by every later check
            resource=self._audience,
            subject=subject,
            claims={"project": project, "iss": self._issuer},
        )

    def _claims(self, token: str) -> dict[str, Any] | None:
        if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
            return None
        try:
            header = jwt.get_unverified_header(token)
            kid = header.get("kid")
            key = self._keys.get(kid) if isinstance(kid, str) else None
            alg = header.get("alg")
            if key is None or alg not in ALGORITHMS or key.algorithm_name != alg:  # no alg confusion
                return None
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[header["alg"]],
                audience=self._audience,
                issuer=self._issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError:
            return None
        if not all(_numeric_date(claims[name]) for name in ("exp", "nbf", "iat") if name in claims):
            return None  # PyJWT reads "exp": "9999999999" with int(): refuse anything but a number
        return claims


def _numeric_date(value: object) -> bool:
    """A NumericDate (RFC 7519 §2): a finite JSON number, never a string or a boolean."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value)


def _identifier(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 256 and not has_unsafe(value)
