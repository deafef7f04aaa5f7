"""Config: precedence (OS env > .env > defaults), repo-root discovery, validation, secrets never shown."""

import dataclasses
import json

import pytest

import localrag
from conftest import ROOT, run_cli


def make_repo(tmp_path, env_text=None):
    repo = tmp_path / "repo"
    (repo / "sub" / "deeper").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\nname='x'\n")
    (repo / ".env.sample").write_text("")
    if env_text is not None:
        (repo / ".env").write_text(env_text)
    return repo


def test_defaults_without_any_env_file(tmp_path):
    cfg = localrag.load_config(environ={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert cfg.env_file is None
    assert (cfg.embedding_provider, cfg.embedding_model, cfg.embedding_dim) == ("fake", "fake-lexical-v1", 1024)
    assert cfg.rag_min_similarity == 0.20 and cfg.rag_top_k == 5 and cfg.rag_fallback_enabled is False
    assert cfg.database_url == ""
    assert cfg.localrag_home == tmp_path / ".local" / "share" / "localrag"
    assert cfg.embedding_cache_dir == cfg.localrag_home / "embeddings"


def test_repo_root_found_by_walking_up_and_env_read(tmp_path):
    repo = make_repo(tmp_path, "RAG_TOP_K=7\nLLM_MODEL=from-dotenv\n")
    cfg = localrag.load_config(environ={}, cwd=repo / "sub" / "deeper")
    assert cfg.repo_root == repo and cfg.env_file == repo / ".env"
    assert cfg.rag_top_k == 7
    assert cfg.embedding_cache_dir == repo / ".cache" / "embeddings"


def test_os_environment_beats_env_file_and_empty_means_unset(tmp_path):
    repo = make_repo(tmp_path, "RAG_TOP_K=7\nRAG_CONTEXT_TOKEN_BUDGET=3000\n")
    cfg = localrag.load_config(environ={"RAG_TOP_K": "3", "RAG_CONTEXT_TOKEN_BUDGET": ""}, cwd=repo)
    assert cfg.rag_top_k == 3
    assert cfg.rag_context_token_budget == 3000  # empty OS value = unset, so .env applies


def test_explicit_env_file(tmp_path):
    env_file = tmp_path / "custom.env"
    env_file.write_text("RAG_MIN_SIMILARITY=0.5\n")
    cfg = localrag.load_config(env_file, environ={}, cwd=tmp_path)
    assert cfg.rag_min_similarity == 0.5 and cfg.rag_min_similarity_source == "explicit"
    with pytest.raises(localrag.ConfigInvalid, match="no such file"):
        localrag.load_config(tmp_path / "missing.env", environ={}, cwd=tmp_path)


@pytest.mark.parametrize("provider,expected", [("fake", 0.20), ("local-qwen3", 0.35)])
def test_threshold_default_per_provider(tmp_path, provider, expected):
    cfg = localrag.load_config(environ={"EMBEDDING_PROVIDER": provider, "RAG_MIN_SIMILARITY": ""}, cwd=tmp_path)
    assert cfg.rag_min_similarity == expected
    assert cfg.embedding_model == localrag.EMBEDDERS[provider].fixed_model


@pytest.mark.parametrize("key,value,needle", [
    ("EMBEDDING_DIM", "768", "EMBEDDING_DIM=768"),
    ("EMBEDDING_PROVIDER", "openai", "EMBEDDING_PROVIDER='openai'"),
    ("EMBEDDING_MODEL", "BAAI/bge-m3", "fake-lexical-v1"),
    ("EMBEDDING_DEVICE", "tpu", "cpu, cuda, mps"),
    ("LLM_PROVIDER", "kimi", "fake, openai-compatible"),
    ("RAG_TOP_K", "0", "1 to 20"),
    ("RAG_TOP_K", "21", "1 to 20"),
    ("RAG_TOP_K", "five", "not an integer"),
    ("RAG_MIN_SIMILARITY", "1.5", "0 to 1"),
    ("RAG_MIN_SIMILARITY", "high", "0 to 1"),
    ("RAG_FALLBACK_ENABLED", "maybe", "true or false"),
    ("DATABASE_URL", "mysql://x@y/z", "postgresql://"),
])
def test_validation_names_key_value_and_allowed(tmp_path, key, value, needle):
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={key: value}, cwd=tmp_path)
    assert key in info.value.message and needle in info.value.message
    assert info.value.exit_code == localrag.EXIT_CONFIG


def test_qwen_model_mismatch_is_rejected(tmp_path):
    with pytest.raises(localrag.ConfigInvalid, match="Qwen/Qwen3-Embedding-0.6B"):
        localrag.load_config(environ={"EMBEDDING_PROVIDER": "local-qwen3", "EMBEDDING_MODEL": "fake-lexical-v1"},
                             cwd=tmp_path)


def test_summary_never_shows_secrets(tmp_path):
    secret, token, pw = "sk-SENTINEL-123456", "tok-SENTINEL-999", "pw-SENTINEL-777"
    cfg = localrag.load_config(environ={"LLM_API_KEY": secret, "LOCALRAG_API_TOKEN": token,
                                        "DATABASE_URL": f"postgresql://u:{pw}@db.example:5432/x"}, cwd=tmp_path)
    text = json.dumps(cfg.summary()) + repr(cfg)
    for s in (secret, token, pw):
        assert s not in text
    assert cfg.summary()["llm_api_key"] == "set" and cfg.summary()["api_token"] == "set"
    assert "u:***@db.example" in cfg.summary()["database_url"]


def test_config_command_json(env, monkeypatch, capfd):
    monkeypatch.setenv("LLM_API_KEY", "sk-SENTINEL-cli")
    code, out = run_cli("config", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["llm_api_key"] == "set" and data["rag_min_similarity"] == 0.2
    assert data["embedded_data_dir"] is None  # DATABASE_URL is set by the test harness
    assert "sk-SENTINEL-cli" not in out + capfd.readouterr().err


def test_config_error_exit_code_and_json_body(env, monkeypatch):
    monkeypatch.setenv("EMBEDDING_DIM", "512")
    code, out = run_cli("search", "x", "--json")
    assert code == localrag.EXIT_CONFIG
    assert json.loads(out)["error"]["code"] == "config_invalid"


def test_config_and_doctor_show_bad_settings_instead_of_stopping_at_them(env, monkeypatch, capfd):
    """One bad value used to stop `config` and `doctor` at its one line (the tools that should explain it) and
    `db stop` (which must stop the server whatever a setting says): they now run with each bad setting at its
    default, and say so; every other command still refuses."""
    monkeypatch.setenv("RAG_TOP_K", "abc")
    monkeypatch.setenv("RAG_MIN_COVERAGE", "2")
    code, out = run_cli("config", "--json")
    data = json.loads(out)
    assert code == localrag.EXIT_CONFIG and data["rag_top_k"] == 5
    assert [p["key"] for p in data["problems"]] == ["RAG_TOP_K", "RAG_MIN_COVERAGE"]
    assert "RAG_TOP_K='abc' is not an integer; ignored here (its default applies)" in capfd.readouterr().err
    code, out = run_cli("config")
    assert code == localrag.EXIT_CONFIG and "problem                      RAG_TOP_K='abc' is not an integer" in out
    code, out = run_cli("doctor", "--json")
    problems = json.loads(out)["problems"]
    assert code == localrag.EXIT_CONFIG and problems[0] == {"code": "config_invalid", "exit_code": 3,
                                                            "message": "RAG_TOP_K='abc' is not an integer"}
    capfd.readouterr()
    assert run_cli("db", "stop")[0] == localrag.EXIT_USAGE   # reached: it says DATABASE_URL is not its to stop
    assert "stops the embedded Postgres only" in capfd.readouterr().err
    assert run_cli("search", "x")[0] == localrag.EXIT_CONFIG
    monkeypatch.setenv("LOCALRAG_HOME", "")
    with pytest.raises(localrag.ConfigInvalid):  # not a setting (the --env-file itself): no way around it
        localrag._config_despite("/no/such/.env", localrag.ConfigInvalid("x", key="--env-file"))


@pytest.mark.parametrize("url,expected", [
    ("postgresql://alice:s%40cret@db.internal:6543/rag?sslmode=disable",
     {"user": "alice", "password": "s@cret", "host": "db.internal", "port": 6543, "database": "rag"}),
    ("postgres://bob@/rag_test?host=/tmp",
     {"user": "bob", "database": "rag_test", "unix_sock": "/tmp/.s.PGSQL.5432"}),
    ("postgresql://bob@%2Ftmp:5433/x", {"user": "bob", "database": "x", "unix_sock": "/tmp/.s.PGSQL.5433"}),
])
def test_parse_database_url(url, expected):
    kwargs = localrag.parse_database_url(url).kwargs
    for k, v in expected.items():
        assert kwargs[k] == v
    assert "ssl_context" not in kwargs


def test_sslmode_require_encrypts_without_verification():
    ctx = localrag.parse_database_url("postgresql://u:p@h/db?sslmode=require").kwargs["ssl_context"]
    assert ctx.check_hostname is False
    full = localrag.parse_database_url("postgresql://u:p@h/db?sslmode=verify-full").kwargs["ssl_context"]
    assert full.check_hostname is True
    with pytest.raises(localrag.ConfigInvalid, match="sslmode"):
        localrag.parse_database_url("postgresql://u:p@h/db?sslmode=bogus")


def test_mask_url_hides_the_password():
    assert localrag.mask_url("postgresql://u:hunter2@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "hunter2" not in localrag.mask_url("postgresql://u@h/db?password=hunter2")


# --- every key: its default, a valid value, an invalid one (table-driven over ENV_KEYS) ---------------------------
# A key added to ENV_KEYS without a row here fails test_every_key_has_cases.  "invalid" values are rejected by
# load_config with config_invalid naming the key; keys whose value can only be judged when used (a path, a URL,
# a secret) have a "use" check instead: the command that uses them fails with the documented code.

def _mib(x):
    return int(x * 1024 * 1024)


KEY_CASES = {
    "DATABASE_URL": dict(default=("database_url", ""), valid=("postgresql://u:p@db.example:5433/rag", "database_url",
                         "postgresql://u:p@db.example:5433/rag"), invalid=["mysql://x/y", "postgresql://h:port/db"]),
    "TEST_DATABASE_URL": dict(default=("test_database_url", ""), valid=("postgresql://h/rag_test", "test_database_url",
                              "postgresql://h/rag_test"), use="test_database_url_guard"),
    "VAULT_PATH": dict(default=("vault_path", ""), valid=("samples/acme-vault", "vault_path", "samples/acme-vault"),
                       use="vault_path_missing"),
    "LOCALRAG_HOME": dict(default=("localrag_home", "<default_home>"), valid=("/tmp/lr-h", "localrag_home",
                          __import__("pathlib").Path("/tmp/lr-h")), use="home_unusable"),
    "EMBEDDING_PROVIDER": dict(default=("embedding_provider", "fake"), valid=("local-qwen3", "embedding_provider",
                               "local-qwen3"), invalid=["openai-ish", "FAKE "]),
    "EMBEDDING_MODEL": dict(default=("embedding_model", "fake-lexical-v1"), valid=("fake-lexical-v1",
                            "embedding_model", "fake-lexical-v1"), invalid=["BAAI/bge-m3"]),
    "EMBEDDING_DIM": dict(default=("embedding_dim", 1024), valid=("1024", "embedding_dim", 1024),
                          invalid=["512", "1024.0", "x"]),
    "EMBEDDING_DEVICE": dict(default=("embedding_device", "cpu"), valid=("CUDA", "embedding_device", "cuda"),
                             invalid=["tpu"]),
    "EMBEDDING_CACHE_DIR": dict(default=("embedding_cache_dir", "<home>/embeddings"), valid=(
        "rel/cache", "embedding_cache_dir", "<cwd>/rel/cache"), use="cache_dir_unusable"),
    "LLM_PROVIDER": dict(default=("llm_provider", "fake"), valid=("openai-compatible", "llm_provider",
                         "openai-compatible"), invalid=["kimi"]),
    "LLM_BASE_URL": dict(default=("llm_base_url", ""), valid=("http://127.0.0.1:9/v1", "llm_base_url",
                         "http://127.0.0.1:9/v1"), use="llm_base_url_not_http"),
    "LLM_MODEL": dict(default=("llm_model", "fake-local"), valid=("m-1", "llm_model", "m-1"), use="llm_model_missing"),
    "LLM_API_KEY": dict(default=("llm_api_key", ""), valid=("sk-secret", "llm_api_key", "sk-secret"),
                        use="llm_api_key_optional"),
    "LLM_TIMEOUT_SECONDS": dict(default=("llm_timeout_s", 30.0), valid=("0.1", "llm_timeout_s", 0.1),
                                invalid=["0", "-1", "nan", "inf", "soon", "86401", "1e10", "1e-300", "0.09"]),
    "LLM_MAX_TOKENS": dict(default=("llm_max_tokens", 1024), valid=("65536", "llm_max_tokens", 65536),
                           invalid=["0", "-1", "65537", "1.5", "1k", "x", "99999999999999999999"]),
    "RAG_TOP_K": dict(default=("rag_top_k", 5), valid=("20", "rag_top_k", 20),
                      invalid=["0", "21", "3.5", "x", "1_0", "\u0663"]),
    "RAG_MIN_SIMILARITY": dict(default=("rag_min_similarity", 0.20), valid=("0.35", "rag_min_similarity", 0.35),
                               invalid=["1.5", "-0.1", "nan", "x"]),
    "RAG_CONTEXT_TOKEN_BUDGET": dict(default=("rag_context_token_budget", 6000), valid=(
        "100", "rag_context_token_budget", 100), invalid=["99", "0", "-5", "6k", "200001", "99999999999999999999"]),
    "RAG_FALLBACK_ENABLED": dict(default=("rag_fallback_enabled", False), valid=("Yes", "rag_fallback_enabled", True),
                                 invalid=["maybe", "2"]),
    "LOCALRAG_API_TOKEN": dict(default=("api_token", ""), valid=("tok-123", "api_token", "tok-123"),
                               use="api_token_required"),
    "LOCALRAG_MAX_FILE_MB": dict(default=("max_file_bytes", _mib(10)), valid=("0.5", "max_file_bytes", _mib(0.5)),
                                 invalid=["0", "-1", "ten", "inf", "1e-300"]),
    "LOCALRAG_ALLOWED_HOSTS": dict(default=("allowed_hosts", ()), valid=("KB.local, rag.", "allowed_hosts",
                                   ("kb.local", "rag")), invalid=["a,,b", "kb.local,", "http://kb.local"]),
    "LOCALRAG_MAX_BODY_BYTES": dict(default=("max_body_bytes", 1024 * 1024), valid=("16777216", "max_body_bytes", 16777216),
                                    invalid=["0", "-1", "1e6", "x", "16777217", "99999999999"]),
    "LOCALRAG_MAX_REQUESTS": dict(default=("max_requests", 32), valid=("4096", "max_requests", 4096),
                                  invalid=["0", "4097", "-1", "x", "1.5"]),
    "LOCALRAG_QUEUE_WAIT_SECONDS": dict(default=("queue_wait_s", 30.0), valid=("0", "queue_wait_s", 0.0),
                                        invalid=["-1", "3601", "nan", "inf", "soon"]),
    "LOCALRAG_INGEST_WORKERS": dict(default=("ingest_workers", "<cpus>"), valid=("64", "ingest_workers", 64),
                                    invalid=["0", "65", "x"]),
    "EMBEDDING_BASE_URL": dict(default=("embedding_base_url", ""), valid=(
        "http://127.0.0.1:8080/v1", "embedding_base_url", "http://127.0.0.1:8080/v1"), use="embedding_base_url_not_http"),
    "EMBEDDING_API_KEY": dict(default=("embedding_api_key", ""), valid=("sk-emb", "embedding_api_key", "sk-emb"),
                              use="embedding_api_key_refused"),
    "EMBEDDING_BATCH_SIZE": dict(default=("embedding_batch_size", 32), valid=("2048", "embedding_batch_size", 2048),
                                 invalid=["0", "2049", "x"]),
    "EMBEDDING_TIMEOUT_SECONDS": dict(default=("embedding_timeout_s", 60.0), valid=("2.5", "embedding_timeout_s", 2.5),
                                      invalid=["0", "-1", "nan", "soon", "1e10", "1e300", "1e-300", "0.05"]),
    "EMBEDDING_DIM_REQUEST": dict(default=("embedding_dim_request", None), valid=(
        "1024", "embedding_dim_request", 1024), invalid=["768", "x"]),
    "EMBEDDING_QUERY_PREFIX": dict(default=("embedding_query_prefix", ""), valid=(
        "query: ", "embedding_query_prefix", "query: "), use="embedding_prefixes_sent"),
    "EMBEDDING_DOCUMENT_PREFIX": dict(default=("embedding_document_prefix", ""), valid=(
        "passage: ", "embedding_document_prefix", "passage: "), use="embedding_prefixes_sent"),
    "EMBEDDING_INPUT_TYPE": dict(default=("embedding_input_type", False), valid=("true", "embedding_input_type", True),
                                 invalid=["maybe"]),
    "RAG_RETRIEVAL": dict(default=("rag_retrieval", "hybrid"), valid=("Keyword", "rag_retrieval", "keyword"),
                          invalid=["bm25", "semantic"]),
    "RAG_FUSION": dict(default=("rag_fusion", "weighted"), valid=("rrf", "rag_fusion", "rrf"), invalid=["max"]),
    "RAG_KEYWORD_WEIGHT": dict(default=("rag_keyword_weight", 0.6), valid=("0.3", "rag_keyword_weight", 0.3),
                               invalid=["1.5", "-0.1", "x"]),
    "RAG_MIN_COVERAGE": dict(default=("rag_min_coverage", 0.4), valid=("0.25", "rag_min_coverage", 0.25),
                             invalid=["2", "-1", "x"]),
    "RAG_MIN_COVERAGE_UNSEEN": dict(default=("rag_min_coverage_unseen", 0.6), valid=(
        "0.5", "rag_min_coverage_unseen", 0.5), invalid=["1.01", "x"]),
    "RAG_MIN_MATCHED_TERMS": dict(default=("rag_min_matched_terms", 1), valid=("3", "rag_min_matched_terms", 3),
                                  invalid=["-1", "21", "x"]),
    "RAG_UNSEEN_CJK_BACKOFF": dict(default=("rag_unseen_cjk_backoff", 0.25), valid=(
        "0.5", "rag_unseen_cjk_backoff", 0.5), invalid=["1.5", "x"]),
    "RAG_MIN_SIMILARITY_ALONE": dict(default=("rag_min_similarity_alone", None), valid=(
        "0.86", "rag_min_similarity_alone", 0.86), invalid=["1.2", "-0.5", "x"]),
    "RAG_STRICT_CLAIMS": dict(default=("rag_strict_claims", False), valid=("true", "rag_strict_claims", True),
                              invalid=["sometimes"]),
    "RAG_RECORD_ANSWERS": dict(default=("rag_record_answers", True), valid=("false", "rag_record_answers", False),
                               invalid=["2"]),
    "RAG_SEARCH": dict(default=("rag_search", "auto"), valid=("Approx", "rag_search", "approx"),
                       invalid=["fast", "hnsw"]),
    "RAG_APPROX_MIN_CHUNKS": dict(default=("rag_approx_min_chunks", 100_000), valid=(
        "0", "rag_approx_min_chunks", 0), invalid=["-1", "2147483648", "many"]),
    "RAG_HNSW_M": dict(default=("rag_hnsw_m", 16), valid=("32", "rag_hnsw_m", 32), invalid=["1", "101", "x"]),
    "RAG_HNSW_EF_CONSTRUCTION": dict(default=("rag_hnsw_ef_construction", 200), valid=(
        "64", "rag_hnsw_ef_construction", 64), invalid=["3", "1001", "31", "x"]),
    "RAG_HNSW_EF_SEARCH": dict(default=("rag_hnsw_ef_search", 1000), valid=("200", "rag_hnsw_ef_search", 200),
                               invalid=["0", "1001", "x"]),
    "RAG_INDEX_MEMORY_MB": dict(default=("rag_index_memory_mb", 1024), valid=("4096", "rag_index_memory_mb", 4096),
                                invalid=["63", "70000", "1GB"]),
    "RAG_TITLE_WEIGHT": dict(default=("rag_title_weight", 0.2), valid=("0", "rag_title_weight", 0.0),
                             invalid=["1.5", "-0.1", "x"]),
    "RAG_MAX_CHUNKS_PER_NOTE": dict(default=("rag_max_chunks_per_note", 2), valid=(
        "0", "rag_max_chunks_per_note", 0), invalid=["-1", "21", "1.5", "two"]),
    "LOCALRAG_PG_SHARED_BUFFERS_MB": dict(default=("pg_shared_buffers_mb", None), valid=(
        "512", "pg_shared_buffers_mb", 512), invalid=["127", "65537", "1GB", "-1"]),
}


@pytest.mark.parametrize("configured, memory_mb, expected", [
    (None, 24_105, "4096MB"),     # a quarter of memory, at most 4 GB
    (None, 8_000, "2000MB"),
    (None, 300, "128MB"),         # never below Postgres' own default
    (None, None, "128MB"),        # memory unknown: Postgres' default
    (512, 24_105, "512MB"),       # LOCALRAG_PG_SHARED_BUFFERS_MB wins
    (8192, 1_000, "8192MB"),
])
def test_embedded_server_settings(configured, memory_mb, expected, tmp_path):
    cfg = dataclasses.replace(localrag.load_config(environ={"HOME": str(tmp_path)}, cwd=tmp_path),
                              pg_shared_buffers_mb=configured)
    assert localrag.embedded_server_settings(cfg, memory_mb) == {"shared_buffers": expected, "jit": "off"}


def test_memory_is_known_here():
    assert localrag._memory_mb() > 256


def test_shared_buffers_auto_is_case_blind(tmp_path):
    cfg = localrag.load_config(environ={"HOME": str(tmp_path), "LOCALRAG_PG_SHARED_BUFFERS_MB": "Auto"}, cwd=tmp_path)
    assert cfg.pg_shared_buffers_mb is None and cfg.summary()["pg_shared_buffers_mb"] == "auto"


def test_every_key_has_cases():
    assert set(KEY_CASES) == set(localrag.ENV_KEYS)
    for key, case in KEY_CASES.items():
        assert ("invalid" in case) != ("use" in case), key


def _expand(value, tmp_path):
    import os
    if not isinstance(value, str):
        return value
    home = localrag.default_home({"HOME": str(tmp_path)})
    table = {"<default_home>": home, "<home>/embeddings": home / "embeddings", "<cpus>": min(os.cpu_count() or 1, 8)}
    if value in table:
        return table[value]
    if value.startswith("<cwd>/"):
        return tmp_path / value[len("<cwd>/"):]
    return value


@pytest.mark.parametrize("key", sorted(KEY_CASES))
def test_key_default_and_valid_value(key, tmp_path):
    case = KEY_CASES[key]
    attr, expected = case["default"]
    cfg = localrag.load_config(environ={"HOME": str(tmp_path)}, cwd=tmp_path)
    assert getattr(cfg, attr) == _expand(expected, tmp_path)
    value, attr, expected = case["valid"]
    extra = {"EMBEDDING_MODEL": ""} if key == "EMBEDDING_PROVIDER" else {}
    cfg = localrag.load_config(environ={"HOME": str(tmp_path), key: value, **extra}, cwd=tmp_path)
    assert getattr(cfg, attr) == _expand(expected, tmp_path)
    summary = json.dumps(cfg.summary())
    if key in ("LLM_API_KEY", "LOCALRAG_API_TOKEN"):
        assert value not in summary and '"set"' in summary  # a secret is shown only as set / not set


INVALID = [(key, value) for key, case in sorted(KEY_CASES.items()) for value in case.get("invalid", [])]


@pytest.mark.parametrize("key, value", INVALID, ids=[f"{k}={v}" for k, v in INVALID])
def test_key_invalid_value_is_config_invalid_naming_the_key(key, value, tmp_path):
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={"HOME": str(tmp_path), key: value}, cwd=tmp_path)
    assert info.value.code == "config_invalid" and key in info.value.message
    assert info.value.details.get("key") == key


USES = sorted({case["use"] for case in KEY_CASES.values() if "use" in case})


@pytest.mark.parametrize("use", USES)
def test_key_invalid_value_fails_where_it_is_used(use, env, tmp_path, monkeypatch, request):
    if use == "test_database_url_guard":
        from conftest import ROOT, check_test_database_url
        assert "_test" in check_test_database_url("postgresql://h/localrag", "")
        assert "equals DATABASE_URL" in check_test_database_url("postgresql://h/x_test", "postgresql://h/x_test")
        assert check_test_database_url("postgresql://h/x_test", "postgresql://h/x") is None
        # the real guard: pytest refuses to touch a database whose name does not end in _test (exit 3, named)
        import os
        import subprocess
        import sys
        run_env = {k: v for k, v in os.environ.items() if k not in localrag.ENV_KEYS}
        run_env["TEST_DATABASE_URL"] = "postgresql://u:pw@127.0.0.1:1/localrag"
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/test_store.py::test_db_init_is_idempotent_and_status_reports"],
                              cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 3, proc.stdout[-500:]
        assert "refusing to run database tests" in proc.stdout + proc.stderr
        assert "'localrag'" in proc.stdout + proc.stderr and "must end in _test" in proc.stdout + proc.stderr
        return
    if use == "vault_path_missing":
        monkeypatch.setenv("VAULT_PATH", str(tmp_path / "nowhere"))
        code, out = run_cli("ingest", "--json")
        assert (code, json.loads(out)["error"]["code"]) == (localrag.EXIT_VAULT, "vault_invalid")
        assert str(tmp_path / "nowhere") in json.loads(out)["error"]["message"]
        return
    if use == "home_unusable":
        monkeypatch.delenv("DATABASE_URL")
        blocker = tmp_path / "a-file"
        blocker.write_text("x")
        monkeypatch.setenv("LOCALRAG_HOME", str(blocker / "home"))
        code, out = run_cli("db", "status", "--json")
        # README: an unwritable LOCALRAG_HOME is config_invalid naming the folder
        assert (code, json.loads(out)["error"]["code"]) == (localrag.EXIT_CONFIG, "config_invalid")
        assert str(blocker) in out
        return
    if use == "cache_dir_unusable":
        blocker = tmp_path / "a-file"
        blocker.write_text("x")
        monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
        monkeypatch.setenv("EMBEDDING_MODEL", "")
        monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(blocker / "cache"))
        code, out = run_cli("embeddings", "warmup", "--json")
        assert (code, json.loads(out)["error"]["code"]) == (localrag.EXIT_EMBEDDING, "embedding_model_unavailable")
        return
    if use == "api_token_required":
        request.getfixturevalue("db")  # schema, no rows: a request past auth is a 503 retrieval_not_ready
        monkeypatch.setenv("LOCALRAG_API_TOKEN", "tok-123")
        cfg = localrag.load_config()
        srv = localrag.make_server(cfg, "127.0.0.1", 0)
        import http.client
        import threading
        thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            for auth, status in ((None, 401), ("Bearer tok-124", 401), ("Bearer tok-123", 503)):
                conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=30)
                conn.request("POST", "/search", body=b'{"query": "x"}', headers={
                    "Content-Type": "application/json", **({"Authorization": auth} if auth else {})})
                assert conn.getresponse().status == status, auth  # 503: past auth, nothing indexed
                conn.close()
        finally:
            srv.shutdown()
            srv.server_close()
            srv.api.pool.close()
            thread.join(10)
        return
    if use.startswith("embedding_"):
        from embeddings_stub import EmbeddingsStub
        with EmbeddingsStub() as stub:
            base = {"HOME": str(tmp_path), "EMBEDDING_PROVIDER": "openai-compatible", "EMBEDDING_MODEL": "stub-e5",
                    "EMBEDDING_BASE_URL": stub.base_url, "EMBEDDING_TIMEOUT_SECONDS": "5"}
            if use == "embedding_base_url_not_http":
                with pytest.raises(localrag.ConfigInvalid) as info:
                    localrag.load_config(environ={**base, "EMBEDDING_BASE_URL": "ftp://127.0.0.1/v1"}, cwd=tmp_path)
                assert info.value.details.get("key") == "EMBEDDING_BASE_URL"
            elif use == "embedding_api_key_refused":
                stub.scenario = "status:401"
                cfg = localrag.load_config(environ={**base, "EMBEDDING_API_KEY": "sk-wrong-key"}, cwd=tmp_path)
                with pytest.raises(localrag.EmbeddingAuthFailed) as info:
                    localrag.OpenAICompatibleEmbedder(cfg).embed_query("x")
                assert "EMBEDDING_API_KEY" in info.value.message and "sk-wrong-key" not in info.value.message
            else:  # the prefixes are sent as given (E5's "query: " / "passage: ")
                cfg = localrag.load_config(environ={**base, "EMBEDDING_QUERY_PREFIX": "query: ",
                                                   "EMBEDDING_DOCUMENT_PREFIX": "passage: "}, cwd=tmp_path)
                emb = localrag.OpenAICompatibleEmbedder(cfg)
                emb.embed_query("apples")
                emb.embed_documents([localrag.document_fields("pears", [], "p.md", [], [])])
                inputs = stub.inputs()
                assert inputs[0] == "query: apples" and inputs[1].startswith("passage: ")
        return
    # the LLM settings: judged when an answer is generated
    monkeypatch.setenv("LLM_PROVIDER", "openai-compatible")
    values = {"LLM_BASE_URL": "http://127.0.0.1:9/v1", "LLM_MODEL": "m", "LLM_API_KEY": "k"}
    if use == "llm_base_url_not_http":
        values["LLM_BASE_URL"] = "ftp://127.0.0.1/v1"
    elif use == "llm_model_missing":
        values["LLM_MODEL"] = ""
    elif use == "llm_api_key_optional":  # local servers (Ollama, llama.cpp, vLLM) need none: no header is sent
        values["LLM_API_KEY"] = ""
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    if use == "llm_base_url_not_http":   # judged when loaded, as EMBEDDING_BASE_URL is (was: llm_config_missing)
        with pytest.raises(localrag.ConfigInvalid) as info:
            localrag.load_config()
        assert info.value.details["key"] == "LLM_BASE_URL" and info.value.exit_code == localrag.EXIT_CONFIG
        return
    if use == "llm_api_key_optional":
        llm = localrag.get_llm(localrag.load_config())
        assert llm._http._key == "" and b"Authorization" not in llm.request_body([{"role": "user", "content": "x"}],
                                                                                   False)
        return
    with pytest.raises(localrag.LlmConfigMissing) as info:
        localrag.get_llm(localrag.load_config())
    assert info.value.code == "llm_config_missing"


@pytest.mark.parametrize("platform,environ,expected", [
    ("linux", {"HOME": "/home/ann"}, "/home/ann/.local/share/localrag"),
    ("linux", {"HOME": "/home/ann", "XDG_DATA_HOME": "/data"}, "/data/localrag"),
    ("darwin", {"HOME": "/Users/ann"}, "/Users/ann/Library/Application Support/localrag"),
    ("win32", {"USERPROFILE": "C:/Users/ann", "LOCALAPPDATA": "C:/Users/ann/AppData/Local"},
     "C:/Users/ann/AppData/Local/localrag"),
    ("win32", {"USERPROFILE": "C:/Users/ann"}, "C:/Users/ann/AppData/Local/localrag"),
])
def test_default_data_folder_follows_each_os(platform, environ, expected):
    """Simulated per OS: XDG on Linux, Application Support on macOS, LOCALAPPDATA on Windows."""
    assert localrag.default_home(environ, platform) == localrag.Path(expected)


# --- every malformed DATABASE_URL is a config_invalid naming the key (never a crash with exit 1) -----------------

@pytest.mark.parametrize("url,needle", [
    ("postgresql://u@h/db?connect_timeout=abc", "connect_timeout='abc'"),
    ("postgresql://u@h/db?connect_timeout=-1", "connect_timeout='-1'"),
    ("postgresql://u@h/db?port=abc", "port='abc'"),
    ("postgresql://u@h:abc/db", "invalid port"),
    ("postgresql://u@h:70000/db", "invalid port"),
    ("postgresql://u@h:0/db", "port 0"),
    ("postgresql://u@h/db?port=99999", "outside 1..65535"),
    ("postgresql://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "sslrootcert=/nonexistent/ca.pem"),
    ("postgressql://u@h/db", "did you mean postgresql://"),
    ("postgre://u@h/db", "did you mean"),
    ("mysql://u@h/db", "mysql://"),
    ("localhost:5432/db", "postgresql://"),
    ("postgresql://u@[::1/db", "malformed"),
    ("postgresql://u@/db?host=/nonexistent-localrag-sockets", "/nonexistent-localrag-sockets, which does not exist"),
    ("postgresql://u@h1:5432,h2:5432/db", "several hosts"),
    ("postgresql://u@h/db?conect_timeout=5", "conect_timeout"),
    ("postgresql://u@h/db?sslmode=bogus", "sslmode='bogus'"),
])
def test_malformed_database_url_is_config_invalid(tmp_path, url, needle):
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={"DATABASE_URL": url}, cwd=tmp_path)
    assert "DATABASE_URL" in info.value.message and needle in info.value.message, info.value.message
    assert info.value.details["key"] == "DATABASE_URL"


def test_malformed_database_url_through_the_cli_is_exit_3_without_the_password(env, monkeypatch, capfd):
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:pw-SENTINEL@h/db?connect_timeout=abc")
    code, out = run_cli("db", "status", "--json")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_CONFIG and json.loads(out)["error"]["code"] == "config_invalid"
    assert "pw-SENTINEL" not in out + err and "Traceback" not in err


def test_unreadable_sslrootcert_is_config_invalid(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(localrag.ConfigInvalid, match="not a readable PEM"):
        localrag.parse_database_url(f"postgresql://u@h/db?sslmode=verify-ca&sslrootcert={bad}")


def test_ipv6_host_and_connect_timeout_are_understood():
    kwargs = localrag.parse_database_url("postgresql://u@[::1]:6543/db?connect_timeout=2.5").kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["timeout"]) == ("::1", 6543, 2.5)
    assert "timeout" not in localrag.parse_database_url("postgresql://u@h/db?connect_timeout=0").kwargs


# --- credentials masked in every output ----------------------------------------------------------------------------

@pytest.mark.parametrize("url,hidden,kept", [
    ("https://user:pw-SENTINEL@llm.example/v1", ["pw-SENTINEL", "user"], ["llm.example/v1"]),
    ("https://tok-SENTINEL@llm.example/v1", ["tok-SENTINEL"], ["***@llm.example"]),
    ("https://llm.example/v1?api-key=k-SENTINEL&deployment=gpt", ["k-SENTINEL"], ["api-key=***", "deployment=gpt"]),
    ("https://llm.example/v1?key=k1-SENTINEL&access_token=t-SENTINEL&X-Amz-Signature=s-SENTINEL&apikey=a-SENTINEL",
     ["k1-SENTINEL", "t-SENTINEL", "s-SENTINEL", "a-SENTINEL"], ["key=***", "access_token=***"]),
    ("https://llm.example/v1#token=f-SENTINEL", ["f-SENTINEL"], ["llm.example/v1"]),
    ("postgresql://u:pw-SENTINEL@h/db?password=q-SENTINEL&sslmode=require", ["pw-SENTINEL", "q-SENTINEL"],
     ["u:***@h", "sslmode=require", "password=***"]),
])
def test_mask_url_hides_credentials_and_secret_query_values(url, hidden, kept):
    masked = localrag.mask_url(url)
    for h in hidden:
        assert h not in masked, masked
    for k in kept:
        assert k in masked, masked
    assert all(h not in localrag.mask_urls_in(f"failed: {url} (x)") for h in hidden)


def test_config_prints_llm_base_url_masked(env, monkeypatch, capfd):
    monkeypatch.setenv("LLM_BASE_URL", "https://bob:pw-SENTINEL@llm.example/v1?api_key=k-SENTINEL&v=2")
    for args in (("config",), ("config", "--json")):
        code, out = run_cli(*args)
        err = capfd.readouterr().err
        assert code == 0 and "SENTINEL" not in out + err
        assert "llm.example/v1?api_key=***&v=2" in out


def test_bad_llm_base_url_error_is_masked(env, monkeypatch, capfd):
    monkeypatch.setenv("LLM_PROVIDER", "openai-compatible")
    monkeypatch.setenv("LLM_BASE_URL", "ftp://bob:pw-SENTINEL@llm.example/v1?token=t-SENTINEL")
    monkeypatch.setenv("LLM_API_KEY", "sk-x")
    monkeypatch.setenv("LLM_MODEL", "m")
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config()
    assert "SENTINEL" not in info.value.message and "llm.example" in info.value.message


@pytest.mark.parametrize("key", ["LLM_TIMEOUT_SECONDS", "EMBEDDING_TIMEOUT_SECONDS"])
def test_a_timeout_the_socket_cannot_take_is_config_invalid_not_a_crash(env, monkeypatch, capfd, key):
    """1e10 passed as "a positive number", then every LLM call (and embeddings request) ended in internal_error
    (OverflowError: timestamp out of range for platform time_t), while `config` exited 0."""
    monkeypatch.setenv(key, "1e10")
    for args in (("ask", "P1", "--json"), ("search", "P1", "--json")):
        code, out = run_cli(*args)
        assert code == localrag.EXIT_CONFIG and json.loads(out)["error"]["details"]["key"] == key
    code, out = run_cli("config", "--json")
    assert code == localrag.EXIT_CONFIG
    assert [p["message"] for p in json.loads(out)["problems"]] == [f"{key}='1e10' is not a number from 0.1 to 86400; "
                                                                   f"use e.g. {'30' if key[0] == 'L' else '60'}"]
    capfd.readouterr()


@pytest.mark.parametrize("key", ["LLM_TIMEOUT_SECONDS", "EMBEDDING_TIMEOUT_SECONDS"])
def test_a_timeout_under_a_tenth_of_a_second_is_config_invalid_everywhere(env, monkeypatch, capfd, key):
    """1e-300 passed as "a positive number" (the README asks for "above 0"): every model or embeddings call then
    timed out at once, while config and doctor said nothing.  Below 0.1 s no server answers: config_invalid, naming
    the key, the value and the range, in config, doctor, llm check, ask and search alike (serve loads the same)."""
    monkeypatch.setenv(key, "1e-300")
    monkeypatch.setenv("LLM_PROVIDER", "openai-compatible")
    monkeypatch.setenv("LLM_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("LLM_MODEL", "m")
    want = f"{key}='1e-300' is not a number from 0.1 to 86400"
    for args in (("config", "--json"), ("doctor", "--json"), ("llm", "check", "--json"), ("ask", "P1", "--json"),
                 ("search", "P1", "--json")):
        code, out = run_cli(*args)
        assert code == localrag.EXIT_CONFIG, args
        body = json.loads(out)
        problems = body["problems"] if "problems" in body else [body["error"]]
        messages = [p["message"] for p in problems]
        assert any(m.startswith(want) for m in messages), (args, messages)
        if "error" in body:
            assert body["error"]["details"] == {"key": key, "value": "1e-300", "allowed": "0.1..86400"}, args
    monkeypatch.setenv(key, "0.1")   # the floor itself is a value
    assert getattr(localrag.load_config(), key.lower().replace("_seconds", "_s")) == 0.1
    capfd.readouterr()


def test_max_body_bytes_has_a_ceiling(env, monkeypatch, capfd):
    """LOCALRAG_MAX_BODY_BYTES had no upper bound: 99999999999 let one client make `serve` buffer gigabytes."""
    monkeypatch.setenv("LOCALRAG_MAX_BODY_BYTES", str(localrag.HTTP_MAX_BODY_BYTES_MAX + 1))
    code, out = run_cli("doctor", "--json")   # serve and mcp load the same config (they would run if it passed)
    assert code == localrag.EXIT_CONFIG and json.loads(out)["problems"][0]["message"].startswith(
        "LOCALRAG_MAX_BODY_BYTES=16777217")
    code, out = run_cli("config", "--json")
    problem = json.loads(out)["problems"][0]["message"]
    assert code == localrag.EXIT_CONFIG and problem.startswith("LOCALRAG_MAX_BODY_BYTES=16777217 is out of range; "
                                                              "use 1 to 16777216 bytes"), problem
    monkeypatch.setenv("LOCALRAG_MAX_BODY_BYTES", str(localrag.HTTP_MAX_BODY_BYTES_MAX))
    assert localrag.load_config().max_body_bytes == 16 * 1024 * 1024
    capfd.readouterr()


def _openai_compatible(monkeypatch, key: str, url: str) -> None:
    """The provider of `key` (LLM_BASE_URL, EMBEDDING_BASE_URL) set to openai-compatible, with a model and `url`."""
    monkeypatch.setenv(key.split("_")[0] + "_PROVIDER", "openai-compatible")
    monkeypatch.setenv(key.replace("BASE_URL", "MODEL"), "m")
    monkeypatch.setenv(key, url)


@pytest.mark.parametrize("key", ["LLM_BASE_URL", "EMBEDDING_BASE_URL"])
@pytest.mark.parametrize("url, problem", [
    ("http://[::1", "is malformed"),
    ("http://u:pw-SENTINEL@nosuchhost.invalid/v1?token=q-SENTINEL", "carries user:password@"),
    ("http://pw-SENTINEL@127.0.0.1:8080/v1", "carries user:password@"),
    ("http://u:pw-SENTINEL#x@127.0.0.1/v1", "carries user:password@"),
    ("http://u:pw-SENTINEL/x@127.0.0.1/v1", "port that is not a number"),
    ("http://127.0.0.1:99999/v1", "port that is not a number"),
    ("http:///v1", "has no host name"),
    ("localhost:8793", "starting with http:// or https://"),
    # urlsplit takes :0; http.client refuses a space at every call ("closed the connection"): both passed `config`
    ("http://127.0.0.1:0/v1", "port that is not a number from 1 to 65535"),
    ("http://127.0.0.1:8080/v1?api_key=k-SENTINEL # local", "has a space or a control character inside"),
    ("http://exa mple.com/v1", "has a space or a control character inside"),
])
def test_a_base_url_the_client_cannot_use_is_config_invalid_without_its_secrets(env, monkeypatch, capfd, key, url,
                                                                                 problem):
    """`http://[::1` crashed ask and ingest (internal_error: Invalid IPv6 URL); user:password@ (which urllib never
    sends) put the password in 'nonnumeric port' messages and ingest_runs; a bad LLM_BASE_URL was
    llm_config_missing at the first answer while `config` said nothing.  Now each is config_invalid naming the
    key when loaded, and `config` lists it as a problem (exit 3)."""
    _openai_compatible(monkeypatch, key, url)
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config()
    assert info.value.details["key"] == key and problem in info.value.message, info.value.message
    assert "SENTINEL" not in json.dumps(info.value.to_dict())
    for args in (("ask", "P1", "--json"), ("ingest", "--json"), ("config", "--json")):
        code, out = run_cli(*args)
        err = capfd.readouterr().err
        assert code == localrag.EXIT_CONFIG and "SENTINEL" not in out + err and "Traceback" not in err
    assert problem in json.loads(out)["problems"][0]["message"]


@pytest.mark.parametrize("key, url, base", [
    ("LLM_BASE_URL", "http://127.0.0.1:11434/v1/chat/completions", "http://127.0.0.1:11434/v1"),
    ("LLM_BASE_URL", "https://api.example.com/v1/Chat/Completions/?api_key=k-SENTINEL",
     "https://api.example.com/v1?api_key=***"),
    ("EMBEDDING_BASE_URL", "http://127.0.0.1:8080/v1/embeddings", "http://127.0.0.1:8080/v1"),
    ("EMBEDDING_BASE_URL", "http://127.0.0.1:8080/embeddings/", "http://127.0.0.1:8080"),
])
def test_a_base_url_ending_in_the_endpoint_path_is_config_invalid_naming_the_base(env, monkeypatch, key, url, base):
    """A URL pasted from a curl example (`.../v1/chat/completions`) was taken as the base, and every call posted to
    .../chat/completions/chat/completions (a 404 from the server, reported as the model's error).  Now
    config_invalid, its message giving the base to use, masked."""
    _openai_compatible(monkeypatch, key, url)
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config()
    assert info.value.message.endswith(f"; give the base: {key}={base}"), info.value.message
    assert info.value.details["key"] == key and "SENTINEL" not in json.dumps(info.value.to_dict())


@pytest.mark.parametrize("key, url", [("LLM_BASE_URL", "http://127.0.0.1:8080/v1/embeddings"),
                                      ("LLM_BASE_URL", "http://127.0.0.1:8080/chat/completions-proxy/v1"),
                                      ("EMBEDDING_BASE_URL", "http://127.0.0.1:8080/v1/chat/completions")])
def test_a_base_url_ending_in_another_path_is_a_base(env, monkeypatch, key, url):
    _openai_compatible(monkeypatch, key, url)
    config = localrag.load_config()
    assert (config.llm_base_url if key == "LLM_BASE_URL" else config.embedding_base_url) == url


@pytest.mark.parametrize("url, password", [
    ("postgresql://u:SENTINELpw#rest@db.example.com/x", "SENTINELpw#rest"),
    ("postgresql://u:SENTINEL?pw@db.example.com:5433/x?sslmode=disable", "SENTINEL?pw"),
    ("postgresql://u:SENTINEL/pw@db.example.com/x", None),
    ("postgresql://u:SENTINEL/pw@db.example.com:5432/x", None),
    # the password's first half all digits: a valid port this time, and the rest read as the database name
    ("postgresql://u:1234/SENTINEL@db.example.com:5432/x", None),
    # a / and then a ? in the password: the rest read as a query, and mask_url showed it all
    ("postgresql://u:SENTINEL/pw?x@db.example.com/x", None),
    ("postgresql://u:12/SENTINEL?x@db.example.com/x", None),
])
def test_a_database_password_with_an_unencoded_hash_question_mark_or_slash_is_never_shown(env, monkeypatch, capfd,
                                                                                         url, password):
    """`postgresql://u:SENTINELpw#rest@db.example.com/x` gave 'has an invalid port (Port could not be cast to
    integer value as 'SENTINELpw')': urlsplit ends the host part at # ? /, and the password read as the port.  # and ?
    are now read as libpq reads them (the user info runs to the last @ before the first /); a / cannot be, and
    is config_invalid without the password."""
    assert "SENTINEL" not in localrag.mask_url(url) and "SENTINEL" not in localrag.mask_urls_in(f"at {url} now")
    if password:
        target = localrag.parse_database_url(url)
        assert (target.kwargs["password"], target.kwargs["host"], target.kwargs["database"]) == (
            password, "db.example.com", "x")
        assert target.display.startswith("postgresql://u:***@db.example.com")
    else:
        with pytest.raises(localrag.ConfigInvalid) as info:
            localrag.parse_database_url(url)
        assert "percent-encode" in info.value.message and "SENTINEL" not in json.dumps(info.value.to_dict())
    monkeypatch.setenv("DATABASE_URL", url)
    code, out = run_cli("config", "--json")
    err = capfd.readouterr().err
    assert "SENTINEL" not in out + err and code == (localrag.EXIT_OK if password else localrag.EXIT_CONFIG)


@pytest.mark.parametrize("key", ["LLM_API_KEY", "EMBEDDING_API_KEY", "LOCALRAG_API_TOKEN"])
@pytest.mark.parametrize("value", ["sk-SENTINEL\nX-Injected: 1", "sk-SENTINEL-\u4e2d", "sk-SENTINEL\x7f"])
def test_a_secret_an_http_header_cannot_carry_is_config_invalid_and_not_shown(tmp_path, key, value):
    """A pasted line break in LLM_API_KEY ended every ask in internal_error quoting the key ("Invalid header value
    b'Bearer sk-...'"); a character outside Latin-1 in a UnicodeEncodeError."""
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={"HOME": str(tmp_path), key: value}, cwd=tmp_path)
    assert info.value.details == {"key": key} and "SENTINEL" not in info.value.message
    cfg = localrag.load_config(environ={"HOME": str(tmp_path), key: 'sk-"quoted"\\ü'}, cwd=tmp_path)
    assert 'sk-"quoted"\\ü' in (cfg.llm_api_key, cfg.embedding_api_key, cfg.api_token)


def test_embedding_base_url_is_masked_in_config_and_embeddings_status(env, monkeypatch, capfd):
    """`config` and `embeddings status` printed EMBEDDING_BASE_URL as it was: a key in its query (some hosted APIs
    take one there) reached the screen."""
    from embeddings_stub import EmbeddingsStub
    with EmbeddingsStub() as stub:
        for key, value in {"EMBEDDING_PROVIDER": "openai-compatible", "EMBEDDING_MODEL": "stub-e5",
                           "EMBEDDING_BASE_URL": stub.base_url + "?api_key=sk-SENTINEL-EQ"}.items():
            monkeypatch.setenv(key, value)
        for args in (("config",), ("config", "--json"), ("embeddings", "status"), ("embeddings", "status", "--json")):
            code, out = run_cli(*args)
            assert code == 0 and "SENTINEL" not in out + capfd.readouterr().err, args
            assert "api_key=***" in out
    assert "SENTINEL" not in repr(localrag.load_config())


# --- LOCALRAG_HOME that cannot hold the embedded server -------------------------------------------------------------

def test_localrag_home_on_a_read_only_filesystem_is_config_invalid(tmp_path):
    from test_store import tiny_tmpfs
    with tiny_tmpfs(tmp_path / "ro", "1m", "ro") as ro:
        cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(ro / "home"), "HOME": str(tmp_path)}, cwd=tmp_path)
        with pytest.raises(localrag.ConfigInvalid) as info:
            localrag.db_target(cfg)
        assert "LOCALRAG_HOME" in info.value.message and "Read-only file system" in info.value.message


def test_localrag_home_under_a_file_is_config_invalid(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(localrag.ConfigInvalid) as info:   # said when the setting is read (see below)
        localrag.load_config(environ={"LOCALRAG_HOME": str(tmp_path / "afile" / "home"), "HOME": str(tmp_path)},
                             cwd=tmp_path)
    assert info.value.details["key"] == "LOCALRAG_HOME" and info.value.exit_code == localrag.EXIT_CONFIG
    cfg = dataclasses.replace(localrag.load_config(environ={"HOME": str(tmp_path)}, cwd=tmp_path),
                              localrag_home=tmp_path / "afile" / "home")
    with pytest.raises(localrag.ConfigInvalid) as info:   # and again when the embedded server would start there
        localrag.db_target(cfg)
    assert info.value.details["key"] == "LOCALRAG_HOME" and info.value.exit_code == localrag.EXIT_CONFIG


# `LOCALRAG_HOME=/x/homefile localrag config` exited 0 without a problem line, while a relative path is one: only
# the embedded server's start (and doctor's database line, below "writable") said it (outside review).
HOMES_IN_FILES = [
    ("homefile", "LOCALRAG_HOME={tmp}/homefile is a file, not a folder; localrag keeps its data (the embedded "
                 "Postgres, the model cache) in a folder there: set LOCALRAG_HOME to a folder's absolute path (a "
                 "missing one is created), or move the file away"),
    ("homefile/sub", "LOCALRAG_HOME={tmp}/homefile/sub is under {tmp}/homefile, which is a file, not a folder;"),
    ("folder", None),
    ("folder/new/home", None),
]


@pytest.mark.parametrize("home, says", HOMES_IN_FILES, ids=[h for h, _s in HOMES_IN_FILES])
@pytest.mark.parametrize("database_url", ["", "postgresql://u@db.example/x"], ids=["embedded", "external"])
def test_a_localrag_home_that_is_a_file_is_config_invalid(tmp_path, home, says, database_url):
    (tmp_path / "homefile").write_text("x")
    (tmp_path / "folder").mkdir()
    environ = {"HOME": str(tmp_path), "LOCALRAG_HOME": str(tmp_path / home), "DATABASE_URL": database_url}
    if says is None:
        assert localrag.load_config(environ=environ, cwd=tmp_path).localrag_home == tmp_path / home
        return
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ=environ, cwd=tmp_path)
    assert info.value.message.startswith(says.format(tmp=tmp_path))
    assert info.value.details["key"] == "LOCALRAG_HOME" and info.value.exit_code == localrag.EXIT_CONFIG


def test_config_lists_a_localrag_home_that_is_a_file_as_a_problem(env, tmp_path, monkeypatch):
    homefile = tmp_path / "homefile"
    homefile.write_text("x")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LOCALRAG_HOME", str(homefile))
    code, out = run_cli("config")
    assert code == localrag.EXIT_CONFIG
    assert f"problem                      LOCALRAG_HOME={homefile} is a file, not a folder;" in out
    code, out = run_cli("config", "--json")
    assert code == localrag.EXIT_CONFIG and [p["key"] for p in json.loads(out)["problems"]] == ["LOCALRAG_HOME"]
    code, out = run_cli("search", "x", "--json")   # as for a relative path: no command works with it
    assert code == localrag.EXIT_CONFIG and json.loads(out)["error"]["details"]["key"] == "LOCALRAG_HOME"
    assert homefile.read_text() == "x"


def test_localrag_home_on_a_full_filesystem_is_config_invalid(tmp_path):
    from test_store import tiny_tmpfs
    with tiny_tmpfs(tmp_path / "full", "2m") as full:
        (full / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 64 * 1024))
        cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(full / "home"), "HOME": str(tmp_path)}, cwd=tmp_path)
        with pytest.raises(localrag.ConfigInvalid) as info:
            localrag.db_target(cfg)
        assert "LOCALRAG_HOME" in info.value.message and "free" in info.value.message.replace("space", "free"), \
            info.value.message


def test_llm_errors_and_logs_never_show_base_url_credentials(ingested, monkeypatch, capfd):
    for key, value in {"LLM_PROVIDER": "openai-compatible", "LLM_API_KEY": "sk-KEYSENTINEL", "LLM_MODEL": "m",
                       "LLM_BASE_URL": "http://127.0.0.1:1/v1?api_key=q-SENTINEL",
                       "RAG_FALLBACK_ENABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    code, out = run_cli("ask", "今天上海天气如何？", "--fallback", "--json")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_LLM and json.loads(out)["error"]["code"] == "llm_upstream_error"
    assert "SENTINEL" not in out + err, out + err
    assert "SENTINEL" not in repr(localrag.load_config())
    # user:password@ is never sent (urllib took it for the host): refused when loaded, the password not shown
    monkeypatch.setenv("LLM_BASE_URL", "http://bob:pw-SENTINEL@127.0.0.1:1/v1?api_key=q-SENTINEL")
    code, out = run_cli("ask", "今天上海天气如何？", "--fallback", "--json")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_CONFIG and json.loads(out)["error"]["details"]["key"] == "LLM_BASE_URL"
    assert "SENTINEL" not in out + err and "user:password@" in err


def test_a_relative_localrag_home_is_config_invalid(tmp_path, monkeypatch, capfd):
    """`LOCALRAG_HOME=relhome localrag search P1` silently started a new, empty Postgres in ./relhome: a cron job
    started in another folder used another database."""
    for environ in ({"LOCALRAG_HOME": "relhome"}, {"LOCALRAG_HOME": "./a/b"}):
        with pytest.raises(localrag.ConfigInvalid, match=r"LOCALRAG_HOME=\S+ is a relative path.*absolute path") \
                as info:
            localrag.load_config(environ={"HOME": str(tmp_path), **environ}, cwd=tmp_path)
        assert info.value.details["key"] == "LOCALRAG_HOME"
    cfg = localrag.load_config(environ={"HOME": str(tmp_path), "LOCALRAG_HOME": "~/lr"}, cwd=tmp_path)
    assert cfg.localrag_home == __import__("pathlib").Path("~/lr").expanduser()   # ~ expansion stays
    for key in localrag.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LOCALRAG_HOME", "relhome")
    monkeypatch.chdir(tmp_path)
    code, out = run_cli("search", "P1", "--json")
    assert code == localrag.EXIT_CONFIG and json.loads(out)["error"]["details"]["key"] == "LOCALRAG_HOME"
    assert not (tmp_path / "relhome").exists()
    # db stop, which goes on past a bad setting, must not stop the default home's server in its place
    monkeypatch.setenv("HOME", str(tmp_path))
    code, out = run_cli("db", "stop", "--json")
    error = json.loads(out)["error"]
    assert code == localrag.EXIT_CONFIG and "nothing was stopped" in error["message"]
    assert error["details"]["key"] == "LOCALRAG_HOME" and "stopped" not in json.loads(out)


def test_db_stop_with_a_bad_setting_stops_and_lists_the_problem_with_exit_3(env, monkeypatch, tmp_path):
    """`RAG_TOP_K=x localrag db stop --json` exited 0 listing no problem, though the README promises `problems`
    and exit 3 for config, doctor and db stop alike."""
    monkeypatch.delenv("DATABASE_URL")
    monkeypatch.setenv("LOCALRAG_HOME", str(tmp_path / "stopped-home"))
    monkeypatch.setenv("RAG_TOP_K", "x")
    code, out = run_cli("db", "stop", "--json")
    result = json.loads(out)
    assert code == localrag.EXIT_CONFIG and result["stopped"] is False
    assert [p["key"] for p in result["problems"]] == ["RAG_TOP_K"]
    monkeypatch.delenv("RAG_TOP_K")
    code, out = run_cli("db", "stop", "--json")
    assert code == 0 and "problems" not in json.loads(out)


@pytest.mark.parametrize("key, value, says", [
    ("RAG_CONTEXT_TOKEN_BUDGET", "99999999999999999999",
     "RAG_CONTEXT_TOKEN_BUDGET=99999999999999999999 is out of range; use an integer from 100 to 200000"),
    ("LOCALRAG_ALLOWED_HOSTS", ",,,", "LOCALRAG_ALLOWED_HOSTS=',,,' has an empty entry (entry 1)"),
    ("LOCALRAG_ALLOWED_HOSTS", "kb.local,,rag", "has an empty entry (entry 2)"),
    ("LOCALRAG_ALLOWED_HOSTS", "kb.local,", "has an empty entry (entry 2)")])
def test_settings_that_were_accepted_but_mean_nothing_useful(key, value, says, tmp_path):
    """A 20-digit token budget and an allow list of empty entries were accepted without a word."""
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={key: value}, cwd=tmp_path)
    assert says in info.value.message and "\n" not in info.value.message and info.value.details["key"] == key


def test_env_file_problems_name_the_file_and_line(tmp_path, caplog):
    """A malformed line gave python-dotenv's "could not parse statement starting at line 2" without the file, and
    a bad value read from the file did not say it came from there."""
    bad = tmp_path / "bad.env"
    bad.write_text("RAG_TOP_K=7\nLLM_API_KEY sk-secret-value\nRAG_MIN_COVERAGE=2\n", encoding="utf-8")
    with caplog.at_level("WARNING"), pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(env_file=bad, environ={}, cwd=tmp_path)
    assert info.value.message == f"RAG_MIN_COVERAGE='2' is not a number from 0 to 1 (set in {bad}, line 3)"
    assert info.value.details["key"] == "RAG_MIN_COVERAGE"
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [f"{bad}, line 2: not a KEY=value line; ignored (fix or remove it)"]   # not the secret
    with pytest.raises(localrag.ConfigInvalid) as info:   # the OS environment's value: no file named
        localrag.load_config(env_file=bad, environ={"RAG_MIN_COVERAGE": "3"}, cwd=tmp_path)
    assert "set in" not in info.value.message
    caplog.clear()
    with caplog.at_level("WARNING"):   # config and doctor load it again after a bad value: said once
        cfg = localrag.load_config(env_file=bad, environ={"RAG_MIN_COVERAGE": "0.5"}, cwd=tmp_path)
    assert cfg.rag_top_k == 7 and cfg.llm_api_key == ""
    assert not [r for r in caplog.records if "not a KEY=value" in r.getMessage()]


def test_an_env_file_that_is_a_folder_is_called_a_folder(tmp_path):
    """`--env-file /tmp` said "no such file" (outside review)."""
    with pytest.raises(localrag.ConfigInvalid, match="a folder, not a file"):
        localrag.load_config(tmp_path)
    with pytest.raises(localrag.ConfigInvalid, match="no such file"):
        localrag.load_config(tmp_path / "missing.env")


# A key with a setting's prefix that is no setting was ignored without a word: `RAG_TOPK=7` left top_k at 5 (outside
# review).  Other tools' keys in a shared .env (no such prefix) stay silent.
UNKNOWN_ENV_KEYS = [
    ("RAG_TOPK=7", "RAG_TOPK is not a localrag setting; ignored (did you mean RAG_TOP_K?)"),
    ("export RAG_TOPK=7", "RAG_TOPK is not a localrag setting; ignored (did you mean RAG_TOP_K?)"),
    ("rag_top_k=7", "rag_top_k is not a localrag setting; ignored (did you mean RAG_TOP_K?)"),
    ("LLM_MODLE=m", "LLM_MODLE is not a localrag setting; ignored (did you mean LLM_MODEL?)"),
    ("EMBEDDING_CACHE=/x", "EMBEDDING_CACHE is not a localrag setting; ignored (did you mean EMBEDDING_CACHE_DIR?)"),
    ("LOCALRAG_TOKEN=t", "LOCALRAG_TOKEN is not a localrag setting; ignored (did you mean LOCALRAG_API_TOKEN?)"),
    ("RAG_FOO=1", "RAG_FOO is not a localrag setting; ignored (fix or remove it)"),   # RAG_FUSION is no guess
    ("UNKNOWN_KEY=x", None),
    ("POSTGRES_PASSWORD=x", None),
    ("DATABASE_PASSWORD=x", None),
    ("RAG_TOP_K=7", None),
    ("LOCALRAG_HOME=", None),
]


@pytest.mark.parametrize("line, warning", UNKNOWN_ENV_KEYS, ids=[line for line, _w in UNKNOWN_ENV_KEYS])
def test_an_env_file_key_that_is_no_setting_is_warned_about(tmp_path, caplog, line, warning):
    path = tmp_path / "t.env"
    path.write_text(f"RAG_CONTEXT_TOKEN_BUDGET=3000\n{line}\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        cfg = localrag.load_config(path, environ={}, cwd=tmp_path)
        localrag.load_config(path, environ={}, cwd=tmp_path)   # config and doctor read it again: said once
    assert [r.getMessage() for r in caplog.records] == ([f"{path}, line 2: {warning}"] if warning else [])
    assert cfg.rag_top_k == (7 if line == "RAG_TOP_K=7" else 5)


def test_unknown_keys_are_looked_for_in_the_env_file_only(tmp_path, caplog):
    """The OS environment holds too many variables of other programs; the table's own keys are all settings."""
    assert localrag._ENV_PREFIXES == ("EMBEDDING_", "LLM_", "LOCALRAG_", "RAG_")   # derived from ENV_KEYS
    with caplog.at_level("WARNING"):
        localrag.load_config(environ={"RAG_TOPK": "7", "LLM_FOO": "1"}, cwd=tmp_path)
        localrag.load_config(ROOT / ".env.sample", environ={}, cwd=tmp_path)   # every key in it is a setting
    assert caplog.records == []


def test_config_command_warns_about_an_unknown_env_file_key(env, tmp_path, caplog):
    path = tmp_path / "t.env"
    path.write_text("RAG_TOPK=7\nUNKNOWN_KEY=x\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        code, out = run_cli("--env-file", str(path), "config", "--json")
    assert code == 0 and json.loads(out)["rag_top_k"] == 5
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}, line 1: RAG_TOPK is not a localrag setting; ignored (did you mean RAG_TOP_K?)"]


def test_log_lines_name_their_level_in_lower_case_as_the_cli_does():
    """stderr mixed "WARNING: bad.env, line 8: …" (logging) with "warning: …" (the CLI's own lines)."""
    import logging
    fmt = localrag._MaskingFormatter("%(levelname)s: %(message)s")
    record = logging.LogRecord("localrag", logging.WARNING, __file__, 1, "key at %s", ("postgresql://u:pw@h/db",), None)
    assert fmt.format(record) == "warning: key at postgresql://u:***@h/db" and record.levelname == "WARNING"


@pytest.mark.parametrize("key, value", [("RAG_MIN_COVERAGE", "\u0660.\u0665"), ("LLM_TIMEOUT_SECONDS", "\uff13\uff10"),
                                        ("RAG_MIN_SIMILARITY", "0.2_5")])
def test_numbers_in_other_digits_are_config_invalid(key, value, tmp_path):
    """float() reads Arabic-Indic and fullwidth digits (and 1_0); integer settings already refused them."""
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={key: value}, cwd=tmp_path)
    assert info.value.details["key"] == key


@pytest.mark.parametrize("key, value, says", [
    ("EMBEDDING_BATCH_SIZE", "9" * 5000, f"EMBEDDING_BATCH_SIZE='{'9' * 23}…' is out of range (an integer of 5000 "
                                         f"digits); use e.g. 32"),
    ("RAG_TOP_K", "-" + "9" * 100, "is out of range (an integer of 100 digits)"),
    ("LOCALRAG_MAX_FILE_MB", "1e308", "LOCALRAG_MAX_FILE_MB='1e308' is too large to count in bytes"),
])
def test_a_number_too_large_to_hold_is_config_invalid_not_internal_error(key, value, says, env, tmp_path,
                                                                         monkeypatch):
    """A 5,000-digit integer setting ended every command in internal_error (int() stops at 4,300 digits: "use
    sys.set_int_max_str_digits()"), and LOCALRAG_MAX_FILE_MB=1e308 in OverflowError (infinite as bytes); `config`
    and `doctor` crashed with them too instead of listing the problem."""
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(environ={key: value}, cwd=tmp_path)
    assert says in info.value.message and info.value.details["key"] == key
    assert len(info.value.message) < 200   # the digits are not quoted whole
    monkeypatch.setenv(key, value)
    code, out = run_cli("config", "--json")
    assert code == localrag.EXIT_CONFIG and says in json.loads(out)["problems"][0]["message"]


@pytest.mark.parametrize("key", ["LLM_BASE_URL", "EMBEDDING_BASE_URL"])
def test_a_base_url_scheme_in_capitals_is_a_scheme(key, tmp_path):
    """HTTP://host/v1 (a scheme is case-blind, urllib reads it) was refused as "needs LLM_BASE_URL starting with
    http:// or https:// (got 'http://host/v1')", quoting it in lower case."""
    provider = key.split("_")[0] + "_PROVIDER"
    environ = {provider: "openai-compatible", key.replace("BASE_URL", "MODEL"): "m", key: "HTTP://127.0.0.1:8080/v1"}
    cfg = localrag.load_config(environ=environ, cwd=tmp_path)
    assert cfg.summary()[key.lower()] == "http://127.0.0.1:8080/v1"
    if key == "LLM_BASE_URL":
        assert localrag.get_llm(cfg).url == "http://127.0.0.1:8080/v1/chat/completions"


def test_an_env_file_given_as_a_pipe_is_read_once_and_kept(env, tmp_path):
    """`--env-file <(pass show app/env)` (a pipe, /dev/fd/N) and `--env-file /dev/null` were "no such file"; a pipe
    is read once, so `config`, which reads the .env again after a bad setting, keeps the values it held."""
    import os
    cfg = localrag.load_config("/dev/null", environ={}, cwd=tmp_path)
    assert cfg.rag_top_k == 5 and str(cfg.env_file) == "/dev/null"
    read, write = os.pipe()
    try:
        os.write(write, b"RAG_TOP_K=3\nRAG_FUSION=bad\n")
        os.close(write)
        code, out = run_cli("--env-file", f"/dev/fd/{read}", "config", "--json")
    finally:
        os.close(read)
    result = json.loads(out)
    assert code == localrag.EXIT_CONFIG and result["rag_top_k"] == 3 and result["rag_fusion"] == "weighted"
    assert [p["message"] for p in result["problems"]] == [
        f"RAG_FUSION='bad' is not supported; use one of: weighted, rrf (set in /dev/fd/{read}, line 2)"]


def test_an_env_file_that_is_not_utf8_too_large_or_not_a_env_file_says_so_in_a_line(tmp_path, caplog):
    """Latin-1 bytes gave "cannot read ('utf-8' codec can't decode byte 0xe9 in position 27: ...)", a byte offset;
    a 28 MB file given by mistake ran `config` for minutes (python-dotenv's expansion is quadratic in the keys), and
    a README or script given as the .env printed a warning for each of its lines."""
    latin = tmp_path / "latin.env"
    latin.write_bytes(b"RAG_TOP_K=7\nLLM_API_KEY=sk-\xe9SENTINEL\n")
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.load_config(latin, environ={}, cwd=tmp_path)
    assert info.value.message == f"{latin}, line 2: not UTF-8 text (byte 0xe9); save the file as UTF-8"
    huge = tmp_path / "huge.env"
    huge.write_text("OTHER_KEY=value\n" * 10000, encoding="utf-8")
    with pytest.raises(localrag.ConfigInvalid, match=r"huge.env: larger than 128 KiB, .* is it the right file\?"):
        localrag.load_config(huge, environ={}, cwd=tmp_path)
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nRAG_TOP_K=4\n" + "echo hello\n" * 40, encoding="utf-8")
    with caplog.at_level("WARNING"):
        assert localrag.load_config(script, environ={}, cwd=tmp_path).rag_top_k == 4
    assert [r.getMessage() for r in caplog.records] == [
        f"{script}, line {n}: not a KEY=value line; ignored (fix or remove it)" for n in (3, 4, 5, 6, 7)] + [
        f"{script}: 35 more lines are not KEY=value lines (the last: line 42); ignored (is it a .env file?)"]


def test_a_working_folders_dotenv_with_localrags_settings_is_named_when_not_read(tmp_path, caplog):
    """An operator put RAG_MIN_COVERAGE in ./.env next to the pyz: nothing read it and nothing said so.  Only a
    checkout's own .env is read unasked (a folder's .env may be another program's): the unread one is named, once,
    with the --env-file that reads it; one holding none of localrag's settings is left alone."""
    folder = tmp_path / "laptop"
    folder.mkdir()
    (folder / ".env").write_text("export RAG_MIN_COVERAGE=0.3\nLLM_PROVIDER=fake\nDJANGO_DEBUG=1\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        config = localrag.load_config(None, {}, cwd=folder)
        localrag.load_config(None, {}, cwd=folder)
    assert config.rag_min_coverage == localrag.MIN_COVERAGE_DEFAULT   # not read
    warnings = [r.getMessage() for r in caplog.records if "is not read" in r.getMessage()]
    assert warnings == [f"{folder / '.env'} sets RAG_MIN_COVERAGE, LLM_PROVIDER but is not read: localrag reads the "
                        f".env at its checkout's root, or the one named before the command (`localrag --env-file "
                        f"{folder / '.env'} …`)"], warnings
    caplog.clear()
    with caplog.at_level("WARNING"):   # named with --env-file: read, and no warning
        assert localrag.load_config(folder / ".env", {}, cwd=folder).rag_min_coverage == 0.3
    other = tmp_path / "app"
    other.mkdir()
    (other / ".env").write_text("DATABASE_HOST=db\nSECRET_KEY=x\n", encoding="utf-8")
    with caplog.at_level("WARNING"):
        localrag.load_config(None, {}, cwd=other)
    assert not [r for r in caplog.records if "is not read" in r.getMessage()]
