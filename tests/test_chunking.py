"""Chunking: heading-aware, cl100k_base token counts, 400-800 target, 1200 hard max, 80-token overlap.

Properties (hypothesis): no chunk over 1200 tokens; chunk spans tile the body in order (no text lost or
reordered); heading_path is the section's; deterministic.
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import localrag

WORDS = ["alpha", "beta", "gamma", "客户", "工单", "升级", "延迟", "数据", "导出", "P1", "API", "2026", "。", ".", ","]


def paragraph(draw_words):
    return " ".join(draw_words)


word_lists = st.lists(st.sampled_from(WORDS), min_size=0, max_size=400)
section = st.tuples(st.integers(1, 4), st.text(alphabet="abcxyz客户工单 ", min_size=1, max_size=12).map(str.strip)
                    .filter(bool), st.lists(word_lists.map(" ".join), min_size=0, max_size=6))


@st.composite
def markdown_docs(draw):
    parts = []
    if draw(st.booleans()):
        parts.append(" ".join(draw(word_lists)) + "\n")
    for level, title, paras in draw(st.lists(section, min_size=0, max_size=8)):
        parts.append("#" * level + " " + title + "\n")
        parts.extend(p + "\n\n" for p in paras)
    if draw(st.booleans()):  # a single huge line with no sentence breaks: forces the hard cut
        parts.append("x" * draw(st.integers(0, 9000)) + "\n")
    if draw(st.booleans()):
        parts.append("```\n# not a heading\n" + " ".join(draw(word_lists)) + "\n```\n")
    return "".join(parts)


def check_tiling(doc, chunks):
    """Chunk spans start at or before the previous end (overlap), advance, and cover all non-blank text."""
    covered_to = 0
    for prev, chunk in zip([None, *chunks], chunks):
        assert chunk.content == doc.body[chunk.start:chunk.end].strip()
        if prev is not None:
            assert chunk.start <= prev.end and chunk.end > prev.end
        assert not doc.body[covered_to:chunk.start].strip(), "text between chunks was lost"
        covered_to = max(covered_to, chunk.end)
    assert not doc.body[covered_to:].strip()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_docs())
def test_chunk_properties(text):
    doc = localrag.parse_markdown(text)
    chunks = localrag.chunk_document(doc)
    for c in chunks:
        assert c.token_count == localrag.count_tokens(c.content) <= localrag.CHUNK_HARD_MAX_TOKENS
        assert c.content.strip()
    check_tiling(doc, chunks)
    sections = {s.start: s for s in doc.sections}
    for c in chunks:
        # heading_path is that of the section the chunk starts in (or, for split pieces, the same section)
        owner = max((s for s in doc.sections if s.start <= c.start), key=lambda s: s.start, default=None)
        enclosing = [s for s in doc.sections if s.start < c.end and c.start < s.end]  # sections it overlaps
        assert c.heading_path in {s.heading_path for s in enclosing} or owner is None
        first = sections.get(c.start)
        own_text = first is not None and doc.body[first.start:first.end].partition("\n")[2].strip()
        if first is not None and own_text:
            assert c.heading_path == first.heading_path
        elif first is not None:  # a heading with no text of its own folds into the next chunk, whose path it takes
            assert c.heading_path in {s.heading_path for s in doc.sections if s.start >= first.start}
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert localrag.chunk_document(localrag.parse_markdown(text)) == chunks  # deterministic


def test_long_section_is_split_with_overlap_and_same_heading():
    body = "# Title\n\n## 长章节\n" + "".join(f"第{i}句话讲客户工单升级的流程和时限。\n" for i in range(400))
    doc = localrag.parse_markdown(body)
    chunks = localrag.chunk_document(doc)
    long = [c for c in chunks if c.heading_path == ("Title", "长章节")]
    assert len(long) >= 3
    for a, b in zip(long, long[1:]):
        assert b.start < a.end  # overlap
        overlap = doc.body[b.start:a.end]
        assert 0 < localrag.count_tokens(overlap) <= localrag.CHUNK_OVERLAP_TOKENS
    assert all(c.token_count <= localrag.CHUNK_TARGET_MAX_TOKENS for c in long)
    assert all(c.token_count >= 100 for c in long[:-1])


def test_small_subsections_merge_into_their_parent_only():
    text = ("# Doc\nintro\n## A\na text\n### A1\nmore a\n### A2\neven more a\n## B\nb text\n")
    chunks = localrag.chunk_document(localrag.parse_markdown(text))
    assert [c.heading_path for c in chunks] == [("Doc",), ("Doc", "A"), ("Doc", "B")]
    assert "### A1" in chunks[1].content and "### A2" in chunks[1].content
    assert "## B" not in chunks[1].content  # siblings never merge


def test_big_subsection_is_not_merged():
    big = "词语 " * 700
    text = f"# Doc\n## A\nshort\n### A1\n{big}\n"
    chunks = localrag.chunk_document(localrag.parse_markdown(text))
    # `# Doc` has no text of its own: it folds into A's chunk
    assert chunks[0].heading_path == ("Doc", "A") and "A1" not in chunks[0].content
    assert chunks[0].content.startswith("# Doc\n## A")
    assert chunks[1].heading_path == ("Doc", "A", "A1")


def test_special_token_text_is_counted_not_rejected():
    assert localrag.count_tokens("<|endoftext|> hello") > 1


def test_empty_document_has_no_chunks():
    assert localrag.chunk_document(localrag.parse_markdown("")) == []
    assert localrag.chunk_document(localrag.parse_markdown("---\ntitle: x\n---\n\n   \n")) == []


def test_hard_cut_of_a_long_line_tiles_it_within_the_limit():
    """A line with no sentence break is cut on token offsets (encoded once): pieces tile the line, none over the
    limit, and each but the last is close to it."""
    words = ["alpha", "beta", "客户", "工单", "x1", "数据", "naïve"]
    line = " ".join(words[i % len(words)] for i in range(30_000))
    limit = localrag.CHUNK_TARGET_MAX_TOKENS - localrag.CHUNK_OVERLAP_TOKENS
    pieces = localrag._hard_cut(line, 0, len(line), limit)
    assert pieces[0][0] == 0 and pieces[-1][1] == len(line)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert all(n == localrag.count_tokens(line[s:e]) <= limit for s, e, n in pieces)
    assert all(n >= limit - 5 for _, _, n in pieces[:-1])
    doc = localrag.parse_markdown("# Long\n" + line + "\n", "long.md")
    chunks = localrag.chunk_document(doc)
    assert max(c.token_count for c in chunks) <= localrag.CHUNK_HARD_MAX_TOKENS
    check_tiling(doc, chunks)


def test_heading_only_sections_fold_into_the_next_chunk():
    doc = localrag.parse_markdown("# Setup\n## Install\nRun the installer.\n## Configure\n### Network\n\n"
                                  "Open port 8080.\n## Empty last\n", "s.md")
    chunks = localrag.chunk_document(doc)
    assert [c.heading_path for c in chunks] == [("Setup", "Install"), ("Setup", "Configure"),
                                                ("Setup", "Empty last")]
    assert chunks[0].content.startswith("# Setup\n## Install") and "Open port" in chunks[1].content
    assert all(c.content.strip() != c.content.strip().splitlines()[0] or c.index == len(chunks) - 1 for c in chunks)
