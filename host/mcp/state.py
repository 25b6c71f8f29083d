"""The ``requestState`` of an approval round trip (MCP 2026-07-28 ``input_required``).

The client echoes the state back verbatim, so it is attacker-controlled. The state minted
here is ``v1.<payload>.<mac>``: base64url of canonical JSON binding the action digest,
the principal (project, subject), the lock generation, an expiry and a random nonce,
followed by HMAC-SHA256 under a key that never leaves this process. :meth:`redeem`
accepts a state once: the nonce is remembered until the state expires, so a replayed
state is refused even though its MAC is valid.

Every failure is one opaque APPROVAL_INVALID (CONTRIBUTING.md principle 12); the reason is only logged.

Example::

    states = RequestStates(ttl_s=300)
    token = states.mint(digest, ("p", "alice"), generation=3)
    states.redeem(token, digest, ("p", "alice"), generation=3)   # ok, once
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from host.canonical import canonical_json
from host.errors import ApprovalInvalid

__all__ = ["RequestStates"]

_log = logging.getLogger("stockade.mcp")
_PREFIX: Final = "v1"
_DOMAIN: Final = "stockade/mcp-request-state@1"
MAX_STATE_CHARS: Final = 2048  # characters of a requestState accepted


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(raw) != text:
        raise ValueError("non-canonical base64url")
    return raw


class RequestStates:
    """Mints and redeems single-use, host-MAC'd approval states.

    Args:
        ttl_s: how long a minted state may be redeemed.
        clock: time source (injected in tests).
    """

    def __init__(self, *, ttl_s: float = 300.0, clock: Callable[[], float] = time.time) -> None:
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self._key = secrets.token_bytes(32)
        self._ttl = ttl_s
        self._clock = clock
        self._used: dict[str, float] = {}
        self._lock = threading.Lock()

    def mint(self, digest: str, principal: tuple[str, str], *, generation: int) -> str:
        """A fresh state for one approval round of ``digest`` by ``principal``."""
        claims = {
            "domain": _DOMAIN,
            "action_digest": digest,
            "project": principal[0],
            "subject": principal[1],
            "generation": generation,
            "expires_at": int((self._clock() + self._ttl) * 1000),
            "nonce": secrets.token_hex(16),
        }
        payload = _b64(canonical_json(claims))
        return f"{_PREFIX}.{payload}.{self._mac(payload)}"

    def redeem(self, token: object, digest: str, principal: tuple[str, str], *, generation: int) -> None:
        """Check ``token`` against this exact action, principal and generation; consume it.

        Raises:
            ApprovalInvalid: malformed, forged, for another action, principal or lock
                generation, expired, or already redeemed (one opaque error).
        """
        try:
            claims = self._verified(token)
            now_ms = int(self._clock() * 1000)
            ok = hmac.compare_digest(str(claims["action_digest"]), digest)
            ok &= (claims["project"], claims["subject"]) == principal
            ok &= claims["generation"] == generation
            ok &= isinstance(claims["expires_at"], int) and claims["expires_at"] > now_ms
            nonce = str(claims["nonce"])
        except (KeyError, TypeError, ValueError) as exc:
            _log.warning("requestState refused: %s", type(exc).__name__)
            raise ApprovalInvalid("the approval state is not valid for this call") from None
        with self._lock:
            self._forget_expired(now_ms)
            if not ok or nonce in self._used:
                _log.warning("requestState refused: %s", "replayed" if ok else "binding")
                raise ApprovalInvalid("the approval state is not valid for this call")
            self._used[nonce] = claims["expires_at"]

    def _verified(self, token: object) -> dict[str, Any]:
        if not isinstance(token, str) or len(token) > MAX_STATE_CHARS:
            raise ValueError("not a state")
        prefix, _, rest = token.partition(".")
        payload, _, mac = rest.partition(".")
        if prefix != _PREFIX or not hmac.compare_digest(self._mac(payload), mac):
            raise ValueError("bad MAC")
        claims = json.loads(_unb64(payload))
        if not isinstance(claims, dict) or claims.get("domain") != _DOMAIN:
            raise ValueError("bad claims")
        return claims

    def _forget_expired(self, now_ms: int) -> None:
        for nonce in [n for n, until in self._used.items() if until <= now_ms]:
            del self._used[nonce]

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest())
