"""Record and replay a call's HTTP at the transport seam, after every egress rule.

The seam is the session's :data:`~host.egress.transport.TransportFactory`: the
``httpx2.Request`` a transport receives has passed the budget, hygiene, normalization,
the allowlist, DNS vetting and pinning, and carries the injected credentials; the
response it returns is then bounded, decoded and redacted by the session. So:

- **Recording** (:class:`CassetteRecorder`) wraps the real pinned transport: it sees
  what went on the wire and the response as the host received it (read as the host
  reads it, streamed, at most :data:`~host.formats.cassette.MAX_CASSETTE_BYTES`).
- **Replay** (:class:`CassetteReplayer`) replaces only the transport and, with
  :func:`replay_resolver`, the resolver: every other egress step runs exactly as live,
  so a request the current manifest no longer allows is ``EGRESS_DENIED`` in replay
  too, and a recorded ``gzip`` body is re-encoded and decoded by the host under its
  limits. An unmatched request raises :class:`CassetteMiss` inside the transport (the
  guest sees a failed request, never a response it could take for the server's).

Redaction (:class:`CassetteRedactor`), before anything reaches disk, fails closed:

1. by value: every staged secret, URL-encoded, base64 (both alphabets, padded or not),
   hex and inside basic auth, becomes ``<secret:NAME>``; any other form the host's
   :class:`~host.secrets.redact.Redactor` knows becomes ``[REDACTED]``;
2. by name: credential-like headers (``Authorization``, ``Cookie``, ``Set-Cookie``,
   ``X-Api-Key``, ...), query parameters and JSON or form body keys (``access_token``,
   ``refresh_token``, ``id_token``, ``api_key``, ``client_secret``, ``password``, ...)
   in requests and responses become ``<redacted>`` (a header or parameter that holds
   nothing but placeholders keeps them, e.g. ``Bearer <secret:token>``);
3. an optional author hook, whose result is redacted again by 1 and 2;
4. a final scan of each serialized interaction and of the whole file for every form of
   every staged value: a hit raises ``CassetteInvalid`` (``secret_in_cassette``, naming
   the interaction) and nothing is written.

Example::

    redactor = CassetteRedactor({"token": value})
    recorder = CassetteRecorder(redactor)
    factory = lambda pins: recorder.wrap(pinned(pins))      # record
    replayer = CassetteReplayer(cassette, redactor)
    factory = replayer.transport                            # replay
"""

from __future__ import annotations

from host.egress.cassette.record import CassetteRecorder, build_cassette, write_cassette
from host.egress.cassette.redact import REDACTED_BY_NAME, CassetteRedactor, RedactionHook
from host.egress.cassette.replay import REPLAY_ADDRESS, CassetteMiss, CassetteReplayer, replay_resolver

__all__ = [
    "REDACTED_BY_NAME",
    "REPLAY_ADDRESS",
    "CassetteMiss",
    "CassetteRecorder",
    "CassetteRedactor",
    "CassetteReplayer",
    "RedactionHook",
    "build_cassette",
    "replay_resolver",
    "write_cassette",
]
