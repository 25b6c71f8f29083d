"""tracker through the author harness: a real host, scripted HTTP, the token never visible.

Run with ``stockade test plugins/tracker`` (or pytest on this directory).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sdk.harness import Harness, RecordedRequest, Response, route

PROJECT = Path(__file__).resolve().parents[1]
API = "https://api.tracker.example/v1"
TOKEN = "Bearer <secret:tracker_token>"  # noqa: S105 - the harness's placeholder, not a secret
ISSUES = route("GET", f"{API}/repos/stockade/issues")
ISSUE_7 = route("GET", f"{API}/repos/stockade/issues/7")
CREATE = route("POST", f"{API}/repos/stockade/issues")
COMMENT = route("POST", f"{API}/repos/stockade/issues/7/comments")


def fake_api(status: int, payload: object):
    """A route that answers like the tracker: 401 unless the injected token is present."""

    def answer(request: RecordedRequest) -> Response:
        if request.header("authorization") != TOKEN:
            return Response(401, json={"error": "unauthorized"})
        return Response(status, json=payload)

    return answer


@pytest.fixture(scope="module")
def shared() -> Iterator[Harness]:
    with Harness(PROJECT, secrets=["tracker_token"]) as harness:
        yield harness


@pytest.fixture
def h(shared: Harness) -> Harness:
    shared.routes.clear()
    shared.reset()
    return shared


def test_list_issues_with_token_injected_by_host(h: Harness) -> None:
    issues = [
        {"number": 1, "title": "First", "state": "open"},
        {"number": 2, "title": "Done", "state": "closed"},
    ]
    h.routes[ISSUES] = fake_api(200, issues)
    result = h.call("tracker.list-issues", {"repo": "stockade"})
    assert result.ok, result.error
    assert result.output == issues
    (sent,) = h.requests
    assert sent.method == "GET" and sent.url == f"{API}/repos/stockade/issues"
    assert sent.header("authorization") == TOKEN


def test_token_never_reaches_output_log_or_audit(h: Harness) -> None:
    h.routes[ISSUES] = fake_api(200, [])
    result = h.call("tracker.list-issues", {"repo": "stockade"})
    assert result.ok
    text = repr(result) + h.audit_path.read_text()
    assert "stockade-test-tracker_token" not in text  # the harness's random value prefix


def test_get_issue(h: Harness) -> None:
    issue = {"number": 7, "title": "Bug", "body": "It breaks", "state": "open", "comments": 3}
    h.routes[ISSUE_7] = fake_api(200, issue)
    result = h.call("tracker.get-issue", {"repo": "stockade", "number": 7})
    assert result.ok, result.error
    assert result.output == issue


def test_missing_issue_maps_404_to_tool_failed(h: Harness) -> None:
    h.routes[ISSUE_7] = fake_api(404, {"error": "not found"})
    result = h.call("tracker.get-issue", {"repo": "stockade", "number": 7})
    assert not result.ok and result.error is not None
    assert result.error.code == "TOOL_FAILED"
    assert "not found" in result.error.message


def test_rejected_token_maps_401_to_tool_failed(h: Harness) -> None:
    h.routes[ISSUES] = Response(401, json={"error": "unauthorized"})
    result = h.call("tracker.list-issues", {"repo": "stockade"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "401" in result.error.message


def test_server_error_maps_to_tool_failed(h: Harness) -> None:
    h.routes[ISSUES] = Response(503, text="down")
    result = h.call("tracker.list-issues", {"repo": "stockade"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"
    assert "503" in result.error.message


def test_malformed_server_answer_is_a_tool_failure_not_a_crash(h: Harness) -> None:
    h.routes[ISSUES] = Response(200, json={"not": "a list"})
    result = h.call("tracker.list-issues", {"repo": "stockade"})
    assert result.error is not None and result.error.code == "TOOL_FAILED"


def test_more_than_100_issues_are_cut_to_the_output_limit(h: Harness) -> None:
    many = [{"number": n, "title": f"#{n}", "state": "open"} for n in range(1, 151)]
    h.routes[ISSUES] = fake_api(200, many)
    result = h.call("tracker.list-issues", {"repo": "stockade"})
    assert result.ok, result.error
    assert len(result.output) == 100


@pytest.mark.parametrize(
    "repo",
    ["../admin", "..", "a/b", "stockade/../../admin", "a\\b", "."],
    ids=["dotdot-prefix", "dotdot", "slash", "traversal", "backslash", "dot"],
)
def test_repo_path_traversal_refused_before_any_request(h: Harness, repo: str) -> None:
    result = h.call("tracker.list-issues", {"repo": repo})
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert h.requests == []


def test_repo_is_url_quoted_into_one_segment(h: Harness) -> None:
    h.routes[route("GET", f"{API}/repos/my%20repo%3Fx%3D1%23y/issues")] = fake_api(200, [])
    result = h.call("tracker.list-issues", {"repo": "my repo?x=1#y"})
    assert result.ok, result.error
    assert h.requests[0].path == "/v1/repos/my%20repo%3Fx%3D1%23y/issues"


@pytest.mark.parametrize(
    ("tool", "payload"),
    [
        ("tracker.get-issue", {"repo": "stockade", "number": 0}),
        ("tracker.get-issue", {"repo": "stockade", "number": 1_000_000_001}),
        ("tracker.list-issues", {"repo": "x" * 101}),
        ("tracker.create-issue", {"repo": "stockade", "title": "t" * 201}),
        ("tracker.comment", {"repo": "stockade", "number": 7, "body": "b" * 5001}),
        ("tracker.list-issues", {"repo": "stockade", "extra": True}),
    ],
    ids=["number-zero", "number-too-big", "repo-too-long", "title-too-long", "body-too-long", "extra-field"],
)
def test_inputs_outside_the_schema_refused(h: Harness, tool: str, payload: dict[str, object]) -> None:
    result = h.call(tool, payload, approve=True)
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert h.requests == []


def test_create_issue_needs_approval(h: Harness) -> None:
    h.routes[CREATE] = fake_api(201, {"number": 8, "title": "New", "body": "", "state": "open"})
    result = h.call("tracker.create-issue", {"repo": "stockade", "title": "New"})
    assert result.error is not None and result.error.code == "APPROVAL_REQUIRED"
    assert h.requests == []


def test_create_issue_approved_posts_title_and_body(h: Harness) -> None:
    created = {"number": 8, "title": "New", "body": "Details", "state": "open"}
    h.routes[CREATE] = fake_api(201, created)
    payload = {"repo": "stockade", "title": "New", "body": "Details"}
    result = h.call("tracker.create-issue", payload, approve=True)
    assert result.ok, result.error
    assert result.output == created
    (sent,) = h.requests
    assert sent.json() == {"title": "New", "body": "Details"}
    assert sent.header("authorization") == TOKEN
    kinds = [r["kind"] for r in h.audit_records()]
    assert "call.intent" in kinds  # a write is recorded before it runs


def test_comment_needs_approval_then_posts(h: Harness) -> None:
    h.routes[COMMENT] = fake_api(201, {"id": 42, "body": "Thanks"})
    refused = h.call("tracker.comment", {"repo": "stockade", "number": 7, "body": "Thanks"})
    assert refused.error is not None and refused.error.code == "APPROVAL_REQUIRED"
    result = h.call("tracker.comment", {"repo": "stockade", "number": 7, "body": "Thanks"}, approve=True)
    assert result.ok, result.error
    assert result.output == {"id": 42, "body": "Thanks"}
    assert h.requests[0].json() == {"body": "Thanks"}


def test_blank_title_refused_by_the_tool(h: Harness) -> None:
    result = h.call("tracker.create-issue", {"repo": "stockade", "title": "   "}, approve=True)
    assert result.error is not None and result.error.code == "INPUT_INVALID"
    assert h.requests == []


def test_missing_token_refused_before_the_guest_runs() -> None:
    with Harness(PROJECT) as bare:
        result = bare.call("tracker.list-issues", {"repo": "stockade"})
        assert result.error is not None and result.error.code == "CREDENTIAL_UNAVAILABLE"
        assert "tracker_token" in result.error.message
        assert bare.requests == []
