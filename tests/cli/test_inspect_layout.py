"""``stockade inspect`` output a reviewer can read in a terminal or an 80-column CI log
: decision facts first, WASI imports collapsed, no wrapped columns,
no colour codes or spinner frames without a terminal."""

from __future__ import annotations

from pathlib import Path

from tests.support.bundles import make_manifest, write_bundle
from tests.support.cli import cli_env, run_cli
from tests.support.wat import environment_component, http_component


def _bundle(root: Path, module: bytes) -> Path:
    manifest = make_manifest(module_bytes=module)
    manifest["http"]["allow"].append(
        {"scheme": "http", "host": "*.mirror.example", "port": 8080, "path_prefix": "/", "methods": ["GET"]}
    )
    manifest["http"]["allow"][0]["methods"] = ["GET", "POST", "PUT", "DELETE"]
    manifest["tools"][0]["effect"] = "write"
    manifest["tools"][0]["risk"] = "high"
    return write_bundle(root / "bundles" / "tracker", manifest, module)


def test_report_leads_with_signer_and_risk_summary(tmp_path: Path) -> None:
    proc = run_cli("inspect", str(_bundle(tmp_path, http_component())), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = "\n".join(lines[:8])
    assert "tracker@1.2.0" in lines[0]
    assert "signer       n/a" in head
    assert "tools        1: 1 write" in head and "approval     tracker.list-issues" in head
    assert "highest risk high" in head
    assert "network      2 origin(s) (wildcard hosts, plain http, non-default ports, all paths)" in head
    assert "secrets      tracker_token" in head
    assert proc.stdout.index("highest risk") < proc.stdout.index("manifest sha256")


def test_narrow_ci_log_gets_one_field_per_line_never_folded_cells(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, http_component())
    proc = run_cli("inspect", str(bundle), cwd=tmp_path, env=cli_env(COLUMNS="80"))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b[" not in proc.stdout  # no colour codes without a terminal
    lines = proc.stdout.splitlines()
    assert "  tracker.list-issues@1.2.0" in lines  # the tools table would not fit in 80 columns
    assert "    effect       write" in lines and "    rate limit   60/min, 1000/h" in lines
    assert all(len(line) <= 80 for line in lines if line.startswith(("│", "┃", "┏", "└")))
    for whole in ("https://api.tracker.example:443", "GET, POST, PUT, DELETE", "http://*.mirror.example:8080",
                  "api.tracker.example", "{repo*: string≤200}"):
        assert whole in proc.stdout, whole  # never folded across lines


def test_wide_terminal_gets_tables(tmp_path: Path) -> None:
    proc = run_cli("inspect", str(_bundle(tmp_path, http_component())), cwd=tmp_path, env=cli_env(COLUMNS="200"))
    assert any(line.startswith("│ https://api.tracker.example:443") for line in proc.stdout.splitlines())


def test_wasi_imports_are_counted_unless_asked_for(tmp_path: Path) -> None:
    module = environment_component()
    bundle = write_bundle(tmp_path / "b", make_manifest(module_bytes=module), module)
    collapsed = run_cli("inspect", str(bundle), cwd=tmp_path)
    assert collapsed.returncode == 0, collapsed.stderr
    assert "get-environment" not in collapsed.stdout
    assert "WASI imports: 1 interfaces, 2 functions" in collapsed.stdout and "--imports" in collapsed.stdout
    listed = run_cli("inspect", str(bundle), "--imports", cwd=tmp_path)
    assert "wasi:cli/environment" in listed.stdout and "get-environment" in listed.stdout
    assert "WASI imports:" not in listed.stdout
