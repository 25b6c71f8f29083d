"""One call of a plugin with zero set-up, through the real host pipeline (``stockade dev``).

:func:`dev_run` builds a project (or copies a bundle) into a temporary workspace and
opens a real :class:`host.Host` on it: a lock of generation 1, a policy granting exactly
the package's tools and permissions to a throw-away principal (project ``dev``, a random
subject), an encrypted secrets store under a random master key holding only the secrets
given, a hash-chained audit log and an ephemeral state directory; compiled artifacts come
from the per-user cache. Nothing is bypassed: the egress policy, DNS vetting, credential
router, limits, redaction and audit all run as in production, on the real network.

Differences from a production host, each visible to the author:

- an approval the tool needs is given at once by the author running the command
  (through ``Host.approve``: single use, bound to the action digest);
- ``allow_hosts`` widens the package's allowlist for this run only (the caller prints it
  loudly); the widened manifest is what the throw-away lock pins;
- failing guests' tracebacks are put in the error details (``debug_guest_errors``);
- every outbound request is recorded with ``<secret:NAME>`` where a secret was injected;
- with ``loopback`` (``--allow-loopback HOST=127.0.0.1:PORT``), the named allowed hosts
  connect to a local server instead (:mod:`sdk._loopback`).

The workspace is removed when the call returns.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets as _random
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import httpx2

from host import CallRequest, CallResult, Host, HostConfig, Principal
from host.canonical import canonical_json
from host.egress.policy import Resolver, system_resolver
from host.egress.transport import Pins, TransportFactory, pinned_transport_factory
from host.errors import StockadeError
from host.formats.manifest import PackageManifest
from host.runtime import ProgressEvent
from host.secrets.store import check_secret
from sdk._cachedir import artifacts_dir, builds_dir, cache_root
from sdk._loopback import LoopbackRemap
from sdk.author.build import ProgressCallback, build_project
from sdk.bundle import Bundle, read_bundle
from sdk.harness import _basic_usernames, _Secrets, write_workspace

__all__ = ["DEV_PROJECT", "DevOutcome", "DevRequest", "allow_entry", "dev_run", "read_secret"]

DEV_PROJECT: Final = "dev"
DEV_SESSION: Final = "dev"
_METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@dataclass(frozen=True, slots=True)
class DevRequest:
    """One outbound request the host sent for the guest (secrets as ``<secret:NAME>``).

    Attributes:
        method: e.g. ``"GET"``.
        url: the URL sent.
        headers: every header sent, host-added ones included.
        status: the response status, or None when the request failed.
        error: why it failed (connection, TLS), or None.
    """

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    status: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DevOutcome:
    """What one dev run did.

    Attributes:
        result: the host's :class:`~host.CallResult`.
        requests: the outbound requests, in order.
        package: ``name-version`` of the package.
        tool_version: the exact tool version called.
        widened: allow entries added by ``allow_hosts`` (as ``scheme://host[:port]``).
        approved: True when the tool needed an approval and the run gave it.
        timings: seconds spent in ``build``, ``open`` (load/compile) and ``call``.
    """

    result: CallResult
    requests: list[DevRequest]
    package: str
    tool_version: str
    widened: list[str] = field(default_factory=list)
    approved: bool = False
    timings: dict[str, float] = field(default_factory=dict)


def read_secret(spec: str, *, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Parse ``NAME=@FILE`` or ``NAME=env:VAR`` into ``(name, value)``.

    A literal value is refused: it would land in shell history and ``ps`` output.

    Raises:
        ValueError: the form is not one of the two, the file is unreadable or the
            variable is unset or empty.
    """
    env = os.environ if environ is None else environ
    name, sep, source = spec.partition("=")
    if not sep or not name:
        raise ValueError(f"--secret {spec!r}: write NAME=@FILE or NAME=env:VAR")
    if source.startswith("@"):
        try:
            value = Path(source[1:]).expanduser().read_text("utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ValueError(f"--secret {name}: cannot read {source[1:]}: {exc.strerror}") from None
    elif source.startswith("env:"):
        value = env.get(source[4:], "")
        if not value:
            raise ValueError(f"--secret {name}: environment variable {source[4:]} is not set")
    else:
        raise ValueError(
            f"--secret {name}: give the value as @FILE or env:VAR, never on the command line "
            "(it would be kept in shell history and visible in ps)"
        )
    if not value:
        raise ValueError(f"--secret {name}: the value is empty")
    try:
        check_secret(name, value)  # the store's rules, before anything is built or run
    except ValueError as exc:
        raise ValueError(f"--secret {name}: {exc}") from None
    return name, value


def allow_entry(spec: str) -> dict[str, Any]:
    """An ``http.allow`` entry for ``--allow-host``: ``host``, ``scheme://host[:port][/path]``.

    Every method is allowed; the path prefix defaults to ``/``. The entry is validated by
    the manifest models like any other (a bad host is refused, never widened further).
    """
    text = spec if "://" in spec else f"https://{spec}"
    parts = urlsplit(text)
    return {
        "scheme": parts.scheme,
        "host": parts.hostname or "",
        "port": parts.port,
        "path_prefix": parts.path or "/",
        "methods": list(_METHODS),
    }


class _Recording(httpx2.BaseTransport):
    """Delegates to the host's pinned transport and records each request, secrets hidden."""

    def __init__(self, inner: httpx2.BaseTransport, hide: _Secrets, sink: list[DevRequest]) -> None:
        self._inner = inner
        self._hide = hide
        self._sink = sink

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        url = self._hide.text(str(request.url))
        headers = tuple((self._hide.text(n), self._hide.text(v)) for n, v in request.headers.multi_items())
        try:
            response = self._inner.handle_request(request)
        except Exception as exc:
            self._sink.append(DevRequest(request.method, url, headers, error=type(exc).__name__))
            raise
        self._sink.append(DevRequest(request.method, url, headers, status=response.status_code))
        return response

    def close(self) -> None:
        self._inner.close()


def _stage(
    tmp: Path, project: Path | None, bundle: Path | None, cache: Path, progress: ProgressCallback | None
) -> Path:
    out = tmp / "bundles"
    if project is not None:
        return build_project(project, out_dir=out, cache_dir=builds_dir(cache), progress=progress).bundle_dir
    if bundle is None:
        raise ValueError("give a project or a bundle")
    dest = out / "bundle"
    dest.mkdir(parents=True)
    for name in ("manifest.json", "module.wasm"):
        shutil.copyfile(bundle / name, dest / name)
    return dest


def _widen(directory: Path, hosts: Sequence[str]) -> list[str]:
    if not hosts:
        return []
    path = directory / "manifest.json"
    manifest = json.loads(path.read_bytes())
    entries = [allow_entry(h) for h in hosts]
    manifest["http"]["allow"] = [*manifest["http"]["allow"], *entries]
    path.write_bytes(PackageManifest.from_json(canonical_json(manifest)).to_json())
    return [f"{e['scheme']}://{e['host']}" + (f":{e['port']}" if e["port"] else "") for e in entries]


def _tool_version(bundle: Bundle, tool: str) -> str:
    for spec in bundle.manifest.tools:
        if spec.name == tool:
            return spec.version
    return bundle.manifest.package.version  # the host answers TOOL_NOT_FOUND


def _dev_secret_hint(result: CallResult, tool: str) -> CallResult:
    """Point a missing required secret at ``--secret``: the host's own hint names
    ``stockade secrets set`` for the run's random principal, whose state is thrown away."""
    error = result.error
    secret = error.details.get("secret") if error is not None else None
    if error is None or error.code != "CREDENTIAL_UNAVAILABLE" or not isinstance(secret, str):
        return result
    variable = re.sub(r"[^A-Z0-9_]", "_", secret.upper())
    hint = (
        f"give it to this run: `stockade dev {shlex.quote(tool)} --secret "
        f"{shlex.quote(secret)}=env:{variable}` (or {shlex.quote(secret)}=@FILE). Every tool of a "
        "package needs the package's required secrets; declare the credential `optional = true` in "
        "stockade.toml if some tools do without it"
    )
    message = f"secret {secret!r} is required by this package and was not given with --secret"
    return dataclasses.replace(result, error=dataclasses.replace(error, message=message, hint=hint))


def _dev_loopback_hint(result: CallResult, loopback: LoopbackRemap | None) -> CallResult:
    """A loopback or private address refused in ``dev``: name ``--allow-loopback`` (the
    host's own hint says to fix the plugin's request, which is wrong for a local API)."""
    error = result.error
    if error is None or error.code != "EGRESS_DENIED" or error.details.get("reason") != "blocked_address":
        return result
    host = str(error.details.get("host") or "HOST")
    hint = (
        f"to reach an API on this machine, remap the allowed host to it: `stockade dev ... "
        f"--allow-loopback {shlex.quote(host)}=127.0.0.1:PORT` (loopback targets only; add "
        "--ca-file FILE for a local HTTPS server's CA)"
    )
    if loopback is not None:
        hint = f"{host} is not remapped by --allow-loopback; {hint}"
    return dataclasses.replace(result, error=dataclasses.replace(error, hint=hint))


def _call(host: Host, request: CallRequest) -> tuple[CallResult, bool]:
    try:
        plan = host.prepare(request)
    except StockadeError:
        return host.call(request), False  # the same refusal, recorded in the audit log
    if plan.status == "approval_required":
        return host.execute(plan, host.approve(plan)), True
    return host.execute(plan), False


def dev_run(
    tool: str,
    input: Mapping[str, Any],
    *,
    project: Path | None = None,
    bundle: Path | None = None,
    version: str | None = None,
    secrets: Mapping[str, str] | None = None,
    allow_hosts: Sequence[str] = (),
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    compile_progress: Callable[[ProgressEvent], None] | None = None,
    resolver: Resolver | None = None,
    network: TransportFactory | None = None,
    loopback: LoopbackRemap | None = None,
    ca_file: Path | None = None,
) -> DevOutcome:
    """Build (or copy) and call one tool through a throw-away real host.

    Args:
        tool: the tool name.
        input: the tool input.
        project: a project directory (built, using the build cache); or
        bundle: a bundle directory (copied).
        version: the exact tool version (default: what the manifest declares).
        secrets: ``{name: value}`` stored for the throw-away principal.
        allow_hosts: extra allowlist entries for this run (see :func:`allow_entry`).
        cache_dir: the per-user cache root (default :func:`sdk._cachedir.cache_root`).
        progress: build progress callback.
        compile_progress: the host's compile events.
        resolver: DNS port (default: the system resolver, as in production).
        network: builds the transport under the recorder from the vetted pins (default:
            the host's pinned TLS transport). Tests use a scripted one: the network cannot
            be reached from the test machine.
        loopback: ``--allow-loopback``: hosts of the allowlist remapped to a local server
            (:mod:`sdk._loopback`); the host runs with ``unsafe_allow_loopback`` (logged and
            audited), every other host keeps the public-address rule.
        ca_file: an extra CA to trust (``--ca-file``), e.g. a local HTTPS server's.

    Raises:
        ValueError: neither or both of ``project`` and ``bundle``.
        ManifestInvalid, BuildError: the project does not build, or a widened allowlist
            entry is invalid.
        StockadeError: the host refused the bundle (COMPONENT_REFUSED, ...).

    Returns:
        The outcome; the call's own failures are in ``outcome.result``, never raised.
    """
    if (project is None) == (bundle is None):
        raise ValueError("give exactly one of project and bundle")
    cache = Path(cache_dir) if cache_dir is not None else cache_root()
    tmp = Path(tempfile.mkdtemp(prefix="stockade-dev-"))
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        directory = _stage(tmp, project, bundle, cache, progress)
        widened = _widen(directory, allow_hosts)
        staged = read_bundle(directory)
        timings["build"] = time.monotonic() - started
        subject = f"dev-{_random.token_hex(4)}"
        values = dict(secrets or {})
        lock, policy, store = write_workspace(tmp, staged, values, project=DEV_PROJECT, subject=subject)
        hide = _Secrets(values, _basic_usernames(staged))
        requests: list[DevRequest] = []
        inner = network or pinned_transport_factory(ca_file=ca_file)
        if loopback is not None:
            resolver = loopback.resolver(resolver or system_resolver)
            inner = network or loopback.transport_factory(ca_file=ca_file)

        def transport(pins: Pins) -> httpx2.BaseTransport:
            return _Recording(inner(pins), hide, requests)

        started = time.monotonic()
        config = HostConfig(
            state_dir=tmp / "state", artifact_cache_dir=artifacts_dir(cache), debug_guest_errors=True,
            unsafe_allow_loopback=loopback is not None,
        )  # fmt: skip
        with Host.open(
            lock, config=config, secrets=store, policy=policy, audit=tmp / "audit.log",
            resolver=resolver, transport_factory=transport, progress=compile_progress,
        ) as host:  # fmt: skip
            timings["open"] = time.monotonic() - started
            started = time.monotonic()
            exact = version or _tool_version(staged, tool)
            request = CallRequest(
                principal=Principal(project=DEV_PROJECT, subject=subject),
                session=DEV_SESSION,
                tool=tool,
                version=exact,
                input=dict(input),
            )
            result, approved = _call(host, request)
            result = _dev_loopback_hint(_dev_secret_hint(result, tool), loopback)
            timings["call"] = time.monotonic() - started
        package = staged.manifest.package
        return DevOutcome(
            result=result,
            requests=requests,
            package=f"{package.name}-{package.version}",
            tool_version=exact,
            widened=widened,
            approved=approved,
            timings=timings,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
