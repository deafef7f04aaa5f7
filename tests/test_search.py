"""Search: exact scan over the current provider's vectors, clamped scores, the smoke loop on the eval questions."""

import json

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
    assert set(result) == {"confidence", "results", "retrieval", "gate"} and len(result["results"]) == 5
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
        assert scores == [r["scores"]["keyword"] for r in result["results"]]
    else:
        assert result["confidence"] == max(r["scores"]["vector"] for r in result["results"])
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
    assert result["gate"]["mode"] == "no_answer" and result["gate"]["reason"].startswith("no evidence")


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
