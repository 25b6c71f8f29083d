"""``stockade build [DIR]``: build a plugin project into a bundle.

Reads ``DIR/stockade.toml``, validates the manifest it describes before the slow build,
builds the component with componentize-py or componentize-js, and writes
``DIR/dist/<name>-<version>/{manifest.json,module.wasm}``. Builds are cached by a digest
of the sources.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from sdk.build import build_project


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


def run(args: argparse.Namespace) -> int:
    """Build and report where the bundle is."""
    if args.json:
        result = build_project(args.dir, out_dir=args.out)
    else:
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn()) as bar:
            task = bar.add_task("building", total=1.0)

            def progress(stage: str, fraction: float) -> None:
                bar.update(task, description=stage, completed=fraction)

            result = build_project(args.dir, out_dir=args.out, progress=progress)
    summary = {
        "bundle": str(result.bundle_dir),
        "module_sha256": result.module_sha256,
        "cached": result.cached,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        note = " (cached)" if result.cached else ""
        print(f"built {result.bundle_dir}{note}\n  module sha256 {result.module_sha256}")
    return 0
