"""The demo page at GET / (issue 12), in a real browser: Debian's chromium + chromedriver, driven by selenium,
headless, with a fresh profile and nothing that reaches the network.  The server is the real one, with the sample
vault ingested and the fake LLM; a screenshot of each run is kept in tests/artifacts/ (gitignored)."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import urllib.parse
from pathlib import Path

import pytest

import localrag
from conftest import ROOT

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (test extra) is not installed")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="the browser tests need Debian's chromium and chromium-driver "
                                       "(`apt-get install -y chromium chromium-driver`; `make test` does it as root)")
ARTIFACTS = ROOT / "tests" / "artifacts"
QUESTION = "客户 P1 工单应该怎么升级？"


@contextlib.contextmanager
def server(config):
    srv = localrag.make_server(config, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.close_idle_connections()   # the browser keeps connections alive; do not wait out their timeout
        srv.server_close()
        srv.api.pool.close()
        thread.join(10)


@pytest.fixture
def browser(tmp_path):
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    os.environ["SE_OFFLINE"] = "true"   # Selenium Manager must not look for drivers online
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def wait_state(driver, panel: str, states=("done", "error", "auth"), timeout: float = 30) -> str:
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(driver, timeout).until(
        lambda d: d.find_element("id", panel).get_attribute("data-state") in states)
    return driver.find_element("id", panel).get_attribute("data-state")


def screenshot(driver, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def own_origin_only(driver, base: str) -> None:
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    origin = urllib.parse.urlsplit(base)
    for url in urls:
        parts = urllib.parse.urlsplit(url)
        assert (parts.scheme, parts.netloc) == (origin.scheme, origin.netloc), url


def test_streamed_answer_citations_and_search(ingested, browser):
    config, _, _ = ingested
    with server(config) as base:
        browser.get(base + "/")
        assert browser.title == "localrag"
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done", browser.find_element("css selector", "#ask .status").text
        expected = localrag.ask(config, QUESTION)
        assert browser.find_element("id", "answer").text.strip() == expected["answer"].strip()
        assert browser.find_element("id", "mode").text == "rag"
        assert "threshold" in browser.find_element("id", "reason").text
        cites = browser.find_elements("css selector", "#citations details.evidence")
        assert len(cites) == len(expected["citations"]) > 0
        first = expected["citations"][0]
        summary = cites[0].find_element("css selector", "summary").text
        assert first["source"] in summary and first["heading"] in summary and f"{first['score']:.4f}" in summary
        evidence = cites[0].find_element("css selector", "pre.content")
        assert not evidence.is_displayed()
        cites[0].find_element("css selector", "summary").click()
        assert evidence.is_displayed() and evidence.text.strip()[:30] == first["content"].strip()[:30]
        screenshot(browser, "ask")
        # the search tab
        browser.find_element("css selector", "nav button[data-panel=search]").click()
        browser.find_element("id", "query").send_keys("P1 工单升级")
        browser.find_element("id", "search-button").click()
        assert wait_state(browser, "search") == "done"
        results = browser.find_elements("css selector", "#results details.evidence")
        assert len(results) == 5
        screenshot(browser, "search")
        own_origin_only(browser, base)
        logs = browser.get_log("browser") if hasattr(browser, "get_log") else []
        assert not [e for e in logs if "Content Security Policy" in e.get("message", "")], logs


def test_no_answer_and_the_token_prompt(ingested, browser, monkeypatch):
    monkeypatch.setenv("LOCALRAG_API_TOKEN", "page-token-5678")
    config = localrag.load_config()
    with server(config) as base:
        browser.get(base + "/")
        browser.find_element("id", "question").send_keys("今天上海天气如何？")
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "auth"
        box = browser.find_element("id", "token-box")
        assert box.is_displayed()
        browser.find_element("id", "token").send_keys("page-token-5678")
        browser.find_element("css selector", "#token-form button").click()
        assert wait_state(browser, "ask", ("done", "error")) == "done"
        assert not box.is_displayed()
        assert browser.find_element("id", "mode").text == "no_answer"
        assert browser.find_element("id", "answer").text.strip() == localrag.NO_ANSWER_TEXT.strip()
        screenshot(browser, "no-answer-with-token")
        # a wrong token is asked for again
        browser.execute_script("sessionStorage.setItem('localrag-token', 'wrong'); location.reload()")
        browser.find_element("id", "question").send_keys("P1")
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "auth"
        own_origin_only(browser, base)
