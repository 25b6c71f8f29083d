"""``stockade secrets init-key|set|list|delete|oauth-login``: the encrypted secrets store.

Values are read from standard input or a hidden prompt, never from the command line
(argv is visible to other users through ``ps``), and are never printed. ``list`` shows
names and dates only. The store is ``<state-dir>/secrets.json``; the master key comes
from ``STOCKADE_MASTER_KEY`` or ``<state-dir>/master.key`` (mode 0600), which
``secrets init-key`` creates.

Example::

    stockade secrets init-key
    printf '%s' "$TOKEN" | stockade secrets set tracker_token --project p --subject alice

Exit codes: 0 ok, 1 refused (store unavailable, no such secret), 2 usage error (a bad
name or a value that is too short, too long or holds control characters).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any

from rich.table import Table

from host.errors import SecretsUnavailable
from host.secrets.store import MAX_VALUE_BYTES, MIN_VALUE_CHARS, SecretsStore, generate_key_file
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    CommandFailed,
    UsageFailed,
    add_state_dir,
    open_secrets,
    print_json,
    state_dir,
    stdout_console,
    user_input,
)


def register(sub: Any) -> None:
    """Add the ``secrets`` subcommand."""
    parser = sub.add_parser(
        "secrets",
        help="manage encrypted secrets",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inner = parser.add_subparsers(dest="secrets_command", metavar="ACTION", required=True)
    init = inner.add_parser("init-key", help="create <state-dir>/master.key (mode 0600)")
    add_state_dir(init)
    init.add_argument("--json", action="store_true", help="machine-readable output")
    init.set_defaults(func=run_init_key)
    for name, helptext, func in (
        ("set", "store a secret read from stdin or a hidden prompt (never from argv)", run_set),
        ("list", "list secret names and dates (never values)", run_list),
        ("delete", "delete a secret", run_delete),
    ):
        action = inner.add_parser(name, help=helptext, description=helptext)
        if name != "list":
            action.add_argument("name", help="secret name, e.g. tracker_token (^[a-z][a-z0-9_]{0,63}$)")
        action.add_argument("--project", required=True, help="project (scope) of the secret")
        action.add_argument("--subject", required=True, help="subject (principal) of the secret")
        action.add_argument("--json", action="store_true", help="machine-readable output")
        add_state_dir(action)
        action.set_defaults(func=func)
    register_oauth_login(inner)


def _store(args: argparse.Namespace) -> SecretsStore:
    root = state_dir(args)
    store = open_secrets(root)
    if store is None:
        raise SecretsUnavailable(
            f"no master key: STOCKADE_MASTER_KEY is not set and {root / 'master.key'} does not exist",
            hint="create one with `stockade secrets init-key` (or set STOCKADE_MASTER_KEY)",
        )
    return store


def run_init_key(args: argparse.Namespace) -> int:
    """Create a new master key file; refuses to overwrite one."""
    path = state_dir(args) / "master.key"
    if os.path.lexists(path):
        raise CommandFailed(
            "KEY_EXISTS",
            f"{path} exists; refusing to overwrite a master key",
            hint="a new key would make every stored secret unreadable; keep the existing one",
        )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    generate_key_file(path)
    if args.json:
        print_json({"ok": True, "key_file": str(path)})
    else:
        print(f"created {path} (mode 0600). Back it up: without it the secrets cannot be read.")
    return EXIT_OK


def _read_value() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("secret value (hidden): ")
    data = sys.stdin.read(MAX_VALUE_BYTES + 2)  # bounded: a value is at most 64 KiB
    return data.removesuffix("\n").removesuffix("\r")


def run_set(args: argparse.Namespace) -> int:
    """Store one secret. The value is never printed, also not in errors."""
    store = _store(args)
    value = _read_value()
    if not value:
        raise UsageFailed(
            "SECRET_EMPTY", "empty secret value; nothing stored", hint="pipe the value on stdin"
        )
    try:
        store.set(args.project, args.subject, args.name, value)
    except ValueError as exc:
        # host.secrets.store never puts the value into its messages.
        raise UsageFailed(
            "SECRET_REFUSED",
            f"{exc}; nothing stored",
            hint=f"use {MIN_VALUE_CHARS} characters to {MAX_VALUE_BYTES} bytes, no control characters",
        ) from None
    if args.json:
        print_json({"ok": True, "name": args.name, "project": args.project, "subject": args.subject})
    else:
        print(f"stored {args.name} for {args.subject} in {args.project}")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    """List names and metadata."""
    with user_input("see `stockade secrets list --help`"):
        infos = _store(args).list(args.project, args.subject)
    rows = [{"name": i.name, "created_at": str(i.created_at), "updated_at": str(i.updated_at)} for i in infos]
    if args.json:
        print_json(rows)
        return EXIT_OK
    table = Table(title=f"secrets of {args.subject} in {args.project}")
    for column in ("name", "created", "updated"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], row["created_at"], row["updated_at"])
    stdout_console().print(table)
    return EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    """Delete one secret; 1 if it did not exist."""
    with user_input("see `stockade secrets rm --help`"):
        removed = _store(args).delete(args.project, args.subject, args.name)
    if args.json:
        print_json({"ok": removed, "name": args.name})
    else:
        print(f"deleted {args.name}" if removed else f"no secret named {args.name}")
    return EXIT_OK if removed else EXIT_FAILED


def register_oauth_login(inner: Any) -> None:
    """Add ``secrets oauth-login``."""
    action = inner.add_parser(
        "oauth-login",
        help="log in once for an OAuth credential (authorization code + PKCE, or --device)",
        description="Run the OAuth login for a credential mapping's secret and store the tokens "
        "(stockade.oauth-token/1). The declaration comes from --manifest (the mapping whose "
        "secret is NAME) or from the flags.",
    )
    action.add_argument("name", help="the mapping's secret name")
    action.add_argument("--project", required=True, help="project (scope) of the secret")
    action.add_argument("--subject", required=True, help="subject (principal) of the secret")
    action.add_argument("--manifest", help="a bundle's manifest.json declaring the mapping")
    action.add_argument("--device", action="store_true", help="device authorization grant (RFC 8628)")
    action.add_argument("--no-browser", action="store_true", help="print the URL instead of opening it")
    action.add_argument("--ca-file", help="extra trusted CA bundle for the authorization server")
    for flag in ("--token-url", "--authorize-url", "--device-url", "--client"):
        action.add_argument(flag, help="override the manifest's oauth field")
    action.add_argument("--scope", action="append", default=None, help="a scope (repeatable)")
    action.add_argument("--json", action="store_true", help="machine-readable output")
    add_state_dir(action)
    action.set_defaults(func=run_oauth_login)


def run_oauth_login(args: argparse.Namespace) -> int:
    """Log in, then store the token state; prints names and expiry, never a value."""
    from pathlib import Path

    from host.egress.oauth import ClientSecret, TokenEndpoint
    from host.egress.policy import system_resolver
    from sdk.oauthlogin import LoginFailed, login_with_device, login_with_pkce

    spec, client_name = _login_spec(args)
    store = _store(args)
    stored = store.get(args.project, args.subject, client_name)
    if stored is None:
        hint = (
            f"store it: `stockade secrets set {client_name} --project {args.project} --subject "
            f'{args.subject}` with {{"client_id": ..., "client_secret": ...}} on stdin'
        )
        message = f"client secret {client_name!r} is not stored"
        raise CommandFailed("CLIENT_SECRET_MISSING", message, hint=hint)
    with user_input("the client secret must be JSON with client_id and client_secret"):
        client = ClientSecret.from_secret(stored)
    ca_file = Path(args.ca_file) if args.ca_file else None
    endpoint = TokenEndpoint(resolver=system_resolver, ca_file=ca_file)
    try:
        if args.device:
            state = login_with_device(spec, client, endpoint=endpoint, show=_show_device)
        else:
            state = login_with_pkce(spec, client, endpoint=endpoint, open_url=_opener(args.no_browser))
    except LoginFailed as exc:
        hint = "check the client and the URLs, then retry"
        raise CommandFailed("OAUTH_LOGIN_FAILED", str(exc), hint=hint) from None
    store.set(args.project, args.subject, args.name, state.to_secret())
    if args.json:
        print_json({"ok": True, "name": args.name, "expires_at": state.expires_at,
                    "refresh_token": state.refresh_token is not None})  # fmt: skip
    else:
        print(f"stored {args.name} for {args.subject} in {args.project} (expires at {state.expires_at})")
    return EXIT_OK


def _login_spec(args: argparse.Namespace) -> tuple[Any, str]:
    from pathlib import Path

    from host.formats.manifest import PackageManifest
    from sdk.oauthlogin import LoginSpec

    fields: dict[str, Any] = {"token_url": None, "authorize_url": None, "device_url": None, "scopes": ()}
    client = None
    if args.manifest:
        manifest = PackageManifest.from_json(Path(args.manifest).read_bytes())
        mappings = manifest.http.credentials if manifest.http else ()
        found = [c.oauth for c in mappings if c.secret == args.name]
        if not found or found[0] is None:
            message = f"{args.manifest} declares no oauth mapping for {args.name!r}"
            raise UsageFailed("NO_OAUTH_MAPPING", message)
        oauth = found[0]
        fields = {"token_url": oauth.token_url, "authorize_url": oauth.authorize_url,
                  "device_url": oauth.device_url, "scopes": tuple(oauth.scopes)}  # fmt: skip
        client = oauth.client
    for key in ("token_url", "authorize_url", "device_url"):
        if getattr(args, key):
            fields[key] = getattr(args, key)
    if args.scope:
        fields["scopes"] = tuple(args.scope)
    client = args.client or client
    if not fields["token_url"] or not client:
        raise UsageFailed("USAGE", "need --manifest, or --token-url and --client")
    return LoginSpec(**fields), client


def _opener(no_browser: bool) -> Any:
    def open_url(url: str) -> None:
        print(f"Open this URL to authorize:\n  {url}", file=sys.stderr)
        if not no_browser:
            import webbrowser

            webbrowser.open(url)

    return open_url


def _show_device(url: str, user_code: str) -> None:
    print(f"Open {url} and enter the code {user_code}", file=sys.stderr)
