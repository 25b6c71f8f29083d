// Benign JavaScript test plugin: echo, module state, HTTP through the host, failures.
import { HttpError, ToolError, ToolInputError, http, log, secretAvailable, tool } from "stockade";
import { describe } from "./lib/describe.js";

let counter = 0;

tool("echojs.echo", (input) => input);

tool("echojs.counter", () => {
  counter += 1;
  return counter;
});

tool("echojs.fetch", (input) => {
  const method = input.method || "GET";
  try {
    const r =
      method === "POST"
        ? http.post(input.url, { json: { sent: input.body || "" }, headers: { "X-Test": "1" } })
        : http.request(method, input.url, { headers: [["Accept", "text/plain"]], timeoutMs: 5000 });
    log.info("fetched", r.status, secretAvailable("none"));
    return describe(r);
  } catch (e) {
    if (e instanceof HttpError) return { error: e.name, detail: e.detail };
    throw e;
  }
});

tool("echojs.fail", (input) => {
  switch (input.how) {
    case "input":
      throw new ToolInputError("the input was wrong");
    case "tool":
      throw new ToolError("the tool gave up");
    case "http":
      return http.get("https://api.echo.example/v1/denied");
    case "async":
      return Promise.resolve(1);
    default:
      throw new TypeError("unexpected");
  }
});

// Every byte value both ways (WIT 1.1.0 maps bodies to latin-1 text and back).
tool("echojs.binary", (input) => {
  const body = new Uint8Array(input.size);
  for (let i = 0; i < body.length; i++) body[i] = i % 256;
  const r = http.request("PUT", input.url, { headers: { "Content-Type": "application/octet-stream" }, body });
  const bytes = r.body;
  let sum = 0;
  for (let i = 0; i < bytes.length; i++) sum += bytes[i];
  return { status: r.status, length: bytes.length, sum, first: Array.from(bytes.subarray(0, 4)) };
});
