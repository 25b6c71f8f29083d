// A second, independent MCP client (the TypeScript SDK) driving `stockade serve` over stdio.
// Usage: node ts_client.mjs '<JSON array: command and args of the server>'
// Prints one JSON object: the tool names, two call results and the elicitation messages.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [command, ...args] = JSON.parse(process.argv[2]);
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "stockade-ts-interop", version: "1.0.0" }, { capabilities: { elicitation: {} } });
const elicited = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  elicited.push(request.params.message);
  return { action: "accept", content: { approve: true } };
});
await client.connect(transport);
const tools = await client.listTools();
const say = await client.callTool({ name: "echo.say", arguments: { message: "from typescript" } });
const write = await client.callTool({ name: "echo.write", arguments: { message: "approved in ts" } });
const unknown = await client.callTool({ name: "echo.nope", arguments: {} }).then(
  () => null,
  (error) => error.code,
);
process.stdout.write(JSON.stringify({ tools: tools.tools, say, write, unknown, elicited }) + "\n");
await client.close();
