"""``stockade serve``: serve the lock's tools to MCP clients (stdio or Streamable HTTP).

Every tool call goes through the same Host pipeline as ``stockade call``: policy before
input, approval, rate limit, secrets pre-flight, audit, sandbox, output checks.

stdio (the default) serves one principal, ``--project``/``--subject`` (or
``STOCKADE_PROJECT``/``STOCKADE_SUBJECT``). stdout carries only MCP; logs go to stderr;
EOF on stdin ends the server. ``--print-client-config [--client claude|vscode|cursor]``
prints the client's config entry (the absolute command, ``--config`` with the absolute
host config file, the principal) and exits. serve refuses to start (exit 2) without a
host config file or ``--lock`` (CONFIG_NOT_FOUND), and when it would list no tools
(NO_TOOLS_SERVED: an empty lock, or a principal the policy grants none).

HTTP (``--transport http``) serves ``/mcp`` on ``--host``/``--port`` (port 0 picks one;
the URL is printed on stderr). With a tokens file (``--tokens-file FILE``, by default
``<state-dir>/tokens.json`` when it exists, where ``stockade tokens add`` writes) every
request needs a bearer token that maps to its principal; a named file that is missing or
unreadable refuses to start. Without one it serves the fixed principal, and only on a
loopback address. OAuth 2.1 resource-server mode instead
(``--oauth-issuer URL --oauth-audience AUD --oauth-jwks FILE``) accepts JWT access tokens
signed by a key of the (local, pinned) JWKS file, with that exact issuer and audience;
``sub`` is the subject, the ``stockade_project`` claim (or ``--project``) the project.

Approvals: clients that support elicitation show the approval preview and ask the
person; others get APPROVAL_REQUIRED and the action is queued for
``stockade approvals approve DIGEST``. SIGHUP, or a change of the lock file, reloads the
lock (every check runs again; a refused lock keeps the old generation).

State: ``--store postgresql://…`` (or ``STOCKADE_STORE``) keeps approvals, rate limits,
session grants, the approval queue, lock generations and the audit chains (with
checkpoints signed by the state dir's audit key) in the shared store, so several
servers behave as one; otherwise the state dir's files (``audit.log``).

Observability (the ``otel`` extra): ``--metrics-port N`` serves Prometheus text at
``/metrics`` on loopback; ``OTEL_EXPORTER_OTLP_ENDPOINT`` sends traces and metrics to an
OpenTelemetry collector (docs/operators.md, "Observability").

Exit codes: 0 ended cleanly, 1 the host could not open, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Final

from host import FilePolicyEngine, Host, Principal
from host.audit.log import AuditLog
from host.errors import AuditUnavailable
from host.runtime.models import ProgressEvent
from host.store.local import check_state_dir_free
from sdk.commands._common import (
    EXIT_OK,
    UsageFailed,
    add_host_options,
    checkpoint_options,
    host_config,
    open_secrets,
    open_store_spec,
    state_dir,
    user_input,
)
from sdk.commands._observe import add_observe_options, observability


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def register(sub: Any) -> None:
    """Add the ``serve`` subcommand."""
    parser = sub.add_parser(
        "serve",
        help="serve the lock's tools to MCP clients (stdio or HTTP)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_host_options(parser)
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio", help="default: stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port (default: 8765; 0: any free port)")
    parser.add_argument("--project", default=None, help="the principal's project (or $STOCKADE_PROJECT)")
    parser.add_argument("--subject", default=None, help="the principal's subject (or $STOCKADE_SUBJECT)")
    parser.add_argument(
        "--print-client-config", action="store_true",
        help="print the client's config entry for this server (absolute command and --config) and exit",
    )  # fmt: skip
    parser.add_argument(
        "--client", choices=tuple(CLIENT_FILES), default="claude",
        help="with --print-client-config: the client's format (default: claude)",
    )  # fmt: skip
    parser.add_argument(
        "--tokens-file", "--tokens", dest="tokens", type=Path, default=None, metavar="FILE",
        help="HTTP bearer tokens file (stockade.tokens/1; default: <state-dir>/tokens.json when it exists, "
        "which `stockade tokens add` writes); a missing or unreadable file refuses to start",
    )  # fmt: skip
    parser.add_argument(
        "--oauth-issuer", default=None, metavar="URL", help="OAuth: the exact token issuer (iss)"
    )
    parser.add_argument(
        "--oauth-audience", default=None, metavar="AUD", help="OAuth: the audience tokens must name (aud)"
    )
    parser.add_argument(
        "--oauth-jwks", type=Path, default=None, metavar="FILE", help="OAuth: the issuer's public keys (JWKS)"
    )
    parser.add_argument(
        "--allow-origin", action="append", default=[], metavar="ORIGIN",
        help="an extra Origin accepted over HTTP (repeatable; loopback origins are always accepted)",
    )  # fmt: skip
    parser.add_argument(
        "--scope", default=None, metavar="ID",
        help="an unattended job: calls that would ask a person run only if this scope "
        "(`stockade scopes grant`) covers them, else are refused at once; nobody is asked, nothing is queued",
    )  # fmt: skip
    parser.add_argument(
        "--max-concurrency", type=_positive, default=max(2, (os.cpu_count() or 1) * 2), metavar="N",
        help="calls run at once; one more is refused with BUSY (default: CPU count x 2)",
    )  # fmt: skip
    parser.add_argument(
        "--max-calls-per-principal", type=_positive, default=None, metavar="N",
        help="calls one principal may run at once, waiting ones included (default: --max-concurrency / 2)",
    )  # fmt: skip
    parser.add_argument(
        "--max-pending-per-principal", type=_positive, default=16, metavar="N",
        help="queued approvals one principal may have pending; one more is APPROVAL_QUEUE_FULL (default: 16)",
    )  # fmt: skip
    limits = parser.add_argument_group("HTTP bounds (one client must not take the service)")
    limits.add_argument(
        "--max-connections", type=_positive, default=256, metavar="N",
        help="connections open at once, kept below RLIMIT_NOFILE; one more is closed (default: 256)",
    )  # fmt: skip
    limits.add_argument(
        "--request-timeout", type=_seconds, default=10.0, metavar="S",
        help="seconds for a request's head and body to arrive; slower connections are closed (default: 10)",
    )  # fmt: skip
    limits.add_argument(
        "--max-sessions", type=_positive, default=256, metavar="N",
        help="Streamable HTTP sessions open at once, all principals (default: 256)",
    )  # fmt: skip
    limits.add_argument(
        "--max-sessions-per-principal", type=_positive, default=8, metavar="N",
        help="sessions one principal may hold open; one more is HTTP 429 (default: 8)",
    )  # fmt: skip
    limits.add_argument(
        "--session-idle", type=_seconds, default=300.0, metavar="S",
        help="seconds after which a session with no request in flight expires (default: 300)",
    )  # fmt: skip
    limits.add_argument(
        "--max-streams-per-principal", type=_positive, default=4, metavar="N",
        help="subscriptions/listen streams one principal may hold open (default: 4; 256 in all)",
    )  # fmt: skip
    add_observe_options(parser)
    parser.set_defaults(func=run)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not (0 < value < 86400):  # also refuses NaN and infinities
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, got {text!r}")
    return value


# Where each client reads its entry (printed on stderr with the snippet).
CLIENT_FILES: Final = {
    "claude": "Claude Desktop's claude_desktop_config.json (Settings > Developer > Edit Config)",
    "vscode": ".vscode/mcp.json in the workspace (or the user's mcp.json: `MCP: Open User Configuration`)",
    "cursor": "~/.cursor/mcp.json (or .cursor/mcp.json in the project)",
}
_PATH_OPTIONS: Final = (("lock", "--lock"), ("state_dir", "--state-dir"), ("trusted_keys", "--trusted-keys"),
                        ("trusted_operator_keys", "--trusted-operator-keys"))


def _require_configuration(args: argparse.Namespace) -> None:
    """Refuse to guess: without a host config file and without ``--lock``, serve would read
    ``./stockade.lock`` relative to whatever directory a desktop client starts it in.

    Raises:
        UsageFailed: CONFIG_NOT_FOUND.
    """
    if getattr(args, "host_file", None) is None and "lock" not in getattr(args, "given", set()):
        raise UsageFailed(
            "CONFIG_NOT_FOUND",
            f"no host config file (stockade.host.toml) in {Path.cwd()} or the state directory, and no --lock",
            hint="pass --config /abs/path/stockade.host.toml (in the host's directory, "
            "`stockade serve --print-client-config --project P --subject S` prints a working entry)",
        )


def _stockade_command() -> list[str]:
    """The absolute command that runs this ``stockade`` (a desktop app's PATH lacks the venv)."""
    script = Path(sys.argv[0])
    if script.name == "stockade" and script.is_file():
        return [str(script.absolute())]
    beside = Path(sys.executable).parent / "stockade"  # the console script of this interpreter
    if beside.is_file():
        return [str(beside.absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "sdk.cli"]


def client_config(args: argparse.Namespace, principal: Principal) -> dict[str, Any]:
    """The ``--client`` config entry that starts this server from any directory."""
    command, *prefix = _stockade_command()
    serve = [*prefix, "serve"]
    settings = getattr(args, "host_file", None)
    if settings is not None:
        serve += ["--config", str(Path(settings.path).expanduser().absolute())]
    given: set[str] = getattr(args, "given", set())
    for name, flag in _PATH_OPTIONS:
        if name in given:
            serve += [flag, str(Path(getattr(args, name)).expanduser().absolute())]
    if "store" in given:
        serve += ["--store", str(args.store)]
    for flag in ("require_signatures", "unsafe_allow_unsigned"):
        if flag in given:
            serve.append("--" + flag.replace("_", "-"))
    serve += ["--project", principal.project, "--subject", principal.subject]
    entry: dict[str, Any] = {"command": command, "args": serve}
    if args.client == "vscode":
        return {"servers": {"stockade": {"type": "stdio", **entry}}}
    return {"mcpServers": {"stockade": entry}}


def _print_client_config(args: argparse.Namespace) -> int:
    if args.transport != "stdio":
        raise UsageFailed("USAGE", "--print-client-config prints a stdio entry", hint="drop --transport http")
    principal = _principal(args)
    assert principal is not None  # stdio always names one
    _require_configuration(args)
    print(json.dumps(client_config(args, principal), indent=2))
    print(f"stockade serve: paste this into {CLIENT_FILES[args.client]}", file=sys.stderr)
    return EXIT_OK


def _refuse_no_tools(app: Any, principal: Principal | None) -> None:
    """Refuse to serve an empty ``tools/list``: a client shows nothing and says nothing.

    Raises:
        UsageFailed: NO_TOOLS_SERVED.
    """
    host = app.host
    if len(host.registry) == 0:
        raise UsageFailed(
            "NO_TOOLS_SERVED", "the lock has no tools: serving it would list nothing",
            hint="add a package with `stockade lock add BUNDLE_DIR`",
        )  # fmt: skip
    if principal is not None and not app.visible_tools(principal):
        who = f"{principal.project} {principal.subject}"
        raise UsageFailed(
            "NO_TOOLS_SERVED",
            f"the policy in {app.options.state_dir} grants {who} none of the lock's "
            f"{len(host.registry)} tools",
            hint=f"grant one with `stockade policy grant-tool {who} TOOL@VERSION` (`stockade tools` lists "
            "them), or serve the state directory that has the grants (--config FILE or --state-dir DIR)",
        )


def _principal(args: argparse.Namespace) -> Principal | None:
    project = args.project or os.environ.get("STOCKADE_PROJECT")
    subject = args.subject or os.environ.get("STOCKADE_SUBJECT")
    if project and subject:
        return Principal(project=project, subject=subject)
    if args.transport == "stdio" or (args.tokens is None and args.oauth_issuer is None):
        raise UsageFailed(
            "PRINCIPAL_REQUIRED",
            "name the principal the server acts for",
            hint="pass --project and --subject (or set STOCKADE_PROJECT and STOCKADE_SUBJECT)",
        )
    return None


def run(args: argparse.Namespace) -> int:
    """Open the host and serve until the transport ends (traced and measured if asked to)."""
    with observability(args):
        return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    try:
        import anyio  # the optional extra stockade[mcp] brings these

        from host.mcp.limits import HttpLimits
        from host.mcp.server import ServeOptions, StockadeMCP
        from host.mcp.transport import check_bind, serve_http, serve_stdio
    except ImportError as exc:
        raise UsageFailed(
            "MCP_UNAVAILABLE",
            f"the MCP server needs the optional extra: {exc}",
            hint="pip install 'stockade[mcp]'",
        ) from None
    if args.print_client_config:
        return _print_client_config(args)
    _require_configuration(args)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="stockade serve: %(message)s")
    oauth = (args.oauth_issuer, args.oauth_audience, args.oauth_jwks)
    if any(o is not None for o in oauth) and (None in oauth or args.tokens is not None):
        raise UsageFailed(
            "OAUTH_OPTIONS",
            "OAuth mode needs --oauth-issuer, --oauth-audience and --oauth-jwks, and no --tokens-file",
            hint="see `stockade serve --help`",
        )
    if args.transport == "http" and args.tokens is None and args.oauth_issuer is None:
        configured = state_dir(args) / "tokens.json"  # where `stockade tokens add` writes
        if configured.exists():
            args.tokens = configured
    principal = _principal(args)
    verifier = _verifier(args) if args.transport == "http" else None
    if verifier is not None:
        principal = None  # each request's principal comes from its bearer token, never a default
    if args.transport == "http":
        with user_input("pass --tokens-file FILE, or bind to 127.0.0.1 (--host 127.0.0.1)"):
            check_bind(args.host, authenticated=verifier is not None)
    root = state_dir(args)
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    spec = getattr(args, "store", None) or "local"
    # One store (or audit log) for the whole serve: it stays open across lock generations.
    shared: Any = None
    if spec != "local":
        shared = open_store_spec(spec, **checkpoint_options(host_config(args, root)))
    audit = _local_audit(root) if shared is None else None
    try:
        app = StockadeMCP(
            lambda: _open(args, root, audit, shared),
            options=ServeOptions(
                state_dir=root,
                principal=principal,
                max_concurrency=args.max_concurrency,
                max_calls_per_principal=args.max_calls_per_principal,
                max_pending_per_principal=args.max_pending_per_principal,
                max_streams_per_principal=args.max_streams_per_principal,
                scope=args.scope,
            ),
        )
        try:
            _refuse_no_tools(app, principal)
            if args.transport == "stdio":
                anyio.run(serve_stdio, app, args.lock)
            else:
                anyio.run(
                    lambda: serve_http(
                        app, args.lock, host=args.host, port=args.port, verifier=verifier,
                        issuer=args.oauth_issuer, allowed_origins=args.allow_origin, limits=HttpLimits(
                            max_connections=args.max_connections, request_timeout_s=args.request_timeout,
                            max_sessions=args.max_sessions,
                            max_sessions_per_principal=args.max_sessions_per_principal,
                            session_idle_s=args.session_idle,
                        ),
                    )
                )  # fmt: skip
        finally:
            app.close()
    finally:
        (audit if audit is not None else shared).close()
    return EXIT_OK


def _verifier(args: argparse.Namespace) -> Any:
    """The bearer-token verifier of the HTTP transport, or ``None`` (no authentication)."""
    from host.mcp.oauth import JwtVerifier  # optional extra
    from host.mcp.transport import StockadeTokenVerifier

    if args.tokens is not None:
        return StockadeTokenVerifier(_token_file(args.tokens))
    if args.oauth_issuer is not None:
        return JwtVerifier(
            issuer=args.oauth_issuer,
            audience=args.oauth_audience,
            jwks_file=args.oauth_jwks,
            default_project=args.project or os.environ.get("STOCKADE_PROJECT") or None,
        )
    return None


def _token_file(path: Path) -> Any:
    """The tokens file, refused when missing or unreadable (every request would be 401).

    Raises:
        UsageFailed: TOKENS_UNAVAILABLE.
    """
    from host.errors import StockadeError
    from host.mcp.tokens import TokenFile

    path = path.expanduser()
    hint = (
        "create it with `stockade tokens add --project P --subject S` (it writes <state-dir>/tokens.json; "
        "--tokens-file FILE names another file, in both commands)"
    )
    if not path.is_file():
        raise UsageFailed("TOKENS_UNAVAILABLE", f"the tokens file {path} does not exist", hint=hint)
    tokens = TokenFile(path)
    try:
        count = len(tokens.entries())
    except (OSError, StockadeError) as exc:
        message = exc.message if isinstance(exc, StockadeError) else (exc.strerror or str(exc))
        raise UsageFailed(
            "TOKENS_UNAVAILABLE", f"cannot read the tokens file {path}: {message}",
            hint="fix its permissions (0600, yours) or recreate it with `stockade tokens add`",
        ) from None  # fmt: skip
    note = "" if count else "; it holds none, so every request is refused (401) until `stockade tokens add`"
    print(f"stockade serve: bearer tokens from {path} ({count} tokens){note}", file=sys.stderr, flush=True)
    return tokens


def _local_audit(root: Path) -> AuditLog:
    """The local store's audit log, opened before the host so it stays open across
    generations.

    Raises:
        StoreUnavailable: another host process (a second ``serve``) holds the state dir:
            the refusal a second local store gets, whose hint names the PostgreSQL store,
            rather than the audit log's own "open in another writer".
        AuditUnavailable: the audit log cannot be opened for another reason.
    """
    try:
        return AuditLog(root / "audit.log")
    except AuditUnavailable:
        check_state_dir_free(root)
        raise


def _open(args: argparse.Namespace, root: Path, audit: AuditLog | None, store: Any) -> Host:
    """Open (or reopen, on reload) the host; the audit log or the shared store (``--store
    postgresql://…``) stays open across generations."""
    # Say what start-up is doing on stderr, so a client's connect timeout is not spent in silence.
    print(f"stockade serve: opening {args.lock} (compiling packages, starting pinned MCP servers)",
          file=sys.stderr, flush=True)
    host = Host.open(
        args.lock,
        config=host_config(args, root),
        secrets=open_secrets(root),
        policy=FilePolicyEngine(root / "policy.json"),
        audit=audit,
        store=store,
        progress=_say_progress,
    )
    print(f"stockade serve: ready, {len(host.registry)} tools", file=sys.stderr, flush=True)
    return host


def _say_progress(event: ProgressEvent) -> None:
    if event.stage == "cached":
        print(f"stockade serve: package {event.name} loaded from the artifact cache ({event.done} of "
              f"{event.total})", file=sys.stderr, flush=True)
    elif event.stage == "compiling":
        print(f"stockade serve: compiling package {event.name} ({event.done + 1} of {event.total}; "
              "the first start may take a minute; `stockade lock verify` warms the cache ahead of it)",
              file=sys.stderr, flush=True)
