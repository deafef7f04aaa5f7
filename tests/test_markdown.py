"""Markdown: frontmatter, headings from tokens (not inside code), #tags, [[wikilinks]], embeds."""

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


@pytest.mark.parametrize("text", [
    "---\ntitle: [unclosed\n---\nbody",
    "---\n: : :\n  - bad\n---\nbody",
])
def test_malformed_frontmatter_raises_markdown_error(text):
    with pytest.raises(localrag.MarkdownError, match="frontmatter"):
        localrag.parse_markdown(text)


def test_no_frontmatter_and_preamble_section():
    doc = localrag.parse_markdown("just text\n\n# H\nbody")
    assert doc.frontmatter == {}
    assert [s.heading_path for s in doc.sections] == [(), ("H",)]


def test_crlf_and_bom_normalized():
    doc = localrag.parse_markdown("\ufeff---\r\ntags: a\r\n---\r\n# T\r\nx\r\n")
    assert doc.tags == ("a",) and doc.body == "# T\nx\n"
