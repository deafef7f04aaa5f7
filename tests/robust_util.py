"""Helpers for the interruption and crash tests: real `localrag` subprocesses, their process trees, the database
invariants an interrupted run must keep."""

from __future__ import annotations

import math
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import localrag

ROOT = Path(__file__).resolve().parent.parent
_started: list[subprocess.Popen] = []


def kill_started() -> None:
    """Kill every process start_cli started that still runs (a failed test must not leave one behind)."""
    while _started:
        proc = _started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def cli_env(extra: dict | None = None) -> dict:
    """The current (test-controlled) environment for a localrag subprocess."""
    env = dict(os.environ)
    env.update(extra or {})
    return env


def start_cli(*args: str, env: dict | None = None, batch_chunks: int | None = None) -> subprocess.Popen:
    """`localrag ARGS` as a real process (its own session, so a signal meant for it never reaches pytest).
    batch_chunks sets the INGEST_BATCH_CHUNKS tuning constant, for runs with many small transactions."""
    code = "import sys, localrag\n"
    if batch_chunks:
        code += f"localrag.INGEST_BATCH_CHUNKS = {batch_chunks}\n"
    code += "sys.exit(localrag.main(sys.argv[1:]))\n"
    env = cli_env(env)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    _started.append(proc)
    return proc


def make_vault(root: Path, files: int, sections: int = 6, words: int = 120, seed: int = 7) -> Path:
    """A synthetic vault of `files` notes with `sections` H2 sections each: varied words, so chunks differ."""
    import random
    rng = random.Random(seed)
    vocab = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "po", "ra", "si", "tu") for b in ("n", "x", "s", "dor", "li")]
    for n in range(files):
        parts = [f"# Note {n}\n"]
        for s in range(sections):
            parts.append(f"## Section {s}\n" + " ".join(rng.choice(vocab) for _ in range(words)) + ".\n\n")
        path = root / f"folder{n % 7}" / f"note {n:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(parts), encoding="utf-8")
    return root


def children(pid: int) -> list[int]:
    """PIDs whose parent is pid (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    """True while pid exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def query(config, sql: str, **params):
    with localrag.Store.open(config) as s:
        return s.run(sql, **params)


def ingest_lock_held(config, vault_key: str) -> bool:
    return bool(query(config, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = :k "
                              "AND objid = hashtext(:v)::oid AND granted)", k=localrag.INGEST_LOCK_KEY,
                      v=vault_key)[0][0])


def sessions(config) -> int:
    """Server sessions of localrag connections other than the one asking."""
    return query(config, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'localrag%' "
                         "AND pid <> pg_backend_pid() AND datname = current_database()")[0][0]


def check_consistent(config, vault: Path) -> dict:
    """The invariants an index keeps whatever happened to the run that wrote it: every file has its document, every
    document its chunks, every chunk its embedding for the current provider, no duplicates, no orphans, no run left
    'running', and the index equal to what a fresh parse of the files gives.  Returns counts."""
    files = localrag.scan_vault(vault).files
    vault_key = str(vault.resolve())
    key = config.embedding_key
    docs = dict(query(config, "SELECT relative_path, content_hash FROM documents WHERE vault_path = :v", v=vault_key))
    import hashlib
    expected = {rel: hashlib.sha256(path.read_bytes()).hexdigest() for rel, path in files}
    assert docs == expected, "documents differ from the files"
    problems = query(config, """
        SELECT
          (SELECT count(*) FROM (SELECT document_id FROM chunks GROUP BY document_id
             HAVING count(*) <> max(chunk_index) + 1 OR min(chunk_index) <> 0) x),
          (SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.chunk_id = c.id
             AND e.embedding_provider = :p AND e.embedding_model = :m AND e.embedding_dim = :d)),
          (SELECT count(*) FROM (SELECT chunk_id FROM embeddings GROUP BY chunk_id, embedding_provider,
             embedding_model, embedding_dim HAVING count(*) > 1) x),
          (SELECT count(*) FROM (SELECT vault_path, relative_path FROM documents GROUP BY 1, 2
             HAVING count(*) > 1) x),
          (SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM documents d WHERE d.id = c.document_id)),
          (SELECT count(*) FROM embeddings e WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = e.chunk_id)),
          (SELECT count(*) FROM ingest_runs WHERE status = 'running')
        """, v=vault_key, p=key[0], m=key[1], d=key[2])[0]
    names = ("chunk indexes not 0..n-1", "chunks without an embedding", "duplicate embeddings",
             "duplicate documents", "orphan chunks", "orphan embeddings", "runs left running")
    assert dict(zip(names, problems)) == dict.fromkeys(names, 0)
    # Every document's chunks are exactly what chunking its file gives now (no half-written document).
    stored = {}
    for rel, idx, content_hash in query(config, "SELECT c.relative_path, c.chunk_index, c.content_hash FROM chunks c "
                                                "JOIN documents d ON d.id = c.document_id WHERE d.vault_path = :v",
                                        v=vault_key):
        stored.setdefault(rel, {})[idx] = content_hash
    for rel, path in files:
        prepared = localrag.prepare_file(rel, path.read_bytes(), False)
        want = {c.index: c.content_hash for c in prepared.chunks} if not isinstance(prepared, str) else {}
        assert stored.get(rel, {}) == want, f"{rel}: stored chunks differ from a fresh chunking"
    keywords = check_keywords_rebuilt(config)
    return {"documents": len(docs), "chunks": sum(len(v) for v in stored.values()), **keywords}


def _f4(x: float) -> float:
    """x as Postgres stores it in a REAL column."""
    return struct.unpack("f", struct.pack("f", x))[0]


def check_keywords_rebuilt(config) -> dict:
    """The keyword channel equals a rebuild from scratch out of the stored chunks: one keyword_chunks row per chunk
    (current tokenizer, its length), exactly the postings keyword_vector gives (term, tf, the chunk's length), no
    posting without its chunk row; and the corpus statistics BM25 reads (chunks indexed, average length, document
    frequency of every term) equal the rebuild's.  The postings have no foreign key (triggers keep them), so an
    interrupted write is exactly what could leave them apart.  Returns counts."""
    want_chunks, want_postings = {}, {}
    for cid, content, heading_path, rel, tags, title, aliases in query(
            config, "SELECT id, content, heading_path, relative_path, tags, metadata->>'title', metadata->'aliases' "
                    "FROM chunks"):
        names = localrag._row_alias_text(title, aliases, rel)
        tf, length = localrag.keyword_vector(content, heading_path or [], rel, tags or [], names)
        want_chunks[cid] = (localrag.KEYWORD_TOKENIZER, _f4(length))
        for term, weight in tf.items():
            want_postings[(cid, term)] = (_f4(weight), _f4(length))
    got_chunks = {cid: (tok, length) for cid, tok, length in query(
        config, "SELECT chunk_id, tokenizer, length FROM keyword_chunks")}
    missing = sorted(set(want_chunks) - set(got_chunks))[:5]
    extra = sorted(set(got_chunks) - set(want_chunks))[:5]
    assert not missing and not extra, f"keyword_chunks: chunks without a row {missing}, rows without a chunk {extra}"
    wrong = [cid for cid in want_chunks if got_chunks[cid] != want_chunks[cid]][:5]
    assert not wrong, f"keyword_chunks rows differ from a rebuild: {[(c, got_chunks[c], want_chunks[c]) for c in wrong]}"
    got_postings = {(cid, term): (tf, dl) for cid, term, tf, dl in query(
        config, "SELECT chunk_id, term, tf, dl FROM keyword_postings")}
    assert len(got_postings) == query(config, "SELECT count(*) FROM keyword_postings")[0][0], "duplicate postings"
    missing = sorted(set(want_postings) - set(got_postings))[:5]
    extra = sorted(set(got_postings) - set(want_postings))[:5]
    assert not missing and not extra, f"keyword_postings: missing {missing}, not in a rebuild {extra}"
    wrong = [k for k in want_postings if got_postings[k] != want_postings[k]][:5]
    assert not wrong, f"keyword_postings differ from a rebuild: {[(k, got_postings[k], want_postings[k]) for k in wrong]}"
    # The statistics BM25 counts at query time, through the Store (what a search reads), against the rebuild's.
    df: dict[str, int] = {}
    for (_, term) in want_postings:
        df[term] = df.get(term, 0) + 1
    terms = sorted(df)
    with localrag.Store.open(config) as s:
        n, avgdl, got_df = s.keyword_stats(terms)
    want_avgdl = sum(length for _, length in want_chunks.values()) / len(want_chunks) if want_chunks else 0.0
    assert n == len(want_chunks), f"keyword statistics count {n} chunks, a rebuild {len(want_chunks)}"
    assert math.isclose(avgdl, want_avgdl, rel_tol=1e-9, abs_tol=1e-9), (avgdl, want_avgdl)
    wrong_df = [(t, got_df[t], df[t]) for t in terms if got_df[t] != df[t]][:5]
    assert not wrong_df, f"document frequencies differ from a rebuild: {wrong_df}"
    return {"keyword_chunks": len(got_chunks), "keyword_postings": len(got_postings), "keyword_terms": len(terms)}


def signal_name(sig: int) -> str:
    return signal.Signals(sig).name
