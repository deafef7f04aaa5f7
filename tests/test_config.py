"""Config: precedence (OS env > .env > defaults), repo-root discovery, validation, secrets never shown."""

import json

import pytest

import localrag
from conftest import run_cli


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


@pytest.mark.parametrize("url,expected", [
    ("postgresql://alice:s%40cret@db.internal:6543/rag?sslmode=disable",
     {"user": "alice", "password": "s@cret", "host": "db.internal", "port": 6543, "database": "rag"}),
    ("postgres://bob@/rag_test?host=/var/run/postgresql",
     {"user": "bob", "database": "rag_test", "unix_sock": "/var/run/postgresql/.s.PGSQL.5432"}),
    ("postgresql://bob@%2Ftmp%2Fsock:5433/x", {"user": "bob", "database": "x", "unix_sock": "/tmp/sock/.s.PGSQL.5433"}),
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


def test_mask_url_hides_password_only():
    assert localrag.mask_url("postgresql://u:hunter2@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert "hunter2" not in localrag.mask_url("postgresql://u@h/db?password=hunter2")
