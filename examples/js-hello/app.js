// hello-js: two tools written as plain functions with the Stockade guest SDK.
import { HttpTimeout, ToolError, ToolInputError, http, log, secretAvailable, tool } from "stockade";

tool("hello-js.greet", (input) => {
  const name = input.name.trim();
  if (!name) throw new ToolInputError("name must not be blank");
  return { greeting: `Hello, ${name}!` };
});

tool("hello-js.quote", () => {
  log.info("token staged:", secretAvailable("quotes_token"));
  let r;
  try {
    r = http.get("https://quotes.example/v1/quotes/today", { headers: { Accept: "application/json" } });
  } catch (e) {
    if (e instanceof HttpTimeout) throw new ToolError("the quotes service did not answer in time");
    throw e;
  }
  if (r.status !== 200) throw new ToolError(`the quotes service answered ${r.status}`);
  const body = r.json();
  return { quote: String(body.quote).slice(0, 2000), author: String(body.author ?? "unknown").slice(0, 200) };
});
