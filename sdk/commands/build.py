"""``stockade build [DIR]``: build a plugin project into a bundle.

Reads ``DIR/stockade.toml``, validates the manifest it describes before the slow build,
builds the component with componentize-py or componentize-js, and writes
``DIR/dist/<name>-<version>/{manifest.json,module.wasm}``. Builds are cached by a digest
of the sources in the per-user cache (``$STOCKADE_CACHE_DIR`` or ``~/.cache/stockade``).
The first JavaScript build installs the pinned JavaScript toolchain there (about 10 s
from npm's cache; ``stockade toolchain install`` does it ahead of time).

Dependencies: Python pins under ``[package] dependencies`` are installed with pip
(wheels only); a JavaScript project's ``package.json`` dependencies are installed from its
``package-lock.json`` with ``npm ci --ignore-scripts`` and bundled with esbuild. A
package with a native extension or addon, or an install script, is refused with
BUILD_DEPENDENCY_REFUSED (see docs/authors.md, "Dependencies").

A bundle that ``stockade.lock`` (in DIR or the working directory) pins with other
digests is never overwritten: the build stops with BUNDLE_LOCKED, naming the lock, the
package and both digests. Bump the version, or ``stockade lock remove`` it first.

Progress goes to stderr with the elapsed time (a bar on a terminal, plain lines
otherwise). Typical times on 2 cores: a Python build 10-15 s, a JavaScript build
5-10 s, a cached build well under 1 s.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from sdk.author.build import BuildResult, BundleLocked, build_project
from sdk.commands._common import CommandFailed
from sdk.commands._progress import author_progress, problems_listed


def register(sub: Any) -> None:
    """Add the ``build`` subcommand."""
    parser = sub.add_parser(
        "build",
        help="build a plugin project into a bundle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dir", nargs="?", type=Path, default=Path("."), help="project directory")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default DIR/dist)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def build_reported(project: Path, *, out_dir: Path | None = None, show: bool = True) -> BuildResult:
    """Build ``project`` with progress on stderr (``show``), as ``stockade build`` does.

    Raises:
        CommandFailed: BUNDLE_LOCKED, a lock pins the bundle with other digests.
        ManifestInvalid, BuildError: the project does not build.
    """
    try:
        with problems_listed(enabled=show), author_progress(enabled=show) as (on_build, _):
            return build_project(project, out_dir=out_dir, progress=on_build)
    except BundleLocked as exc:
        hint = (
            f"bump [package] version in stockade.toml for a new release, or build elsewhere with --out; "
            f"to replace the locked bundle on purpose, `stockade lock remove {exc.name}` first"
        )
        raise CommandFailed("BUNDLE_LOCKED", f"{exc}; the bundle was not overwritten", hint=hint) from None


def run(args: argparse.Namespace) -> int:
    """Build and report where the bundle is."""
    started = time.monotonic()
    result = build_reported(args.dir, out_dir=args.out, show=not args.json)
    elapsed = time.monotonic() - started
    summary = {
        "bundle": str(result.bundle_dir),
        "module_sha256": result.module_sha256,
        "cached": result.cached,
        "elapsed_s": round(elapsed, 2),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        note = " (cached)" if result.cached else ""
        print(f"built {result.bundle_dir}{note} in {elapsed:.1f} s\n  module sha256 {result.module_sha256}")
    return 0
