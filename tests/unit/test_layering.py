"""Layers (docs/design.md §1): ``host`` never imports ``sdk``; the public names are pinned.

The import scan reads the source with :mod:`ast` (every ``import``/``from`` statement,
including ones inside functions and ``TYPE_CHECKING`` blocks), so an import that only
runs on some path is caught too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import host
import sdk
import sdk.harness

REPO = Path(__file__).resolve().parents[2]

HOST_ALL = [
    "Approval",
    "AuditLog",
    "CallRequest",
    "CallResult",
    "Ceilings",
    "ErrorInfo",
    "FilePolicyEngine",
    "Host",
    "HostConfig",
    "InvocationPlan",
    "MasterKey",
    "Principal",
    "SecretsStore",
    "StockadeError",
    "Usage",
]
SDK_ALL: list[str] = []
HARNESS_ALL = [
    "PROJECT",
    "SCRIPTED_ADDRESS",
    "SESSION",
    "SUBJECT",
    "Harness",
    "RecordedRequest",
    "Response",
    "Route",
    "UnscriptedRequest",
    "default_harness_cache",
    "placeholder",
    "route",
]
"""``sdk.harness`` is imported by every scaffolded project's tests: its names are an API."""


def imported_modules(source: str, package: str) -> set[str]:
    """Absolute names of the modules a module of ``package`` imports (relative resolved)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([package, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
            "import_module", "__import__",
        ):
            names.update(arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str))
    return names


def _layer_violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        package = ".".join(path.relative_to(root.parent).parent.parts)
        for name in imported_modules(path.read_text(encoding="utf-8"), package):
            if name == "sdk" or name.startswith("sdk."):
                found.append(f"{path.relative_to(root.parent)}: {name}")
    return found


def test_host_never_imports_sdk() -> None:
    assert list((REPO / "host").rglob("*.py")), "nothing scanned"
    assert _layer_violations(REPO / "host") == []


def _private_host_imports(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        package = ".".join(path.relative_to(root.parent).parent.parts)
        for name in imported_modules(path.read_text(encoding="utf-8"), package):
            parts = name.split(".")
            if parts[0] == "host" and any(part.startswith("_") for part in parts[1:]):
                found.append(f"{path.relative_to(root.parent)}: {name}")
    return found


def test_sdk_uses_only_public_host_modules() -> None:
    assert list((REPO / "sdk").rglob("*.py")), "nothing scanned"
    assert _private_host_imports(REPO / "sdk") == []


def test_the_private_module_scan_sees_private_host_modules() -> None:
    source = "from host._files import read_regular\nfrom host.store import _pg\nimport host.files\n"
    names = imported_modules(source, "sdk")
    private = sorted(n for n in names if any(p.startswith("_") for p in n.split(".")[1:]))
    assert private == ["host._files", "host._files.read_regular", "host.store._pg"]


def test_the_scan_sees_every_import_form() -> None:
    source = (
        "import sdk\nimport sdk.cli as c\nfrom sdk import build\nfrom sdk.bundle import x\n"
        "def f():\n    from sdk import y\n"
        "import importlib\nimportlib.import_module('sdk.demo')\n"
    )
    names = imported_modules(source, "host")
    assert {"sdk", "sdk.cli", "sdk.build", "sdk.bundle", "sdk.demo"} <= names
    assert "host.errors" in imported_modules("from .errors import StockadeError\n", "host")
    assert "host.policy.engine" in imported_modules("from .engine import x\n", "host.policy")


def test_host_public_names_are_pinned() -> None:
    assert host.__all__ == HOST_ALL
    assert all(hasattr(host, name) for name in HOST_ALL)


def test_sdk_public_names_are_pinned() -> None:
    assert sdk.__all__ == SDK_ALL


def test_harness_public_names_are_pinned() -> None:
    assert sdk.harness.__all__ == HARNESS_ALL
    assert all(hasattr(sdk.harness, name) for name in HARNESS_ALL)
