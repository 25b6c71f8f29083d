"""Load the guest SDK under plain CPython against the real generated bindings.

``componentize-py bindings`` generates the same ``wit_world`` and ``componentize_py_types``
modules a plugin is built with; the SDK is imported against them, and the host imports
(``wit_world.imports.host``) are replaced by a scripted fake per test. No wasm runs here.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
GUEST_DIR = REPO_ROOT / "sdk" / "guest"
WIT = REPO_ROOT / "sdk" / "wit" / "stockade.wit"
_PREFIXES = ("stockade", "wit_world", "componentize_py_types", "componentize_py_async_support", "poll_loop")
_SCRIPT = (
    "import sys; from componentize_py import script; sys.argv[0] = 'componentize-py'; sys.exit(script())"
)


@dataclass
class FakeHost:
    """The host side of the world: records calls and answers from a script."""

    answer: Any = None  # a types.Response, or an HttpError_* case to raise as Err
    requests: list[Any] = field(default_factory=list)
    logs: list[tuple[str, str]] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)


@dataclass
class Guest:
    """The imported guest SDK and the bindings it runs against."""

    stockade: ModuleType
    dispatch: ModuleType
    types: ModuleType
    Err: type[Exception]
    host: FakeHost

    def call(self, tool: str, input_text: str) -> tuple[str, str]:
        """Run the world's export; ``("ok", text)`` or ``(case, message)`` of the tool-error."""
        try:
            return "ok", self.dispatch.WitWorld().call(tool, input_text)
        except self.Err as err:
            case = type(err.value).__name__.removeprefix("ToolError_")
            return {"InvalidInput": "invalid-input", "Failed": "failed"}[case], err.value.value


@pytest.fixture(scope="session")
def bindings_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if sys.version_info < (3, 11):
        pytest.skip("componentize-py's generated bindings use typing.Self (Python >= 3.11)")
    out = tmp_path_factory.mktemp("bindings") / "out"
    subprocess.run(
        [sys.executable, "-c", _SCRIPT, "-d", str(WIT), "-w", "tool", "bindings", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


def _forget_modules() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in _PREFIXES:
            del sys.modules[name]


@pytest.fixture
def guest(bindings_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Guest]:
    """A freshly imported guest SDK (empty handler registry) with a scripted host."""
    _forget_modules()
    monkeypatch.syspath_prepend(str(GUEST_DIR))
    monkeypatch.syspath_prepend(str(bindings_dir))
    componentize_py_types = importlib.import_module("componentize_py_types")
    host_module = importlib.import_module("wit_world.imports.host")
    types = importlib.import_module("wit_world.imports.types")

    fake = FakeHost()

    def http_request(req: Any) -> Any:
        fake.requests.append(req)
        if isinstance(fake.answer, types.Response):
            return fake.answer
        raise componentize_py_types.Err(fake.answer)

    monkeypatch.setattr(host_module, "http_request", http_request)
    monkeypatch.setattr(host_module, "log", lambda level, msg: fake.logs.append((level.name, msg)))
    monkeypatch.setattr(host_module, "secret_available", lambda name: name in fake.secrets)
    stockade = importlib.import_module("stockade")
    dispatch = importlib.import_module("stockade._dispatch")
    try:
        yield Guest(stockade, dispatch, types, componentize_py_types.Err, fake)
    finally:
        _forget_modules()
