// A TypeScript-SDK client for the tests: connects to a streamable HTTP URL, lists tools (every page),
// calls one tool, and prints the results as one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, tool, argsJson] = process.argv.slice(2);
const client = new Client({ name: "triad-node-test", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
const tools = [];
let cursor;
do {
  const page = await client.listTools(cursor ? { cursor } : {});
  tools.push(...page.tools.map((t) => t.name));
  cursor = page.nextCursor;
} while (cursor);
const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson || "{}") });
console.log(JSON.stringify({ serverInfo: client.getServerVersion(), tools, result }));
await client.close();
