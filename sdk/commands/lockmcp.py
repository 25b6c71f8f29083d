"""``stockade lock add-mcp DECL.json``: pin an external MCP server into the lock.

Starts the server once exactly as a host would (scrubbed environment, private working
directory, its own process group, secrets from the store under ``--state-dir``), lists
its tools and pins each one — name, description, input and output schema, annotations
— by digest into ``mcp/<name>.json`` next to the lock, as a new lock generation (signed
with ``--key``). ``--review TOOL=EFFECT[:RISK]`` records the reviewer's effect
(read, write, external, execute) and risk (low, medium, high) per tool; unreviewed tools
are ``external``/``high`` (every call asks), and a re-pin keeps earlier reviews.
``--schema TOOL=FILE`` pins a tighter input schema for one tool: a call must satisfy it
and the server's own. Schemas are checked against the external profile
(``stockade.schema-profile/external-1``); each pinned tool lists what it leaves
unbounded. Tools whose name or schema the profile refuses are listed with every reason
and kept in the pin as refused. The line ``N of M tools pinned`` is always printed; a
declaration that pins no tool exits 1 and writes nothing. Progress goes to stderr.
``--dry-run`` writes nothing and shows how the live server differs from the current pin
(the rug-pull check a host runs at open and at every restart).

Exit codes: 0 pinned (or nothing changed on --dry-run), 1 refused or no tool pinned,
3 --dry-run found drift.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from host.canonical import parse_json
from host.errors import InputInvalid, ManifestInvalid
from host.files import read_regular
from host.formats.manifest import Effect, Risk
from host.formats.mcppin import (
    MAX_DECLARATION_BYTES,
    PIN_FORMAT,
    McpDeclaration,
    McpPin,
    tool_unbounded,
)
from host.formats.schemaprofile import MAX_SCHEMA_BYTES
from host.mcpsource.pinning import pin_source
from sdk.commands._common import (
    DEFAULT_LOCK,
    EXIT_ESCALATION,
    EXIT_OK,
    CommandFailed,
    UsageFailed,
    add_state_dir,
    cell,
    open_secrets,
    print_json,
    state_dir,
    stdout_console,
)
from sdk.commands.sign import load_key
from sdk.review.lockfile import add_mcp, read_lock
from sdk.review.mcp import live_drift

__all__ = ["register_add_mcp"]


def register_add_mcp(inner: Any) -> None:
    """Add ``lock add-mcp`` to the ``lock`` subcommand's actions."""
    parser = inner.add_parser(
        "add-mcp",
        help="pin an external MCP server's tools (a new generation)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("declaration", type=Path, metavar="DECL.json", help="a stockade.mcp/1 declaration")
    parser.add_argument(
        "--review", action="append", default=[], metavar="TOOL=EFFECT[:RISK]",
        help="the reviewer's effect and risk of one tool (server name), e.g. search=read:low",
    )
    parser.add_argument(
        "--schema", action="append", default=[], metavar="TOOL=FILE",
        help="a tighter input schema (JSON file) for one tool (server name), kept in the pin",
    )
    parser.add_argument(
        "--key", type=Path, default=None, metavar="KEY.pem", help="sign the entry with this key"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="show drift from the current pin; write nothing"
    )
    parser.add_argument(
        "--lock", type=Path, default=DEFAULT_LOCK, help="lock file (default: ./stockade.lock)"
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    add_state_dir(parser)
    parser.set_defaults(func=run_add_mcp)


def _reviews(items: list[str]) -> dict[str, tuple[Effect, Risk]]:
    reviews: dict[str, tuple[Effect, Risk]] = {}
    for item in items:
        name, _, verdict = item.partition("=")
        effect, _, risk = verdict.partition(":")
        try:
            reviews[name] = (Effect(effect), Risk(risk or "high"))
        except ValueError:
            raise CommandFailed(
                "USAGE", f"--review {item!r}: expected TOOL=EFFECT[:RISK]",
                hint="effects: read, write, external, execute; risks: low, medium, high",
            ) from None
    return reviews


def _review_schemas(items: list[str]) -> dict[str, dict[str, Any]]:
    schemas: dict[str, dict[str, Any]] = {}
    for item in items:
        name, _, file = item.partition("=")
        if not name or not file:
            raise UsageFailed("USAGE", f"--schema {item!r}: expected TOOL=FILE")
        try:
            value = parse_json(read_regular(Path(file), MAX_SCHEMA_BYTES, what="review schema",
                                            error=ManifestInvalid), max_bytes=MAX_SCHEMA_BYTES)
        except InputInvalid as exc:
            raise UsageFailed("USAGE", f"--schema {item!r}: not strict JSON: {exc.message}") from None
        if not isinstance(value, dict):
            raise UsageFailed("USAGE", f"--schema {item!r}: a schema must be a JSON object")
        schemas[name] = value
    return schemas


def _current_pin(lock_path: Path, name: str) -> McpPin | None:
    lock = read_lock(lock_path)
    entry = next((m for m in lock.mcp if m.name == name), None) if lock is not None else None
    if entry is None:
        return None
    try:
        path = lock_path.resolve().parent / entry.pin
        data = read_regular(path, 1024 * 1024, what="MCP pin", error=ManifestInvalid)
        return McpPin.from_json(data)
    except ManifestInvalid:
        return None


def run_add_mcp(args: argparse.Namespace) -> int:
    """Pin (or, with --dry-run, compare) one MCP source."""
    decl = McpDeclaration.from_json(
        read_regular(args.declaration, MAX_DECLARATION_BYTES, what="MCP declaration", error=ManifestInvalid)
    )
    root = state_dir(args)
    secrets = open_secrets(root)
    current = _current_pin(args.lock, decl.name)
    if args.dry_run:
        drift = live_drift(decl, current or McpPin(format=PIN_FORMAT, source=decl, tools=()),
                           state_dir=root, secrets=secrets)
        rows = [d.to_dict() for d in drift]
        if args.json:
            print_json({"ok": True, "source": decl.name, "pinned": current is not None, "drift": rows})
        else:
            _print_drift(decl.name, rows)
        return EXIT_ESCALATION if rows else EXIT_OK
    reviews = {t.name: (t.effect, t.risk) for t in current.tools} if current is not None else {}
    reviews |= _reviews(args.review)
    tightened = {t.name: t.review_schema for t in current.tools if t.review_schema is not None} \
        if current is not None else {}
    tightened |= _review_schemas(args.schema)
    try:
        result = pin_source(decl, state_dir=root, secrets=secrets, review=reviews, review_schemas=tightened,
                            progress=lambda text: print(f"stockade: {text}", file=sys.stderr, flush=True))
    except ValueError as exc:
        raise CommandFailed("USAGE", str(exc)) from None
    refused = [r.model_dump(mode="json") for r in result.refused]
    if not result.pin.tools:
        reasons = "; ".join(f"{r['name']}: {' / '.join(r['reasons'])}" for r in refused[:8])
        raise CommandFailed(
            "MCP_NO_TOOLS",
            f"{result.summary()}: MCP source {decl.name} pins no tool, nothing was written"
            + (f" ({reasons})" if reasons else " (the server lists no tools)"),
            hint="See every reason with --json. The server's own schemas must fit the external profile "
                 "(docs/mcp-sources.md); --schema can tighten a schema, never loosen one.",
        )
    key = load_key(args.key) if args.key else None
    update = add_mcp(args.lock, result.pin, private_key=key)
    tools: list[dict[str, Any]] = [
             {"tool": t.tool, "remote": t.name, "effect": t.effect.value, "risk": t.risk.value,
              "digest": t.digest, "schema_profile": t.schema_profile,
              "tightened": t.review_schema is not None,
              "unbounded": tool_unbounded(t)}
             for t in result.pin.tools]
    if args.json:
        print_json({"ok": True, "lock": str(update.path), "generation": update.generation,
                    "digest": update.digest, "entry": update.entry.model_dump(mode="json"),
                    "summary": result.summary(), "pinned": len(result.pin.tools), "listed": result.listed,
                    "tools": tools, "refused": refused})
        return EXIT_OK
    console = stdout_console()
    console.print(f"pinned MCP source {cell(decl.name)}@{decl.version}: {update.path} is now "
                  f"generation {update.generation}")
    console.print(f"  pin       {update.entry.pin} (sha256 {update.entry.pin_sha256})")
    console.print(f"  signed    {'by key ' + update.entry.key_id if update.entry.key_id else 'no'}")
    for t in tools:
        console.print(f"  tool      {cell(t['tool'])} (server: {cell(t['remote'])})  effect {t['effect']}, "
                      f"risk {t['risk']}{', tightened schema' if t['tightened'] else ''}")
        for line in t["unbounded"]:
            console.print(f"              [dim]unbounded[/] {cell(line)}")
    for r in refused:
        for reason in r["reasons"]:
            console.print(f"  [yellow]refused[/]   {cell(r['name'])}: {cell(reason)}")
    console.print(result.summary())
    return EXIT_OK


def shown_value(value: Any) -> str:
    """A pinned or live value as its reader wrote it: text as is, anything else as JSON
    (``null``, ``false``, objects), never a Python repr (``None``, ``False``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _print_drift(name: str, rows: list[dict[str, Any]]) -> None:
    console = stdout_console()
    if not rows:
        console.print(f"MCP source {cell(name)}: the live tools match the pin")
        return
    for row in rows:
        fields = cell(", ".join(row["fields"]))
        console.print(f"[bold red]{row['change']}[/] {cell(name)}.{cell(row['tool'])} {fields}")
        for field in row["fields"]:
            if row["pinned"] is not None:
                console.print(f"  - pinned {field}: {cell(shown_value(row['pinned'].get(field)))}")
            if row["live"] is not None:
                console.print(f"  + live   {field}: {cell(shown_value(row['live'].get(field)))}")


def render_mcp_source(source: dict[str, Any], console: Any) -> None:
    """Print one MCP source of an inspect report (``stockade inspect LOCK``)."""
    from rich.table import Table

    title = f"MCP source {cell(source['name'])}@{source['version']}"
    transport = source["transport"]
    sandboxed = transport.get("sandbox") == "bwrap"
    kind = "the bubblewrap sandbox" if sandboxed else "a native process, not a sandbox"
    console.rule(f"[bold]{title}[/] ({kind})")
    stdio = transport["type"] == "stdio"
    where = " ".join([transport["command"], *transport["args"]]) if stdio else transport["url"]
    signed = f"key {source['signature']['key_id']}" if source["signature"]["signed"] else "unsigned"
    console.print(f"pin {cell(source['pin'])} sha256 {source['pin_sha256']} ({signed})")
    console.print(f"{transport['type']}: {cell(where)}")
    console.print(f"environment: {cell(', '.join(source['env']) or '(none)')}")
    for s in source["secrets"]:
        console.print(f"secret {cell(s['secret'])} → {cell(s['delivered_as'])}")
    limits = ", ".join(f"{k}={shown_value(v)}" for k, v in source["limits"].items())
    console.print(f"limits: {cell(limits)}")
    console.print(f"isolation: {cell(source['isolation'])}")
    table = Table(title="pinned tools", title_justify="left", show_lines=True)
    for column in ("tool", "server name", "effect", "risk", "digest", "unbounded", "description"):
        table.add_column(column, overflow="fold")
    for t in source["tools"]:
        table.add_row(cell(t["name"]), cell(t["remote"]), t["effect"], t["risk"], t["digest"][:16],
                      cell("\n".join(t["unbounded"]) or "-"), cell(t["description"]))
    console.print(table)
    console.print(f"{len(source['tools'])} of {len(source['tools']) + len(source['refused'])} tools pinned")
    for r in source["refused"]:
        for reason in r["reasons"]:
            console.print(f"[yellow]refused[/] {cell(r['name'])}: {cell(reason)}")
