"""``stockade cache info|prune`` and the one per-user artifact cache that inspect, lock
verify and call share. Real CLI subprocesses, real WAT components."""

from __future__ import annotations

import json
import os
from pathlib import Path

from host.runtime.cache import MAGIC
from tests.support.cli import ALICE_ARGS, cli_env, echo_workspace, json_out, run_cli


def _env(cache: Path) -> dict[str, str]:
    return cli_env(STOCKADE_CACHE_DIR=str(cache))


def test_inspect_lock_verify_and_call_share_one_compiled_artifact(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path / "ws")
    cache = tmp_path / "user-cache"
    env = _env(cache)
    first = run_cli("inspect", str(ws.bundle), "--json", cwd=ws.root, env=env)
    assert first.returncode == 0, first.stderr
    (artifact,) = (cache / "artifacts").glob("*.cwasm")
    stamp = artifact.stat().st_mtime_ns
    verify = run_cli("lock", "verify", "--lock", str(ws.lock), "--components", cwd=ws.root, env=env)
    assert verify.returncode == 0, verify.stderr
    call = run_cli(
        "call", "echo.say@1.0.0", "--input", '{"message": "hi"}', *ws.host_args, *ALICE_ARGS,
        "--json", cwd=ws.root, env=env,
    )  # fmt: skip
    assert call.returncode == 0, call.stderr
    assert list((cache / "artifacts").glob("*.cwasm")) == [artifact]  # compiled once, reused
    assert artifact.stat().st_mtime_ns >= stamp
    assert not (ws.state / "artifacts").exists()  # the CLI host no longer keeps its own copy


def test_forged_shared_artifact_is_recompiled_never_loaded(tmp_path: Path) -> None:
    # Another process writes native code into the shared cache without the key: the
    # HMAC fails, the component is recompiled and the artifact rewritten.
    ws = echo_workspace(tmp_path / "ws")
    cache = tmp_path / "user-cache"
    assert run_cli("inspect", str(ws.bundle), "--json", cwd=ws.root, env=_env(cache)).returncode == 0
    (artifact,) = (cache / "artifacts").glob("*.cwasm")
    forged = MAGIC + b"\0" * 32 + b"not a component"
    artifact.write_bytes(forged)
    again = run_cli("inspect", str(ws.bundle), "--json", cwd=ws.root, env=_env(cache))
    assert again.returncode == 0, again.stderr
    report = json_out(again)["packages"][0]["component"]
    assert report["accepted"] is True and "call" in report["exports"]


def test_cache_info_and_prune_report_and_free_space(tmp_path: Path) -> None:
    ws = echo_workspace(tmp_path / "ws")
    cache = tmp_path / "user-cache"
    env = _env(cache)
    assert run_cli("inspect", str(ws.bundle), cwd=ws.root, env=env).returncode == 0
    (cache / "builds" / "k1").mkdir(parents=True)
    (cache / "builds" / "k1" / "module.wasm").write_bytes(b"\0" * 1000)
    info = json_out(run_cli("cache", "info", "--json", cwd=tmp_path, env=env))
    assert info["root"] == str(cache)
    assert info["artifacts"]["entries"] == 1 and info["artifacts"]["bytes"] > 0
    assert info["builds"] == {
        "path": str(cache / "builds"), "entries": 1, "bytes": 1000, "max_bytes": 1024**3
    }  # fmt: skip
    kept = run_cli("cache", "prune", "--json", cwd=tmp_path, env=env)
    assert json_out(kept)["artifacts"]["removed"] == 0  # under the caps: nothing goes
    pruned = json_out(run_cli("cache", "prune", "--all", "--json", cwd=tmp_path, env=env))
    assert pruned["artifacts"]["removed"] == 1 and pruned["builds"] == {"removed": 1, "freed_bytes": 1000}
    assert list((cache / "artifacts").glob("*.cwasm")) == []
    assert (cache / "artifacts" / "artifact.key").exists()
    human = run_cli("cache", "info", cwd=tmp_path, env=env)
    assert human.returncode == 0 and "artifacts" in human.stdout and "0 entries" in human.stdout


def test_cache_root_defaults_under_xdg_cache_home(tmp_path: Path) -> None:
    env = {k: v for k, v in cli_env().items() if k != "STOCKADE_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    info = json.loads(run_cli("cache", "info", "--json", cwd=tmp_path, env=env).stdout)
    assert info["root"] == os.path.join(tmp_path, "xdg", "stockade")
