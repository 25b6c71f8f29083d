"""``stockade inspect BUNDLE_DIR|LOCK|HOST_FILE``: the capability report a reviewer reads.

For a host config file (``*.toml``): its ``[[command]]`` entries, the commands
``exec.run`` may start, each with the binary it resolves to and that binary's sha256,
its workspace mode, network, environment, limits, effect and risk, and whether the
sandbox (bwrap) is on this machine's PATH (:mod:`sdk.review.command`).

For a bundle directory: the manifest and module are checked (manifest valid, module
digest as pinned). For a lock file: every digest, signature (``--trusted-keys``,
``--require-signatures``) and manifest is verified first, as a host would, and every
package is reported. Nothing runs and no host state is touched.

The report leads with what a reviewer decides on: package, version, signer, a risk
summary (tools by effect, which ask for approval, highest risk, network, secrets), then
tools, egress, credentials, limits and schemas. It shows what each package may do: the
hosts, ports, path prefixes and methods it may reach (and which are sent the call's trace
context); each credential by secret name,
where it is injected (bearer, basic, header, query) and for which hosts and paths; its
limits; each tool's effect, risk, permissions, timeout, rate limit and schemas; and the
component's imports, judged by the host's load-time checks (listing them compiles the
component: seconds for a large plugin; ``--no-imports`` skips it). WASI imports are
counted, not listed, unless ``--imports``. A section too wide for the terminal (or an
80-column CI log) is printed one field per line instead of as a wrapped table; without
a terminal there is no colour and no spinner.

A component the host would refuse when the lock is opened (a core module, a wrong
``call`` signature, a ``wasi:http`` or other disallowed import) is reported, then the
command fails with COMPONENT_REFUSED: the same check ``Host.open`` and ``stockade lock
add`` run (``--no-imports`` skips it). With ``--json`` the report then carries
``"ok": false`` and the ``error``.

Exit codes: 0 reported and every component accepted, 1 verification failed or a
component refused, 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from host.errors import ComponentRefused
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    add_unsigned_option,
    cell,
    print_json,
    signatures_waived,
    stderr_console,
    stdout_console,
)
from sdk.commands._layout import emit
from sdk.review.command import command_report, is_host_file
from sdk.review.report import bundle_report, lock_report

if TYPE_CHECKING:
    from rich.console import Console

_LIMIT_UNITS = {
    "fuel": "fuel units",
    "memory_bytes": "bytes",
    "timeout_ms": "ms",
    "max_http_requests": "requests per call",
    "max_log_bytes": "bytes",
    "max_request_bytes": "bytes",
    "max_response_bytes": "bytes",
}


def register(sub: Any) -> None:
    """Add the ``inspect`` subcommand."""
    parser = sub.add_parser(
        "inspect",
        help="capability report of a bundle or every package of a lock",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "target", type=Path, metavar="BUNDLE_DIR|LOCK|HOST_FILE",
        help="a bundle directory, a lock file, or a host config file (its [[command]] entries)",
    )
    parser.add_argument(
        "--trusted-keys", type=Path, default=None, metavar="FILE", help="trusted keys (for a lock)"
    )
    parser.add_argument(
        "--require-signatures", action="store_true", help="refuse unsigned packages (for a lock)"
    )
    add_unsigned_option(parser)
    parser.add_argument("--imports", action="store_true", help="list every WASI import (by default: a count)")
    parser.add_argument(
        "--no-imports", action="store_true", help="do not compile the component to list imports"
    )
    parser.add_argument(
        "--json", action="store_true", help="machine-readable report (format stockade.report/1)"
    )
    parser.set_defaults(func=run)


@contextlib.contextmanager
def _status(message: str, enabled: bool) -> Iterator[None]:
    console = stderr_console()
    if not enabled or not console.is_terminal:
        yield
        return
    with console.status(message):
        yield


def run(args: argparse.Namespace) -> int:
    """Build the report and print it."""
    if is_host_file(args.target):
        return _commands(args)
    imports = not args.no_imports
    with _status("verifying and compiling components to list their imports", imports and not args.json):
        if args.target.is_dir():
            report = bundle_report(args.target, imports=imports)
        else:
            report = lock_report(
                args.target,
                trusted_keys=args.trusted_keys,
                require_signatures=args.require_signatures,
                imports=imports,
                unsafe_allow_unsigned=signatures_waived(args),
            )
    refused = _first_refusal(report)
    if args.json:
        print_json({**report, "ok": refused is None, **({"error": refused.to_dict()} if refused else {})})
        return EXIT_OK if refused is None else EXIT_FAILED
    render(report, stdout_console(), imports=args.imports)
    if refused is not None:
        raise refused
    return EXIT_OK


def _commands(args: argparse.Namespace) -> int:
    """The ``[[command]]`` report of a host file."""
    report = command_report(args.target)
    if args.json:
        print_json(report)
        return EXIT_OK
    console = stdout_console()
    sandbox = report["sandbox"]
    tool = report["tool"] or "none (no workspace)"
    console.print(f"[bold]host file[/] {cell(report['host_file'])}: tool {tool}")
    bwrap = sandbox["bwrap"] or "NOT FOUND: every exec.run call is SANDBOX_UNAVAILABLE"
    console.print(f"    bwrap {cell(bwrap)}")
    if sandbox["unsafe_exec_without_sandbox"]:
        console.print("    [bold red]unsafe_exec_without_sandbox[/]: commands run bare when bwrap is missing")
    rows = [
        (c["name"], c["binary"], (c["binary_sha256"] or "MISSING")[:16], c["workspace"], c["network"],
         f"{c['max_timeout_ms']} ms", f"{c['effect']}/{c['risk']}", " ".join(sorted(c["env"])) or "-")
        for c in report["commands"]
    ]  # fmt: skip
    columns = ("name", "binary", "sha256", "workspace", "network", "timeout", "effect/risk", "env")
    emit(console, "commands", columns, rows)
    return EXIT_OK


def _first_refusal(report: Mapping[str, Any]) -> ComponentRefused | None:
    """The host's refusal of the first refused component, as the error the command fails with."""
    for package in report["packages"]:
        component = package["component"]
        if component is not None and not component["accepted"]:
            name = package["name"]
            return ComponentRefused(
                f"package {name}@{package['version']}: {component['refusal']['message']}",
                package=name,
                hint="Host.open refuses this component; rebuild it for the stockade:plugin world.",
            )
    return None


def render(report: Mapping[str, Any], console: Console, *, imports: bool = False) -> None:
    """Print a report for people: what a reviewer decides on first, details after.

    Sections that would wrap in the console's width are printed one field per line
    (``sdk.commands._layout``); WASI imports are a count unless ``imports``.
    """
    if report["kind"] == "lock":
        console.print(f"lock {cell(report['path'])}  generation {report['generation']}", highlight=False)
        console.print(f"  digest   {report['digest']}\n  previous {report['previous']}", highlight=False)
    for package in report["packages"]:
        _render_package(package, console, imports=imports)
    if report.get("mcp"):  # lockmcp imports the MCP client stack: only for a lock with sources
        from sdk.commands.lockmcp import render_mcp_source

        for source in report["mcp"]:
            render_mcp_source(source, console)


_RISKS = ("low", "medium", "high", "critical")


def summary_lines(p: Mapping[str, Any]) -> list[str]:
    """The risk summary of one package: the facts a reviewer decides on, one per line."""
    tools = p["tools"]
    effects: dict[str, int] = {}
    for tool in tools:
        effects[tool["effect"]] = effects.get(tool["effect"], 0) + 1
    asking = [t["name"] for t in tools if t["effect"] != "read"]
    risk = max((t["risk"] for t in tools), key=_RISKS.index, default="-")
    allow = p["http"]["allow"]
    flags = [
        label
        for label, hit in (
            ("wildcard hosts", any(e["host"].startswith("*.") for e in allow)),
            ("plain http", any(e["scheme"] == "http" for e in allow)),
            ("non-default ports", any(e["origin"].rsplit(":", 1)[1] not in ("443", "80") for e in allow)),
            ("all paths", any(e["path_prefix"] in ("", "/") for e in allow)),
            ("trace context sent", any(e.get("propagate_trace") for e in allow)),
        )
        if hit
    ]
    network = f"{len(allow)} origin(s)" + (f" ({', '.join(flags)})" if flags else "") if allow else "none"
    secrets = sorted({c["secret"] for c in p["http"]["credentials"]})
    reads = p.get("workspace_read") or []
    return [
        f"tools        {len(tools)}: " + ", ".join(f"{n} {e}" for e, n in sorted(effects.items())),
        f"approval     {', '.join(asking) if asking else 'none by default (every tool is read)'}",
        f"highest risk {risk}",
        f"network      {network}",
        f"secrets      {', '.join(secrets) if secrets else 'none'}",
        f"workspace    {'read-only: ' + ', '.join(reads) if reads else 'none'}",
    ]


def _signer(p: Mapping[str, Any]) -> str:
    sig = p["signature"]
    if sig is None:
        return "n/a (a bundle; signatures are checked in a lock)"
    return f"key {sig['key_id']} (verified)" if sig["signed"] else "UNSIGNED"


def _render_package(p: Mapping[str, Any], console: Console, *, imports: bool) -> None:
    console.rule(cell(f"{p['name']}@{p['version']}"))
    if p["description"]:
        console.print(cell(p["description"]), highlight=False)
    console.print(f"signer       {cell(_signer(p))}", highlight=False)
    for line in summary_lines(p):
        console.print(cell(line), highlight=False)
    emit(console, "tools", ("tool", "effect", "risk", "permissions", "timeout", "rate limit"), _tool_rows(p))
    emit(
        console,
        "egress: reachable origins (nothing else)",
        ("scheme://host:port", "path prefix", "methods", "trace context"),
        _egress_rows(p),
    )
    emit(
        console,
        "credentials injected by the host (never seen by the plugin)",
        ("secret", "injected as", "hosts", "path prefixes", "required"),
        _credential_rows(p),
    )
    emit(console, "limits", ("limit", "value", "unit"), _limit_rows(p))
    emit(
        console,
        "tool schemas (* = required)",
        ("tool", "input", "output"),
        [(t["name"], t["input"], t["output"]) for t in p["tools"]],
    )
    for t in p["tools"]:  # whole digests, never cut: a person compares them with `policy explain`
        line = f"binding  {cell(t['name'])}@{cell(t['version'])} {t['binding_digest']}"
        console.print(line, highlight=False)
    console.print(f"bundle          {cell(p['bundle'])}", highlight=False)
    if p.get("source"):
        console.print(f"source          {cell(p['source'])}", highlight=False)
    console.print(
        f"manifest sha256 {p['manifest_sha256']}\nmodule sha256   {p['module_sha256']}", highlight=False
    )
    if p["component"] is not None:
        _render_component(p["component"], console, imports=imports)


def _tool_rows(p: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    rows = []
    for t in p["tools"]:
        rate = t["rate_limit"]
        rate_text = f"{rate['per_minute']}/min, {rate['per_hour']}/h" if rate else "none"
        rows.append(
            (
                f"{t['name']}@{t['version']}",
                t["effect"],
                t["risk"],
                ", ".join(t["permissions"]) or "-",
                f"{t['timeout_s']} s",
                rate_text,
            )
        )
    return rows


def _egress_rows(p: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    rows = [
        (e["origin"], e["path_prefix"], ", ".join(e["methods"]), "sent" if e.get("propagate_trace") else "-")
        for e in p["http"]["allow"]
    ]
    return rows


def _injected_as(c: Mapping[str, Any]) -> str:
    """The location, and for an OAuth mapping who refreshes it, from where, for which scopes."""
    oauth = c.get("oauth")
    if not oauth:
        return str(c["injected_as"])
    scopes = " ".join(oauth["scopes"]) or "(none)"
    return (
        f"{c['injected_as']}; oauth {oauth['grant']} refreshed by the host at {oauth['token_url']}, "
        f"scopes {scopes}, client secret {oauth['client']}"
    )


def _credential_rows(p: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    rows = [
        (
            c["secret"],
            _injected_as(c),
            ", ".join(c["hosts"]),
            ", ".join(c["path_prefixes"]),
            "no (optional)" if c["optional"] else "yes",
        )
        for c in p["http"]["credentials"]
    ]
    return rows


def _limit_rows(p: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    rows = [
        (f"limits.{name}", f"{value:,}", _LIMIT_UNITS.get(name, "")) for name, value in p["limits"].items()
    ]
    rows += [
        (f"http.{name}", f"{p['http'][name]:,}", _LIMIT_UNITS.get(name, "ms"))
        for name in ("max_request_bytes", "max_response_bytes", "timeout_ms")
    ]
    return rows


def _render_component(component: Mapping[str, Any], console: Console, *, imports: bool) -> None:
    verdict = "accepted" if component["accepted"] else f"REFUSED: {component['refusal']['message']}"
    listed = component["imports"]
    wasi = [item for item in listed if str(item["name"]).startswith("wasi:")]
    other = [item for item in listed if not str(item["name"]).startswith("wasi:")]
    console.print(f"component    {cell(verdict)}", highlight=False)
    shown = listed if imports else other
    emit(
        console,
        "component imports",
        ("interface", "functions"),
        [(item["name"], ", ".join(item["functions"]) or "-") for item in shown],
    )
    if wasi and not imports:
        functions = sum(len(item["functions"]) for item in wasi)
        console.print(
            f"WASI imports: {len(wasi)} interfaces, {functions} functions "
            "(linked, granting nothing; --imports lists them)",
            highlight=False,
        )
