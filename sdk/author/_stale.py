"""Whether a bundle in ``PROJECT/dist/`` still matches the project it was built from.

``stockade test`` and ``stockade dev`` build into a temporary directory and leave
``dist/`` alone, so after an edit the bundle in ``dist/`` can be older than the project.
``stockade lock add`` asks :func:`staleness` before locking one: a bundle whose manifest
differs from the one ``stockade.toml`` describes now is *different* (refused); a bundle
older than a source file or ``stockade.toml`` is *older* (a warning; refused under
``--strict``: a touched file with the same content is not a different build, but a
changed handler is, and only a rebuild can tell).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from host.canonical import canonical_json
from host.errors import StockadeError
from host.formats.manifest import PackageManifest
from sdk.author.project import PROJECT_FILE, load_project, validate_project

__all__ = ["Staleness", "project_of", "staleness"]

# What a build reads (docs/authors.md, "What goes into a bundle"); directories it skips.
_SOURCE_SUFFIXES: Final = {"python": (".py",), "javascript": (".js", ".mjs")}
_PACKAGE_FILES: Final = ("package.json", "package-lock.json")
_SKIP_DIRS: Final = frozenset({"dist", "build", "node_modules", "__pycache__", "tests"})


@dataclass(frozen=True, slots=True)
class Staleness:
    """What :func:`staleness` found.

    Attributes:
        project: the project directory.
        different: why the bundle's manifest is not the one the project describes now
            (empty when it is).
        newer: project files (relative paths) modified after the bundle was written.
    """

    project: Path
    different: str
    newer: tuple[str, ...]


def project_of(bundle: Path) -> Path | None:
    """The project a bundle at ``PROJECT/dist/NAME-VERSION`` was built into, if any."""
    parent = bundle.resolve().parent
    if parent.name == "dist" and (parent.parent / PROJECT_FILE).is_file():
        return parent.parent
    return None


def _files(project: Path, language: str) -> list[Path]:
    found = [project / PROJECT_FILE, *(project / name for name in _PACKAGE_FILES)]
    suffixes = _SOURCE_SUFFIXES.get(language, ())
    for dirpath, dirnames, filenames in os.walk(project, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS]
        found.extend(Path(dirpath) / f for f in filenames if f.endswith(suffixes))
    return [path for path in found if path.is_file()]


def staleness(project: Path, bundle: Path) -> Staleness:
    """Compare ``bundle`` (its ``manifest.json`` and ``module.wasm``) with ``project``.

    Args:
        project: the project directory (holding ``stockade.toml``).
        bundle: a bundle directory built from it.

    Returns:
        What differs; a project that no longer loads or validates is ``different``.
    """
    manifest_path, module_path = bundle / "manifest.json", bundle / "module.wasm"
    try:
        written = manifest_path.read_bytes()
        built_at = min(manifest_path.stat().st_mtime_ns, module_path.stat().st_mtime_ns)
        recorded = PackageManifest.from_json(written)
    except (OSError, StockadeError):
        return Staleness(project, "", ())  # not a readable bundle: `lock add` reports that itself
    try:
        loaded = load_project(project)
        described = validate_project(loaded)
    except StockadeError as exc:
        return Staleness(project, f"{PROJECT_FILE} no longer builds ({exc.code})", ())
    described["module"]["sha256"] = recorded.module.sha256
    different = ""
    try:
        now = PackageManifest.from_json(canonical_json(described))
    except StockadeError as exc:
        different = f"{PROJECT_FILE} no longer builds ({exc.code})"
    else:
        was, want = recorded.package, now.package
        if (was.name, was.version) != (want.name, want.version):
            different = f"the project is now {want.name}-{want.version}, the bundle {was.name}-{was.version}"
        elif now.to_json() != written:
            different = f"its manifest differs from what {PROJECT_FILE} describes now"
    newer = tuple(
        sorted(
            path.relative_to(project).as_posix()
            for path in _files(project, loaded.language)
            if path.stat().st_mtime_ns > built_at
        )
    )
    return Staleness(project, different, newer)
