"""``stockade dev``: one call through a throw-away real host.

The in-process tests use a scripted network under the same transport port (the test
machine has no network); everything else — lock, policy, egress rules, credential
router, audit — is the real pipeline. The CLI tests run ``python -m sdk.cli dev``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx2
import pytest

from host.egress.transport import Pins
from host.errors import ManifestInvalid
from sdk.author.devrun import allow_entry, dev_run, read_secret
from tests.support.cli import cli_env, run_cli
from tests.support.plugins import REPO_ROOT, build_test_plugin

pytestmark = pytest.mark.slow

CACHE = REPO_ROOT / ".stockade-cache" / "stockade"
PUBLIC = "93.184.215.14"
TOKEN = "dev-secret-value-0123456789"


@pytest.fixture(scope="module")
def echo_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The echo_py bundle with a bearer credential for api.echo.example/v1/bearer."""
    target = tmp_path_factory.mktemp("dev-bundle") / "echo"
    shutil.copytree(build_test_plugin("echo_py").bundle_dir, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["http"]["credentials"] = [{
        "secret": "bearer_token", "location": {"type": "bearer"}, "hosts": ["api.echo.example"],
        "path_prefixes": ["/v1/bearer"], "optional": False,
    }]  # fmt: skip
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def _network(seen: list[httpx2.Request]):  # type: ignore[no-untyped-def]
    def factory(pins: Pins) -> httpx2.BaseTransport:
        def answer(request: httpx2.Request) -> httpx2.Response:
            seen.append(request)
            return httpx2.Response(200, text="pong")

        return httpx2.MockTransport(answer)

    return factory


def test_dev_call_records_requests_with_secret_placeholders_never_values(echo_bundle: Path) -> None:
    seen: list[httpx2.Request] = []
    outcome = dev_run(
        "echo.fetch", {"url": "https://api.echo.example/v1/bearer/x"}, bundle=echo_bundle,
        secrets={"bearer_token": TOKEN}, cache_dir=CACHE, resolver=lambda host: [PUBLIC],
        network=_network(seen),
    )  # fmt: skip
    assert outcome.result.ok, outcome.result.error
    assert outcome.result.output["status"] == 200 and outcome.result.output["body"] == "pong"
    (request,) = outcome.requests
    assert (request.method, request.url, request.status) == ("GET", "https://api.echo.example/v1/bearer/x", 200)
    assert dict(request.headers)["authorization"] == "Bearer <secret:bearer_token>"
    assert TOKEN not in repr(outcome)
    assert seen[0].headers["authorization"] == f"Bearer {TOKEN}"  # the server got the real value
    assert outcome.result.audit_id and outcome.package == "echo-1.0.0"


def test_dev_keeps_the_packages_allowlist(echo_bundle: Path) -> None:
    seen: list[httpx2.Request] = []
    outcome = dev_run(
        "echo.fetch", {"url": "https://elsewhere.example/v1"}, bundle=echo_bundle,
        secrets={"bearer_token": TOKEN}, cache_dir=CACHE, resolver=lambda host: [PUBLIC],
        network=_network(seen),
    )  # fmt: skip
    assert outcome.result.output["error"] == "HttpDenied"
    assert outcome.requests == [] and seen == [] and outcome.widened == []


def test_allow_host_widens_only_this_run(echo_bundle: Path) -> None:
    seen: list[httpx2.Request] = []
    outcome = dev_run(
        "echo.fetch", {"url": "https://elsewhere.example/v1"}, bundle=echo_bundle,
        secrets={"bearer_token": TOKEN}, allow_hosts=["elsewhere.example"], cache_dir=CACHE,
        resolver=lambda host: [PUBLIC], network=_network(seen),
    )  # fmt: skip
    assert outcome.result.output["status"] == 200
    assert outcome.widened == ["https://elsewhere.example"]
    assert "elsewhere" not in (echo_bundle / "manifest.json").read_text()  # the bundle is untouched
    assert [r.url for r in outcome.requests] == ["https://elsewhere.example/v1"]


def test_allow_host_never_reaches_private_addresses(echo_bundle: Path) -> None:
    # Widening the allowlist does not widen the SSRF guard: DNS vetting still refuses.
    outcome = dev_run(
        "echo.fetch", {"url": "https://internal.example/v1"}, bundle=echo_bundle,
        secrets={"bearer_token": TOKEN}, allow_hosts=["internal.example"], cache_dir=CACHE,
        resolver=lambda host: ["10.0.0.7"], network=_network([]),
    )  # fmt: skip
    assert outcome.result.output["error"] == "HttpDenied" and outcome.requests == []


def test_allow_host_that_is_not_a_host_is_refused_not_widened(echo_bundle: Path) -> None:
    with pytest.raises(ManifestInvalid):
        dev_run("echo.echo", {}, bundle=echo_bundle, allow_hosts=["*"], cache_dir=CACHE)


def test_missing_required_secret_refused_before_the_guest_starts(echo_bundle: Path) -> None:
    outcome = dev_run("echo.echo", {"message": "x"}, bundle=echo_bundle, cache_dir=CACHE)
    assert outcome.result.error is not None and outcome.result.error.code == "CREDENTIAL_UNAVAILABLE"


def test_missing_required_secret_hint_is_the_dev_option_that_works(echo_bundle: Path, tmp_path: Path) -> None:
    # The host's hint (`stockade secrets set … --subject dev-…`) names a random principal whose
    # state is thrown away; the hint must be the option that makes this same run work.
    code, _, err = _dev_cli("echo.echo", "--input", '{"message": "hi"}', "--bundle", str(echo_bundle), cwd=tmp_path)
    assert code == 1 and "CREDENTIAL_UNAVAILABLE" in err
    assert "secrets set" not in err and "dev-" not in err
    hint = "stockade dev echo.echo --secret bearer_token=env:BEARER_TOKEN"
    assert hint in err
    again = _dev_cli(
        "echo.echo", "--input", '{"message": "hi"}', "--bundle", str(echo_bundle), "--secret",
        "bearer_token=env:BEARER_TOKEN", cwd=tmp_path, BEARER_TOKEN=TOKEN,
    )  # fmt: skip
    assert again[0] == 0, again[2]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("token=hunter2hunter2", "never on the command line"),
        ("token", "NAME=@FILE or NAME=env:VAR"),
        ("token=env:STOCKADE_TEST_UNSET", "is not set"),
        ("token=@/nonexistent/file", "cannot read"),
        ("token=env:SHORT", "at least 8 characters"),
        ("Token=env:LONG", "must match"),
    ],
    ids=["literal", "no-value", "unset-env", "missing-file", "too-short", "bad-name"],
)
def test_secret_on_the_command_line_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        read_secret(spec, environ={"SHORT": "abc", "LONG": "long-enough-value"})
    assert "abc" not in str(refused.value) and "long-enough" not in str(refused.value)


def test_secret_from_file_and_env(tmp_path: Path) -> None:
    (tmp_path / "t").write_text("from-file-value\n")
    assert read_secret(f"a=@{tmp_path / 't'}") == ("a", "from-file-value")
    assert read_secret("b=env:X", environ={"X": "from-env"}) == ("b", "from-env")


def test_allow_entry_forms() -> None:
    assert allow_entry("api.example")["scheme"] == "https"
    entry = allow_entry("http://api.example:8080/v2")
    assert (entry["scheme"], entry["host"], entry["port"], entry["path_prefix"]) == ("http", "api.example", 8080, "/v2")


def _dev_cli(*args: str, cwd: Path, **extra: str) -> tuple[int, str, str]:
    env = cli_env(XDG_CACHE_HOME=str(REPO_ROOT / ".stockade-cache"), DEV_TOKEN=TOKEN, **extra)
    proc = run_cli("dev", *args, cwd=cwd, env=env, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def test_cli_dev_prints_output_log_and_usage(echo_bundle: Path, tmp_path: Path) -> None:
    code, out, err = _dev_cli(
        "echo.log", "--input", '{"secret": "bearer_token"}', "--bundle", str(echo_bundle),
        "--secret", "bearer_token=env:DEV_TOKEN", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out) is True  # secret_available: staged, never shown
    assert "info 1" in err and "usage: fuel" in err and TOKEN not in out + err


def test_cli_dev_shows_the_guest_traceback_and_exits_1(echo_bundle: Path, tmp_path: Path) -> None:
    code, out, err = _dev_cli(
        "echo.fail", "--input", '{"how": "crash"}', "--bundle", str(echo_bundle),
        "--secret", "bearer_token=env:DEV_TOKEN", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert code == 1, err
    report = json.loads(out)
    assert report["error"]["code"] == "TOOL_FAILED"
    assert "in fail" in report["error"]["details"]["guest_traceback"]
    assert report["timings_s"]["call"] > 0 and report["package"] == "echo-1.0.0"


def test_cli_dev_allow_host_is_printed_loudly(echo_bundle: Path, tmp_path: Path) -> None:
    code, _, err = _dev_cli(
        "echo.echo", "--input", '{"message": "hi"}', "--bundle", str(echo_bundle),
        "--secret", "bearer_token=env:DEV_TOKEN", "--allow-host", "extra.example", cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    assert "WARNING: --allow-host extra.example widens the egress allowlist for this dev run only" in err
    assert "[http] allow in stockade.toml" in err


def test_cli_dev_short_secret_is_a_usage_error_naming_the_rule(echo_bundle: Path, tmp_path: Path) -> None:
    # Was exit 70 INTERNAL_ERROR ("this is a bug") from the store, after the build.
    code, _, err = _dev_cli("echo.echo", "--bundle", str(echo_bundle), "--secret", "bearer_token=env:SHORT",
                            cwd=tmp_path, SHORT="abc")
    assert code == 2 and "at least 8 characters" in err and "INTERNAL_ERROR" not in err, err


def test_cli_dev_refuses_a_literal_secret(echo_bundle: Path, tmp_path: Path) -> None:
    code, _, err = _dev_cli("echo.echo", "--bundle", str(echo_bundle), "--secret", "t=plain", cwd=tmp_path)
    assert code == 2 and "never on the command line" in err and "Traceback" not in err
