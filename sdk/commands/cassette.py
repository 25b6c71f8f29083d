"""``stockade cassette verify|show FILE``: check or list an HTTP cassette (``stockade.cassette/1``).

``verify`` parses the cassette (format, fields, body digests, the 16 MiB ceiling) and
scans it for credential-shaped strings (auth schemes with a token, JWTs, well-known key
prefixes), credential-like headers or query parameters that are not placeholders, and
unexpected placeholders (``[REDACTED]``; with ``--bundle DIR``, a ``<secret:NAME>`` the
manifest does not declare, and a cassette of another package). Run it before committing
a cassette. ``show`` lists the interactions: method, URL, status, encoding, body sizes.

Exit codes: 0 no finding (verify) or listed (show); 1 invalid or findings; 2 usage error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from host.errors import CassetteInvalid
from host.formats.cassette import Cassette
from sdk._cassettecheck import check_cassette
from sdk.bundle import read_bundle
from sdk.commands._common import (
    EXIT_FAILED,
    EXIT_OK,
    CommandFailed,
    add_verb,
    cell,
    print_json,
    stdout_console,
)


def register(sub: Any) -> None:
    """Add the ``cassette`` subcommand."""
    parser = sub.add_parser(
        "cassette",
        help="verify or show an HTTP cassette recorded by the test harness",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    verify = add_verb(
        verbs, "verify", "check format, size, credential-shaped strings and placeholders", run_verify
    )
    verify.add_argument("file", type=Path, metavar="FILE")
    verify.add_argument("--bundle", type=Path, default=None, help="the package's bundle, to check names")
    show = add_verb(verbs, "show", "list the interactions of a cassette", run_show)
    show.add_argument("file", type=Path, metavar="FILE")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CommandFailed("CASSETTE_INVALID", f"cannot read {path}: {exc.strerror}") from None


def run_verify(args: argparse.Namespace) -> int:
    """Print every finding; 1 if there is any."""
    data = _read(args.file)
    declared = None
    if args.bundle is not None:
        bundle = read_bundle(args.bundle)
        declared = [c.secret for c in bundle.manifest.http.credentials]
        cassette = Cassette.from_bytes(data)
        if cassette.package != bundle.manifest.package.name:
            raise CassetteInvalid(
                f"{args.file} was recorded for package {cassette.package!r}, not "
                f"{bundle.manifest.package.name!r}", reason="wrong_package",
            )  # fmt: skip
    findings = check_cassette(data, declared_secrets=declared)
    if args.json:
        print_json({"ok": not findings, "findings": [
            {"interaction": f.interaction, "where": f.where, "problem": f.problem} for f in findings
        ]})  # fmt: skip
        return EXIT_FAILED if findings else EXIT_OK
    console = stdout_console()
    for finding in findings:
        console.print(f"interaction {finding.interaction}: {cell(finding.where)}: {cell(finding.problem)}")
    verdict = f"{len(findings)} finding(s)" if findings else "ok, no finding"
    console.print(f"{cell(args.file)}: {verdict}", soft_wrap=True)
    return EXIT_FAILED if findings else EXIT_OK


def run_show(args: argparse.Namespace) -> int:
    """List the interactions."""
    cassette = Cassette.from_bytes(_read(args.file))
    rows = [
        {"method": i.request.method, "url": i.request.url, "status": i.response.status,
         "content_encoding": i.response.content_encoding, "request_bytes": len(i.request.content),
         "response_bytes": len(i.response.content)}
        for i in cassette.interactions
    ]  # fmt: skip
    if args.json:
        print_json({"ok": True, "package": cassette.package, "version": cassette.version,
                    "manifest_sha256": cassette.manifest_sha256, "interactions": rows})  # fmt: skip
        return EXIT_OK
    console = stdout_console()
    console.print(f"{cell(cassette.package)}-{cell(cassette.version)}: {len(rows)} interaction(s)")
    for index, row in enumerate(rows):
        encoding = "" if row["content_encoding"] == "identity" else f" ({row['content_encoding']})"
        console.print(
            f"{index:>3} {cell(row['method'])} {cell(row['url'])} → {row['status']}{encoding}, "
            f"{row['request_bytes']} B sent, {row['response_bytes']} B received"
        )
    return EXIT_OK
