"""Every third-party module host/ and sdk/ import is a declared dependency.

A package that only arrives through another one (pyjwt, anyio, uvicorn, starlette, httpx2,
httpcore2 and mcp-types used to come only with ``mcp``) disappears the day that package
drops it. This test reads every ``import`` of the code a user installs (not the guest SDK
nor the hostile demo plugins, which run inside a component), maps each top-level module to
the distribution that provides it, and requires that distribution in ``[project]
dependencies`` or some ``[project.optional-dependencies]`` extra.
"""

from __future__ import annotations

import ast
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
FIRST_PARTY = frozenset({"host", "sdk"})
NOT_INSTALLED_CODE = ("sdk/guest/", "sdk/demo/hostile/")  # runs inside a component, not the host
STDLIB_LATER = frozenset({"tomllib"})  # standard from Python 3.11 (tomli is declared for 3.10)


def _imports() -> dict[str, set[str]]:
    """``{top-level module: {files importing it}}`` for third-party modules."""
    found: dict[str, set[str]] = {}
    for package in sorted(FIRST_PARTY):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel.startswith(NOT_INSTALLED_CODE):
                continue
            for node in ast.walk(ast.parse(path.read_text("utf-8"), rel)):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in FIRST_PARTY or top in STDLIB_LATER:
                        continue
                    found.setdefault(top, set()).add(rel)
    return found


def _declared() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements.extend(extra)
    return {canonicalize_name(Requirement(text).name) for text in requirements}


def _providers() -> dict[str, list[str]]:
    """Top-level module -> the distributions that provide it. Python 3.10's
    ``packages_distributions`` reads only ``top_level.txt``, which namespace packages such
    as ``opentelemetry`` do not ship; each distribution's files are read too, as 3.11+ does."""
    providers = {name: list(dists) for name, dists in importlib.metadata.packages_distributions().items()}
    for dist in importlib.metadata.distributions():
        for file in dist.files or ():
            top = file.parts[0] if file.parts else ""
            name = top.removesuffix(".py")
            if name and "." not in name and name.isidentifier():
                providers.setdefault(name, []).append(dist.metadata["Name"])
    return providers


def test_every_top_level_import_in_host_and_sdk_is_a_declared_dependency() -> None:
    providers = _providers()
    declared = _declared()
    undeclared = {}
    for module, files in sorted(_imports().items()):
        dists = {canonicalize_name(d) for d in providers.get(module, [module])}
        if not dists & declared:
            undeclared[module] = (sorted(dists), sorted(files))
    assert not undeclared, (
        f"imported but declared in no extra of pyproject.toml (module: (distribution, files)): {undeclared}"
    )


def test_the_import_scan_sees_the_directly_used_mcp_stack() -> None:
    # The scan itself works: it finds the directly used MCP stack (they are imported, not only installed).
    imported = set(_imports())
    assert {"jwt", "anyio", "uvicorn", "starlette", "httpx2", "httpcore2", "mcp_types"} <= imported
    assert {"pyjwt", "anyio", "uvicorn", "starlette", "httpx2", "httpcore2", "mcp-types"} <= _declared()


def _constraints() -> dict[str, str]:
    """``{distribution: version}`` of the lock's pins that apply to this Python."""
    pins = {}
    for raw in (REPO / ".ci" / "constraints.txt").read_text("utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate():
            (spec,) = requirement.specifier
            pins[canonicalize_name(requirement.name)] = spec.version
    return pins


def test_ci_constraints_pin_every_declared_dependency_within_its_range() -> None:
    # .ci/run installs under .ci/constraints.txt; a dependency added to pyproject.toml
    # without `bash .ci/refresh-constraints` would install unpinned (or conflict).
    pins = _constraints()
    project = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    stale = []
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name not in pins or not requirement.specifier.contains(pins[name], prereleases=True):
            stale.append(f"{text} (lock: {pins.get(name, 'absent')})")
    assert not stale, f"run `bash .ci/refresh-constraints`: {stale}"


def test_ci_run_installs_under_the_constraints() -> None:
    run = (REPO / ".ci" / "run").read_text("utf-8")
    assert 'export PIP_CONSTRAINT="$PWD/.ci/constraints.txt"' in run
    assert run.index("export PIP_CONSTRAINT") < run.index('bash -c "set -euo pipefail; $cmd"')
    assert "PIP_CONSTRAINT" not in (REPO / "README.md").read_text("utf-8").split("<!-- test-command")[1][:400]


FORMER_STACK = frozenset({"httpx", "httpcore"})  # unmaintained; httpx2/httpcore2 continue them


def test_one_http_stack_neither_imported_nor_declared() -> None:
    # host/ and sdk/ speak HTTP through httpx2/httpcore2 only, and no extra pulls the former stack in.
    assert not FORMER_STACK & set(_imports())
    assert not FORMER_STACK & _declared()
    # Nor does any dependency: the CI lock resolves every extra, on every Python, without it.
    locked = {canonicalize_name(Requirement(line).name)
              for line in (REPO / ".ci" / "constraints.txt").read_text("utf-8").splitlines()
              if line.strip() and not line.startswith("#")}
    assert {"httpx2", "httpcore2"} <= locked and not FORMER_STACK & locked


def test_one_http_stack_loaded_by_every_http_client_of_the_host() -> None:
    # Not even through a dependency: plugin egress, MCP sources over HTTP, `stockade serve`,
    # the OCI client, the author harness and the demo leave the former stack unloaded
    # (checked in a fresh interpreter, where the former stack may well be installed).
    code = (
        "import sys\n"
        "import host.egress.session, host.mcpsource.http, host.mcp.transport\n"
        "import sdk.oci.client, sdk.harness, sdk.author.devrun, sdk.demo.tracker_api, sdk.cli\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules})\n"
        "print(' '.join(m for m in loaded if m.startswith(('httpx', 'httpcore'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["httpcore2", "httpx2"]
