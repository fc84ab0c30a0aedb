// A real OAuth 2.1 authorization server for the tests: oidc-provider on 127.0.0.1, issuing JWT access tokens
// for resource indicators (RFC 8707) by the client_credentials grant, so tests get tokens without a browser.
//
// Environment: AS_PORT (the port, so the issuer is known before start), AS_RESOURCES (JSON list of the resource
// indicators it serves; the first is the default), AS_KEYS (JSON list of private JWKs with `kid`; the first signs,
// the rest are still published: restart with a new first key to rotate). Clients `alice-app` and `bob-app`
// (secret: `<id>-secret`, client_secret_basic) may ask for `mcp:read` and `mcp:write`.
// AS_LOGIN=1 adds the authorization code flow for a browser-less test: dynamic registration, `offline_access`
// (refresh tokens), and interactions approved at once (login as AS_ACCOUNT, default `test-user`, and
// consent to what was asked; the browser names another account by an `as_account` cookie). AS_OPAQUE=1: access
// tokens are opaque, and any client may introspect them (RFC 7662, at /token/introspection).
// AS_TTL: access token lifetime in seconds (default 600).
// AS_PKCE: what its metadata says of PKCE: a JSON list for `code_challenge_methods_supported` (the real server
// still requires S256), or `absent` for no such field (a server a client MUST refuse to authorize with).
// Prints `READY <port>` on stderr once it listens, then `GRANT <grant_type>` for each token issued and
// `GRANT_ERROR <grant_type> <error>` for each refused (a reused refresh token: `invalid_grant`); stops on SIGTERM.
import http from 'node:http';
import Provider, { errors } from 'oidc-provider';

const port = Number(process.env.AS_PORT);
const issuer = `http://127.0.0.1:${port}`;
const resources = JSON.parse(process.env.AS_RESOURCES);
const keys = JSON.parse(process.env.AS_KEYS).map((k) => ({ ...k, alg: 'RS256', use: 'sig' }));
const client = (id) => ({
  client_id: id, client_secret: `${id}-secret`, grant_types: ['client_credentials'], response_types: [],
  redirect_uris: [], token_endpoint_auth_method: 'client_secret_basic', scope: 'mcp:read mcp:write',
});

const login = process.env.AS_LOGIN === '1';
const ttl = Number(process.env.AS_TTL || 600);
const opaque = process.env.AS_OPAQUE === '1';
const provider = new Provider(issuer, {
  jwks: { keys },
  clients: [client('alice-app'), client('bob-app')],
  scopes: login ? ['openid', 'offline_access', 'mcp:read', 'mcp:write'] : ['mcp:read', 'mcp:write'],
  features: {
    devInteractions: { enabled: false },
    clientCredentials: { enabled: true },
    registration: { enabled: login },
    introspection: { enabled: opaque, allowedPolicy: async () => true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => resources[0],
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, indicator) => {
        if (!resources.includes(indicator)) throw new errors.InvalidTarget();
        return { scope: 'mcp:read mcp:write', audience: indicator, accessTokenTTL: ttl,
                 accessTokenFormat: opaque ? 'opaque' : 'jwt', jwt: { sign: { alg: 'RS256' } } };
      },
    },
  },
});
const pkce = process.env.AS_PKCE;
if (pkce !== undefined) {
  provider.use(async (ctx, next) => {
    await next();
    if (ctx.path.startsWith('/.well-known/') && ctx.body && typeof ctx.body === 'object') {
      const body = { ...ctx.body };
      if (pkce === 'absent') delete body.code_challenge_methods_supported;
      else body.code_challenge_methods_supported = JSON.parse(pkce);
      ctx.body = body;
    }
  });
}
provider.on('server_error', (_ctx, err) => console.error('server_error', err));
provider.on('grant.success', (ctx) => console.error(`GRANT ${ctx.oidc.params.grant_type}`));
provider.on('grant.error', (ctx, err) => console.error(`GRANT_ERROR ${ctx.oidc.params?.grant_type} ${err.error}`));

// The person at the browser, for AS_LOGIN: log in as AS_ACCOUNT and consent to everything asked.
async function approve(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params } = details;
  if (prompt.name === 'login') {
    const cookie = /(?:^|;\s*)as_account=([^;]+)/.exec(req.headers.cookie ?? '');
    const accountId = cookie ? decodeURIComponent(cookie[1]) : (process.env.AS_ACCOUNT || 'test-user');
    return provider.interactionFinished(req, res, { login: { accountId } }, { mergeWithLastSubmission: false });
  }
  const grant = details.grantId ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
  const asked = prompt.details;
  if (asked.missingOIDCScope) grant.addOIDCScope(asked.missingOIDCScope.join(' '));
  if (asked.missingOIDCClaims) grant.addOIDCClaims(asked.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(asked.missingResourceScopes ?? {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
}

const callback = provider.callback();
const server = http.createServer((req, res) => (login && req.url.startsWith('/interaction/')
  ? approve(req, res).catch((err) => { console.error('interaction', err); res.statusCode = 500; res.end(); })
  : callback(req, res)));
server.listen(port, '127.0.0.1', () => console.error(`READY ${server.address().port}`));
process.on('SIGTERM', () => { server.close(); server.closeAllConnections(); process.exit(0); });
