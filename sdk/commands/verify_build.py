"""``stockade verify-build BUNDLE|PACKAGE --source DIR``: does this source build that module?

Rebuilds the project in ``DIR`` with an empty, temporary build cache (nothing cached on
this machine is reused; the pinned JavaScript toolchain is used from the per-user cache,
checked against its pins) into a temporary directory, and compares the result with the
target's digests:

- ``BUNDLE`` is a bundle directory (``dist/<name>-<version>``); ``PACKAGE`` is the name of
  a package in ``--lock`` (default ``./stockade.lock``), whose pinned digests are used.
- ``module`` and ``manifest`` are the sha256 of ``module.wasm`` and ``manifest.json``;
  ``source`` and ``toolchain`` compare what the bundle's ``build.json`` records (written
  by ``stockade build``) with what this rebuild used, when the bundle has one.

When the modules differ, the report names the sections that differ and says whether
only the pre-initialized memory snapshot differs (core-module ``data`` and ``global``
sections). The snapshot holds the plugin's own compiled code too (componentize-py and
componentize-js run the plugin's top level at build time), so a changed source and
build-time randomness both show there; the ``source`` row tells them apart. See
docs/authors.md, "Reproducible builds", for what the toolchains still record.

Exit codes: 0 the rebuilt module and manifest are byte-identical to the target's, 1 they
differ, 2 usage error (no such bundle or package). ``--json`` prints the report as one
JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from sdk.author._wasmsections import differing_parts
from sdk.author.build import PROVENANCE_FILE, BundleLocked, build_project
from sdk.commands._common import DEFAULT_LOCK, EXIT_FAILED, EXIT_OK, UsageFailed, print_json
from sdk.commands._progress import author_progress
from sdk.review.lockfile import read_lock


def register(sub: Any) -> None:
    """Add the ``verify-build`` subcommand."""
    parser = sub.add_parser(
        "verify-build",
        help="rebuild a project in a clean cache and compare with a bundle or locked package",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", help="bundle directory, or the name of a package in --lock")
    parser.add_argument("--source", type=Path, required=True, help="the project directory to rebuild")
    parser.add_argument("--lock", type=Path, default=DEFAULT_LOCK, help="lock file for a package name")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_provenance(bundle: Path) -> dict[str, Any] | None:
    try:
        value = json.loads((bundle / PROVENANCE_FILE).read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _target(args: argparse.Namespace) -> dict[str, Any]:
    """The expected digests, the module bytes when available, and the recorded provenance."""
    path = Path(args.target)
    if (path / "module.wasm").is_file() and (path / "manifest.json").is_file():
        module = (path / "module.wasm").read_bytes()
        return {
            "target": str(path),
            "module_sha256": _sha256(module),
            "manifest_sha256": _sha256((path / "manifest.json").read_bytes()),
            "module": module,
            "provenance": _read_provenance(path),
        }
    lock = read_lock(args.lock) if args.lock.is_file() else None
    entry = next((p for p in lock.packages if p.name == args.target), None) if lock is not None else None
    if entry is None:
        where = f"in {args.lock}" if lock is not None else f"(no lock at {args.lock})"
        raise UsageFailed(
            "VERIFY_TARGET_NOT_FOUND",
            f"{args.target} is neither a bundle directory (manifest.json and module.wasm) "
            f"nor a package {where}",
            hint="name a bundle directory (dist/NAME-VERSION) or a package of the lock (--lock FILE)",
        )
    bundle = args.lock.parent / entry.bundle
    module_path = bundle / "module.wasm"
    locked_module = module_path.read_bytes() if module_path.is_file() else None
    if locked_module is not None and _sha256(locked_module) != entry.module_sha256:
        locked_module = None  # not the locked module: nothing to compare section by section
    return {
        "target": f"{args.lock}:{entry.name}",
        "module_sha256": entry.module_sha256,
        "manifest_sha256": entry.manifest_sha256,
        "module": locked_module,
        "provenance": _read_provenance(bundle),
    }


def _check(what: str, expected: object, rebuilt: object) -> dict[str, Any]:
    return {"what": what, "expected": expected, "rebuilt": rebuilt, "match": expected == rebuilt}


def verify(args: argparse.Namespace) -> dict[str, Any]:
    """Rebuild ``args.source`` in a clean cache and compare it with ``args.target``."""
    target = _target(args)
    with tempfile.TemporaryDirectory(prefix="stockade-verify-build-") as tmp:
        with author_progress(enabled=not args.json) as (on_build, _):
            try:
                result = build_project(
                    args.source, out_dir=Path(tmp) / "out", cache_dir=Path(tmp) / "cache", progress=on_build
                )
            except BundleLocked as exc:  # a lock in the working directory pinning the temp path: a bug
                raise RuntimeError(str(exc)) from exc
        rebuilt_module = result.module_path.read_bytes()
        rebuilt_manifest = result.manifest_path.read_bytes()
    built = result.provenance
    checks = [
        _check("module", target["module_sha256"], result.module_sha256),
        _check("manifest", target["manifest_sha256"], _sha256(rebuilt_manifest)),
    ]
    recorded = target["provenance"]
    if recorded is not None:
        checks.append(_check("source", recorded.get("source_sha256"), built.get("source_sha256")))
        checks.append(_check("toolchain", recorded.get("toolchain"), built.get("toolchain")))
    report: dict[str, Any] = {
        "ok": checks[0]["match"] and checks[1]["match"],
        "target": target["target"],
        "source": str(args.source),
        "checks": checks,
        "provenance_recorded": recorded is not None,
    }
    if not checks[0]["match"] and target["module"] is not None:
        parts, snapshot_only = differing_parts(target["module"], rebuilt_module)
        report["module_difference"] = {"parts": parts, "snapshot_only": snapshot_only}
    if recorded is not None:
        changed = sorted(
            name
            for name in set(recorded.get("files", {})) | set(built.get("files", {}))
            if recorded.get("files", {}).get(name) != built.get("files", {}).get(name)
        )
        report["files_changed"] = changed
    return report


def _short(value: object) -> str:
    if isinstance(value, str):
        return value[:16] + "…" if len(value) > 16 else value
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
    return "(not recorded)" if value is None else str(value)


def _print(report: dict[str, Any]) -> None:
    verdict = "MATCH" if report["ok"] else "MISMATCH"
    print(f"{verdict}: {report['target']} rebuilt from {report['source']} in a clean cache")
    rows = [("", "expected", "rebuilt", "")]
    rows += [
        (c["what"], _short(c["expected"]), _short(c["rebuilt"]), "same" if c["match"] else "DIFFERENT")
        for c in report["checks"]
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3])
    if not report["provenance_recorded"]:
        print("  the target has no build.json: its source and toolchain were not recorded")
    if report.get("files_changed"):
        print("  files that differ from what the bundle records: " + ", ".join(report["files_changed"]))
    difference = report.get("module_difference")
    if difference:
        if difference["snapshot_only"]:
            print(
                "  the engine's code sections are identical; the pre-initialized memory snapshot differs ("
                + ", ".join(difference["parts"])
                + "). The snapshot holds the plugin's own compiled code as well as build-time state, so "
                "only the source check above tells a changed source from toolchain randomness: see "
                "docs/authors.md, Reproducible builds"
            )
        else:
            print("  differing parts: " + ", ".join(difference["parts"][:12]))


def run(args: argparse.Namespace) -> int:
    """Rebuild, compare, report; exit 0 on a byte-identical rebuild, 1 otherwise."""
    if not (args.source / "stockade.toml").is_file():
        raise UsageFailed(
            "VERIFY_SOURCE_INVALID",
            f"{args.source} holds no stockade.toml",
            hint="--source names the project directory the bundle was built from",
        )
    report = verify(args)
    if args.json:
        print_json(report)
    else:
        _print(report)
    return EXIT_OK if report["ok"] else EXIT_FAILED
