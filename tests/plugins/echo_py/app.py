"""Benign test plugin: echo, module state, HTTP through the host, failures, logs."""

from stockade import HttpError, ToolError, ToolInputError, http, log, secret_available, tool

COUNTER = {"n": 0}


@tool("echo.echo")
def echo(input):
    return input


@tool("echo.counter")
def counter(input):
    COUNTER["n"] += 1
    return COUNTER["n"]


@tool("echo.fetch")
def fetch(input):
    method = input.get("method", "GET")
    try:
        if method == "POST":
            r = http.post(input["url"], json={"sent": input.get("body", "")}, headers={"X-Test": "1"})
        else:
            r = http.request(method, input["url"], headers=[("Accept", "text/plain")], timeout_ms=5000)
    except HttpError as exc:
        return {"error": type(exc).__name__, "detail": exc.detail}
    return {"status": r.status, "body": r.text, "content_type": r.headers.get("content-type", "")}


@tool("echo.fail")
def fail(input):
    how = input["how"]
    if how == "input":
        raise ToolInputError("the input was wrong")
    if how == "tool":
        raise ToolError("the tool gave up")
    if how == "http":
        http.get("https://api.echo.example/v1/denied")
    if how == "output":
        return {"not-json": {1, 2}}
    raise KeyError("unexpected")


@tool("echo.log")
def log_lines(input):
    log.debug("debug %s", "line")
    log.info("info %d", 1)
    log.warn("warn")
    log.error("error %s %s", "missing-arg")
    return secret_available(input.get("secret", "none"))


@tool("echo.binary")
def binary(input):
    # Every byte value both ways (WIT 1.1.0 maps bodies to latin-1 text and back).
    size = input["size"]
    body = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    r = http.request("PUT", input["url"], headers={"Content-Type": "application/octet-stream"}, body=body)
    return {"status": r.status, "length": len(r.body), "sum": sum(r.body), "first": list(r.body[:4])}
