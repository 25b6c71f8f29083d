"""Build a plugin project into a bundle (``stockade build``, docs/design.md §3).

Steps, in order (the slow one last, so a bad ``stockade.toml`` fails in milliseconds):

1. Read ``stockade.toml`` (:mod:`sdk.author.project`) and produce the manifest with a placeholder
   digest of 64 zeros; validate it with ``PackageManifest.from_json``: anything the
   manifest models refuse is refused here (:class:`~host.errors.ManifestInvalid`).
2. Stage a copy of the sources (``*.py`` for Python; ``*.js``/``*.mjs``, ``package.json``
   and ``package-lock.json`` for JavaScript; hidden directories, ``dist``, ``build``,
   ``node_modules`` and ``__pycache__`` skipped), the guest SDK and a generated entry
   module that imports the author's module (which registers the handlers), checks the
   handlers equal the manifest's tools and exposes the world's ``call``. Dependencies
   that cannot go into a component are refused (``BUILD_DEPENDENCY_REFUSED``).
3. Look up the build cache, keyed by a digest of everything the module depends on: the
   staged sources, the entry source, the tool names, the guest SDK, this file, the WIT and
   the toolchain versions (componentize-py; componentize-js and node). A hit whose module
   still has its recorded digest is copied (``cached=True``).
4. Otherwise build: componentize-py's ``componentize`` API (world ``tool``, app
   ``_stockade_entry``, the staged tree and the dependencies as its only path, every path
   relative to the build directory, the staged trees frozen by :func:`freeze_tree`) or
   ``node sdk/js/build.mjs`` (componentize-js with wasi:http and the fetch event
   disabled, so no wasi:http import appears). Dependencies are installed first: pip for
   Python (:mod:`sdk.author._pydeps`); for JavaScript ``npm ci --ignore-scripts`` and one
   esbuild bundle (:mod:`sdk.author._jsdeps`). What still makes two builds of one source differ
   (the toolchains' pre-initialized snapshot) is in docs/authors.md, "Reproducible builds".
5. Fill in ``module.sha256``, validate again, and write
   ``<out>/<name>-<version>/{manifest.json,module.wasm,build.json}`` (manifest as
   canonical JSON; ``build.json`` is :func:`provenance_record`),
   replacing an older bundle of the same version in one rename -- unless a
   ``stockade.lock`` in the project directory (or the working directory) pins that bundle
   directory with other digests: then :class:`BundleLocked` is raised and nothing is
   written (a lock must never silently lose the bundle it verified).

Example::

    result = build_project(Path("examples/python-hello"))
    result.bundle_dir          # examples/python-hello/dist/hello-0.1.0
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from host.canonical import canonical_json
from host.files import replace_dir
from host.formats.manifest import PackageManifest
from sdk._cachedir import builds_dir
from sdk.author._jsdeps import install_js_dependencies, needs_bundling, package_files
from sdk.author._pydeps import DependencyError, DependencyRefused, install_dependencies
from sdk.author.project import Project, load_project, validate_project
from sdk.author.toolchain import JsToolchain, ToolchainError, ensure_js_toolchain

__all__ = [
    "BUILD_ERROR_CODES",
    "PROVENANCE_FILE",
    "PROVENANCE_FORMAT",
    "BuildError",
    "BuildResult",
    "BundleLocked",
    "ProgressCallback",
    "build_cache_entries",
    "build_project",
    "default_cache_dir",
    "freeze_tree",
    "provenance_record",
    "prune_build_cache",
    "run_componentize_py",
    "stage_python",
]

ProgressCallback = Callable[[str, float], None]
"""``progress(stage, fraction)``: a short description and the fraction done, 0.0–1.0."""

SDK_DIR: Final = Path(__file__).resolve().parents[1]
GUEST_DIR: Final = SDK_DIR / "guest"
JS_DIR: Final = SDK_DIR / "js"
WIT_PATH: Final = SDK_DIR / "wit" / "stockade.wit"
WORLD_NAME: Final = "tool"
ENTRY_MODULE: Final = "_stockade_entry"
MAX_SOURCE_FILES: Final = 2000  # files staged from one project
MAX_SOURCE_BYTES: Final = 64 * 1024 * 1024  # bytes staged from one project
TOOL_TIMEOUT_S: Final = 900  # s, one componentize run
PROVENANCE_FILE: Final = "build.json"  # in the bundle, beside manifest.json and module.wasm
PROVENANCE_FORMAT: Final = "stockade-provenance/1"
STDERR_TAIL_CHARS: Final = 4000  # characters of the build tool's output kept in BuildError
_SKIP_DIRS: Final = frozenset({"dist", "build", "node_modules", "__pycache__", "tests"})
_SUFFIXES: Final = {"python": (".py",), "javascript": (".js", ".mjs")}
_EXPECTED_S: Final = {"python": 12.0, "javascript": 18.0}  # s, typical build (progress only)
# componentize-py through its Python API, not its CLI: the CLI appends the site-packages of
# $VIRTUAL_ENV, pipenv or whatever ``python3`` is on PATH to the guest's path, so every
# build imported from (and its pre-initialized snapshot recorded) the build machine's
# installed packages. The API takes the path exactly as given (argv[1] is a JSON list of
# its arguments, relative to the working directory).
_COMPONENTIZE_PY: Final = (
    "import json, sys; import componentize_py; componentize_py.componentize(*json.loads(sys.argv[1]))"
)
FIXED_MTIME: Final = 315532800  # 1980-01-01T00:00:00Z: every staged file's mtime (zip's epoch)


class BundleLocked(RuntimeError):
    """A lock pins the bundle directory this build would overwrite, with other digests.

    Attributes:
        lock: the lock file.
        name: the package name.
        package: ``name-version``.
        locked: ``{"manifest_sha256", "module_sha256"}`` the lock pins.
        built: the same digests of the new build.
    """

    def __init__(
        self, lock: Path, name: str, version: str, locked: dict[str, str], built: dict[str, str]
    ) -> None:
        self.lock = lock
        self.name = name
        self.package = package = f"{name}-{version}"
        self.locked = locked
        self.built = built
        changed = [k for k in ("module_sha256", "manifest_sha256") if locked.get(k) != built[k]]
        diff = "; ".join(f"{k}: locked {locked.get(k)}, built {built[k]}" for k in changed)
        super().__init__(f"{lock} pins {package} at this bundle path with other digests ({diff})")


BUILD_ERROR_CODES: Final = (
    "BUILD_PROJECT_INVALID",  # the project cannot be built as it is (too big, a file shadows the SDK)
    "BUILD_TOOL_MISSING",  # node, componentize-py or the JavaScript toolchain is missing
    "BUILD_DEPENDENCY_FAILED",  # a dependency is not pinned or cannot be installed (pip, npm ci failed)
    "BUILD_DEPENDENCY_REFUSED",  # a dependency holds native code or needs an install script
    "BUILD_TOOL_FAILED",  # componentize-py/-js failed, timed out or wrote nothing
    "BUILD_WRITE_FAILED",  # the bundle could not be written
)
"""The stable codes of :class:`BuildError` (shown by the CLI, pinned by a test)."""


class BuildError(RuntimeError):
    """The build tool failed or is missing; ``output_tail`` holds the end of its output.

    Args:
        message: what failed and what to do.
        code: one of :data:`BUILD_ERROR_CODES`.
        output_tail: the last :data:`STDERR_TAIL_CHARS` characters of the tool's output.

    Raises:
        ValueError: ``code`` is not one of :data:`BUILD_ERROR_CODES` (a bug).
    """

    def __init__(self, message: str, *, code: str, output_tail: str = "") -> None:
        if code not in BUILD_ERROR_CODES:
            raise ValueError(f"unknown build error code {code!r}")
        self.code = code
        self.message = message
        self.output_tail = output_tail
        text = f"{message}\n--- build tool output (tail) ---\n{output_tail}" if output_tail else message
        super().__init__(text)


@dataclass(frozen=True, slots=True)
class BuildResult:
    """Where the bundle is and what it holds.

    Attributes:
        bundle_dir: ``<out>/<name>-<version>``.
        manifest_path: ``bundle_dir/manifest.json`` (canonical JSON).
        module_path: ``bundle_dir/module.wasm``.
        module_sha256: hex digest of the module, as in the manifest.
        cached: True when the module came from the build cache.
        provenance: what the module was built from, as written to ``bundle_dir/build.json``
            (:data:`PROVENANCE_FORMAT`: source digest, files, toolchain versions, WIT).
    """

    bundle_dir: Path
    manifest_path: Path
    module_path: Path
    module_sha256: str
    cached: bool
    provenance: dict[str, Any] = field(default_factory=dict)


def default_cache_dir() -> Path:
    """``<per-user cache>/builds`` (``~/.cache/stockade/builds`` by default; see
    :mod:`sdk._cachedir`)."""
    return builds_dir()


def _noop(stage: str, fraction: float) -> None:
    del stage, fraction


def build_project(
    project_dir: Path,
    *,
    out_dir: Path | None = None,
    cache_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    wit_path: Path | None = None,
    world: str | None = None,
) -> BuildResult:
    """Build the project in ``project_dir`` into ``<out_dir>/<name>-<version>/``.

    Args:
        project_dir: directory holding ``stockade.toml``.
        out_dir: where bundles go (default ``project_dir/dist``).
        cache_dir: build cache (default :func:`default_cache_dir`).
        progress: called with a stage description and the fraction done.
        wit_path: WIT file or directory to build against instead of the Stockade world
            (for test worlds that extend it; the host still checks every import when it
            loads the component).
        world: the world in ``wit_path`` (default ``tool``).

    Raises:
        ManifestInvalid: ``stockade.toml`` is invalid or describes an invalid manifest
            (checked before building).
        BuildError: the sources cannot be staged, the toolchain is missing, or the build
            tool failed (its output tail is in the message).
        BundleLocked: a lock pins the bundle directory with other digests (not written).

    Returns:
        The bundle's paths and module digest.
    """
    report = progress or _noop
    report("reading stockade.toml", 0.0)
    project = load_project(Path(project_dir))
    manifest = validate_project(project)  # every problem, reported against stockade.toml
    out = Path(out_dir) if out_dir is not None else project.root / "dist"
    with tempfile.TemporaryDirectory(prefix="stockade-build-") as tmp:
        stage = Path(tmp) / "stage"
        report("staging sources", 0.05)
        sources = _stage(project, stage, exclude=out)
        target = _Target(Path(wit_path) if wit_path is not None else WIT_PATH, world or WORLD_NAME)
        statement = _build_statement(project, sources, target, report)
        key = _sha256(canonical_json(statement))
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        module = _cache_get(cache, key)
        cached = module is not None
        if module is None:
            wasm = Path(tmp) / "module.wasm"
            _componentize(project, stage, wasm, target, report)
            module = wasm.read_bytes()
            _cache_put(cache, key, module)
    report("writing bundle", 0.95)
    digest = hashlib.sha256(module).hexdigest()
    manifest["module"]["sha256"] = digest
    final = PackageManifest.from_json(canonical_json(manifest))
    bundle = out / f"{final.package.name}-{final.package.version}"
    manifest_bytes = final.to_json()
    built = {"manifest_sha256": _sha256(manifest_bytes), "module_sha256": digest}
    for lock in _nearby_locks(project.root):
        _refuse_locked_overwrite(lock, bundle, final.package.name, final.package.version, built)
    provenance = provenance_record(statement, key, built)
    _write_bundle(bundle, manifest_bytes, module, canonical_json(provenance))
    report("done", 1.0)
    return BuildResult(bundle, bundle / "manifest.json", bundle / "module.wasm", digest, cached, provenance)


def provenance_record(statement: dict[str, Any], key: str, built: dict[str, str]) -> dict[str, Any]:
    """The ``build.json`` of a bundle: what its module was built from.

    ``source_sha256`` is the digest of the canonical JSON of ``files`` (every staged file:
    the author's sources, the guest SDK and the generated entry module, by relative path);
    ``build_key`` is the build cache key, the digest of everything else recorded here too.
    """
    files = statement["files"]
    return {
        "format": PROVENANCE_FORMAT,
        "source_sha256": _sha256(canonical_json(files)),
        "build_key": key,
        **built,
        **{k: v for k, v in statement.items() if k != "format"},
    }


# --- staging ----------------------------------------------------------------------------


def _source_files(root: Path, suffixes: tuple[str, ...], exclude: Path) -> Iterator[Path]:
    """Regular files under ``root`` with one of ``suffixes``; symlinks are not followed."""
    skip = exclude.resolve()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".") and d not in _SKIP_DIRS and (here / d).resolve() != skip
        )
        for name in sorted(filenames):
            path = here / name
            if path.suffix in suffixes and not path.is_symlink() and path.is_file():
                yield path


def _copy_sources(root: Path, dest: Path, suffixes: tuple[str, ...], exclude: Path) -> dict[str, bytes]:
    copied: dict[str, bytes] = {}
    total = 0
    for path in _source_files(root, suffixes, exclude):
        rel = path.relative_to(root).as_posix()
        data = path.read_bytes()
        total += len(data)
        if len(copied) >= MAX_SOURCE_FILES or total > MAX_SOURCE_BYTES:
            raise BuildError(
                f"{root} holds more than {MAX_SOURCE_FILES} source files or {MAX_SOURCE_BYTES} bytes; "
                "is it really a plugin project?",
                code="BUILD_PROJECT_INVALID",
            )
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        copied[rel] = data
    return copied


def _python_entry(module: str, tools: list[str]) -> str:
    return (
        "# Generated by stockade build; do not edit.\n"
        f"import {module}  # the author's module: importing it registers the handlers\n"
        "from stockade._dispatch import WitWorld, check_tools\n\n"
        f"check_tools({tools!r})\n"
        '__all__ = ["WitWorld"]\n'
    )


def stage_python(
    root: Path, source: str, tools: list[str], stage: Path, *, exclude: Path
) -> dict[str, bytes]:
    """Stage a Python plugin: the project's ``*.py``, the guest SDK and the entry module.

    Args:
        root: project directory.
        source: the author's module file relative to ``root`` (``app.py``, ``pkg/main.py``).
        tools: the tool names the handlers must cover exactly.
        stage: empty directory to fill; it becomes componentize-py's only path.
        exclude: a directory under ``root`` not to stage (the output directory).

    Raises:
        BuildError: the project shadows the SDK (a top-level ``stockade`` module or the
            entry module's name), or is too large.

    Returns:
        The staged files, ``{relative path: bytes}`` (SDK and entry included).
    """
    for clash in ("stockade", "stockade.py", f"{ENTRY_MODULE}.py"):
        if (root / clash).exists():
            raise BuildError(
                f"{root / clash} shadows the Stockade SDK; rename it", code="BUILD_PROJECT_INVALID"
            )
    files = _copy_sources(root, stage, (".py",), exclude)
    files.update(
        {
            f"stockade/{k}": v
            for k, v in _copy_sources(GUEST_DIR / "stockade", stage / "stockade", (".py",), exclude).items()
        }
    )
    module = ".".join(Path(source).with_suffix("").parts)
    entry = _python_entry(module, tools).encode()
    (stage / f"{ENTRY_MODULE}.py").write_bytes(entry)
    files[f"{ENTRY_MODULE}.py"] = entry
    return files


def _stage(project: Project, stage: Path, *, exclude: Path) -> dict[str, bytes]:
    stage.mkdir(parents=True)
    if project.language == "python":
        return stage_python(project.root, project.source, project.tool_names(), stage, exclude=exclude)
    for clash in ("_stockade", "_stockade_entry.js"):
        if (project.root / clash).exists():
            raise BuildError(
                f"{project.root / clash} clashes with a file the build generates; rename it",
                code="BUILD_PROJECT_INVALID",
            )
    files = _copy_sources(project.root, stage, _SUFFIXES["javascript"], exclude)
    files.update(_stage_package_files(project.root, stage))
    for name in ("stockade.js", "build.mjs"):  # staged by build.mjs itself; hashed here
        files[f"(sdk)/{name}"] = (JS_DIR / name).read_bytes()
    return files


@contextlib.contextmanager
def _dependency_errors() -> Iterator[None]:
    """Report dependency problems as build errors (a refusal as ``BUILD_DEPENDENCY_REFUSED``)."""
    try:
        yield
    except DependencyRefused as exc:
        raise BuildError(str(exc), code="BUILD_DEPENDENCY_REFUSED") from exc
    except DependencyError as exc:
        raise BuildError(str(exc), code="BUILD_DEPENDENCY_FAILED") from exc


def _stage_package_files(root: Path, stage: Path) -> dict[str, bytes]:
    """Stage a JavaScript project's ``package.json`` and lock (part of the cache key);
    a lock that would be refused is refused here, before the toolchain is looked at."""
    with _dependency_errors():
        found = package_files(root)
        needs_bundling(found)
    for name, data in found.items():
        (stage / name).write_bytes(data)
    return found


# --- cache ------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        raise BuildError(
            "node is not on PATH; JavaScript plugins need Node.js >= 20", code="BUILD_TOOL_MISSING"
        )
    return node


def _toolchain(language: str, report: ProgressCallback = _noop) -> dict[str, str]:
    """Versions of the tools a build of ``language`` uses (part of the cache key).

    For JavaScript this makes sure the per-user toolchain is installed (installing it
    on the first JavaScript build, see :mod:`sdk.author.toolchain`).
    """
    if language == "python":
        try:
            return {"componentize-py": importlib.metadata.version("componentize-py")}
        except importlib.metadata.PackageNotFoundError:
            raise BuildError(
                "componentize-py is not installed: pip install 'stockade[build]'", code="BUILD_TOOL_MISSING"
            ) from None
    toolchain = _js_toolchain(report)
    node = subprocess.run([_node(), "--version"], capture_output=True, text=True, timeout=60, check=False)
    return {**toolchain.versions, "node": node.stdout.strip()}


def _js_toolchain(report: ProgressCallback) -> JsToolchain:
    try:
        return ensure_js_toolchain(report)
    except ToolchainError as exc:
        raise BuildError(str(exc), code="BUILD_TOOL_MISSING") from exc


@dataclass(frozen=True, slots=True)
class _Target:
    wit_path: Path
    world: str

    def digest(self) -> dict[str, str]:
        paths = (
            sorted(p for p in self.wit_path.rglob("*") if p.is_file())
            if self.wit_path.is_dir()
            else [self.wit_path]
        )
        return {
            p.relative_to(self.wit_path).as_posix() if p != self.wit_path else p.name: _sha256(p.read_bytes())
            for p in paths
        }


def _build_statement(
    project: Project, files: dict[str, bytes], target: _Target, report: ProgressCallback = _noop
) -> dict[str, Any]:
    """Everything a module depends on; its canonical JSON's digest is the build cache key."""
    return {
        "format": "stockade-build/1",
        "language": project.language,
        "source": project.source,
        "tools": project.tool_names(),
        "files": {rel: _sha256(data) for rel, data in sorted(files.items())},
        "wit": target.digest(),
        "world": target.world,
        "builder": _sha256(Path(__file__).read_bytes()),
        "toolchain": _toolchain(project.language, report),
        "dependencies": list(project.dependencies),
    }


def _cache_key(
    project: Project, files: dict[str, bytes], target: _Target, report: ProgressCallback = _noop
) -> str:
    return _sha256(canonical_json(_build_statement(project, files, target, report)))


def _cache_get(cache: Path, key: str) -> bytes | None:
    """The cached module for ``key`` if it still has its recorded digest, else None."""
    entry = cache / key
    try:
        meta = json.loads((entry / "meta.json").read_text("utf-8"))
        module = (entry / "module.wasm").read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("module_sha256") != _sha256(module):
        shutil.rmtree(entry, ignore_errors=True)  # corrupt or tampered: rebuild
        return None
    with contextlib.suppress(OSError):  # recency for LRU pruning (prune_build_cache)
        os.utime(entry)
    return module


def build_cache_entries(cache: Path) -> list[tuple[float, int, Path]]:
    """``(last used, bytes, entry)`` of every build cache entry, least recently used first."""
    entries = []
    with contextlib.suppress(FileNotFoundError):
        for entry in cache.iterdir():
            if entry.name.startswith(".") or not entry.is_dir() or entry.is_symlink():
                continue
            size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
            entries.append((entry.stat().st_mtime, size, entry))
    return sorted(entries)


def prune_build_cache(cache: Path, *, max_bytes: int) -> tuple[int, int]:
    """Remove least recently used build cache entries until at most ``max_bytes`` remain.

    Returns:
        ``(entries removed, bytes freed)``.
    """
    entries = build_cache_entries(cache)
    total = sum(size for _, size, _ in entries)
    removed = freed = 0
    for _, size, entry in entries:
        if total <= max_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        removed += 1
        freed += size
    return removed, freed


def _cache_put(cache: Path, key: str, module: bytes) -> None:
    """Store a module; a failure to write the cache never fails the build."""
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key[:16]}-", dir=cache))
        (tmp / "module.wasm").write_bytes(module)
        (tmp / "meta.json").write_text(json.dumps({"module_sha256": _sha256(module)}), "utf-8")
        try:
            os.replace(tmp, cache / key)
        except OSError:  # another build stored the same key first
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        return


# --- running the build tools ------------------------------------------------------------


def _tail(path: Path) -> str:
    text = path.read_text("utf-8", errors="replace")
    return text[-STDERR_TAIL_CHARS:]


def _run_tool(argv: list[str], *, cwd: Path, label: str, expected_s: float, report: ProgressCallback) -> None:
    """Run one build tool, reporting progress while it runs; raise BuildError on failure."""
    log_path = cwd.parent / f"{cwd.name}.log"
    started = time.monotonic()
    with log_path.open("wb") as log:
        # Without VIRTUAL_ENV: componentize-py would add the venv's site-packages to the
        # plugin's path, so a build would depend on whatever the author's venv holds.
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        proc = subprocess.Popen(
            argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        while proc.poll() is None:
            elapsed = time.monotonic() - started
            if elapsed > TOOL_TIMEOUT_S:
                proc.kill()
                proc.wait()
                raise BuildError(
                    f"{label} did not finish in {TOOL_TIMEOUT_S} s", code="BUILD_TOOL_FAILED",
                    output_tail=_tail(log_path),
                )
            report(f"{label} ({elapsed:.0f} s)", min(0.9, 0.1 + 0.8 * elapsed / expected_s))
            time.sleep(0.25)
    if proc.returncode != 0:
        raise BuildError(
            f"{label} failed with exit status {proc.returncode}", code="BUILD_TOOL_FAILED",
            output_tail=_tail(log_path),
        )


def run_componentize_py(
    stage: Path,
    out: Path,
    *,
    wit_path: Path = WIT_PATH,
    world: str = WORLD_NAME,
    report: ProgressCallback = _noop,
    extra_paths: list[Path] | None = None,
) -> None:
    """Run componentize-py on a staged directory (see :func:`stage_python`).

    Args:
        stage: the staged directory holding ``_stockade_entry.py``.
        out: the component file to write.
        wit_path: WIT file or directory (default the Stockade world).
        world: the world to target.
        report: progress callback.
        extra_paths: more directories of modules (installed dependencies).

    ``stage`` and ``extra_paths`` are frozen (:func:`freeze_tree`) and a copy of the WIT is
    written to ``stage.parent / "wit"``, which must not exist yet.

    Raises:
        BuildError: componentize-py is missing or failed.
    """
    _toolchain("python")
    work = stage.parent
    wit = _stage_wit(wit_path, work / "wit")
    paths = [stage, *(extra_paths or [])]
    for path in paths:
        freeze_tree(path)
    # (wit paths, worlds, features, all features, world module, python path, module
    # worlds, app name, output, stub wasi, import/export interface names, full names,
    # intersect world): every path relative to ``work``, so no absolute path of the
    # build machine reaches componentize-py.
    call = [
        [os.path.relpath(wit, work)], [world], [], False, None, [os.path.relpath(p, work) for p in paths],
        [], ENTRY_MODULE, str(out), False, [], [], False, None,
    ]  # fmt: skip
    argv = [sys.executable, "-c", _COMPONENTIZE_PY, json.dumps(call)]
    _run_tool(argv, cwd=work, label="componentize-py", expected_s=_EXPECTED_S["python"], report=report)
    if not out.is_file():
        raise BuildError(
            f"componentize-py reported success but wrote no {out.name}", code="BUILD_TOOL_FAILED"
        )


def _stage_wit(wit_path: Path, dest: Path) -> Path:
    """A copy of the WIT file or directory at ``dest`` (a path of the build directory)."""
    if wit_path.is_dir():
        shutil.copytree(wit_path, dest)
        return dest
    dest.mkdir()
    shutil.copyfile(wit_path, dest / wit_path.name)
    return dest / wit_path.name


def freeze_tree(root: Path) -> None:
    """Make a staged tree independent of when it was staged, for componentize-py's pre-init.

    The pre-initialized snapshot records what the guest's imports saw: every file's and
    directory's mtime is set to :data:`FIXED_MTIME`, and each directory holding ``*.py``
    gets a ``__pycache__`` *file*, so CPython cannot write bytecode there during the
    pre-init (it skips a cache directory it cannot create; the writes would change
    directory mtimes while modules are still being imported).
    """
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        here = Path(dirpath)
        if any(n.endswith(".py") for n in filenames) and not (here / "__pycache__").exists():
            (here / "__pycache__").write_bytes(b"")
            filenames.append("__pycache__")
        for name in filenames:
            os.utime(here / name, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
        os.utime(here, (FIXED_MTIME, FIXED_MTIME))


def _run_componentize_js(
    project: Project, stage: Path, out: Path, target: _Target, report: ProgressCallback
) -> None:
    with _dependency_errors():
        bundle = needs_bundling(package_files(stage))
        if bundle:
            install_js_dependencies(stage, report)
    config = {
        "stageDir": str(stage),
        "source": project.source,
        "tools": project.tool_names(),
        "witPath": str(target.wit_path),
        "worldName": target.world,
        "outPath": str(out),
        "bundle": bundle,
    }
    config_path = stage.parent / "build-config.json"
    config_path.write_text(json.dumps(config), "utf-8")
    runner = _js_runner(stage.parent / "js", _js_toolchain(report))
    argv = [_node(), str(runner / "build.mjs"), str(config_path)]
    _run_tool(argv, cwd=stage, label="componentize-js", expected_s=_EXPECTED_S["javascript"], report=report)
    if not out.is_file():
        raise BuildError(
            f"componentize-js reported success but wrote no {out.name}", code="BUILD_TOOL_FAILED"
        )


def _js_runner(dest: Path, toolchain: JsToolchain) -> Path:
    """A copy of the SDK's build script beside a link to the toolchain's ``node_modules``.

    Node resolves ``import "@bytecodealliance/componentize-js"`` from the importing
    file's directory upwards (ESM ignores ``NODE_PATH``), so the script runs from a
    directory whose ``node_modules`` is the per-user toolchain, never a checkout's.
    """
    dest.mkdir()
    for name in ("build.mjs", "stockade.js"):
        shutil.copyfile(JS_DIR / name, dest / name)
    (dest / "node_modules").symlink_to(toolchain.node_modules, target_is_directory=True)
    return dest


def _componentize(
    project: Project, stage: Path, out: Path, target: _Target, report: ProgressCallback
) -> None:
    if project.language == "python":
        deps = stage.parent / "deps"
        with _dependency_errors():
            install_dependencies(list(project.dependencies), deps, report)
        paths = [deps] if project.dependencies else []
        run_componentize_py(
            stage, out, wit_path=target.wit_path, world=target.world, report=report, extra_paths=paths
        )
    else:
        _run_componentize_js(project, stage, out, target, report)


# --- output -----------------------------------------------------------------------------


def _nearby_locks(root: Path) -> list[Path]:
    """``stockade.lock`` in the project directory and in the working directory (once each)."""
    found: list[Path] = []
    for candidate in (root / "stockade.lock", Path.cwd() / "stockade.lock"):
        if candidate.is_file() and all(not candidate.samefile(f) for f in found):
            found.append(candidate)
    return found


def _refuse_locked_overwrite(
    lock: Path, bundle: Path, name: str, version: str, built: dict[str, str]
) -> None:
    """Raise :class:`BundleLocked` if ``lock`` pins ``bundle`` with digests other than ``built``.

    An unreadable or malformed lock is left to ``stockade lock verify`` to report.
    """
    try:
        doc = json.loads(lock.read_bytes())
        entries = [e for e in doc.get("packages", []) if isinstance(e, dict)]
    except (OSError, ValueError, AttributeError):
        return
    target = bundle.resolve()
    for entry in entries:
        where = entry.get("bundle")
        if not isinstance(where, str) or (lock.parent / where).resolve() != target:
            continue
        locked = {k: str(entry.get(k)) for k in ("manifest_sha256", "module_sha256")}
        if locked != built:
            raise BundleLocked(lock, name, version, locked, built)


def _write_bundle(bundle: Path, manifest: bytes, module: bytes, provenance: bytes) -> None:
    """Write the bundle beside its final place, then swap it in."""
    bundle.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{bundle.name}-", dir=bundle.parent))
    try:
        (tmp / "module.wasm").write_bytes(module)
        (tmp / "manifest.json").write_bytes(manifest)
        (tmp / PROVENANCE_FILE).write_bytes(provenance)
        replace_dir(tmp, bundle)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"cannot write the bundle to {bundle}: {exc}", code="BUILD_WRITE_FAILED") from exc
