"""Triad as an OAuth 2.1 client of an upstream that requires it, against real components: oidc-provider
(`tests/node/oauth_as.mjs` with `AS_LOGIN=1`: dynamic registration, authorization code with PKCE, rotated refresh
tokens, interactions approved at once) and an SDK server with the SDK's server auth pieces
(`tests/servers/oauth_upstream.py`: its `whoami` tool answers with the subject and `jti` of the token it got).

The person's browser is httpx following the authorization server's redirects until Triad's loopback redirect.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import NODE_DIR, PYTHON, ROOT, TRIAD, Proc, marker, node_bin, start_triad, write_config
from tests.test_direct_path import Raw, call, events
from tests.test_oauth import free_port, signing_key

pytestmark = pytest.mark.anyio

UPSTREAM = ROOT / "tests" / "servers" / "oauth_upstream.py"


class Protected:
    """oidc-provider and an upstream that accepts its tokens for the upstream's own URL."""

    def __init__(self, procs: list[Proc], tmp_path: Path, ttl: int = 600, as_env: dict[str, str] | None = None,
                 advertise: str | None = None, **triad: Any) -> None:
        """`advertise`: how the upstream's resource metadata spells its authorization server (`{issuer}` is
        replaced by the real one; default: the issuer as it is)."""
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/mcp"
        as_port = free_port()
        self.issuer = f"http://127.0.0.1:{as_port}"
        _key, jwk = signing_key("login-key")
        procs.append(auth := Proc([node_bin(), str(NODE_DIR / "oauth_as.mjs"), marker("oauth-as")],
                                  env={"AS_PORT": str(as_port), "AS_RESOURCES": json.dumps([self.url]),
                                       "AS_KEYS": json.dumps([jwk]), "AS_LOGIN": "1", "AS_TTL": str(ttl),
                                       **(as_env or {})}))
        auth.wait_for(r"READY \d+")
        self.authorization_server = auth
        spelling = ["--advertise", advertise.format(issuer=self.issuer)] if advertise is not None else []
        procs.append(upstream := Proc([PYTHON, str(UPSTREAM), "--issuer", self.issuer, "--port", str(port),
                                       *spelling, marker("oauth-upstream")]))
        upstream.wait_for(r"READY \d+")
        self.upstream = upstream
        self.procs, self.tmp_path = procs, tmp_path
        auth = {"type": "oauth", "redirect_port": free_port(),
                **{key: value.format(issuer=self.issuer) if isinstance(value, str) else value
                   for key, value in triad.pop("auth", {}).items()}}
        upstream = {"url": self.url, "auth": auth, **({"connect_timeout": triad.pop("connect_timeout")}
                                                       if "connect_timeout" in triad else {})}
        self.config = write_config(tmp_path, {"upstreams": {"up": upstream}, **triad})
        self.tokens = tmp_path / "triad.tokens" / "up.json"

    def login(self, client: str | None = None, account: str = "test-user") -> None:
        """`triad login up [--client CLIENT]`, with httpx as the browser that opens the URL it prints and logs in
        at the authorization server as `account`."""
        proc = Proc([*TRIAD, "login", "up", "-c", str(self.config), *(["--client", client] if client else [])],
                    env={"TRIAD_TEST_MARK": marker("login")})
        self.procs.append(proc)
        url = proc.wait_for(r"^\s+(http://\S+)$").group(1)
        with httpx2.Client(follow_redirects=True, timeout=30, cookies={"as_account": account}) as browser:
            landing = browser.get(url)
        assert landing.status_code == 200 and "Triad received" in landing.text, landing.text
        assert proc.popen.wait(60) == 0, proc.stderr


async def whoami(url: str, token: str | None = None) -> str:
    """The `whoami` tool's answer through Triad (an error's message instead, prefixed `error:`)."""
    async with httpx2.AsyncClient(timeout=30) as http:
        session = Raw(http, url)
        if token is not None:
            session.headers["Authorization"] = f"Bearer {token}"
        response = await (await session.open()).post(call(1, "whoami", {}))
    found = events(response.text) if response.headers["content-type"].startswith("text/event-stream") \
        else [response.json()]
    if "error" in found[-1]:
        return f"error: {found[-1]['error']['message']}"
    result = found[-1]["result"]
    if result.get("isError"):
        return f"error: {result['content'][0]['text']}"
    return str(result["content"][0]["text"])


async def whoami_eliciting(url: str, token: str, open_link: Any) -> types.CallToolResult:
    """The `whoami` tool called through Triad by an SDK client that answers URL elicitations with `open_link`."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http, \
            streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, elicitation_callback=open_link) as session:
        await session.initialize()
        return await session.call_tool("whoami", {})


async def test_login_keeps_tokens_in_a_private_file_that_the_daemon_uses(procs: list[Proc], tmp_path: Path) -> None:
    protected = Protected(procs, tmp_path)
    protected.login()
    assert stat.S_IMODE(os.stat(protected.tokens).st_mode) == 0o600
    tokens = json.loads(protected.tokens.read_text())["tokens"]
    assert tokens["access_token"] and tokens["refresh_token"]
    url = start_triad(procs, protected.config, wait_ready=1)
    subject, _jti = (await whoami(url)).split()
    assert subject == "test-user"


async def test_tokens_are_never_logged_nor_shown_in_readyz_metrics_or_errors(procs: list[Proc],
                                                                             tmp_path: Path) -> None:
    protected = Protected(procs, tmp_path)
    protected.login()
    url = start_triad(procs, protected.config, wait_ready=1)
    await whoami(url)
    base = url.removesuffix("/mcp")
    async with httpx2.AsyncClient(timeout=30) as http:
        pages = [(await http.get(f"{base}{path}")).text for path in ("/readyz", "/metrics", "/healthz")]
        session = await Raw(http, url).open()
        pages.append((await session.post(call(2, "nonexistent", {}))).text)
    triad = procs[-1]
    document = json.loads(protected.tokens.read_text())
    secrets = [document["tokens"]["access_token"], document["tokens"]["refresh_token"]]
    client_secret = (document.get("client") or {}).get("client_secret")
    secrets += [client_secret] if client_secret else []
    login_output = "".join(proc.stderr for proc in procs if "login" in proc.args)
    for secret in secrets:
        for where, text in [("triad's log", triad.stderr), ("login's output", login_output),
                            *((f"page {i}", page) for i, page in enumerate(pages))]:
            assert secret not in text, f"a token appears in {where}"


async def test_a_short_lived_token_is_not_refreshed_on_every_request(procs: list[Proc], tmp_path: Path) -> None:
    """Tokens live 30 s: Triad refreshes ahead by a fraction of the lifetime, not by a fixed margin longer than it,
    so requests in its first part all go out with the token the login got."""
    protected = Protected(procs, tmp_path, ttl=30)
    protected.login()
    before = json.loads(protected.tokens.read_text())["tokens"]
    url = start_triad(procs, protected.config, wait_ready=1)
    answers = {tuple((await whoami(url)).split()) for _ in range(5)}
    assert len(answers) == 1 and next(iter(answers))[0] == "test-user", answers
    assert json.loads(protected.tokens.read_text())["tokens"]["access_token"] == before["access_token"]


def expire_in(path: Path, seconds: float) -> None:
    """Make the stored token (lifetime 600 s) one that expires in `seconds`."""
    document = json.loads(path.read_text())
    document["expires_at"] = time.time() + seconds
    path.write_text(json.dumps(document))


@pytest.mark.parametrize("authorization_server", ["up", "down"])
async def test_a_token_due_for_refresh_is_refreshed_or_used_while_still_valid(
        procs: list[Proc], tmp_path: Path, authorization_server: str) -> None:
    """A stored token due for refresh (it expires in 30 s) is refreshed when the authorization server answers;
    when it is down, the call goes out with the token it has (still valid), and the log says which server and
    what failed."""
    protected = Protected(procs, tmp_path)
    protected.login()
    expire_in(protected.tokens, 30)
    held = json.loads(protected.tokens.read_text())["tokens"]["access_token"]
    if authorization_server == "down":
        protected.authorization_server.popen.terminate()
        protected.authorization_server.popen.wait(10)
    url = start_triad(procs, protected.config, wait_ready=1)
    assert (await whoami(url)).split()[0] == "test-user"
    kept = json.loads(protected.tokens.read_text())["tokens"]["access_token"]
    if authorization_server == "up":
        assert kept != held
        return
    assert kept == held
    line = procs[-1].wait_for(r"refresh.*failed").string
    assert protected.issuer in line and "still valid" in line, line


async def test_one_users_credential_failure_never_changes_the_upstream_for_others(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    """alice's token has expired and the authorization server is down: each of her calls fails naming the server
    and the refresh; bob's valid token goes on working, and the upstream stays ready, however often she tries
    (more often than the circuit breaker's threshold)."""
    protected = Protected(procs, tmp_path, auth={"mode": "per_user"}, clients=CLIENTS)
    protected.login(account="triad-service")
    protected.login("alice", account="alice")
    [alice_file] = (tmp_path / "triad.tokens" / "up.users").glob("*.json")
    protected.login("bob", account="bob")
    url = start_triad(procs, protected.config, wait_ready=1)
    assert (await whoami(url, CLIENTS["bob"]["token"])).split()[0] == "bob"
    expire_in(alice_file, -5)
    protected.authorization_server.popen.terminate()
    protected.authorization_server.popen.wait(10)
    base = url.removesuffix("/mcp")
    for _ in range(7):
        refused = await whoami(url, CLIENTS["alice"]["token"])
        assert refused.startswith("error:") and protected.issuer in refused and "refresh" in refused, refused
        assert (await whoami(url, CLIENTS["bob"]["token"])).split()[0] == "bob"
    async with httpx2.AsyncClient(timeout=30) as http:
        ready = (await http.get(f"{base}/readyz",
                                headers={"Authorization": f"Bearer {CLIENTS['bob']['token']}"})).json()
    assert ready["upstreams"]["up"]["state"] == "ready", ready


async def test_without_a_login_the_upstream_is_down_with_a_message_naming_triad_login(procs: list[Proc],
                                                                                       tmp_path: Path) -> None:
    protected = Protected(procs, tmp_path)
    url = start_triad(procs, protected.config)
    await procs[-1].until(r"needs authorization: run `triad login up`")
    async with httpx2.AsyncClient(timeout=30) as http:
        ready = (await http.get(url.removesuffix("/mcp") + "/readyz")).json()
    assert "triad login up" in ready["upstreams"]["up"]["reason"], ready


@pytest.mark.parametrize(("upstream", "expected"), [
    ({"auth": {"grant": "client_credentials", "client_id": "x"}}, ("upstreams.up.auth", "client_secret")),
    ({"auth": {"mode": "per_user"}, "sessions": "shared"}, ("upstreams.up", "per_client")),
    ({"auth": {"type": "basic"}}, ("upstreams.up.auth.type", "oauth")),
    ({"auth": {}, "headers": {"Authorization": "Bearer x"}}, ("upstreams.up", "not both")),
])
def test_check_names_the_auth_key_of_a_bad_block(tmp_path: Path, upstream: dict[str, Any],
                                                 expected: tuple[str, str]) -> None:
    config = write_config(tmp_path, {"upstreams": {"up": {"url": "http://127.0.0.1:1/mcp", **upstream}}})
    done = subprocess.run([*TRIAD, "check", "-c", str(config)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1
    assert all(part in done.stderr for part in expected), done.stderr


CLIENTS = {name: {"token": f"{name}-token-0123456789abcdef"} for name in ("alice", "bob", "carol")}


async def test_per_user_clients_each_call_with_their_own_upstream_identity(procs: list[Proc], tmp_path: Path) -> None:
    """Triad's own login lists the catalog; alice and bob each logged in as themselves; carol did not."""
    protected = Protected(procs, tmp_path, auth={"mode": "per_user"}, clients=CLIENTS)
    protected.login(account="triad-service")
    protected.login("alice", account="alice")
    protected.login("bob", account="bob")
    url = start_triad(procs, protected.config, wait_ready=1)
    answers = {name: (await whoami(url, spec["token"])).split()[0] for name, spec in CLIENTS.items()
               if name != "carol"}
    assert answers == {"alice": "alice", "bob": "bob"}
    assert (await whoami(url, CLIENTS["alice"]["token"])).split()[0] == "alice"  # a new session: the same identity
    refused = await whoami(url, CLIENTS["carol"]["token"])
    assert refused.startswith("error:") and "triad login up --client" in refused, refused
    assert "triad-service" not in refused


async def test_a_per_user_client_that_can_open_links_is_asked_by_url_elicitation(procs: list[Proc],
                                                                                 tmp_path: Path) -> None:
    """dave never logged in: his first call makes Triad ask his client to open the authorization link; the
    client's "browser" logs in as dave, and the call goes on with dave's own token. dave takes longer than the
    upstream's connect_timeout to come back: a person's time does not count against the upstream."""

    protected = Protected(procs, tmp_path, auth={"mode": "per_user"}, connect_timeout="2s",
                          clients={"dave": {"token": "dave-token-0123456789abcdef"}})
    protected.login(account="triad-service")
    url = start_triad(procs, protected.config, wait_ready=1)
    asked: list[str] = []

    async def open_link(_ctx: Any, params: Any) -> Any:

        asked.append(params.url)
        await anyio.sleep(3)  # a person reading the page, longer than the upstream's connect_timeout (2 s)
        async with httpx2.AsyncClient(follow_redirects=True, timeout=30, cookies={"as_account": "dave"}) as browser:
            landing = await browser.get(params.url)
        assert "Triad received" in landing.text
        return types.ElicitResult(action="accept")

    result = await whoami_eliciting(url, "dave-token-0123456789abcdef", open_link)
    assert not result.is_error, result
    assert result.content[0].text.split()[0] == "dave"
    assert len(asked) == 1 and asked[0].startswith(protected.issuer)


async def test_the_token_file_is_private_even_over_a_leftover_temporary_file(tmp_path: Path) -> None:
    from mcp.shared.auth import OAuthToken

    from consumers.oauth._token_store import TokenFile

    path = tmp_path / "tokens" / "up.json"
    path.parent.mkdir()
    leftover = path.with_name(".up.json.tmp")
    leftover.write_text("{}")
    leftover.chmod(0o644)
    store = TokenFile(path)
    await store.set_tokens(OAuthToken(access_token="a-token", expires_in=60))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert (await store.get_tokens()) is not None and store.expires_at is not None
    await store.forget_tokens()
    assert await store.get_tokens() is None and stat.S_IMODE(os.stat(path).st_mode) == 0o600


async def test_a_token_the_upstream_refuses_is_refreshed_once_without_asking_anyone(procs: list[Proc],
                                                                                     tmp_path: Path) -> None:
    """The stored access token is refused (here: replaced by garbage) though not expired: Triad refreshes once on
    the 401 and goes on; no person is asked (the daemon has no `browser`, so a new authorization would fail)."""
    protected = Protected(procs, tmp_path)
    protected.login()
    document = json.loads(protected.tokens.read_text())
    document["tokens"]["access_token"] = "refused-by-the-upstream"
    protected.tokens.write_text(json.dumps(document))
    url = start_triad(procs, protected.config, wait_ready=1)
    assert (await whoami(url)).split()[0] == "test-user"
    assert json.loads(protected.tokens.read_text())["tokens"]["access_token"] != "refused-by-the-upstream"


async def follow_to(url: str, until: str, account: str) -> str:
    """A person's browser at the authorization server, logged in as `account`: the redirect it is sent back with,
    to a URL starting with `until` (not followed)."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=30, cookies={"as_account": account}) as browser:
        for _hop in range(10):
            answer = await browser.get(url)
            assert answer.status_code in (302, 303), (answer.status_code, answer.text[:300])
            url = str(answer.url.join(answer.headers["location"]))
            if url.startswith(until):
                return url
    raise AssertionError("the authorization server never sent the browser back to Triad")


async def test_a_remote_user_authorizes_through_triads_own_callback_which_no_one_else_can_complete(
        procs: list[Proc], tmp_path: Path) -> None:
    """alice's client is remote-style (HTTP, URL elicitation): the link she is sent comes back to Triad's own
    `/oauth/callback/up`, not to a loopback listener (nothing listens on the configured redirect_port). Before
    she gets there: bob, with his own token, holding her answer, is refused (403); her answer on another
    upstream's route, or a made-up state, is refused (400); none of that changes anything. Her browser (no
    token, as a browser is) completes it; a replay of the same answer is refused; her call runs as alice; bob's
    own call never runs as alice."""
    from urllib.parse import parse_qs, urlsplit


    clients = {name: {"token": f"{name}-token-0123456789abcdef"} for name in ("alice", "bob")}
    protected = Protected(procs, tmp_path, auth={"mode": "per_user"}, clients=clients)
    protected.login(account="triad-service")
    url = start_triad(procs, protected.config, wait_ready=1)
    base = url.removesuffix("/mcp")
    callback = f"{base}/oauth/callback/up"
    seen: dict[str, Any] = {}

    async def open_link(_ctx: Any, params: Any) -> Any:
        redirect = parse_qs(urlsplit(params.url).query)["redirect_uri"][0]
        seen["redirect_uri"] = redirect
        answer = await follow_to(params.url, callback, "alice")
        query = answer.partition("?")[2]
        async with httpx2.AsyncClient(timeout=30) as http:
            as_bob = await http.get(answer, headers={"Authorization": f"Bearer {clients['bob']['token']}"})
            elsewhere = await http.get(f"{base}/oauth/callback/other?{query}")
            forged = await http.get(f"{callback}?code=x&state=made-up")
            seen["refusals"] = [(r.status_code, r.text) for r in (as_bob, elsewhere, forged)]
            seen["hers"] = (await http.get(answer)).status_code
            replay = await http.get(answer)
            seen["replay"] = (replay.status_code, replay.text)
        return types.ElicitResult(action="accept")

    result = await whoami_eliciting(url, clients["alice"]["token"], open_link)
    assert seen["redirect_uri"] == callback
    (bob_status, bob_page), (other_status, other_page), (forged_status, forged_page) = seen["refusals"]
    assert bob_status == 403 and "another identity" in bob_page
    assert other_status == 400 and "another upstream" in other_page
    assert forged_status == 400 and "unknown, expired or was already used" in forged_page
    assert seen["hers"] == 200
    assert seen["replay"][0] == 400 and "already used" in seen["replay"][1]
    assert not result.is_error, result
    assert result.content[0].text.split()[0] == "alice"
    refused = await whoami(url, clients["bob"]["token"])  # bob's client cannot open links: no token of his
    assert refused.startswith("error:") and "alice" not in refused, refused


async def test_an_authorization_state_is_answered_once_for_its_own_user_and_expires() -> None:
    """The callback's bookkeeping (`consumers.oauth._redirects`): the state the person is sent with names the replica
    that waits; another identity, another upstream, a used or an expired state are refused and change nothing."""
    from consumers.config import AUTHORIZATION_WAIT
    from consumers.oauth._redirects import Answer, Redirects, state_owner

    now = [1000.0]
    hub = Redirects("https://triad.example/", "r1", clock=lambda: now[0])
    assert hub.redirect_uri("my up") == "https://triad.example/oauth/callback/my%20up"
    url, state = hub.expect("up", "alice", "https://as.example/authorize?client_id=c&state=abc&scope=a+b")
    assert state == "r1.abc" and state_owner(state) == "r1"
    assert url == "https://as.example/authorize?client_id=c&state=r1.abc&scope=a+b"
    assert hub.answer("up", state, "bob", "code", None) is Answer.OTHER_IDENTITY
    assert hub.answer("other", state, None, "code", None) is Answer.OTHER_UPSTREAM
    assert hub.answer("up", "r1.forged", None, "code", None) is Answer.UNKNOWN
    assert hub.answer("up", state, None, "the-code", "https://as.example") is Answer.ACCEPTED  # a browser: no token
    result = await hub.result(state)
    assert (result.code, result.state, result.iss) == ("the-code", "abc", "https://as.example")  # the SDK's state
    assert hub.answer("up", state, None, "code", None) is Answer.UNKNOWN  # used once
    _url, late = hub.expect("up", "alice", "https://as.example/authorize?state=def")
    now[0] += AUTHORIZATION_WAIT + 1
    assert hub.answer("up", late, "alice", "code", None) is Answer.UNKNOWN  # expired


async def test_a_user_logged_in_on_the_loopback_later_authorizes_through_triads_callback(procs: list[Proc],
                                                                                       tmp_path: Path) -> None:
    """erin was logged in by the operator (`triad login --client erin`: registered for the loopback redirect);
    her tokens are gone since (here: forgotten), the registration stays. Asked through her client, her
    authorization comes back on Triad's own callback: Triad registers anew for that redirect (the authorization
    server would refuse the old registration there) and her first call goes on as erin."""

    token = "erin-token-0123456789abcdef"
    protected = Protected(procs, tmp_path, auth={"mode": "per_user"}, clients={"erin": {"token": token}})
    protected.login(account="triad-service")
    protected.login("erin", account="erin")
    [kept] = (tmp_path / "triad.tokens" / "up.users").glob("*.json")
    document = json.loads(kept.read_text())
    loopback_client = document["client"]["client_id"]
    kept.write_text(json.dumps({**document, "tokens": None, "expires_at": None}))
    url = start_triad(procs, protected.config, wait_ready=1)

    async def open_link(_ctx: Any, params: Any) -> Any:

        answer = await follow_to(params.url, url.removesuffix("/mcp") + "/oauth/callback/up", "erin")
        async with httpx2.AsyncClient(timeout=30) as browser:
            assert (await browser.get(answer)).status_code == 200
        return types.ElicitResult(action="accept")

    result = await whoami_eliciting(url, token, open_link)
    assert not result.is_error, result
    assert result.content[0].text.split()[0] == "erin"
    assert json.loads(kept.read_text())["client"]["client_id"] != loopback_client


@pytest.mark.parametrize(("methods", "refused"), [
    ("absent", True), ("[]", True), ('["plain"]', True), ('["S256"]', False), ('["plain", "S256"]', False)])
async def test_an_authorization_server_that_does_not_list_s256_is_never_asked_to_authorize(
        procs: list[Proc], tmp_path: Path, methods: str, refused: bool) -> None:
    """MCP authorization (PKCE): a client MUST refuse to proceed when the server's metadata does not list S256 in
    `code_challenge_methods_supported` (absent, empty, `plain` only). The refusal is one line naming the server
    and the field, before any person is sent to it; a server that lists S256 is authorized as before."""
    protected = Protected(procs, tmp_path, as_env={"AS_PKCE": methods})
    if not refused:
        protected.login()
        return
    proc = Proc([*TRIAD, "login", "up", "-c", str(protected.config)], env={"TRIAD_TEST_MARK": marker("login")})
    procs.append(proc)
    assert proc.popen.wait(60) != 0
    proc._pump_thread.join(10)
    assert f"{protected.issuer}/auth" not in proc.stderr, "a person was sent to authorize"
    lines = [line for line in proc.stderr.splitlines() if "code_challenge_methods_supported" in line]
    assert len(lines) == 1 and protected.issuer in lines[0] and "S256" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def failed_login(protected: Protected) -> str:
    """`triad login up`, which is expected to fail: its whole output."""
    proc = Proc([*TRIAD, "login", "up", "-c", str(protected.config)], env={"TRIAD_TEST_MARK": marker("login")})
    protected.procs.append(proc)
    assert proc.popen.wait(60) != 0
    proc._pump_thread.join(10)
    return proc.stderr


@pytest.mark.parametrize(("advertise", "issuer", "expected"), [
    ("{issuer}", None, None),
    ("{issuer}/", None, "'{issuer}/'"),  # a root issuer with a trailing slash: another string (RFC 8414 §3.3)
    ("{issuer}/", "{issuer}", None),  # the operator names the issuer its metadata presents
    ("{issuer}/", "{issuer}/", "'{issuer}/'"),  # named, but not as the metadata presents it
    ("{issuer}", "http://127.0.0.1:1", "'http://127.0.0.1:1'"),  # the upstream advertises another server
])
async def test_an_issuer_other_than_the_one_expected_is_refused_unless_the_operator_names_it(
        procs: list[Proc], tmp_path: Path, advertise: str, issuer: str | None, expected: str | None) -> None:
    """Strict RFC 8414 comparison of the authorization server metadata's `issuer` with the server the upstream
    advertises, unless `auth.issuer` names the exact issuer (the advertised server may then differ from it by a
    root's trailing slash only). A refusal is one line naming the issuer expected and the one seen, and the
    setting; no traceback."""
    protected = Protected(procs, tmp_path, advertise=advertise, auth={"issuer": issuer} if issuer else {})
    if expected is None:
        protected.login()
        return
    output = failed_login(protected)
    lines = [line for line in output.splitlines() if "issuer" in line and "auth.issuer" in line]
    assert lines and expected.format(issuer=protected.issuer) in lines[0], output
    assert "Traceback" not in output, output


async def test_the_daemon_says_an_issuer_mismatch_in_one_line_without_a_traceback(procs: list[Proc],
                                                                                  tmp_path: Path) -> None:
    protected = Protected(procs, tmp_path, advertise="{issuer}/")
    start_triad(procs, protected.config)
    triad = procs[-1]
    line = triad.wait_for(r"auth\.issuer").string
    assert f"'{protected.issuer}/'" in line and f"'{protected.issuer}'" in line, line
    assert "Traceback" not in triad.stderr, triad.stderr
