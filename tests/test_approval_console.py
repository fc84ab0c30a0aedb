"""Approval in the console (`ask: console`): a call waits in the queue, live on the approvers' page, while its
caller gets progress notifications; an approver (a listed client who is not an owner) approves or denies it with
a reason, in Chromium. The upstream logs its calls (`--log-calls`): a denied call never reached it."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import anyio
import httpx2
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.conftest import Proc, start_fixture
from tests.test_console import AGENT_TOKEN, browser, clients, screenshot, sign_in, start_console, wait_for
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
