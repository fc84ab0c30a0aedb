"""Approval in the console (`ask: console`, and `caller_then_console` for a client that cannot be asked): a call
waits in the queue, live on the approvers' page, while its caller gets progress notifications; an approver (a
listed client who is not an owner) approves or denies it with a reason, in Chromium. The upstream logs its calls
(`--log-calls`): a denied call never reached it."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
import redis
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.cluster_env import wait_until
from tests.conftest import Proc, start_fixture
from tests.test_console import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    browser,
    clients,
    screenshot,
    sign_in,
    start_console,
    wait_for,
)
from tests.test_policy_e2e import session_as

__all__ = ["browser"]  # the module-scoped Chromium fixture, shared with the console's own tests

OPS_TOKEN = "ops-token-93b1c7e2"


class Caller(threading.Thread):
    """A client (agent1) calling `structured` in a thread of its own, with progress: the browser drives the
    approver meanwhile."""

    def __init__(self, url: str, n: int) -> None:
        super().__init__(daemon=True)
        self.url, self.n = url, n
        self.progress: list[str] = []
        self.waiting = threading.Event()
        self.result: Any = None

    def run(self) -> None:
        async def main() -> None:
            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                self.progress.append(message or "")
                self.waiting.set()

            async with session_as(self.url, AGENT_TOKEN) as session:
                self.result = await session.call_tool("structured", {"n": self.n}, progress_callback=on_progress)

        anyio.run(main)


def answer_in_browser(browser: WebDriver, decision: str, reason: str) -> None:
    section = wait_for(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "section.approval"))[0]
    assert "structured" in section.text and "agent1" in section.text and "destructive" in section.text
    browser.find_element(By.CSS_SELECTOR, "section.approval input.reason").send_keys(reason)
    browser.find_element(By.CSS_SELECTOR, f"section.approval button.{decision}").click()
    wait_for(browser, lambda b: b.find_elements(By.ID, "answered"))


def test_an_approver_answers_waiting_calls_in_the_console(browser: WebDriver, procs: list[Proc],
                                                          tmp_path: Path) -> None:
    upstream_url = start_fixture(procs, "http", "approval-console", "--log-calls")
    upstream = procs[-1]
    audit = tmp_path / "audit.jsonl"
    base, _ = start_console(procs, tmp_path, {
        "upstreams": {"fx": {"url": upstream_url}},
        "clients": {**clients(), "ops": {"token": OPS_TOKEN}},
        "approval": {"approvers": ["ops"], "rules": [{"tools": ["structured"], "ask": "console", "timeout": "60s"}]},
        "hooks": [{"audit": {"path": str(audit)}}]})
    sign_in(browser, base, OPS_TOKEN)
    wait_for(browser, lambda b: b.current_url.endswith("/console/approvals"))
    assert browser.find_elements(By.ID, "no-approvals")

    first = Caller(f"{base}/mcp", 3)
    first.start()
    assert first.waiting.wait(60), "no progress notification while the call waited"
    assert "waiting for an approver" in first.progress[0]
    # a form without the session's CSRF token is refused, and the call goes on waiting
    cookie = browser.get_cookie("triad_console")
    assert cookie is not None
    waiting = re.search(r'name="id" value="([^"]+)"', httpx2.get(f"{base}/console/approvals",
                                                                 cookies={"triad_console": cookie["value"]}).text)
    assert waiting is not None
    forged = httpx2.post(f"{base}/console/approvals/answer", cookies={"triad_console": cookie["value"]},
                         headers={"Origin": base}, data={"id": waiting.group(1), "decision": "approve", "csrf": "x"})
    assert forged.status_code == 403 and first.is_alive()
    screenshot(browser, "approvals")
    answer_in_browser(browser, "approve", "looks fine")
    first.join(60)
    assert first.result.structured_content == {"double": 6}

    second = Caller(f"{base}/mcp", 4)
    second.start()
    answer_in_browser(browser, "deny", "not today")  # the page is live: the new call shows up by itself
    second.join(60)
    assert second.result.is_error is True
    assert "approver ops denied it: not today" in second.result.content[0].text

    assert len(re.findall(r"^CALL structured$", upstream.stderr, re.M)) == 1  # both answered: the denied never went
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    decided = [(r["outcome"], r.get("approved_by") or r.get("answered_by"), r["reason"]) for r in records
               if r["decision"] == "approval"]
    assert decided == [("approved", "console:ops", "looks fine"), ("denied", "console:ops", "not today")]
    browser.get(f"{base}/console/upstreams")  # an approver who is not an owner sees the queue only
    assert "only owners may use this page" in browser.page_source


def signed_in(base: str, token: str) -> httpx2.Client:
    """An HTTP client signed in to the console at `base` with `token` (its cookie kept), sending forms as the
    console's own page would (same Origin)."""
    http = httpx2.Client(base_url=base, headers={"Origin": base}, timeout=10)
    signed = http.post("/console/login", data={"token": token})
    assert signed.status_code == 303, signed.text
    return http


def answer(http: httpx2.Client, decision: str, reason: str, forge_in: int | None = None) -> None:
    """Answer the call waiting in `http`'s console; with `forge_in` (Redis's port), first write an approval into
    Redis as someone without the cluster key would, and see the waiting replica read it and not take it."""
    def waiting() -> str | None:
        text = http.get("/console/approvals").text
        return text if 'name="id"' in text else None

    page = wait_until(waiting, "the waiting call in the other replica's console")
    assert "structured" in page
    found = re.search(r'name="id" value="([^"]+)"', page)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None and csrf is not None
    if forge_in is not None:
        forged = redis.Redis(port=forge_in)
        key = f"triad:approval-answer:{found.group(1)}"
        forged.rpush(key, json.dumps({"v": 1, "kid": "x", "body": '{"approved":true,"by":"ops","reason":""}',
                                      "mac": "0" * 64}))
        wait_until(lambda: forged.llen(key) == 0, "the waiting replica to read the forged answer")
        assert found.group(1) in http.get("/console/approvals").text  # not taken: the call still waits
        forged.close()
    done = http.post("/console/approvals/answer", data={"id": found.group(1), "decision": decision,
                                                        "reason": reason, "csrf": csrf.group(1)})
    assert done.status_code == 303, done.text
    # the call is claimed: answering it again (from any replica) is refused
    again = http.post("/console/approvals/answer", data={"id": found.group(1), "decision": "approve",
                                                         "reason": "", "csrf": csrf.group(1)})
    assert again.status_code == 403 and "not waiting any more" in again.text


@pytest.mark.parametrize("elicits", [False, True])
def test_caller_then_console_asks_the_console_only_for_a_client_that_cannot_be_asked(
        procs: list[Proc], tmp_path: Path, elicits: bool) -> None:
    upstream_url = start_fixture(procs, "http", "approval-fallback", "--log-calls")
    base, _ = start_console(procs, tmp_path, {
        "upstreams": {"fx": {"url": upstream_url}}, "clients": clients(),
        "approval": {"rules": [{"tools": ["structured"], "ask": "caller_then_console", "timeout": "60s"}]}})
    asked: list[str] = []

    async def elicitation(_ctx: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept")

    async def main() -> Any:
        async with session_as(f"{base}/mcp", AGENT_TOKEN, **({"elicitation_callback": elicitation} if elicits
                                                              else {})) as session:
            return await session.call_tool("structured", {"n": 7})

    http = signed_in(base, ADMIN_TOKEN)
    if elicits:
        result = anyio.run(main)
        assert len(asked) == 1
    else:
        async def with_approver() -> Any:  # the caller waits in the console's queue; the approver answers there
            outcome: list[Any] = []

            async def call() -> None:
                outcome.append(await main())

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.to_thread.run_sync(answer, http, "approve", "ok")
            return outcome[0]

        result = anyio.run(with_approver)
    assert result.structured_content == {"double": 14}
    assert "No call is waiting" in http.get("/console/approvals").text
    http.close()
