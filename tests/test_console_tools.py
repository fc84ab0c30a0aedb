"""The console's Calls page shows denied calls with the layer that denied them, each tool's full definition is one
click from the registry, and long tables have a filter box (issue 31, point 12). Driven in Chromium, as
tests/test_console.py, against one `triad serve` for the module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.conftest import Proc, stdio_upstream
from tests.raw_clients import call
from tests.test_console import (
    AGENT_TOKEN,
    DEV_TOKEN,
    browser,
    clients,
    mcp_answer,
    rows,
    screenshot,
    sign_in,
    start_console,
)
from tests.test_console import wait_for as wait_until

__all__ = ["browser"]  # the module-scoped Chromium of tests/test_console.py

DESCRIPTION = "Echo the text. <b>Not markup</b>: shown as written, every line.\nSecond line."


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs: list[Proc] = []
    config = {"upstreams": {"fx": stdio_upstream("console-tools", "--echo-description", DESCRIPTION)},
              "clients": clients(), "policy": {"agents": {"coder": {"deny": ["*echo*"]}}}}
    try:
        found, _ = start_console(procs, tmp_path_factory.mktemp("console-tools"), config)
        yield found
    finally:
        for proc in reversed(procs):
            proc.terminate()


def shown_rows(browser: WebDriver, table: str) -> list[str]:
    return [row.find_element(By.TAG_NAME, "td").text if row.find_elements(By.TAG_NAME, "td") else ""
            for row in browser.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr") if row.is_displayed()]


def test_a_denied_call_is_on_the_calls_page_with_the_layer_that_denied_it(browser: WebDriver, base: str) -> None:
    assert "error" in mcp_answer(base, DEV_TOKEN, call(1, "echo", {"text": "swordfish-77"}))
    assert "result" in mcp_answer(base, AGENT_TOKEN, call(1, "echo", {"text": "fine"}))
    sign_in(browser, base)
    wait_until(browser, lambda b: b.current_url.endswith("/console/upstreams"))
    browser.get(f"{base}/console/calls")
    found = wait_until(browser, lambda b: [r for r in rows(b, "recent") if "denied" in r] or None)
    [denied] = found
    assert denied[1:5] == ["tool", "echo", "dev", "fx"] and denied[6:] == ["denied", "policy: agent (*echo*)"]
    assert [r[6] for r in rows(browser, "recent") if r[3] == "agent1"] == ["ok"]
    assert "swordfish-77" not in browser.page_source  # names only, never arguments
    screenshot(browser, "calls-denied")


def test_a_tools_full_definition_is_one_click_from_the_registry(browser: WebDriver, base: str) -> None:
    listed = {t["name"]: t for t in mcp_answer(base, AGENT_TOKEN,
                                               {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})["result"]["tools"]}
    sign_in(browser, base)
    wait_until(browser, lambda b: b.current_url.endswith("/console/upstreams"))
    browser.get(f"{base}/console/registry")
    browser.find_element(By.XPATH, "//table[@id='all-tools']//a[text()='echo']").click()
    wait_until(browser, lambda b: "/console/tool" in b.current_url)
    assert browser.find_element(By.ID, "tool-name").text == "echo"
    assert browser.find_element(By.ID, "tool-description").get_attribute("textContent") == DESCRIPTION
    for key in ("inputSchema", "annotations"):
        assert json.loads(browser.find_element(By.ID, f"tool-{key}").get_attribute("textContent") or "") == \
            listed["echo"][key]
    assert json.loads(browser.find_element(By.ID, "tool-whole").get_attribute("textContent") or "") == \
        listed["echo"]  # exactly what clients are served
    screenshot(browser, "tool-definition")
    browser.get(f"{base}/console/tool?name=structured")
    assert json.loads(browser.find_element(By.ID, "tool-outputSchema").get_attribute("textContent") or "") == \
        listed["structured"]["outputSchema"]


@pytest.mark.parametrize(("page", "table", "text"), [("registry", "all-tools", "PROG"), ("registry", "visible", "ie"),
                                                     ("calls", "recent", "denied")])
def test_a_filter_box_keeps_the_rows_that_hold_its_text(browser: WebDriver, base: str, page: str, table: str,
                                                        text: str) -> None:
    mcp_answer(base, DEV_TOKEN, call(1, "echo", {"text": "x"}))  # a denied call for the Calls page
    sign_in(browser, base)
    wait_until(browser, lambda b: b.current_url.endswith("/console/upstreams"))
    browser.get(f"{base}/console/{page}")
    every = [row[0] for row in rows(browser, table)]
    box = browser.find_element(By.CSS_SELECTOR, f"input.filter[data-filter='{table}']")
    box.send_keys(text)
    kept = [row for row in rows(browser, table) if text.lower() in " ".join(row).lower()]
    assert kept and len(kept) < len(every)
    wait_until(browser, lambda b: len(shown_rows(b, table)) == len(kept))
    assert shown_rows(browser, table) == [row[0] for row in kept]
    box.clear()
    box.send_keys(" ")  # an empty filter shows every row again
    wait_until(browser, lambda b: len(shown_rows(b, table)) == len(every))
