"""Search: exact scan over the current provider's vectors, clamped scores, the smoke loop on the eval questions."""

import json
import socket

import pytest

import localrag
from conftest import QUESTIONS, run_cli

RESULT_KEYS = {"content", "source", "relative_path", "heading_path", "heading", "score", "line_start", "line_end",
               "title", "aliases", "scores", "channels", "vault_path"}


def test_smoke_loop_every_expected_source_in_top5(ingested):
    config, _, _ = ingested
    questions = [q for q in localrag.load_questions(QUESTIONS) if q["expected_mode"] == "rag"]
    assert len(questions) >= 5
    for q in questions:
        result = localrag.search(config, q["question"], 5)
        sources = [r["source"] for r in result["results"]]
        assert set(sources) & set(q["expected_sources"]), (q["id"], sources)
        assert result["confidence"] >= config.rag_min_similarity, q["id"]
        assert result["gate"]["mode"] == "rag", (q["id"], result["gate"]["reason"])


@pytest.mark.parametrize("retrieval", ["hybrid", "vector", "keyword"])
def test_result_shape_and_ordering(ingested, retrieval):
    config, vault, _ = ingested
    result = localrag.search(config, "客户 P1 工单应该怎么升级？", 5, retrieval=retrieval)
    assert set(result) == {"confidence", "results", "retrieval", "search_path", "gate", "suggestion"}
    assert len(result["results"]) == 5 and result["search_path"] == (None if retrieval == "keyword" else "exact")
    assert result["retrieval"] == retrieval
    scores = [r["score"] for r in result["results"]]
    assert scores == sorted(scores, reverse=True)
    for r in result["results"]:
        assert set(r) == RESULT_KEYS and r["source"] == r["relative_path"] and 0.0 <= r["score"] <= 1.0
        assert r["heading"] == (r["heading_path"][-1] if r["heading_path"] else "")
        assert r["vault_path"] == str(vault.resolve())
        assert 0.0 <= r["scores"]["keyword"] <= 1.0
    if retrieval == "vector":  # seed 000's score: the clamped cosine, and confidence is the top one
        assert result["confidence"] == scores[0] == result["results"][0]["scores"]["vector"]
        assert all(r["channels"] == ["vector"] for r in result["results"])
    elif retrieval == "keyword":
        assert all(r["scores"]["vector"] is None and r["channels"] == ["keyword"] for r in result["results"])
        t = config.rag_title_weight  # keyword mode: BM25, and the note-name signal at its weight
        assert scores == pytest.approx([(1 - t) * r["scores"]["keyword"] + t * r["scores"]["title"]
                                        for r in result["results"]], abs=1e-5)
    else:   # the vector channel's best cosine, which the fused top 5 may leave out
        nearest = localrag.search(config, "客户 P1 工单应该怎么升级？", 5, retrieval="vector")["confidence"]
        assert result["confidence"] == nearest >= max(r["scores"]["vector"] for r in result["results"])
        assert all(set(r["channels"]) <= {"vector", "keyword"} and r["channels"] for r in result["results"])


def test_heading_empty_string_when_no_heading(db, tmp_path):
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "plain.md").write_text("没有标题的笔记 zanzibar")
    localrag.ingest(db, tmp_path / "v")
    r = localrag.search(db, "没有标题的笔记 zanzibar")["results"][0]
    assert r["heading"] == "" and r["heading_path"] == []


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_empty_query_is_invalid_request(ingested, query):
    config, _, _ = ingested
    code, out = run_cli("search", query, "--json")
    assert code == localrag.EXIT_USAGE
    assert json.loads(out)["error"] == {"code": "invalid_request", "message": "query must not be empty or only "
                                        "whitespace", "details": {"field": "query"}}


@pytest.mark.parametrize("top_k", ["0", "21", "-3"])
def test_top_k_out_of_range(ingested, top_k):
    code, out = run_cli("search", "客户", "--top-k", top_k, "--json")
    assert code == localrag.EXIT_USAGE and json.loads(out)["error"]["details"]["field"] == "top_k"


@pytest.mark.parametrize("retrieval", ["hybrid", "vector", "keyword"])
@pytest.mark.parametrize("query", ["？？？ !!!", "🙂🚀✨", "—…·"])
def test_punctuation_or_emoji_only_query_has_no_evidence(ingested, retrieval, query):
    config, _, _ = ingested
    result = localrag.search(config, query, retrieval=retrieval)
    assert result["results"] == [] and result["confidence"] == 0.0
    # it finds nothing because it asks nothing: the reason says so
    assert result["gate"]["mode"] == "no_answer" and result["gate"]["reason"].startswith(
        "the question has no content terms")


def test_retrieval_not_ready_without_current_embeddings(db):
    code, out = run_cli("search", "客户", "--json")
    assert code == localrag.EXIT_NOT_READY
    err = json.loads(out)["error"]
    assert err["code"] == "retrieval_not_ready" and "localrag ingest" in err["message"]


def test_only_current_provider_vectors_are_compared(ingested):
    config, _, _ = ingested
    with localrag.Store.open(config) as s:
        # a decoy vector under another provider that would match everything perfectly
        s.run("INSERT INTO embeddings (chunk_id, embedding_provider, embedding_model, embedding_dim, embedding) "
              "SELECT id, 'local-qwen3', 'Qwen/Qwen3-Embedding-0.6B', 1024, CAST(:v AS vector) FROM chunks "
              "ORDER BY id LIMIT 1", v=localrag.encode_vector(localrag.FakeLexicalEmbedder().embed_query("客户 升级")))
        s.run("DELETE FROM embeddings WHERE embedding_provider = 'fake' AND chunk_id = (SELECT min(id) FROM chunks)")
        decoy = s.run("SELECT content FROM chunks ORDER BY id LIMIT 1")[0][0]
    results = localrag.search(config, "客户 升级", 20)["results"]
    assert results and all(r["score"] < 0.9999 for r in results)
    assert decoy not in [r["content"] for r in results]  # its only vector is another provider's: invisible
    qwen = localrag.load_config(environ={"DATABASE_URL": config.database_url, "EMBEDDING_PROVIDER": "local-qwen3"})
    with localrag.Store.open(qwen) as s:
        assert s.count_current(qwen.embedding_key) == 1


def test_schema_dimension_mismatch(db):
    with localrag.Store.open(db) as s:
        s.run("ALTER TABLE embeddings DROP CONSTRAINT IF EXISTS embeddings_embedding_dim_check")
        s.run("ALTER TABLE embeddings ALTER COLUMN embedding TYPE vector(512)")
    try:
        code, out = run_cli("search", "客户", "--json")
        assert code == localrag.EXIT_EMBEDDING
        assert json.loads(out)["error"]["code"] == "embedding_dim_mismatch"
    finally:
        with localrag.Store.open(db) as s:
            s.run("DROP TABLE embeddings CASCADE")
        localrag.db_init(db)


def test_clamp_score():
    assert localrag.clamp_score(1.7) == 0.0 and localrag.clamp_score(-0.2) == 1.0
    assert localrag.clamp_score(0.25) == 0.75 and localrag.clamp_score(float("nan")) == 0.0
    assert localrag.clamp_score(None) == 0.0


def test_cli_human_output_cites_file_and_heading(ingested, capsys):
    code, out = run_cli("search", "API 延迟升高时值班工程师应该怎么处理？", "--top-k", "2")
    assert code == 0
    assert out.startswith("confidence ") and "runbooks/API Latency Runbook.md  ›" in out


# === the approximate path (HNSW over halfvec, re-ranked exactly) ===================================================

@pytest.fixture
def no_approx_index(db):
    """Drops every approximate index afterwards: an HNSW index left on the shared test database would slow every
    later test's ingest."""
    yield db
    with localrag.Store.open(db) as s:
        for (name,) in s.run("SELECT indexname FROM pg_indexes WHERE tablename = 'embeddings' AND indexname LIKE "
                             "'idx_embeddings_hnsw_%'"):
            s.run(f'DROP INDEX IF EXISTS "{name}"')


def _configured(monkeypatch, **env) -> localrag.Config:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return localrag.load_config()


def _index_scans(config, at_least: int = 0) -> int:
    """The index's scan count, once it reaches at_least (statistics arrive when the searching sessions end)."""
    import time
    deadline = time.monotonic() + 10
    with localrag.Store.open(config) as s:
        name = s.approx_index_name(config.embedding_key)
        while True:
            rows = s.run("SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = :n", n=name)
            s.run("SELECT pg_stat_clear_snapshot()")
            scans = rows[0][0] if rows else 0
            if scans >= at_least or time.monotonic() > deadline:
                return scans
            time.sleep(0.1)


@pytest.mark.parametrize("setting, index, expected", [
    ("exact", {"valid": True, "entries": 10 ** 6}, "exact"),
    ("auto", None, "exact"),
    ("auto", {"valid": True, "entries": 99}, "exact"),
    ("auto", {"valid": True, "entries": 100}, "approx"),
    ("auto", {"valid": False, "entries": 10 ** 6}, "exact"),
    ("approx", {"valid": True, "entries": 1}, "approx"),
    ("approx", None, "exact"),
    ("approx", {"valid": False, "entries": 5}, "exact"),
])
def test_choose_search_path(setting, index, expected):
    config = localrag.Config(rag_search=setting, rag_approx_min_chunks=100)
    path, why = localrag.choose_search_path(config, index)
    assert path == expected and why


QUERIES = ["客户 P1 工单应该怎么升级？", "VPN 连接失败怎么办", "报销流程", "how to reset a password", "发布 回滚"]


def test_low_threshold_builds_the_index_and_approx_agrees_with_exact(vault, no_approx_index, monkeypatch):
    config = _configured(monkeypatch, RAG_APPROX_MIN_CHUNKS="50", RAG_HNSW_M="8", RAG_HNSW_EF_CONSTRUCTION="32")
    result = localrag.ingest(config, vault)
    built = result["approx_index"]
    assert built and built["entries"] == result["embeddings_written"] and built["seconds"] >= 0
    assert built["bytes"] > 0 and built["warnings"] == [] and "RAG_APPROX_MIN_CHUNKS=50" in built["reason"]
    with localrag.Store.open(config) as s:
        info = s.approx_index(config.embedding_key)
    assert info["valid"] and "m=8" in info["options"] and "ef_construction=32" in info["options"]
    assert localrag.ingest(config, vault)["approx_index"] is None          # built once, then kept
    exact = _configured(monkeypatch, RAG_SEARCH="exact")
    before = _index_scans(config)
    for q in QUERIES:
        for retrieval in ("vector", "hybrid"):
            approx_result = localrag.search(config, q, 5, retrieval=retrieval)
            exact_result = localrag.search(exact, q, 5, retrieval=retrieval)
            assert approx_result["search_path"] == "approx" and exact_result["search_path"] == "exact"
            assert [(r["source"], r["heading_path"], r["score"]) for r in approx_result["results"]] == \
                [(r["source"], r["heading_path"], r["score"]) for r in exact_result["results"]], (q, retrieval)
    # the index served every approx search (its sessions' statistics arrive when they end)
    assert _index_scans(config, before + 2 * len(QUERIES)) >= before + 2 * len(QUERIES)
    # re-ranked exactly: the very same distances as the exact scan, to the last bit (the query vector once reached
    # the re-ranking as a halfvec: one parameter in two casts takes the first one's type)
    with localrag.Store.open(config) as s, s.snapshot():
        for q in QUERIES:
            vector = localrag.get_embedder(config).embed_query(q)
            approx = dict(s.vector_candidates(config.embedding_key, vector, 20, None, 40))
            exact_rows = dict(s.vector_candidates(config.embedding_key, vector, 20, None))
            assert approx and all(approx[cid] == exact_rows[cid] for cid in approx.keys() & exact_rows.keys()), q


def test_approx_respects_scope_filters(vault, no_approx_index, monkeypatch):
    config = _configured(monkeypatch, RAG_SEARCH="approx")
    assert localrag.ingest(config, vault)["approx_index"]["reason"] == "RAG_SEARCH=approx"
    exact = _configured(monkeypatch, RAG_SEARCH="exact")
    for path in ("runbooks/", "products/"):
        a = localrag.search(config, QUERIES[0], 5, retrieval="vector", path=path)
        e = localrag.search(exact, QUERIES[0], 5, retrieval="vector", path=path)
        assert a["search_path"] == "approx"
        assert [r["source"] for r in a["results"]] == [r["source"] for r in e["results"]]
        assert all(r["source"].startswith(path) for r in a["results"])


def test_approx_searches_ef_search_wide_but_re_ranks_only_a_pool(ingested, no_approx_index, monkeypatch):
    """The graph is searched RAG_HNSW_EF_SEARCH wide (recall), while only the nearest 2k + APPROX_RERANK_EXTRA rows
    are fetched and re-ranked (the heap reads that dominated at 1M chunks); the results are the exact path's."""
    config = _configured(monkeypatch, RAG_SEARCH="approx", RAG_HNSW_EF_SEARCH="777")
    assert localrag.db_init(config)["approx_index"]["entries"] > 0
    vector = localrag.get_embedder(config).embed_query(QUERIES[0])
    with localrag.Store.open(config) as s, s.snapshot():
        rows = s.vector_candidates(config.embedding_key, vector, 5, None, config.rag_hnsw_ef_search)
        assert s.run("SHOW hnsw.ef_search")[0][0] == "777"
        exact = s.vector_candidates(config.embedding_key, vector, 5, None)
    assert [c for c, _ in rows] == [c for c, _ in exact] and len(rows) == 5
    assert [d for _, d in rows] == pytest.approx([d for _, d in exact], abs=1e-6)   # float32 sums, another order


def test_a_pooled_store_runs_the_keyword_channel_beside_the_vector_one(vault, no_approx_index, monkeypatch):
    """serve's pooled connections, on the approximate path, run hybrid's keyword channel on a second connection
    while the vector channel runs: the same results (scoped too) as one connection doing both in turn."""
    config = _configured(monkeypatch, RAG_SEARCH="approx")
    localrag.ingest(config, vault)
    pool = localrag.StorePool(config)
    try:
        with pool.store() as pooled, localrag.Store.open(config) as alone:
            for q in QUERIES:
                for path in (None, "runbooks/"):
                    beside = localrag.search(config, q, 5, pooled, path=path)
                    single = localrag.search(config, q, 5, alone, path=path)
                    assert beside["search_path"] == single["search_path"] == "approx"
                    assert beside["results"] == single["results"], (q, path)
            assert pooled._sibling is not None and alone._sibling is None
    finally:
        pool.close()


def test_a_pooled_search_outlives_its_second_connection(vault, no_approx_index, monkeypatch):
    """The keyword channel's connection ended under it (terminated, timed out): the search still answers, on its
    own connection, and the dead one is dropped, not kept to fail every later search; a second connection that
    cannot be opened is not tried again for SIBLING_RETRY_S."""
    config = _configured(monkeypatch, RAG_SEARCH="approx")
    localrag.ingest(config, vault)
    pool = localrag.StorePool(config)
    try:
        with pool.store() as pooled, localrag.Store.open(config) as admin:
            expected = localrag.search(config, QUERIES[0], 5, pooled)
            first_pid = pooled._sibling.run("SELECT pg_backend_pid()")[0][0]
            assert admin.run("SELECT pg_terminate_backend(:p)", p=first_pid)[0][0]
            for _ in range(2):    # the sibling fails in the first search, is not retried in the second
                again = localrag.search(config, QUERIES[0], 5, pooled)
                assert again["results"] == expected["results"]
                assert pooled._sibling is None
            pooled._sibling_retry_at = 0.0       # the back-off over: a new second connection
            assert localrag.search(config, QUERIES[0], 5, pooled)["results"] == expected["results"]
            assert pooled._sibling.run("SELECT pg_backend_pid()")[0][0] != first_pid
            # a second connection that cannot be opened: nothing listens where it would connect
            pooled.drop_sibling()
            pooled._sibling_retry_at = 0.0
            real_target = pooled.target
            with socket.socket() as closed:
                closed.bind(("127.0.0.1", 0))
                port = closed.getsockname()[1]
            pooled.target = localrag.DbTarget(kwargs={**real_target.kwargs, "host": "127.0.0.1", "port": port,
                                                      "unix_sock": None}, display="nowhere")
            try:
                assert localrag.search(config, QUERIES[0], 5, pooled)["results"] == expected["results"]
                assert pooled._sibling is None and pooled._sibling_retry_at > 0
            finally:
                pooled.target = real_target
    finally:
        pool.close()


def test_a_sibling_query_sees_the_snapshot_of_the_transaction_that_started_it(ingested):
    """The keyword channel's connection imports the searcher's snapshot: a row committed after the search's
    snapshot was taken is invisible to both, so candidates and chunk rows always agree."""
    config, _, _ = ingested
    count = "SELECT count(*) FROM ingest_runs"
    with localrag.Store.open(config) as s, localrag.Store.open(config) as writer:
        with s.snapshot():
            before = s.run(count)[0][0]
            writer.run("INSERT INTO ingest_runs (vault_path, embedding_provider, embedding_model, embedding_dim, "
                       "status) VALUES ('/elsewhere', 'fake', 'fake-lexical-v1', 1024, 'failed')")
            with localrag._SiblingQuery(s, lambda sibling: sibling.run(count)[0][0]) as seen:
                assert seen.result() == before
            with localrag._SiblingQuery(s, lambda sibling: sibling.run("SELECT 1/0")) as failing:
                with pytest.raises(localrag.DatabaseError):
                    failing.result()          # the sibling's error reaches the searcher
        assert s.run(count)[0][0] == before + 1
        with pytest.raises(ValueError, match="not a snapshot id"):
            with s.snapshot(of="1'; DROP TABLE chunks; --"):
                pass
        sibling = s._sibling
    with pytest.raises(localrag.LocalRagError):   # closed with the store that opened it
        sibling.run("SELECT 1")


def test_approx_without_index_is_exact_with_one_warning(ingested, no_approx_index, monkeypatch, caplog):
    config = _configured(monkeypatch, RAG_SEARCH="approx")
    localrag._approx_warned.clear()
    with caplog.at_level("WARNING", logger="localrag"):
        first = localrag.search(config, QUERIES[0], 5)
        second = localrag.search(config, QUERIES[1], 5)
    assert first["search_path"] == second["search_path"] == "exact"
    warnings = [r.getMessage() for r in caplog.records if "RAG_SEARCH=approx" in r.getMessage()]
    assert len(warnings) == 1 and "no approximate index" in warnings[0] and "db init" in warnings[0]
    built = localrag.db_init(config)["approx_index"]          # db init builds what was missing
    assert built and built["entries"] > 0
    assert localrag.search(config, QUERIES[0], 5)["search_path"] == "approx"


def test_interrupted_build_falls_back_to_exact_then_db_init_rebuilds(ingested, no_approx_index, monkeypatch):
    """An interrupted concurrent build leaves an INVALID index (here: one cancelled while it waits for a writer,
    after its catalog entry is committed, as a killed session's would be): searches say so and use the exact
    scan; the next db init replaces it."""
    config = _configured(monkeypatch, RAG_APPROX_MIN_CHUNKS="1")
    with localrag.Store.open(config) as s, localrag.Store.open(config) as writer:
        name = s.approx_index_name(config.embedding_key)
        with writer.transaction():
            writer.run("UPDATE embeddings SET updated_at = updated_at WHERE id = (SELECT min(id) FROM embeddings)")
            s.run("SET statement_timeout = '1s'")
            with pytest.raises(localrag.DatabaseError):
                s.run(f'CREATE INDEX CONCURRENTLY "{name}" ON embeddings USING hnsw ((embedding::halfvec(1024)) '
                      "halfvec_cosine_ops) WHERE embedding_provider = 'fake' AND embedding_model = 'fake-lexical-v1' "
                      "AND embedding_dim = 1024")
            s.run("RESET statement_timeout")
        assert s.approx_index(config.embedding_key)["valid"] is False
    with localrag.Store.open(config) as s:
        retrieved = localrag.run_retrieval(s, config, QUERIES[0], 5)
    assert retrieved["search_path"] == "exact" and "interrupted" in retrieved["search_path_reason"]
    code, out = run_cli("db", "init", "--json")
    assert code == 0 and json.loads(out)["approx_index"]["reason"].startswith("rebuilt")
    assert localrag.search(config, QUERIES[0], 5)["search_path"] == "approx"


def test_exact_setting_never_builds(ingested, no_approx_index, monkeypatch):
    config = _configured(monkeypatch, RAG_SEARCH="exact", RAG_APPROX_MIN_CHUNKS="0")
    assert localrag.db_init(config)["approx_index"] is None
    with localrag.Store.open(config) as s:
        assert s.approx_index(config.embedding_key) is None


def test_index_memory_warning_names_the_setting():
    assert localrag.hnsw_memory_warning(1000, 16, 64) is None
    text = localrag.hnsw_memory_warning(1_000_000, 16, 1024)
    assert "RAG_INDEX_MEMORY_MB" in text and "2," in text  # ~2.5 GB for a million 1024-dim vectors


def test_a_build_killed_with_kill_9_leaves_nothing_and_the_next_db_init_builds(ingested, no_approx_index,
                                                                                 monkeypatch):
    """kill -9 of a real `localrag ingest` while the index build it ends with waits (held by a lock, as a long
    build would run): the server ends the build within a second of the client's death
    (client_connection_check_interval) instead of building for nobody, and no index is left (the build's
    transaction never commits); searches stay exact, and the next db init builds it."""
    import os
    import signal
    import subprocess
    import sys
    import time
    config = _configured(monkeypatch, RAG_APPROX_MIN_CHUNKS="1")
    _, vault, _ = ingested
    holder = localrag.Store.open(config)
    holder.run("BEGIN")
    holder.run("LOCK TABLE embeddings IN ROW EXCLUSIVE MODE")  # CREATE INDEX needs SHARE: it waits
    proc = subprocess.Popen([sys.executable, "-m", "localrag", "ingest", str(vault), "--json"], env=dict(os.environ),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=os.path.dirname(localrag.__file__))
    try:
        deadline = time.monotonic() + 60
        with localrag.Store.open(config) as s:
            while not s.run("SELECT 1 FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%' AND "
                            "wait_event_type = 'Lock'"):
                assert proc.poll() is None and time.monotonic() < deadline, "the ingest never started its build"
                time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10   # client_connection_check_interval is 1 s: the build does not wait on
        with localrag.Store.open(config) as s:
            while s.run("SELECT 1 FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%'"):
                assert time.monotonic() < deadline, "the dead client's build is still waiting"
                time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        holder.run("ROLLBACK")
        holder.close()
    time.sleep(0.5)
    with localrag.Store.open(config) as s:
        assert not s.run("SELECT 1 FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%' AND state = 'active'")
        assert s.approx_index(config.embedding_key) is None
    assert localrag.search(config, QUERIES[0], 5)["search_path"] == "exact"
    assert localrag.db_init(config)["approx_index"]["entries"] > 0
    assert localrag.search(config, QUERIES[0], 5)["search_path"] == "approx"


def test_candidate_facts_agree_whichever_index_reads_the_postings(ingested):
    """candidate_facts reads the candidates' postings by term (few postings) or by candidate through the primary
    key (terms with many postings): both give the same BM25, matched terms, names and distances, and the
    candidate form really reads the primary key (the planner, left alone, takes the term index)."""
    config, _, _ = ingested
    key = config.embedding_key
    vector = localrag.encode_vector(localrag.get_embedder(config).embed_query(QUERIES[3]))
    with localrag.Store.open(config) as s:
        # the plan check below needs the table's real size: without statistics (a sample vault is below the bulk
        # size after which ingest analyzes) a whole-index scan looks as cheap as any lookup
        s.run("ANALYZE keyword_postings")
    with localrag.Store.open(config) as s, s.snapshot():
        words = localrag.keyword_terms("how to reset a password vpn 发布 回滚")
        n, avgdl, df = s.keyword_stats(words)
        terms = [w for w in dict.fromkeys(words) if df[w]]
        weights = [1.0 + i / 10 for i in range(len(terms))]
        ids = [row[0] for row in s.run("SELECT id FROM chunks ORDER BY id")]
        assert len(terms) >= 3 and len(ids) >= 10
        missing = ids[::2]
        by_term = s.candidate_facts(ids, terms, weights, avgdl, True, key, vector, missing, term_postings=0)
        by_candidate = s.candidate_facts(ids, terms, weights, avgdl, True, key, vector, missing,
                                         term_postings=10 ** 9)
        assert by_term == by_candidate
        assert sum(1 for f in by_term.values() if f["matched"]) >= 3
        assert all(("distance" in f) == (cid in missing) for cid, f in by_term.items())
        captured = []
        real_run = s.run
        s.run = lambda sql, stream=None, **p: captured.append((sql, p)) or real_run(sql, stream, **p)
        try:
            s.candidate_facts(ids, terms, weights, avgdl, term_postings=10 ** 9)
        finally:
            del s.run
        sql, params = captured[-1]
        s.run("SET LOCAL enable_seqscan = off")   # a sample-sized table would otherwise be read whole
        plan = "\n".join(r[0] for r in s.run("EXPLAIN " + sql, **params))
        assert "keyword_postings_pkey" in plan and "idx_keyword_postings_term" not in plan, plan
