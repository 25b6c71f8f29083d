"""hello: two tools written as plain functions with the Stockade guest SDK."""

from stockade import HttpTimeout, ToolError, ToolInputError, http, log, secret_available, tool


@tool("hello.greet")
def greet(input):
    name = input["name"].strip()
    if not name:
        raise ToolInputError("name must not be blank")
    return {"greeting": f"Hello, {name}!"}


@tool("hello.quote")
def quote(input):
    log.info("token staged: %s", secret_available("quotes_token"))
    try:
        r = http.get("https://quotes.example/v1/quotes/today", headers={"Accept": "application/json"})
    except HttpTimeout:
        raise ToolError("the quotes service did not answer in time") from None
    if r.status != 200:
        raise ToolError(f"the quotes service answered {r.status}")
    body = r.json()
    return {"quote": str(body["quote"])[:2000], "author": str(body.get("author", "unknown"))[:200]}
