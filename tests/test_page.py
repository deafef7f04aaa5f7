"""The demo page at GET / (issue 12), in a real browser: Debian's chromium + chromedriver, driven by selenium,
headless, with a fresh profile and nothing that reaches the network.  The server is the real one, with the sample
vault ingested and the fake LLM; a screenshot of each run is kept in tests/artifacts/ (gitignored)."""

from __future__ import annotations

import os
import re
import shutil
import time
import urllib.parse

import pytest

import localrag
from conftest import ROOT, serving
from llm_stub import ChatStub

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium (test extra) is not installed")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                reason="the browser tests need Debian's chromium and chromium-driver "
                                       "(`apt-get install -y chromium chromium-driver`; `make test` does it as root)")
ARTIFACTS = ROOT / "tests" / "artifacts"
QUESTION = "客户 P1 工单应该怎么升级？"


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


def test_answer_markdown_is_shown_as_code_and_text_only(ingested, browser):
    """An answer's fenced block is a <pre>, its `inline code` a <code>, and nothing in it becomes markup: the
    backticks and fences of the Markdown are not shown as characters."""
    config, _, _ = ingested
    question = "慢查询怎么排查？"
    expected = localrag.ask(config, question)["answer"]
    assert "```" in expected and "`pg_stat_statements`" in expected    # the sample runbook's SQL and its name
    with serving(config) as base:
        browser.get(base + "/")
        browser.find_element("id", "question").send_keys(question)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        box = browser.find_element("id", "answer")
        blocks = box.find_elements("css selector", "pre.answer-code")
        assert blocks and "select query, calls" in blocks[0].text
        assert "pg_stat_statements" in [c.text for c in box.find_elements("css selector", "div.answer-line code")]
        assert "`" not in box.text
        assert {e.tag_name for e in box.find_elements("css selector", "*")} == {"div", "pre", "code"}
        screenshot(browser, "answer-with-code")
        # a line that only starts with $$ is text, not a math block that swallows the rest of the answer
        shown = browser.execute_script(
            "const b = document.createElement('div'); renderAnswer(b, arguments[0]); "
            "return [b.querySelectorAll('pre').length, b.textContent];",
            "$$ starts a display math block. [1]\nNext sentence. [1]\n$$\nE = mc^2\n$$\n[1]")
        assert shown[0] == 1 and "$$ starts a display math block. [1]" in shown[1] and "Next sentence." in shown[1]


def test_streamed_answer_citations_and_search(ingested, browser):
    config, _, _ = ingested
    with serving(config) as base:
        browser.get(base + "/")
        assert browser.title == "localrag"
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done", browser.find_element("css selector", "#ask .status").text
        expected = localrag.ask(config, QUESTION)
        shown = re.sub(r"`([^`]+)`", r"\1", expected["answer"])     # code marks are drawn, not shown
        assert browser.find_element("id", "answer").text.strip() == shown.strip()
        assert browser.find_element("id", "mode").text == "rag"
        assert "threshold" in browser.find_element("id", "reason").text
        assert not browser.find_element("id", "warnings").is_displayed()     # a good answer carries no warning
        assert browser.find_element("id", "ask").get_attribute("data-answer") is None
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
    with serving(config) as base:
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


def test_a_misspelt_question_offers_the_corrected_one(ingested, browser):
    """A refusal caused by a typo shows "Did you mean"; clicking the offered question asks it."""
    config, _, _ = ingested
    with serving(config) as base:
        browser.get(base + "/")
        assert not browser.find_element("id", "suggestion").is_displayed()
        browser.find_element("id", "question").send_keys("What are the API latency alert threshlods?")
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        assert browser.find_element("id", "mode").text == "no_answer"
        offer = browser.find_element("id", "suggestion-question")
        assert offer.is_displayed() and offer.text == "What are the API latency alert thresholds?"
        closest = browser.find_elements("css selector", "#closest-list li .where")   # where to look, under the refusal
        assert closest[0].text == ("runbooks/API Latency Runbook.md › API 延迟处理手册 › 告警条件（Alert Thresholds） "
                                   "(shares: alert, api, latency)")
        assert all("(shares: " in li.text for li in closest) and len({li.text for li in closest}) == len(closest)
        # ... with the section itself a click away, as the CLI's open: line under each closest note
        show = browser.find_element("css selector", "#closest-list li button.show")
        assert show.text == "show the section" and show.get_attribute("aria-expanded") == "false"
        show.click()
        box = browser.find_element("id", show.get_attribute("aria-controls"))
        from selenium.webdriver.support.ui import WebDriverWait
        WebDriverWait(browser, 30).until(lambda d: box.get_attribute("data-state") == "done")
        assert "告警条件" in box.find_element("css selector", "pre.content").text
        assert box.find_element("css selector", "p.open code").text.startswith(
            "localrag show 'runbooks/API Latency Runbook.md#")
        screenshot(browser, "did-you-mean")
        offer.click()
        WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "mode").text == "rag")
        assert wait_state(browser, "ask") == "done"
        assert browser.find_element("id", "question").get_attribute("value") == \
            "What are the API latency alert thresholds?"
        assert not browser.find_element("id", "suggestion").is_displayed()
        assert not browser.find_element("id", "closest").is_displayed()


def test_refused_answer_becomes_a_confirmed_ticket(ingested, browser, monkeypatch):
    """Issue 16: after a no_answer, "Make a ticket" shows the rules' draft, editable; Save needs the checkbox; the
    Tickets tab lists the ticket and changes its status (kept as events with the token's fingerprint)."""
    from selenium.webdriver.support.ui import Select, WebDriverWait
    monkeypatch.setenv("LOCALRAG_API_TOKEN", "page-token-1234")
    config = localrag.load_config()
    with localrag.Store.open(config) as s:
        s.run("TRUNCATE tickets, ticket_events RESTART IDENTITY")
    question = "今天上海天气如何？"
    with serving(config) as base:
        browser.get(base + "/")
        browser.execute_script("sessionStorage.setItem('localrag-token', 'page-token-1234'); location.reload()")
        browser.find_element("id", "question").send_keys(question)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done" and browser.find_element("id", "mode").text == "no_answer"
        assert browser.find_element("id", "ticket-box").is_displayed()
        browser.find_element("id", "make-ticket").click()
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: d.find_element("id", "ticket-form").is_displayed())
        expected = localrag.ticket_draft(config, question)
        title = browser.find_element("id", "ticket-title")
        assert title.get_attribute("value") == expected["title"]
        assert browser.find_element("id", "ticket-category").get_attribute("value") == expected["category"]
        description = browser.find_element("id", "ticket-description").get_attribute("value")
        assert question in description and "no_answer" in description and "no model" in description
        assert "rules, not a model" in browser.find_element("id", "ticket-made-by").text
        save = browser.find_element("id", "ticket-save")
        assert not save.is_enabled()                         # no confirmation, no Save
        with localrag.Store.open(config) as s:
            assert s.run("SELECT count(*) FROM tickets")[0][0] == 0   # drafting stored nothing
        title.clear()
        title.send_keys("Weather questions are out of scope")
        browser.find_element("id", "ticket-confirm").click()
        assert save.is_enabled()
        save.click()
        wait.until(lambda d: d.find_element("id", "ticket-status").text.startswith("saved ticket #1"))
        assert not browser.find_element("id", "make-ticket").is_enabled()   # one ticket per refusal
        screenshot(browser, "ticket-saved")
        ticket = localrag.ticket_show(config, 1)
        assert ticket["title"] == "Weather questions are out of scope" and ticket["question"] == question
        assert ticket["answer_id"] and ticket["draft"]["mode"] == "no_answer"
        fingerprint = localrag.token_fingerprint("page-token-1234")
        assert [(e["actor"], e["token_fingerprint"], e["new_status"]) for e in ticket["events"]] == [
            ("http", fingerprint, "open")]
        # the Tickets tab: the list with status, and a status change
        browser.find_element("css selector", "nav button[data-panel=tickets]").click()
        assert wait_state(browser, "tickets") == "done"
        rows = browser.find_elements("css selector", "#ticket-rows tr")
        assert len(rows) == 1 and "Weather questions are out of scope" in rows[0].text
        Select(rows[0].find_element("css selector", "select.ticket-status")).select_by_value("resolved")
        wait.until(lambda d: localrag.ticket_show(config, 1)["status"] == "resolved")
        assert wait_state(browser, "tickets") == "done"
        screenshot(browser, "tickets")
        events = localrag.ticket_show(config, 1)["events"]
        assert [(e["old_status"], e["new_status"], e["token_fingerprint"]) for e in events[1:]] == [
            ("open", "resolved", fingerprint)]
        # an answered question offers no ticket
        browser.find_element("css selector", "nav button[data-panel=ask]").click()
        browser.find_element("id", "question").clear()
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done" and browser.find_element("id", "mode").text == "rag"
        assert not browser.find_element("id", "ticket-box").is_displayed()
        own_origin_only(browser, base)
        logs = browser.get_log("browser") if hasattr(browser, "get_log") else []
        assert not [e for e in logs if "Content Security Policy" in e.get("message", "")], logs


@pytest.fixture
def chat_llm(ingested, monkeypatch):
    """The sample vault ingested and the LLM an OpenAI-compatible stub (tests/llm_stub.py): (config, stub)."""
    with ChatStub() as stub:
        for key, value in {"LLM_PROVIDER": "openai-compatible", "LLM_BASE_URL": stub.root + "/v1/",
                           "LLM_API_KEY": "sk-page-test", "LLM_MODEL": "stub-model",
                           "LLM_TIMEOUT_SECONDS": "30"}.items():
            monkeypatch.setenv(key, value)
        yield localrag.load_config(), stub


def answer_text(driver) -> str:
    return driver.find_element("id", "answer").text


def test_a_new_question_replaces_an_answer_still_streaming(chat_llm, browser):
    """Asking again while an answer streams aborts that stream: none of its deltas, nor its final event, reach the
    new question's answer (they had interleaved, and the slower `done` had won)."""
    from selenium.webdriver.support.ui import WebDriverWait
    config, stub = chat_llm
    stub.scenario, stub.piece_delay, stub.answer = "slow_stream", 0.25, "FIRST " * 14 + "[1]"   # 13 deltas, ~3 s
    with serving(config) as base:
        browser.get(base + "/")
        box = browser.find_element("id", "question")
        box.send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        WebDriverWait(browser, 30).until(lambda d: "FIRST" in answer_text(d))     # the first answer is streaming
        stub.scenario, stub.answer = "ok", "SECOND: P1 工单必须在 15 分钟内由一线确认并升级。 [1]"
        box.clear()
        box.send_keys("P1 工单多久内要升级？")
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        assert answer_text(browser).startswith("SECOND")
        time.sleep(13 * 0.25 + 1)          # the first stream would have ended by now, its `done` sent
        assert wait_state(browser, "ask") == "done"
        assert "FIRST" not in answer_text(browser) and answer_text(browser).startswith("SECOND")
        assert "FIRST" not in browser.find_element("id", "citations").text
        assert browser.find_element("id", "question").get_attribute("value") == "P1 工单多久内要升级？"
        assert len(stub.requests) == 2
        screenshot(browser, "ask-again-while-streaming")


def test_answers_the_cli_warns_about_are_marked(chat_llm, browser):
    """A cut-off, refused, wrongly cited or unsupported answer shows the CLI's warning over it (it had looked like
    a good one: green badge, "done"); a stream that breaks marks the partial answer as failed."""
    config, stub = chat_llm
    cases = [("length", "P1 工单必须在 15", "incomplete", "warning: the answer is incomplete (finish_reason length)"),
             ("refusal", "", "refused", "warning: the answer is refused (finish_reason"),
             ("ok", "P1 工单必须在 15 分钟内升级。 [99]", "citation",
              "warning: the answer cites block(s) [99] that were not supplied"),
             ("ok", "The moon is made of green cheese and weighs 42 tonnes. [1]", "claim",
              "warning: claim not supported by block(s) [1]")]
    with serving(config) as base:
        browser.get(base + "/")
        box = browser.find_element("id", "question")
        for scenario, answer, kind, wording in cases:
            stub.scenario, stub.answer = scenario, answer
            box.clear()
            box.send_keys(QUESTION)
            browser.find_element("id", "ask-button").click()
            assert wait_state(browser, "ask") == "done", (scenario, answer)
            warnings = browser.find_elements("css selector", "#warnings p.warning")
            assert browser.find_element("id", "warnings").is_displayed(), (scenario, answer)
            shown = {w.get_attribute("data-kind"): w.text for w in warnings}
            assert kind in shown and shown[kind].startswith(wording), shown
            assert browser.find_element("id", "ask").get_attribute("data-answer") == "warned"
            assert "warning" in browser.find_element("css selector", "#ask .status").text
            screenshot(browser, f"warning-{kind}")
        # a stream cut mid-answer: the partial text is marked failed, not left looking like an answer
        stub.scenario, stub.answer = "no_done", "P1 工单必须在 15 分钟内由一线确认并升级。 [1]"
        box.clear()
        box.send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "error"
        assert browser.find_element("id", "ask").get_attribute("data-answer") == "failed"
        assert browser.find_element("id", "mode").text == "failed"
        errors = browser.find_elements("css selector", "#warnings p.warning[data-kind=error]")
        assert len(errors) == 1 and errors[0].is_displayed() and "incomplete, not an answer" in errors[0].text
        assert float(browser.find_element("id", "answer").value_of_css_property("opacity")) < 1
        screenshot(browser, "answer-failed")
        # the next good answer clears all of it
        stub.scenario = "ok"
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        assert browser.find_element("id", "ask").get_attribute("data-answer") is None
        assert not browser.find_element("id", "warnings").is_displayed()


def test_a_token_a_header_cannot_carry_is_refused_and_asked_for_again(ingested, browser, monkeypatch):
    """A token with a character outside Latin-1 (which fetch cannot put in a header) is refused when entered,
    dropped when found stored, and asked for again; a refused token says "wrong token"."""
    from selenium.webdriver.support.ui import WebDriverWait
    monkeypatch.setenv("LOCALRAG_API_TOKEN", "page-token-5678")
    config = localrag.load_config()
    stored = "return sessionStorage.getItem('localrag-token')"
    with serving(config) as base:
        browser.get(base + "/")
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "auth"
        token_box, message = browser.find_element("id", "token-box"), browser.find_element("id", "token-message")
        browser.find_element("id", "token").send_keys("tök-SENTINEL✓")
        browser.find_element("css selector", "#token-form button").click()
        assert token_box.is_displayed() and "✓" in message.text and "HTTP header" in message.text
        assert browser.execute_script(stored) is None
        assert browser.find_element("id", "ask").get_attribute("data-state") == "auth"
        # one stored before (an older page) is dropped on load, and asked for
        browser.execute_script("sessionStorage.setItem('localrag-token', 'tök-SENTINEL✓'); location.reload()")
        token_box, message = browser.find_element("id", "token-box"), browser.find_element("id", "token-message")
        assert token_box.is_displayed() and "cannot be sent" in message.text
        assert browser.execute_script(stored) is None
        # one in use when a request is made: that fetch throws; the token is dropped and asked for again
        browser.execute_script("token = 'tök✓'; sessionStorage.setItem('localrag-token', token)")
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "auth"
        assert token_box.is_displayed() and "cannot be sent" in message.text
        assert browser.execute_script(stored) is None
        token = browser.find_element("id", "token")
        token.clear()
        token.send_keys("page-token-5678")
        browser.find_element("css selector", "#token-form button").click()
        assert wait_state(browser, "ask", ("done", "error")) == "done"
        assert not token_box.is_displayed() and browser.find_element("id", "mode").text == "rag"
        # a wrong (sendable) token: asked for again, saying it was refused
        browser.execute_script("sessionStorage.setItem('localrag-token', 'wrong'); location.reload()")
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "auth"
        message = browser.find_element("id", "token-message")
        assert browser.find_element("id", "token-box").is_displayed() and "wrong token" in message.text
        assert "wrong token" in browser.find_element("css selector", "#ask .status").text
        # the Search tab recovers the same way from a token it cannot send
        browser.find_element("css selector", "nav button[data-panel=search]").click()
        browser.execute_script("token = 'tök✓'")
        browser.find_element("id", "query").send_keys("P1 工单升级")
        browser.find_element("id", "search-button").click()
        assert wait_state(browser, "search") == "auth"
        WebDriverWait(browser, 5).until(lambda d: "cannot be sent" in d.find_element("id", "token-message").text)
        screenshot(browser, "token-cannot-be-sent")
        own_origin_only(browser, base)


# --- the ninth session's review (2026-12-02): keyboard, layout on a phone, citations, errors -------------------------

def page_state(driver) -> str:
    return driver.find_element("id", "ask").get_attribute("data-state")


def test_enter_asks_and_shift_enter_or_an_input_method_enter_does_not(ingested, browser):
    """Enter in the question box asks (it had only added a line break: the box is a textarea, and the question went
    nowhere until Ask was clicked); Shift+Enter still starts a line, and the Enter that picks a Chinese input
    method's candidate (isComposing) asks nothing."""
    from selenium.webdriver.common.keys import Keys
    config, _, _ = ingested
    with serving(config) as base:
        browser.get(base + "/")
        box = browser.find_element("id", "question")
        box.send_keys(QUESTION)
        box.send_keys(Keys.SHIFT, Keys.ENTER, Keys.NULL)
        assert box.get_attribute("value") == QUESTION + "\n" and page_state(browser) == "idle"
        box.send_keys(Keys.BACKSPACE)
        composing = browser.execute_script(
            "const e = new KeyboardEvent('keydown', {key: 'Enter', isComposing: true, bubbles: true, "
            "cancelable: true}); return arguments[0].dispatchEvent(e);", box)
        time.sleep(0.5)
        assert composing and page_state(browser) == "idle"       # not cancelled: the IME's Enter, not a question
        box.send_keys(Keys.ENTER)
        assert wait_state(browser, "ask") == "done" and browser.find_element("id", "mode").text == "rag"
        assert box.get_attribute("value") == QUESTION


def test_an_empty_question_or_query_is_refused_by_the_form():
    """An empty box is `required`: the browser says "fill out this field" in its own language (the Ask button had
    done nothing visible but move the focus)."""
    for field in ('<textarea id="question"', '<input id="query"'):
        tag = localrag.DEMO_PAGE_HTML.split(field, 1)[1].split(">", 1)[0]
        assert re.search(r"\srequired(\s|$)", tag), (field, tag)


def test_long_paths_and_urls_wrap_on_a_phone(ingested, browser):
    """A path or URL with no space in it (an answer quoting a log file, a deep folder in a citation, its evidence)
    wraps inside its box: at 390 px the page had grown to 739 px, and a phone showed it zoomed out or sideways."""
    config, _, _ = ingested
    long_path = "/var/log/escalation-bridge/" + "very/long/path/without/any/spaces/" * 4 + "bridge.log"
    item = {"n": 1, "source": "Customers/ACME_Corporation_International/Projects/2026/Very_Long_Folder_Name/"
                              "Quarterly_integration_runbook_for_the_escalation_bridge.md",
            "heading_path": ["Restarting_the_escalation_bridge_service_after_a_failover"], "score": 0.5,
            "line_start": 1, "line_end": 10, "vault_path": "/home/engineer/vaults/" + "x" * 80,
            "content": "The logs are at " + long_path + " and https://dashboard.example.internal/" + "y" * 90}
    with serving(config) as base:
        browser.set_window_size(390, 844)
        browser.get(base + "/")
        width = browser.execute_script("return window.innerWidth")
        assert width <= 420, width      # the window really is phone-sized
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        browser.execute_script(
            "renderAnswer(document.getElementById('answer'), 'The logs are at ' + arguments[1] + ' [1]');"
            "evidenceList(document.getElementById('citations'), [arguments[0]], '');"
            "document.querySelector('#citations details').open = true;", item, long_path)
        screenshot(browser, "phone-long-path")
        wide = browser.execute_script("return document.documentElement.scrollWidth")
        assert wide <= width, (wide, width)


def test_a_citation_shows_it_opens_and_names_its_vault(ingested, browser):
    """A citation's row shows a marker that it opens (its summary is a flex row, which drops the browser's own
    triangle: nothing said the row could be clicked), and the opened citation names its vault (two vaults can hold
    the same path; the CLI prints a vault: line)."""
    config, vault, _ = ingested
    before = "return getComputedStyle(arguments[0], '::before').content"
    with serving(config) as base:
        browser.get(base + "/")
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        summary = browser.find_element("css selector", "#citations details.evidence summary")
        assert browser.execute_script(before, summary) == '"\u25b8"'
        summary.click()
        assert browser.execute_script(before, summary) == '"\u25be"'
        shown = browser.find_element("css selector", "#citations details.evidence p.vault")
        assert shown.is_displayed() and shown.text == f"vault: {vault}"
        screenshot(browser, "citation-open")


def test_a_server_that_is_gone_is_named_and_leaves_no_stale_answer(ingested, browser):
    """The server stopped (the laptop's `serve` closed): the page says which server did not answer and what to
    check (it had said "error [network]: Failed to fetch"); the last answer's mode, box and citations are not left
    standing empty under the error (nor shown before the first question), and a failed search leaves no results of
    the query before it."""
    config, _, _ = ingested
    with serving(config) as base:
        browser.get(base + "/")
        assert not browser.find_element("id", "answer").is_displayed()     # nothing asked yet: no empty answer
        assert "mode" not in browser.find_element("id", "ask").text
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done" and browser.find_element("id", "answer").is_displayed()
        browser.find_element("css selector", "nav button[data-panel=search]").click()
        browser.find_element("id", "query").send_keys("P1 工单升级")
        browser.find_element("id", "search-button").click()
        assert wait_state(browser, "search") == "done"
        assert browser.find_elements("css selector", "#results details.evidence")
    browser.find_element("id", "search-button").click()
    assert wait_state(browser, "search") == "error"
    status = browser.find_element("css selector", "#search .status").text
    assert f"could not reach the localrag server at {base}" in status and "localrag serve" in status, status
    assert not browser.find_elements("css selector", "#results details.evidence")
    browser.find_element("css selector", "nav button[data-panel=ask]").click()
    browser.find_element("id", "ask-button").click()
    assert wait_state(browser, "ask", ("error",)) == "error"
    status = browser.find_element("css selector", "#ask .status").text
    assert f"could not reach the localrag server at {base}" in status, status
    assert not browser.find_element("id", "answer").is_displayed()
    assert not browser.find_element("id", "citations").is_displayed()
    screenshot(browser, "server-gone")


# --- the tenth session (2026-12-02): what the ninth session's review left -------------------------------------------

def test_the_ticket_draft_fields_use_the_width_of_a_phone(ingested, browser):
    """The draft's title, category and description each take the form's width (at 390 px they had sat at 209, 209
    and 170 px beside their labels, in a 309 px form: a description read some 15 characters a line)."""
    from selenium.webdriver.support.ui import WebDriverWait
    config, _, _ = ingested
    with serving(config) as base:
        browser.set_window_size(390, 844)
        browser.get(base + "/")
        assert browser.execute_script("return window.innerWidth") <= 420
        browser.find_element("id", "question").send_keys("今天上海天气如何？")
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done" and browser.find_element("id", "mode").text == "no_answer"
        browser.find_element("id", "make-ticket").click()
        WebDriverWait(browser, 30).until(lambda d: d.find_element("id", "ticket-form").is_displayed())
        widths = browser.execute_script(
            "const w = (id) => document.getElementById(id).getBoundingClientRect().width;"
            "return [w('ticket-form'), w('ticket-title'), w('ticket-category'), w('ticket-description')];")
        form = widths[0]
        assert all(field >= form - 1 for field in widths[1:]), widths
        assert browser.execute_script("return document.documentElement.scrollWidth") <= 390
        browser.execute_script("document.getElementById('ticket-form').scrollIntoView()")
        screenshot(browser, "phone-ticket-draft")


def test_a_busy_server_says_in_words_how_long_to_wait(chat_llm, browser, monkeypatch):
    """503 server_busy on the page says to wait 2 seconds and try again (it had said "send it again after
    Retry-After", a header the page's user never sees); the same seconds as the header."""
    import json
    import threading
    import urllib.request
    monkeypatch.setenv("LOCALRAG_MAX_REQUESTS", "1")
    monkeypatch.setenv("LOCALRAG_QUEUE_WAIT_SECONDS", "0")
    config, stub = localrag.load_config(), chat_llm[1]
    stub.scenario, stub.delay = "slow", 30          # the model holds the only slot until released
    with serving(config) as base:
        browser.get(base + "/")
        held = threading.Thread(target=lambda: urllib.request.urlopen(urllib.request.Request(
            base + "/ask", data=json.dumps({"question": QUESTION}).encode(),
            headers={"Content-Type": "application/json"}), timeout=60).read())
        held.start()
        try:
            deadline = time.monotonic() + 20
            while not stub.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stub.requests
            browser.find_element("id", "question").send_keys(QUESTION)
            browser.find_element("id", "ask-button").click()
            assert wait_state(browser, "ask") == "error"
            status = browser.find_element("css selector", "#ask .status").text
            assert status.startswith("error [server_busy]: the server is busy"), status
            assert f"wait {localrag.HTTP_BUSY_RETRY_AFTER_S} seconds and try again" in status, status
            assert "Retry-After" not in status, status
            screenshot(browser, "server-busy")
        finally:
            stub.release.set()
            held.join(60)


def test_a_citation_shows_what_localrag_show_prints(ingested, browser):
    """Each citation and search result has a "show" control (the CLI prints `open: localrag show …`): it fetches
    GET /notes for the cited section and shows its text, its lines and the command, as text only (a note's HTML is
    characters, never markup)."""
    from selenium.webdriver.support.ui import WebDriverWait
    config, vault, _ = ingested
    (vault / "notes").mkdir(exist_ok=True)
    (vault / "notes" / "Markup note.md").write_text(
        "# Markup zebra note\n\n## Zebra section\n\nThe zebra runbook says <img src=x onerror=\"window.pwned=1\"> "
        "and <script>window.pwned=2</script> and <b>bold</b>.\n", encoding="utf-8")
    assert localrag.ingest(config, vault)["status"] == "success"
    done = "return arguments[0].dataset.state"
    with serving(config) as base:
        browser.get(base + "/")
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        cited = localrag.ask(config, QUESTION)["citations"][0]
        first = browser.find_element("css selector", "#citations details.evidence")
        first.find_element("css selector", "summary").click()
        button = first.find_element("css selector", "button.show")
        assert button.is_displayed() and button.text == "show the section"
        assert button.get_attribute("aria-expanded") == "false"
        box = browser.find_element("id", button.get_attribute("aria-controls"))
        assert not box.is_displayed()
        button.click()
        WebDriverWait(browser, 30).until(lambda d: d.execute_script(done, box) in ("done", "error"))
        assert browser.execute_script(done, box) == "done", box.text
        assert button.get_attribute("aria-expanded") == "true" and box.is_displayed()
        note = localrag.get_note(config, cited["source"], "#".join(cited["heading_path"]), cited["vault_path"],
                                 line=cited["line_end"])
        assert box.find_element("css selector", "pre.content").text.strip() == note["content"].strip()
        assert box.find_element("css selector", "p.open code").text == note["open"]
        assert note["open"].startswith("localrag show ")
        assert f":{note['line_start']}-{note['line_end']}" in box.find_element("css selector", "p.where").text
        screenshot(browser, "citation-show")
        button.click()                                   # and closed again
        assert not box.is_displayed() and button.get_attribute("aria-expanded") == "false"
        # a search result's note, with HTML in it: shown as the characters it is
        browser.find_element("css selector", "nav button[data-panel=search]").click()
        browser.find_element("id", "query").send_keys("zebra runbook")
        browser.find_element("id", "search-button").click()
        assert wait_state(browser, "search") == "done"
        result = [r for r in browser.find_elements("css selector", "#results details.evidence")
                  if "Markup note" in r.text][0]
        result.find_element("css selector", "summary").click()
        button = result.find_element("css selector", "button.show")
        button.click()
        box = browser.find_element("id", button.get_attribute("aria-controls"))
        WebDriverWait(browser, 30).until(lambda d: d.execute_script(done, box) in ("done", "error"))
        assert browser.execute_script(done, box) == "done", box.text
        shown = box.find_element("css selector", "pre.content").text
        assert '<img src=x onerror="window.pwned=1">' in shown and "<script>window.pwned=2</script>" in shown
        assert not browser.find_elements("css selector", "#results img, #results script, #results b")
        assert browser.execute_script("return window.pwned") is None
        own_origin_only(browser, base)


def test_the_page_asks_for_no_favicon(ingested, browser, capfd):
    """The page carries its own icon (a data: URL its CSP allows), so the browser no longer asks the server for
    /favicon.ico on every load (a 404 in the server's log and the browser's console each time)."""
    config, _, _ = ingested
    with serving(config) as base:
        browser.get(base + "/")
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        time.sleep(1)                                    # a favicon is fetched after the load, in the background
    logged = capfd.readouterr().err
    assert "GET / 200" in logged and "/favicon.ico" not in logged, logged
    logs = browser.get_log("browser") if hasattr(browser, "get_log") else []
    assert not [e for e in logs if "favicon" in e.get("message", "") or "Content Security Policy" in
                e.get("message", "")], logs
    assert 'rel="icon" href="data:image/svg+xml,' in localrag.DEMO_PAGE_HTML


def test_the_tabs_are_tabs_to_assistive_technology_and_the_arrow_keys(ingested, browser):
    """WAI-ARIA tabs: a tablist of tabs, each naming its panel (aria-controls, and the panel its tab), one tab stop
    (the selected tab), arrow keys / Home / End move to a tab and select it (they had been plain buttons: a screen
    reader announced three buttons, and Tab stopped on each)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    config, _, _ = ingested
    focused = "return document.activeElement.id"
    with serving(config) as base:
        browser.get(base + "/")
        nav = browser.find_element("css selector", "nav")
        assert nav.get_attribute("role") == "tablist"
        tabs = nav.find_elements("css selector", "button")
        assert [t.get_attribute("role") for t in tabs] == ["tab"] * 3
        for tab in tabs:
            panel = browser.find_element("id", tab.get_attribute("aria-controls"))
            assert panel.get_attribute("role") == "tabpanel" and panel.get_attribute("aria-labelledby") == \
                tab.get_attribute("id") and panel.get_attribute("id") == tab.get_attribute("data-panel")

        def selected():
            return ([t.get_attribute("aria-selected") == "true" for t in tabs],
                    [t.get_attribute("tabindex") for t in tabs])

        assert selected() == ([True, False, False], ["0", "-1", "-1"])
        ActionChains(browser).send_keys(Keys.TAB).perform()   # the first stop: the selected tab; the next: the question
        assert browser.execute_script(focused) == "tab-ask"
        ActionChains(browser).send_keys(Keys.TAB).perform()
        assert browser.execute_script(focused) == "question"
        browser.execute_script("document.getElementById('tab-ask').focus()")
        moves = ((Keys.ARROW_RIGHT, "tab-search", "search"), (Keys.ARROW_RIGHT, "tab-tickets", "tickets"),
                 (Keys.ARROW_RIGHT, "tab-ask", "ask"), (Keys.ARROW_LEFT, "tab-tickets", "tickets"),
                 (Keys.HOME, "tab-ask", "ask"), (Keys.END, "tab-tickets", "tickets"))
        for key, tab, panel in moves:
            ActionChains(browser).send_keys(key).perform()
            assert browser.execute_script(focused) == tab, (key, tab)
            shown = [p.get_attribute("id") for p in browser.find_elements("css selector", "section.panel")
                     if p.is_displayed()]
            assert shown == [panel], (key, shown)
            flags, stops = selected()
            assert stops.count("0") == 1 and stops[flags.index(True)] == "0" and \
                tabs[flags.index(True)].get_attribute("id") == tab
        assert wait_state(browser, "tickets") == "done"    # selected by a key, the Tickets tab loads as on a click
        ActionChains(browser).send_keys(Keys.TAB).perform()
        assert browser.execute_script(focused) == "tickets-status"   # Tab leaves the tablist for the panel


def test_the_streamed_answer_is_announced_once(chat_llm, browser):
    """The answer box is no live region (a screen reader had read the growing answer again with each streamed
    piece); it is aria-busy while it streams, and one polite status region gets the finished answer, once."""
    from selenium.webdriver.support.ui import WebDriverWait
    config, stub = chat_llm
    stub.scenario, stub.piece_delay = "slow_stream", 0.2
    stub.answer = "P1 tickets are confirmed and escalated by the first line within 15 minutes of the report. [1]"
    live = ("const e = arguments[0]; for (let n = e; n; n = n.parentElement) { if (n.getAttribute('aria-live') || "
            "['status', 'alert', 'log'].includes(n.getAttribute('role'))) return true; } return false;")
    with serving(config) as base:
        browser.get(base + "/")
        answer = browser.find_element("id", "answer")
        assert not browser.execute_script(live, answer)
        region = browser.find_element("id", "announce")
        assert region.get_attribute("role") == "status" and not browser.execute_script(
            "return arguments[0].closest('[hidden]')", region)
        browser.execute_script(
            "window.heard = []; new MutationObserver(() => { const t = arguments[0].textContent; if (t) "
            "window.heard.push(t); }).observe(arguments[0], {childList: true, characterData: true, subtree: true});",
            region)
        browser.find_element("id", "question").send_keys(QUESTION)
        browser.find_element("id", "ask-button").click()
        WebDriverWait(browser, 30).until(lambda d: answer_text(d).strip())     # streaming
        assert answer.get_attribute("aria-busy") == "true"
        assert browser.execute_script("return window.heard") == []
        assert wait_state(browser, "ask") == "done"
        assert answer.get_attribute("aria-busy") is None
        heard = browser.execute_script("return window.heard")
        assert heard == ["answer: " + stub.answer], heard


def test_the_words_the_cited_notes_do_not_say_are_shown_under_the_answer(ingested, browser):
    """The CLI says "not in the cited notes: saturn" under an answer whose evidence never speaks of a word the
    question asks with; the page said nothing, and the answer read as covering it."""
    config, _, _ = ingested
    with serving(config) as base:
        browser.get(base + "/")
        assert not browser.find_element("id", "unsaid").is_displayed()
        browser.find_element("id", "question").send_keys("What are the API latency alert thresholds on Saturn?")
        browser.find_element("id", "ask-button").click()
        assert wait_state(browser, "ask") == "done"
        assert browser.find_element("id", "mode").text == "rag"
        unsaid = browser.find_element("id", "unsaid")
        assert unsaid.is_displayed() and unsaid.text == "Not in the cited notes: saturn"
        question = browser.find_element("id", "question")
        question.clear()
        question.send_keys("What are the API latency alert thresholds?")
        browser.find_element("id", "ask-button").click()
        from selenium.webdriver.support.ui import WebDriverWait
        WebDriverWait(browser, 30).until(lambda d: not d.find_element("id", "unsaid").is_displayed())
        assert wait_state(browser, "ask") == "done" and browser.find_element("id", "mode").text == "rag"
        assert not browser.find_element("id", "unsaid").is_displayed()


def test_a_pyz_servers_page_names_the_pyz_when_the_server_is_gone(ingested, browser, monkeypatch):
    """Under the zipapp the page said "is `localrag serve` still running?", a command a pyz user cannot run.  It
    names the pyz as it was started (from <body data-start>, so the script the CSP pins is unchanged)."""
    import sys
    config, _, _ = ingested
    monkeypatch.setattr(sys, "argv", ["./field/it's localrag.pyz"])
    with serving(config) as base:
        browser.get(base + "/")
        assert browser.find_element("tag name", "body").get_attribute("data-start") == \
            localrag.command_name() == "python3 './field/it'\"'\"'s localrag.pyz'"
        assert wait_state(browser, "ask", ("idle",)) == "idle"
    browser.find_element("id", "question").send_keys(QUESTION)
    browser.find_element("id", "ask-button").click()
    assert wait_state(browser, "ask", ("error",)) == "error"
    status = browser.find_element("css selector", "#ask .status").text
    assert f"(is `{localrag.command_name()} serve` still running?)" in status, status
    assert "`localrag serve`" not in status
