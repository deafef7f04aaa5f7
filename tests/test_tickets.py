"""Issue 16 (knowledge gaps become tickets a person confirms), section 12a: drafts made by rules and never stored,
confirmation over CLI, HTTP and MCP, status events, the gaps report.

Real parts only: the Postgres of conftest.py, a small vault written here and ingested with the fake embedder, the
real HTTP server on 127.0.0.1 and the MCP endpoint it serves.

Sections:
    1 helpers and fixtures          4 status: events, bad input, concurrency, a database without the tables
    2 drafts: pure, never stored    5 gaps: grouping on hand-made records, the report
    3 confirmation: CLI, TTY        6 HTTP and MCP
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import localrag
from conftest import run_cli, write_vault

# === 1. Helpers and fixtures =======================================================================================

QUESTION = "How do I configure kubernetes autoscaling for the billing cluster?"
NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def vault_db(db, tmp_path, monkeypatch):
    """A small vault ingested; answers and tickets empty."""
    vault = tmp_path / "vault"
    write_vault(vault, {
        "Sync/Setup.md": "---\ntags: [sync]\n---\n# Set up sync\n\nOpen Settings and choose Sync, then select Connect "
                         "next to the remote vault and enter the vault password.\n",
        "Canvas.md": "---\ntags: [boards/canvas]\n---\n# Canvas\n\nA canvas holds cards, notes and media on an "
                     "infinite board.\n",
    })
    assert localrag.ingest(db, vault)["status"] == "success"
    with localrag.Store.open(db) as s:
        s.run("TRUNCATE answers, tickets, ticket_events RESTART IDENTITY")
    return db


def row_counts(config) -> dict:
    with localrag.Store.open(config) as s:
        return {t: s.run(f"SELECT count(*) FROM {t}")[0][0] for t in localrag.SCHEMA_TABLES}


def draft_file(tmp_path, config, question=QUESTION, **edits) -> str:
    draft = localrag.ticket_draft(config, question)
    draft.update(edits)
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(draft), encoding="utf-8")
    return str(path)


def cli_error(*args) -> tuple[int, dict]:
    code, out = run_cli(*args, "--json")
    return code, json.loads(out)["error"]


# === 2. Drafts: pure, never stored =================================================================================

def test_draft_rules_are_pure():
    evidence = [{"source": "Sync/Setup.md", "heading": "Set up sync", "score": 0.31, "line_start": 4,
                 "line_end": 5, "tags": ["sync"]}]
    one = localrag.ticket_draft_from(QUESTION, "no_answer", "confidence 0.31 is below", evidence, "2026-11-29T12:00")
    two = localrag.ticket_draft_from(QUESTION, "no_answer", "confidence 0.31 is below", evidence, "2026-11-29T12:00")
    assert one == two
    assert one["title"] == "Knowledge gap: " + QUESTION and one["category"] == "Sync" and one["stored"] is False
    for text in (QUESTION, "no_answer", "confidence 0.31 is below", "Sync/Setup.md > Set up sync (lines 4-5)",
                 "2026-11-29T12:00", "no model was called"):
        assert text in one["description"]
    assert "no model" in one["made_by"] and one["category_rule"] == localrag.TICKET_CATEGORY_RULE


def test_category_rule():
    assert localrag.ticket_category([]) == "uncategorised"
    assert localrag.ticket_category([{"source": "Canvas.md", "tags": ["boards/canvas"]}]) == "#boards/canvas"
    assert localrag.ticket_category([{"source": "Canvas.md", "tags": []}]) == "uncategorised"
    assert localrag.ticket_category([{"source": "a/b/c.md", "tags": ["x"]}, {"source": "z/y.md"}]) == "a"


def test_long_question_gives_a_title_within_the_limit():
    draft = localrag.ticket_draft_from("why " * 900, "no_answer", "r", [], "t")
    assert len(draft["title"]) <= localrag.TICKET_TITLE_MAX
    assert localrag.validate_ticket(draft)["title"] == draft["title"]


def test_draft_reads_nothing_into_the_database(vault_db):
    before = row_counts(vault_db)
    one = localrag.ticket_draft(vault_db, QUESTION, now=NOW)
    two = localrag.ticket_draft(vault_db, QUESTION, now=NOW)
    code, out = run_cli("tickets", "draft", QUESTION, "--json")
    assert code == 0 and json.loads(out)["question"] == QUESTION
    assert one == two and row_counts(vault_db) == before
    assert one["mode"] == "no_answer" and one["evidence"] and one["drafted_at"] == "2026-11-29T12:00:00+00:00"


def test_draft_category_from_the_closest_evidence(vault_db):
    draft = localrag.ticket_draft(vault_db, "How do I connect the remote vault password in Settings?")
    assert draft["evidence"][0]["source"] == "Sync/Setup.md" and draft["category"] == "Sync"
    canvas = localrag.ticket_draft(vault_db, "Can a canvas board hold media cards?")
    assert canvas["evidence"][0]["source"] == "Canvas.md" and canvas["category"] == "#boards/canvas"


def test_draft_takes_mode_and_reason_from_an_answer_record(vault_db):
    answer = localrag.ask(vault_db, QUESTION)
    draft = localrag.ticket_draft(vault_db, QUESTION, answer_id=answer["answer_id"])
    assert (draft["mode"], draft["reason"], draft["answer_id"]) == (answer["mode"], answer["reason"],
                                                                    answer["answer_id"])
    with pytest.raises(localrag.AnswerNotFound):
        localrag.ticket_draft(vault_db, QUESTION, answer_id=999)


@pytest.mark.parametrize("question", ["", "   ", "\ufeff", None, 7])
def test_draft_of_an_empty_question_is_refused(vault_db, question):
    before = row_counts(vault_db)
    with pytest.raises(localrag.InvalidRequest) as err:
        localrag.ticket_draft(vault_db, question)
    assert err.value.details["field"] == "question" and row_counts(vault_db) == before
    code, error = cli_error("tickets", "draft", "  ")
    assert code == localrag.EXIT_USAGE and error["code"] == "invalid_request" and "question" in error["message"]


# === 3. Confirmation: CLI, TTY =====================================================================================

def test_cli_create_without_confirmation_saves_nothing(vault_db, tmp_path):
    path = draft_file(tmp_path, vault_db)
    before = row_counts(vault_db)
    code, error = cli_error("tickets", "create", "--from", path)
    assert code == localrag.EXIT_USAGE and error["details"]["field"] == "confirmed" and "--confirm" in error["message"]
    assert row_counts(vault_db) == before
    code, out = run_cli("tickets", "create", "--from", path, "--confirm", "--json")
    ticket = json.loads(out)
    assert code == 0 and ticket["status"] == "open" and ticket["category"] == localrag.ticket_draft(
        vault_db, QUESTION)["category"]
    assert [(e["actor"], e["old_status"], e["new_status"]) for e in ticket["events"]] == [("cli", None, "open")]
    assert ticket["draft"]["mode"] == "no_answer" and "no model" in ticket["draft"]["made_by"]


def test_cli_create_keeps_the_persons_edits(vault_db, tmp_path):
    path = draft_file(tmp_path, vault_db, title="Autoscaling docs missing", category="ops",
                      description="Please write the autoscaling runbook.")
    code, out = run_cli("tickets", "create", "--from", path, "--confirm", "--json")
    ticket = json.loads(out)
    assert (ticket["title"], ticket["category"], ticket["description"]) == (
        "Autoscaling docs missing", "ops", "Please write the autoscaling runbook.")


def _create_on_tty(path: str, reply: bytes | None, shown: list | None = None) -> tuple[int, str]:
    """`tickets create --from PATH` on a terminal, answered with `reply` (None: SIGINT at the prompt); what the
    terminal showed up to the prompt is appended to `shown`."""
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-c", "import sys, localrag; sys.exit(localrag.main(sys.argv[1:]))",
                                 "tickets", "create", "--from", path], stdin=slave, stderr=slave,
                                stdout=subprocess.PIPE, env=dict(os.environ))
        os.close(slave)
        seen = b""
        while b"[y/N]" not in seen:
            chunk = os.read(master, 4096)
            assert chunk, seen
            seen += chunk
        if shown is not None:
            shown.append(seen.decode())
        if reply is None:
            proc.send_signal(signal.SIGINT)
        else:
            os.write(master, reply)
        out, _ = proc.communicate(timeout=60)
        return proc.returncode, out.decode()
    finally:
        os.close(master)


def test_cli_asks_on_a_tty(vault_db, tmp_path):
    path = draft_file(tmp_path, vault_db)
    code, out = _create_on_tty(path, b"n\n")
    assert code == localrag.EXIT_USAGE and out == "" and row_counts(vault_db)["tickets"] == 0
    code, out = _create_on_tty(path, b"yes\n")
    assert code == 0 and out.startswith("saved ticket #1") and row_counts(vault_db)["tickets"] == 1


FORGED_EVENT = "event 2026-01-01T00:00:00  http                     in_progress -> resolved"


def test_the_prompt_indents_the_description(vault_db, tmp_path):
    """The confirmation prompt printed the description flush, so a line of it could pass for one of the prompt's own
    ("category: ops") or an event line; it is indented as `tickets show` prints it."""
    description = f"Please write the runbook.\n{FORGED_EVENT}\ncategory: ops"
    shown: list = []
    code, out = _create_on_tty(draft_file(tmp_path, vault_db, description=description), b"n\n", shown)
    assert code == localrag.EXIT_USAGE and row_counts(vault_db)["tickets"] == 0
    lines = shown[0].replace("\r\n", "\n").split("\n")
    assert "    " + FORGED_EVENT in lines and "    category: ops" in lines, shown
    assert [line for line in lines if line.startswith(("event ", "Please", "category:"))] == ["category: Sync"], shown


def test_a_draft_printed_as_text_indents_the_description(vault_db):
    """`tickets draft` (text) printed the description flush: a question holding a line break put a line of the
    person's choosing at the start of a line; it is indented as `tickets show` prints it."""
    code, out = run_cli("tickets", "draft", f"sync setup?\n{FORGED_EVENT}")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("title:    Knowledge gap: sync setup? event") and "    " + FORGED_EVENT in lines
    assert [line for line in lines if line and not line.startswith("    ")] == lines[:2], out


def test_ctrl_c_at_the_prompt_is_an_interruption(vault_db, tmp_path):
    """Ctrl-C at "Save this ticket? [y/N]" saves nothing and exits 130, not 2 as a "no" does: a script can tell them
    apart (outside review)."""
    code, out = _create_on_tty(draft_file(tmp_path, vault_db), None)
    assert code == localrag.EXIT_INTERRUPTED and out == "" and row_counts(vault_db)["tickets"] == 0


def test_cli_create_refuses_unknown_fields_as_http_does(vault_db, tmp_path):
    """A misspelt field in an edited draft ("categroy") had been dropped and the ticket saved without it; POST
    /tickets refused the same document."""
    path = draft_file(tmp_path, vault_db, categroy="Sync")
    code, error = cli_error("tickets", "create", "--from", path, "--confirm")
    assert code == localrag.EXIT_USAGE and error["details"]["field"] == "categroy"
    assert error["message"].startswith(f"{path}: unknown field(s): categroy; allowed: title")
    assert row_counts(vault_db)["tickets"] == 0


@pytest.mark.parametrize("edits, field", [
    ({"title": "x" * 201}, "title"), ({"title": "   "}, "title"), ({"description": "d" * 20_001}, "description"),
    ({"description": ""}, "description"), ({"category": 5}, "category"), ({"answer_id": "abc"}, "answer_id"),
])
def test_bad_ticket_fields_are_refused(vault_db, tmp_path, edits, field):
    path = draft_file(tmp_path, vault_db, **edits)
    code, error = cli_error("tickets", "create", "--from", path, "--confirm")
    assert code == localrag.EXIT_USAGE and error["details"]["field"] == field
    assert row_counts(vault_db)["tickets"] == 0


def test_limits_are_inclusive(vault_db, tmp_path):
    path = draft_file(tmp_path, vault_db, title="t" * 200, description="d" * 20_000)
    code, out = run_cli("tickets", "create", "--from", path, "--confirm", "--json")
    assert code == 0 and len(json.loads(out)["description"]) == 20_000


def test_unreadable_draft_file(vault_db, tmp_path):
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    for path in (str(tmp_path / "bad.json"), str(tmp_path / "missing.json")):
        code, error = cli_error("tickets", "create", "--from", path, "--confirm")
        assert code == localrag.EXIT_USAGE and error["details"]["field"] == "from"


@pytest.mark.parametrize("content, says", [
    ('{"title": "a", "title": "b", "description": "d"}',
     "is not JSON (duplicate key 'title': line 1 column 16 (char 15))"),
    ('{\n  "title": "a",\n  "evidence": [{"n": 1, "\\u006e": 2}],\n  "title": "b"\n}',   # where the name is
     "is not JSON (duplicate key 'n': line 3 column 25 (char 42))"),
    ('{"title": "t", "description": "d", "evidence": [{"score": NaN}]}', "is not JSON (NaN is not JSON: line 1 column 59 (char 58))"),
    ("[" * 100_000, "nests JSON too deeply"),
    ('["t", "d"]', "is a JSON array, not an object"),
    ('"a draft"', "is a JSON string, not an object"),
    ('{"title": 5, "description": "d"}', "title must be a string"),
    ('{"title": "t", "description": ""}', "description must be a non-empty string"),
    ('{"title": "t", "description": "d", "answer_id": 1.5}', "answer_id must be an integer"),
    # a value out of range is quoted shortened, as a wrong type is (a 4,000-character string had been echoed whole)
    ('{"title": "t", "description": "d", "answer_id": ' + "9" * 4000 + '}',
     "answer_id must be null or an integer from 1 to 4611686018427387904 (got 99999")])
def test_a_draft_file_is_read_strictly(vault_db, tmp_path, content, says):
    """`tickets create --from`: a member named twice had saved the last one, a NaN score was stored as null, JSON
    nested past Python's recursion limit was internal_error with a traceback under --debug, and a field's error did
    not name the file.  Each is one line naming the file (exit 2), and nothing is saved."""
    path = tmp_path / "draft.json"
    path.write_text(content, encoding="utf-8")
    code, error = cli_error("tickets", "create", "--from", str(path), "--confirm")
    assert code == localrag.EXIT_USAGE and error["code"] == "invalid_request", error
    assert error["message"].startswith(f"{path}") and says in error["message"], error
    assert "\n" not in error["message"] and len(error["message"]) < 400
    assert row_counts(vault_db)["tickets"] == 0


def test_a_draft_with_a_bom_is_read(vault_db, tmp_path):
    """A draft saved by a Windows editor starts with a BOM: read, as `ask --batch` reads such a file."""
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"title": "t", "description": "d"}).encode())
    code, out = run_cli("tickets", "create", "--from", str(path), "--confirm", "--json")
    assert code == 0 and json.loads(out)["title"] == "t"


# === 4. Status: events, bad input, concurrency, a database without the tables ======================================

def _new_ticket(config, question=QUESTION, actor="cli") -> int:
    return localrag.ticket_create(config, localrag.ticket_draft(config, question), True, actor)["id"]


def test_status_changes_are_events(vault_db):
    tid = _new_ticket(vault_db)
    code, out = run_cli("tickets", "update", str(tid), "--status", "in_progress", "--note", "asked ops", "--json")
    assert code == 0
    localrag.ticket_update(vault_db, tid, "resolved", actor="http", fingerprint=localrag.token_fingerprint("s3cret"))
    ticket = localrag.ticket_show(vault_db, tid)
    assert ticket["status"] == "resolved"
    assert [(e["actor"], e["old_status"], e["new_status"], e["note"]) for e in ticket["events"]] == [
        ("cli", None, "open", "created"), ("cli", "open", "in_progress", "asked ops"),
        ("http", "in_progress", "resolved", None)]
    assert ticket["events"][2]["token_fingerprint"].startswith("sha256:") and "s3cret" not in json.dumps(ticket)
    assert [t["id"] for t in localrag.ticket_list(vault_db, "resolved")["tickets"]] == [tid]
    assert localrag.ticket_list(vault_db, "open")["tickets"] == []
    code, out = run_cli("tickets", "list", "--status", "resolved", "--json")
    assert code == 0 and json.loads(out)["total"] == 1
    code, out = run_cli("tickets", "show", str(tid))
    assert code == 0 and "in_progress -> resolved" in out


def test_a_note_or_category_cannot_forge_lines_of_the_ticket(vault_db, api_url):
    """A note or category holding a line break printed lines of its own under `tickets show`: a note "asked ops\\n
    event … http  in_progress -> resolved" read as a second event.  The category is one line, as the title (its
    line breaks and tabs are spaces); a note is kept as written and printed on its event's line with \\n."""
    forged = "\nevent 2026-01-01T00:00:00  http                     in_progress -> resolved"
    status, ticket = call(api_url, "POST", "/tickets", {"title": "t", "description": "d", "confirmed": True,
                                                        "category": "ops" + forged + "\t\r\n"})
    assert status == 201 and ticket["category"] == "ops event 2026-01-01T00:00:00 http in_progress -> resolved"
    tid = ticket["id"]
    status, ticket = call(api_url, "PATCH", f"/tickets/{tid}", {"status": "in_progress", "note": "asked ops" + forged})
    assert status == 200 and ticket["events"][-1]["note"] == "asked ops" + forged   # stored as written
    localrag.ticket_update(vault_db, tid, "in_progress", "two\u2028lines")
    with localrag.Store.open(vault_db) as s:   # a category stored before categories were one line
        s.run("UPDATE tickets SET category = :c WHERE id = :i", c="old" + forged, i=tid)
    code, out = run_cli("tickets", "show", str(tid))
    assert code == 0
    lines = out.splitlines()
    assert [line[:6] for line in lines if line.startswith("event ")] == ["event "] * 3, out
    assert sum("in_progress -> resolved" in line for line in lines) == 2   # the category and the note, escaped
    assert lines[0].startswith(f"ticket #{tid}  in_progress  [old\\nevent 2026-01-01T00:00:00")
    assert lines[-2].endswith("  asked ops\\nevent 2026-01-01T00:00:00  http                     in_progress -> "
                              "resolved") and lines[-1].endswith("  two\\u2028lines")
    draft = localrag.ticket_draft_from("q", "no_answer", "r", [{"source": "a\nb/c.md", "score": 0.1}], "now")
    assert draft["category"] == "a b"


def test_a_description_cannot_forge_lines_of_the_ticket(vault_db, tmp_path):
    """A description is multi-line by design and was printed flush under `tickets show`: a line of it reading
    "event … http  in_progress -> resolved" looked like one of the ticket's events.  Each description line is
    indented (as `git log` shows a commit message), so only the program's own lines start a line; U+2028/U+2029
    are escaped; --json keeps the description as written."""
    forged = "event 2026-01-01T00:00:00  http                     in_progress -> resolved"
    description = f"Please write the runbook.\n\n{forged}\ntitle        Not this one\u2028{forged}\r\n  indented"
    path = draft_file(tmp_path, vault_db, description=description)
    code, out = run_cli("tickets", "create", "--from", path, "--confirm", "--json")
    assert code == 0
    tid = json.loads(out)["id"]
    code, out = run_cli("tickets", "show", str(tid))
    assert code == 0
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("event ")] == [lines[-1]], out   # its one real event
    assert [line for line in lines if line.startswith("title ")] == [lines[1]], out
    start = lines.index("    Please write the runbook.")
    assert lines[start:start + 5] == ["    Please write the runbook.", "", "    " + forged,
                                      "    title        Not this one\\u2028" + forged + "\\r",
                                      "      indented"], out
    code, out = run_cli("tickets", "show", str(tid), "--json")
    assert code == 0 and json.loads(out)["description"] == description


def test_a_ticket_naming_an_answer_record_that_does_not_exist_is_refused(vault_db, api_url, tmp_path):
    """POST /tickets with "answer_id": 99999 had been saved (201); `tickets draft --answer-id 99999` refuses it."""
    status, draft = call(api_url, "POST", "/tickets/draft", {"question": QUESTION})
    status, err = call(api_url, "POST", "/tickets", {**draft, "answer_id": 99999, "confirmed": True})
    assert status == 404 and err["error"]["code"] == "answer_not_found" and err["error"]["details"]["id"] == 99999
    code, error = cli_error("tickets", "create", "--from", draft_file(tmp_path, vault_db, answer_id=99999), "--confirm")
    assert code == localrag.EXIT_NOT_FOUND and error["code"] == "answer_not_found"
    assert row_counts(vault_db)["tickets"] == 0


def test_tickets_are_listed_a_page_at_a_time(vault_db, api_url):
    """`tickets list` and GET /tickets page like `history` (3,000 tickets had made one 1 MB document)."""
    ids = [_new_ticket(vault_db, f"{QUESTION} ({n})") for n in range(5)]
    page = localrag.ticket_list(vault_db, limit=2)
    assert [t["id"] for t in page["tickets"]] == ids[:-3:-1] and page["total"] == 5 and page["next_offset"] == 2
    last = localrag.ticket_list(vault_db, limit=2, offset=4)
    assert [t["id"] for t in last["tickets"]] == [ids[0]] and last["next_offset"] is None
    code, out = run_cli("tickets", "list", "--limit", "2", "--offset", "2", "--json")
    assert code == 0 and [t["id"] for t in json.loads(out)["tickets"]] == [ids[2], ids[1]]
    status, listed = call(api_url, "GET", "/tickets?limit=3&offset=1")
    assert status == 200 and [t["id"] for t in listed["tickets"]] == ids[3:0:-1] and listed["next_offset"] == 4
    for query, field in (("limit=0", "limit"), ("limit=1001", "limit"), ("offset=-1", "offset"), ("page=2", "page")):
        status, err = call(api_url, "GET", f"/tickets?{query}")
        assert status == 422 and err["error"]["details"]["field"] == field, query
    for args in (["--limit", "0"], ["--offset", "-1"], ["--limit", "x"]):
        code, err = cli_error("tickets", "list", *args)
        assert code == localrag.EXIT_USAGE, args


def test_events_and_tickets_cannot_be_deleted(vault_db):
    tid = _new_ticket(vault_db)
    with localrag.Store.open(vault_db) as s:
        for sql in ("DELETE FROM tickets", "DELETE FROM ticket_events", "UPDATE ticket_events SET note = 'x'"):
            with pytest.raises(localrag.LocalRagError):
                s.run(sql)
    assert len(localrag.ticket_show(vault_db, tid)["events"]) == 1


@pytest.mark.parametrize("status", ["closed", "OPEN", "", "in progress"])
def test_status_outside_the_three(vault_db, status):
    tid = _new_ticket(vault_db)
    code, error = cli_error("tickets", "update", str(tid), "--status", status)
    assert code == localrag.EXIT_USAGE and error["details"]["field"] == "status"
    assert error["details"]["allowed"] == ["open", "in_progress", "resolved"]
    assert len(localrag.ticket_show(vault_db, tid)["events"]) == 1
    code, error = cli_error("tickets", "list", "--status", "x")   # argparse's choices
    assert code == localrag.EXIT_USAGE


def test_unknown_ticket_id(vault_db):
    for args in (["tickets", "show", "42"], ["tickets", "update", "42", "--status", "resolved"]):
        code, error = cli_error(*args)
        assert code == localrag.EXIT_NOT_FOUND and error["code"] == "ticket_not_found"
    for bad in ("0", "-1", "abc", str(2 ** 63)):
        code, error = cli_error("tickets", "show", bad)
        assert code == localrag.EXIT_USAGE and error["details"]["field"] == "id"
        assert error["message"].startswith("ticket id must be an integer from 1 to")
    # a draft's answer_id is named as such (it said "ticket id ... field id")
    with pytest.raises(localrag.InvalidRequest) as err:
        localrag.ticket_draft(vault_db, "x", answer_id=-1)
    assert err.value.details["field"] == "answer_id" and err.value.message.startswith("answer_id (an answer")
    assert row_counts(vault_db)["ticket_events"] == 0


def test_concurrent_status_updates_last_write_wins_both_kept(vault_db):
    tid = _new_ticket(vault_db)
    barrier = threading.Barrier(2)
    errors = []

    def update(status):
        try:
            with localrag.Store.open(vault_db) as s:
                barrier.wait()
                localrag.ticket_update(vault_db, tid, status, note=status, store=s)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=update, args=(s,)) for s in ("in_progress", "resolved")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    ticket = localrag.ticket_show(vault_db, tid)
    events = ticket["events"]
    assert len(events) == 3 and {e["new_status"] for e in events[1:]} == {"in_progress", "resolved"}
    assert events[1]["old_status"] == "open" and events[2]["old_status"] == events[1]["new_status"]
    assert ticket["status"] == events[2]["new_status"]   # the later event's status is the ticket's


def test_database_without_the_tickets_tables(vault_db, tmp_path):
    path = draft_file(tmp_path, vault_db)
    with localrag.Store.open(vault_db) as s:
        s.run("DROP TABLE ticket_events, tickets")
    try:
        for args in (["tickets", "list"], ["tickets", "show", "1"], ["tickets", "create", "--from", path,
                                                                     "--confirm"],
                     ["tickets", "update", "1", "--status", "open"], ["gaps"]):
            code, error = cli_error(*args)
            assert code == localrag.EXIT_SCHEMA and error["code"] == "schema_not_initialized", args
            assert "localrag db init" in error["message"] and "tickets" in error["message"]
    finally:
        with localrag.Store.open(vault_db) as s:
            s.init_schema()


# === 5. Gaps: grouping on hand-made records, the report ============================================================

def rec(i, question, day, reason="confidence below"):
    return {"id": i, "question": question, "created_at": f"2026-11-{day:02d}T10:00:00+00:00", "reason": reason}


RECORDS = [
    rec(1, "How do I sync my vault to an iPhone?", 1),
    rec(2, "Export a note to PDF with images", 2),
    rec(3, "sync vault iPhone", 3),
    rec(4, "How can I sync the vault on my iPhone?", 5, "insufficient_evidence/model"),
    rec(5, "export to PDF", 6),
    rec(6, "?!", 7), rec(7, "?!", 8), rec(8, "¿?", 8),
    rec(9, "What is the refund policy for annual plans?", 9),
]


def test_gaps_grouping_rule():
    groups = localrag.group_gaps(RECORDS, tickets=[(3, "export pdf", None, "open"), (4, "unrelated", 9, "resolved")])
    by_first = {g["answer_ids"][0]: g for g in groups}
    sync, export, marks, refund = by_first[1], by_first[2], by_first[6], by_first[9]
    assert sync["answer_ids"] == [1, 3, 4] and sync["count"] == 3
    assert (sync["first_seen"][:10], sync["last_seen"][:10]) == ("2026-11-01", "2026-11-05")
    assert sync["reasons"] == {"confidence below": 2, "insufficient_evidence/model": 1}
    assert sync["ticket"] is False and sync["tickets"] == []
    assert export["answer_ids"] == [2, 5] and export["tickets"] == [{"id": 3, "status": "open"}]  # by its terms
    assert marks["answer_ids"] == [6, 7] and marks["questions"] == [{"question": "?!", "count": 2}]
    assert by_first[8]["answer_ids"] == [8]                     # no terms: only the same text groups
    assert refund["tickets"] == [{"id": 4, "status": "resolved"}]   # by the answer record it was made from
    assert [g["answer_ids"][0] for g in groups] == [1, 6, 2, 9, 8]   # most asked, then most recent
    assert localrag.group_gaps(RECORDS, threshold=1.01)[0]["count"] == 2   # the threshold is the rule's knob


def _groups_by_comparing_all(records, tickets, threshold):
    """The grouping rule as first written: each question against every question of every group before it (the
    reference group_gaps must agree with)."""
    groups = []
    for r in records:
        terms, norm = localrag.content_tokens(r["question"]), localrag._collapse(r["question"]).lower()
        home = next((g for g in groups if any((localrag._jaccard(terms, t) >= threshold) if terms else norm == n
                                              for t, n in g["members"])), None)
        if home is None:
            home = {"members": [], "ids": []}
            groups.append(home)
        home["members"].append((terms, norm))
        home["ids"].append(r["id"])
    out = []
    for g in groups:
        linked = [tid for tid, question, answer_id, _status in tickets
                  if answer_id in g["ids"] or (question and any(
                      (localrag._jaccard(localrag.content_tokens(question), t) >= threshold)
                      if localrag.content_tokens(question) else localrag._collapse(question).lower() == n
                      for t, n in g["members"]))]
        out.append((g["ids"], linked))
    return out


_GAP_WORDS = st.sampled_from("sync vault iphone export pdf images refund plan canvas 同步 仓库 导出 ?! the".split())


@settings(max_examples=200, deadline=None)
@given(questions=st.lists(st.lists(_GAP_WORDS, min_size=0, max_size=5).map(" ".join), min_size=1, max_size=25),
       ticket_questions=st.lists(st.tuples(st.lists(_GAP_WORDS, max_size=4).map(" ".join), st.integers(0, 30)),
                                 max_size=5),
       threshold=st.sampled_from([0.3, 0.5, 0.67, 1.0, 1.01]))
def test_gaps_grouping_agrees_with_comparing_every_pair(questions, ticket_questions, threshold):
    """group_gaps finds its matches through an index (prefix filtering), not by comparing every pair: the groups and
    their tickets are the same."""
    records = [rec(i, q or "?!", 1 + i % 28) for i, q in enumerate(questions, 1)]
    tickets = [(n, q or None, aid or None, "open") for n, (q, aid) in enumerate(ticket_questions, 1)]
    groups = localrag.group_gaps(records, tickets, threshold)
    got = sorted((g["answer_ids"], [t["id"] for t in g["tickets"]]) for g in groups)
    assert got == sorted(_groups_by_comparing_all(records, tickets, threshold))


def test_gaps_markdown_report():
    report = {"since": "2026-11-01", "refused": 9, "groups": localrag.group_gaps(RECORDS)}
    md = localrag.gaps_markdown(report, "2026-11-29T12:00+00:00")
    assert md.startswith("# Questions the knowledge base could not answer\n")
    assert "## 1. How do I sync my vault to an iPhone?" in md and "- Asked 3 times" in md
    assert "  - sync vault iPhone" in md and "No ticket yet" in md and "since 2026-11-01" in md
    assert localrag.gaps_markdown(report, "x") == md.replace("2026-11-29T12:00+00:00", "x")
    injected = localrag.gaps_markdown({"since": None, "refused": 1, "groups": localrag.group_gaps(
        [rec(1, "<script>x</script> [a](javascript:y)", 1)])}, "t")
    assert "<script>" not in injected and "\\[a\\]" in injected


def _insert_refusal(store, question, created_at, mode="no_answer"):
    store.run("INSERT INTO answers (created_at, question, mode, reason, completion_status, answer) "
              "VALUES (CAST(:c AS timestamptz), :q, :m, 'r', 'not_called', '')", c=created_at, q=question, m=mode)


def test_gaps_from_the_answer_records(vault_db):
    with localrag.Store.open(vault_db) as s:
        _insert_refusal(s, "How do I sync my vault to an iPhone?", "2026-10-01T09:00:00Z")
        _insert_refusal(s, "sync vault iPhone", "2026-11-02T09:00:00Z")
        _insert_refusal(s, "sync vault iPhone", "2026-11-03T09:00:00Z", mode="rag")   # answered: no gap
    localrag.ticket_create(vault_db, {"title": "t", "description": "d", "question": "iPhone vault sync"}, True, "cli")
    code, out = run_cli("gaps", "--json")
    report = json.loads(out)
    assert code == 0 and report["refused"] == 2 and len(report["groups"]) == 1
    assert report["groups"][0]["count"] == 2 and report["groups"][0]["tickets"] == [{"id": 1, "status": "open"}]
    code, out = run_cli("gaps", "--since", "2026-11-01", "--json")
    assert json.loads(out)["refused"] == 1
    code, out = run_cli("gaps", "--format", "md")
    assert code == 0 and out.startswith("# Questions") and "Ticket 1 (open)" in out
    code, error = cli_error("gaps", "--since", "last week")
    assert code == localrag.EXIT_USAGE and error["details"]["field"] == "since"


# === 6. HTTP and MCP ===============================================================================================

TOKEN = "tickets-token-31337"


@pytest.fixture
def api_url(vault_db, monkeypatch):
    monkeypatch.setenv("LOCALRAG_API_TOKEN", TOKEN)
    config = localrag.load_config()
    srv = localrag.make_server(config, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    srv.api.pool.close()
    thread.join(10)


def call(url: str, method: str, path: str, body=None, token: str | None = TOKEN, headers=None):
    host, port = url.split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    h = {"Content-Type": "application/json", **(headers or {})}
    if token:
        h["Authorization"] = f"Bearer {token}"
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=h)
        resp = conn.getresponse()
        raw = resp.read().decode()
        return resp.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def test_http_draft_confirm_status(api_url, vault_db):
    before = row_counts(vault_db)
    status, draft = call(api_url, "POST", "/tickets/draft", {"question": QUESTION})
    assert status == 200 and draft["stored"] is False and draft["question"] == QUESTION
    assert row_counts(vault_db) == before
    for body in ({**draft}, {**draft, "confirmed": False}, {**draft, "confirmed": None}, {**draft, "confirmed": "yes"}):
        status, err = call(api_url, "POST", "/tickets", body)
        assert status == 422 and err["error"]["details"]["field"] == "confirmed", body
        if body.get("confirmed", False) in (None, False):   # missing said only "confirmed is required"
            assert "a person must confirm" in err["error"]["message"], err
    assert row_counts(vault_db) == before
    status, ticket = call(api_url, "POST", "/tickets", {**draft, "title": "Edited", "confirmed": True})
    assert status == 201 and ticket["title"] == "Edited" and ticket["status"] == "open"
    tid = ticket["id"]
    status, ticket = call(api_url, "PATCH", f"/tickets/{tid}", {"status": "in_progress", "note": "on it"})
    assert status == 200 and ticket["status"] == "in_progress"
    fp = localrag.token_fingerprint(TOKEN)
    assert [(e["actor"], e["token_fingerprint"], e["old_status"], e["new_status"]) for e in ticket["events"]] == [
        ("http", fp, None, "open"), ("http", fp, "open", "in_progress")]
    status, listed = call(api_url, "GET", "/tickets?status=in_progress")
    assert status == 200 and [t["id"] for t in listed["tickets"]] == [tid]
    status, shown = call(api_url, "GET", f"/tickets/{tid}")
    assert status == 200 and shown == ticket and TOKEN not in json.dumps(shown)
    # a query parameter is refused, naming it, not ignored as if it had filtered (in_progress: it is not "open")
    for query, names in (("?status=open", "status"), ("?x", "x"), ("?limit=1&b=2", "b, limit")):
        status, err = call(api_url, "GET", f"/tickets/{tid}{query}")
        assert status == 422 and err["error"]["details"]["field"] == names.split(",")[0], err
        assert err["error"]["message"].startswith(f"unknown query parameter(s): {names}; "
                                                  f"GET /tickets/{{id}} takes none")
    # the CLI sees the same ticket, and its own change is a cli event
    code, out = run_cli("tickets", "update", str(tid), "--status", "resolved", "--json")
    assert json.loads(out)["events"][-1]["actor"] == "cli"


def test_http_bad_input(api_url, vault_db):
    status, err = call(api_url, "POST", "/tickets/draft", {"question": "  "})
    assert status == 422 and err["error"]["details"]["field"] == "question"
    status, draft = call(api_url, "POST", "/tickets/draft", {"question": QUESTION})
    for edits, field in (({"title": "x" * 201}, "title"), ({"description": "d" * 20_001}, "description"),
                         ({"unknown": 1}, "unknown"), ({"evidence": ["not an object"]}, "evidence")):
        status, err = call(api_url, "POST", "/tickets", {**draft, **edits, "confirmed": True})
        assert status == 422 and err["error"]["details"]["field"] == field, edits
    status, ticket = call(api_url, "POST", "/tickets", {**draft, "title": "NUL\x00 inside", "confirmed": True})
    assert status == 201 and ticket["title"] == "NUL\ufffd inside"
    tid = ticket["id"]
    status, err = call(api_url, "PATCH", f"/tickets/{tid}", {"status": "closed"})
    assert status == 422 and err["error"]["details"]["field"] == "status"
    status, err = call(api_url, "PATCH", f"/tickets/{tid}", {})
    assert status == 422 and err["error"]["details"]["field"] == "status"
    for method, body in (("GET", None), ("PATCH", {"status": "open"})):
        status, err = call(api_url, method, "/tickets/999", body)
        assert status == 404 and err["error"]["code"] == "ticket_not_found"
        status, err = call(api_url, method, "/tickets/abc", body)
        assert status == 422 and err["error"]["details"]["field"] == "id"
    status, err = call(api_url, "GET", "/tickets?status=done")
    assert status == 422
    status, err = call(api_url, "DELETE", f"/tickets/{tid}")
    assert status == 405 and "DELETE" not in err["error"]["details"]["allowed"]
    assert len(localrag.ticket_show(vault_db, tid)["events"]) == 1


def _nested(levels: int) -> list:
    """Evidence nesting `levels` arrays/objects in all: a list of one object whose "x" holds the rest as lists."""
    inner: list = []
    for _ in range(levels - 3):
        inner = [inner]
    return [{"source": "a.md", "x": inner}]


def test_ticket_fields_nested_more_than_16_levels_are_refused(api_url, vault_db, tmp_path):
    """Evidence nested ~900 levels deep (a body the JSON parser still takes) was a RecursionError and a 500; a field
    is refused past 16 levels (422 / exit 2 naming it), 16 are saved."""
    body = {"title": "t", "description": "d", "confirmed": True}
    for levels in (17, 900):
        status, err = call(api_url, "POST", "/tickets", {**body, "evidence": _nested(levels)})
        assert status == 422 and err["error"]["details"]["field"] == "evidence", (levels, err)
        assert "more than 16 levels deep" in err["error"]["message"]
    path = tmp_path / "deep.json"
    path.write_text(json.dumps({"title": "t", "description": "d", "evidence": _nested(17)}), encoding="utf-8")
    code, error = cli_error("tickets", "create", "--from", str(path), "--confirm")
    assert code == localrag.EXIT_USAGE and error["details"]["field"] == "evidence"
    assert error["message"].startswith(f"{path}: evidence nests JSON arrays/objects more than 16 levels deep")
    assert row_counts(vault_db)["tickets"] == 0
    status, ticket = call(api_url, "POST", "/tickets", {**body, "evidence": _nested(16)})
    assert status == 201 and localrag._json_depth(ticket["draft"]["evidence"], 99) == 16


def test_http_routes_need_the_token(api_url, vault_db):
    tid = _new_ticket(vault_db)
    before = row_counts(vault_db)
    for method, path, body in (("POST", "/tickets/draft", {"question": QUESTION}),
                               ("POST", "/tickets", {"title": "t", "description": "d", "confirmed": True}),
                               ("PATCH", f"/tickets/{tid}", {"status": "resolved"}), ("GET", "/tickets", None),
                               ("GET", f"/tickets/{tid}", None)):
        for token in (None, "wrong"):
            status, err = call(api_url, method, path, body, token=token)
            assert status == 401 and err["error"]["code"] == "unauthorized", (method, path)
    assert row_counts(vault_db) == before


def _mcp(url: str, method: str, params: dict | None = None, rid: int = 1):
    status, body = call(url, "POST", "/mcp", {"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}},
                        headers={"MCP-Protocol-Version": "2025-11-25",
                                 "Accept": "application/json, text/event-stream"})
    assert status == 200, body
    return body


def test_mcp_drafts_but_never_saves(api_url, vault_db):
    before = row_counts(vault_db)
    tools = {t["name"]: t for t in _mcp(api_url, "tools/list")["result"]["tools"]}
    assert "draft_ticket" in tools and tools["draft_ticket"]["inputSchema"]["required"] == ["question"]
    assert all(not t["annotations"]["destructiveHint"] for t in tools.values())
    assert all(t["annotations"]["readOnlyHint"] for t in tools.values() if t["name"] != "ask")   # ask appends a record
    assert not [n for n in tools if n != "draft_ticket" and "ticket" in n]   # no tool creates or updates one
    assert "no tool saves a ticket" in tools["draft_ticket"]["description"]
    reply = _mcp(api_url, "tools/call", {"name": "draft_ticket", "arguments": {"question": QUESTION}})
    draft = reply["result"]["structuredContent"]
    assert reply["result"].get("isError") is not True and draft["stored"] is False
    expected = localrag.ticket_draft(vault_db, QUESTION)

    def undated(d: dict) -> dict:   # the two drafts may fall in different seconds: their time is not compared
        return {**d, "drafted_at": None, "description": re.sub(r"Drafted \S+ by", "Drafted - by", d["description"])}
    assert undated(draft) == undated(expected)
    for name in ("create_ticket", "save_ticket", "update_ticket"):
        reply = _mcp(api_url, "tools/call", {"name": name, "arguments": {**draft, "confirmed": True}})
        assert "error" in reply or reply["result"].get("isError"), reply
    reply = _mcp(api_url, "tools/call", {"name": "draft_ticket", "arguments": {"question": ""}})
    assert reply["result"]["isError"] is True
    assert row_counts(vault_db) == before


def test_a_field_of_the_wrong_json_type_is_422_not_500(db):
    """Found by schemathesis: `evidence` sent as an object (the schema says a list) must be a 422 naming it."""
    api = localrag.Api(db)
    with pytest.raises(localrag.InvalidRequest) as info:
        api.post_ticket({}, {"confirmed": True, "evidence": {}, "title": "t", "description": "d"})
    assert info.value.details["field"] == "evidence" and "a list" in info.value.message
