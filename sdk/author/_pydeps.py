"""Pure-Python dependencies of a Python plugin.

``stockade.toml`` may list them under ``[package] dependencies``, one exact pin each,
optionally with hashes (pip's requirement syntax)::

    dependencies = [
      "humanize==4.9.0 --hash=sha256:ce284a76d5b1377fd8836733b983bfb0b76f1aa1c090de2566fcf008d7f6ab16",
    ]

The list is complete, like a lock: every package the plugin imports, transitive ones
included (pip runs with ``--no-deps``, so nothing is resolved behind the author's back).
They are installed with ``pip install --target <dir> --no-deps --only-binary=:all:`` (a
wheel only: no sdist, so no package code runs at build time), with ``--require-hashes``
when any pin carries a hash, and bundled by componentize-py from that directory. A
package holding a native extension (``.so``, ``.pyd``, ``.dylib``) or a non-pure wheel is
refused: componentize-py can only run pure Python inside the component.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

__all__ = ["DependencyError", "DependencyRefused", "check_dependencies", "install_dependencies"]

_PIN: Final = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
    r"(?P<hashes>(\s+--hash=sha256:[0-9a-f]{64})*)$"
)
_NATIVE: Final = (".so", ".pyd", ".dylib", ".dll")
INSTALL_TIMEOUT_S: Final = 600  # s, one pip install


class DependencyError(RuntimeError):
    """A dependency is not pinned, cannot be installed, or is not pure Python."""


class DependencyRefused(DependencyError):
    """A dependency cannot run inside a component: it holds native code (a Python
    extension, a Node.js addon) or needs an install script. The build reports it as
    ``BUILD_DEPENDENCY_REFUSED``; the message names the package and what to do."""


def check_dependencies(value: Any) -> list[str]:
    """Validate ``[package] dependencies``: a list of exact pins (``name==version``,
    optionally ``--hash=sha256:...``); all hashed or none.

    Raises:
        DependencyError: what is wrong, naming the entry.
    """
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DependencyError("[package] dependencies must be a list of strings like \"humanize==4.9.0\"")
    pins = [" ".join(v.split()) for v in value]
    for pin in pins:
        if not _PIN.match(pin):
            raise DependencyError(
                f"dependency {pin!r} must be pinned exactly: name==version, optionally followed by "
                "--hash=sha256:<hex> (ranges and URLs are refused: builds must be reproducible)"
            )
    hashed = [bool(_PIN.match(p).group("hashes")) for p in pins]  # type: ignore[union-attr]  # matched above
    if any(hashed) and not all(hashed):
        raise DependencyError("either every dependency carries --hash=sha256:... or none does")
    return pins


def install_dependencies(pins: list[str], target: Path, report: Callable[[str, float], None]) -> None:
    """Install ``pins`` into ``target`` with pip and refuse anything not pure Python.

    Raises:
        DependencyError: pip failed (its output tail is in the message) or a package is native.
    """
    if not pins:
        return
    target.mkdir(parents=True, exist_ok=True)
    requirements = target.parent / "requirements.txt"
    requirements.write_text("\n".join(pins) + "\n", "utf-8")
    argv = [
        sys.executable, "-m", "pip", "install", "--target", str(target), "--no-deps", "--only-binary=:all:",
        "--no-compile", "--no-input", "--disable-pip-version-check", "-r", str(requirements),
    ]  # fmt: skip
    if "--hash=" in pins[0]:
        argv.append("--require-hashes")
    report(f"installing {len(pins)} dependenc{'y' if len(pins) == 1 else 'ies'} with pip", 0.07)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise DependencyError(f"pip could not install the dependencies:\n{tail}")
    _refuse_native(target)


def _refuse_native(target: Path) -> None:
    for path in sorted(target.rglob("*")):
        if path.suffix in _NATIVE or ".so." in path.name:
            owner = path.relative_to(target).parts[0]
            raise DependencyRefused(
                f"dependency {owner} holds a native extension ({path.relative_to(target).as_posix()}); "
                "a plugin can only bundle pure-Python packages (componentize-py runs Python inside the "
                "component): choose a pure-Python alternative"
            )
    for wheel in sorted(target.glob("*.dist-info/WHEEL")):
        text = wheel.read_text("utf-8", errors="replace")
        if "Root-Is-Purelib: false" in text:
            raise DependencyRefused(
                f"dependency {wheel.parent.name.split('-')[0]} is not a pure-Python wheel "
                "(Root-Is-Purelib: false); a plugin can only bundle pure-Python packages"
            )
