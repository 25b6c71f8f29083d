"""HTTP cassettes end to end: record a real TLS server through the host's egress, replay offline.

The fake API (a loopback HTTPS server under a test CA, reached through the explicit
``host → 127.0.0.1:PORT`` remap) echoes the bearer token in every spelling a careless
server might (raw, URL-encoded, base64, hex), sets a cookie and returns an
``access_token``. The written file is grepped for every form; replay then runs with
every socket connect of the test process failing the test, for a Python and a
JavaScript plugin, and under the current manifest's rules (a narrowed allowlist is
``EGRESS_DENIED``; a gzip body goes through the host's decoder and its limit).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest

from host.errors import CassetteInvalid
from host.formats.cassette import body_fields
from sdk._cassette import CassetteWarning, UnusedInteractions
from sdk._loopback import LoopbackRemap
from sdk.author.devrun import dev_run
from sdk.cli import main
from sdk.harness import Harness
from tests.support.plugins import REPO_ROOT, build_test_plugin
from tests.support.servers import Exchange, LoopbackServer
from tests.support.tls import CertAuthority

pytestmark = pytest.mark.slow

CACHE = REPO_ROOT / ".stockade-cache" / "stockade"
HOST = "api.echo.example"
TOKEN = "bearer/secret+value=0123456789abcdef"
QUERY_KEY = "query secret&key/0123456789"
ISSUED = "issued-access-token-0123456789"
COOKIE = "session-cookie-value-0123456789"
SECRETS = {"echo_token": TOKEN, "query_key": QUERY_KEY}


def _forms(value: str) -> list[str]:
    data = value.encode()
    b64 = base64.b64encode(data).decode()
    url = base64.urlsafe_b64encode(data).decode()
    return [value, quote(value, safe=""), quote(value, safe="/"), quote_plus(value), b64, b64.rstrip("="),
            url, url.rstrip("="), data.hex(), data.hex().upper()]  # fmt: skip


def _api(ex: Exchange) -> None:
    auth = ex.request.header("authorization") or ""
    token = auth.removeprefix("Bearer ")
    document = {
        "auth": auth, "b64": base64.b64encode(token.encode()).decode(), "hex": token.encode().hex(),
        "url": quote(token, safe=""), "access_token": ISSUED, "refresh_token": "refresh-0123456789",
        "target": ex.request.target,
    }  # fmt: skip
    headers = [("Content-Type", "application/json"), ("Set-Cookie", f"sid={COOKIE}; Path=/; HttpOnly")]
    ex.respond(200, json.dumps(document).encode(), headers)


def _gzip(ex: Exchange) -> None:
    body = gzip.compress(b"zipped " * 200, mtime=0)
    ex.respond(200, body, [("Content-Type", "text/plain"), ("Content-Encoding", "gzip")])


def _gzip_echo(ex: Exchange) -> None:
    """A compressed echo of the token: a scan of the bytes on the wire would not see it."""
    token = (ex.request.header("authorization") or "").removeprefix("Bearer ")
    body = gzip.compress(json.dumps({"token": token, "b64": base64.b64encode(token.encode()).decode()}).encode(),
                         mtime=0)  # fmt: skip
    ex.respond(200, body, [("Content-Type", "application/json"), ("Content-Encoding", "gzip")])


def _with_credentials(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["http"]["credentials"] = [
        {"secret": "echo_token", "location": {"type": "bearer"}, "hosts": [HOST], "path_prefixes": ["/v1"],
         "optional": True},
        {"secret": "query_key", "location": {"type": "query", "name": "key"}, "hosts": [HOST],
         "path_prefixes": ["/v1/query"], "optional": True},
    ]  # fmt: skip
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cassette-bundles")
    return {
        "echo": _with_credentials(build_test_plugin("echo_py").bundle_dir, root / "py"),
        "echojs": _with_credentials(build_test_plugin("echo_js").bundle_dir, root / "js"),
    }


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LoopbackServer, Path]]:
    ca = CertAuthority.create(tmp_path_factory.mktemp("cassette-ca"))
    routes = {"/v1/echo": _api, "/v1/query": _api, "/v1/gzip": _gzip, "/v1/gzip-echo": _gzip_echo}
    with LoopbackServer(tls=ca.server_context([HOST]), routes=routes) as server:
        yield server, ca.ca_file


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any connect of the test process fails the test (replay must not touch the network)."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        pytest.fail(f"a socket connect was attempted during replay: {args[1:]!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


CALLS = [
    {"url": f"https://{HOST}/v1/echo"},
    {"url": f"https://{HOST}/v1/query?page=2"},
    {"url": f"https://{HOST}/v1/gzip"},
    {"url": f"https://{HOST}/v1/gzip-echo"},
]


def _record(bundle: Path, package: str, cassette: Path, api: tuple[LoopbackServer, Path]) -> list[Any]:
    server, ca_file = api
    with Harness(bundle, cassette=cassette, record_mode="all", secrets=SECRETS, cache_dir=CACHE,
                 loopback=[f"{HOST}=127.0.0.1:{server.port}"], ca_file=ca_file) as h:  # fmt: skip
        results = [h.call(f"{package}.fetch", call) for call in CALLS]
    assert all(r.ok and "error" not in r.output for r in results), [r.output or r.error for r in results]
    return [r.output for r in results]


def _replay(bundle: Path, package: str, cassette: Path, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    with Harness(bundle, cassette=cassette, secrets=list(SECRETS), cache_dir=CACHE, **kwargs) as h:
        results = [h.call(f"{package}.fetch", call) for call in CALLS]
        assert h.cassette is not None and h.cassette.replayer is not None
        seen = [r.model_dump() for r in h.cassette.replayer.requests]
    return [r.output if r.ok else r.error for r in results], seen


def test_recorded_cassette_holds_no_form_of_any_secret_and_rerecords_byte_identical(
    bundles: dict[str, Path], api: tuple[LoopbackServer, Path], tmp_path: Path
) -> None:
    first = _RECORDED["echo"]
    text = first.decode()
    for secret in (TOKEN, QUERY_KEY):
        for form in _forms(secret):
            assert form not in text, form
    for issued in (ISSUED, COOKIE, "refresh-0123456789"):
        assert issued not in text
    doc = json.loads(first)
    assert doc["format"] == "stockade.cassette/1" and doc["package"] == "echo"
    first_request = doc["interactions"][0]["request"]
    assert ["authorization", "Bearer <secret:echo_token>"] in first_request["headers"]
    assert "key=<secret:query_key>" in doc["interactions"][1]["request"]["url"]
    response = doc["interactions"][0]["response"]
    assert [["set-cookie", "sid=<redacted>; Path=/; HttpOnly"]] == [
        [n.lower(), v] for n, v in response["headers"] if n.lower() == "set-cookie"
    ]
    assert json.loads(response["body"])["access_token"] == "<redacted>"
    assert not any(name.lower() == "date" for name, _ in response["headers"])
    gz = doc["interactions"][2]["response"]
    assert gz["content_encoding"] == "gzip" and gz["body"] == "zipped " * 200  # stored decoded
    assert _LIVE["echo"][2]["body"] == "zipped " * 200  # the live host decoded it too
    # A secret inside a compressed body is redacted too: the body is stored decoded.
    assert json.loads(doc["interactions"][3]["response"]["body"]) == {
        "token": "<secret:echo_token>", "b64": "<secret:echo_token>"
    }  # fmt: skip
    cassette = tmp_path / "echo.json"
    _record(bundles["echo"], "echo", cassette, api)
    assert cassette.read_bytes() == first


@pytest.mark.parametrize("package", ["echo", "echojs"])
def test_replay_with_sockets_blocked_is_deterministic(
    package: str, bundles: dict[str, Path], api: tuple[LoopbackServer, Path], tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    cassette = tmp_path / f"{package}.json"
    cassette.write_bytes(_RECORDED[package])
    live = _LIVE[package]
    request.getfixturevalue("no_sockets")
    first, seen = _replay(bundles[package], package, cassette, strict=True)
    again, seen_again = _replay(bundles[package], package, cassette, strict=True)
    assert first == again and seen == seen_again  # identical outputs and recorded requests
    assert first[2] == live[2]  # the gzip body, re-encoded and decoded by the host
    echoed = json.loads(first[0]["body"])
    assert echoed["auth"] == "Bearer <secret:echo_token>" and echoed["access_token"] == "<redacted>"


def test_replay_under_a_narrowed_allowlist_is_egress_denied_and_gzip_hits_the_limit(
    bundles: dict[str, Path], tmp_path: Path, no_sockets: None
) -> None:
    cassette = tmp_path / "echo.json"
    cassette.write_bytes(_RECORDED["echo"])
    narrowed = tmp_path / "narrowed"
    shutil.copytree(bundles["echo"], narrowed)
    manifest = json.loads((narrowed / "manifest.json").read_text())
    manifest["http"]["allow"][0]["path_prefix"] = "/v1/gzip"
    manifest["http"]["max_response_bytes"] = 1000  # the gzip body decodes to 1,400 bytes
    (narrowed / "manifest.json").write_text(json.dumps(manifest))
    with pytest.warns(CassetteWarning, match="another manifest"), Harness(
        narrowed, cassette=cassette, secrets=list(SECRETS), cache_dir=CACHE, allow_repeats=True
    ) as h:
        denied = h.call("echo.fetch", CALLS[0])
        too_large = h.call("echo.fetch", CALLS[2])
        assert h.cassette is not None and h.cassette.replayer is not None
        assert [r.url for r in h.cassette.replayer.requests] == [CALLS[2]["url"]]  # the denied one never left
    assert denied.ok and denied.output["error"] == "HttpDenied", denied.output
    assert too_large.ok and too_large.output["error"] == "TooLarge", too_large.output


_RECORDED: dict[str, bytes] = {}
_LIVE: dict[str, list[Any]] = {}


@pytest.fixture(autouse=True, scope="module")
def _recording(bundles: dict[str, Path], api: tuple[LoopbackServer, Path],
               tmp_path_factory: pytest.TempPathFactory) -> None:  # fmt: skip
    """One recording per plugin, before any test blocks sockets, shared by the module."""
    for package, bundle in bundles.items():
        path = tmp_path_factory.mktemp("shared-cassette") / f"{package}.json"
        _LIVE[package] = _record(bundle, package, path, api)
        _RECORDED[package] = path.read_bytes()


def test_unmatched_request_fails_the_call_even_when_the_plugin_swallows_it(
    bundles: dict[str, Path], tmp_path: Path, no_sockets: None
) -> None:
    cassette = tmp_path / "echo.json"
    cassette.write_bytes(_RECORDED["echo"])
    with Harness(bundles["echo"], cassette=cassette, secrets=list(SECRETS), cache_dir=CACHE) as h:
        result = h.call("echo.fetch", {"url": f"https://{HOST}/v1/other"})
    assert not result.ok and result.error is not None
    assert result.error.code == "CASSETTE_UNMATCHED"
    assert (result.error.details["method"], result.error.details["url"]) == ("GET", f"https://{HOST}/v1/other")
    assert "new_episodes" in result.error.hint


def test_strict_replay_fails_on_interactions_never_replayed(
    bundles: dict[str, Path], tmp_path: Path, no_sockets: None
) -> None:
    cassette = tmp_path / "echo.json"
    cassette.write_bytes(_RECORDED["echo"])
    h = Harness(bundles["echo"], cassette=cassette, secrets=list(SECRETS), cache_dir=CACHE, strict=True)
    assert h.call("echo.fetch", CALLS[0]).ok
    with pytest.raises(UnusedInteractions, match=r"3 recorded interaction\(s\) never replayed"):
        h.close()


def test_dev_allow_loopback_reaches_a_local_server_for_an_allowed_host(
    bundles: dict[str, Path], api: tuple[LoopbackServer, Path]
) -> None:
    server, ca_file = api
    remap = LoopbackRemap.parse([f"{HOST}=127.0.0.1:{server.port}"])
    outcome = dev_run("echo.fetch", {"url": f"https://{HOST}/v1/gzip"}, bundle=bundles["echo"],
                      cache_dir=CACHE, loopback=remap, ca_file=ca_file)  # fmt: skip
    assert outcome.result.ok and outcome.result.output["body"] == "zipped " * 200, outcome.result


def test_dev_without_allow_loopback_names_it_in_the_blocked_address_hint(bundles: dict[str, Path]) -> None:
    def to_loopback(host: str) -> list[str]:
        return ["127.0.0.1"]  # e.g. an /etc/hosts entry for a local API

    outcome = dev_run("echo.fail", {"how": "http"}, bundle=bundles["echo"], cache_dir=CACHE, resolver=to_loopback)
    error = outcome.result.error
    assert error is not None and error.code == "EGRESS_DENIED" and error.details["reason"] == "blocked_address"
    assert "--allow-loopback api.echo.example=127.0.0.1:PORT" in error.hint


def test_cassette_verify_passes_a_recording_and_flags_a_planted_token(
    tmp_path: Path, bundles: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cassette = tmp_path / "echo.json"
    cassette.write_bytes(_RECORDED["echo"])
    assert main(["cassette", "verify", str(cassette), "--bundle", str(bundles["echo"])]) == 0
    assert "ok, no finding" in " ".join(capsys.readouterr().out.split())
    assert main(["cassette", "show", "--json", str(cassette)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [(i["method"], i["status"], i["content_encoding"]) for i in shown["interactions"]] == [
        ("GET", 200, "identity"), ("GET", 200, "identity"), ("GET", 200, "gzip"), ("GET", 200, "gzip")
    ]  # fmt: skip
    doc = json.loads(_RECORDED["echo"])
    planted = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZGEifQ.c2lnbmF0dXJlLWJ5dGVz"
    doc["interactions"][0]["response"].update(body_fields(f'{{"note": "{planted}"}}'.encode()))
    cassette.write_bytes(json.dumps(doc).encode())
    assert main(["cassette", "verify", "--json", str(cassette)]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert findings == [{"interaction": 0, "where": "response body", "problem": "looks like a credential (JSON Web Token)"}]


def test_pytest_marker_names_the_cassette_and_the_record_mode_option_reaches_it(tmp_path: Path) -> None:
    (tmp_path / "test_plugin.py").write_text(
        "import pytest\n"
        "@pytest.mark.cassette('issues', allow_repeats=True, record_mode='all')\n"
        "def test_marked(stockade_cassette, request):\n"
        "    assert stockade_cassette == {'cassette': request.path.parent / 'cassettes' / 'issues.json',\n"
        "                                 'record_mode': 'all', 'allow_repeats': True}\n"
        "def test_unmarked(stockade_cassette):\n"
        "    assert stockade_cassette['cassette'].name == 'test_unmarked.json'\n"
        "    assert stockade_cassette['record_mode'] == 'once'\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = str(REPO_ROOT)  # this checkout's sdk, not an installed one
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "sdk.pytest_plugin", "-p", "no:cacheprovider",
         "--stockade-record-mode", "once", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout + proc.stderr


def test_record_mode_defaults_to_none_so_a_missing_cassette_is_refused(bundles: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(CassetteInvalid, match="record mode is 'none'") as caught:
        Harness(bundles["echo"], cassette=tmp_path / "absent.json", cache_dir=CACHE)
    assert caught.value.details["reason"] == "missing"
    (tmp_path / "other.json").write_bytes(_RECORDED["echojs"])
    with pytest.raises(CassetteInvalid, match="recorded for package 'echojs'"):
        Harness(bundles["echo"], cassette=tmp_path / "other.json", cache_dir=CACHE)


def test_new_episodes_replays_what_matches_and_records_only_the_rest(
    bundles: dict[str, Path], api: tuple[LoopbackServer, Path], tmp_path: Path
) -> None:
    server, ca_file = api
    cassette = tmp_path / "echo.json"
    cassette.write_bytes(_RECORDED["echo"])
    before = len(server.requests)
    with Harness(bundles["echo"], cassette=cassette, record_mode="new_episodes", secrets=SECRETS,
                 cache_dir=CACHE, loopback=[f"{HOST}=127.0.0.1:{server.port}"], ca_file=ca_file) as h:  # fmt: skip
        assert h.call("echo.fetch", CALLS[0]).output["status"] == 200  # replayed
        assert h.call("echo.fetch", {"url": f"https://{HOST}/v1/echo?page=3"}).output["status"] == 200
    assert [r.target for r in server.requests[before:]] == ["/v1/echo?page=3"]  # only the new one
    urls = [i["request"]["url"] for i in json.loads(cassette.read_bytes())["interactions"]]
    assert urls[:-1] == [i["request"]["url"] for i in json.loads(_RECORDED["echo"])["interactions"]]
    assert urls[-1:] == [f"https://{HOST}/v1/echo?page=3"]  # the union, in order
