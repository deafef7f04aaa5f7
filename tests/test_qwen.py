"""local-qwen3: the real sentence-transformers loading path, offline, against a tiny Qwen3 model that the test
builds into a Hugging Face cache layout (the real weights cannot be downloaded here)."""

import json
import os
import subprocess
import sys

import pytest

import localrag
from conftest import ROOT, run_cli

pytestmark = pytest.mark.qwen
pytest.importorskip("sentence_transformers", reason="the [local-qwen3] extra is not installed")

from tiny_qwen3 import build_tiny_qwen3  # noqa: E402


@pytest.fixture
def qwen_env(env, tmp_path, monkeypatch):
    cache = tmp_path / "qwen-cache"
    build_tiny_qwen3(cache)
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(cache))
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
    monkeypatch.setenv("EMBEDDING_MODEL", "Qwen/Qwen3-Embedding-0.6B")
    return cache


def test_warmup_and_status_with_cached_model(qwen_env):
    code, out = run_cli("embeddings", "warmup", "--json")
    result = json.loads(out)
    assert code == 0 and result["dim"] == 1024 and abs(result["norm"] - 1.0) < 1e-4 and result["cached"]
    code, out = run_cli("embeddings", "status", "--json")
    status = json.loads(out)
    assert status["cached"] is True and status["size_bytes"] > 100_000 and status["cache_dir"] == str(qwen_env)


def test_missing_cache_gives_one_clear_message(env, tmp_path, monkeypatch, vault, capfd, db):
    empty = tmp_path / "empty-cache"
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(empty))
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
    monkeypatch.setenv("EMBEDDING_MODEL", "")
    code, out = run_cli("ingest", str(vault))
    err = capfd.readouterr().err.strip().splitlines()
    assert code == localrag.EXIT_EMBEDDING
    line = err[-1]
    for needle in (str(empty), "1.2 GB", "1.5 GB", "localrag embeddings warmup", "copy"):
        assert needle in line
    assert json.loads(run_cli("embeddings", "status", "--json")[1])["cached"] is False


def test_ingest_search_and_provider_switch_backfill(qwen_env, db, vault, monkeypatch):
    fake = localrag.load_config(environ={**os.environ, "EMBEDDING_PROVIDER": "fake", "EMBEDDING_MODEL": ""})
    first = localrag.ingest(fake, vault)
    qwen = localrag.load_config()
    assert qwen.rag_min_similarity == 0.35
    switched = localrag.ingest(qwen, vault)
    assert switched["documents_backfilled"] == first["documents_added"] and switched["chunks_written"] == 0
    assert switched["embeddings_written"] == first["chunks_written"]
    result = localrag.search(qwen, "客户 P1 工单应该怎么升级？", 5)
    assert len(result["results"]) == 5 and 0.0 <= result["confidence"] <= 1.0
    back = localrag.ingest(fake, vault)
    assert back["documents_skipped"] == first["documents_added"] and back["embeddings_written"] == 0
    with localrag.Store.open(qwen) as s:
        per = dict(s.run("SELECT embedding_provider, count(*) FROM embeddings GROUP BY 1"))
        norms = s.run("SELECT min(vector_norm(embedding)), max(vector_norm(embedding)) FROM embeddings "
                      "WHERE embedding_provider = 'local-qwen3'")[0]
    assert per == {"fake": first["chunks_written"], "local-qwen3": first["chunks_written"]}
    assert abs(norms[0] - 1) < 1e-3 and abs(norms[1] - 1) < 1e-3


def test_query_prompt_is_applied_and_documents_get_none(qwen_env):
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer("Qwen/Qwen3-Embedding-0.6B", cache_folder=str(qwen_env), device="cpu",
                                local_files_only=True)
    embedder = localrag.Qwen3Embedder(qwen_env)
    q = "客户 P1 工单应该怎么升级？"
    got = embedder.embed_query(q)
    with_prompt = model.encode([q], prompt_name="query", normalize_embeddings=True)[0]
    without = model.encode([q], normalize_embeddings=True)[0]
    assert max(abs(a - b) for a, b in zip(got, with_prompt)) < 1e-5
    assert max(abs(a - b) for a, b in zip(got, without)) > 1e-3
    fields = localrag.document_fields("正文内容", ["章节"], "a/b.md", ["tag"], ["Link"])
    doc = embedder.embed_documents([fields])[0]
    plain = model.encode([localrag.document_text(fields)], normalize_embeddings=True)[0]
    assert max(abs(a - b) for a, b in zip(doc, plain)) < 1e-5


def test_wrong_dimension_model_is_refused(env, tmp_path, monkeypatch, db, vault):
    cache = tmp_path / "small-cache"
    build_tiny_qwen3(cache, dim=384)
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(cache))
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
    monkeypatch.setenv("EMBEDDING_MODEL", "")
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == localrag.EXIT_EMBEDDING
    err = json.loads(out)["error"]
    assert err["code"] == "embedding_dim_mismatch" and "384" in err["message"]
    with localrag.Store.open(localrag.load_config()) as s:
        assert s.run("SELECT count(*) FROM embeddings")[0][0] == 0


def test_unavailable_device_is_a_clear_error(qwen_env, monkeypatch, db, vault):
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("EMBEDDING_DEVICE", "cuda")
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == localrag.EXIT_EMBEDDING and "EMBEDDING_DEVICE=cuda" in json.loads(out)["error"]["message"]


def test_cli_subprocess_runs_offline_by_itself(qwen_env, db, vault, env):
    """A fresh process without HF_HUB_OFFLINE and with the hub pointed at a dead local port still ingests and
    searches: localrag turns offline mode on itself."""
    child = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    child["HF_ENDPOINT"] = "http://127.0.0.1:9"
    run = lambda *a: subprocess.run([sys.executable, "-m", "localrag", *a], capture_output=True, text=True,
                                    env=child, cwd=ROOT)
    ingest = run("ingest", str(vault), "--json")
    assert ingest.returncode == 0, ingest.stderr
    search = run("search", "API 延迟", "--json")
    assert search.returncode == 0 and len(json.loads(search.stdout)["results"]) == 5


def test_warmup_that_cannot_fetch_says_what_to_do(env, tmp_path, monkeypatch, capfd):
    """No cache and no way to reach the hub (offline here): one message with the cache path and the copy hint."""
    empty = tmp_path / "nothing-here"
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(empty))
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
    monkeypatch.setenv("EMBEDDING_MODEL", "")
    code, out = run_cli("embeddings", "warmup", "--json")
    assert code == localrag.EXIT_EMBEDDING
    err = json.loads(out)["error"]
    assert err["code"] == "embedding_model_unavailable" and str(empty) in err["message"]
    assert "copy" in err["message"]
