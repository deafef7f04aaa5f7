"""Markdown: frontmatter, headings from tokens (not inside code), #tags, [[wikilinks]], embeds."""

import json
import os
import re

import pytest

import localrag

DOC = """---
title: Escalation
tags: [support, "#policy/p1"]
aliases: [升级]
updated: 2026-01-05
---
# 升级政策
Intro with #inline-tag and a link [[Support Escalation Policy]].

```bash
# this is a comment, not a heading #notatag
echo "[[NotALink]]"
```

## P1 工单
See [[runbooks/API Latency Runbook|the runbook]] and [[Atlas CRM#导出限制]] and ![[diagram.png]].
A URL https://example.com/page#section is no tag, nor is `#code` or issue#12.
Nested #support/p1 and #2024 (all digits: no tag) and #中文标签.

Setext Heading
--------------
text
"""


def test_frontmatter_parsed_and_body_kept():
    doc = localrag.parse_markdown(DOC, "x.md")
    assert doc.frontmatter["title"] == "Escalation"
    assert doc.frontmatter["updated"] == "2026-01-05"  # dates become JSON-safe strings
    assert doc.body.startswith("# 升级政策")


def test_headings_ignore_code_fences_and_include_setext():
    doc = localrag.parse_markdown(DOC)
    paths = [s.heading_path for s in doc.sections]
    assert paths == [("升级政策",), ("升级政策", "P1 工单"), ("升级政策", "Setext Heading")]


CALLOUT_NOTE = """# Callout guide
Intro.

> [!note]- Folded Title
> ## Inside callout heading
> The folded body mentions zebrafish.

> [!tip] Outer
> > [!warning] Inner
> > # Deep heading
> > Nested words about kangaroos.

- ## A list item's heading
  more

## Real section
Body of the real section mentions platypus.
"""


def test_headings_inside_callouts_quotes_and_lists_are_text():
    """Obsidian's outline and heading links know top-level headings only: `> # Deep heading` inside a callout had
    been a heading, so every section after the callout was cited under 'Deep heading', and the callout's title line
    went into the chunk before its body."""
    doc = localrag.parse_markdown(CALLOUT_NOTE, "c.md")
    assert [s.heading_path for s in doc.sections] == [("Callout guide",), ("Callout guide", "Real section")]
    chunks = localrag.chunk_document(doc)
    assert [c.heading_path for c in chunks] == [("Callout guide",), ("Callout guide", "Real section")]
    assert "[!note]- Folded Title" in chunks[0].content and "zebrafish" in chunks[0].content
    assert localrag._block_outline(CALLOUT_NOTE) == localrag._markdown_outline(CALLOUT_NOTE)


def test_a_setext_heading_over_two_lines_is_one_line_of_heading_path():
    """Text on two lines over `---` is one heading, and its path is one line (a citation printed it on two)."""
    doc = localrag.parse_markdown("# Top\nfirst line of a paragraph\n  second line\n---\nafter\n", "s.md")
    assert doc.sections[-1].heading_path == ("Top", "first line of a paragraph second line")


def test_a_link_to_a_heading_is_no_tag():
    """`[[#Heading]]` (Obsidian Help links its own sections so in 39 notes) and `[text](#heading)` link; they had
    tagged the note with the heading's first word."""
    doc = localrag.parse_markdown("See [[#Nested tags]], ![[#Embedded]] and [up](#top) (#paren) #real [[Note#h]]\n")
    assert doc.tags == ("paren", "real")


def test_emoji_tags_as_obsidian_allows_them():
    """Obsidian's tag format allows emoji: `#status/🌱` had been indexed as the tag `status`, `#📚` as none."""
    doc = localrag.parse_markdown("Reading #📚 and #status/🌱, #reading📚 #👨\u200d💻dev #❤\ufe0f #tag→not\n")
    assert doc.tags == ("📚", "status/🌱", "reading📚", "👨\u200d💻dev", "❤\ufe0f", "tag")


def test_a_tag_keeps_keycaps_flags_and_combining_marks_whole():
    """A tag never ends inside a character as written: `#1️⃣` had been the tag `1️` (the keycap cut off), the flag
    of Scotland `🏴` alone, `#हिंदी` the tag `ह` (Devanagari vowel signs are combining marks), a decomposed é `e`."""
    scotland = "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f"
    doc = localrag.parse_markdown(f"#1\ufe0f\u20e3 #{scotland} #हिंदी। #cafe\u0301 #👍🏽 #👩\u200d🔬 #☺\ufe0e #2024\n")
    assert doc.tags == ("1\ufe0f\u20e3", scotland, "हिंदी", "cafe\u0301", "👍🏽", "👩\u200d🔬", "☺\ufe0e")


def test_nothing_in_a_math_block_is_a_heading_tag_or_link():
    """Obsidian renders `$$ ... $$` as a formula: a `# ` line in it had been a heading that took over the heading
    path of the rest of the note, and `#x` / `[[x]]` in it a tag and a link.  A heading with a formula in it, math
    inside code, and a `$$` that nothing closes stay as they were."""
    text = ("# Physics\nIntro.\n\n$$\n# not a heading\nE = mc^2 #notatag [[NotALink]]\n\\end{x}$$\n\n"
            "## Energy $$E = mc^2$$\nInline $$a #nottag$$ and #real [[Real]].\n\n"
            "> [!note]\n> $$\n> #calloutmath\n> $$\n\n```\n$$\n```\n## After code\nA stray $$ sign.\n\n## Last #last\n")
    doc = localrag.parse_markdown(text, "m.md")
    assert [s.heading_path for s in doc.sections] == [("Physics",), ("Physics", "Energy $$E = mc^2$$"),
                                                      ("Physics", "After code"), ("Physics", "Last #last")]
    assert doc.tags == ("real", "last") and [l.target for l in doc.links] == ["Real"]
    assert "# not a heading" in doc.body and doc.body.count("\n") == text.count("\n")
    # unclosed: text, so the heading after it is one
    assert [s.heading_path for s in localrag.parse_markdown("$$\n# One\n", "u.md").sections] == [(), ("One",)]


def test_an_embedded_images_size_is_no_alias():
    """`![[image.png|300]]` and `|300x200` size an embedded image (Obsidian's Embed files note); they were stored as
    the alias `300`.  Alt text before the size stays the alias; a note embed's and a plain link's text is an alias."""
    doc = localrag.parse_markdown("![[image.png|300]] ![[photo.JPG|300x200]] ![[a.webp|Alt text|100]] "
                                  "![[b.png|caption]] ![[Other Note|shown name]] ![[Note|300]] [[image.png|300]]\n"
                                  "| ![[c.png\\|alt\\|50]] | ![[d.svg\\|40]] |\n")
    assert [(l.target, l.alias, l.embed) for l in doc.links] == [
        ("image.png", "", True), ("photo.JPG", "", True), ("a.webp", "Alt text", True), ("b.png", "caption", True),
        ("Other Note", "shown name", True), ("Note", "300", True), ("image.png", "300", False),
        ("c.png", "alt", True), ("d.svg", "", True)]


def test_an_embedded_videos_size_is_no_alias():
    """`![[clip.mp4|400]]` sizes the video player as `|400` sizes an image (Obsidian's Accepted file formats list
    .mkv .mov .mp4 .ogv .webm as video); it was stored as the alias `400`.  Alt text before the size stays; audio
    and PDFs have no such size (a PDF's is `#height=400`), so their text stays, as does a plain link's."""
    doc = localrag.parse_markdown("![[clip.mp4|400]] ![[talk.WEBM|Keynote|640x360]] ![[a.mov\\|300]] "
                                  "![[song.mp3|200]] ![[Document.pdf|400]] [[clip.mp4|400]]\n")
    assert [(l.target, l.alias, l.embed) for l in doc.links] == [
        ("clip.mp4", "", True), ("talk.WEBM", "Keynote", True), ("a.mov", "", True), ("song.mp3", "200", True),
        ("Document.pdf", "400", True), ("clip.mp4", "400", False)]


def test_math_opened_in_a_line_runs_to_the_next_dollars_in_its_paragraph():
    """`The energy is $$` ... `$$` on a later line is math (markdown-it dollarmath's `$$` inside a paragraph, as
    Obsidian renders it): the `#tag` and `[[link]]` in it had been indexed.  In a callout or list item alike.  A
    blank line or a heading ends the paragraph, so a `$$` past one closes nothing (the tag after it stays)."""
    text = ("# Physics\nThe energy is $$\nE = mc^2 #notatag [[NotALink]]\n$$ as Einstein wrote. #real\n\n"
            "> [!note] Mass\n> mass is $$\n> m #calloutmath\n> $$\n\n- item $$\n  x #listmath\n  $$ done\n\n"
            "Costs $$ 5\n\nnew #paragraph $$\n\n## Energy $$\n#heading $$\n")
    doc = localrag.parse_markdown(text, "m.md")
    assert doc.tags == ("real", "paragraph", "heading") and doc.links == ()
    assert [s.heading_path for s in doc.sections] == [("Physics",), ("Physics", "Energy $$")]
    assert doc.body.count("\n") == text.count("\n")


def test_links_in_properties_are_the_notes_links():
    """`up: "[[Parent]]"` and a list of links in a property (Obsidian's Properties note: text and list properties
    hold internal links, and Obsidian counts them) were no links of the note.  Before the body's, in order."""
    doc = localrag.parse_markdown('---\nup: "[[Parent]]"\nrelated:\n  - "[[A#Part]]"\n  - "[[B|bee]]"\n  - plain\n'
                                  'count: 3\n---\nBody [[C]]\n', "p.md")
    assert [(l.target, l.heading, l.alias) for l in doc.links] == [
        ("Parent", "", ""), ("A", "Part", ""), ("B", "", "bee"), ("C", "", "")]
    assert doc.wikilinks == ("Parent", "A", "B", "C")
    only = localrag.parse_markdown('---\nup: "[[Parent]]"\n---\n', "only.md")   # its properties are its text
    assert [l.target for l in only.links] == ["Parent"]


def test_aliases_apart_by_commas_in_one_string_are_several():
    """`aliases: a, b` (the form Obsidian deprecated in 1.4 and still reads) had been the one alias 'a, b'.  A list
    item keeps its comma."""
    doc = localrag.parse_markdown("---\naliases: first name, second name,\nalias: [\"Smith, John\"]\n---\nx\n", "a.md")
    assert doc.aliases == ("first name", "second name", "Smith, John") and not doc.warnings


def test_tags_from_frontmatter_and_body_not_code_or_urls():
    doc = localrag.parse_markdown(DOC)
    assert doc.tags == ("support", "policy/p1", "inline-tag", "support/p1", "中文标签")


def test_wikilinks_aliases_headings_embeds():
    doc = localrag.parse_markdown(DOC)
    links = {(l.target, l.heading, l.alias, l.embed) for l in doc.links}
    assert ("Support Escalation Policy", "", "", False) in links
    assert ("runbooks/API Latency Runbook", "", "the runbook", False) in links
    assert ("Atlas CRM", "导出限制", "", False) in links
    assert ("diagram.png", "", "", True) in links
    assert all(l.target != "NotALink" for l in doc.links)
    assert doc.wikilinks == ("Support Escalation Policy", "runbooks/API Latency Runbook", "Atlas CRM", "diagram.png")


@pytest.mark.parametrize("text, line", [
    ("---\ntitle: [unclosed\n---\nbody", 3),
    ("---\na: 1\nb: : :\n---\nbody", 3),
])
def test_malformed_frontmatter_keeps_the_body_and_names_the_line(text, line):
    doc = localrag.parse_markdown(text, "x.md")
    assert doc.body == "body" and doc.frontmatter == {}
    assert len(doc.warnings) == 1 and "frontmatter" in doc.warnings[0] and f"line {line}" in doc.warnings[0]


@pytest.mark.parametrize("fm", ["- a\n- b", "just a string", "42"])
def test_frontmatter_that_is_no_mapping_is_dropped_with_a_warning(fm):
    """python-frontmatter drops a YAML list or scalar without a word; the note's properties were lost silently
    (outside review)."""
    doc = localrag.parse_markdown(f"---\n{fm}\n---\n# T\n\nbody\n", "x.md")
    assert doc.frontmatter == {} and doc.body.startswith("# T")
    assert doc.warnings == ("frontmatter is not a YAML mapping; the note is indexed without its properties",)


def test_a_date_that_does_not_exist_stays_text_and_the_other_properties_stay():
    """`d: 2024-13-45` made YAML's timestamp type fail and the note lost every property, its tags too (outside
    review); Obsidian shows it as text."""
    doc = localrag.parse_markdown("---\ntags: [a, b]\nd: 2024-13-45\ne: 2024-01-05\n---\nbody\n", "x.md")
    assert doc.frontmatter == {"tags": ["a", "b"], "d": "2024-13-45", "e": "2024-01-05"} and not doc.warnings
    assert set(doc.tags) >= {"a", "b"}


def test_no_frontmatter_and_preamble_section():
    doc = localrag.parse_markdown("just text\n\n# H\nbody")
    assert doc.frontmatter == {}
    assert [s.heading_path for s in doc.sections] == [(), ("H",)]


def test_crlf_and_bom_normalized():
    doc = localrag.parse_markdown("\ufeff---\r\ntags: a\r\n---\r\n# T\r\nx\r\n")
    assert doc.tags == ("a",) and doc.body == "# T\nx\n"


# --- Obsidian semantics -------------------------------------------------------------------------------------------

def test_aliases_list_string_and_title():
    doc = localrag.parse_markdown("---\naliases: [PF-7, Project Falcon]\ntitle: Falcon plan\n---\nx", "p/Falcon.md")
    assert doc.aliases == ("PF-7", "Project Falcon") and doc.title == "Falcon plan"
    assert doc.alias_text == "Falcon plan ; PF-7 ; Project Falcon"
    one = localrag.parse_markdown("---\naliases: PF-7\n---\nx", "Falcon.md")
    assert one.aliases == ("PF-7",) and one.title == "Falcon" and one.alias_text == "PF-7"
    plain = localrag.parse_markdown("# Falcon\nx", "Falcon.md")
    assert plain.alias_text == "" and plain.title == "Falcon"


def test_a_stored_chunk_names_its_note_as_the_parsed_note_does():
    """A note's other names rebuilt from a chunk row's metadata (backfill of vectors and of keyword rows) or from a
    search result (the evidence blocks' `names`) come from one helper, and equal the parsed note's alias_text."""
    doc = localrag.parse_markdown("---\naliases: [PF-7, Project Falcon]\ntitle: Falcon plan\n---\nx", "p/Falcon.md")
    stored = {"title": doc.title, "aliases": list(doc.aliases)}       # chunks.metadata, as ingest writes it
    assert localrag._row_alias_text(stored["title"], stored["aliases"], "p/Falcon.md") == doc.alias_text
    assert localrag._row_alias_text(None, None, "p/Falcon.md") == ""  # a chunk written before titles were kept
    assert localrag._row_alias_text("Falcon", {"not": "a list"}, "p/Falcon.md") == ""
    result = {"source": "p/Falcon.md", "heading": "", "heading_path": [], "score": 0.9, "content": "x",
              "chunk_id": 1, **stored}
    assert localrag.assemble_evidence([result], 1000).blocks[0]["names"] == doc.alias_text


@pytest.mark.parametrize("value, aliases, warns", [
    ("5", ("5",), True),
    ("[5, ok, null]", ("5", "ok"), True),
    ("{a: 1}", (), True),
    ("true", ("true",), True),
    ("", (), False),
])
def test_odd_aliases_are_forgiven_with_a_warning(value, aliases, warns):
    doc = localrag.parse_markdown(f"---\naliases: {value}\n---\nbody", "n.md")
    assert doc.aliases == aliases and doc.body == "body"
    assert bool(doc.warnings) == warns and all("aliases" in w for w in doc.warnings)


def test_comments_inline_and_block_dropped_but_not_in_code():
    text = ("before %%inline secret%% after\n%%\nblock secret\nspans lines\n%%\nkept `%%code%%` kept\n"
            "```\n%% fenced %%\n```\nend %%secret\ncontinues%% tail\n")
    doc = localrag.parse_markdown(text, "c.md")
    assert "secret" not in doc.body
    assert "before  after" in doc.body and "`%%code%%`" in doc.body and "%% fenced %%" in doc.body
    assert "end" in doc.body and "tail" in doc.body and not doc.warnings


def test_unclosed_comment_hides_the_rest_with_a_warning():
    doc = localrag.parse_markdown("visible\n\n%% open\nhidden\n", "c.md")
    assert "hidden" not in doc.body and "visible" in doc.body
    assert "line 3" in doc.warnings[0]


def test_a_note_with_only_frontmatter_is_its_properties():
    """Nothing but properties: the lines between the fences are the note's text (it had no chunk at all, and its
    line range pointed past the end of the file); whole-line YAML comments stay blank lines, not headings."""
    text = ("---\ntitle: Only Frontmatter Ferret\ntags: [ferret]\n# a YAML comment\n"
            "description: The ferret note has only properties.\n---\n")
    doc = localrag.parse_markdown(text, "fm-only.md")
    assert doc.body == ("title: Only Frontmatter Ferret\ntags: [ferret]\n\n"
                        "description: The ferret note has only properties.\n")
    assert doc.body_line == 2 and doc.tags == ("ferret",) and doc.title == "Only Frontmatter Ferret"
    assert [s.heading_path for s in doc.sections] == [()]
    [chunk] = localrag.chunk_document(doc)
    assert localrag.span_lines(doc.body, chunk.start, chunk.end, doc.body_line) == (2, 5)
    assert "ferret note has only properties" in chunk.content
    # no properties, or a drawing without text: still nothing to index, and the line stays inside the file
    for text, path in (("---\n---\n", "e.md"), ("---\nexcalidraw-plugin: parsed\n---\n", "d.excalidraw.md")):
        doc = localrag.parse_markdown(text, path)
        assert localrag.chunk_document(doc) == [] and doc.body_line == text.count("\n")
    # a note with a body keeps its properties out of its text
    assert localrag.parse_markdown("---\ntags: [x]\n---\nbody\n", "b.md").body == "body\n"


def test_block_ids_recorded_and_removed():
    doc = localrag.parse_markdown("# H\nA claim worth linking. ^claim-1\n\n| t |\n|---|\n\n^table\n"
                                  "x^2 stays\n", "b.md")
    assert [b for _, b in doc.block_ids] == ["claim-1", "table"]
    assert "^claim-1" not in doc.body and "^table" not in doc.body and "x^2 stays" in doc.body
    for pos, block in doc.block_ids:
        assert 0 <= pos <= len(doc.body)


def test_wikilink_with_pipe_heading_block_and_dotdot():
    doc = localrag.parse_markdown("See [[../people/Dana Li#Contact^abc|Dana]] and [[#Local]].", "team/x.md")
    first = doc.links[0]
    assert (first.target, first.heading, first.block, first.alias) == ("../people/Dana Li", "Contact", "abc", "Dana")
    assert doc.links[1].target == "" and doc.links[1].heading == "Local"


def test_link_index_follows_obsidian_rules():
    ix = localrag.LinkIndex(["people/Dana Li.md", "a/Note.md", "b/c/Note.md", "img/pic.png", "x/y/Deep.md"],
                            {"people/Dana Li.md": ("Dana", "DL")})
    assert ix.resolve("q.md", "dana li") == ("people/Dana Li.md", True)            # case-insensitive, by name
    assert ix.resolve("b/c/z.md", "Note") == ("b/c/Note.md", True)                # same folder wins
    assert ix.resolve("q.md", "Note") == ("a/Note.md", True)                      # else the shortest path
    assert ix.resolve("q.md", "c/Note") == ("b/c/Note.md", True)                  # a path suffix
    assert ix.resolve("q.md", "pic.png") == ("img/pic.png", True)                 # attachments by full name
    assert ix.resolve("x/y/z.md", "../y/Deep") == ("x/y/Deep.md", True)           # relative
    assert ix.resolve("x/z.md", "../../etc/passwd") == (None, False)              # never outside the vault
    assert ix.resolve("q.md", "Dana") == ("people/Dana Li.md", True)              # aliases last
    assert ix.resolve("q.md", "Nope") == ("Nope.md", False)                       # where Obsidian would create it
    assert ix.resolve("q.md", "") == ("q.md", True)                               # [[#heading]]


def test_excalidraw_keeps_only_text_elements():
    text = ("---\nexcalidraw-plugin: parsed\ntags: [excalidraw]\n---\n==⚠  Switch to EXCALIDRAW VIEW ⚠==\n\n"
            "# Text Elements\nLoad balancer ^a1b2\n\nPrimary DB ^c3d4\n\n%%\n# Drawing\n```json\n"
            '{"type":"excalidraw","elements":[]}\n```\n%%\n')
    doc = localrag.parse_markdown(text, "diagrams/Arch.excalidraw.md")
    assert "Load balancer" in doc.body and "Primary DB" in doc.body
    assert "Switch" not in doc.body and "excalidraw\"" not in doc.body and "^a1b2" not in doc.body
    assert doc.title == "Arch" and not doc.warnings


def test_excalidraw_without_text_section_is_empty_with_a_warning():
    doc = localrag.parse_markdown("---\nexcalidraw-plugin: parsed\n---\n%%\n# Drawing\n```json\n{}\n```\n%%\n",
                                  "d.excalidraw.md")
    assert doc.body.strip() == "" and "Text Elements" in doc.warnings[0]
    assert localrag.chunk_document(doc) == []


def test_canvas_cards_are_named_by_their_heading_or_first_words():
    """A card's section is named by what a reader sees (its opening heading, else its first words), not its random
    node id; group labels and edge labels are cards too (Obsidian shows both)."""
    import json
    canvas = {"nodes": [{"id": "n1", "type": "text", "text": "# Plan\nShip the #release with [[Dana Li]]",
                         "x": 0, "y": 0, "width": 10, "height": 10},
                        {"id": "f1", "type": "file", "file": "notes/Spec.md", "x": 0, "y": 0, "width": 1, "height": 1},
                        {"id": "g1", "type": "group", "label": "Group about the nyala", "x": 0, "y": 0, "width": 1,
                         "height": 1},
                        {"id": "z", "type": "sticker", "x": 0, "y": 0, "width": 1, "height": 1},
                        {"id": "n2", "type": "text", "text": "> [!note] Second **card**\n\n\n\nmore %%hidden%% text",
                         "x": 0, "y": 0, "width": 1, "height": 1},
                        {"id": "n3", "type": "text", "text": "# Plan\nagain", "x": 0, "y": 0, "width": 1, "height": 1},
                        {"id": "n4", "type": "text", "text": "word " * 40, "x": 0, "y": 0, "width": 1, "height": 1},
                        {"id": "n5", "type": "text", "text": "  \n", "x": 0, "y": 0, "width": 1, "height": 1}],
              "edges": [{"id": "e1", "fromNode": "n1", "toNode": "n2", "label": "edge label about the eland"},
                        {"id": "e2", "fromNode": "n1", "toNode": "n3"}]}
    doc = localrag.parse_canvas(json.dumps(canvas), "boards/Plan.canvas")
    long = ("word " * 12).strip() + "…"
    assert [s.heading_path for s in doc.sections] == [("Plan",), ("Group about the nyala",), ("Second card",),
                                                      ("Plan (2)",), (long,), ("edge label about the eland",)]
    assert len(long) <= localrag.CANVAS_LABEL_MAX_CHARS + 1
    chunks = localrag.chunk_document(doc)
    assert [c.heading_path for c in chunks] == [s.heading_path for s in doc.sections]
    assert chunks[0].content == "# Plan\nShip the #release with [[Dana Li]]"
    assert chunks[2].content == "> [!note] Second **card**\n\nmore  text"   # blank lines folded, comment out
    assert chunks[1].content == "Group about the nyala" and chunks[-1].content == "edge label about the eland"
    assert {l.target for l in doc.links} == {"notes/Spec.md", "Dana Li"} and doc.tags == ("release",)
    assert any("sticker" in w for w in doc.warnings)
    # the stored text alone gives the same sections back (what `show board.canvas#Plan (2)` reads)
    assert localrag._canvas_sections(doc.body) == doc.sections


@pytest.mark.parametrize("text", ["not json {", "[1, 2]", '{"nodes": 5}'])
def test_canvas_that_is_not_a_canvas_raises(text):
    with pytest.raises(localrag.MarkdownError, match="JSON Canvas"):
        localrag.parse_canvas(text, "x.canvas")


def test_txt_is_a_note_without_headings():
    doc = localrag.parse_text("# not a heading\n\nSecond paragraph #nottag [[nolink]]\n", "notes/readme.txt")
    assert [s.heading_path for s in doc.sections] == [()] and doc.tags == () and doc.links == ()
    assert localrag.chunk_document(doc)[0].content.startswith("# not a heading")


@pytest.mark.parametrize("data, expect, warns", [
    ("Café naïve".encode("utf-8"), "Café naïve", False),
    (b"\xef\xbb\xbf" + "Café".encode("utf-8"), "Café", False),
    ("Café ✓".encode("utf-16"), "Café ✓", False),                  # with BOM
    ("Café naïve text".encode("utf-16-le"), "Café naïve text", False),  # no BOM: NUL pattern
    ("Café naïve – “quoted”".encode("cp1252"), "Café naïve – “quoted”", True),
    (bytes([0x81, 0x41]), "\x81A", True),                           # undefined in cp1252: Latin-1, nothing lost
])
def test_decode_text(data, expect, warns):
    text, warning = localrag.decode_text(data)
    assert text == expect and bool(warning) == warns
    if warns:
        assert "UTF-8" in warning


# --- hypothesis: comment stripping ----------------------------------------------------------------------------------

from hypothesis import HealthCheck, assume, example, given, settings, strategies as st  # noqa: E402

_pieces = st.lists(st.sampled_from(["word ", "%%", "`", "```\n", "\n", "^id", " ^blk\n", "#", "x"]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(_pieces)
def test_strip_comments_never_grows_and_is_idempotent_without_comments(parts):
    text = "".join(parts)
    clean, blocks, _ = localrag.strip_obsidian_syntax(text)
    assert len(clean) <= len(text)
    for pos, _block in blocks:
        assert 0 <= pos <= len(clean)
    if "%%" not in text and "^" not in text:
        assert clean == text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab \n", max_size=30), st.text(alphabet="ab \n", max_size=30),
       st.text(alphabet="cd \n", max_size=30))
def test_comment_content_never_survives(before, after, secret):
    text = f"{before}%%{secret}%%{after}"
    clean, _, _ = localrag.strip_obsidian_syntax(text)
    opened = before.count("\n")
    code = [(first, end) for first, end in localrag._markdown_outline(text)[0]
            if first <= opened]       # code the comment cannot hide: it begins before the comment could open
    lines, kept = text.split("\n"), clean.split("\n")
    assert len(kept) == len(lines)       # every line break stays
    if any(first <= opened < end for first, end in code):   # `    %%` after a blank line: indented code, not a comment
        assert all(kept[i] == lines[i] for first, end in code for i in range(first, min(end, len(lines))))
    else:
        assert clean.replace("\n", "").replace(" ", "") == (before + after).replace("\n", "").replace(" ", "")


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab \n", max_size=30), st.text(alphabet="ab \n", max_size=30),
       st.text(alphabet="cd \n<!%", max_size=30))
def test_html_comment_content_never_survives(before, after, secret):
    text = f"{before}<!--{secret}-->{after}"
    opened = before.count("\n")
    if any(first <= opened < end for first, end in
           localrag._markdown_outline(text)[0]):
        return       # `    <!--` after a blank line is indented code (as for %%, above)
    clean, _, warnings = localrag.strip_obsidian_syntax(text)
    assert clean.split("\n")[:opened] == text.split("\n")[:opened] and clean.count("\n") == text.count("\n")
    assert clean.replace("\n", "").replace(" ", "") == (before + after).replace("\n", "").replace(" ", "")
    assert not warnings


def test_html_comments_are_hidden_like_percent_comments():
    """Obsidian's reading view hides `<!-- -->` as it hides `%%`; they were indexed and searchable.  Code keeps
    them, and an unclosed `<!--` is text (Markdown shows it)."""
    text = ("Intro about the okapi. <!-- inline genet #secret-tag [[Secret Link]] -->visible\n\n<!--\nblock genet\n"
            "-->\n`<!-- code -->` and\n```html\n<!-- fenced -->\n```\n\n    <!-- indented -->\n\n"
            "Write <!-- to open one.\n")
    doc = localrag.parse_markdown(text, "h.md")
    assert "genet" not in doc.body and "Secret" not in doc.body and doc.tags == () and doc.links == ()
    assert "okapi. visible" in doc.body and doc.body.count("\n") == text.count("\n")
    for kept in ("`<!-- code -->`", "<!-- fenced -->", "    <!-- indented -->", "Write <!-- to open one."):
        assert kept in doc.body
    assert not doc.warnings


@pytest.mark.parametrize("text", [
    "# Callout\n\n> [!example] X\n> ```md\n> %%\n> ```\n\nText after callout about the addax.\n",
    "# Indented\n\nSome text.\n\n    %% indented code opens\n\nText after code about the addax.\n",
    "- a list item\n\n  ```\n  %% in a fenced block of the item\n  ```\n\nText after the list about the addax.\n",
    "> > ```\n> > %% quoted twice\n> > ```\n\nText after the quote about the addax. ^kept-out\n",
])
def test_percent_signs_in_code_anywhere_are_code(text):
    """Obsidian shows %% in a fence inside a callout, a list item or in indented code as code; the line scanner
    only knew top-level fences, took it for an unclosed comment and hid the rest of the note."""
    doc = localrag.parse_markdown(text, "c.md")
    assert not doc.warnings and "addax" in doc.body
    assert [line for line in text.splitlines() if "%%" in line] == [line for line in doc.body.splitlines()
                                                                      if "%%" in line]


def test_a_fence_inside_a_comment_stays_hidden():
    """The comment opened first wins: a fence written inside it is no code, before or after it closes."""
    doc = localrag.parse_markdown("a\n%%\n```\nsecret\n%%\nvisible %%gone%%\n> %%\n> ```\n> %%\nshown\n", "c.md")
    assert doc.body == "a\n\n\n\n\nvisible \n> \n\n\nshown\n" and not doc.warnings


@pytest.mark.parametrize("text, clean", [
    ("   ```\n%%kept in code%%\n```\n", "   ```\n%%kept in code%%\n```\n"),     # up to 3 spaces: a fence
    ("\t```\n%%hidden%%\ntext\n", "\t```\n\ntext\n"),                         # a tab is 4 columns: no fence
    ("    ```\n%%hidden%%\n", "    ```\n\n"),
])
def test_a_fence_opens_only_with_up_to_three_spaces_before_it(text, clean):
    """CommonMark: four columns of indentation make an indented code line, not a fence, so a comment after it is
    still a comment.  (A second, looser _FENCE_RE for answers once shadowed this one and let a tab open a fence.)"""
    assert localrag.strip_obsidian_syntax(text)[0] == clean


def test_comments_and_block_ids_keep_line_numbers():
    text = "---\ntags: [a]\n---\n# H\n%%\nhidden\nlines\n%%\nafter the comment ^b1\n"
    doc = localrag.parse_markdown(text, "n.md")
    assert doc.body.count("\n") == text.count("\n") - 3
    chunk = localrag.chunk_document(doc)[0]
    first, last = localrag.span_lines(doc.body, chunk.start, chunk.end, doc.body_line)
    assert (first, last) == (4, 9) and text.splitlines()[last - 1].startswith("after the comment")


def test_wikilink_alias_bar_escaped_inside_a_table():
    doc = localrag.parse_markdown("| a | b |\n|---|---|\n| [[Format your notes\\|format]] | [[Note#Part\\|p]] |\n")
    assert [(l.target, l.heading, l.alias) for l in doc.links] == [("Format your notes", "", "format"),
                                                                  ("Note", "Part", "p")]


# --- the line scan (_block_outline) against markdown-it ----------------------------------------------------------

_LINE_PIECES = ["# Title", "## Sub ##", "### ", "#tag line", "####### seven", "text", "more text", "[[Link]] text",
                "中文段落", "日本語の見出し", "", "", "   ", "\t", "```", "```py", "~~~", "````", "``` a`b", "    code",
                "\tcode", "  indented", "- item", "- # in list", "  - nested", "    - deep", "\t- tabbed",
                "-     code", "* star", "+ plus", "1. one", "2) two", "10. ten", "> quote", "> # quoted", "> ```",
                ">     code", "> [!note] Callout", "> > nested", "---", "***", "___", "===", "-", "=", "| a | b |",
                "|---|---|", "<div>", "<pre>", "<!-- c -->", "</div>", "[ref]: /url", "[x]:", "---\ntitle: x\n---",
                "  ```", "   # three", "    # four", "    -", "    >", "    1.", "#\tTab", "# Title #",
                "# Title \\#", "1.5 GB", "*emph* text", "\xa0"]


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(_LINE_PIECES), max_size=25), st.booleans())
def test_block_outline_matches_markdown_it(lines, final_break):
    """The line scan finds exactly the code blocks and headings (level, title, line) that markdown-it does."""
    body = "\n".join(lines) + ("\n" if final_break else "")
    assert localrag._block_outline(body) == localrag._markdown_outline(body)


_LIST_PIECES = ["- a", "* b", "1. d", "2) e", "- [ ] task", "- [x]: ref", "-", "text", "", "  - a", "   - a", " - a",
                "    - a", "     - a", "      - a", "        - a", "\t- a", "\t\t- a", "\t  - a", "    text", "  1. x",
                "    2. y", "- # h", "> q", "- > q", "---", "-    four", "\t\tcode", "- [[x]]", "2. two", "<div>"]


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.sampled_from(_LIST_PIECES), max_size=14))
def test_block_outline_matches_markdown_it_in_nested_lists(lines):
    """Nested lists (tabs, 4 spaces) are read without markdown-it where no line can be code: the same outline."""
    body = "\n".join(lines)
    assert localrag._block_outline(body) == localrag._markdown_outline(body)


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=" \t\n#`~>-*+_=<[]!|01.)x中", max_size=80))
def test_block_outline_matches_markdown_it_on_any_text(body):
    assert localrag._block_outline(body) == localrag._markdown_outline(body)


@pytest.mark.parametrize("body", [
    "",                                      # no lines
    "a\n   ",                                # a last line of only blanks is no line
    "- a\n```\nx\n\nfoo\n```\n# after",      # a fence at top level inside a list's region runs past a blank line
    "- a\n\n  ```\n  # in fence\n\n  ```\n\n# out",   # a fence inside a list item, closed with it
    "> ```\n> x\n\n# h",                     # a quote's fence ends with the quote
    "text\n2. not a list\n\n    code",       # `2.` cannot interrupt a paragraph: the indented line is code
    "- a\n\n      code\n\nend",              # indented code inside a list item
    "> # Quoted heading\n>\n>     code",     # a heading and code inside a callout
    "Title\n===\n\nSub\n---",                # setext headings
    "<pre>\n\n# not a heading\n</pre>\n# heading",   # an HTML block that runs across a blank line
    "[ref]: /url\n    code",                 # a link definition is no paragraph: code may follow
    "```\nunclosed\n\n# still code",         # an unclosed fence runs to the end
    "# Title ##\n#### Four #\n# \\#",         # closing runs of `#`
    "\t- a\n\t\t- b\n\n\tcode?",             # tabs expand to 4 columns
    "   - x\n\t\t- y\n\t- z",                # the last line fits no open item: indented code at top level
    "- a\n  - b\n    - c\n      - d\n\t\t\t\t- e",   # a nested list, 4 levels deep
    "[x]:\ndest\n    text",                 # a link definition's lines are no paragraph: indented code follows
    "> > a\n    - b",                        # markdown-it reads this lazy line as code
    "  > q\n> ```\n>",                        # a last line without a line break ends a quote's fence before it
    "```\n    ```\nstill code",               # a closing fence indented 4 columns closes nothing
])
def test_block_outline_edge_cases(body):
    assert localrag._block_outline(body) == localrag._markdown_outline(body)


def test_block_outline_reads_lists_without_markdown_it(monkeypatch):
    """A region with no line that could open a heading or code is not handed to markdown-it at all."""
    body = "# One\n\n- a\n  - b\n- c\n> [!note] Callout\n> text\n\n## Two\n\n```\ncode\n```\n"
    expected = localrag._markdown_outline(body)
    monkeypatch.setattr(localrag, "_markdown_parser", lambda: pytest.fail("markdown-it was used"))
    assert localrag._block_outline(body) == expected == ([(10, 13)], [(1, "One", 0), (2, "Two", 8)])


# --- internal links in Markdown format (Obsidian's Internal links note) ----------------------------------------------

def _links(text: str, path: str = "n.md") -> list[tuple]:
    return [(l.target, l.heading, l.block, l.alias, l.embed) for l in localrag.parse_markdown(text, path).links]


def test_markdown_format_links_are_links_in_the_order_written():
    """`[text](Note%20name.md)` and the other Markdown forms Obsidian reads as internal links had been no links at
    all: nothing in the links table, the chunks' links or the ingest's link counts.  Each is one now, in the order
    written among the wikilinks, as a wikilink of the same target, heading, block and alias would be."""
    text = ("See [laws](Three%20laws%20of%20motion.md), [[Wiki]] and [spaced](<Note name.md>) then\n"
            "[h](Note.md#Some%20Heading) [here](#Local) [b](Note.md#^blk-1) [hb](Note#Part^id)\n"
            "[up](../Folder/Note.md)\n"
            "[bare](Note) [abs](/Projects/Note.md) [t](Note.md \"a title\") [p](f(1).md) [esc](a\\)b.md)\n"
            "![alt](img.png) ![250](i.png) ![alt|100x20](pic.JPG) ![a note](Other.md) [](Empty%20text.md)\n"
            "[wrapped\ntext](w.md) [%23](%23hash.md#h) [&amp;](R&amp;D.md)\n")
    assert _links(text) == [
        ("Three laws of motion.md", "", "", "laws", False), ("Wiki", "", "", "", False),
        ("Note name.md", "", "", "spaced", False), ("Note.md", "Some Heading", "", "h", False),
        ("", "Local", "", "here", False), ("Note.md", "", "blk-1", "b", False), ("Note", "Part", "id", "hb", False),
        ("../Folder/Note.md", "", "", "up", False), ("Note", "", "", "bare", False),
        ("/Projects/Note.md", "", "", "abs", False), ("Note.md", "", "", "t", False), ("f(1).md", "", "", "p", False),
        ("a)b.md", "", "", "esc", False), ("img.png", "", "", "alt", True), ("i.png", "", "", "", True),
        ("pic.JPG", "", "", "alt", True), ("Other.md", "", "", "a note", True), ("Empty text.md", "", "", "", False),
        ("w.md", "", "", "wrapped text", False), ("#hash.md", "h", "", "%23", False), ("R&D.md", "", "", "&", False)]
    assert localrag.parse_markdown(text).wikilinks[:3] == ("Three laws of motion.md", "Wiki", "Note name.md")


def test_reference_links_use_their_definitions():
    """`[text][ref]`, `[ref][]` and `[ref]` with a definition `[ref]: Note.md` (case and spacing of the label do not
    matter; the first definition wins).  An undefined label, a footnote `[^1]`, a definition that interrupts a
    paragraph (text, as CommonMark reads it) and a task's `[x]` are no links."""
    text = ("Read [the guide][Guide  Ref], [guide ref][] and [GUIDE REF]; [nope][missing]; note[^1]; [other].\n"
            "- [x] done\n\n[guide ref]: <Guide Note.md#Start> \"title\"\n[Guide Ref]: second.md\n"
            "> [q]: quoted.md\n\nA paragraph\n[other]: para.md\n\n[^1]: a footnote with [[FootLink]] #foot\n> [q]\n")
    assert _links(text) == [("Guide Note.md", "Start", "", "the guide", False),
                            ("Guide Note.md", "Start", "", "guide ref", False),
                            ("Guide Note.md", "Start", "", "GUIDE REF", False), ("FootLink", "", "", "", False),
                            ("quoted.md", "", "", "q", False)]
    assert localrag.parse_markdown(text).tags == ("foot",)


def test_urls_code_and_math_hold_no_markdown_links():
    """A destination with a URL scheme is an external link or image, not an internal one; in code and math nothing
    is a link; a destination with a space (outside `<>`) makes no link (CommonMark), nor does an escaped `\\[`."""
    text = ("[w](https://obsidian.md) [m](mailto:a@b.c) [o](obsidian://open?vault=V&file=N.md) [f](file:///x.md)\n"
            "![r](https://example.com/i.png) [d](C:/x.md) [data](data:image/png;base64,xx) [sp](a b.md)\n"
            "`[c](code.md)` $[m](math.md)$ \\[e](escaped.md) [](<>) [x]()\n\n```\n[fenced](f.md)\n```\n"
            "$$\n[block](math.md)\n$$\n")
    assert _links(text) == []


def test_an_image_inside_a_link_is_the_link_and_the_embed():
    """`[![img](pic.png)](Note.md)`: a linked image; it had been neither.  A link inside another link's text makes
    the outer one text (CommonMark: links do not nest)."""
    assert _links("[![img](pic.png)](Note.md)") == [("Note.md", "", "", "img", False), ("pic.png", "", "", "img", True)]
    assert _links("[a [b](inner.md)](outer.md)") == [("inner.md", "", "", "b", False)]
    assert _links("[[Wiki]](x.md) ![[Embed]](y.md)") == [("Wiki", "", "", "", False), ("Embed", "", "", "", True)]


def test_an_inner_link_whose_destination_holds_the_outer_bracket_is_the_link():
    """`[)[](]())`: CommonMark closes the inner `[]` first and reads `]()` as its destination, so the outer brackets are
    text; read as the outer link's text, the inner link had no destination and neither was found (hypothesis found
    it in test_markdown_links_match_commonmark)."""
    assert [(t, e) for t, _, _, _, e in _links("[)[](]())")] == [("]()", False)]
    assert [(t, e) for t, _, _, _, e in _links("[a [b](c]d.md) e](f.md)")] == [("c]d.md", False)]


def test_a_backslash_in_a_destination_takes_the_next_character_along():
    """In a destination a backslash takes the character after it along, a line break too, and ends the destination
    before a space, as markdown-it reads one (hypothesis found both readings in test_markdown_links_match_commonmark:
    the destination had required a character after every backslash, then read a backslash before a space as one)."""
    found = lambda text: [(t, e) for t, _, _, _, e in _links(text)]
    assert found("[](\\\n)") == [("\\", False)]
    assert found("[a](b\\\nc)") == [("b\\\nc", False)]
    assert found("[a](b\\)c)") == [("b)c", False)]
    assert found("[](\\ )") == [] and found("[a](b\\ x)") == []
    assert found("> [a](b\\\n> c)") == [("b\\\nc", False)]   # in a quote: its markers are no part of it


def test_inline_math_holds_no_tag_or_link():
    """`$a #b [[c]]$` had given the tag `b` and the link `c` (a `$$` block already gave none).  Prices stay text:
    no space inside either `$`, no digit after the closing one; `\\$` is a dollar sign."""
    doc = localrag.parse_markdown("Energy $a #b [[c]]$ and $x$#y.\nPaid $5 for #food and $6 [[Shop]].\n"
                                  "$10-$20 #range\nTickets $5 #cheap/$10 #dear\n\\$x #esc [[E]]$ ok\n", "m.md")
    assert doc.tags == ("food", "range", "cheap", "dear", "esc") and [l.target for l in doc.links] == ["Shop", "E"]


def test_an_escaped_wikilink_is_text():
    """`\\[[x]]` shows as text in Obsidian; it had been a link.  `\\![[x]]` is a link (its `!` is text), `\\\\[[x]]`
    a link after a backslash."""
    assert _links("\\[[Not]] \\![[Plain]] \\\\[[Linked]] \\\\\\[[Not2]]") == [
        ("Plain", "", "", "", False), ("Linked", "", "", "", False)]


def test_a_definitions_title_is_never_a_line_of_a_deeper_quote():
    """`> [r]: b.md` then `> >"t"`: the second line starts a quote inside the quote, so `"t"` is that quote's text,
    not the definition's title, and the `[r]: b.md` after it (a lazy line of that quote's paragraph) is text whose
    `[r]` links (CommonMark's reading; hypothesis found the two apart in a clean-clone CI run)."""
    text = '> \n> [r]: b.md\n> >"t"\n> [r]: b.md\n> '
    assert [(l.target, l.embed) for l in localrag.extract_links(text)] == [("b.md", False)]
    assert localrag._deeper_quote('> [r]: b.md\n> >"t"') and not localrag._deeper_quote('> [r]: b.md\n> "t"')
    assert not localrag._deeper_quote('> > [r]: b.md\n> "t"')   # a shallower (lazy) line is no deeper quote


def test_a_reference_definition_is_no_tag():
    """`[r]: #heading` is a definition (no text of the note); its `#heading` had been the tag `heading`."""
    doc = localrag.parse_markdown("See [the part][r].\n\n[r]: #heading\n   [s]: #other 'x'\n", "d.md")
    assert doc.tags == ()
    assert _links("See [the part][r].\n\n[r]: #heading\n") == [("", "heading", "", "the part", False)]
    assert localrag.parse_markdown("Text\n[r]: #inline\n", "p.md").tags == ("inline",)   # a paragraph's line


def test_properties_hold_only_wikilinks():
    """Obsidian's Properties note: properties hold internal links as `[[Link]]`; a Markdown link there is text."""
    doc = localrag.parse_markdown('---\nup: "[[Parent]]"\nsee: "[x](Other.md) or [[Wiki]]"\n---\nBody [y](Body.md)\n',
                                  "p.md")
    assert [l.target for l in doc.links] == ["Parent", "Wiki", "Body.md"]


def test_a_canvas_cards_markdown_links_are_links():
    canvas = json.dumps({"nodes": [{"id": "a", "type": "text", "text": "# Card\nSee [x](Note%20A.md) and [[B]]"}]})
    assert [l.target for l in localrag.parse_canvas(canvas, "c.canvas").links] == ["Note A.md", "B"]


# A CommonMark parser as the reference: markdown-it-py (the one we read blocks with), inline rules on.  Over texts of
# brackets, parentheses, angle brackets, quotes, escapes, line breaks and definitions, every link and image it finds
# that is not a URL is one of ours, in the same order.  (Our reading adds what CommonMark lacks, wikilinks, and
# leaves out links nested deeper than an image in a link, parentheses nested deeper than one, and a definition's
# title running over lines.)
_MD_PIECES = ["[", "]", "(", ")", "![", "](", "<", ">", "x", "b.md", " ", "\n", "\n\n", "\\", "%20", "\"t\"",
              "\n[r]: b.md\n", "[r]", "[R][]", "%"]


def _depth(text: str, opening: str, closing: str) -> int:
    depth = deepest = 0
    escaped = False
    for ch in text:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == opening:
            depth += 1
            deepest = max(deepest, depth)
        elif ch == closing:
            depth = max(depth - 1, 0)
    return deepest


def _commonmark_links(text: str) -> list[tuple[str, bool]]:
    from markdown_it import MarkdownIt
    import urllib.parse
    found = []

    def walk(tokens):
        for tok in tokens or ():
            if tok.type in ("link_open", "image"):
                url = urllib.parse.unquote(tok.attrs["href" if tok.type == "link_open" else "src"]).strip()
                if url and not re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", url):
                    found.append((url, tok.type == "image"))
            walk(tok.children)

    tokens = MarkdownIt("commonmark").parse(text)
    assume(not any(tok.type in ("html_block", "code_block", "fence") for tok in tokens))
    walk(tokens)
    return found


# The same 3,000 examples at every run (derandomize): random ones made CI fail now and then on a bracket soup no note
# holds (the search below found one in about 110,000 that still differs: an image whose text holds a link whose
# destination holds a `[`, `![([]([)]([)`).  LOCALRAG_PROPERTY_SEARCH=1 searches 150,000 fresh examples instead.
_PROPERTY_SEARCH = bool(os.environ.get("LOCALRAG_PROPERTY_SEARCH"))


@settings(max_examples=150_000 if _PROPERTY_SEARCH else 3000, deadline=None, derandomize=not _PROPERTY_SEARCH,
          suppress_health_check=list(HealthCheck) if _PROPERTY_SEARCH else ())
@given(st.lists(st.sampled_from(_MD_PIECES), max_size=30), st.booleans())
@example(["[", ")", "[", "](", "](", ")", ")"], False)     # [)[](]()): the inner link's destination holds the ]
@example(["[", "](", "\\", "\n", ")"], False)            # a backslash takes a line break along
@example(["[", "](", "\\", "\n", ")"], True)             # ... and the quote's markers after it are no part of it
@example(["[", "](", "](", " ", ")", ")"], False)          # [](]( )): a title only after a space
def test_markdown_links_match_commonmark(parts, quoted):
    text = "".join(parts)
    # (a quote that starts inside a link's text or destination is read as its continuation; quoted, such a line is a
    # quote inside the quote, a paragraph of its own, which a link does not cross: both left out)
    assume(not re.search(r"^[ \t]*>", text, re.MULTILINE))
    if quoted:   # all of it in a quote (a callout's body)
        text = "\n".join("> " + line for line in text.split("\n"))
    assume(_depth(text, "[", "]") <= 2 and _depth(text, "(", ")") <= 2 and "    " not in text and "[[" not in text
           and "]]" not in text)
    # markdown-it's own quirks: a `](` with nothing after it but blanks to its paragraph's end ends no reference
    # link, and a line after a definition that starts with `(` unmakes the definition (CommonMark's reference
    # implementation does neither)
    assume(not re.search(r"\]\([ \t>]*(?:\n[ \t>]*)?(?:\n|$)|\]: b\.md\n[ >]*\(", text))
    # ... and a `](` whose `(` no `)` closes swallows the brackets after it into the reference link before it
    # (markdown-it renders "[r](][r][(" as one link, "r", dropping "(][r]"; CommonMark reads two)
    assume(not re.search(r"\]\([^)]*\Z", text))
    # ... and `[r][` followed by a bracketed text that is no label, one holding another bracket (`[r][\nx [r] y\n]`)
    # or only blanks (`[r][\n]`): markdown-it makes no link of the first `[r]` (a full reference whose label is no
    # label), while CommonMark's spec reads a shortcut reference followed by text (60,000 and 150,000 examples
    # found one of each)
    assume(not re.search(r"\]\[(?:[^\]]*\[|[ \t\n>]+\])", text))
    ours = [(l.target, l.embed) for l in localrag.extract_links(text)]
    assert ours == _commonmark_links(text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20), st.booleans())
def test_any_note_name_round_trips_through_a_percent_encoded_link(name, pointy):
    """Whatever the note is called, the link Obsidian writes to it (its name percent-encoded, or in `<>`) names it."""
    import urllib.parse
    name = name.strip()
    assume(name and "#" not in name and not re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", name))
    destination = f"<{name}.md>" if pointy else urllib.parse.quote(name) + ".md"
    assume(not pointy or not re.search(r"[<>\n\\&]", name))
    links = localrag.extract_links(f"see [it]({destination}) and [[after]]")
    assert [(l.target, l.alias) for l in links] == [(f"{name}.md", "it"), ("after", "")]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab #[]()!$\\x\n", max_size=40))
def test_inline_math_hides_everything_inside(inside):
    """Whatever a one-line `$...$` holds, no tag or link of it is read."""
    inside = inside.replace("\n", " ").replace("$", "").replace("\\", "").strip()
    assume(inside)
    doc = localrag.parse_markdown(f"Text $y{inside}y$ after\n", "m.md")
    assert doc.tags == () and doc.links == ()
