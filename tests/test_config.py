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
    with pytest.raises(localrag.LlmConfigMissing) as info:
        localrag.OpenAICompatibleLLM(localrag.load_config())
    assert "SENTINEL" not in info.value.message and "llm.example" in info.value.message


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
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(tmp_path / "afile" / "home"), "HOME": str(tmp_path)},
                               cwd=tmp_path)
    with pytest.raises(localrag.ConfigInvalid) as info:
        localrag.db_target(cfg)
    assert info.value.details["key"] == "LOCALRAG_HOME" and info.value.exit_code == localrag.EXIT_CONFIG


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
                       "LLM_BASE_URL": "http://bob:pw-SENTINEL@127.0.0.1:1/v1?api_key=q-SENTINEL",
                       "RAG_FALLBACK_ENABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    code, out = run_cli("ask", "今天上海天气如何？", "--fallback", "--json")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_LLM and json.loads(out)["error"]["code"] == "llm_upstream_error"
    assert "SENTINEL" not in out + err, out + err
    assert "SENTINEL" not in repr(localrag.load_config())
