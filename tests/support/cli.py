"""Run the real ``stockade`` entry point in a subprocess, and build workspaces for it.

    ws = echo_workspace(tmp_path, allow=["tool.call:echo.say", "echo.use"])
    proc = ws.run("call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ws.host_args, *ALICE_ARGS)
    assert proc.returncode == 0, proc.stderr

Every piece is real: the bundle and lock files, the policy file, the audit log, the
secrets store and wasmtime; the module is the WAT echo component (compiles in ms).
Standard input is ``/dev/null`` unless ``stdin=`` is given, so it is never a terminal.

**In process, by default.** ``run_cli`` calls ``sdk.cli.main`` in the test's own process
(a fresh interpreter per call cost ~0.5 s, ~0.7 s under coverage, and the suite makes
hundreds), with what a child process would have had of its own: the working directory,
the environment, standard input, and file descriptors 1 and 2 captured at the fd level
(so the output of the command's own child processes is captured too). The logging
configuration and ``sys.argv`` are restored after the call. Commands in
:data:`SUBPROCESS_COMMANDS` (they serve until stopped, configure logging for the process,
or run pytest) and every call while ``STOCKADE_TEST_CLI_SUBPROCESS=1`` is set run in a
real ``python -m sdk.cli`` child instead; ``subprocess=True`` asks for one.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess as _subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sdk import cli
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


# The first word of the command line that is not an option names the command.
SUBPROCESS_COMMANDS = frozenset({"serve", "test", "dev", "watch", "demo"})


def run_cli(
    *args: str,
    cwd: Path,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    subprocess: bool = False,
) -> _subprocess.CompletedProcess[str]:
    """Run ``stockade ARGS`` (in process unless asked otherwise; module docstring)."""
    command = next((a for a in args if not a.startswith("-")), None)
    if subprocess or command in SUBPROCESS_COMMANDS or os.environ.get("STOCKADE_TEST_CLI_SUBPROCESS") == "1":
        return run_cli_subprocess(*args, cwd=cwd, stdin=stdin, env=env, timeout=timeout)
    return _run_in_process(list(args), cwd=cwd, stdin=stdin, env=env or cli_env())


def _run_in_process(
    args: list[str], *, cwd: Path, stdin: str | None, env: dict[str, str]
) -> _subprocess.CompletedProcess[str]:
    root = logging.getLogger()
    saved_logging = (list(root.handlers), root.level)
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_argv, saved_env, saved_cwd = sys.argv, dict(os.environ), os.getcwd()
    saved_fds = (os.dup(1), os.dup(2))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        for stream in saved_streams[1:]:
            stream.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        stdout = io.TextIOWrapper(open(os.dup(1), "wb", buffering=0), encoding="utf-8", write_through=True)
        stderr = io.TextIOWrapper(
            open(os.dup(2), "wb", buffering=0), encoding="utf-8", errors="backslashreplace", write_through=True
        )
        data = (stdin or "").encode("utf-8")
        sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
        sys.stdout, sys.stderr = stdout, stderr
        sys.argv = [str(REPO / "sdk" / "cli.py"), *args]
        os.environ.clear()
        os.environ.update(env)
        root.handlers[:] = []  # as in a fresh process: logging's last resort writes to stderr
        root.setLevel(logging.WARNING)
        try:
            os.chdir(cwd)
            try:
                code = cli.main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except BaseException:  # what an uncaught exception does to a process
                traceback.print_exc()
                code = 1
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)
            sys.argv = saved_argv
            sys.stdin, sys.stdout, sys.stderr = saved_streams
            os.dup2(saved_fds[0], 1)
            os.dup2(saved_fds[1], 2)
            for fd in saved_fds:
                os.close(fd)
            for stream in (stdout, stderr):
                with contextlib.suppress(Exception):
                    stream.close()
            root.handlers[:] = saved_logging[0]
            root.setLevel(saved_logging[1])
        out.seek(0)
        err.seek(0)
        text_out = out.read().decode("utf-8", errors="replace")
        text_err = err.read().decode("utf-8", errors="replace")
    return _subprocess.CompletedProcess(["stockade", *args], code, text_out, text_err)


def run_cli_subprocess(
    *args: str, cwd: Path, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> _subprocess.CompletedProcess[str]:
    """Run ``python -m sdk.cli ARGS`` in a child process and capture its output (text)."""
    kwargs: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": _subprocess.DEVNULL}
    return _subprocess.run(
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
) -> _subprocess.CompletedProcess[str]:
    """Run the CLI with a pseudo-terminal as standard input, typing ``answer`` into it."""
    master, slave = os.openpty()
    try:
        proc = _subprocess.Popen(
            [sys.executable, "-m", "sdk.cli", *args],
            cwd=cwd, stdin=slave, stdout=_subprocess.PIPE, stderr=_subprocess.PIPE, text=True, env=env or cli_env(),
        )
        os.close(slave)
        os.write(master, answer.encode())
        out, err = proc.communicate(timeout=timeout)
    finally:
        os.close(master)
    return _subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def json_out(proc: _subprocess.CompletedProcess[str]) -> Any:
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

    def run(self, *args: str, **kwargs: Any) -> _subprocess.CompletedProcess[str]:
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


def author_cli(*args: str, cwd: Path, timeout: float = 600) -> _subprocess.CompletedProcess[str]:
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
