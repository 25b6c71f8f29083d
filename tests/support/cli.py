"""Run the real ``stockade`` entry point in a subprocess, and build workspaces for it.

    ws = echo_workspace(tmp_path, allow=["tool.call:echo.say", "echo.use"])
    proc = ws.run("call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ws.host_args, *ALICE_ARGS)
    assert proc.returncode == 0, proc.stderr

Every piece is real: the bundle and lock files, the policy file, the audit log, the
secrets store and wasmtime; the module is the WAT echo component (compiles in ms).
Standard input is ``/dev/null`` unless ``stdin=`` is given, so it is never a terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.bundles import lock_entry, write_bundle, write_lock
from tests.support.hosts import echo_manifest, echo_tool, write_policy
from tests.support.wat import echo_component

REPO = Path(__file__).resolve().parents[2]
ALICE_ARGS = ("--project", "p", "--subject", "alice")


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("COLUMNS", "200")  # wide tables: assertions see whole cells
    env.update(extra)
    return env


def run_cli(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m sdk.cli ARGS`` and capture its output (text)."""
    kwargs: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run(
        [sys.executable, "-m", "sdk.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or cli_env(),
        check=False,
        **kwargs,
    )


def run_cli_tty(
    *args: str, cwd: Path, answer: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI with a pseudo-terminal as standard input, typing ``answer`` into it."""
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sdk.cli", *args],
            cwd=cwd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or cli_env(),
        )
        os.close(slave)
        os.write(master, answer.encode())
        out, err = proc.communicate(timeout=timeout)
    finally:
        os.close(master)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def json_out(proc: subprocess.CompletedProcess[str]) -> Any:
    """Parse the JSON a ``--json`` command printed on stdout."""
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"not JSON (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc


@dataclass
class Workspace:
    root: Path
    lock: Path
    state: Path
    bundle: Path

    @property
    def host_args(self) -> tuple[str, ...]:
        return ("--lock", str(self.lock), "--state-dir", str(self.state))

    def run(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, cwd=self.root, **kwargs)


def echo_workspace(
    root: Path,
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    allow: Sequence[str] = ("tool.call:echo.say", "echo.use"),
    ask: Sequence[str] = (),
    manifest_overrides: dict[str, Any] | None = None,
) -> Workspace:
    """A lock with the echo package, and a state directory whose policy lets ``alice`` in
    project ``p`` hold ``allow`` (and be asked for ``ask``)."""
    module = echo_component()
    manifest = echo_manifest(tools or [echo_tool()], module, **(manifest_overrides or {}))
    bundle = write_bundle(root / "bundles" / "echo", manifest, module)
    lock = write_lock(root / "stockade.lock", [lock_entry(root, bundle)])
    state = root / "state"
    state.mkdir(mode=0o700)
    write_policy(state / "policy.json", allow=allow, ask=ask)
    return Workspace(root=root, lock=lock, state=state, bundle=bundle)


# The checkout's node_modules holds exactly the pinned JavaScript toolchain: pointing
# STOCKADE_JS_TOOLCHAIN at it spares a 386 MB install per test (the code path is the same:
# the toolchain is checked against the pins, then linked beside the build script).
AUTHOR_CACHE_ENV = {"XDG_CACHE_HOME": str(REPO / ".stockade-cache"), "STOCKADE_JS_TOOLCHAIN": str(REPO)}


def author_cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``stockade ARGS`` as an author runs it, with the checkout's build caches and toolchain."""
    return run_cli(*args, cwd=cwd, env=cli_env(**AUTHOR_CACHE_ENV), timeout=timeout)


def new_build_test_round_trip(tmp_path: Path, lang: str) -> None:
    """``stockade new rt-LANG`` -> ``build --json`` -> ``test``: the scaffold's files, the
    bundle's tools and the scaffold's own 5 tests passing (tests/cli/test_new_and_test*.py)."""
    source = {"python": "app.py", "javascript": "app.js"}[lang]
    name = f"rt-{lang}"
    new = author_cli("new", name, "--lang", lang, cwd=tmp_path)
    assert new.returncode == 0, new.stderr
    project = tmp_path / name
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()) == sorted(
        ["stockade.toml", source, "README.md", ".gitignore", "tests/test_tools.py"]
    )

    build = author_cli("build", str(project), "--json", cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    bundle = Path(json.loads(build.stdout)["bundle"])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [t["name"] for t in manifest["tools"]] == [f"{name}.greet", f"{name}.lookup"]

    test = author_cli("test", str(project), cwd=tmp_path)
    assert test.returncode == 0, test.stdout + test.stderr
    assert "5 passed" in test.stdout
    assert f"built {name}-0.1.0" in test.stderr
