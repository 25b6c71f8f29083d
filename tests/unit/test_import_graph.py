"""The shape of ``host`` and ``sdk`` (docs/architecture.md): no import cycle, layers bottom first.

Every ``import`` counts, including ones inside functions and ``TYPE_CHECKING`` blocks: a
cycle masked by either still means two modules that cannot be read (or moved) apart.
``from pkg import name`` is an edge to the submodule ``pkg.name`` when there is one, else
to ``pkg``; that importing a submodule first runs its package's ``__init__`` is not an
edge (else every package that re-exports its modules would be a cycle).

The host's layers are :data:`HOST_LAYERS`, bottom first: a module imports only from its
own layer and the layers below. A new module joins a layer here, in the same change.
"""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HOST_LAYERS: list[tuple[str, list[str]]] = [
    ("core", [
        "host.errors", "host.canonical", "host.config", "host._files", "host.files", "host.signing",
        "host.text", "host.types",
        # Observability hooks (no-ops until enabled); they import nothing of host.
        "host.observe",
    ]),
    ("secrets", ["host.secrets"]),
    ("egress", ["host.egress"]),
    # The formats of what a lock pins: the schema subset and the external profile, the
    # manifest, the operator's host file, and the MCP source pin (host/formats/).
    ("formats", ["host.formats"]),
    # HTTP cassettes: record and replay at egress's transport seam, written in the
    # stockade.cassette/1 format, so above both (authoring only; Host never imports it).
    ("cassettes", ["host.egress.cassette"]),
    # The process sandbox (bubblewrap, seccomp, rlimits) of exec.run and stdio MCP servers.
    ("process sandbox", ["host.sandbox"]),
    # Peers (PEERS below): none of the five packages imports another.
    ("audit, runtime, policy, trust, adapters", [
        "host.audit", "host.runtime", "host.policy", "host.trust", "host.adapters",
        "host.ratelimit", "host.approvals", "host.approverkey", "host.scopes",
    ]),
    ("store", ["host.store"]),
    ("sources", ["host.mcpsource"]),
    ("host tools", ["host.tools"]),
    ("pipeline", ["host.call"]),
    # host.schema and host.manifest: deprecated aliases of their host.formats modules.
    ("outside", ["host", "host.mcp", "host.schema", "host.manifest"]),
]
"""The host's layers, bottom first (a package's name covers its modules unless a longer
name places one elsewhere; ``host`` alone is only ``host/__init__.py``)."""

PEERS: list[str] = ["host.audit", "host.runtime", "host.policy", "host.trust", "host.adapters"]
"""Packages of one layer that never import each other (docs/architecture.md): each can be
read, tested and changed without the others."""


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module name → the modules of the same top-level package it imports (any form)."""
    modules: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path

    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = {
            target
            for imported in _imports(path.read_text(encoding="utf-8"), package)
            if imported.split(".")[0] == root.name
            for target in [resolve(imported) if imported not in modules else imported]
            if target and target != name
        }
    return graph


def _imports(source: str, package: str) -> set[str]:
    """Absolute names one module imports (relative imports resolved)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(module: str, layers: list[tuple[str, list[str]]]) -> tuple[int, str] | None:
    """(position, name) of the layer that places ``module`` (the longest matching name).

    A name places its own modules and subpackages, except the top-level package's name,
    which places only its ``__init__``: a new top-level module has no layer until one is
    chosen for it."""
    best: tuple[int, str, int] | None = None
    for position, (layer, names) in enumerate(layers):
        for name in names:
            covers = module == name or ("." in name and module.startswith(name + "."))
            if covers and (best is None or len(name) > best[2]):
                best = (position, layer, len(name))
    return None if best is None else (best[0], best[1])


def upward_imports(graph: Mapping[str, set[str]], layers: list[tuple[str, list[str]]]) -> list[str]:
    """Every import of a module from a layer above its own, and every module no layer places."""
    found = []
    for module in sorted(graph):
        mine = layer_of(module, layers)
        if mine is None:
            found.append(f"{module}: in no layer (add it to HOST_LAYERS)")
            continue
        for dep in sorted(graph[module]):
            theirs = layer_of(dep, layers)
            if theirs is not None and theirs[0] > mine[0]:
                found.append(f"{module} ({mine[1]}) imports {dep} ({theirs[1]})")
    return found


def peer_imports(graph: Mapping[str, set[str]], peers: list[str]) -> list[str]:
    """Every import of one peer package's module from another peer package."""

    def peer(module: str) -> str | None:
        return next((p for p in peers if module == p or module.startswith(p + ".")), None)

    return [
        f"{module} imports {dep}"
        for module in sorted(graph)
        if (mine := peer(module)) is not None
        for dep in sorted(graph[module])
        if (theirs := peer(dep)) is not None and theirs != mine
    ]


@pytest.mark.parametrize("package", ["host", "sdk"])
def test_no_import_cycle(package: str) -> None:
    graph = module_graph(REPO / package)
    assert len(graph) > 20, "nothing scanned"
    assert cycles(graph) == []


def test_host_imports_only_from_its_layer_and_below() -> None:
    graph = module_graph(REPO / "host")
    assert upward_imports(graph, HOST_LAYERS) == []


def test_peers_never_import_each_other() -> None:
    graph = module_graph(REPO / "host")
    assert peer_imports(graph, PEERS) == []


def test_every_layer_name_exists() -> None:
    graph = module_graph(REPO / "host")
    missing = [name for _, names in HOST_LAYERS for name in names if name not in graph]
    assert missing == []


# -- the guards themselves: each one fails on the shape it forbids -----------------------


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def test_a_cycle_hidden_behind_type_checking_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import B\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\nB = 1\n",
    })
    assert cycles(module_graph(root)) == [["pkg.a", "pkg.b"]]


def test_a_cycle_through_a_function_local_import_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "sub/__init__.py": "",
        "sub/a.py": "from ..c import C\n",
        "c.py": "def f():\n    from pkg.sub import a\n    return a\nC = 1\n",
    })
    assert cycles(module_graph(root)) == [["pkg.c", "pkg.sub.a"]]


def test_a_package_reexporting_its_modules_is_not_a_cycle(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "run/__init__.py": "from pkg.run.core import Runtime\n",
        "run/core.py": "from pkg.run import _compat\nRuntime = 1\n",
        "run/_compat.py": "",
    })
    assert cycles(module_graph(root)) == []


def test_an_upward_import_and_an_unplaced_module_are_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "errors.py": "def f():\n    from pkg.call.host import Host\n",
        "call/__init__.py": "",
        "call/host.py": "from pkg.errors import f\nHost = 1\n",
        "stray.py": "",
    })
    layers = [("core", ["pkg.errors"]), ("pipeline", ["pkg.call"]), ("outside", ["pkg"])]
    assert upward_imports(module_graph(root), layers) == [
        "pkg.errors (core) imports pkg.call.host (pipeline)",
        "pkg.stray: in no layer (add it to HOST_LAYERS)",
    ]


def test_an_import_between_peers_is_found(tmp_path: Path) -> None:
    root = _tree(tmp_path, {
        "__init__.py": "",
        "policy/__init__.py": "",
        "policy/bind.py": "def f():\n    from pkg.trust.registry import Tool\n",
        "trust/__init__.py": "",
        "trust/registry.py": "from pkg.policy import bind\nTool = 1\n",
        "audit.py": "from pkg.policy.bind import f\n",
    })
    assert peer_imports(module_graph(root), ["pkg.policy", "pkg.trust"]) == [
        "pkg.policy.bind imports pkg.trust.registry",
        "pkg.trust.registry imports pkg.policy.bind",
    ]


@pytest.mark.parametrize(("old", "new", "name"), [
    ("host.schema", "host.formats.schema", "check_schema"),
    ("host.manifest", "host.formats.manifest", "PackageManifest"),
])
def test_moved_stable_paths_still_import_and_warn(old: str, new: str, name: str) -> None:
    # docs/design.md §11 listed host.schema and host.manifest as stable: the aliases keep
    # them working (the same objects) and say where they went.
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        alias = importlib.import_module(old)
    assert getattr(alias, name) is getattr(importlib.import_module(new), name)
    assert alias.__all__ == importlib.import_module(new).__all__
