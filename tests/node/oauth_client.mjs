// The TypeScript SDK client's own OAuth flow against a protected MCP server (Triad), for the tests: on the 401 it
// discovers the server's metadata and authorization server, registers dynamically, and sends the person to the
// authorization URL; here the "person" is a fetch loop that follows the authorization server's redirects (with
// its cookies; oidc-provider started with AS_LOGIN=1 approves at once) until the redirect back to this client,
// whose code finishes the flow. Then it lists the tools, calls one, and prints one JSON line.
//
//   node oauth_client.mjs URL TOOL [ARGS_JSON]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";

const [url, tool, argsJson] = process.argv.slice(2);
const REDIRECT = "http://127.0.0.1:1/callback"; // never listened on: the loop below stops at it

async function browse(start) {
  const jar = new Map();
  let next = new URL(start);
  for (let hop = 0; hop < 20; hop++) {
    const cookie = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
    const res = await fetch(next, { redirect: "manual", headers: cookie ? { cookie } : {} });
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(";");
      const at = pair.indexOf("=");
      jar.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
    const location = res.headers.get("location");
    if (!location) throw new Error(`the authorization server answered ${res.status} without a redirect`);
    next = new URL(location, next);
    if (next.href.startsWith(REDIRECT)) return next.searchParams.get("code");
  }
  throw new Error("too many redirects");
}

let info, tokens, verifier, code;
const provider = {
  get redirectUrl() { return REDIRECT; },
  get clientMetadata() {
    return { client_name: "triad-ts-test", redirect_uris: [REDIRECT], grant_types: ["authorization_code"],
             response_types: ["code"], token_endpoint_auth_method: "none" };
  },
  clientInformation: () => info,
  saveClientInformation: (value) => { info = value; },
  tokens: () => tokens,
  saveTokens: (value) => { tokens = value; },
  saveCodeVerifier: (value) => { verifier = value; },
  codeVerifier: () => verifier,
  redirectToAuthorization: async (authorizationUrl) => { code = await browse(authorizationUrl); },
};

const client = new Client({ name: "triad-node-oauth-test", version: "1.0.0" });
const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
let authorized = false;
try {
  await client.connect(first);
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
  await first.finishAuth(code);
  authorized = true;
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }));
}
const tools = (await client.listTools()).tools.map((t) => t.name);
const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJson || "{}") });
console.log(JSON.stringify({ authorized, tools, result }));
await client.close();
