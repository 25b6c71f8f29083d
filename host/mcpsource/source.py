"""One pinned MCP source at run time: connect, compare with the pin, call, restart.

:class:`McpSource` owns at most one session with its server: a process it started
(:class:`~host.mcpsource.stdio.StdioConnection`) or a Streamable HTTP session reached
through the host's egress rules (:class:`~host.mcpsource.http.HttpConnection`). Every
(re)connect lists the server's tools and compares each with its pin (rug-pull check):
a tool whose digest differs, or that disappeared, is withheld
(calls fail MCP_TOOL_CHANGED), a tool the pin does not name is never offered, and the
differences are kept in :attr:`McpSource.drift` and written to the audit log
(``mcp.drift``). A server that failed is restarted on the next call: at once after the
first failure, then with exponential backoff (0.5 s doubling, capped at 30 s) while
failures repeat; a successful call resets it. At most ``max_concurrent_calls`` calls are
in flight to one source; one more is refused at once with ``BUSY`` (not queued). A
cancelled call sends ``notifications/cancelled`` to the server and ends ``CANCELLED``.

Example::

    source = McpSource(pinned, state_dir=d, secrets=store, audit=log)
    source.connect()                      # never raises: failures are recorded
    output_json = source.call("files.read", {"path": "a"}, timeout_s=5)
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

from host.canonical import canonical_json
from host.errors import (
    Busy,
    CredentialUnavailable,
    InputInvalid,
    McpToolChanged,
    McpUnavailable,
    OutputInvalid,
    SandboxUnavailable,
    StockadeError,
    ToolFailed,
)
from host.formats.mcppin import (
    HttpTransport,
    McpDeclaration,
    McpPin,
    PinnedSource,
    StdioTransport,
    definition_of,
    tool_digest,
)
from host.mcpsource.rpc import Connection, McpNetwork
from host.mcpsource.stdio import StdioConnection
from host.sandbox.bwrap import find_bwrap, server_argv
from host.sandbox.seccomp import build_filter
from host.secrets.redact import Redactor
from host.secrets.store import SecretsStore, SecretValue

if TYPE_CHECKING:
    from host.store.port import AuditSink  # the store's audit chain (file log or database)

__all__ = [
    "McpSource",
    "ToolDrift",
    "compare",
    "list_tools",
    "open_server",
    "probe",
    "scrub_drift",
    "scrubbed",
    "start_server",
]

MAX_LIST_PAGES: Final = 16  # tools/list pages read per connect
BACKOFF_FIRST_S: Final = 0.5  # s, wait before the second consecutive restart
BACKOFF_MAX_S: Final = 30.0  # s, longest wait between restarts
_DIFF_CHARS: Final = 2000  # characters of one pinned/live value kept in a drift report
MAX_REMEMBERED_VALUES: Final = 64  # secret values handed to earlier connections, still scrubbed


@final
@dataclass(frozen=True, slots=True)
class ToolDrift:
    """One difference between a server's live tool list and its pin.

    ``change`` is ``changed`` (digest differs; ``fields`` names what), ``added`` (not
    pinned: never offered) or ``removed`` (pinned, no longer listed).
    """

    source: str
    name: str
    change: str
    fields: tuple[str, ...] = ()
    pinned: Mapping[str, Any] | None = None
    live: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (audit records, ``stockade diff``); values cut at 2000 characters."""
        def cut(value: Any) -> Any:
            text = canonical_json(value).decode("utf-8")
            return value if len(text) <= _DIFF_CHARS else text[:_DIFF_CHARS] + "…"

        return {
            "source": self.source,
            "tool": self.name,
            "change": self.change,
            "fields": list(self.fields),
            "pinned": {k: cut(self.pinned.get(k)) for k in self.fields} if self.pinned else None,
            "live": {k: cut(self.live.get(k)) for k in self.fields} if self.live else None,
        }


def compare(pin: McpPin, live_tools: list[Mapping[str, Any]]) -> tuple[set[str], list[ToolDrift]]:
    """Which pinned tools the live list still matches (their Stockade names), and the drift."""
    source = pin.source.name
    live = {str(t.get("name")): definition_of(t) for t in live_tools}
    offered: set[str] = set()
    drift: list[ToolDrift] = []
    for tool in pin.tools:
        now = live.get(tool.name)
        if now is None:
            drift.append(ToolDrift(source, tool.name, "removed"))
        elif tool_digest(now) != tool.digest:
            fields = tuple(k for k in now if canonical_json(now[k]) != canonical_json(tool.definition.get(k)))
            drift.append(ToolDrift(source, tool.name, "changed", fields, tool.definition, now))
        else:
            offered.add(tool.tool)
    pinned_names = {t.name for t in pin.tools}
    for name in sorted(set(live) - pinned_names):
        drift.append(ToolDrift(source, name[:128], "added", tuple(live[name]), None, live[name]))
    return offered, drift


@final
class McpSource:
    """A pinned source and its (re)started server process.

    Args:
        pinned: the verified source from the lock.
        state_dir: the host's state directory (private working dirs live under it).
        secrets: the secrets store (the source's secrets are read under ``secrets_scope``).
        audit: where connects, drift and restarts are recorded.
        network: how an HTTP source is reached (the host's resolver, CA file, loopback opt-in).
        clock: monotonic clock (injectable for backoff tests).
    """

    def __init__(
        self,
        pinned: PinnedSource,
        *,
        state_dir: Path,
        secrets: SecretsStore | None,
        audit: AuditSink,
        network: McpNetwork | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._network = network or McpNetwork()
        self.pinned = pinned
        self.name = pinned.pin.source.name
        self._decl = pinned.pin.source
        self._remote = {t.tool: t.name for t in pinned.pin.tools}
        self._state_dir = Path(state_dir)
        self._secrets = secrets
        self._audit = audit
        self._clock = clock
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self._decl.limits.max_concurrent_calls)
        self._conn: Connection | None = None
        self._failures = 0
        self._next_attempt = 0.0
        self._handed: dict[str, SecretValue] = {}  # every value handed to a connection (by value)
        self._handed_lock = threading.Lock()
        self._scrub = Redactor(())
        self.offered: frozenset[str] = frozenset()
        self.drift: tuple[ToolDrift, ...] = ()
        self.connects = 0  # successful (re)starts of the server

    # -- connecting -----------------------------------------------------------------------

    def connect(self) -> None:
        """Start the server (if not running) and compare its tools with the pin. Never raises;
        a failure is audited and the next call retries."""
        try:
            self._ensure()
        except StockadeError as exc:  # scrubbed by _ensure of every value the server was given
            record = {"source": self.name, "code": exc.code, "message": exc.message}
            _append(self._audit, "mcp.unavailable", record)

    def _ensure(self) -> Connection:
        with self._lock:
            if self._conn is not None and self._conn.alive:
                return self._conn
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            now = self._clock()
            if now < self._next_attempt:
                raise McpUnavailable(
                    f"MCP source {self.name} failed {self._failures} time(s) in a row; next restart in "
                    f"{self._next_attempt - now:.1f} s",
                    source=self.name,
                    reason="backoff",
                    retry_after_s=round(self._next_attempt - now, 3),
                )
            conn: Connection | None = None
            try:
                # Staged from the store at every attempt (a rotated secret is what a restart
                # sends) and remembered *before* the server sees it, so even its handshake
                # errors are scrubbed.
                staged = _stage(self._decl, self._secrets)
                scrub = self._remember(staged.values())
                conn = open_server(self._decl, staged, state_dir=self._state_dir, network=self._network)
                tools = list_tools(conn, self._decl)
            except StockadeError as exc:
                if conn is not None:
                    conn.close()
                self._failed()
                raise scrubbed(exc, self._scrub) from None
            offered, drift = compare(self.pinned.pin, tools)
            drift = [scrub_drift(d, scrub) for d in drift]
            self._conn, self.offered, self.drift = conn, frozenset(offered), tuple(drift)
            self.connects += 1
            _append(self._audit, "mcp.connected", {
                "source": self.name, "transport": self._decl.transport.type, "pid": conn.pid,
                "offered": sorted(offered), "restart": self.connects > 1,
            })
            if drift:  # scrubbed above: a hostile server may put its secrets into a description
                report = [d.to_dict() for d in drift]
                _append(self._audit, "mcp.drift", {"source": self.name, "drift": report})
            return conn

    def _failed(self) -> None:
        self._failures += 1
        wait = 0.0 if self._failures == 1 else min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self._failures - 2))
        self._next_attempt = self._clock() + wait

    # -- calling --------------------------------------------------------------------------

    def _remember(self, values: Iterable[SecretValue]) -> Redactor:
        """Add values handed to a connection to those scrubbed from everything the source
        sends (the newest :data:`MAX_REMEMBERED_VALUES`); return the redactor of them all."""
        with self._handed_lock:
            fresh = [v for v in values if v.reveal() not in self._handed]
            for value in fresh:
                self._handed[value.reveal()] = value
            while len(self._handed) > MAX_REMEMBERED_VALUES:
                del self._handed[next(iter(self._handed))]
            if fresh:
                self._scrub = Redactor(self._handed.values())
            return self._scrub

    def stage(self) -> Redactor:
        """The redactor of one call: the source's secrets staged from the store now (what a
        restart inside the call sends) and every value a connection of it was handed.

        Raises:
            CredentialUnavailable: a declared secret is not stored (fail closed).
        """
        current = _stage(self._decl, self._secrets)
        with self._handed_lock:
            values = [*self._handed.values(), *current.values()]
        return Redactor(values)

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        timeout_s: float,
        cancel: threading.Event | None = None,
    ) -> str:
        """Call one pinned tool; return its output as canonical JSON text.

        Raises:
            Busy: ``max_concurrent_calls`` calls are already in flight (not queued).
            CallCancelled: ``cancel`` was set; the server was sent ``notifications/cancelled``.
            McpToolChanged: the tool is withheld (its live definition differs from the pin).
            McpTimeout: no answer within ``timeout_s``.
            McpUnavailable: the server cannot start, crashed, or broke the protocol.
            ToolFailed: the server answered ``isError`` or a JSON-RPC error.
            OutputInvalid: the answer is not a tool result, or holds non-text content for a
                tool without an output schema, or lacks structured content for one with.
            CredentialUnavailable: a declared secret is not stored.
        """
        if not self._slots.acquire(blocking=False):
            cap = self._decl.limits.max_concurrent_calls
            raise Busy(
                f"MCP source {self.name} already runs {cap} call(s), its max_concurrent_calls",
                hint="Retry after a running call finishes, or raise limits.max_concurrent_calls "
                "in the declaration and re-pin.",
                source=self.name, max_concurrent_calls=cap,
            )
        try:
            return self._call(tool, arguments, timeout_s=timeout_s, cancel=cancel)
        except StockadeError as exc:  # every text that leaves the source passes its redactor
            raise scrubbed(exc, self._scrub) from None
        finally:
            self._slots.release()

    def _call(
        self, tool: str, arguments: Mapping[str, Any], *, timeout_s: float, cancel: threading.Event | None
    ) -> str:
        conn = self._ensure()  # a restart is bounded by startup_timeout_ms, not by timeout_s
        deadline = time.monotonic() + timeout_s
        if tool not in self.offered:
            raise self._withheld(tool)
        params = {"name": self._remote[tool], "arguments": dict(arguments)}
        try:
            result = conn.request("tools/call", params, timeout_s=max(0.001, deadline - time.monotonic()),
                                  cancel=cancel)
        except McpUnavailable as exc:
            if exc.details.get("reason") == "rpc_error":
                raise ToolFailed(exc.message, tool=tool) from None
            with self._lock:
                self._failed()
            raise
        with self._lock:
            self._failures = 0
        return self._output(tool, result)

    def _withheld(self, tool: str) -> McpToolChanged:
        remote = self._remote.get(tool, tool)
        found = [d.to_dict() for d in self.drift if d.name == remote]
        return McpToolChanged(
            f"MCP tool {tool} differs from its pin ({', '.join(found[0]['fields']) if found else 'gone'}); "
            "it is withheld until a reviewer re-pins it",
            tool=tool, diff=found,
        )

    def _output(self, tool: str, result: Any) -> str:
        try:
            return self._canonical_output(tool, result)
        except InputInvalid as exc:  # NaN, 1e999, a lone surrogate...: the server's fault, not the caller's
            raise OutputInvalid(
                f"MCP tool {tool} answered a value JSON cannot carry exactly: {exc.message}",
                tool=tool, pointer=exc.details.get("pointer"), rule=exc.details.get("rule"),
            ) from None

    def _canonical_output(self, tool: str, result: Any) -> str:
        if not isinstance(result, dict) or not isinstance(result.get("content", []), list):
            raise OutputInvalid(f"MCP tool {tool} answered something that is not a tool result")
        content = result.get("content", [])
        if result.get("isError") is True:
            raise ToolFailed(f"MCP tool {tool} failed: {_text(content)[:4000]}", tool=tool)
        definition = next(t.definition for t in self.pinned.pin.tools if t.tool == tool)
        if definition.get("outputSchema") is not None:
            structured = result.get("structuredContent")
            if structured is None:
                raise OutputInvalid(f"MCP tool {tool} pins an output schema but sent no structuredContent")
            return canonical_json(self._scrub.json_value(structured)).decode("utf-8")
        blocks = [_block(tool, b) for b in content if not (isinstance(b, dict) and b.get("type") == "text")]
        answer: dict[str, Any] = {"text": self._scrub.text(_text(content))}
        if blocks:
            answer["content"] = self._scrub.json_value(blocks)
        return canonical_json(answer).decode("utf-8")

    def close(self) -> None:
        """Kill the server's process group. Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


_BLOCK_FIELDS: Final = {
    "image": ("data", "mimeType"), "audio": ("data", "mimeType"),
    "resource_link": ("uri", "name", "title", "description", "mimeType", "size"), "resource": ("resource",),
}
_RESOURCE_FIELDS: Final = ("uri", "mimeType", "text", "blob")


def _block(tool: str, block: Any) -> dict[str, Any]:
    """A non-text content block, typed and reduced to its known fields: passed on as data
    (base64 stays base64 and counts against the output budget), never decoded, executed or
    fetched."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in _BLOCK_FIELDS:
        raise OutputInvalid(f"MCP tool {tool} sent a content block of unknown type {str(kind)[:40]!r}")
    kept = {k: block[k] for k in _BLOCK_FIELDS[kind] if k in block}
    if kind == "resource":
        inner = kept.get("resource")
        if not isinstance(inner, dict):
            raise OutputInvalid(f"MCP tool {tool} sent an embedded resource without a resource")
        kept["resource"] = {k: inner[k] for k in _RESOURCE_FIELDS if k in inner}
    return {"type": kind, **kept}


def _text(content: list[Any]) -> str:
    texts = (b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "\n".join(str(text) for text in texts)


def _append(audit: AuditSink, kind: str, payload: Mapping[str, Any]) -> None:
    try:
        audit.append(kind, payload)
    except StockadeError:  # the call path refuses on audit failure; a connect record is best effort
        pass


def start_server(
    decl: McpDeclaration, *, state_dir: Path, secrets: SecretsStore | None, network: McpNetwork | None = None
) -> tuple[Connection, dict[str, SecretValue]]:
    """Start a declared stdio server, or open an HTTP session, with its secrets.

    Returns the session and the staged secrets (what the server received, for scrubbing).

    Raises:
        CredentialUnavailable: a declared secret is not stored under ``secrets_scope``.
        McpUnavailable, McpTimeout: the server cannot start or finish the handshake
            (``unsupported_transport``: an http source without the ``mcp`` extra).
        EgressDenied, EgressUnreachable: an http endpoint refused by the egress rules.
    """
    staged = _stage(decl, secrets)
    try:
        return open_server(decl, staged, state_dir=state_dir, network=network), staged
    except StockadeError as exc:
        raise scrubbed(exc, Redactor(staged.values())) from None


def open_server(
    decl: McpDeclaration, staged: Mapping[str, SecretValue], *, state_dir: Path, network: McpNetwork | None
) -> Connection:
    """Start a declared stdio server, or open an HTTP session, handing it ``staged``.

    Errors are not scrubbed here: the caller holds the redactor of what it staged.

    Raises:
        McpUnavailable, McpTimeout, CredentialUnavailable, EgressDenied, EgressUnreachable:
            as :func:`start_server`.
    """
    transport = decl.transport
    if isinstance(transport, HttpTransport):
        return _open_http(decl, transport, staged, network or McpNetwork())
    if not isinstance(transport, StdioTransport):  # pragma: no cover - the union has two members
        raise TypeError(f"unknown transport {type(transport).__name__}")
    env = dict(decl.env)
    for item in decl.secrets:
        if item.env is not None:
            env[item.env] = staged[item.secret].reveal()
    cwd = Path(transport.cwd) if transport.cwd else _workdir(state_dir, decl.name)
    launcher: list[str] = []
    seccomp_fd = -1
    try:
        if transport.sandbox == "bwrap":
            launcher, seccomp_fd = _sandbox_launcher(decl.name, transport, cwd)
        return StdioConnection(
            name=decl.name,
            command=transport.command,
            args=transport.args,
            env=env,
            cwd=cwd,
            max_message_bytes=decl.limits.max_output_bytes,
            memory_bytes=decl.limits.memory_bytes,
            timeout_s=decl.limits.startup_timeout_ms / 1000,
            launcher=launcher,
            pass_fds=(seccomp_fd,) if seccomp_fd >= 0 else (),
        )
    finally:
        if seccomp_fd >= 0:
            os.close(seccomp_fd)


def _sandbox_launcher(name: str, transport: StdioTransport, cwd: Path) -> tuple[list[str], int]:
    """bwrap's argv prefix for a sandboxed stdio server and the read end of a pipe holding
    its seccomp program (the caller closes it once the server started).

    Raises:
        McpUnavailable: ``reason: "sandbox_unavailable"``: no bwrap on PATH, or no seccomp.
    """
    bwrap = find_bwrap(os.environ.get("PATH"))
    try:
        if bwrap is None:
            raise SandboxUnavailable("bubblewrap (bwrap) is not on the host's PATH", reason="no_bwrap")
        program, _ = build_filter("none")
    except SandboxUnavailable as exc:
        raise McpUnavailable(
            f"MCP source {name}: transport.sandbox = \"bwrap\" cannot be set up: {exc.message}",
            source=name, reason="sandbox_unavailable", hint=exc.hint,
        ) from None
    read, write = os.pipe()
    with os.fdopen(write, "wb") as out:
        out.write(program)  # < 64 KiB: fits the pipe buffer
    argv = server_argv(
        bwrap, command=transport.command, read_paths=transport.read_paths, cwd=cwd, seccomp_fd=read
    )
    return argv, read


def _open_http(
    decl: McpDeclaration, transport: HttpTransport, staged: Mapping[str, SecretValue], network: McpNetwork
) -> Connection:
    try:
        from host.mcpsource.http import HttpConnection  # noqa: PLC0415 - needs the mcp extra
    except ImportError:
        raise McpUnavailable(
            f"MCP source {decl.name}: the http transport needs the official MCP SDK",
            source=decl.name, reason="unsupported_transport", hint="pip install 'stockade[mcp]'",
        ) from None
    headers = []
    for item in decl.secrets:
        if item.header is None:
            continue
        value = item.prefix + staged[item.secret].reveal()
        if any((ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F or ord(ch) > 0xFF for ch in value):
            raise CredentialUnavailable(  # not a valid header value: never sent, never mangled
                f"MCP source {decl.name}: secret {item.secret!r} cannot be sent in header {item.header}: "
                "it holds control or non-Latin-1 characters",
                hint="Store the secret's exact header value (no line breaks).", secret=item.secret,
            )
        headers.append((item.header, value))
    return HttpConnection(
        name=decl.name, url=transport.url, headers=headers, network=network,
        max_message_bytes=decl.limits.max_output_bytes, timeout_s=decl.limits.startup_timeout_ms / 1000,
    )


def probe(
    decl: McpDeclaration, *, state_dir: Path, secrets: SecretsStore | None, network: McpNetwork | None = None
) -> tuple[list[Mapping[str, Any]], Redactor]:
    """Start the declared server once, list its tools and stop it (pinning, ``--dry-run``).

    Returns the live tools and the redactor of the secrets the server was given, which
    the caller applies to everything it prints or stores; errors are already scrubbed.

    Raises:
        McpUnavailable, McpTimeout, CredentialUnavailable, EgressDenied, EgressUnreachable:
            as :func:`start_server`, scrubbed of the staged secrets.
    """
    staged = _stage(decl, secrets)
    scrub = Redactor(staged.values())
    try:
        conn = open_server(decl, staged, state_dir=state_dir, network=network)
        try:
            return list_tools(conn, decl), scrub
        finally:
            conn.close()
    except StockadeError as exc:
        raise scrubbed(exc, scrub) from None


def scrubbed(exc: StockadeError, scrub: Redactor) -> StockadeError:
    """``exc`` with its message and details scrubbed by ``scrub`` (in place; returned)."""
    if scrub.empty:
        return exc
    exc.message = scrub.text(exc.message)
    exc.args = (exc.message,)
    details: dict[str, Any] = {}
    for key, value in exc.details.items():
        try:
            details[key] = scrub.json_value(value)
        except TypeError:  # not JSON-able: only its text form can be shown
            details[key] = scrub.text(str(value))
    exc.details = details
    return exc


def scrub_drift(drift: ToolDrift, scrub: Redactor) -> ToolDrift:
    """``drift`` with the live (and pinned) values scrubbed by ``scrub``."""
    if scrub.empty:
        return drift

    def clean(values: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        return None if values is None else {scrub.text(k): scrub.json_value(v) for k, v in values.items()}

    return dataclasses.replace(drift, name=scrub.text(drift.name), pinned=clean(drift.pinned),
                               live=clean(drift.live))


def _stage(decl: McpDeclaration, secrets: SecretsStore | None) -> dict[str, SecretValue]:
    names = [item.secret for item in decl.secrets]
    scope = decl.secrets_scope
    if not names or scope is None:
        return {}
    staged = secrets.stage(scope.project, scope.subject, names) if secrets else {}
    missing = sorted(set(names) - set(staged))
    if missing:
        raise CredentialUnavailable(
            f"MCP source {decl.name} needs secret {missing[0]!r}, which is not stored for "
            f"{scope.subject!r} in {scope.project!r}",
            secret=missing[0],
        )
    return staged


def _workdir(state_dir: Path, name: str) -> Path:
    """A fresh private working directory (0700) for each start."""
    path = state_dir / "mcp" / name / "work"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, mode=0o700)
    path.chmod(0o700)
    return path


def list_tools(conn: Connection, decl: McpDeclaration) -> list[Mapping[str, Any]]:
    """Every tool the server lists (at most 16 pages).

    Raises:
        McpUnavailable, McpTimeout: the server does not answer a tool list in time.
    """
    tools: list[Mapping[str, Any]] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = {"cursor": cursor} if cursor else {}
        page = conn.request("tools/list", params, timeout_s=decl.limits.startup_timeout_ms / 1000)
        if not isinstance(page, dict) or not isinstance(page.get("tools"), list):
            conn.close()
            raise McpUnavailable(f"MCP source {decl.name} answered tools/list without a tool list",
                                 source=decl.name, reason="malformed")
        tools.extend(t for t in page["tools"] if isinstance(t, dict))
        cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
        if not cursor:
            break
    return tools
