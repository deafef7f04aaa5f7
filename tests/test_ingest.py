"""Ingest: incremental runs, canonical paths, ingest_runs bookkeeping, and every bad input losing nothing."""

import json
import os
import threading

import pytest

import localrag
from conftest import run_cli


def counts(config):
    with localrag.Store.open(config) as s:
        return dict(zip(("documents", "chunks", "embeddings"), s.run(
            "SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks), "
            "(SELECT count(*) FROM embeddings)")[0]))


def runs(config):
    with localrag.Store.open(config) as s:
        return s.run("SELECT id, status, documents_added, documents_updated, documents_deleted, documents_skipped, "
                      "chunks_written, embeddings_written, error_summary, finished_at IS NOT NULL FROM ingest_runs "
                      "ORDER BY id")


def test_first_ingest_writes_everything(ingested):
    config, vault, result = ingested
    n_files = len(list(vault.rglob("*.md"))) - len(list((vault / ".obsidian").rglob("*.md")))
    assert result["documents_added"] == n_files and result["chunks_written"] == result["embeddings_written"] > 0
    c = counts(config)
    assert c["documents"] == n_files and c["chunks"] == c["embeddings"] == result["chunks_written"]
    run = runs(config)[-1]
    assert run[1] == "success" and run[2] == n_files and run[9] is True


def test_second_run_skips_every_file(ingested):
    config, vault, first = ingested
    code, out = run_cli("ingest", str(vault), "--json")
    second = json.loads(out)
    assert code == 0 and second["status"] == "success"
    assert second["documents_skipped"] == first["documents_added"]
    assert second["documents_added"] == second["documents_updated"] == second["chunks_written"] == 0
    assert set(localrag.INGEST_COUNTS) <= set(second) and isinstance(second["id"], int)


def test_changed_file_rebuilt_deleted_file_removed(ingested):
    config, vault, _ = ingested
    policy = vault / "policies" / "Support Escalation Policy.md"
    policy.write_text(policy.read_text(encoding="utf-8") + "\n## 新增章节\n夜间值班需要额外确认 zebracorn 流程。\n",
                      encoding="utf-8")
    (vault / "hr" / "Onboarding Guide.md").unlink()
    result = localrag.ingest(config, vault)
    assert (result["documents_updated"], result["documents_deleted"]) == (1, 1)
    assert result["documents_skipped"] == len(list(vault.rglob("*.md"))) - 1
    with localrag.Store.open(config) as s:
        assert s.run("SELECT count(*) FROM documents WHERE relative_path = 'hr/Onboarding Guide.md'")[0][0] == 0
        # no orphans: cascade removed chunks and embeddings of the deleted document
        assert s.run("SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id "
                     "WHERE d.id IS NULL")[0][0] == 0
    hit = localrag.search(config, "新增章节 zebracorn 夜间值班额外确认")["results"][0]
    assert hit["source"] == "policies/Support Escalation Policy.md" and hit["heading"] == "新增章节"


def test_missing_embeddings_are_backfilled_without_reparsing(ingested):
    config, vault, first = ingested
    with localrag.Store.open(config) as s:
        chunk_ids = s.run("SELECT array_agg(id ORDER BY id) FROM chunks")[0][0]
        s.run("DELETE FROM embeddings WHERE chunk_id IN (SELECT id FROM chunks WHERE relative_path LIKE 'runbooks/%')")
    result = localrag.ingest(config, vault)
    assert result["documents_backfilled"] == 2 and result["chunks_written"] == 0
    assert result["embeddings_written"] > 0
    with localrag.Store.open(config) as s:
        assert s.run("SELECT array_agg(id ORDER BY id) FROM chunks")[0][0] == chunk_ids  # chunks untouched
    assert counts(config)["embeddings"] == counts(config)["chunks"]


@pytest.mark.parametrize("spelling", ["relative", "dot-relative", "absolute", "trailing-slash"])
def test_canonical_vault_path(ingested, monkeypatch, spelling):
    config, vault, _ = ingested
    monkeypatch.chdir(vault.parent)
    arg = {"relative": vault.name, "dot-relative": f"./{vault.name}", "absolute": str(vault),
           "trailing-slash": f"{vault.name}/"}[spelling]
    result = localrag.ingest(config, arg)
    assert result["vault_path"] == str(vault.resolve()) and result["documents_added"] == 0
    with localrag.Store.open(config) as s:
        assert s.run("SELECT DISTINCT vault_path FROM documents") == [[str(vault.resolve())]]
        paths = [r[0] for r in s.run("SELECT relative_path FROM documents")]
        assert all(not p.startswith(("./", "/")) and ".." not in p.split("/") and "\\" not in p for p in paths)
        files = [r[0] for r in s.run("SELECT file_path FROM documents")]
        assert all(os.path.isabs(f) and os.path.exists(f) for f in files)


def test_dot_folders_skipped_and_vault_never_written(db, vault):
    (vault / ".obsidian" / "hidden.md").write_text("# secret")
    (vault / ".trash").mkdir()
    (vault / ".trash" / "old.md").write_text("# old")
    before = {p: p.stat().st_mtime_ns for p in vault.rglob("*")}
    localrag.ingest(db, vault)
    with localrag.Store.open(db) as s:
        assert not s.run("SELECT 1 FROM documents WHERE relative_path LIKE '.%'")
    assert {p: p.stat().st_mtime_ns for p in vault.rglob("*")} == before


# --- bad input: a clear error, nothing lost ------------------------------------------------------------------------

def test_missing_vault_path(db, tmp_path):
    code, out = run_cli("ingest", str(tmp_path / "nope"), "--json")
    assert code == localrag.EXIT_VAULT
    err = json.loads(out)["error"]
    assert err["code"] == "vault_invalid" and "does not exist" in err["message"]
    assert runs(db) == []


def test_file_given_as_vault(db, vault):
    code, out = run_cli("ingest", str(vault / "00-index.md"), "--json")
    assert code == localrag.EXIT_VAULT and "is a file" in json.loads(out)["error"]["message"]


def test_empty_vault_succeeds_with_zero_counts(db, tmp_path):
    (tmp_path / "empty").mkdir()
    code, out = run_cli("ingest", str(tmp_path / "empty"), "--json")
    result = json.loads(out)
    assert code == 0 and result["status"] == "success"
    assert all(result[k] == 0 for k in localrag.INGEST_COUNTS)


def test_per_file_problems_reported_and_others_indexed(db, vault, capfd):
    (vault / "latin1.md").write_bytes("# Café\nna\xefve".encode("latin-1"))
    (vault / "bad-yaml.md").write_text("---\ntitle: [unclosed\n---\n# x\n")
    outside = vault.parent / "outside.md"
    outside.write_text("# outside secret\nclassified")
    (vault / "link.md").symlink_to(outside)
    code, out = run_cli("ingest", str(vault), "--json")
    result = json.loads(out)
    err = capfd.readouterr().err
    assert code == localrag.EXIT_PARTIAL and result["status"] == "success"
    failed = {f["path"]: f["error"] for f in result["files_failed"]}
    assert "UTF-8" in failed["latin1.md"] and "frontmatter" in failed["bad-yaml.md"]
    assert "latin1.md" in err and "bad-yaml.md" in err
    assert {"path": "link.md", "warning": "symlink leads outside the vault; not followed"} in result["warnings"]
    with localrag.Store.open(db) as s:
        assert not s.run("SELECT 1 FROM chunks WHERE content LIKE '%classified%'")
        assert s.run("SELECT count(*) FROM documents")[0][0] == result["documents_added"] > 10
        summary = s.run("SELECT error_summary FROM ingest_runs ORDER BY id DESC LIMIT 1")[0][0]
    assert "latin1.md" in summary


def test_broken_file_keeps_its_previous_version(ingested):
    config, vault, _ = ingested
    faq = vault / "products" / "Atlas CRM FAQ.md"
    faq.write_bytes(b"---\ntitle: [broken\n---\n")
    before = counts(config)
    result = localrag.ingest(config, vault)
    assert [f["path"] for f in result["files_failed"]] == ["products/Atlas CRM FAQ.md"]
    assert result["documents_deleted"] == 0 and counts(config) == before


def test_huge_file_is_reported_not_read(db, vault, monkeypatch):
    big = vault / "huge.md"
    with big.open("w") as f:
        line = "# 大文件\n" + ("重复的内容 filler text " * 40 + "\n") * 10
        while f.tell() < 50 * 1024 * 1024:
            f.write(line)
    result = localrag.ingest(localrag.load_config(), vault)
    assert result["files_failed"][0]["path"] == "huge.md"
    assert "LOCALRAG_MAX_FILE_MB" in result["files_failed"][0]["error"]
    assert result["documents_added"] > 10


def test_database_dies_mid_ingest_then_next_run_completes(db, vault, monkeypatch):
    """The connection is killed after some batches: the run is marked failed, earlier batches stay, rerun works."""
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 10)  # a tuning constant: many small transactions
    seen = []

    def killer(msg):
        seen.append(msg)
        if len(seen) == 8:
            with localrag.Store.open(db) as s:
                s.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'localrag' "
                      "AND pid <> pg_backend_pid() AND datname = current_database()")

    with pytest.raises(localrag.DatabaseUnavailable):
        localrag.ingest(db, vault, progress=killer)
    failed = runs(db)[-1]
    assert failed[1] == "failed" and failed[8] and failed[9] is True
    kept = counts(db)["documents"]
    assert kept > 0
    result = localrag.ingest(db, vault)
    assert result["status"] == "success" and result["documents_skipped"] == kept
    total = len([p for p in vault.rglob("*.md") if ".obsidian" not in p.parts])
    assert counts(db)["documents"] == total


def test_concurrent_ingest_of_same_vault_is_refused(ingested):
    config, vault, _ = ingested
    with localrag.Store.open(config) as s:
        s.run("SELECT pg_advisory_lock(727274002, hashtext(:v))", v=str(vault.resolve()))
        with pytest.raises(localrag.IngestBusy):
            localrag.ingest(config, vault)
        s.run("SELECT pg_advisory_unlock(727274002, hashtext(:v))", v=str(vault.resolve()))


def test_two_ingests_racing_leave_consistent_state(db, vault):
    """Two ingests of one vault at once: each either succeeds or is refused with IngestBusy; nothing else."""
    busy, unexpected, results = [], [], []

    def go():
        try:
            results.append(localrag.ingest(db, vault))
        except localrag.IngestBusy as exc:
            busy.append(exc)
        except BaseException as exc:  # noqa: BLE001 - a duplicate key, a deadlock...: the test must see it
            unexpected.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert unexpected == []
    assert len(results) + len(busy) == 2 and results and all(r["status"] == "success" for r in results)
    c = counts(db)
    assert c["chunks"] == c["embeddings"] and c["documents"] == len(
        [p for p in vault.rglob("*.md") if ".obsidian" not in p.parts])
    with localrag.Store.open(db) as s:
        assert s.run("SELECT status, count(*) FROM ingest_runs GROUP BY status") == [["success", len(results)]]


def test_real_obsidian_vault_in_many_scripts(db, tmp_path):
    """Five notes from every language of the Obsidian Help vault (wikilinks, callouts, embeds, Unicode paths):
    all parse, chunk and index; a rerun skips them all."""
    from conftest import CORPUS
    if not CORPUS.is_dir():
        pytest.skip("the shared Obsidian Help corpus is not beside the repo")
    import shutil
    vault = tmp_path / "help"
    for lang in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        for note in sorted(lang.rglob("*.md"))[:5]:
            dest = vault / note.relative_to(CORPUS)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(note, dest)
    n = len(list(vault.rglob("*.md")))
    result = localrag.ingest(db, vault)
    assert result["files_failed"] == [] and result["documents_added"] == n > 100
    with localrag.Store.open(db) as s:
        assert s.run("SELECT count(*) FROM documents d WHERE NOT EXISTS (SELECT 1 FROM chunks c "
                     "WHERE c.document_id = d.id)")[0][0] <= 3  # only notes with no text at all
        assert s.run("SELECT max(token_count) FROM chunks")[0][0] <= localrag.CHUNK_HARD_MAX_TOKENS
    assert localrag.ingest(db, vault)["documents_skipped"] == n


def test_worker_processes_give_the_same_index_as_in_process(db, tmp_path, monkeypatch):
    import shutil
    from conftest import SAMPLE_VAULT
    snapshots = []
    for workers in ("1", "2"):
        vault = tmp_path / f"v{workers}"
        for copy in ("a", "b", "c"):  # 39 files: above the threshold for a worker pool
            shutil.copytree(SAMPLE_VAULT, vault / copy)
        monkeypatch.setenv("LOCALRAG_INGEST_WORKERS", workers)
        result = localrag.ingest(localrag.load_config(), vault)
        assert result["documents_added"] == 39 and not result["files_failed"]
        with localrag.Store.open(db) as s:
            snapshots.append(s.run(
                "SELECT c.relative_path, c.chunk_index, c.content_hash, c.heading_path, c.tags, c.wikilinks, "
                "c.token_count, e.embedding::text FROM chunks c JOIN embeddings e ON e.chunk_id = c.id "
                "JOIN documents d ON d.id = c.document_id WHERE d.vault_path = :v ORDER BY 1, 2", v=str(vault)))
    assert snapshots[0] == snapshots[1] and len(snapshots[0]) > 200


def test_a_killed_ingest_process_leaves_a_failed_run_not_a_running_one(db, vault):
    """kill -9 of a real `localrag ingest` mid-run (held at its first write by a table lock): the next ingest
    marks the orphaned run failed, with a reason, and completes."""
    import signal
    import subprocess
    import sys
    import time
    env = {k: v for k, v in os.environ.items()}
    holder = localrag.Store.open(db)
    holder.run("BEGIN")
    holder.run("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
    proc = subprocess.Popen([sys.executable, "-m", "localrag", "ingest", str(vault), "--json"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=os.path.dirname(localrag.__file__))
    try:
        deadline = time.monotonic() + 60
        with localrag.Store.open(db) as s:
            while not s.run("SELECT 1 FROM ingest_runs WHERE status = 'running'"):
                assert proc.poll() is None and time.monotonic() < deadline, "the ingest never started its run"
                time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        holder.run("ROLLBACK")
        holder.close()
    deadline = time.monotonic() + 60
    while True:  # the dead client's server session ends once it notices the socket is gone
        try:
            result = localrag.ingest(db, vault)
            break
        except localrag.IngestBusy:
            assert time.monotonic() < deadline, "the killed ingest's lock was never released"
            time.sleep(0.1)
    assert result["status"] == "success"
    orphan = runs(db)[0]
    assert orphan[1] == "failed" and "interrupted" in orphan[8] and orphan[9] is True
