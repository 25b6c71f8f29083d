"""Test a plugin with pytest: a real in-process host on scripted HTTP (docs/design.md §1).

:class:`Harness` loads a bundle (building the project first when given a project
directory) into a real :class:`host.Host`: a lock of generation 1 in a temporary
workspace, a policy file allowing every permission the package's tools need, an
encrypted secrets store with a random master key and a hash-chained audit log. Only the
network is replaced: the resolver answers every name with one fixed public address
(:data:`SCRIPTED_ADDRESS`) and the transport is an ``httpx2.MockTransport`` that answers
from your routes, so nothing ever connects anywhere. The egress policy (allowlist, DNS
vetting, header hygiene), the credential router, redirects, size and time limits,
response redaction, the sandbox limits, approvals and the audit log all run unchanged.

Routes map ``(METHOD, URL)`` to a :class:`Response`, or to a callable receiving the
:class:`RecordedRequest` and returning one. A request is matched first by its full URL
(query included), then by its URL without the query; the URL is compared as
``httpx2.URL`` spells it (so ``https://h/a b`` and ``https://h/a%20b`` are one route).
An unmatched request gets ``404 {"error": "no scripted route"}``; with ``strict=True``
:meth:`Harness.call` also raises :class:`UnscriptedRequest` after the call.

Secrets: each name you list is stored for the harness principal (subject ``author`` in
project ``test``) with a random unique value (or the value you give). Every request the
plugin makes is recorded with each occurrence of a staged value replaced by
``<secret:NAME>``: in headers (``Bearer <secret:tracker_token>``), in the URL (query
credentials), in basic auth (``Basic`` + base64 of ``user:<secret:NAME>``, see
:attr:`RecordedRequest.basic_auth`) and in bodies. A callable route sees the same
placeholder form, so a test never handles a secret value. Any other spelling of a value
is replaced with ``[REDACTED]`` as a last resort.

Example::

    from sdk.harness import Harness, Response

    ISSUES = ("GET", "https://api.tracker.example/v1/repos/x/issues")
    with Harness("plugins/tracker", routes={ISSUES: Response(200, json=[])},
                 secrets=["tracker_token"]) as h:
        result = h.call("tracker.list-issues", {"repo": "x"})
        assert result.ok and result.output == []
        assert h.requests[0].header("authorization") == "Bearer <secret:tracker_token>"
        assert h.call("tracker.create-issue", {...}).error.code == "APPROVAL_REQUIRED"
        assert h.call("tracker.create-issue", {...}, approve=True).ok

Compiling a component takes 8-16 s, so compiled artifacts live in the per-user cache
``cache_dir`` (default ``$STOCKADE_CACHE_DIR``, else ``$XDG_CACHE_HOME/stockade``, i.e.
``~/.cache/stockade``), shared with ``stockade dev``, ``inspect``, ``lock verify`` and
hosts that opt in: ``builds/`` holds the build cache and ``artifacts/`` the artifacts with
their HMAC key (each artifact is verified before it is loaded, docs/design.md §8; the directory
is pruned least-recently-used first, ``stockade cache prune``).
"""

from __future__ import annotations

import base64
import json as _json
import os
import secrets as _random
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, final
from urllib.parse import quote, quote_plus, urlsplit

import httpx2

from host import CallRequest, CallResult, FilePolicyEngine, Host, HostConfig, InvocationPlan, Principal
from host.canonical import canonical_json
from host.config import DEFAULT_CEILINGS, Ceilings, WorkspaceGrant
from host.egress.cassette import RedactionHook
from host.egress.transport import Pins
from host.errors import StockadeError
from host.runtime import ProgressEvent
from host.secrets.redact import Redactor
from host.secrets.store import MasterKey, SecretsStore
from host.trust.lock import LOCK_FORMAT
from sdk._cachedir import artifacts_dir, builds_dir, cache_root
from sdk._cassette import RECORD_MODE_ENV, HarnessCassette
from sdk._loopback import LoopbackRemap
from sdk.author.build import ProgressCallback, build_project
from sdk.author.project import PROJECT_FILE
from sdk.bundle import Bundle, read_bundle

__all__ = [
    "PROJECT",
    "SCRIPTED_ADDRESS",
    "SESSION",
    "SUBJECT",
    "Harness",
    "RecordedRequest",
    "Response",
    "Route",
    "UnscriptedRequest",
    "default_harness_cache",
    "placeholder",
    "route",
]

SCRIPTED_ADDRESS: Final = "93.184.215.14"
"""The public address every name resolves to (never connected to: the transport is scripted)."""
PROJECT: Final = "test"
SUBJECT: Final = "author"
SESSION: Final = "harness"
ROLE: Final = "author"
_DEFAULT_PORTS: Final = {"https": 443, "http": 80}
_NO_JSON: Final = object()
_CHUNK_BYTES: Final = 64 * 1024  # bytes per chunk of a scripted response body


def placeholder(name: str) -> str:
    """What a recorded request shows where secret ``name`` was injected: ``<secret:name>``."""
    return f"<secret:{name}>"


@final
class Response:
    """A scripted response.

    Args:
        status: HTTP status code.
        json: a JSON value for the body (sets ``Content-Type: application/json``).
        text: a text body (UTF-8; sets ``Content-Type: text/plain; charset=utf-8``).
        body: raw body bytes.
        headers: response headers, a mapping or ``(name, value)`` pairs.

    Raises:
        TypeError: more than one of ``json``, ``text`` and ``body`` was given.
    """

    __slots__ = ("body", "headers", "status")

    def __init__(
        self,
        status: int = 200,
        *,
        json: Any = _NO_JSON,
        text: str | None = None,
        body: bytes | None = None,
        headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    ) -> None:
        given = [json is not _NO_JSON, text is not None, body is not None]
        if sum(given) > 1:
            raise TypeError("give one of json=, text= and body=")
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
        names = {n.lower() for n, _ in pairs}
        if json is not _NO_JSON:
            body = _json.dumps(json).encode("utf-8")
            if "content-type" not in names:
                pairs.append(("Content-Type", "application/json"))
        elif text is not None:
            body = text.encode("utf-8")
            if "content-type" not in names:
                pairs.append(("Content-Type", "text/plain; charset=utf-8"))
        self.status = int(status)
        self.headers: tuple[tuple[str, str], ...] = tuple((str(n), str(v)) for n, v in pairs)
        self.body = bytes(body or b"")

    def __repr__(self) -> str:
        return f"Response({self.status}, {len(self.body)} bytes)"


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the plugin made, as the (scripted) server received it, secrets replaced.

    Attributes:
        method: e.g. ``"GET"``.
        url: the full URL sent, query included (credentials as ``<secret:NAME>``).
        headers: every header sent, host-added ones included, in order.
        body: the request body (``b""`` when none).
    """

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or ``None``."""
        wanted = name.lower()
        return next((v for n, v in self.headers if n.lower() == wanted), None)

    @property
    def path(self) -> str:
        """The URL's path as sent, percent-encoding kept (without the query)."""
        return urlsplit(self.url).path

    @property
    def query(self) -> dict[str, str]:
        """The query parameters (last value wins)."""
        return dict(httpx2.URL(self.url).params.multi_items())

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (raises ``ValueError`` if it is not JSON)."""
        return _json.loads(self.body)

    @property
    def basic_auth(self) -> tuple[str, str] | None:
        """``(username, password)`` of a ``Basic`` Authorization header, decoded, or None."""
        value = self.header("authorization") or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            user, sep, password = base64.b64decode(token, validate=True).decode("utf-8").partition(":")
        except ValueError:
            return None
        return (user, password) if sep else None


Route = Response | Callable[[RecordedRequest], Response]
"""A route's value: a fixed response, or a function of the recorded request."""


def route(method: str, url: str) -> tuple[str, str]:
    """The key of a route: the method upper-cased and the URL as ``httpx2.URL`` spells it
    (scheme and host lower-cased, a default port dropped, unsafe characters escaped)."""
    parsed = httpx2.URL(url)
    if parsed.port is not None and parsed.port == _DEFAULT_PORTS.get(parsed.scheme):
        parsed = parsed.copy_with(port=None)
    return (method.upper(), str(parsed))


class UnscriptedRequest(AssertionError):
    """In strict mode, the plugin made a request that no route answers (a test failure)."""


def default_harness_cache() -> Path:
    """The per-user cache root (``~/.cache/stockade`` by default; see :mod:`sdk._cachedir`)."""
    return cache_root()


class _Body(httpx2.SyncByteStream):
    """A response body delivered in chunks, as a socket would."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self._data), _CHUNK_BYTES):
            yield self._data[start : start + _CHUNK_BYTES]


class _Secrets:
    """Staged values by name and how to turn them into placeholders (never exposed)."""

    def __init__(self, values: Mapping[str, str], basic_usernames: Iterable[str]) -> None:
        usernames = sorted(set(basic_usernames))
        forms: dict[str, str] = {}
        for name, value in values.items():
            hidden = placeholder(name)
            for user in [*usernames, ""]:
                raw = f"{user}:{value}".encode()
                shown = base64.b64encode(f"{user}:{hidden}".encode()).decode("ascii")
                forms[base64.b64encode(raw).decode("ascii")] = shown
            for form in (value, quote(value, safe=""), quote(value, safe="/"), quote_plus(value, safe="")):
                forms[form] = hidden
        # Longest first, so a value that contains another is replaced whole.
        self._forms = sorted(forms.items(), key=lambda item: -len(item[0]))
        self._last_resort = Redactor(values.values(), basic_usernames=usernames)

    def text(self, text: str) -> str:
        for form, shown in self._forms:
            text = text.replace(form, shown)
        return self._last_resort.text(text)

    def bytes(self, data: bytes) -> bytes:
        for form, shown in self._forms:
            data = data.replace(form.encode("utf-8"), shown.encode("utf-8"))
        return self._last_resort.bytes(data)


class Harness:
    """A plugin loaded into a real in-process host whose network is scripted.

    Args:
        target: a project directory (holding ``stockade.toml``; built first) or a bundle
            directory (holding ``manifest.json`` and ``module.wasm``).
        routes: ``{(METHOD, URL): Response | callable}``; see the module docstring.
            Kept in :attr:`routes`, which tests may change between calls.
        secrets: secret names to store (random unique values), or a mapping of name to
            value (8 characters at least, as the secrets store requires).
        strict: raise :class:`UnscriptedRequest` from :meth:`call` when the plugin made
            a request no route answers.
        address: what every host name resolves to (must be a public address, or the
            egress policy refuses it, as it would in production).
        cache_dir: shared build and compiled-artifact cache (default
            :func:`default_harness_cache`).
        ceilings: host ceilings (default: the host's defaults).
        progress: build progress callback (``stage, fraction``).
        compile_progress: receives the host's compile events (``cached``,
            ``compiling``, ``compiled``).
        debug: put a failing guest's traceback (Python) or stack (JavaScript) into
            ``result.error.details["guest_traceback"]`` (``HostConfig.debug_guest_errors``).
            The guest's log is in ``result.log`` either way.
        workspace: a directory granted to the harness principal as its workspace root,
            as an operator's ``[[workspace]]`` would: the package's ``workspace.read``
            directories beneath it are the guest's read-only ``/workspace/<path>``.
            None (the default): no workspace, so the guest sees none.
        cassette: a ``stockade.cassette/1`` file to replay (or record): the network is
            replaced by it instead of ``routes`` (see :mod:`sdk._cassette`,
            ``docs/authors.md``). :attr:`cassette` holds its replayer and recorder.
        record_mode: ``none`` (default; replay only), ``once``, ``new_episodes`` or
            ``all``; default from ``$STOCKADE_RECORD_MODE`` (``stockade test --record-mode``).
        redact: an extra redaction hook for recorded interactions (redacted again after).
        allow_repeats: a request may replay an interaction already consumed.
        match_headers: header names whose (redacted) values must match too.
        loopback: ``HOST=127.0.0.1:PORT`` remaps for recording against a local API (the
            host must be in the manifest's allowlist; loopback targets only).
        ca_file: an extra CA to trust when recording over TLS.

    Raises:
        ValueError: ``target`` is neither a project nor a bundle; a secret name or value
            is invalid.
        ManifestInvalid, BuildError: the project does not build.
        StockadeError: the host refused the bundle (e.g. COMPONENT_REFUSED).
    """

    def __init__(
        self,
        target: str | Path,
        *,
        routes: Mapping[tuple[str, str], Route] | None = None,
        secrets: Iterable[str] | Mapping[str, str] = (),
        strict: bool = False,
        address: str = SCRIPTED_ADDRESS,
        cache_dir: Path | None = None,
        ceilings: Ceilings = DEFAULT_CEILINGS,
        progress: ProgressCallback | None = None,
        compile_progress: Callable[[ProgressEvent], None] | None = None,
        debug: bool = True,
        workspace: str | Path | None = None,
        cassette: str | Path | None = None,
        record_mode: str | None = None,
        redact: RedactionHook | None = None,
        allow_repeats: bool = False,
        match_headers: Sequence[str] = (),
        loopback: Sequence[str] = (),
        ca_file: str | Path | None = None,
    ) -> None:
        if cassette is not None and routes:
            raise ValueError("give routes= or cassette=, not both")
        if (loopback or ca_file is not None) and cassette is None:
            raise ValueError("loopback= and ca_file= are for recording a cassette; give cassette= too")
        self._debug = debug
        self._workspace = None if workspace is None else Path(workspace)
        self.routes: dict[tuple[str, str], Route] = {route(m, u): r for (m, u), r in (routes or {}).items()}
        self.requests: list[RecordedRequest] = []
        self.unmatched: list[RecordedRequest] = []
        self.strict = strict
        self._address = address
        self._lock = threading.Lock()
        self._errors: list[BaseException] = []
        self._cache = Path(cache_dir) if cache_dir is not None else default_harness_cache()
        self._tmp = Path(tempfile.mkdtemp(prefix="stockade-harness-"))
        self._closed = False
        self.cassette: HarnessCassette | None = None
        try:
            self.bundle = self._stage_bundle(Path(target), progress)
            values = _secret_values(secrets)
            self._secrets = _Secrets(values, _basic_usernames(self.bundle))
            if cassette is not None:
                mode = record_mode or os.environ.get(RECORD_MODE_ENV) or "none"
                self.cassette = HarnessCassette(
                    Path(cassette), mode, bundle=self.bundle, secrets=values,
                    basic_usernames=_basic_usernames(self.bundle), hook=redact,
                    allow_repeats=allow_repeats, match_headers=match_headers,
                    loopback=LoopbackRemap.parse(loopback) if loopback else None,
                    ca_file=None if ca_file is None else Path(ca_file),
                )  # fmt: skip
            self.host = self._open(values, ceilings, compile_progress)
        except BaseException:
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    # -- opening -------------------------------------------------------------------------

    def _stage_bundle(self, target: Path, progress: ProgressCallback | None) -> Bundle:
        bundles = self._tmp / "bundles"
        if (target / PROJECT_FILE).is_file():
            built = build_project(
                target, out_dir=bundles, cache_dir=builds_dir(self._cache), progress=progress
            )
            return read_bundle(built.bundle_dir)
        if (target / "manifest.json").is_file():
            dest = bundles / "bundle"
            dest.mkdir(parents=True)
            for name in ("manifest.json", "module.wasm"):
                shutil.copyfile(target / name, dest / name)
            return read_bundle(dest)
        raise ValueError(f"{target} holds neither {PROJECT_FILE} (a project) nor manifest.json (a bundle)")

    def _open(
        self,
        values: Mapping[str, str],
        ceilings: Ceilings,
        compile_progress: Callable[[ProgressEvent], None] | None,
    ) -> Host:
        lock, policy, store = write_workspace(
            self._tmp, self.bundle, values, project=PROJECT, subject=SUBJECT
        )
        config = HostConfig(
            state_dir=self._tmp / "state",
            ceilings=ceilings,
            artifact_cache_dir=artifacts_dir(self._cache),
            debug_guest_errors=self._debug,
            unsafe_allow_loopback=self.cassette is not None and self.cassette.allow_loopback,
            workspaces=()
            if self._workspace is None
            else (WorkspaceGrant(root=self._workspace, project=PROJECT, subjects=(SUBJECT,)),),
        )
        return Host.open(
            lock,
            config=config,
            secrets=store,
            policy=policy,
            audit=self._tmp / "audit.log",
            resolver=self._resolve if self.cassette is None else self.cassette.resolver,
            transport_factory=self._transport if self.cassette is None else self.cassette.transport_factory,
            progress=compile_progress,
        )

    # -- the scripted network ----------------------------------------------------------

    def _resolve(self, host: str) -> list[str]:
        return [self._address]

    def _transport(self, pins: Pins) -> httpx2.BaseTransport:
        def handler(request: httpx2.Request) -> httpx2.Response:
            return self._answer(pins, request)

        return httpx2.MockTransport(handler)

    def _answer(self, pins: Pins, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        port = url.port or _DEFAULT_PORTS.get(url.scheme, 0)
        if not pins.addresses(url.host, port):  # the pinned transport's invariant
            raise httpx2.ConnectError(f"{url.host}:{port} was not vetted", request=request)
        recorded = RecordedRequest(
            method=request.method,
            url=self._secrets.text(str(url)),
            headers=tuple(
                (self._secrets.text(n), self._secrets.text(v)) for n, v in request.headers.multi_items()
            ),
            body=self._secrets.bytes(request.read()),
        )
        with self._lock:
            self.requests.append(recorded)
            answer = self._lookup(recorded)
            if answer is None:
                self.unmatched.append(recorded)
        if answer is None:
            message = f"no scripted route for {recorded.method} {recorded.url}"
            return httpx2.Response(404, json={"error": "no scripted route", "detail": message})
        if not isinstance(answer, Response):
            try:
                answer = answer(recorded)
                if not isinstance(answer, Response):
                    raise TypeError(f"a route function must return sdk.harness.Response, not {answer!r}")
            except Exception as exc:  # surfaced by call(), not into the sandbox
                with self._lock:
                    self._errors.append(exc)
                return httpx2.Response(500, json={"error": "the route function raised"})
        headers = list(answer.headers)
        if not any(n.lower() in ("content-length", "transfer-encoding") for n, _ in headers):
            headers.append(("Content-Length", str(len(answer.body))))
        # Streamed like a network response, so the host counts and bounds it as it reads.
        return httpx2.Response(answer.status, headers=headers, stream=_Body(answer.body))

    def _lookup(self, recorded: RecordedRequest) -> Route | None:
        # Keys written straight into self.routes are normalized here as route() does.
        table = {route(m, u): answer for (m, u), answer in self.routes.items()}
        method, full = route(recorded.method, recorded.url)
        found = table.get((method, full))
        if found is None:
            found = table.get((method, full.split("?", 1)[0]))
        return found

    # -- calls -----------------------------------------------------------------------------

    @property
    def principal(self) -> Principal:
        """The principal every call is made as (subject ``author``, project ``test``)."""
        return Principal(project=PROJECT, subject=SUBJECT)

    @property
    def tools(self) -> list[str]:
        """The package's tool names, sorted."""
        return sorted(t.name for t in self.bundle.manifest.tools)

    def request(
        self,
        tool: str,
        input: Mapping[str, Any] | None = None,
        *,
        version: str | None = None,
        session: str = SESSION,
    ) -> CallRequest:
        """The call envelope :meth:`call` sends (version: the package's tool version)."""
        return CallRequest(
            principal=self.principal,
            session=session,
            tool=tool,
            version=version or self._version_of(tool),
            input=dict(input or {}),
        )

    def prepare(self, tool: str, input: Mapping[str, Any] | None = None, **kwargs: Any) -> InvocationPlan:
        """``host.prepare`` for this call, without running it (e.g. to inspect the preview).

        Raises:
            StockadeError: the call is refused before it would run (INPUT_INVALID, ...).
        """
        return self.host.prepare(self.request(tool, input, **kwargs))

    def call(
        self,
        tool: str,
        input: Mapping[str, Any] | None = None,
        *,
        approve: bool = False,
        version: str | None = None,
        session: str = SESSION,
    ) -> CallResult:
        """Call a tool through the full host pipeline.

        Args:
            tool: the tool name.
            input: the tool input (default ``{}``).
            approve: approve the call if the host asks for a person's approval (write,
                execute and external tools do by default); otherwise such a call returns
                an ``APPROVAL_REQUIRED`` result.
            version: the exact version (default: the version the package declares).
            session: the session id.

        Raises:
            UnscriptedRequest: ``strict=True`` and a request matched no route.
            Exception: whatever a route function raised.

        Returns:
            The host's :class:`~host.CallResult` (``ok``, ``output`` or ``error.code``).
        """
        start = len(self.unmatched)
        seen = 0 if self.cassette is None else self.cassette.unmatched_count
        request = self.request(tool, input, version=version, session=session)
        result = self._approved(request) if approve else self.host.call(request)
        if self.cassette is not None:
            result = self.cassette.after_call(result, seen)
        with self._lock:
            errors, self._errors = self._errors, []
            missed = self.unmatched[start:]
        if errors:
            raise errors[0]
        if self.strict and missed:
            raise UnscriptedRequest(
                "requests without a scripted route: " + ", ".join(f"{r.method} {r.url}" for r in missed)
            )
        return result

    def _approved(self, request: CallRequest) -> CallResult:
        try:
            plan = self.host.prepare(request)
        except StockadeError:
            return self.host.call(request)  # the same refusal, recorded as a result
        if plan.status == "approval_required":
            return self.host.execute(plan, self.host.approve(plan))
        return self.host.execute(plan)

    def _version_of(self, tool: str) -> str:
        for spec in self.bundle.manifest.tools:
            if spec.name == tool:
                return spec.version
        return self.bundle.manifest.package.version

    # -- inspection and lifecycle --------------------------------------------------------

    def reset(self) -> None:
        """Forget the recorded and unmatched requests (routes stay)."""
        with self._lock:
            self.requests.clear()
            self.unmatched.clear()

    def audit_records(self) -> list[dict[str, Any]]:
        """The audit log's records, parsed (``kind``, payload fields and chain hashes)."""
        text = (self._tmp / "audit.log").read_text("utf-8")
        return [_json.loads(line) for line in text.splitlines() if line.strip()]

    @property
    def audit_path(self) -> Path:
        """The audit log file (verify it with ``host.audit.log.verify``)."""
        return self._tmp / "audit.log"

    def close(self, *, save: bool = True) -> None:
        """Close the host and remove the temporary workspace. Idempotent.

        With a cassette: write it if recording (after the final scan), and in strict
        mode fail on interactions never replayed; ``save=False`` skips both (``with``
        does so when the block raised).

        Raises:
            CassetteInvalid: the final scan found a secret, or a response could not be
                recorded: nothing was written.
            UnusedInteractions: ``strict=True`` and a recorded interaction was not replayed.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self.host.close()
        finally:
            shutil.rmtree(self._tmp, ignore_errors=True)
        if save and self.cassette is not None:
            self.cassette.finish(strict=self.strict)

    def __enter__(self) -> Harness:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(save=exc_type is None)


def write_workspace(
    tmp: Path, bundle: Bundle, values: Mapping[str, str], *, project: str, subject: str
) -> tuple[Path, FilePolicyEngine, SecretsStore]:
    """A throw-away trust setup for one bundle (harness and ``stockade dev``).

    Writes ``tmp/stockade.lock`` (generation 1, the bundle, unsigned), a policy file
    granting ``project``/``subject`` exactly ``tool.call:<tool>`` and the permissions of
    the package's tools, and a secrets store under a random master key holding
    ``values`` for that principal.

    Returns:
        ``(lock path, policy engine, secrets store)``.
    """
    package = bundle.manifest.package
    lock = tmp / "stockade.lock"
    entry = {
        "name": package.name,
        "version": package.version,
        "bundle": bundle.directory.relative_to(tmp).as_posix(),
        "manifest_sha256": bundle.manifest_sha256,
        "module_sha256": bundle.module_sha256,
        "signature": None,
        "key_id": None,
    }
    doc = {"format": LOCK_FORMAT, "generation": 1, "previous": None, "packages": [entry]}
    lock.write_bytes(canonical_json(doc))
    policy = FilePolicyEngine.initialize(tmp / "policy.json")
    grants = set()
    for tool in bundle.manifest.tools:
        grants.add(f"tool.call:{tool.name}")
        grants.update(tool.permissions)
    policy.set_role(ROLE, allow=sorted(grants))
    policy.grant_role(project, subject, ROLE)
    store = SecretsStore(tmp / "secrets.json", MasterKey.from_bytes(_random.token_bytes(32)))
    for name, value in values.items():
        store.set(project, subject, name, value)
    return lock, policy, store


def _secret_values(secrets: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    if isinstance(secrets, str):
        raise TypeError("secrets must be a list of names or a mapping of name to value, not a str")
    if isinstance(secrets, Mapping):
        return {str(k): str(v) for k, v in secrets.items()}
    return {name: f"stockade-test-{name}-{_random.token_hex(12)}" for name in secrets}


def _basic_usernames(bundle: Bundle) -> list[str]:
    return [
        c.location.username for c in bundle.manifest.http.credentials if c.location.type == "basic"
    ]
