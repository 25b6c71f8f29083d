"""tracker: tools for the issue-tracker API (https://api.tracker.example/v1).

API contract:

    GET  /v1/repos/{repo}/issues                    -> 200 [{number, title, state}]
    GET  /v1/repos/{repo}/issues/{number}           -> 200 {number, title, body, state, comments}; 404
    POST /v1/repos/{repo}/issues           {title, body} -> 201 {number, title, body, state}
    POST /v1/repos/{repo}/issues/{number}/comments {body} -> 201 {id, body}
    missing or wrong bearer token                   -> 401 {"error": "unauthorized"}

The host injects ``Authorization: Bearer <tracker_token>``; this code never sees the token.
The repository name is one path segment: it is URL-quoted, and ``/``, ``\\``, ``.`` and
``..`` are refused, so an input can never steer a request to another API path. Server
answers are reshaped to the output schemas (strings cut to their limits, at most 100
issues), so an odd server answer fails here with a clear message rather than in the
host's output check.
"""

from urllib.parse import quote

from stockade import HttpError, ToolError, ToolInputError, http, log, tool

API = "https://api.tracker.example/v1"
MAX_ISSUES = 100
STATES = ("open", "closed")
_STATUS_MESSAGES = {
    400: "the tracker rejected the request as malformed",
    401: "the tracker refused the credential (401 unauthorized); check the tracker_token secret",
    403: "the tracker token may not do this (403 forbidden)",
    404: "not found",
    409: "the tracker reported a conflict",
    422: "the tracker rejected the content",
    429: "the tracker is rate limiting; try again later",
}


def _repo_segment(repo):
    if not isinstance(repo, str) or not repo.strip():
        raise ToolInputError("repo must be a non-empty repository name")
    if "/" in repo or "\\" in repo:
        raise ToolInputError("repo is one name, without '/' or '\\'")
    if repo in (".", "..") or ".." in repo:
        raise ToolInputError("repo may not contain '..'")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in repo):
        raise ToolInputError("repo may not contain control characters")
    return quote(repo, safe="")


def _issues_url(repo, *parts):
    tail = "".join(f"/{p}" for p in parts)
    return f"{API}/repos/{_repo_segment(repo)}/issues{tail}"


def _send(method, url, payload=None):
    try:
        if method == "GET":
            response = http.get(url, headers={"Accept": "application/json"})
        else:
            response = http.post(url, json=payload, headers={"Accept": "application/json"})
    except HttpError as exc:
        raise ToolError(f"the tracker could not be reached: {exc}") from None
    return response


def _check(response, expected, what):
    if response.status == expected:
        try:
            return response.json()
        except ValueError:
            raise ToolError(f"the tracker sent a response that is not JSON ({what})") from None
    if response.status == 404:
        raise ToolError(f"{what}: not found")
    message = _STATUS_MESSAGES.get(response.status)
    if message is None:
        kind = "failed" if response.status >= 500 else "answered"
        message = f"the tracker {kind} with status {response.status}"
    log.warn("%s: HTTP %d", what, response.status)
    raise ToolError(f"{what}: {message}")


def _text(value, limit):
    return value[:limit] if isinstance(value, str) else ""


def _int(value, low, high, what):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ToolError(f"the tracker sent an invalid {what}")
    return value


def _state(value):
    return value if value in STATES else "open"


def _issue_summary(item):
    if not isinstance(item, dict):
        raise ToolError("the tracker sent an invalid issue list")
    return {
        "number": _int(item.get("number"), 1, 1_000_000_000, "issue number"),
        "title": _text(item.get("title"), 200),
        "state": _state(item.get("state")),
    }


def _issue(item, *, comments):
    if not isinstance(item, dict):
        raise ToolError("the tracker sent an invalid issue")
    issue = _issue_summary(item)
    issue["body"] = _text(item.get("body"), 5000)
    if comments:
        count = item.get("comments", 0)
        valid = isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= 1_000_000_000
        issue["comments"] = count if valid else 0
    return issue


@tool("tracker.list-issues")
def list_issues(input):
    url = _issues_url(input["repo"])
    items = _check(_send("GET", url), 200, f"issues of {input['repo']!r}")
    if not isinstance(items, list):
        raise ToolError("the tracker sent an invalid issue list")
    if len(items) > MAX_ISSUES:
        log.info("keeping the first %d of %d issues", MAX_ISSUES, len(items))
    return [_issue_summary(item) for item in items[:MAX_ISSUES]]


@tool("tracker.get-issue")
def get_issue(input):
    number = input["number"]
    url = _issues_url(input["repo"], number)
    return _issue(_check(_send("GET", url), 200, f"issue #{number}"), comments=True)


@tool("tracker.create-issue")
def create_issue(input):
    title = input["title"]
    if not title.strip():
        raise ToolInputError("title must not be blank")
    payload = {"title": title, "body": input.get("body", "")}
    url = _issues_url(input["repo"])
    return _issue(_check(_send("POST", url, payload), 201, "new issue"), comments=False)


@tool("tracker.comment")
def comment(input):
    number = input["number"]
    body = input["body"]
    if not body.strip():
        raise ToolInputError("body must not be blank")
    url = _issues_url(input["repo"], number, "comments")
    created = _check(_send("POST", url, {"body": body}), 201, f"comment on issue #{number}")
    if not isinstance(created, dict):
        raise ToolError("the tracker sent an invalid comment")
    return {
        "id": _int(created.get("id"), 1, 1_000_000_000_000, "comment id"),
        "body": _text(created.get("body"), 5000),
    }
