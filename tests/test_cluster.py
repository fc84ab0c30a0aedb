"""Scale-out: replicas of Triad behind a real HAProxy, sharing state in a real Redis (`cluster:`).

Clients of both eras go through HAProxy (deploy/haproxy.cfg.in) or straight to one replica when a test needs to
say which; every upstream call is counted by the upstream itself (tests/servers/ledger_upstream.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from pydantic import SecretStr

from gateway.state import PinStore
from tests.cluster_env import CLUSTER_KEY, TOKENS, TriadCluster, handshake_session, http_for, modern_client, wait_until
from tests.conftest import DIRECT_PATH, ROOT, TRIAD, Proc
from tests.raw_clients import HandshakeSession, answer_of, call, dumps, modern_headers, modern_post, sse_session

pytestmark = pytest.mark.anyio

CONFORMANCE = ROOT / "tests" / "servers" / "conformance_upstream.py"
EVENT_WAIT = 30.0
"""A generous bound on waiting for something that should take well under a second (the machine is shared)."""


async def answer(_ctx: Any, params: Any) -> types.ElicitResult:
    fields = (params.requested_schema or {}).get("properties") or {}
    return types.ElicitResult(action="accept", content={name: f"yes to {params.message}" for name in fields})


async def sample(_ctx: Any, params: Any) -> types.CreateMessageResult:
    asked = params.messages[0].content.text
    return types.CreateMessageResult(role="assistant", content=types.TextContent(text=f"sampled: {asked}"),
                                     model="test-model")


async def eventually(check: Callable[[], bool]) -> None:
    """Until `check()` holds (the caller bounds the wait)."""
    while True:
        if check():
            return
        await anyio.sleep(0.05)


def text_of(result: Any) -> str:
    return str(result.content[0].text)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TriadCluster]:
    procs: list[Proc] = []
    try:
        yield TriadCluster(procs, tmp_path_factory.mktemp("cluster")).start()
    finally:
        for proc in reversed(procs):
            proc.terminate()


def replica_of(cluster: TriadCluster, client: str, tool: str) -> Counter[str]:
    """How many of `client`'s calls of `tool` each replica served."""
    return Counter({name: sum(1 for r in records if r["client"] == client and r["name"] == tool)
                    for name, records in cluster.served_by().items()})


async def test_clients_of_both_eras_call_list_sample_and_elicit_across_the_replicas(cluster: TriadCluster) -> None:
    """A handshake session stays on the replica that opened it (HAProxy's stick table on Mcp-Session-Id), and its
    server->client requests reach it; a 2026-07-28 client's requests spread over the replicas, and the retry of
    an input round that lands on another replica is forwarded to the one that parked the call."""
    async with handshake_session(cluster.url, "alice", elicitation_callback=answer,
                                 sampling_callback=sample) as session:
        for i in range(6):
            assert text_of(await session.call_tool("echo", {"text": f"h{i}"})) == f"h{i}"
        assert "echo" in {tool.name for tool in (await session.list_tools()).tools}
        assert json.loads(text_of(await session.call_tool("ask", {"question": "ship?"})))["content"] == {
            "answer": "yes to ship?"}
        assert "sampled: hello" in text_of(await session.call_tool("sample", {"prompt": "hello"}))
    handshake = replica_of(cluster, "alice", "echo")
    assert sorted(handshake.values()) == [0, 0, 6], handshake  # one replica served the whole session

    async with modern_client(cluster.url, "bob", elicitation_callback=answer, sampling_callback=sample) as modern:
        for i in range(6):
            assert text_of(await modern.call_tool("echo", {"text": f"m{i}"})) == f"m{i}"
        assert "echo" in {tool.name for tool in (await modern.list_tools()).tools}
        for i in range(3):
            asked = json.loads(text_of(await modern.call_tool("ask", {"question": f"q{i}"})))
            assert asked["content"] == {"answer": f"yes to q{i}"}
            assert f"sampled: p{i}" in text_of(await modern.call_tool("sample", {"prompt": f"p{i}"}))
    spread = replica_of(cluster, "bob", "echo")
    assert sum(spread.values()) == 6 and sum(1 for n in spread.values() if n) >= 2, spread
    # each round's retry went to whichever replica HAProxy chose next: some were forwarded to the asking replica
    assert any("forwarded a request to replica" in proc.stderr for proc in cluster.replicas.values())
    calls = Counter(cluster.ledger())
    assert calls['ask {"question": "q0"}'] == 1 and calls['sample {"prompt": "p2"}'] == 1


async def test_legacy_sse_clients_through_haproxy(cluster: TriadCluster) -> None:
    """A legacy SSE session's stream and its posts meet on one replica (HAProxy hashes `Authorization` for
    `/sse` and `/messages/`), for clients of different tokens at once: a post that reached another replica than
    its stream would be refused there (unknown session)."""
    async with http_for("alice") as alice, http_for("bob") as bob, \
            sse_session(alice, cluster.url) as first, sse_session(bob, cluster.url) as second:
        for i in range(4):
            for session, who in ((first, "alice"), (second, "bob")):
                answered = await session.request(call(i + 10, "echo", {"text": f"{who}{i}"}))
                assert answered["result"]["content"][0]["text"] == f"{who}{i}"


async def test_a_session_answers_only_its_opener_on_every_replica(cluster: TriadCluster) -> None:
    """A session opened on r1 and asked on r2 is forwarded to r1 for the identity that opened it; to another
    identity it does not exist on any replica (404), exactly as on one replica."""
    first, second = "r1", "r2"
    async with http_for("alice") as alice, http_for("bob") as bob:
        session = await HandshakeSession(alice, cluster.replica_url(first)).open()
        listing = dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert (await session.post(listing)).status_code == 200  # tracked, and its owner recorded
        headers = {**session.headers}

        async def on_second(http: Any) -> Any:
            return await http.post(cluster.replica_url(second), content=listing, headers=headers)

        with anyio.fail_after(EVENT_WAIT):
            while (answered := await on_second(alice)).status_code != 200:
                assert answered.status_code == 404
                await anyio.sleep(0.05)
        assert "echo" in {tool["name"] for tool in answer_of(answered)["result"]["tools"]}
        # the DNS-rebinding check comes before forwarding, as on one replica
        headers["Host"] = "evil.example"
        assert (await on_second(alice)).status_code == 421
        headers["Host"], headers["Origin"] = f"127.0.0.1:{cluster.ports[second]}", "http://evil.example"
        assert (await on_second(alice)).status_code == 403
        del headers["Host"], headers["Origin"]
        assert (await on_second(bob)).status_code == 404
        assert (await bob.post(cluster.replica_url(first), content=listing, headers=headers)).status_code == 404


async def test_a_deeply_nested_body_naming_a_round_gets_a_parse_error(cluster: TriadCluster) -> None:
    """The router reads a body that names a round's state before anything else parses it: nesting past the limit
    is a parse error there as on one replica (`exposers._wire.parse_json`), never an exception in the app (a 500
    and a traceback)."""
    nested = (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", '
              b'"requestState": "triad-round:r2.x", "arguments": {"a": ' + b"[" * 5_000 + b"]" * 5_000 + b"}}}")
    async with http_for("alice") as alice:
        answered = await modern_post(alice, cluster.replica_url("r1"), nested, modern_headers("tools/call", "echo"))
    assert answered.status_code == 400, answered.text
    assert answered.json()["error"]["code"] == -32700
    assert "Traceback" not in cluster.replicas["r1"].stderr


async def test_a_reload_reaches_a_listening_client_on_every_replica(cluster: TriadCluster) -> None:
    """A changed shared config, reloaded through one replica, applies on all: a handshake client listening on
    each replica's GET stream gets `tools/list_changed`."""
    changed = {name: anyio.Event() for name in cluster.ports}

    async def listen(name: str, ready: anyio.Event, done: anyio.Event) -> None:
        async def on_message(message: Any) -> None:
            if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
                changed[name].set()

        async with handshake_session(cluster.replica_url(name), "alice", message_handler=on_message) as session:
            await session.list_tools()
            ready.set()
            await done.wait()

    reloads = {name: cluster.readyz(name)["reload"]["reloads"] for name in cluster.ports}
    done = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            for name in cluster.ports:
                ready = anyio.Event()
                tg.start_soon(listen, name, ready, done)
                with anyio.fail_after(EVENT_WAIT):
                    await ready.wait()
            cluster.write_config(policy={"profile": {"deny": ["big"]}})
            async with http_for("ops") as ops:
                reloaded = await ops.post(cluster.url.replace("/mcp", "/admin/reload"))
            assert reloaded.status_code == 200 and reloaded.json()["ok"], reloaded.text
            with anyio.fail_after(EVENT_WAIT):
                for event in changed.values():
                    await event.wait()
            done.set()
    finally:
        cluster.write_config()
    # every replica applied it (by the event from the replica asked, or by watching the file, whichever first)
    assert all(cluster.readyz(name)["reload"]["reloads"] > reloads[name] for name in cluster.ports)
    wait_until(lambda: all(cluster.readyz(name)["reload"]["reloads"] >= reloads[name] + 1 for name in cluster.ports),
               "the restored config to be applied")


async def test_a_reload_asked_of_one_replica_is_applied_by_all(cluster: TriadCluster) -> None:
    """`POST /admin/reload` on one replica, the file unchanged (no watcher fires): the others reload too."""
    asked = "reloaded config \\(cluster: asked on replica r2\\)"
    seen = {name: len(re.findall(asked, cluster.replicas[name].stderr)) for name in ("r1", "r3")}
    async with http_for("ops") as ops:
        assert (await ops.post(cluster.replica_url("r2").replace("/mcp", "/admin/reload"))).status_code == 200
    for name, count in seen.items():
        await cluster.replicas[name].until(asked, count + 1)


def test_readyz_shows_the_clusters_view(cluster: TriadCluster) -> None:
    view = cluster.cluster_view("r1")
    assert view["replica"] == "r1" and view["redis"] == "up" and not view["draining"]
    assert set(view["replicas"]) == set(cluster.ports)
    assert view["replicas"]["r2"]["address"] == f"http://127.0.0.1:{cluster.ports['r2']}"
    wait_until(lambda: cluster.cluster_view("r1")["replicas"]["r3"]["upstreams_ready"] == 1,
               "r3's heartbeat to say its upstream is ready")
    # neither the cluster key nor a token shows in a replica's log or readiness answer
    texts = [proc.stderr for proc in cluster.replicas.values()] + [json.dumps(cluster.readyz("r1"))]
    assert not [secret for secret in (CLUSTER_KEY, *TOKENS.values()) if any(secret in text for text in texts)]


async def test_an_upstreams_list_change_seen_by_one_replica_reaches_clients_of_all(procs: list[Proc],
                                                                                  tmp_path: Path) -> None:
    """The upstream tells only the session that asked it (r1's) that its tools changed: r1 announces it, r2
    re-lists its own connection, and a client listening on r2 gets `tools/list_changed` with the new tool."""
    cluster = TriadCluster(procs, tmp_path, replicas=2, upstream=CONFORMANCE).start()
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(getattr(message, "root", message), types.ToolListChangedNotification):
            changed.set()

    async with handshake_session(cluster.replica_url("r2"), "alice", message_handler=on_message) as listener:
        before = {tool.name for tool in (await listener.list_tools()).tools}
        async with handshake_session(cluster.replica_url("r1"), "bob") as caller:
            assert text_of(await caller.call_tool("test_trigger_tool_change", {})) == "tool list changed"
        with anyio.fail_after(EVENT_WAIT):
            await changed.wait()
        added = {tool.name for tool in (await listener.list_tools()).tools} - before
    assert added and all(name.startswith("test_added_tool") for name in added), added
    assert "saw upstream fx change; re-listing it here" in cluster.replicas["r2"].stderr


async def test_a_rate_limit_holds_across_the_replicas(procs: list[Proc], tmp_path: Path) -> None:
    """`rate_limit: {per_client: N/m}` lets N calls through in total, whichever replicas serve them."""
    limit = 5
    cluster = TriadCluster(procs, tmp_path, replicas=3, hooks=[{"rate_limit": {"per_client": f"{limit}/m"}}]).start()
    started = time.monotonic()
    outcomes = []
    async with modern_client(cluster.url, "alice") as modern:
        for i in range(3 * limit):
            result = await modern.call_tool("echo", {"text": f"n{i}"})
            outcomes.append(not result.is_error)
            if result.is_error:
                assert "Rate limit exceeded for client 'alice'" in text_of(result)
    refilled = int((time.monotonic() - started) * limit / 60)
    assert limit <= sum(outcomes) <= limit + refilled, outcomes
    served = replica_of(cluster, "alice", "echo")
    assert sum(1 for n in served.values() if n) >= 2, served  # the calls did spread over the replicas


async def test_killing_a_replica_under_load(procs: list[Proc], tmp_path: Path) -> None:
    """SIGTERM to one replica while clients call: it leaves HAProxy's rotation before it closes its socket and
    finishes its calls in flight, so 2026-07-28 clients see no failed call; a handshake client whose session it
    owned gets 404, opens a new session and goes on; the upstream executes every call exactly once."""
    cluster = TriadCluster(procs, tmp_path, replicas=3).start()
    victim_session: dict[str, str] = {}
    failures: list[str] = []
    reopened = anyio.Event()
    succeeded: list[str] = []
    stop = anyio.Event()

    async def modern_worker(worker: int) -> None:
        async with modern_client(cluster.url, "bob") as modern:
            i = 0
            while not stop.is_set():
                tag = f"m{worker}-{i}"
                try:
                    result = await modern.call_tool("echo", {"text": tag})
                except Exception as exc:
                    failures.append(f"{tag}: {type(exc).__name__}: {exc}")
                else:
                    assert text_of(result) == tag
                    succeeded.append(tag)
                i += 1

    async def handshake_worker(opened: anyio.Event) -> None:
        i, sessions = 0, 0
        while not stop.is_set():
            try:
                async with handshake_session(cluster.url, "alice") as session:
                    sessions += 1
                    while not stop.is_set():
                        tag = f"h{i}"
                        assert text_of(await session.call_tool("echo", {"text": tag})) == tag
                        succeeded.append(tag)
                        i += 1
                        if sessions == 1:
                            opened.set()
                        else:
                            reopened.set()
                        await anyio.sleep(0.01)
            except Exception as exc:  # the session's replica is gone: 404, then a new session
                while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                    exc = exc.exceptions[0]
                victim_session["error"] = f"{type(exc).__name__}: {exc}"

    async with anyio.create_task_group() as tg:
        opened = anyio.Event()
        tg.start_soon(handshake_worker, opened)
        for worker in range(4):
            tg.start_soon(modern_worker, worker)
        with anyio.fail_after(EVENT_WAIT):
            await opened.wait()
            await eventually(lambda: len(succeeded) >= 40)
        # the replica that owns the handshake client's session (HAProxy chose it)
        [victim] = [name for name, records in cluster.served_by().items()
                    if any(r["client"] == "alice" for r in records)]
        cluster.replicas[victim].popen.send_signal(signal.SIGTERM)
        with anyio.fail_after(EVENT_WAIT):
            await reopened.wait()
            await eventually(lambda: cluster.replicas[victim].popen.poll() is not None)
            mark = len(succeeded)
            await eventually(lambda: len(succeeded) >= mark + 40)
        stop.set()
    assert failures == [], failures
    # its session was gone (404, which the SDK reports as "Session not found"): it opened a new one
    assert "Session not found" in victim_session.get("error", ""), victim_session
    executed = Counter(json.loads(line.split(" ", 1)[1])["text"] for line in cluster.ledger()
                       if line.startswith("echo "))
    assert [tag for tag, count in executed.items() if count > 1] == []  # nothing executed twice
    assert all(executed[tag] == 1 for tag in succeeded)
    print(f"{len(succeeded)} calls; handshake client's error: {victim_session['error']}", file=sys.stderr)


async def test_redis_restarted_under_load(procs: list[Proc], tmp_path: Path) -> None:
    """While Redis is down, calls and lists go on (rate limits count per replica), `/readyz` says `redis: down`;
    once it is back every replica reconnects by itself: the view is whole again and events fan out again."""
    cluster = TriadCluster(procs, tmp_path, replicas=2, hooks=[{"rate_limit": {"per_client": "100000/m"}}]).start()
    failures: list[str] = []
    done = 0
    stop = anyio.Event()

    async def worker(worker: int) -> None:
        nonlocal done
        async with modern_client(cluster.url, "bob") as modern:
            i = 0
            while not stop.is_set():
                try:
                    result = await modern.call_tool("echo", {"text": f"w{worker}-{i}"})
                    assert not result.is_error, text_of(result)
                    done += 1
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                i += 1

    assert cluster.redis is not None
    async with anyio.create_task_group() as tg:
        for n in range(3):
            tg.start_soon(worker, n)
        with anyio.fail_after(EVENT_WAIT):
            await eventually(lambda: done >= 20)
        await anyio.to_thread.run_sync(cluster.redis.terminate)
        await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: all(cluster.cluster_view(name)["redis"] == "down" for name in cluster.ports), "redis: down"))
        mark = done
        with anyio.fail_after(EVENT_WAIT):
            await eventually(lambda: done >= mark + 20)
        await anyio.to_thread.run_sync(cluster.start_redis)
        await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: all(cluster.cluster_view(name)["redis"] == "up"
                        and set(cluster.cluster_view(name)["replicas"]) == set(cluster.ports)
                        for name in cluster.ports), "every replica back in the cluster"))
        mark = done
        with anyio.fail_after(EVENT_WAIT):
            await eventually(lambda: done >= mark + 20)
        stop.set()
    assert failures == [], failures
    # the event channel is back: a reload asked of one replica reaches the other
    before = cluster.readyz("r2")["reload"]["reloads"]

    async def asked() -> bool:
        async with http_for("ops") as ops:
            await ops.post(cluster.replica_url("r1").replace("/mcp", "/admin/reload"))
        with anyio.move_on_after(2):
            await eventually(lambda: cluster.readyz("r2")["reload"]["reloads"] != before)
        return bool(cluster.readyz("r2")["reload"]["reloads"] > before)

    with anyio.fail_after(EVENT_WAIT):
        while not await asked():  # the listener may still be re-subscribing
            pass


def test_without_a_cluster_section_redis_is_never_imported(tmp_path: Path) -> None:
    import subprocess

    code = ("import sys, anyio\nfrom gateway.runtime import parse_config, running_gateway\n"
            "async def main():\n    async with running_gateway(parse_config('upstreams: {}')):\n        pass\n"
            "anyio.run(main)\nassert 'redis' not in sys.modules and 'gateway.cluster' not in sys.modules, 'imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr



async def test_approvals_of_pinned_definitions_are_the_clusters(procs: list[Proc], tmp_path: Path) -> None:
    """`pin_definitions` with `trust_new: false`: a tool is blocked on every replica until `triad approve`
    (run once, against the same config) approves it for all of them; the approval is kept in the state file
    too (durable: Redis is the cluster's cache of it)."""
    pins = tmp_path / "pins.json"
    cluster = TriadCluster(procs, tmp_path, replicas=2,
                           hooks=[{"pin_definitions": {"trust_new": False, "state": str(pins)}}]).start()
    for name in cluster.ports:
        async with modern_client(cluster.replica_url(name), "alice") as modern:
            blocked = await modern.call_tool("echo", {"text": "x"})
        assert blocked.is_error and "has not been approved yet" in text_of(blocked)
    approved = await anyio.run_process(
        [*TRIAD, "approve", "-c", str(cluster.config_path), "echo"], check=False,
        env={**os.environ, "TRIAD_REPLICA_ID": "approver", "TRIAD_CLUSTER_KEY": CLUSTER_KEY})
    assert approved.returncode == 0, approved.stderr.decode()
    assert "echo: approved" in approved.stdout.decode()
    for name in cluster.ports:
        async with modern_client(cluster.replica_url(name), "alice") as modern:
            assert text_of(await modern.call_tool("echo", {"text": name})) == name
            still = await modern.call_tool("structured", {"n": 1})
            assert still.is_error  # approving echo approved nothing else
    assert pins.exists() and "fx:echo" in json.loads(pins.read_text())["pins"]


async def test_while_redis_is_down_the_pins_page_and_triad_approve_say_so(procs: list[Proc],
                                                                          tmp_path: Path) -> None:
    """With the cluster's approvals unreachable, the console's pins page answers 503 saying why (not a 500), and
    `triad approve` exits non-zero with one line (not a traceback)."""
    env = TriadCluster(procs, tmp_path, replicas=1,
                       hooks=[{"pin_definitions": {"trust_new": False, "state": str(tmp_path / "pins.json")}}])
    env.start_upstream()
    env.write_config(console={"enabled": True})  # no redis-server on env.redis_port: Redis is down throughout
    env.start_replica("r1").wait_for(r"upstream fx ready")
    base = f"http://127.0.0.1:{env.ports['r1']}"
    async with http_for("ops") as http:
        signed = await http.post(f"{base}/console/login", data={"token": TOKENS["ops"]}, headers={"Origin": base})
        assert signed.status_code == 303, signed.text
        page = await http.get(f"{base}/console/pins")
    assert page.status_code == 503 and "Redis is unreachable" in page.text
    approved = await anyio.run_process(
        [*TRIAD, "approve", "-c", str(env.config_path), "echo"], check=False,
        env={**os.environ, "TRIAD_REPLICA_ID": "approver", "TRIAD_CLUSTER_KEY": CLUSTER_KEY})
    errors = [line for line in approved.stderr.decode().splitlines() if line.startswith("triad:")]
    assert approved.returncode == 1 and "Traceback" not in approved.stderr.decode(), approved.stderr.decode()
    assert errors == ["triad: cannot approve: the cluster's approvals are in Redis, which is unreachable"]


async def test_listening_on_every_interface_needs_cluster_address(procs: list[Proc], tmp_path: Path) -> None:
    """A replica listening on 0.0.0.0 or :: without `cluster.address` would announce that wildcard to the others,
    which would then forward to themselves: `triad check` refuses such a config, and `triad serve --host` refuses
    to start, both naming `cluster.address`."""
    env = TriadCluster(procs, tmp_path, replicas=1)
    env.start_upstream()
    env.write_config(listen={"host": "0.0.0.0"})
    run_env = {**os.environ, "TRIAD_REPLICA_ID": "r1", "TRIAD_CLUSTER_KEY": CLUSTER_KEY}
    with anyio.fail_after(EVENT_WAIT):
        checked = await anyio.run_process([*TRIAD, "check", "-c", str(env.config_path)], check=False, env=run_env)
    assert checked.returncode != 0 and b"cluster.address is required when listening on 0.0.0.0" in \
        checked.stdout + checked.stderr, checked.stderr.decode()
    env.write_config()
    for host in ("0.0.0.0", "::"):
        with anyio.fail_after(EVENT_WAIT):
            served = await anyio.run_process([*TRIAD, "serve", "-c", str(env.config_path), "--host", host,
                                              "--port", "0"], check=False, env=run_env)
        assert served.returncode == 1, served.stderr.decode()
        assert served.stderr.decode().strip().splitlines()[-1] == (
            f"triad: cluster.address is required when listening on {host} (every interface): the other replicas "
            f"reach this one there, e.g. cluster.address: http://10.0.0.5:8765")


async def test_secrets_in_redis_are_encrypted_and_bound_to_their_identity(procs: list[Proc],
                                                                          tmp_path: Path) -> None:
    from gateway.cluster import Cluster, SecretUnreadable
    from gateway.config._models import ClusterConfig
    from gateway.identity import Identity

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    cluster, other = Cluster(settings), Cluster(settings.model_copy(update={"secret_key": SecretStr("x" * 40)}))
    alice = Identity("alice", principal=("https://issuer.example", "user-1"))
    alice_again = Identity("alice", principal=("https://issuer.example", "user-2"))
    # `other` does not join (a replica with another key refuses to): it only reads Redis through its vault
    async with cluster.running(heartbeat=False):
        await cluster.vault.put(alice, "upstream:search", b"gh-token-secret-value")
        assert await cluster.vault.get(alice, "upstream:search") == b"gh-token-secret-value"
        assert await cluster.vault.get(alice_again, "upstream:search") is None  # another subject of the client
        assert await cluster.vault.get(alice, "upstream:other") is None
        stored = {key: await cluster.link.client.get(key) for key in await cluster.link.client.keys("triad:secret:*")}
        assert len(stored) == 1
        [(key, value)] = stored.items()
        assert b"gh-token" not in value and b"alice" not in key and b"upstream" not in key
        # another cluster key neither finds it (identity hashes are keyed too) nor decrypts it
        assert await other.vault.get(alice, "upstream:search") is None
        with pytest.raises(SecretUnreadable):
            other.box.open(value, key.decode())
        # copied under another identity's key, it does not decrypt there
        await cluster.link.client.set(cluster.vault._key(alice_again, "upstream:search"), value)
        skipped = cluster.rejections.total
        for _ in range(2):
            with pytest.raises(SecretUnreadable):
                await cluster.vault.get(alice_again, "upstream:search")
        assert cluster.rejections.total == skipped + 2  # each counted (and logged at a bounded rate)


async def test_while_redis_is_down_approvals_fail_closed_and_limits_count_per_replica(procs: list[Proc],
                                                                                     tmp_path: Path) -> None:
    """What the shared state does without Redis (README, "While Redis is unreachable"): a definition this replica
    saw approved still passes, any other is blocked saying why; a bucket counts in this replica alone; once Redis
    is back both are the cluster's again, with nothing restarted."""
    from gateway.cluster import Cluster
    from gateway.config._models import ClusterConfig

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    cluster = Cluster(ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                                    secret_key=CLUSTER_KEY))  # type: ignore[arg-type]
    pins, buckets = cluster.pins("pins", PinStore(tmp_path / "pins.json")), cluster.buckets()
    seen, unseen = {"description": "seen"}, {"description": "never seen here"}
    async with cluster.running(heartbeat=False):
        assert await pins.check("fx", "echo", seen, True) is None  # first use pins it, for the cluster
        assert [await buckets.take("client:a:2/m", 2, 2 / 60) is None for _ in range(3)] == [True, True, False]
        assert env.redis is not None
        await anyio.to_thread.run_sync(env.redis.terminate)
        assert await pins.check("fx", "echo", seen, True) is None
        refused = await pins.check("fx", "other", unseen, True)
        assert refused is not None and "Redis is unreachable" in refused
        # this replica's own bucket: full again (the cluster's was spent), and limited
        assert [await buckets.take("client:a:2/m", 2, 2 / 60) is None for _ in range(3)] == [True, True, False]
        assert cluster.view()["redis"] == "down"
        await anyio.to_thread.run_sync(env.start_redis)  # an empty Redis: nothing was persisted
        with anyio.fail_after(EVENT_WAIT):  # reconnected by itself (after its 1 s of counting Redis as down)
            while True:
                if await pins.check("fx", "other", unseen, True) is None:
                    break
                await anyio.sleep(0.1)
        assert cluster.view()["redis"] == "up"
        assert await buckets.take("client:b:1/m", 1, 1 / 60) is None
        assert await buckets.take("client:b:1/m", 1, 1 / 60) is not None


async def test_replicas_pinning_a_tool_at_once_store_one_definition_with_its_own_digest(procs: list[Proc],
                                                                                         tmp_path: Path) -> None:
    """First use with `trust_new` on two replicas at once, each seeing another definition: exactly one of them is
    pinned, its definition and digest together in one sealed record (the console's diff reads the definition)."""
    from gateway.cluster import Cluster
    from gateway.config._models import ClusterConfig
    from gateway.state._pins import definition_hash, pinned_fields

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    first, second = Cluster(settings), Cluster(settings.model_copy(update={"replica_id": "r2"}))
    stores = {name: PinStore(tmp_path / f"pins-{name}.json") for name in ("r1", "r2")}

    async def pin_as(cluster: Cluster, tool: str) -> None:
        await cluster.pins("pins", stores[cluster.replica_id]).check(
            "fx", tool, {"description": f"{tool} as {cluster.replica_id}"}, True)

    tools = [f"tool{i}" for i in range(60)]
    async with first.running(heartbeat=False), second.running(heartbeat=False):
        async with anyio.create_task_group() as tg:
            for tool in tools:
                tg.start_soon(pin_as, first, tool)
                tg.start_soon(pin_as, second, tool)
        for tool in tools:
            status = await first.pins("pins", stores["r1"]).status("fx", tool, {"description": f"{tool} as r1"})
            other = await second.pins("pins", stores["r2"]).status("fx", tool, {"description": f"{tool} as r2"})
            assert sorted([status.state, other.state]) == ["approved", "changed"], tool
            assert status.approved is not None and definition_hash(status.approved) in (
                definition_hash(pinned_fields({"description": f"{tool} as {name}"})) for name in ("r1", "r2"))
            pinned = "r1" if status.state == "approved" else "r2"
            assert status.approved == pinned_fields({"description": f"{tool} as {pinned}"}), tool


async def test_a_heartbeat_in_flight_when_the_replica_leaves_does_not_bring_it_back(procs: list[Proc],
                                                                                     tmp_path: Path) -> None:
    """`leave()` while a beat is between its check and its write: the replica stays gone from the cluster's view
    (it would otherwise be back, and be forwarded to, for three beats)."""
    from gateway.cluster._link import Link
    from gateway.cluster._records import Records, Rejections
    from gateway.cluster._replicas import MEMBERS, Heartbeat, Replicas, record_key

    class HeldLink(Link):
        """Holds the next operation until `release` is set."""

        def __init__(self, url: str) -> None:
            super().__init__(url)
            self.holding, self.held, self.release = False, anyio.Event(), anyio.Event()

        async def run(self, operation: Any) -> Any:
            if self.holding:
                self.holding = False
                self.held.set()
                await self.release.wait()
            return await super().run(operation)

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    link = HeldLink(f"redis://127.0.0.1:{env.redis_port}/0")
    replicas = Replicas(link, Records(CLUSTER_KEY), Rejections(), "r9", 0.3)
    heartbeat = Heartbeat(None)
    await replicas.beat(heartbeat)
    assert "r9" in replicas.alive
    link.holding = True
    with anyio.fail_after(EVENT_WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(replicas.beat, heartbeat)
            await link.held.wait()  # the beat is about to write its record
            await replicas.leave(stop_beating=True)
            link.release.set()
        assert await link.client.get(record_key("r9")) is None
        assert not await link.client.sismember(MEMBERS, "r9")
    await link.close()


async def test_a_users_upstream_token_got_on_one_replica_is_used_and_refreshed_for_all(
        procs: list[Proc], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`auth: per_user` with `cluster:`: alice authorizes once, through r1 (URL elicitation); her browser brings
    the answer to r2, as a load balancer may, which forwards it to r1, where her authorization waits. r2 then
    calls with the same upstream token (same `jti`) without asking her. When the token is due, r2 refreshes it;
    r1, holding the old one, takes up r2's refreshed token from Redis instead of refreshing itself (same new
    `jti`). bob's `triad login --client bob` also keeps his tokens in Redis, where r2 finds them. Redis holds the
    tokens encrypted only; no per-user token file is written. (Both replicas have one
    `listen.public_url`, as behind a load balancer: the registration r1 made is valid for r2's refresh too.)"""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from consumers.oauth._lifetime import refresh_lead
    from gateway.cluster import Cluster
    from gateway.cluster._vault_tokens import VaultTokens
    from gateway.config._models import ClusterConfig
    from tests.test_oauth_upstream import Protected, follow_to, whoami

    env = TriadCluster(procs, tmp_path, replicas=2)
    env.start_redis()
    monkeypatch.setenv("TRIAD_CLUSTER_KEY", CLUSTER_KEY)
    monkeypatch.setenv("TRIAD_REPLICA_ID", "login")
    cluster = {"redis": f"redis://127.0.0.1:{env.redis_port}/0", "replica_id": "${TRIAD_REPLICA_ID}",
               "secret_key": "${TRIAD_CLUSTER_KEY}", "heartbeat": "0.3s"}
    ttl = 25  # due 20 s after it is issued
    assert ttl - refresh_lead(ttl) == 20
    protected = Protected(procs, tmp_path, ttl=ttl, auth={"mode": "per_user"}, cluster=cluster,
                          clients={name: {"token": TOKENS[name]} for name in ("alice", "bob", "ops")},
                          listen={"public_url": f"http://127.0.0.1:{env.ports['r1']}",  # one for all replicas
                                  **({} if DIRECT_PATH else {"direct_path": False})})
    protected.login(account="triad-service")  # Triad's own credential (the catalog), in its file
    env.config_path = protected.config
    for name in env.ports:
        env.start_replica(name).wait_for(r"upstream up ready")
    r1, r2 = (env.replica_url(name) for name in env.ports)
    wait_until(lambda: "r1" in env.cluster_view("r2")["replicas"], "r2 to know where r1 is")

    async def open_link(_ctx: Any, params: Any) -> Any:
        answer = await follow_to(params.url, r1.removesuffix("/mcp") + "/oauth/callback/up", "alice")
        assert "state=r1." in answer
        async with http_for("alice") as http:  # her browser: here with her token, which changes nothing
            landing = await http.get(answer.replace(r1.removesuffix("/mcp"), r2.removesuffix("/mcp")))
            assert landing.status_code == 200, landing.text
        return types.ElicitResult(action="accept")

    async with http_for("alice") as http, streamable_http_client(r1, http_client=http) as (read, write), \
            ClientSession(read, write, elicitation_callback=open_link) as session:
        await session.initialize()
        first = await session.call_tool("whoami", {})
    subject, first_jti = first.content[0].text.split()[:2]
    assert subject == "alice"
    assert (await whoami(r2, TOKENS["alice"])).split()[:2] == ["alice", first_jti]  # r2 was never asked

    settings = ClusterConfig(redis=cluster["redis"], replica_id="test", secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    reader = Cluster(settings)
    async with reader.running(heartbeat=False):
        stored = VaultTokens(reader.vault, "alice", "up")
        tokens = await stored.get_tokens()
        assert tokens is not None and stored.expires_at is not None
        values = [await reader.link.client.get(key) for key in await reader.link.client.keys("triad:secret:*")]
        assert values and not any(tokens.access_token.encode() in value for value in values)
        await anyio.sleep(max(0.0, stored.expires_at - refresh_lead(ttl) - time.time()) + 0.5)  # the token is due
        refreshed_by_r2 = (await whoami(r2, TOKENS["alice"])).split()[:2]
        assert refreshed_by_r2[0] == "alice" and refreshed_by_r2[1] != first_jti
        assert (await stored.get_tokens()) is not None and stored.expires_at > time.time() + refresh_lead(ttl)
    assert (await whoami(r1, TOKENS["alice"])).split()[:2] == refreshed_by_r2  # r1 took up r2's refresh
    protected.login("bob", account="bob")  # `triad login --client bob` keeps bob's tokens in Redis too
    assert (await whoami(r2, TOKENS["bob"])).split()[0] == "bob"
    assert not (tmp_path / "triad.tokens" / "up.users").exists()


async def test_rate_limit_buckets_in_redis_name_no_client_and_no_tool(procs: list[Proc], tmp_path: Path) -> None:
    """A bucket's Redis key is a keyed hash of what it counts (README: client ids never appear in Redis), and two
    replicas with the same cluster key still count in the same bucket."""
    from gateway.cluster import Cluster
    from gateway.config._models import ClusterConfig

    env = TriadCluster(procs, tmp_path)
    env.start_redis()
    settings = ClusterConfig(redis=f"redis://127.0.0.1:{env.redis_port}/0", replica_id="r1",
                             secret_key=CLUSTER_KEY)  # type: ignore[arg-type]
    first, second = Cluster(settings), Cluster(settings.model_copy(update={"replica_id": "r2"}))
    async with first.running(heartbeat=False), second.running(heartbeat=False):
        key = "client:alice-of-accounting:2/m"
        taken = [await replica.buckets().take(key, 2, 2 / 60) is None for replica in (first, second, first)]
        assert taken == [True, True, False]
        await first.buckets().take("tool:payroll_export:9/m", 9, 9 / 60)
        keys = await first.link.client.keys("*")
        assert keys and not [k for k in keys if b"alice-of-accounting" in k or b"payroll_export" in k], keys


async def test_a_modern_task_is_served_on_every_replica(procs: list[Proc], tmp_path: Path) -> None:
    """A 2026-07-28 task is in the book of the replica that adopted it, whose id its Triad id names: a `tasks/*`
    request landing on another replica is forwarded there, for its owner only."""
    cluster = TriadCluster(procs, tmp_path, replicas=2, upstream=CONFORMANCE).start()
    wait_until(lambda: "r1" in cluster.cluster_view("r2")["replicas"], "r2 to see r1")
    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}

    async def ask(http: Any, replica: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": envelope}})
        headers = modern_headers(method, params.get("taskId") or params.get("name"))
        return answer_of(await modern_post(http, cluster.replica_url(replica), body, headers))

    async with http_for("alice") as alice, http_for("bob") as bob:
        created = await ask(alice, "r1", "tools/call", {"name": "slow_compute",
                                                        "arguments": {"seconds": 60, "label": "x"}})
        task_id = created["result"]["taskId"]
        assert task_id.startswith("triad-task:r1."), created
        assert (await ask(alice, "r2", "tasks/get", {"taskId": task_id}))["result"]["status"] == "working"
        assert (await ask(bob, "r2", "tasks/get", {"taskId": task_id}))["error"]["code"] == -32602
        assert "result" in await ask(alice, "r2", "tasks/cancel", {"taskId": task_id})
        assert (await ask(alice, "r2", "tasks/get", {"taskId": task_id}))["result"]["status"] == "cancelled"
    assert "forwarded a request to replica" in cluster.replicas["r2"].stderr
