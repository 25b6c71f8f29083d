"""Egress refusals read as refusals, not plugin bugs.

A guest whose request the host refused and which then fails (the SDK raises ``HttpDenied``
and nobody catches it) used to come back as ``TOOL_FAILED``. Now the result is
``EGRESS_DENIED`` naming the host, path, method and rule, with a hint pointing at
``[http] allow`` in stockade.toml; an unreachable destination is ``EGRESS_UNREACHABLE``;
the audit record tells the three apart. Real plugin, real host pipeline, scripted network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sdk.author.devrun import dev_run
from sdk.harness import Harness
from tests.support.plugins import REPO_ROOT, build_test_plugin

pytestmark = pytest.mark.slow

CACHE = REPO_ROOT / ".stockade-cache" / "stockade"


@pytest.fixture(scope="module")
def v2_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """echo_py whose allowlist admits only /v2: its `fail` tool's GET /v1/denied is refused."""
    target = tmp_path_factory.mktemp("egress-errors") / "echo"
    shutil.copytree(build_test_plugin("echo_py").bundle_dir, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["http"]["allow"][0]["path_prefix"] = "/v2"
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def _outcome(h: Harness) -> dict[str, object]:
    return next(r for r in reversed(h.audit_records()) if r.get("kind") == "call.outcome")


def test_uncaught_refusal_reported_as_egress_denied_with_host_rule_and_hint(v2_only: Path) -> None:
    with Harness(v2_only, cache_dir=CACHE) as h:
        result = h.call("echo.fail", {"how": "http"})
        record = _outcome(h)
    error = result.error
    assert error is not None and error.code == "EGRESS_DENIED"
    assert error.details["reason"] == "path_not_allowed"
    assert (error.details["host"], error.details["path"], error.details["method"]) == (
        "api.echo.example", "/v1/denied", "GET"
    )  # fmt: skip
    assert "GET api.echo.example/v1/denied" in error.message and "HttpDenied" in error.message
    assert "[http] allow in stockade.toml" in error.hint
    assert h.requests == []  # nothing reached the network
    assert record["error"]["code"] == "EGRESS_DENIED"  # type: ignore[index]  # the audit tells it apart


def test_private_address_refusal_hint_does_not_suggest_widening_the_allowlist(v2_only: Path) -> None:
    bundle = build_test_plugin("echo_py").bundle_dir
    with Harness(bundle, cache_dir=CACHE, address="10.0.0.1") as h:
        result = h.call("echo.fail", {"how": "http"})
    assert result.error is not None and result.error.code == "EGRESS_DENIED"
    assert result.error.details["reason"] == "blocked_address"
    assert "whatever the allowlist says" in result.error.hint and "[http] allow" not in result.error.hint


def test_dns_failure_is_unreachable_not_denied(v2_only: Path) -> None:
    def no_dns(host: str) -> list[str]:
        raise OSError("Name or service not known")

    outcome = dev_run(
        "echo.fail", {"how": "http"}, bundle=build_test_plugin("echo_py").bundle_dir, cache_dir=CACHE,
        resolver=no_dns,
    )  # fmt: skip
    error = outcome.result.error
    assert error is not None and error.code == "EGRESS_UNREACHABLE"
    assert error.details["host"] == "api.echo.example" and error.details["reason"] == "dns_failure"


def test_plugin_that_handles_the_refusal_is_not_rewritten(v2_only: Path) -> None:
    with Harness(v2_only, cache_dir=CACHE) as h:
        handled = h.call("echo.fetch", {"url": "https://api.echo.example/v1/x"})
        own_failure = h.call("echo.fail", {"how": "tool"})
        record = _outcome(h)
    assert handled.ok and handled.output["error"] == "HttpDenied"
    assert own_failure.error is not None and own_failure.error.code == "TOOL_FAILED"
    assert record["error"]["code"] == "TOOL_FAILED"  # type: ignore[index]
