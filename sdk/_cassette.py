"""The harness's cassette: record through the real egress, replay offline (``docs/authors.md``).

Record modes (as vcrpy and pytest-recording name them; the default is ``none``, so a
test suite never reaches the network unless asked to):

- ``none``: replay only; the cassette must exist (``CASSETTE_INVALID`` ``missing``);
- ``once``: replay if the cassette exists, else record every request and write it;
- ``new_episodes``: replay what matches; record what does not; write the union;
- ``all``: record everything again and overwrite the cassette.

Replay swaps only the transport and the resolver (:mod:`host.egress.cassette`); recording
uses the real resolver and the host's pinned TLS transport (or, for a local API, the
``--allow-loopback`` remap of :mod:`sdk._loopback`).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, Literal, get_args

import httpx2

from host import CallResult, ErrorInfo
from host.egress.cassette import (
    CassetteRecorder,
    CassetteRedactor,
    CassetteReplayer,
    RedactionHook,
    build_cassette,
    replay_resolver,
    write_cassette,
)
from host.egress.policy import Resolver, system_resolver
from host.egress.transport import Pins, TransportFactory, pinned_transport_factory
from host.errors import CassetteInvalid, CassetteUnmatched
from host.formats.cassette import Cassette, Interaction
from sdk._loopback import LoopbackRemap
from sdk.bundle import Bundle

__all__ = [
    "RECORD_MODES",
    "RECORD_MODE_ENV",
    "CassetteWarning",
    "HarnessCassette",
    "RecordMode",
    "UnusedInteractions",
]

RecordMode = Literal["none", "once", "new_episodes", "all"]
RECORD_MODES: Final[tuple[str, ...]] = get_args(RecordMode)
RECORD_MODE_ENV: Final = "STOCKADE_RECORD_MODE"
"""The environment variable ``stockade test --record-mode`` sets for the pytest run."""


class CassetteWarning(UserWarning):
    """A cassette recorded against another manifest digest is being replayed."""


class UnusedInteractions(AssertionError):
    """Strict replay: recorded interactions no request consumed (a test failure)."""


class HarnessCassette:
    """One harness's cassette: the resolver and transport to use, and writing at the end.

    Args:
        path: the cassette file.
        mode: one of :data:`RECORD_MODES`.
        bundle: the package under test (name, version, manifest digest).
        secrets: the staged values by name (redacted by value).
        basic_usernames: basic-auth usernames of the package's credentials.
        hook: an author's extra redaction.
        allow_repeats: a request may reuse an interaction already consumed.
        match_headers: extra header names that must match.
        loopback: remapped local hosts for recording (``None``: the real network only).
        ca_file: extra CA for recording over TLS.

    Raises:
        ValueError: ``mode`` is not a record mode.
        CassetteInvalid: mode ``none`` without the file; a malformed or oversized file; a
            cassette of another package.
    """

    def __init__(
        self,
        path: Path,
        mode: str,
        *,
        bundle: Bundle,
        secrets: Mapping[str, str],
        basic_usernames: Sequence[str],
        hook: RedactionHook | None = None,
        allow_repeats: bool = False,
        match_headers: Sequence[str] = (),
        loopback: LoopbackRemap | None = None,
        ca_file: Path | None = None,
    ) -> None:
        if mode not in RECORD_MODES:
            raise ValueError(f"record_mode must be one of {', '.join(RECORD_MODES)}, not {mode!r}")
        self.path = path
        self.mode = mode
        self._bundle = bundle
        self.redactor = CassetteRedactor(secrets, basic_usernames=basic_usernames, hook=hook)
        existing = self._load(path, bundle) if path.is_file() and mode != "all" else None
        if existing is None and mode == "none":
            raise CassetteInvalid(
                f"no cassette at {path} and the record mode is 'none'", reason="missing",
                hint="Record it once: `stockade test --record-mode once` (with the secrets it needs).",
            )  # fmt: skip
        self._existing = existing
        self.recording = existing is None or mode == "new_episodes"
        if self.recording:
            _refuse_oauth_recording(bundle)
        self.recorder = CassetteRecorder(self.redactor) if self.recording else None
        live_resolver: Resolver = system_resolver
        live: TransportFactory = pinned_transport_factory(ca_file=ca_file)
        if loopback is not None:
            live_resolver = loopback.resolver(system_resolver)
            live = loopback.transport_factory(ca_file=ca_file)
        self._live_resolver, self._live = live_resolver, live
        self._loopback = loopback is not None
        self.replayer = (
            None
            if existing is None
            else CassetteReplayer(
                existing, self.redactor, allow_repeats=allow_repeats, match_headers=match_headers,
                fallback=self._recording_transport if mode == "new_episodes" else None,
            )
        )  # fmt: skip

    @staticmethod
    def _load(path: Path, bundle: Bundle) -> Cassette:
        cassette = Cassette.from_bytes(path.read_bytes())
        name = bundle.manifest.package.name
        if cassette.package != name:
            raise CassetteInvalid(
                f"{path} was recorded for package {cassette.package!r}, not {name!r}",
                reason="wrong_package",
            )
        if cassette.manifest_sha256 != bundle.manifest_sha256:
            warnings.warn(
                f"{path} was recorded against another manifest (sha256 {cassette.manifest_sha256[:12]}…); "
                "replaying under the current one (its allowlist decides)",
                CassetteWarning,
                stacklevel=3,
            )
        return cassette

    def _recording_transport(self, pins: Pins) -> httpx2.BaseTransport:
        if self.recorder is None:
            raise RuntimeError("not recording")
        return self.recorder.wrap(self._live(pins))

    # -- what the host is opened with ------------------------------------------------------

    @property
    def resolver(self) -> Resolver:
        """The replay resolver when only replaying; the real one when recording."""
        return replay_resolver if not self.recording else self._live_resolver

    @property
    def transport_factory(self) -> TransportFactory:
        """Replay (with a recording fallback in ``new_episodes``), or record."""
        if self.replayer is not None:
            return self.replayer.transport
        return self._recording_transport

    @property
    def allow_loopback(self) -> bool:
        """Whether the host must run with ``unsafe_allow_loopback`` (recording a remap)."""
        return self.recording and self._loopback

    # -- after each call and at the end ----------------------------------------------------

    def after_call(self, result: CallResult, seen: int) -> CallResult:
        """``result``, or a ``CASSETTE_UNMATCHED`` failure if a request since ``seen``
        matched nothing (even when the plugin handled the failed request itself)."""
        if self.replayer is None or len(self.replayer.unmatched) <= seen:
            return result
        method, url = self.replayer.unmatched[seen]
        error = CassetteUnmatched(
            f"no recorded interaction for {method} {url} in {self.path}", method=method, url=url
        )
        info = ErrorInfo(code=error.code, message=error.message, hint=error.hint, details=dict(error.details))
        return dataclasses.replace(result, ok=False, output=None, error=info)

    @property
    def unmatched_count(self) -> int:
        """How many requests went unmatched so far."""
        return 0 if self.replayer is None else len(self.replayer.unmatched)

    def finish(self, *, strict: bool) -> None:
        """Write the cassette if recording; in strict replay, fail on unused interactions.

        Raises:
            CassetteInvalid: a response could not be recorded, or the final scan found a
                secret (nothing written).
            UnusedInteractions: ``strict`` and an interaction was never replayed.
        """
        if self.recorder is not None:
            if self.recorder.errors:
                raise CassetteInvalid(
                    "the cassette was not written: " + "; ".join(self.recorder.errors),
                    reason="unsupported_encoding",
                )
            kept: list[Interaction] = list(self._existing.interactions) if self._existing else []
            package = self._bundle.manifest.package
            data = build_cassette(
                [*kept, *self.recorder.interactions], self.redactor,
                package=package.name, version=package.version,
                manifest_sha256=self._bundle.manifest_sha256,
            )  # fmt: skip
            write_cassette(self.path, data)
        if strict and self.replayer is not None and self.mode != "new_episodes":
            unused = self.replayer.unused()
            if unused:
                names = ", ".join(f"{i.request.method} {i.request.url}" for i in unused[:8])
                raise UnusedInteractions(f"{len(unused)} recorded interaction(s) never replayed: {names}")


def _refuse_oauth_recording(bundle: Bundle) -> None:
    """Recording with an OAuth mapping is refused: the access and refresh tokens the host
    obtains during the call are not staged values of the cassette's redactor, so an API
    that echoed one back would reach the file redacted only by name. Replay is fine."""
    oauth = sorted(c.secret for c in bundle.manifest.http.credentials if c.oauth is not None)
    if oauth:
        raise CassetteInvalid(
            f"cannot record a cassette for a package with OAuth credential mappings ({', '.join(oauth)})",
            reason="oauth_not_recordable",
            hint="Record against a static test token instead (a manifest variant without `oauth`), "
            "or script the responses with Harness routes.",
        )
