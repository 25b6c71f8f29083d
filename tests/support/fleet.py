"""A fleet of real host processes on one PostgreSQL store, for tests and benchmarks.

:func:`make_repo` writes one real bundle (the WAT echo component), two lock generations,
a policy file and a tool policy: ``echo.write`` and ``echo.limited`` (100/min) are write
tools allowed outright, ``echo.ask`` is a write tool that needs a person's approval.

:class:`Worker` runs ``python -m tests.support.fleet_worker`` — a separate process with
its own :class:`~host.Host` and its own :class:`~host.store.postgres.PostgresStore` — and
talks to it in JSON lines over its stdin/stdout. Commands are answered in order, so a
test can hold several workers at one point (each answered ``ready``) and release them
together: a barrier made of pipes, not sleeps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host import FilePolicyEngine
from host.formats.manifest import PackageManifest
from host.policy.bindings import package_binding
from host.policy.toolpolicy import ToolMode, ToolPolicyStore, ToolSelector
from host.trust.registry import Binding, FrozenRegistry
from tests.support.bundles import lock_digest, lock_entry, write_bundle, write_lock
from tests.support.hosts import echo_manifest, echo_tool
from tests.support.wat import echo_component

ROOT = Path(__file__).resolve().parents[2]
STORE_ENV = "STOCKADE_STORE"


@dataclass(frozen=True)
class Repo:
    root: Path
    gen1: Path
    gen2: Path
    policy: Path
    tool_policy: Path


def _bindings(bundle: Path) -> dict[str, str]:
    """The binding digest of each tool of an (unsigned) bundle, as a Host computes it."""
    manifest = PackageManifest.from_json((bundle / "manifest.json").read_bytes())
    binding = Binding(manifest.package.name, manifest.package.version, 1, "0" * 64, manifest.module.sha256)
    return {t.name: package_binding(t, key_id=None) for t in FrozenRegistry.from_packages([(manifest, binding)])}


def make_repo(root: Path) -> Repo:
    """Write the bundle, locks (generations 1 and 2) and policies under ``root``."""
    tools = [
        echo_tool(name="echo.write", effect="write", permissions=["echo.use"]),
        echo_tool(name="echo.limited", effect="write", permissions=["echo.use"],
                  rate_limit={"per_minute": 100, "per_hour": 100_000}),
        echo_tool(name="echo.ask", effect="write", permissions=["echo.use"]),
    ]
    module = echo_component()
    bundle = write_bundle(root / "bundles" / "echo", echo_manifest(tools, module), module)
    gen1 = write_lock(root / "gen1.lock", [lock_entry(root, bundle)])
    gen2 = write_lock(root / "gen2.lock", [lock_entry(root, bundle)], generation=2, previous=lock_digest(gen1))
    engine = FilePolicyEngine.initialize(root / "policy.json")
    engine.set_role("user", allow=[f"tool.call:{t['name']}" for t in tools] + ["echo.use"], ask=[])
    engine.grant_role("p", "alice", "user")
    tool_policy = ToolPolicyStore(root / "tool-policy", admin_dir=None)
    bindings = _bindings(bundle)  # an allow is bound to what was reviewed
    for name in ("echo.write", "echo.limited"):
        tool_policy.set("alice", "p", ToolSelector(name), ToolMode.ALLOW, bound={name: bindings[name]})
    return Repo(root, gen1, gen2, root / "policy.json", root / "tool-policy")


class Worker:
    """One host process (see the module docstring)."""

    def __init__(
        self, repo: Repo, dsn: str, name: str, *, store_timeout_s: float = 5.0, probe_s: float = 0.25
    ) -> None:
        state = repo.root / "state" / name
        env = {**os.environ, STORE_ENV: dsn, "PYTHONPATH": str(ROOT),
               "FLEET_STORE_TIMEOUT_S": str(store_timeout_s), "FLEET_STORE_PROBE_S": str(probe_s)}
        # stderr goes to a file: a pipe nobody reads would fill with the driver's warnings
        # during an outage and block the worker.
        state.parent.mkdir(parents=True, exist_ok=True)
        self._stderr_path = state.parent / f"{name}.stderr"
        with open(self._stderr_path, "w") as stderr:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.fleet_worker", str(repo.root), str(state)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                text=True, env=env, cwd=ROOT,
            )

    def send(self, op: str, **args: Any) -> None:
        """Send one command without waiting for its answer."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        """The answer to the oldest command not yet read."""
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            stderr = self._stderr_path.read_text(errors="replace")
            raise RuntimeError(f"fleet worker exited ({self._proc.wait()}): {stderr[-4000:]}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, op: str, **args: Any) -> dict[str, Any]:
        """Send a command and wait for its answer."""
        self.send(op, **args)
        return self.answer()

    def close(self) -> None:
        """Ask the worker to exit and reap it."""
        if self._proc.poll() is None:
            try:
                self.send("exit")
            except (BrokenPipeError, OSError):
                pass
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
