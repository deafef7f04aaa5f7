"""Notes by path (issue 12): get_note / list_notes, `localrag show`, GET /notes, and the line ranges that citations
and search results carry.  Real Postgres, the sample vault ingested; notes are read from the database."""

from __future__ import annotations

import json
import os

import pytest

import localrag
from conftest import run_cli

NOTE = "policies/Support Escalation Policy.md"


def file_lines(vault, rel: str, first: int, last: int) -> str:
    return "\n".join((vault / rel).read_text(encoding="utf-8").splitlines()[first - 1:last])


def test_span_lines_count_file_lines_past_the_frontmatter():
    doc = localrag.parse_markdown("---\ntitle: x\n---\n# A\n\ntext a\n\n## B\n\nb text\nmore\n\n# C\nc\n", "n.md")
    assert doc.body_line == 4
    spans = [localrag.span_lines(doc.body, c.start, c.end, doc.body_line) for c in localrag.chunk_document(doc)]
    assert spans == [(4, 6), (8, 11), (13, 14)]
    crlf = localrag.parse_markdown("---\r\na: 1\r\n---\r\n# T\r\nx\r\n", "n.md")
    assert crlf.body_line == 4
    assert localrag.parse_markdown("# T\n", "n.md").body_line == 1


def test_a_heading_is_found_by_the_link_obsidian_writes_to_it():
    """Obsidian drops `:`, `#`, `|`, `^` and `[[ ]]` from a heading link and matches without punctuation: `show
    'n.md#Setup step one?'` (from [[n#Setup step one?]]) and `#C and F` were 'no heading'."""
    doc = localrag.parse_markdown("# Top\n\n## Setup: step one?\ncamels\n\n### C# and F# ###\nguanacos\n\n"
                                  "## See [[Other Note|the other]]\nvicuñas\n", "n.md")
    for link, path in (("Setup step one?", ("Top", "Setup: step one?")), ("setup step one", ("Top", "Setup: step one?")),
                       ("C and F", ("Top", "Setup: step one?", "C# and F#")),
                       ("Setup step one#C and F", ("Top", "Setup: step one?", "C# and F#")),
                       ("See Other Note the other", ("Top", "See [[Other Note|the other]]"))):
        assert localrag._match_heading(doc, link)[0].heading_path == path, link
    with pytest.raises(LookupError):
        localrag._match_heading(doc, "Setup step two")


def test_whole_note_and_section_come_from_the_database(ingested):
    config, vault, _ = ingested
    note = localrag.get_note(config, NOTE)
    assert note["path"] == NOTE and note["heading_path"] == [] and note["vault_path"] == str(vault.resolve())
    assert note["content"] == file_lines(vault, NOTE, note["line_start"], note["line_end"]).strip()
    assert "support" in note["tags"] and note["open"] == "localrag show 'policies/Support Escalation Policy.md'"
    sections = {tuple(s["heading_path"]): s for s in note["sections"]}
    p1 = sections[("客户支持升级政策", "P1 工单升级流程")]
    section = localrag.get_note(config, NOTE, "P1 工单升级流程")
    assert (section["line_start"], section["line_end"]) == (p1["line_start"], p1["line_end"])
    assert section["content"].startswith("## P1 工单升级流程")
    assert section["content"] == file_lines(vault, NOTE, section["line_start"], section["line_end"]).strip()
    # heading path form, case folding, the .md left out
    assert localrag.get_note(config, NOTE[:-3], "客户支持升级政策#P1 工单升级流程")["line_start"] == p1["line_start"]
    # the top heading's section includes its subsections: the whole body here
    top = localrag.get_note(config, NOTE, "客户支持升级政策")
    assert "## P1 工单升级流程" in top["content"]
    # the disk copy is not read: delete it and the note is still there
    assert note["on_disk"] == "unchanged"
    (vault / NOTE).unlink()
    gone = localrag.get_note(config, NOTE, "P1 工单升级流程")
    assert gone["content"] == section["content"] and gone["on_disk"] == "missing"


def test_a_whole_note_lists_its_links_and_backlinks(ingested, tmp_path, capsys):
    """Links were stored and resolved but only counted: `show`, GET /notes and the MCP tool now give a whole note's
    links (in order, each with the note it leads to, or null) and the notes linking to it (a review's finding).  A
    section has neither; a link to a missing note leads nowhere; a note's links to itself are no backlinks."""
    config, vault, _ = ingested
    note = localrag.get_note(config, NOTE)
    leads = {link["target"]: link["path"] for link in note["links"]}
    assert leads["On-call Rotation"] == "engineering/On-call Rotation.md"
    assert leads["API Latency Runbook"] == "runbooks/API Latency Runbook.md"
    assert note["links_total"] == len(note["links"]) >= 4
    back = {b["path"]: b["links"] for b in note["backlinks"]}
    assert "00-index.md" in back and "hr/Onboarding Guide.md" in back and NOTE not in back
    assert note["backlinks_total"] == len(back) and all(n >= 1 for n in back.values())
    assert "links" not in localrag.get_note(config, NOTE, "P1 工单升级流程")
    extra = tmp_path / "linked"
    extra.mkdir()
    (extra / "a.md").write_text("# A\n\nSee [[b]], [[Nowhere]] and [[a#A|myself]].\n", encoding="utf-8")
    (extra / "b.md").write_text("# B\n\nBack to [[a]].\n", encoding="utf-8")
    localrag.ingest(config, extra)
    a = localrag.get_note(config, "a.md", vault=str(extra))
    assert [(link["target"], link["path"]) for link in a["links"]] == [("b", "b.md"), ("Nowhere", None), ("a", "a.md")]
    assert a["backlinks"] == [{"path": "b.md", "links": 1}] and a["backlinks_total"] == 1
    assert run_cli("show", "a.md", "--vault", str(extra))[0] == 0
    err = capsys.readouterr().err
    assert "links to: a.md, b.md" in err and "links to (not in the vault): Nowhere" in err
    assert "linked from: b.md" in err


def test_a_note_edited_since_it_was_indexed_says_so(ingested, capsys):
    """`show` between an edit and the next ingest printed the indexed text with its old line numbers and no word
    that the file had changed (a review's finding): on_disk says it, and `show` says it on stderr.  A file only
    touched (a new time, the same bytes) is unchanged."""
    config, vault, _ = ingested
    path = vault / NOTE
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert localrag.get_note(config, NOTE)["on_disk"] == "unchanged"
    assert run_cli("show", NOTE)[0] == 0 and "changed since it was indexed" not in capsys.readouterr().err
    path.write_text(path.read_text(encoding="utf-8").replace("## P1 工单升级流程", "A new line.\n\n## P1 工单升级流程", 1),
                    encoding="utf-8")
    note = localrag.get_note(config, NOTE, "P1 工单升级流程")
    assert note["on_disk"] == "changed"
    assert run_cli("show", f"{NOTE}#P1 工单升级流程")[0] == 0
    err = capsys.readouterr().err
    assert "note: the file changed since it was indexed" in err and "ingest" in err
    localrag.ingest(config, vault)
    after = localrag.get_note(config, NOTE, "P1 工单升级流程")
    assert after["on_disk"] == "unchanged" and after["line_start"] == note["line_start"] + 2


@pytest.mark.parametrize("path,heading,error,field", [
    ("../secrets.md", None, "invalid_request", "path"),
    ("policies/../../x.md", None, "invalid_request", "path"),
    ("/etc/passwd", None, "invalid_request", "path"),
    ("", None, "invalid_request", "path"),
    ("nowhere/Unknown Note.md", None, "note_not_found", None),
    (NOTE, "No Such Heading", "note_not_found", None),
    (NOTE, "##", "invalid_request", "heading"),
    (NOTE, 42, "invalid_request", "heading"),
])
def test_bad_note_requests(ingested, path, heading, error, field):
    config, _, _ = ingested
    with pytest.raises(localrag.LocalRagError) as info:
        localrag.get_note(config, path, heading)
    assert info.value.code == error, info.value.message
    if field:
        assert info.value.details["field"] == field
    if heading and error == "note_not_found":
        assert "P1 工单升级流程" in info.value.message   # the hint lists the note's headings


def test_an_empty_heading_reads_the_whole_note(ingested):
    """A citation of a note's opening text has heading '' and heading_path []: passed on as it is, it reads the
    note (it was an error without a way out)."""
    config, _, _ = ingested
    assert localrag.get_note(config, NOTE, "")["content"] == localrag.get_note(config, NOTE)["content"]
    assert localrag.get_note(config, NOTE, "  ")["heading_path"] == []


def test_an_empty_heading_line_names_no_section_of_its_own(ingested, tmp_path):
    """'##' alone in a note: its text is cited at the heading above, and reading that heading gives the one section,
    not three sections of the same name (the empty headings were listed and matched under their parent's path)."""
    config, _, _ = ingested
    vault = tmp_path / "empty-headings"
    vault.mkdir()
    (vault / "e.md").write_text("# Empty Headings\n\n##\n\nDugong text here.\n\n## \n\n### Real\n\nManatee text.\n",
                                encoding="utf-8")
    localrag.ingest(config, vault)
    whole = localrag.get_note(config, "e.md", vault=str(vault))
    assert [s["heading_path"] for s in whole["sections"]] == [["Empty Headings"], ["Empty Headings", "Real"]]
    top = localrag.get_note(config, "e.md", "Empty Headings", vault=str(vault), line=5)
    assert top["also_matched"] == [] and "Dugong" in top["content"] and "Manatee" in top["content"]
    assert localrag.get_note(config, "e.md", vault=str(vault), line=11)["heading_path"] == ["Empty Headings", "Real"]


def test_unknown_path_hints_at_similar_notes(ingested):
    config, _, _ = ingested
    with pytest.raises(localrag.NoteNotFound) as info:
        localrag.get_note(config, "Support Escalation Policy.md")
    assert NOTE in info.value.details["similar"] and info.value.http_status == 404


def test_a_heading_renamed_a_little_or_mistyped_is_suggested(ingested):
    """`show PATH#OLD_HEADING` after a heading was renamed a little ("P1 工单升级" for "P1 工单升级流程") or with a typo:
    the closest headings are named, as a file name's are; a heading like none of them gets no suggestion."""
    config, _, _ = ingested
    for asked in ("P1 工单升级", "客户支持升级政策 > p1 工单升级流", "Glossary 术语表"):
        with pytest.raises(localrag.NoteNotFound) as info:
            localrag.get_note(config, NOTE, asked)
        similar = info.value.details["similar"]
        assert similar and similar[0].endswith(("P1 工单升级流程", "术语表（Glossary）")), (asked, similar)
        assert f"similar: {similar[0]!r}" in info.value.message
    with pytest.raises(localrag.NoteNotFound) as info:
        localrag.get_note(config, NOTE, "Quarterly revenue")
    assert info.value.details["similar"] == [] and "similar:" not in info.value.message


def test_absolute_path_inside_the_vault_is_accepted(ingested):
    config, vault, _ = ingested
    assert localrag.get_note(config, str(vault.resolve() / NOTE))["path"] == NOTE


def test_list_notes_pages_and_filters(ingested):
    config, _, _ = ingested
    everything = localrag.list_notes(config)
    assert everything["total"] == 13 and everything["next_offset"] is None
    paths = [n["path"] for n in everything["notes"]]
    assert paths == sorted(paths)
    page = localrag.list_notes(config, limit=5, offset=5)
    assert [n["path"] for n in page["notes"]] == paths[5:10] and page["next_offset"] == 10
    tagged = localrag.list_notes(config, tag="#support")
    assert NOTE in [n["path"] for n in tagged["notes"]]
    assert localrag.list_notes(config, tag="sre")["total"] >= 1          # nested tag sre/oncall
    assert localrag.list_notes(config, prefix="policies/")["total"] == 2
    assert localrag.list_notes(config, prefix="100%_")["total"] == 0   # LIKE wildcards are literal
    for bad in ({"limit": 0}, {"limit": 1000}, {"offset": -1}, {"prefix": "../"}):
        with pytest.raises(localrag.InvalidRequest):
            localrag.list_notes(config, **bad)
    # a note's title is the one search results and citations give it (frontmatter title, else the file name), not
    # its first heading: an agent that lists notes and then searches by title had two names for one note
    hits = localrag.search(config, "P1 工单应该怎么升级", top_k=5)["results"]
    listed = {n["path"]: n["title"] for n in everything["notes"]}
    assert all(listed[r["source"]] == r["title"] for r in hits)


def test_a_note_with_only_frontmatter_is_found_listed_and_shown(db, tmp_path):
    """It had no chunk: search did not find it, a tag filter did not list it, and show named line 6 of 5."""
    from conftest import write_vault
    vault = tmp_path / "v"
    text = "---\ntitle: Only Frontmatter Ferret\ntags: [ferret]\ndescription: The ferret note has only properties.\n---\n"
    write_vault(vault, {"fm-only.md": text, "other.md": "# Other\nNothing about small mammals here.\n"})
    assert localrag.ingest(db, vault)["status"] == "success"
    top = localrag.search(db, "ferret description properties")["results"][0]
    assert top["source"] == "fm-only.md" and (top["line_start"], top["line_end"]) == (2, 4)
    assert top["content"] == file_lines(vault, "fm-only.md", 2, 4)
    listed = localrag.list_notes(db, tag="ferret")["notes"]
    assert [(n["path"], n["title"], n["tags"]) for n in listed] == [("fm-only.md", "Only Frontmatter Ferret", ["ferret"])]
    note = localrag.get_note(db, "fm-only.md")
    assert (note["line_start"], note["line_end"]) == (2, 4) and note["tags"] == ["ferret"]


def test_a_canvas_citation_names_a_card_that_show_opens(db, tmp_path, capsys):
    """Citations named a card by its node id (`board.canvas › n1`), which `show 'board.canvas#n1'` refused (exit
    13); group and edge labels were not indexed at all.  Now every card's name is what search prints and what
    show opens, by get_note and by the `open:` command."""
    from conftest import write_vault
    vault = tmp_path / "v"
    nodes = [{"id": "n1", "type": "text", "text": "Plain node about the kudu."},
             {"id": "t1", "type": "text", "text": "# Canvas Heading\nNode with heading about the impala."},
             {"id": "g1", "type": "group", "label": "Group about the nyala"}]
    write_vault(vault, {"board.canvas": json.dumps({"nodes": [dict(n, x=0, y=0, width=1, height=1) for n in nodes],
                                                    "edges": [{"id": "e1", "fromNode": "n1", "toNode": "t1",
                                                               "label": "edge label about the eland"}]})})
    assert localrag.ingest(db, vault)["status"] == "success"
    expect = {"kudu": "Plain node about the kudu.", "impala": "Canvas Heading", "nyala": "Group about the nyala",
              "eland": "edge label about the eland"}
    for word, heading in expect.items():
        top = localrag.search(db, word)["results"][0]
        assert (top["source"], top["heading_path"]) == ("board.canvas", [heading]) and word in top["content"]
        section = localrag.get_note(db, top["source"], top["heading"])
        assert section["heading_path"] == [heading] and section["content"] == top["content"]
    assert [s["heading_path"] for s in localrag.get_note(db, "board.canvas")["sections"]] == \
        [[h] for h in expect.values()]
    code, out = run_cli("show", "board.canvas#Canvas Heading")
    assert code == 0 and out.startswith("# Canvas Heading\nNode with heading about the impala.")


def test_documents_indexed_before_bodies_were_stored_are_refilled(ingested):
    config, vault, _ = ingested
    with localrag.Store.open(config) as s:
        s.run("UPDATE documents SET body = NULL, body_line = NULL")
    with pytest.raises(localrag.NoteNotFound, match="rerun"):
        localrag.get_note(config, NOTE)
    result = localrag.ingest(config, vault)
    assert result["documents_updated"] == 13
    assert localrag.get_note(config, NOTE)["content"]


def test_citations_and_results_carry_evidence_and_lines(ingested):
    config, vault, _ = ingested
    answer = localrag.ask(config, "客户 P1 工单应该怎么升级？")
    assert answer["mode"] == "rag"
    for n, c in enumerate(answer["citations"], 1):
        assert c["n"] == n and c["heading_path"][-1] == c["heading"]
        text = file_lines(vault, c["source"], c["line_start"], c["line_end"])
        assert c["content"].replace(localrag.TRUNCATED_MARK, "").strip()[:40] in text
    for r in localrag.search(config, "P1 工单升级", 5)["results"]:
        assert r["content"] == file_lines(vault, r["source"], r["line_start"], r["line_end"]).strip()


def test_a_long_text_comes_a_page_at_a_time_in_whole_lines(ingested):
    """max_chars pages through a note (or a section): each page ends after a whole line, points at its own file
    lines, and the pages put together are the whole text; the MCP tool pages by default, a person's show does not."""
    config, vault, _ = ingested
    whole = localrag.get_note(config, NOTE)
    assert whole["content_chars"] == len(whole["content"]) and whole["char_offset"] == 0
    assert whole["next_char_offset"] is None
    for heading in (None, "P1 工单升级流程"):
        full = localrag.get_note(config, NOTE, heading)["content"]
        pages, offset = [], 0
        while offset is not None:
            page = localrag.get_note(config, NOTE, heading, max_chars=120, char_offset=offset)
            assert page["content_chars"] == len(full) and page["char_offset"] == offset
            assert len(page["content"]) <= 120 and page["content"].strip()
            lines = file_lines(vault, NOTE, page["line_start"], page["line_end"])
            assert page["content"].strip() in lines      # the lines the page starts and ends in
            if page["next_char_offset"] is not None and "\n" in page["content"]:   # ends after a whole line
                assert full[page["next_char_offset"] - 1] == "\n"
                assert lines.strip().endswith(page["content"].strip())
            pages.append(full[offset:page["next_char_offset"]])
            offset = page["next_char_offset"]
        assert len(pages) > 2 and "".join(pages) == full
    assert localrag.get_note(config, NOTE, max_chars=10**6) == whole
    one_line = localrag.get_note(config, NOTE, max_chars=3)          # a line longer than the page is cut inside
    assert one_line["content"] == whole["content"][:3] and one_line["next_char_offset"] == 3
    tool = localrag._mcp_tools()["get_note"]
    assert tool.run(config, None, path=NOTE) == whole                # shorter than the tool's default page
    assert tool.run(config, None, path=NOTE, max_chars=50)["next_char_offset"] is not None
    assert tool.definition()["inputSchema"]["properties"]["max_chars"]["maximum"] == localrag.NOTE_CHARS_MAX


@pytest.mark.parametrize("kw,field", [
    ({"max_chars": 0}, "max_chars"), ({"max_chars": localrag.NOTE_CHARS_MAX + 1}, "max_chars"),
    ({"max_chars": "10"}, "max_chars"), ({"max_chars": True}, "max_chars"), ({"char_offset": -1}, "char_offset"),
    ({"char_offset": 10**7}, "char_offset"), ({"char_offset": 1.5}, "char_offset"),
])
def test_note_page_bad_input(ingested, kw, field):
    config, _, _ = ingested
    # an offset past the end is a page that is not there (404); the others are malformed (422)
    error = localrag.NoteNotFound if kw.get("char_offset") == 10**7 else localrag.InvalidRequest
    with pytest.raises(error) as info:
        localrag.get_note(config, NOTE, **kw)
    assert info.value.details["field"] == field and str(kw[field]) in str(info.value)


@pytest.mark.parametrize("target, split", [
    ("policies/Support Escalation Policy.md#P1 工单升级流程", ("policies/Support Escalation Policy.md", "P1 工单升级流程")),
    ("C# Notes.md#C Sharp#Basics", ("C# Notes.md", "C Sharp#Basics")),
    ("C# Notes.md", ("C# Notes.md", None)),
    ("F#/Board.canvas#Plan", ("F#/Board.canvas", "Plan")),
    ("notes/plain#Heading", ("notes/plain", "Heading")),          # no extension: the first '#'
    ("notes/plain", ("notes/plain", None)),
])
def test_show_target_splits_after_the_extension(target, split):
    assert localrag._split_show_target(target) == split


def test_open_commands_reach_the_cited_section_with_hash_names_and_repeated_headings(ingested, tmp_path, capsys):
    """A '#' in a file name or heading, and a heading the note repeats: the command a citation prints shows the
    cited section (it showed the first 'Setup', or failed with 'no indexed note C')."""
    import shlex
    config, _, _ = ingested
    vault = tmp_path / "hash-vault"
    vault.mkdir()
    (vault / "C# Notes.md").write_text("# C Sharp\n\nIntro.\n\n## Using C# and F#\n\nThe axolotl compiler builds both languages on "
                                       "every push.\n",
                                       encoding="utf-8")
    (vault / "dup.md").write_text("# Duplicates\n\n## Setup\n\nThe alpaca barn.\n\n## Usage\n\nText.\n\n"
                                  "## Setup\n\nThe llama barn needs hay.\n", encoding="utf-8")
    assert localrag.ingest(config, vault)["status"] == "success"
    for question, wanted in (("What does the llama barn need?", "The llama barn needs hay."),
                             ("What does the axolotl compiler build?", "The axolotl compiler builds")):
        response = localrag.ask(config, question, vault=str(vault))
        assert response["mode"] == "rag", response["reason"]
        c = response["citations"][0]
        command = localrag._show_command(c["source"], c["heading_path"], None, c["line_end"])   # as the CLI prints it
        code, out = run_cli(*shlex.split(command)[1:], "--vault", str(vault), "--json")
        shown = json.loads(out)
        assert code == 0 and wanted in shown["content"] and shown["heading_path"] == c["heading_path"], command
    run_cli("show", "dup.md#Setup", "--vault", str(vault))
    assert "1 more section(s) have this heading; --line N" in capsys.readouterr().err
    second = localrag.get_note(config, "dup.md", "Setup", vault=str(vault), line=13)
    assert "llama" in second["content"] and second["also_matched"] == [["Duplicates", "Setup"]]
    assert second["open"].endswith(f"--line {second['line_start']}")      # the repeated heading needs the line
    assert "alpaca" in localrag.get_note(config, "dup.md", "Setup", vault=str(vault))["content"]
    assert localrag.get_note(config, "dup.md", vault=str(vault), line=5)["heading_path"] == ["Duplicates", "Setup"]
    assert localrag.get_note(config, "dup.md", vault=str(vault), line=1)["heading_path"] == ["Duplicates"]
    assert "--line" not in localrag.get_note(config, "C# Notes.md", "Using C# and F#", vault=str(vault))["open"]
    # the PATH#HEADING form `open:` prints, given whole as the path (as an agent copies it), reads the section
    assert localrag.get_note(config, "C# Notes.md#Using C# and F#", vault=str(vault))["heading_path"] == [
        "C Sharp", "Using C# and F#"]
    # a line that picks nothing is an error, not silently the first section or the whole note
    for kw, says in (({"heading": "Setup", "line": 9}, "not inside a section named 'Setup' (lines 3-5, 11-13)"),
                     ({"line": 100}, "outside the note's text (lines 1-13)")):
        with pytest.raises(localrag.NoteNotFound) as info:    # 404, as for a heading the note lacks
            localrag.get_note(config, "dup.md", vault=str(vault), **kw)
        assert says in str(info.value) and info.value.details["field"] == "line"



def test_a_pdf_or_canvas_has_no_file_line_to_pick(db, tmp_path):
    """line on a PDF or a canvas is refused (422, field line) whatever the heading, one the note lacks included:
    its pages and cards are no lines of its file, so a line could pick nothing."""
    from conftest import make_pdf, write_vault
    vault = tmp_path / "v"
    card = {"id": "n1", "type": "text", "text": "The kudu card.", "x": 0, "y": 0, "width": 1, "height": 1}
    write_vault(vault, {"board.canvas": json.dumps({"nodes": [card], "edges": []})})
    (vault / "manual.pdf").write_bytes(make_pdf(["Intro page", "Torque spec page"]))
    assert localrag.ingest(db, vault)["status"] == "success"
    for path, heading in (("manual.pdf", None), ("manual.pdf", "page 2"), ("manual.pdf", "No Such Page"),
                          ("board.canvas", None), ("board.canvas", "No Such Card")):
        with pytest.raises(localrag.InvalidRequest) as info:
            localrag.get_note(db, path, heading, line=1)
        assert info.value.details == {"field": "line"} and "no file lines" in info.value.message, (path, heading)
    assert localrag.get_note(db, "manual.pdf", "page 2")["content"] == "Torque spec page"


def test_a_char_offset_at_the_end_of_the_text_is_no_page(ingested):
    """The last page starts before the end: char_offset == the text's length is past it (404), for the whole note
    and for a section alike; one character less is the last character."""
    config, _, _ = ingested
    for heading in (None, "P1 工单升级流程"):
        text = localrag.get_note(config, NOTE, heading)["content"]
        last = localrag.get_note(config, NOTE, heading, char_offset=len(text) - 1)
        assert (last["content"], last["next_char_offset"]) == (text[-1], None)
        with pytest.raises(localrag.NoteNotFound) as info:
            localrag.get_note(config, NOTE, heading, char_offset=len(text))
        assert info.value.details == {"path": NOTE, "field": "char_offset"}
        assert f"({len(text):,} characters)" in info.value.message


def test_which_get_note_error_wins_when_several_apply(ingested):
    """The arguments are checked first (max_chars, line, char_offset, heading, vault), before the note is looked up;
    then the line, the heading, and last the page asked for: the error names what is at fault first."""
    config, _, _ = ingested
    whole = localrag.get_note(config, NOTE)
    section = localrag.get_note(config, NOTE, "P1 工单升级流程")
    assert whole["line_start"] < section["line_start"]      # the note's first line is outside the section
    long_heading = "x" * (localrag.NOTE_PATH_MAX_CHARS + 1)
    invalid = [({"max_chars": 0, "line": 0, "char_offset": -1, "heading": 42, "vault": 7}, "max_chars"),
               ({"line": 0, "char_offset": -1, "heading": 42, "vault": 7}, "line"),
               ({"char_offset": -1, "heading": 42, "vault": 7}, "char_offset"),
               ({"heading": long_heading, "vault": 7}, "heading"),
               ({"heading": "##", "vault": 7}, "heading"),
               ({"vault": 7}, "vault")]
    for kw, field in invalid:
        with pytest.raises(localrag.InvalidRequest) as info:
            localrag.get_note(config, "nowhere/Unknown Note.md", **kw)
        assert info.value.details["field"] == field, kw
    not_found = [({"heading": "No Such Heading", "line": 10**6, "char_offset": 10**7}, "line", "outside the note"),
                 ({"heading": "No Such Heading", "char_offset": 10**7}, None, "has no heading"),
                 ({"heading": "P1 工单升级流程", "line": whole["line_start"], "char_offset": 10**7}, "line",
                  "not inside a section named"),
                 ({"line": whole["line_start"], "char_offset": 10**7}, "char_offset", "past the end")]
    for kw, field, says in not_found:
        with pytest.raises(localrag.NoteNotFound) as info:
            localrag.get_note(config, NOTE, **kw)
        assert info.value.details.get("field") == field and says in info.value.message, (kw, info.value.message)
    # PATH# (an `open:` target with its heading cut off) is the whole note
    assert localrag.get_note(config, NOTE + "#") == whole

# --- CLI -------------------------------------------------------------------------------------------------------------

def test_show_prints_a_section_and_json(ingested, capsys):
    code, out = run_cli("show", NOTE + "#P1 工单升级流程")
    assert code == 0 and out.startswith("## P1 工单升级流程")
    assert "P1 工单升级流程" in capsys.readouterr().err
    code, out = run_cli("show", NOTE + "#P1 工单升级流程", "--json")
    data = json.loads(out)
    assert code == 0 and data["heading_path"] == ["客户支持升级政策", "P1 工单升级流程"] and data["line_start"] > 1
    code, out = run_cli("show", "--list", "--prefix", "policies/", "--json")
    assert code == 0 and json.loads(out)["total"] == 2
    capsys.readouterr()
    code, out = run_cli("show", NOTE, "--max-chars", "100")
    err = capsys.readouterr().err
    page = localrag.get_note(localrag.load_config(), NOTE, max_chars=100)
    assert code == 0 and out.strip() == page["content"]
    assert f"next page: --char-offset {page['next_char_offset']}" in err
    code, out = run_cli("show", NOTE, "--max-chars", "100", "--char-offset", str(page["next_char_offset"]), "--json")
    assert code == 0 and json.loads(out)["char_offset"] == page["next_char_offset"]
    code, out = run_cli("show", "--list", "--max-chars", "100", "--json")
    assert code == localrag.EXIT_USAGE and json.loads(out)["error"]["details"]["field"] == "max_chars"


@pytest.mark.parametrize("target,code,error", [
    ("../x.md", localrag.EXIT_USAGE, "invalid_request"),
    ("/etc/passwd", localrag.EXIT_USAGE, "invalid_request"),
    ("elsewhere/none.md", localrag.EXIT_NOT_FOUND, "note_not_found"),
    (NOTE + "#No Such Heading", localrag.EXIT_NOT_FOUND, "note_not_found"),
])
def test_show_bad_input(ingested, target, code, error):
    got, out = run_cli("show", target, "--json")
    assert got == code and json.loads(out)["error"]["code"] == error


def test_ask_human_output_names_the_command_that_opens_each_source(ingested):
    code, out = run_cli("ask", "客户 P1 工单应该怎么升级？")
    assert code == 0
    opens = [line.split("open: ", 1)[1] for line in out.splitlines() if line.strip().startswith("open: ")]
    assert opens and opens[0].startswith("localrag show ")
    import shlex
    target = shlex.split(opens[0])[2]
    code, section = run_cli("show", target)
    assert code == 0 and section.strip()


# --- HTTP ------------------------------------------------------------------------------------------------------------

@pytest.fixture
def http(ingested):
    import threading
    config, vault, _ = ingested
    srv = localrag.make_server(config, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()

    def get(path: str):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=30)
        conn.request("GET", path)
        resp = conn.getresponse()
        out = resp.status, json.loads(resp.read() or b"null")
        conn.close()
        return out

    yield get
    srv.shutdown()
    srv.server_close()
    srv.api.pool.close()
    thread.join(10)


def test_get_notes(http):
    import urllib.parse
    q = urllib.parse.quote
    status, body = http(f"/notes?path={q(NOTE)}&heading={q('P1 工单升级流程')}")
    assert status == 200 and body["heading_path"][-1] == "P1 工单升级流程"
    assert body == localrag.get_note(localrag.load_config(), NOTE, "P1 工单升级流程")
    status, body = http(f"/notes?path={q(NOTE)}&max_chars=80&char_offset=0")
    assert status == 200 and body == localrag.get_note(localrag.load_config(), NOTE, max_chars=80, char_offset=0)
    assert body["next_char_offset"] is not None
    status, body = http("/notes/list?prefix=policies/&limit=1")
    assert status == 200 and body["total"] == 2 and body["next_offset"] == 1
    for path, code, error in ((f"/notes?path={q('../x.md')}", 422, "invalid_request"),
                              (f"/notes?path={q('/etc/passwd')}", 422, "invalid_request"),
                              (f"/notes?path={q('nope/none.md')}", 404, "note_not_found"),
                              (f"/notes?path={q(NOTE)}&heading=Nope", 404, "note_not_found"),
                              ("/notes/list?limit=abc", 422, "invalid_request"),
                              ("/notes", 422, "invalid_request"),
                              ("/notes?path=a&path=b", 422, "invalid_request"),
                              ("/notes?path=a.md&limit=3", 422, "invalid_request"),
                              (f"/notes?path={q(NOTE)}&max_chars=x", 422, "invalid_request"),
                              (f"/notes?path={q(NOTE)}&max_chars=0", 422, "invalid_request"),
                              # int() reads Arabic-Indic and fullwidth digits; a number is written with 0-9
                              (f"/notes?path={q(NOTE)}&max_chars={q(chr(0xFF18) + '0')}", 422, "invalid_request"),
                              (f"/notes/list?limit={q(chr(0x0663))}", 422, "invalid_request"),
                              ("/notes/list?limit=1_0", 422, "invalid_request"),
                              ("/notes/list?color=red", 422, "invalid_request")):
        status, body = http(path)
        assert status == code and body["error"]["code"] == error, (path, body)
    status, body = http(f"/notes?path={q('nope/none.md')}")
    assert "GET /notes/list" in body["error"]["message"]


def test_a_bad_notes_list_value_is_invalid_request_not_a_database_error(http, capfd):
    """`/notes/list?prefix=%00` (and tag=%00) and `offset=99999999999999999999` reached Postgres and came back as
    500 database_error (show --list: exit 4), where the same inputs elsewhere are 422 invalid_request; and
    `show --list --tag ""` listed every note, where `search --tag ""` is refused."""
    for path, field in (("/notes/list?prefix=%00", "prefix"), ("/notes/list?prefix=a%00b", "prefix"),
                        ("/notes/list?tag=%00", "tag"), ("/notes/list?tag=a%00", "tag"),
                        ("/notes/list?offset=99999999999999999999", "offset"),
                        (f"/notes/list?offset={localrag.ANSWER_ID_MAX + 1}", "offset"), ("/notes/list?tag=%23", "tag")):
        status, body = http(path)
        assert (status, body["error"]["code"], body["error"]["details"]["field"]) == (422, "invalid_request", field), \
            (path, body)
    status, body = http(f"/notes/list?offset={localrag.ANSWER_ID_MAX}")
    assert status == 200 and body["notes"] == []
    for args, field in ((["--offset", "99999999999999999999"], "offset"), (["--tag", ""], "tag")):
        code, out = run_cli("show", "--list", *args, "--json")
        assert (code, json.loads(out)["error"]["details"]["field"]) == (localrag.EXIT_USAGE, field)
    code, out = run_cli("history", "show", "99999999999999999999999", "--json")
    assert code == localrag.EXIT_USAGE and f"from 1 to {localrag.ANSWER_ID_MAX}" in json.loads(out)["error"]["message"]
    capfd.readouterr()


def test_vault_argument_is_matched_in_its_stored_form(ingested, monkeypatch):
    config, vault, _ = ingested
    monkeypatch.chdir(vault.parent)
    assert localrag.get_note(config, NOTE, vault=f"./{vault.name}/")["vault_path"] == str(vault.resolve())
    assert localrag.list_notes(config, vault=f"./{vault.name}")["total"] == 13
    with pytest.raises(localrag.VaultNotIndexed):
        localrag.get_note(config, NOTE, vault="/nowhere/else")


def test_with_two_vaults_citations_name_their_vault_and_every_open_command_works(ingested, tmp_path):
    """The same note in two vaults (a copy): citations and closest notes carry vault_path, the CLI's `open:` commands
    name the vault (the path alone is ambiguous) and each one works; the ambiguity error names `--vault`."""
    import shlex
    import shutil
    config, vault, _ = ingested
    copy = tmp_path / "copy-of-vault"
    shutil.copytree(vault, copy)
    assert localrag.ingest(config, copy)["status"] == "success"
    response = localrag.ask(config, "客户 P1 工单应该怎么升级？")
    assert response["citations"] and all(c["vault_path"] in (str(vault.resolve()), str(copy.resolve()))
                                         for c in response["citations"])
    code, out = run_cli("ask", "客户 P1 工单应该怎么升级？")
    opens = [line.split("open: ", 1)[1] for line in out.splitlines() if line.strip().startswith("open: ")]
    assert opens and all(" --vault " in o for o in opens)
    for o in opens:
        assert run_cli("show", *shlex.split(o)[2:])[0] == 0, o
    code, out = run_cli("ask", "What is the price of Atlas CRM Enterprise?")
    closest = [line.split("open: ", 1)[1] for line in out.splitlines() if line.strip().startswith("open: ")]
    assert closest and all(" --vault " in o for o in closest)
    with pytest.raises(localrag.InvalidRequest, match="several vaults; name one with vault .`--vault` on the "):
        localrag.get_note(config, NOTE)
    assert localrag.get_note(config, NOTE, vault=str(copy))["open"] == \
        f"localrag show 'policies/Support Escalation Policy.md' --vault {shlex.quote(str(copy.resolve()))}"


def test_a_vault_that_is_not_indexed_and_a_misspelt_path(ingested, tmp_path):
    """get_note and list_notes name an unknown vault as such (list_notes answered an empty page, get_note
    'no such note, similar: <the same path>'); status lists the vaults to choose from; a one-letter typo in a
    path gets the note as a suggestion (only substrings did)."""
    config, vault, _ = ingested
    for call in (lambda: localrag.get_note(config, NOTE, vault=str(tmp_path / "nope")),
                 lambda: localrag.list_notes(config, vault=str(tmp_path / "nope"))):
        with pytest.raises(localrag.VaultNotIndexed, match=f"indexed: {vault.resolve()}"):
            call()
    assert localrag.health(config)["details"]["vaults"] == [str(vault.resolve())]
    with pytest.raises(localrag.NoteNotFound) as err:
        localrag.get_note(config, "policies/Support Escalaton Policy.md")
    assert err.value.details["similar"] == [NOTE]


def test_a_note_whose_file_name_is_not_utf8_opens_by_the_name_the_tool_prints(db, tmp_path):
    """b'caf\\xe9.md' is indexed as caf\\xe9.md (the byte as \\xNN), and results, citations and `open:` commands print
    that name; but show, --path, GET /notes?path= and get_note took its backslash for a Windows separator
    (caf/xe9.md: no such note), and refused the name's own bytes on the command line.  Both reach the note now."""
    import os
    import shlex
    import subprocess
    import sys
    import urllib.parse
    import urllib.request
    from conftest import ROOT, serving
    root = tmp_path / "latin1"
    os.makedirs(os.fsencode(root) + b"/caf\xe9 dir")
    with open(os.fsencode(root) + b"/caf\xe9.md", "wb") as f:
        f.write(b"# Cafe\n\n## Menu\n\nThe espresso machine needs descaling every week.\n")
    with open(os.fsencode(root) + b"/caf\xe9 dir/n\xff.md", "wb") as f:
        f.write(b"# Other\n\nThe grinder burrs wear out yearly.\n")
    assert localrag.ingest(db, root)["status"] == "success"
    code, out = run_cli("search", "espresso descaling", "--json")
    top = json.loads(out)["results"][0]
    assert code == 0 and top["relative_path"] == top["source"] == "caf\\xe9.md"
    command = localrag._show_command(top["source"], top["heading_path"])     # the `open:` line
    assert command == "localrag show 'caf\\xe9.md#Cafe#Menu'"
    code, out = run_cli(*shlex.split(command)[1:], "--json")
    assert code == 0 and json.loads(out)["content"].endswith("descaling every week.")
    code, out = run_cli("search", "grinder", "--path", "caf\\xe9 dir/", "--json")
    assert code == 0 and [r["source"] for r in json.loads(out)["results"]] == ["caf\\xe9 dir/n\\xff.md"]
    assert [n["path"] for n in localrag.list_notes(db, prefix="caf\\xe9 dir")["notes"]] == ["caf\\xe9 dir/n\\xff.md"]
    # any other backslash is still a Windows separator
    assert localrag.get_note(db, "caf\\xe9 dir\\n\\xff.md")["path"] == "caf\\xe9 dir/n\\xff.md"
    # the name's own bytes, as a shell's tab completion passes them
    for args in ([b"show", b"caf\xe9.md#Menu", b"--json"],
                 [b"search", b"grinder", b"--path", b"caf\xe9 dir/", b"--json"]):
        proc = subprocess.run([sys.executable, "-m", "localrag", *args], capture_output=True, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        body = json.loads(proc.stdout)
        assert body.get("path") == "caf\\xe9.md" or [r["source"] for r in body.get("results", [])] == [
            "caf\\xe9 dir/n\\xff.md"], body
    with serving(db) as base:
        url = f"{base}/notes?path=" + urllib.parse.quote("caf\\xe9.md") + "&heading=Menu"
        with urllib.request.urlopen(url) as resp:
            assert json.loads(resp.read())["content"].endswith("descaling every week.")
    mcp = localrag.McpServer(db)
    mcp.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    reply = mcp.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "get_note", "arguments": {"path": "caf\\xe9 dir/n\\xff.md"}}})
    mcp.pool.close()
    assert not reply["result"].get("isError") and "grinder burrs" in json.dumps(reply["result"]), reply


def test_a_decomposed_file_name_is_found_by_the_name_as_typed(db, tmp_path):
    """A vault copied from a Mac names "Café Menü.md" decomposed (NFD): show, --path and [[Café Menü]] (all
    composed, as typed) missed it, and no "similar" hint named it (an outside review).  Names are stored composed;
    the file is still read under its own name, and a decomposed name typed (pasted from `ls`) reaches it too."""
    import unicodedata
    nfd = unicodedata.normalize("NFD", "Café Menü")
    root = tmp_path / "mac"
    (root / nfd).mkdir(parents=True)
    (root / nfd / f"{nfd}.md").write_text("# Menü\n\nThe nfdword espresso costs two euros.\n", encoding="utf-8")
    (root / "linker.md").write_text("# Linker\n\nSee [[Café Menü]] for food.\n", encoding="utf-8")
    result = localrag.ingest(db, root)
    assert result["status"] == "success" and result["links"] == {"resolved": 1, "unresolved": 0}
    listed = [n["path"] for n in localrag.list_notes(db)["notes"]]
    assert "Café Menü/Café Menü.md" in listed and all(p == unicodedata.normalize("NFC", p) for p in listed)
    for typed in ("Café Menü/Café Menü.md", f"{nfd}/{nfd}.md"):
        assert localrag.get_note(db, typed)["content"].endswith("costs two euros.")
    for prefix in ("Café Menü/", f"{nfd}/"):
        hits = localrag.search(db, "nfdword espresso", path=[prefix])["results"]
        assert [r["source"] for r in hits] == ["Café Menü/Café Menü.md"]


def test_a_page_from_inside_a_line_says_where_in_its_first_line_it_starts(ingested, capsys):
    """`show NOTE --char-offset 10` printed `NOTE:1-11999` for a text that starts at line 1's eleventh character
    (an outside review): the header now names that character, and column_start carries it (1 for a page that
    starts a line)."""
    config, vault, _ = ingested
    whole = localrag.get_note(config, NOTE)
    assert whole["column_start"] == 1
    lines = (vault / NOTE).read_text(encoding="utf-8").splitlines()
    text = whole["content"]
    inside = text.index("\n", 200) + 1 + 6      # six characters into a line
    for offset in (inside, text.index("\n", 200) + 1):
        page = localrag.get_note(config, NOTE, char_offset=offset, max_chars=300)
        first = page["content"].split("\n")[0]
        assert lines[page["line_start"] - 1][page["column_start"] - 1:].startswith(first)
        capsys.readouterr()
        code, out = run_cli("show", NOTE, "--char-offset", str(offset))
        header = capsys.readouterr().err.splitlines()[0]
        assert code == 0 and out.startswith(first)
        if offset == inside:
            assert page["column_start"] == 7
            assert header.endswith(f":{page['line_start']}-{whole['line_end']} (line {page['line_start']} from its "
                                   f"character 7)"), header
        else:
            assert page["column_start"] == 1 and header.endswith(f":{page['line_start']}-{whole['line_end']}")


def test_obsidian_markdown_leftovers_through_ingest_show_and_the_links_table(db, tmp_path, capsys):
    """Through ingest and the database: `show 'deep.md#H1#H3'` (H2 skipped, as Obsidian resolves a heading link)
    was note_not_found, exit 13; a heading the link names twice is shown first with each other one's command on
    stderr; a `# ` line in a `$$` block was a section, `![[chart.png|300]]` a link with alias '300', `#1️⃣` the tag
    `1️`, `aliases: a, b` one alias."""
    from conftest import write_vault
    vault = tmp_path / "v"
    write_vault(vault, {
        "deep.md": "# H1\n\nintro\n\n## H2\n\nmiddle\n\n### H3\n\nThe okapi text.\n\n# Other\n\n## A\n\n### H3\n\n"
                   "The bongo text.\n",
        "math.md": "---\naliases: Energy note, Mass note\n---\n# Math\n\n$$\n# not a heading\nE = mc^2 #notatag\n$$\n\n"
                   "## After\n\n![[chart.png|300]] ![[chart.png|Chart of mass|300x200]] ![[deep|the deep one]] #1️⃣\n"})
    assert localrag.ingest(db, vault)["status"] == "success"
    code, out = run_cli("show", "deep.md#H1#H3")
    assert code == 0 and out == "### H3\n\nThe okapi text.\n" and "more section" not in capsys.readouterr().err
    for target, text in (("deep.md#H3", "okapi"), ("deep.md#Other#H3", "bongo"), ("deep.md#other#a#h3", "bongo")):
        assert text in localrag.get_note(db, target)["content"], target
    note = localrag.get_note(db, "deep.md", "H3")
    assert note["heading_path"] == ["H1", "H2", "H3"] and note["also_matched"] == [["Other", "A", "H3"]]
    assert note["also_matched_open"] == ["localrag show 'deep.md#Other#A#H3'"]
    run_cli("show", "deep.md#H3")
    assert capsys.readouterr().err.splitlines()[0].endswith("the others: localrag show 'deep.md#Other#A#H3'")
    assert run_cli("show", "deep.md#H2#H1")[0] == localrag.NoteNotFound.exit_code   # the order matters
    shown = localrag.get_note(db, "math.md")
    assert [s["heading_path"] for s in shown["sections"]] == [["Math"], ["Math", "After"]]
    assert shown["tags"] == ["1\ufe0f\u20e3"] and localrag.list_notes(db, tag="1\ufe0f\u20e3")["total"] == 1
    with localrag.Store.open(db) as s:
        links = s.run("SELECT target, alias, embed FROM links ORDER BY id")
    assert [tuple(r) for r in links] == [("chart.png", "", True), ("chart.png", "Chart of mass", True),
                                         ("deep", "the deep one", True)]
    top = localrag.search(db, "Mass note")["results"][0]
    assert top["source"] == "math.md" and top["aliases"] == ["Energy note", "Mass note"]


def test_math_opened_in_a_line_a_videos_size_and_property_links_through_ingest(db, tmp_path):
    """Through ingest and the database: `The energy is $$` / `E = mc^2 #notatag [[NotALink]]` / `$$` made
    `show --list --tag notatag` list the note and counted NotALink among the unresolved links; `![[clip.mp4|400]]`
    was stored with the alias `400`; `up: "[[Physics index]]"` in the properties was no link."""
    from conftest import write_vault
    vault = tmp_path / "v"
    write_vault(vault, {
        "Energy.md": "---\nup: \"[[Physics index]]\"\n---\n# Physics\n\nThe energy is $$\nE = mc^2 #notatag [[NotALink]]\n$$ as Einstein wrote.\n\n"
                     "## After\n\ntext #real ![[clip.mp4|400]] ![[talk.webm|Keynote|640x360]]\n"})
    result = localrag.ingest(db, vault)
    assert result["status"] == "success" and result["links"] == {"resolved": 0, "unresolved": 3}
    assert localrag.list_notes(db, tag="notatag")["total"] == 0 and localrag.list_notes(db, tag="real")["total"] == 1
    assert [s["heading_path"] for s in localrag.get_note(db, "Energy.md")["sections"]] == [["Physics"],
                                                                                         ["Physics", "After"]]
    with localrag.Store.open(db) as s:
        links = s.run("SELECT target, alias, embed FROM links ORDER BY id")
    assert [tuple(r) for r in links] == [("Physics index", "", False), ("clip.mp4", "", True),
                                         ("talk.webm", "Keynote", True)]
