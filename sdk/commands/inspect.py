"""``stockade inspect BUNDLE_DIR|LOCK``: the capability report a reviewer reads.

For a bundle directory: the manifest and module are checked (manifest valid, module
digest as pinned). For a lock file: every digest, signature (``--trusted-keys``,
``--require-signatures``) and manifest is verified first, as a host would, and every
package is reported. Nothing runs and no host state is touched.

The report shows what each package may do: the hosts, ports, path prefixes and methods
it may reach; each credential by secret name, where it is injected (bearer, basic,
header, query) and for which hosts and paths; its limits; each tool's effect, risk,
permissions, timeout, rate limit and schemas; and the component's imports, judged by
the host's load-time checks (listing them compiles the component: seconds for a large
plugin; ``--no-imports`` skips it).

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
from typing import Any

from rich.console import Console
from rich.table import Table

from host.errors import ComponentRefused
from sdk.commands._common import EXIT_FAILED, EXIT_OK, cell, print_json, stderr_console, stdout_console
from sdk.commands.lockmcp import render_mcp_source
from sdk.review import bundle_report, lock_report

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
        "target", type=Path, metavar="BUNDLE_DIR|LOCK", help="a bundle directory or a lock file"
    )
    parser.add_argument(
        "--trusted-keys", type=Path, default=None, metavar="FILE", help="trusted keys (for a lock)"
    )
    parser.add_argument(
        "--require-signatures", action="store_true", help="refuse unsigned packages (for a lock)"
    )
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
            )
    refused = _first_refusal(report)
    if args.json:
        print_json({**report, "ok": refused is None, **({"error": refused.to_dict()} if refused else {})})
        return EXIT_OK if refused is None else EXIT_FAILED
    render(report, stdout_console())
    if refused is not None:
        raise refused
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


def render(report: Mapping[str, Any], console: Console) -> None:
    """Print a report as tables."""
    if report["kind"] == "lock":
        console.print(f"[bold]lock[/] {cell(report['path'])}  generation {report['generation']}")
        console.print(f"  digest   {report['digest']}\n  previous {report['previous']}")
    for package in report["packages"]:
        _render_package(package, console)
    for source in report.get("mcp", []):
        render_mcp_source(source, console)


def _render_package(p: Mapping[str, Any], console: Console) -> None:
    console.rule(f"[bold]{p['name']}@{p['version']}")
    if p["description"]:
        console.print(cell(p["description"]))
    sig = p["signature"]
    signed = (
        "n/a (bundle)" if sig is None else (f"verified, key {sig['key_id']}" if sig["signed"] else "unsigned")
    )
    console.print(f"bundle {cell(p['bundle'])}\nmanifest sha256 {p['manifest_sha256']}")
    if p.get("source"):
        console.print(f"source {cell(p['source'])}")
    console.print(f"module sha256   {p['module_sha256']}\nsignature       {signed}")
    console.print(_network_table(p["http"]))
    console.print(_credentials_table(p["http"]))
    console.print(_limits_table(p))
    console.print(_tools_table(p["tools"]))
    console.print(_schemas_table(p["tools"]))
    if p["component"] is not None:
        console.print(_imports_table(p["component"]))


class _Table(Table):
    """A table whose cells wrap instead of being cut (a reviewer must see every character)
    and whose cells are untrusted text: control characters and rich markup are escaped."""

    def add_row(self, *cells: Any, **kwargs: Any) -> None:
        super().add_row(*(cell(value) for value in cells), **kwargs)


def _table(title: str, *columns: str, lines: bool = False) -> _Table:
    table = _Table(title=cell(title), title_justify="left", show_lines=lines)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _network_table(http: Mapping[str, Any]) -> Table:
    table = _table(
        "network: reachable origins (nothing else)", "scheme://host:port", "path prefix", "methods"
    )
    for entry in http["allow"]:
        table.add_row(entry["origin"], entry["path_prefix"], ", ".join(entry["methods"]))
    if not http["allow"]:
        table.add_row("(none: no network)", "", "")
    return table


def _credentials_table(http: Mapping[str, Any]) -> Table:
    table = _table(
        "credentials injected by the host (never seen by the plugin)",
        "secret",
        "injected as",
        "hosts",
        "path prefixes",
        "required",
    )
    for c in http["credentials"]:
        required = "no (optional)" if c["optional"] else "yes"
        table.add_row(
            c["secret"], c["injected_as"], ", ".join(c["hosts"]), ", ".join(c["path_prefixes"]), required
        )
    if not http["credentials"]:
        table.add_row("(none)", "", "", "", "")
    return table


def _limits_table(p: Mapping[str, Any]) -> Table:
    table = _table("limits", "limit", "value", "unit")
    for name, value in p["limits"].items():
        table.add_row(f"limits.{name}", f"{value:,}", _LIMIT_UNITS.get(name, ""))
    for name in ("max_request_bytes", "max_response_bytes", "timeout_ms"):
        table.add_row(f"http.{name}", f"{p['http'][name]:,}", _LIMIT_UNITS.get(name, "ms"))
    return table


def _tools_table(tools: list[Mapping[str, Any]]) -> Table:
    table = _table("tools", "tool", "effect", "risk", "permissions", "timeout", "rate limit", lines=True)
    for t in tools:
        rate = t["rate_limit"]
        rate_text = f"{rate['per_minute']}/min, {rate['per_hour']}/h" if rate else "none"
        permissions = ", ".join(t["permissions"]) or "-"
        table.add_row(
            f"{t['name']}@{t['version']}",
            t["effect"],
            t["risk"],
            permissions,
            f"{t['timeout_s']} s",
            rate_text,
        )
    return table


def _schemas_table(tools: list[Mapping[str, Any]]) -> Table:
    table = _table("tool schemas (* = required)", "tool", "input", "output", lines=True)
    for t in tools:
        table.add_row(t["name"], t["input"], t["output"])
    return table


def _imports_table(component: Mapping[str, Any]) -> Table:
    verdict = "accepted" if component["accepted"] else f"REFUSED: {component['refusal']['message']}"
    table = _table(f"component imports ({verdict})", "interface", "functions")
    for item in component["imports"]:
        table.add_row(item["name"], ", ".join(item["functions"]) or "-")
    if not component["imports"]:
        table.add_row("(none)", "")
    return table
