"""``stockade serve --transport http`` and its tokens file: the one ``stockade tokens add`` writes.

Before, ``serve --tokens FILE`` started on a file that did not exist and answered every
request 401 with nothing logged, and a tokens server published OAuth protected-resource
metadata naming itself (whose metadata is 404), so OAuth-capable clients began an
interactive login. Real servers on loopback; real files.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2

from tests.mcp.conftest import World
from tests.mcp.test_http import HEADERS, INITIALIZE, grant_carol_reader, http_server
from tests.support.cli import run_cli


def _serve_http(world: World, *extra: str) -> tuple[int, str, str]:
    proc = run_cli("serve", "--transport", "http", "--port", "0", "--lock", str(world.lock),
                   "--state-dir", str(world.state), *extra, cwd=world.root, timeout=60)
    return proc.returncode, proc.stdout, proc.stderr


def test_serve_refuses_a_missing_tokens_file_with_exit_2(world: World) -> None:
    missing = world.root / "nowhere" / "tokens.json"
    for option in ("--tokens-file", "--tokens"):  # the older spelling still names the same file
        code, out, err = _serve_http(world, option, str(missing))
        assert code == 2 and "TOKENS_UNAVAILABLE" in err and "does not exist" in err, err
        assert "stockade tokens add" in err and out == ""


def test_serve_refuses_a_malformed_or_unsafe_tokens_file(world: World) -> None:
    bad = world.root / "tokens.json"
    bad.write_text("not json")
    bad.chmod(0o600)
    code, _, err = _serve_http(world, "--tokens-file", str(bad))
    assert code == 2 and "TOKENS_UNAVAILABLE" in err and "malformed" in err, err
    bad.write_text(json.dumps({"format": "stockade.tokens/1", "tokens": []}))
    bad.chmod(0o666)  # anyone could add a token: never trusted
    code, _, err = _serve_http(world, "--tokens-file", str(bad))
    assert code == 2 and "TOKENS_UNAVAILABLE" in err, err


def test_serve_reads_the_tokens_file_tokens_add_wrote_by_default(world: World) -> None:
    grant_carol_reader(world)
    added = run_cli("tokens", "add", "--project", "p", "--subject", "carol", "--state-dir", str(world.state),
                    "--json", cwd=world.root)
    assert added.returncode == 0, added.stderr
    token = json.loads(added.stdout)["token"]
    with http_server(world) as served:  # no --tokens-file: <state-dir>/tokens.json, as `tokens add` wrote it
        assert any("bearer tokens from" in line and "(1 tokens)" in line for line in served.stderr)
        assert httpx2.post(served.url, json=INITIALIZE, headers=HEADERS, timeout=30).status_code == 401
        ok = httpx2.post(served.url, json=INITIALIZE, headers=HEADERS | {"Authorization": f"Bearer {token}"},
                        timeout=30)
        assert ok.status_code == 200, ok.text


def test_tokens_server_publishes_no_oauth_metadata(world: World) -> None:
    # Metadata naming this server as its own authorization server sent OAuth clients into a
    # login against a 404; stockade tokens have no authorization server to name.
    tokens = world.state / "tokens.json"
    with http_server(world, "--tokens", str(tokens)) as served:
        base = served.url.rsplit("/mcp", 1)[0]
        refused = httpx2.post(served.url, json=INITIALIZE, headers=HEADERS, timeout=30)
        assert refused.status_code == 401
        assert "resource_metadata" not in refused.headers.get("www-authenticate", "")
        for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
            assert httpx2.get(base + path, timeout=30).status_code == 404


def test_tokens_add_and_serve_name_the_file_with_the_same_option(world: World, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    added = run_cli("tokens", "add", "--project", "p", "--subject", "alice", "--tokens-file", str(elsewhere),
                    "--state-dir", str(world.state), cwd=world.root)
    assert added.returncode == 0, added.stderr
    assert elsewhere.is_file() and not (world.state / "tokens.json").exists()
    with http_server(world, "--tokens-file", str(elsewhere)) as served:
        assert any(f"bearer tokens from {elsewhere}" in line for line in served.stderr)
