"""Store: the schema file is the module's DDL, init is idempotent, errors are translated and masked."""

import struct
from pathlib import Path

import pytest

import localrag
from conftest import ROOT, run_cli


def test_schema_sql_file_is_the_module_schema():
    assert (ROOT / "schema.sql").read_text() == localrag.SCHEMA_SQL
    for needle in ("CREATE EXTENSION IF NOT EXISTS vector", "embedding vector(1024) NOT NULL",
                   "UNIQUE (vault_path, relative_path)", "UNIQUE (chunk_id, embedding_provider, embedding_model, "
                   "embedding_dim)", "ON DELETE CASCADE", "CHECK (status IN ('running', 'success', 'failed'))"):
        assert needle in localrag.SCHEMA_SQL


def test_compose_mounts_schema_and_binds_loopback():
    compose = (ROOT / "compose.yaml").read_text()
    assert "pgvector/pgvector:pg16" in compose
    assert "./schema.sql:/docker-entrypoint-initdb.d/001-schema.sql:ro" in compose
    assert '"127.0.0.1:5432:5432"' in compose


def test_env_sample_lists_every_key():
    sample = (ROOT / ".env.sample").read_text()
    for key in localrag.ENV_KEYS + ("POSTGRES_DB", "POSTGRES_USER", "POSTGRES_PASSWORD"):
        assert f"\n{key}=" in sample, key


def test_db_init_is_idempotent_and_status_reports(db):
    assert run_cli("db", "init")[0] == 0
    assert run_cli("db", "init")[0] == 0
    code, out = run_cli("db", "status", "--json")
    assert code == 0
    status = __import__("json").loads(out)
    assert status["schema_initialized"] is True and status["pgvector"]
    assert status["documents"] == 0


def test_missing_schema_gives_schema_not_initialized(config, vault):
    with localrag.Store.open(config) as s:
        s.run("DROP TABLE IF EXISTS keyword_postings, keyword_chunks, embeddings, chunks, documents, ingest_runs "
              "CASCADE")
    for args in (("ingest", str(vault)), ("search", "客户"), ("ask", "客户")):
        code, out = run_cli(*args, "--json")
        assert code == localrag.EXIT_SCHEMA, args
        body = __import__("json").loads(out)["error"]
        assert body["code"] == "schema_not_initialized" and "localrag db init" in body["message"]
    code, out = run_cli("db", "status", "--json")
    assert code == 0 and __import__("json").loads(out)["schema_initialized"] is False
    localrag.db_init(config)


def test_unreachable_server_one_line_with_masked_url(env, monkeypatch, capfd):
    monkeypatch.setenv("DATABASE_URL", "postgresql://bob:hunter2-SENTINEL@127.0.0.1:1/nothing_test")
    code, out = run_cli("search", "x")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_DB
    assert "hunter2-SENTINEL" not in err + out
    line = [l for l in err.splitlines() if l.startswith("error")]
    assert len(line) == 1 and "database_unavailable" in line[0] and "bob:***@127.0.0.1:1" in line[0]


def test_binary_copy_vector_roundtrip(db):
    data = localrag._Copy(1)
    data.row(localrag._Copy.vector([0.5, -1.25, 3.0]))
    with localrag.Store.open(db) as s:
        s.run("CREATE TEMP TABLE v (e vector(3))")
        s.copy("v", ["e"], data)
        assert s.run("SELECT e::text FROM v")[0][0] == "[0.5,-1.25,3]"
    assert localrag._Copy.vector([1.0])[:4] == struct.pack("!hh", 1, 0)


def test_text_array_and_jsonb_binary(db):
    data = localrag._Copy(2)
    data.row(localrag._Copy.text_array(["a", "b/c", "中文"]), localrag._Copy.jsonb({"k": [1, "二"]}))
    data.row(localrag._Copy.text_array([]), localrag._Copy.jsonb({}))
    with localrag.Store.open(db) as s:
        s.run("CREATE TEMP TABLE t (a text[], j jsonb)")
        s.copy("t", ["a", "j"], data)
        assert s.run("SELECT a, j FROM t ORDER BY cardinality(a) DESC") == [[["a", "b/c", "中文"], {"k": [1, "二"]}],
                                                                             [[], {}]]


def test_embedded_server_starts_on_unix_socket_only(tmp_path, monkeypatch):
    """With DATABASE_URL unset: a private server under LOCALRAG_HOME, socket inside the 0700 data dir."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    home = tmp_path / "h"
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "HOME": str(tmp_path)}, cwd=tmp_path)
    try:
        target = localrag.db_target(cfg)
        assert "host" not in target.kwargs and target.kwargs["unix_sock"].startswith(str(home / "pgdata"))
        assert (home / "pgdata").stat().st_mode & 0o077 == 0
        localrag.db_init(cfg)
        with localrag.Store.open(cfg) as s:
            assert s.run("SHOW listen_addresses")[0][0] == ""
        assert localrag.db_status(cfg)["kind"] == "embedded"
    finally:
        assert localrag.stop_embedded(cfg) is True


def test_two_commands_starting_the_embedded_server_at_once(tmp_path):
    """Two `db init` processes race on a fresh LOCALRAG_HOME: one server, one schema, both succeed."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in localrag.ENV_KEYS}
    env["LOCALRAG_HOME"] = str(tmp_path / "home")
    procs = [subprocess.Popen([sys.executable, "-m", "localrag", "db", "init", "--json"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        results = [p.communicate(timeout=120) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], results
    finally:
        subprocess.run([sys.executable, "-m", "localrag", "db", "stop"], cwd=tmp_path, env=env, capture_output=True)
