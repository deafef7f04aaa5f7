"""Ingest: incremental runs, canonical paths, ingest_runs bookkeeping, and every bad input losing nothing."""

import collections
import json
import random
import os
import signal
import sys
import threading
import time
from pathlib import Path
import shutil

import pytest

import localrag
from conftest import reset_database, run_cli, write_vault


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


def test_a_vault_indexed_by_an_older_reading_of_notes_is_read_again_once(ingested, caplog):
    """Unchanged files are skipped, so a fix to how notes are read (tags, heading paths) never reached an index
    built before it.  Each run records NOTES_READING; when the vault's last successful run read its notes another
    way (or before it was recorded), the next run reads every note again, says so once, and the run after skips."""
    config, vault, first = ingested
    n = first["documents_added"]
    with localrag.Store.open(config) as s:
        assert s.older_notes_reading(str(vault), localrag.NOTES_READING) is None
        s.run("UPDATE ingest_runs SET metadata = metadata - 'notes_reading'")   # a run before it was recorded
        chunk_ids = s.run("SELECT array_agg(id ORDER BY id) FROM chunks")[0][0]
    caplog.clear()
    code, out = run_cli("ingest", str(vault), "--json")
    again = json.loads(out)
    assert code == 0 and (again["documents_updated"], again["documents_skipped"]) == (n, 0), again
    assert again["notes_read_again_from"] == "notes-v1" and again["notes_reading"] == localrag.NOTES_READING
    assert caplog.text.count("indexed by an older reading of notes (notes-v1; now ") == 1
    assert counts(config)["chunks"] == len(chunk_ids)
    with localrag.Store.open(config) as s:
        assert s.run("SELECT array_agg(id ORDER BY id) FROM chunks")[0][0] != chunk_ids   # rewritten
        # a run that reads them again and fails leaves the older reading as the last successful one's
        s.run("UPDATE ingest_runs SET metadata = jsonb_set(metadata, '{notes_reading}', '\"notes-v0\"') "
              "WHERE id = :id", id=again["id"] - 1)
        s.run("UPDATE ingest_runs SET status = 'failed' WHERE id = :id", id=again["id"])
    result = localrag.ingest(config, vault)
    assert (result["documents_updated"], result["notes_read_again_from"]) == (n, "notes-v0")
    result = localrag.ingest(config, vault)
    assert (result["documents_skipped"], result["documents_updated"], result["notes_read_again_from"]) == (n, 0, None)
    with localrag.Store.open(config) as s:   # a failed run after the last success may have committed notes too
        s.run("UPDATE ingest_runs SET status = 'failed', metadata = metadata - 'notes_reading' WHERE id = :id",
              id=result["id"])
    assert localrag.ingest(config, vault)["notes_read_again_from"] == "notes-v1"


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
    (vault / ".trash").mkdir()  # hidden: these two, .hidden.md, .localragignore, .obsidian/app.json
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
    assert result["warnings"] == [{"path": ".", "warning": "no notes found (.md, .txt, .canvas, .pdf files): is "
                                                          "this the vault folder? Nothing to index"}]


def test_a_folder_of_other_files_or_of_excluded_notes_says_why_nothing_is_indexed(db, tmp_path):
    """A folder holding only attachments (a.png) is no vault either: it got no warning, as it "found 1 file"; a
    vault whose every note is excluded is told so, not asked whether it is the vault folder."""
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "a.png").write_bytes(b"\x89PNG")
    code, out = run_cli("ingest", str(tmp_path / "pics"), "--json")
    assert code == 0 and json.loads(out)["warnings"] == [{"path": ".", "warning": (
        "no notes found (.md, .txt, .canvas, .pdf files): is this the vault folder? Nothing to index (1 other "
        "file(s) seen)")}]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\nText.\n", encoding="utf-8")
    code, out = run_cli("ingest", str(tmp_path / "notes"), "--exclude", "*.md", "--json")
    assert code == 0 and json.loads(out)["warnings"] == [{"path": ".", "warning": (
        "no notes to index: the --exclude patterns and .localragignore leave none (1 file(s) excluded)")}]


def test_binary_detection_spares_text_in_legacy_encodings():
    """Windows-1252 / Latin-1 text and text with a form feed is text; a NUL or a tenth of control bytes in a file
    that is neither UTF-8 nor UTF-16 is binary."""
    assert localrag.decode_text("Caf\xe9 cr\xe8me \x0c page two".encode("latin-1"))[1] is not None
    assert localrag.decode_text("Ærøskøbing\tNæstved\r\n".encode("cp1252"))[0].startswith("Ærøskøbing")
    for data in (b"\xff\x00abc", b"\xe9" + bytes(range(1, 9)) * 3 + b"text" * 10,
                 b"\xe9" + b"plain words " * 40 + b"\x00"):     # one NUL in 8-bit text: no text editor wrote it
        with pytest.raises(localrag.BinaryFile):
            localrag.decode_text(data)
    assert localrag.decode_text("text with a stray NUL\x00 in UTF-8".encode())[0].startswith("text")   # UTF-8: kept
    assert localrag._size_text(2000) == "2 KB" and localrag._size_text(512) == "512 bytes" and \
        localrag._size_text(1_500_000) == "1.5 MB"
    # LOCALRAG_MAX_FILE_MB counts 2**20 bytes: its default 10 read as "the 10.5 MB limit" (outside review)
    assert localrag._too_large_text(20 * 2 ** 20, 10 * 2 ** 20).startswith("file is 20 MB, over the 10 MB limit")


_CHINESE_NOTE = "# 客户升级政策\n\n客户提交 P1 工单后必须在十五分钟内响应。\n".encode()
_CAFE_NOTE = "# Café notes\n\nThe crème brûlée costs five euros.\n".encode()


@pytest.mark.parametrize("data, expect, invalid, offset", [
    (_CHINESE_NOTE + b"stray byte \xff here\n",
     "# 客户升级政策\n\n客户提交 P1 工单后必须在十五分钟内响应。\nstray byte \ufffd here\n", 1, len(_CHINESE_NOTE) + 11),
    (_CAFE_NOTE + b"bad \x81 byte\n",
     "# Café notes\n\nThe crème brûlée costs five euros.\nbad \ufffd byte\n", 1, len(_CAFE_NOTE) + 4),
    (_CHINESE_NOTE + "工单".encode()[:-1] + b"\n",                       # a character cut short: each byte counts
     "# 客户升级政策\n\n客户提交 P1 工单后必须在十五分钟内响应。\n工\ufffd\ufffd\n", 2, len(_CHINESE_NOTE) + 3),
    (b"\xe9t\xe9 " + _CAFE_NOTE,                                            # Latin-1 bytes pasted into UTF-8
     "\ufffdt\ufffd # Café notes\n\nThe crème brûlée costs five euros.\n", 2, 0),
], ids=["chinese-0xff", "accented-0x81", "cut-character", "latin1-pasted"])
def test_utf8_with_stray_bytes_stays_utf8(data, expect, invalid, offset):
    """A UTF-8 note with a few invalid bytes was read whole as Windows-1252: its Chinese and accented text became
    mojibake no search could find.  Now more valid multi-byte sequences than invalid bytes keep it UTF-8, each
    invalid byte a U+FFFD, and the warning counts them and says where the first is."""
    text, warning = localrag.decode_text(data)
    assert text == expect
    assert text.count("\ufffd") == invalid and data[offset] >= 0x80
    assert warning.startswith(f"{invalid} byte{'s' if invalid > 1 else ''} not valid UTF-8 (")
    assert f"at byte offset {offset})" in warning and "read as UTF-8" in warning and "U+FFFD" in warning
    assert "save the file as UTF-8" in warning and "Windows-1252" not in warning


@pytest.mark.parametrize("data, expect", [
    (b"caf\xe9 cr\xe8me", "café crème"),
    ("Ærøskøbing – “quoted” naïve".encode("cp1252"), "Ærøskøbing – “quoted” naïve"),
    ("naïve Ã© entrée".encode("latin-1"), "naïve Ã© entrée"),   # one pair is valid UTF-8 by chance: outnumbered
], ids=["latin-1", "cp1252", "chance-utf8-pair"])
def test_legacy_8bit_text_is_still_windows_1252(data, expect):
    text, warning = localrag.decode_text(data)
    assert text == expect
    assert warning == (f"not valid UTF-8 (byte {data.index(next(b for b in data if b >= 0x80))}); read as "
                       f"Windows-1252 (Latin-1): check accented letters, and save the file as UTF-8 to be sure")


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_ascii_utf16_without_bom_is_text(codec):
    """ASCII-only UTF-16 is valid UTF-8 too (NUL is ASCII): it was refused as binary for its NULs before the
    UTF-16 test ever ran."""
    text = "# Giraffe Notes\n\nGiraffebar necks are long.\n"
    assert localrag.decode_text(text.encode(codec)) == (text, None)
    assert localrag.decode_text("ab".encode(codec)) == ("ab", None)


_noise = random.Random(7)


@pytest.mark.parametrize("data", [
    bytes(_noise.randrange(256) for _ in range(3000)),
    bytes(_noise.randrange(128) for _ in range(3000)),                                  # 7-bit: valid UTF-8
    b"".join(_noise.randrange(32).to_bytes(2, "little") for _ in range(600)),          # small 16-bit numbers
    b"".join(_noise.randrange(32).to_bytes(2, "big") for _ in range(600)),
    b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00>\x00\x01" * 64,
    "汉字".encode() + b"\xff" + b"\x01\x02\x03" * 10,             # mostly UTF-8 but full of control bytes
], ids=["noise", "7-bit-noise", "16-bit-le", "16-bit-be", "elf", "utf8-controls"])
def test_binary_data_is_still_refused(data):
    with pytest.raises(localrag.BinaryFile, match="^binary data, not text"):
        localrag.decode_text(data)


from hypothesis import given, settings, strategies as st  # noqa: E402

_note_text = st.text(st.characters(blacklist_categories=("Cc", "Cs")) | st.sampled_from("\n\t"))


@settings(max_examples=300, deadline=None)
@given(_note_text, st.integers(min_value=0))
def test_one_bad_byte_spoils_only_its_own_character(body, where):
    """Any UTF-8 note (a Chinese heading makes it mostly UTF-8) with one byte overwritten by 0xff reads back as
    itself but for that byte's character, which becomes one U+FFFD per byte it had."""
    note = "# 客户升级政策\n" + body
    data = bytearray(note.encode())
    where %= len(data)
    data[where] = 0xFF
    k = len(note.encode()[:where].decode("utf-8", errors="ignore"))   # the character holding that byte
    width = len(note[k].encode())
    text, warning = localrag.decode_text(bytes(data))
    assert text == note[:k] + "\ufffd" * width + note[k + 1:]
    assert f"at byte offset {len(note[:k].encode())})" in warning and warning.startswith(f"{width} byte")


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF) | st.sampled_from("\n\t\r"), min_size=2),
       st.sampled_from(["utf-16-le", "utf-16-be"]))
def test_latin_text_in_utf16_without_bom_reads_back(text, codec):
    assert localrag.decode_text(text.encode(codec)) == (text, None)


def test_ingest_indexes_a_stray_byte_note_and_bomless_utf16(db, tmp_path, capfd):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "escalation.md").write_bytes(_CHINESE_NOTE + b"stray byte \xff here\n")
    (tmp_path / "notes" / "giraffe.md").write_bytes("# Giraffe Notes\n\nGiraffebar necks are long.\n"
                                                    .encode("utf-16-be"))
    code, out = run_cli("ingest", str(tmp_path / "notes"), "--json")
    result = json.loads(out)
    assert code == 0 and result["files_failed"] == [] and result["documents_added"] == 2
    assert result["warnings"] == [{"path": "escalation.md", "warning": (
        f"1 byte not valid UTF-8 (at byte offset {len(_CHINESE_NOTE) + 11}); read as UTF-8 with it replaced by "
        f"U+FFFD: correct the text there and save the file as UTF-8")}]
    assert "escalation.md" in capfd.readouterr().err
    with localrag.Store.open(db) as s:
        assert s.run("SELECT count(*) FROM chunks WHERE content LIKE '%十五分钟内响应%'")[0][0] == 1
        assert s.run("SELECT count(*) FROM chunks WHERE content LIKE '%Giraffebar necks%'")[0][0] == 1


def test_per_file_problems_reported_and_others_indexed(db, vault, capfd):
    (vault / "latin1.md").write_bytes("# Café\nna\xefve zorbulon".encode("latin-1"))
    (vault / "bad-yaml.md").write_text("---\ntitle: [unclosed\n---\n# x\nquuxotic body kept\n")
    (vault / "board.canvas").write_text("{not json")
    (vault / "program.md").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00>\x00\x01" * 64)   # renamed
    noise = random.Random(3)
    (vault / "noise.md").write_bytes(bytes(noise.randrange(256) for _ in range(3000)))
    outside = vault.parent / "outside.md"
    outside.write_text("# outside secret\nclassified")
    (vault / "link.md").symlink_to(outside)
    code, out = run_cli("ingest", str(vault), "--json")
    result = json.loads(out)
    err = capfd.readouterr().err
    assert code == localrag.EXIT_PARTIAL and result["status"] == "success"
    failed = {f["path"]: f["error"] for f in result["files_failed"]}
    assert sorted(failed) == ["board.canvas", "noise.md", "program.md"]
    assert "JSON Canvas" in failed["board.canvas"] and "line 1" in failed["board.canvas"]
    assert failed["program.md"].startswith("binary data, not text (")    # no garbage in the index
    assert failed["noise.md"].startswith("binary data, not text")
    warned = {w["path"]: w["warning"] for w in result["warnings"]}
    assert "Windows-1252" in warned["latin1.md"] and "line 3" in warned["bad-yaml.md"]
    assert "board.canvas" in err and "latin1.md" in err and "bad-yaml.md" in err
    assert {"path": "link.md", "warning": "symlink leads outside the vault; not followed"} in result["warnings"]
    with localrag.Store.open(db) as s:
        assert not s.run("SELECT 1 FROM chunks WHERE content LIKE '%classified%'")
        assert s.run("SELECT count(*) FROM chunks WHERE content LIKE '%naïve zorbulon%'")[0][0] == 1
        assert s.run("SELECT count(*) FROM chunks WHERE content LIKE '%quuxotic body kept%'")[0][0] == 1
        assert s.run("SELECT count(*) FROM documents")[0][0] == result["documents_added"] > 10
        summary = s.run("SELECT error_summary FROM ingest_runs ORDER BY id DESC LIMIT 1")[0][0]
    assert "board.canvas" in summary


def test_broken_file_keeps_its_previous_version(db, vault):
    board = vault / "board.canvas"
    board.write_text(json.dumps({"nodes": [{"id": "a", "type": "text", "text": "canvas card zorbulon"}]}))
    localrag.ingest(db, vault)
    board.write_text('{"nodes": [')  # truncated while being saved
    before = counts(db)
    result = localrag.ingest(db, vault)
    assert [f["path"] for f in result["files_failed"]] == ["board.canvas"]
    assert result["documents_deleted"] == 0 and counts(db) == before
    assert localrag.search(db, "canvas card zorbulon")["results"][0]["source"] == "board.canvas"


def _interpreter_for(user: int, home: Path, env: dict) -> tuple[str, dict]:
    """An interpreter `user` can run, with the test process's packages: this one, or where it lives somewhere only
    root can reach (a pyenv under /root, mode 700) the system's build of the same Python version, given this
    process's site-packages on PYTHONPATH (they are pure Python or built for this version).  Skips without one."""
    import subprocess
    import sysconfig
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    packages = os.pathsep.join(dict.fromkeys([str(home), sysconfig.get_paths()["purelib"],
                                              sysconfig.get_paths()["platlib"]]))
    for python, with_env in ((sys.executable, env), (shutil.which(f"python{version}", path="/usr/bin:/usr/local/bin"),
                                                     {**env, "PYTHONPATH": packages})):
        if not python:
            continue
        try:
            subprocess.run([python, "-c", "import pg8000, localrag"], user=user, cwd=home, env=with_env,
                           capture_output=True, timeout=60, check=True)
            return python, with_env
        except (PermissionError, subprocess.CalledProcessError):
            continue
    pytest.skip(f"no Python {version} that uid {user} can run (this one, {sys.executable}, lives where it cannot)")


def run_cli_as_a_user(*args: str) -> tuple[int, str, str]:
    """`localrag ARGS` as a process that file permissions apply to.  Root reads everything: as root it runs as the
    owner of the database's socket folder (who can reach the server, not a root-owned folder of mode 000), from a
    copy of localrag.py that user can read.  Returns (exit code, stdout, stderr)."""
    import subprocess
    import tempfile
    import urllib.parse
    user, home = None, Path(tempfile.mkdtemp(prefix="localrag-user-"))
    try:
        shutil.copy(localrag.__file__, home / "localrag.py")
        if os.geteuid() == 0:
            url = urllib.parse.urlsplit(os.environ["DATABASE_URL"])
            host = urllib.parse.parse_qs(url.query).get("host", [url.hostname or ""])[0]
            user = os.stat(host).st_uid if host.startswith("/") else 65534
            if user == 0:
                pytest.skip("the database's socket folder belongs to root: no other user to run as")
            os.chmod(home, 0o755)
        env = {**os.environ, "PYTHONPATH": str(home), "LOCALRAG_HOME": str(home / "home"), "HOME": str(home)}
        python = sys.executable
        if user is not None:
            python, env = _interpreter_for(user, home, env)
        done = subprocess.run([python, "-c", "import sys, localrag; sys.exit(localrag.main(sys.argv[1:]))",
                               *args], env=env, cwd=home, user=user, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr
    finally:
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def open_tmp():
    """A temp folder another user can reach (pytest's are the owner's alone); removed after, whatever the modes a
    test left on the folders in it."""
    import tempfile
    base = Path(tempfile.mkdtemp(prefix="localrag-vault-"))
    os.chmod(base, 0o755)
    yield base
    for dirpath, dirnames, _ in os.walk(base):   # top-down: each folder opened before it is listed
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
    shutil.rmtree(base)


def test_a_folder_that_cannot_be_listed_keeps_its_notes_and_is_named(db, open_tmp):
    """os.walk passed over a folder it could not list (permission denied) without a word: its indexed notes were
    deleted as if gone, and files_found left them out.  It is named, counted as unreadable and its notes kept (exit
    10, as for an unreadable file); a vault folder that cannot be listed at all keeps everything."""
    vault = open_tmp / "v"
    (vault / "locked").mkdir(parents=True)
    (vault / "a.md").write_text("# A\nalpha\n")
    (vault / "b.md").write_text("# B\nbeta\n")
    (vault / "locked" / "c.md").write_text("# C\nlocked gamma okapi\n")
    (vault / "locked" / "d.md").write_text("# D\nlocked delta\n")
    assert localrag.ingest(db, vault)["documents_added"] == 4
    os.chmod(vault / "locked", 0)
    code, out, err = run_cli_as_a_user("ingest", str(vault), "--json")
    result = json.loads(out)
    assert code == localrag.EXIT_PARTIAL, err
    assert result["documents_deleted"] == 0 and result["skipped_by_reason"] == {"unreadable": 1}
    assert result["files_found"] == 3 and result["documents_skipped"] == 2
    assert {"path": "locked", "warning": "cannot list this folder: Permission denied; the notes indexed under it "
                                         "(if any) are kept"} in result["warnings"]
    assert "warning: locked: cannot list this folder" in err
    os.chmod(vault, 0)
    code, out, err = run_cli_as_a_user("ingest", str(vault), "--json")
    result = json.loads(out)
    assert code == localrag.EXIT_PARTIAL and result["documents_deleted"] == 0, err
    assert [w["path"] for w in result["warnings"]] == ["."] and "cannot list" in result["warnings"][0]["warning"]
    assert counts(db)["documents"] == 4
    assert localrag.search(db, "locked gamma okapi")["results"][0]["source"] == "locked/c.md"


def test_a_vault_deleted_mid_run_stops_it_with_one_error(db, vault, monkeypatch):
    """Deleted (or unmounted) halfway, a vault gave a run "success", exit 10 and a "cannot read: No such file or
    directory" warning per file left (3,743 lines on a 4,000-note vault), never saying why.  The run stops at
    the first such file: vault_invalid (exit 9) naming the folder, the run failed, what was committed kept."""
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 10)   # a tuning constant: several transactions
    writes = []

    def remove_after_the_first_commit(phase, done, total):
        if phase == "write":
            writes.append(done)
            if len(writes) == 2:
                shutil.rmtree(vault)

    with pytest.raises(localrag.VaultError) as caught:
        localrag.ingest(db, vault, progress=remove_after_the_first_commit)
    message = caught.value.message
    assert message.startswith(f"the vault folder {vault} is gone (deleted, moved or unmounted while ingest read it): "
                              f"ingest run #1 stopped and marked failed"), message
    assert caught.value.exit_code == localrag.EXIT_VAULT and "cannot read" not in message
    run = runs(db)[-1]
    assert run[1] == "failed" and run[2] == counts(db)["documents"] > 0 and "is gone" in run[8]
    assert not caught.value.details["ingest_run"]["warnings"]


def test_a_vault_drive_unmounted_mid_run_stops_it_and_deletes_nothing(db, tmp_path):
    """A vault that is its own mount point, its drive unmounted during a run: the folder stays (an empty mount
    point), so each note not yet read looked deleted since the scan: early in a run the mass-delete rule kept them
    (a warning each, exit 10), late (fewer than half left) they were deleted from the index.  The folder's device
    changed: the run stops as for a vault folder gone (vault_invalid), nothing deleted.  Needs a tmpfs mount (root,
    in a container that allows it); skipped elsewhere."""
    import subprocess
    from conftest import SAMPLE_VAULT
    mount_point = tmp_path / "drive"
    mount_point.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "none", str(mount_point)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root and a container that allows it")
    try:
        shutil.copytree(SAMPLE_VAULT, mount_point, dirs_exist_ok=True)
        first = localrag.ingest(db, mount_point)
        for note in mount_point.rglob("*.md"):   # every note changed: each is read and parsed again
            note.write_text(note.read_text(encoding="utf-8") + "\nchanged\n", encoding="utf-8")
        events = []

        def unmount_after_the_scan(phase, done, total):
            if phase == "parse+embed" and not events:   # listed, none read yet
                events.append(done)
                subprocess.run(["umount", "-l", str(mount_point)], check=True)

        with pytest.raises(localrag.VaultError) as caught:
            localrag.ingest(db, mount_point, progress=unmount_after_the_scan)
        assert "unmounted" in caught.value.message and caught.value.exit_code == localrag.EXIT_VAULT
        assert counts(db)["documents"] == first["documents_added"]   # nothing deleted
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def deleting_when_reading_starts(paths):
    """A progress callback that deletes these files at the run's first parse+embed event: after the scan listed
    them, before any is read."""
    def progress(phase, done, total):
        if phase == "parse+embed" and done == 0:
            for path in paths:
                if path.exists():
                    path.unlink()
    return progress


def test_a_note_deleted_while_ingest_reads_it_is_deleted(ingested):
    """A note deleted after the scan, before its read, was "cannot read: No such file or directory" (exit 10, its
    indexed version kept until the next run); the vault folder still there, it is gone as a note missing at the scan
    is: deleted from the index, no warning, exit 0.  The mass-delete rule still holds: notes vanishing mid-run that
    would make over half of the vault's indexed notes gone are kept (a warning each, exit 10) unless --allow-delete."""
    config, vault, first = ingested
    note = vault / "policies" / "Data Handling Policy.md"
    result = localrag.ingest(config, vault, progress=deleting_when_reading_starts([note]))
    assert result["status"] == "success" and result["documents_deleted"] == 1, result
    assert not result["warnings"] and not result["skipped_by_reason"].get("unreadable") and not result["files_failed"]
    assert counts(config)["documents"] == first["documents_added"] - 1
    assert "policies/Data Handling Policy.md" not in {r["source"] for r in localrag.search(config, "data handling",
                                                                                            10)["results"]}
    notes = sorted(p for p in vault.rglob("*.md") if not any(part.startswith(".") for part in p.parts))
    most = notes[:len(notes) // 2 + 1]
    result = localrag.ingest(config, vault, progress=deleting_when_reading_starts(most))
    assert result["documents_deleted"] == 0 and result["skipped_by_reason"]["unreadable"] == len(most), result
    assert {w["path"] for w in result["warnings"]} == {str(p.relative_to(vault)) for p in most}
    assert all("deleted while ingest read it; the indexed version is kept" in w["warning"] and "--allow-delete" in
               w["warning"] for w in result["warnings"])
    assert counts(config)["documents"] == len(notes)   # kept: none deleted
    for p in most:
        p.write_text("# back\n", encoding="utf-8")
    result = localrag.ingest(config, vault, progress=deleting_when_reading_starts(most), allow_delete=True)
    assert result["documents_deleted"] == len(most) and counts(config)["documents"] == len(notes) - len(most)


def test_huge_file_is_counted_not_read(db, vault, monkeypatch):
    monkeypatch.setenv("LOCALRAG_MAX_FILE_MB", "1")
    big = vault / "huge.md"
    big.write_text("# 大文件\n" + "重复的内容 filler text\n" * 80000)
    code, out = run_cli("ingest", str(vault), "--json")
    result = json.loads(out)
    assert code == localrag.EXIT_PARTIAL and result["skipped_by_reason"] == {"too_large": 1, "hidden": 1}
    assert "LOCALRAG_MAX_FILE_MB" in {w["path"]: w["warning"] for w in result["warnings"]}["huge.md"]
    assert result["documents_added"] > 10 and not result["files_failed"]


def ingest_killed_midway(db, vault) -> None:
    """An ingest whose connections are terminated at its eighth progress event: it ends with DatabaseUnavailable."""
    seen = []

    def killer(*event):
        seen.append(event)
        if len(seen) == 8:
            with localrag.Store.open(db) as s:
                s.run("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'localrag%' "
                      "AND pid <> pg_backend_pid() AND datname = current_database()")

    with pytest.raises(localrag.DatabaseUnavailable):
        localrag.ingest(db, vault, progress=killer)


def test_database_dies_mid_ingest_then_next_run_completes(db, vault, monkeypatch):
    """The connection is killed after some batches: the run is marked failed, earlier batches stay, rerun works."""
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 10)  # a tuning constant: many small transactions
    ingest_killed_midway(db, vault)
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
    """kill -9 of a real `localrag ingest` mid-run (held at its first chunk write by a table lock): the next ingest
    marks the orphaned run failed, with a reason, and completes."""
    import signal
    import subprocess
    import sys
    import time
    env = {k: v for k, v in os.environ.items()}
    with localrag.Store.open(db) as s:
        # Fresh statistics first: with stale ones (earlier tests' writes) ingest opens with ANALYZE, which the SHARE
        # lock below would hold up before the run row exists.
        s.run("ANALYZE documents, chunks, embeddings")
    holder = localrag.Store.open(db)
    holder.run("BEGIN")
    holder.run("LOCK TABLE chunks IN SHARE MODE")  # reads go on; the first chunk write waits
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
        if proc.poll() is None:  # a failed wait must not leave the ingest running into the next test
            proc.kill()
            proc.wait(timeout=30)
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


def _sleepy(path: str) -> str:
    time.sleep(60)
    return path


def _slow_stem(path: str) -> str:
    time.sleep(0.002)
    return localrag.note_stem(path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the worker pool forks: Linux only")
def test_workers_answer_in_order_work_ahead_and_end_on_eof():
    """Results come back in submission order while the workers run ahead of the collector (a thread per pipe
    receives them, so a worker never waits on a full pipe); closing the pipes ends idle workers by EOF, not by
    the kill that close() falls back to after 5 s; a worker that dies fails its pending results."""
    pool = localrag._Workers(2)
    try:
        futures = [pool.submit(_slow_stem, f"folder/note {i}.md") for i in range(300)]
        time.sleep(0.5)   # nothing collected yet: the workers keep going, their results wait in this process
        assert sum(q.qsize() for q in pool.results) > 100
        assert [f.result() for f in futures] == [f"note {i}" for i in range(300)]
    finally:
        pool.close()
    assert len(pool.statuses) == 2 and all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in pool.statuses)
    doomed = localrag._Workers(2)
    try:
        first, second = doomed.submit(_sleepy, "a.md"), doomed.submit(_slow_stem, "b.md")
        assert second.result() == "b"
        os.kill(doomed.pids[0], signal.SIGKILL)
        with pytest.raises(localrag.IngestWorkerDied, match="was killed by SIGKILL"):
            first.result()
    finally:
        doomed.close(abort=True)


@pytest.mark.parametrize("platform,methods,expected", [
    ("linux", ["fork", "spawn", "forkserver"], "fork"),
    ("linux", ["spawn"], None),                   # a Linux Python without fork: one process
    ("darwin", ["spawn", "fork", "forkserver"], None),  # fork exists but is unsafe with macOS frameworks
    ("win32", ["spawn"], None),                   # Windows: no fork
])
def test_worker_pool_start_method_per_platform(platform, methods, expected):
    assert localrag._pool_start_method(4, 1000, platform, methods) == expected
    assert localrag._pool_start_method(1, 1000, platform, methods) is None  # one worker: in-process
    assert localrag._pool_start_method(4, 3, platform, methods) is None     # few files: no pool start-up


# --- interruption: signals on real processes leave no process, lock or running row behind (issue 10) ----------------

import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from robust_util import (ROOT, check_consistent, children, cli_env, ingest_lock_held, make_vault, query,  # noqa: E402
                         start_cli, wait_for, wait_gone)

WORKERS = {"LOCALRAG_INGEST_WORKERS": "2"}


@pytest.fixture
def big_vault(tmp_path):
    """300 notes: a few seconds of ingest with worker processes and (with batch_chunks) many transactions."""
    return make_vault(tmp_path / "big", 300)


def _running_with_commits(config):
    rows = query(config, "SELECT id, documents_added FROM ingest_runs WHERE status = 'running'")
    return rows and rows[0][1] > 0 and rows[0]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_signal_mid_ingest_leaves_no_process_lock_or_running_row(db, big_vault, sig):
    proc = start_cli("ingest", str(big_vault), "--json", env=WORKERS, batch_chunks=60)
    run_id = wait_for(lambda: _running_with_commits(db))[0]
    workers = children(proc.pid)
    assert len(workers) == 2, "the worker pool should be running"
    os.kill(proc.pid, sig)
    out, err = proc.communicate(timeout=60)
    assert wait_gone(workers) == [], "worker processes outlived their parent"
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
        # Until the next ingest closes it, `db status` tells the row's process is gone (once the server has
        # noticed the dropped session and released its lock).
        wait_for(lambda: not ingest_lock_held(db, str(big_vault.resolve())), timeout=30)
        last = json.loads(run_cli("db", "status", "--json")[1])["last_ingest_run"]
        assert last["id"] == run_id and last["status"] == "interrupted" and "next ingest" in last["hint"]
    else:
        name = signal.Signals(sig).name
        assert proc.returncode == 128 + sig, err
        assert f"interrupted ({name}): ingest run #{run_id} stopped and marked failed" in err
        body = json.loads(out)["error"]       # --json: the error body is on stdout, with what was committed
        assert body["code"] == "interrupted" and body["details"]["signal"] == name
        assert body["details"]["ingest_run"]["id"] == run_id and body["message"] in err
        status, summary, added = query(db, "SELECT status, error_summary, documents_added FROM ingest_runs "
                                           "WHERE id = :i", i=run_id)[0]
        assert status == "failed" and f"interrupted ({name})" in summary
        assert not ingest_lock_held(db, str(big_vault.resolve()))
    # A killed run's row counts what its committed batches wrote.
    added = query(db, "SELECT documents_added FROM ingest_runs WHERE id = :i", i=run_id)[0][0]
    assert added == query(db, "SELECT count(*) FROM documents")[0][0] > 0
    # The next command completes and the index is whole.
    code, out = run_cli("ingest", str(big_vault), "--json")
    result = json.loads(out)
    assert code == 0 and result["documents_skipped"] == added and result["documents_added"] == 300 - added
    check_consistent(db, big_vault)
    assert query(db, "SELECT status FROM ingest_runs WHERE id = :i", i=run_id)[0][0] == "failed"


def test_one_interruption_delivered_twice_is_still_a_clean_stop(db, big_vault):
    """`timeout -s INT` signals the command and then its process group, so the one interruption arrives twice in a
    moment; the second had hit the restored default and ended the process silently, its run row left open (an
    outside walkthrough saw it in 3 runs of 22).  Within DUPLICATE_SIGNAL_S it is the same stop: said and closed."""
    proc = start_cli("ingest", str(big_vault), env=WORKERS, batch_chunks=60)
    run_id = wait_for(lambda: _running_with_commits(db))[0]
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.005)   # the first one's handler has run (it runs at once): the second meets what it left
    os.kill(proc.pid, signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    # -2: the copy reached the interpreter's exit, which restores the default (a shell says 130 either way)
    assert proc.returncode in (130, -signal.SIGINT), err
    assert f"interrupted (SIGINT): ingest run #{run_id} stopped and marked failed" in err
    assert query(db, "SELECT status FROM ingest_runs WHERE id = :i", i=run_id)[0][0] == "failed"


def test_second_ctrl_c_ends_at_once(db, big_vault):
    proc = start_cli("ingest", str(big_vault), env=WORKERS, batch_chunks=60)
    wait_for(lambda: _running_with_commits(db))
    workers = children(proc.pid)
    os.kill(proc.pid, signal.SIGINT)
    os.kill(proc.pid, signal.SIGINT)
    proc.communicate(timeout=30)
    assert proc.returncode in (130, -signal.SIGINT)
    assert wait_gone(workers) == []
    assert run_cli("ingest", str(big_vault))[0] == 0
    check_consistent(db, big_vault)


def test_ctrl_c_during_a_blocked_opening_query_ends_now_and_frees_the_lock(ingested):
    """The issue's 3-minute stall: Ctrl-C while the diff query waits.  The interrupted session is ended from a
    fresh connection (its lock and query go at once), not waited for."""
    config, vault, _ = ingested
    with localrag.Store.open(config) as blocker:
        blocker.run("BEGIN")
        blocker.run("LOCK TABLE documents IN ACCESS EXCLUSIVE MODE")
        proc = start_cli("ingest", str(vault))
        wait_for(lambda: query(config, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                       "AND application_name LIKE 'localrag%'")[0][0] > 0)
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 130 and "interrupted (SIGINT)" in err
        assert query(config, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND application_name LIKE 'localrag%'")[0][0] == 0
        assert not ingest_lock_held(config, str(vault.resolve()))
        blocker.run("ROLLBACK")
    assert run_cli("ingest", str(vault))[0] == 0


def test_a_stop_while_a_batch_is_written_reports_it_as_not_committed(db, tmp_path):
    """The issue: Ctrl-C while the one batch of a 250-note vault was written printed `write: 250/250 files 100%`,
    then `0 added` (the write line counted files read, the summary what was committed).  The write is held inside
    its transaction (its run-row update waits for a row lock) and interrupted there: progress, summary, --json body
    and run row agree that nothing was committed, say the phase, and count what the next run has to do."""
    vault = make_vault(tmp_path / "v250", 250)
    with localrag.Store.open(db) as blocker:
        proc = start_cli("ingest", str(vault), "--json", env=WORKERS)
        run_id = wait_for(lambda: query(db, "SELECT id FROM ingest_runs WHERE status = 'running'"))[0][0]
        blocker.run("BEGIN")
        blocker.run("SELECT id FROM ingest_runs WHERE id = :i FOR UPDATE", i=run_id)
        wait_for(lambda: query(db, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                   "AND application_name LIKE 'localrag%'")[0][0] > 0)
        os.kill(proc.pid, signal.SIGINT)
        blocker.run("ROLLBACK")   # closing the run row (from a fresh session) needs the row
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    lines = err.splitlines()
    writes = [line for line in lines if line.startswith("write:")]
    # all 250 were read ("parse+embed: 250/250 files 100%" is true, and a log says so when the phase completes);
    # none may be claimed as written
    assert writes == ["write: 0/250 files committed"] and \
        not [line for line in lines if "100%" in line and not line.startswith("parse+embed:")], err
    assert ("stopped and marked failed (in its write phase); committed before the stop: 0 added, 0 updated, "
            "0 deleted, 0 chunks, 0 embeddings; of 250 file(s) to read, 250 read (250 of them changed and not "
            "committed) and 0 not read") in err
    run = json.loads(out)["error"]["details"]["ingest_run"]
    assert run["documents_added"] == 0 == query(db, "SELECT count(*) FROM documents")[0][0]
    assert run["stopped_at"] == {"phase": "write", "files_read": 250, "files_total": 250, "files_uncommitted": 250,
                                 "files_unread": 0}
    summary = "interrupted (SIGINT) in the write phase: 250 of 250 files read; 0 written and committed, 250 read " \
              "but not committed"
    assert run["error_summary"] == summary
    assert query(db, "SELECT status, error_summary FROM ingest_runs WHERE id = :i", i=run_id)[0] == ["failed", summary]
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == 0 and json.loads(out)["documents_added"] == 250


def test_a_worker_that_dies_fails_the_run_with_its_own_exit_code(db, tmp_path):
    """A parsing worker killed under a running ingest (the out-of-memory killer's SIGKILL) made `ingest` exit 0 with
    no message and an empty --json output: main() took the worker pipe's BrokenPipeError for stdout's.  Now: exit 15,
    one line naming the worker, how it ended and what was committed, the --json error body, the run row failed, and
    the next ingest finishes the vault."""
    vault = make_vault(tmp_path / "v400", 400)
    key = localrag._safe_name(str(localrag.canonical_vault(vault)))
    with localrag.Store.open(db) as holder:
        assert holder.try_advisory_lock(localrag.INGEST_LOCK_KEY, key)   # the ingest waits here, workers forked
        proc = start_cli("ingest", str(vault), "--json", "--wait", env=WORKERS)
        workers = wait_for(lambda: children(proc.pid) if len(children(proc.pid)) >= 2 else None)
        os.kill(workers[0], signal.SIGKILL)
        holder.advisory_unlock(localrag.INGEST_LOCK_KEY, key)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == localrag.EXIT_WORKER_DIED == 15, err
    line = next(line for line in err.splitlines() if line.startswith("error ["))
    assert line.startswith(f"error [ingest_worker_died]: an ingest worker process (pid {workers[0]}) was killed by "
                           f"SIGKILL") and "stopped and marked failed" in line and "Rerun `localrag ingest`" in line
    body = json.loads(out)["error"]
    assert body["code"] == "ingest_worker_died" and body["details"]["ingest_run"]["status"] == "failed"
    assert query(db, "SELECT status FROM ingest_runs ORDER BY id DESC LIMIT 1")[0][0] == "failed"
    code, out = run_cli("ingest", str(vault), "--json")
    assert code == 0 and query(db, "SELECT count(*) FROM documents")[0][0] == 400


def test_a_signal_ignored_at_start_stays_ignored(db, tmp_path):
    """`nohup localrag ingest … &`: SIGHUP was ignored when localrag started, and localrag's own handler replaced
    that, so the ingest died when the SSH session closed.  An inherited SIG_IGN is kept; the others still stop."""
    vault = make_vault(tmp_path / "v50", 50)
    key = localrag._safe_name(str(localrag.canonical_vault(vault)))
    with localrag.Store.open(db) as holder:
        assert holder.try_advisory_lock(localrag.INGEST_LOCK_KEY, key)
        code = "import signal, sys, localrag\nsignal.signal(signal.SIGHUP, signal.SIG_IGN)\n" \
               "sys.exit(localrag.main(sys.argv[1:]))\n"
        env = cli_env({"PYTHONPATH": str(ROOT)})
        proc = subprocess.Popen([sys.executable, "-c", code, "ingest", str(vault), "--wait"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            name = localrag._ingest_session_name(proc.pid)   # its session exists: it is at the lock, waiting
            wait_for(lambda: query(db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = :n",
                                   n=name)[0][0])
            os.kill(proc.pid, signal.SIGHUP)
            time.sleep(0.5)
            assert proc.poll() is None   # still waiting for the lock
        finally:
            holder.advisory_unlock(localrag.INGEST_LOCK_KEY, key)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert query(db, "SELECT count(*) FROM documents")[0][0] == 50


def test_progress_and_the_stop_summary_count_the_same_commits(db, tmp_path, monkeypatch):
    """Over several batches, every `write` progress call counts the documents its run has committed (never the files
    read), and a stop in the middle leaves exactly those in the database and in the summary."""
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 60)
    vault = make_vault(tmp_path / "v40", 40)
    calls = []

    def progress(phase, done, total):
        if phase == "write":
            committed = query(db, "SELECT count(*) FROM documents")[0][0]
            calls.append((done, total, committed))
            if len(calls) == 7:   # the fourth batch is about to be written
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        localrag.ingest(db, vault, progress=progress)
    assert all(done == committed and done <= total for done, total, committed in calls), calls
    partial, last = info.value.partial, calls[-1]
    assert partial["documents_added"] == last[0] == query(db, "SELECT count(*) FROM documents")[0][0] > 0
    at = partial["stopped_at"]
    assert at["phase"] == "write" and at["files_uncommitted"] == last[1] - last[0] > 0
    assert at["files_read"] == partial["documents_added"] + at["files_uncommitted"]
    assert at["files_unread"] == 40 - at["files_read"]


def test_workers_are_forked_before_the_database_connection(db, big_vault):
    """No worker holds a socket to Postgres: they are started before the connection opens."""
    proc = start_cli("ingest", str(big_vault), env=WORKERS, batch_chunks=60)
    wait_for(lambda: _running_with_commits(db))
    workers = children(proc.pid)
    try:
        for pid in workers:
            fds = os.listdir(f"/proc/{pid}/fd")
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds if os.path.exists(f"/proc/{pid}/fd/{fd}")}
            sockets = {link for link in links if link.startswith("socket:")}
            parent = {os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")
                      if os.path.exists(f"/proc/{proc.pid}/fd/{fd}")}
            assert not sockets & {link for link in parent if link.startswith("socket:")}
    finally:
        proc.kill()
        proc.communicate()
    assert wait_gone(workers) == []


# --- concurrency -----------------------------------------------------------------------------------------------------

def test_second_ingest_names_the_holder_or_waits_for_it(db, big_vault, capfd):
    first = start_cli("ingest", str(big_vault), env=WORKERS, batch_chunks=60)
    wait_for(lambda: query(db, "SELECT 1 FROM ingest_runs WHERE status = 'running'"))
    code, out = run_cli("ingest", str(big_vault), "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_BUSY == 12 and err["code"] == "ingest_in_progress"
    assert f"pid {first.pid}" in err["message"] and "started 20" in err["message"] and "--wait" in err["message"]
    capfd.readouterr()
    code, out = run_cli("ingest", str(big_vault), "--wait", "--json")  # returns once the first has finished
    assert first.wait(timeout=120) == 0
    assert code == 0 and json.loads(out)["documents_skipped"] == 300
    assert "waiting for ingest run #" in capfd.readouterr().err
    check_consistent(db, big_vault)


_HOLD_INGEST_LOCK = """
import sys, localrag
store = localrag.Store.open(localrag.load_config())
store.run("SELECT set_config('application_name', :n, false)", n=localrag._ingest_session_name())
store.run(f"SET client_connection_check_interval = '{sys.argv[2]}'")
store.run("SELECT pg_advisory_lock(:k, hashtext(:v))", k=localrag.INGEST_LOCK_KEY, v=sys.argv[1])
print("locked", flush=True)
store.run("SELECT pg_sleep(60)")
"""


def _lock_holder(config, vault, check_interval: str) -> subprocess.Popen:
    """A process that takes the vault's ingest lock the way ingest does and then sits in a long statement (returned
    once its server session runs that statement: a kill before it would find the session idle, which ends at once)."""
    env = cli_env({"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    proc = subprocess.Popen([sys.executable, "-c", _HOLD_INGEST_LOCK, str(vault.resolve()), check_interval],
                            env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    wait_for(lambda: query(config, "SELECT count(*) FROM pg_stat_activity WHERE application_name = :n AND "
                                   "state = 'active' AND query LIKE '%pg_sleep%'",
                           n=localrag._ingest_session_name(proc.pid))[0][0])
    return proc


def test_a_killed_ingest_still_ending_its_statement_is_waited_for_not_called_busy(ingested, monkeypatch):
    """kill -9 leaves the vault's lock with the killed client's server session until that session notices, which
    a long statement delays (the kill -9 trials once hit it in the start-up ANALYZE).  The next ingest, without
    --wait, sees that the holder's process is gone and waits for its session to end instead of refusing; a live
    holder is still refused at once, and a dead one whose session outlasts INGEST_DEAD_HOLDER_S is refused with
    a message that says its process is gone."""
    config, vault, _ = ingested
    holder = _lock_holder(config, vault, "3s")
    try:
        with pytest.raises(localrag.IngestBusy, match=f"pid {holder.pid}, starting up.*--wait"):
            localrag.ingest(config, vault)
    finally:
        holder.kill()
        holder.wait()
    notes: list[str] = []
    started = time.monotonic()
    assert localrag.ingest(config, vault, notice=notes.append)["status"] == "success"
    assert notes == [f"another ingest (pid {holder.pid}, starting up) was killed; waiting for its database "
                     f"session to end ..."] and time.monotonic() - started < 10

    holder = _lock_holder(config, vault, "0")   # a session that does not watch its client: it sleeps on
    holder.kill()
    holder.wait()
    monkeypatch.setattr(localrag, "INGEST_DEAD_HOLDER_S", 1.0)
    try:
        with pytest.raises(localrag.IngestBusy, match="process is gone"):
            localrag.ingest(config, vault)
    finally:
        query(config, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = :n",
              n=localrag._ingest_session_name(holder.pid))


def test_ingest_sessions_watch_their_client(ingested):
    """What ingest sets on its session: the check that ends a killed client's statement, and the name that tells
    another ingest which process holds the lock."""
    config, _, _ = ingested
    with localrag.Store.open(config) as s:
        s.watch_client(localrag._ingest_session_name())
        assert s.run("SHOW client_connection_check_interval")[0][0] == "1s"
        name = s.run("SHOW application_name")[0][0]
    assert name == f"localrag ingest pid {os.getpid()} on {socket.gethostname()}"[:63]
    assert localrag._INGEST_APP_NAME.match(name).group(1) == str(os.getpid())


def test_search_during_reingest_sees_each_document_whole(db, tmp_path, monkeypatch):
    """Every note is rewritten from version A (6 sections) to version B (4 sections) and re-ingested in many small
    transactions while searches run: each search and each snapshot sees a note all-A or all-B, never a mix."""
    vault = tmp_path / "v"
    vault.mkdir()

    def write(version: str, sections: int) -> None:
        for n in range(40):
            text = f"# Note {n}\n" + "".join(f"## Part {s}\nshared marker zebracorn version{version} part {s} of "
                                            f"note {n}.\n\n" for s in range(sections))
            (vault / f"n{n:02d}.md").write_text(text, encoding="utf-8")

    write("A", 6)
    localrag.ingest(db, vault)
    write("B", 4)
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 4)
    done = threading.Event()
    errors = []

    def reingest():
        try:
            localrag.ingest(db, vault)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=reingest)
    thread.start()
    seen_versions, searches = set(), 0
    with localrag.Store.open(db) as s:
        while not done.is_set() or searches < 3:
            by_source: dict = {}
            for r in localrag.search(db, "zebracorn shared marker", top_k=20, store=s)["results"]:
                by_source.setdefault(r["source"], set()).add(r["content"].split("version")[1][0])
            assert all(len(v) == 1 for v in by_source.values()), by_source
            seen_versions.update(*by_source.values())
            for rel, versions, n in s.run("SELECT relative_path, array_agg(DISTINCT substring(content from "
                                          "'version(.)')), count(*) FROM chunks WHERE content LIKE '%version%' "
                                          "GROUP BY 1"):
                assert (versions, n) in ((["A"], 6), (["B"], 4)), (rel, versions, n)
            searches += 1
    thread.join()
    assert not errors and searches >= 3 and "B" in seen_versions
    assert query(db, "SELECT count(*) FROM chunks WHERE content LIKE '%versionA%'")[0][0] == 0


# --- one file never fails a batch; odd files are named, never opened or hung on ------------------------------------

ALIAS_BOMB = ("---\n" + "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
              + "".join(f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi"))
              + "---\n# Bomb\nthe body of the alias bomb note survives\n")


def test_odd_files_are_named_and_the_rest_indexed(db, vault):
    """The issue's inputs, each real: a YAML \\0 escape, NUL bytes, a lone-surrogate escape, a name that is not
    UTF-8, a symlink loop, a dangling symlink, a FIFO and a socket named *.md, an alias bomb, oversize
    frontmatter.  Run as a real process (a FIFO that is opened would hang it): exit 10 or 0, every other note
    indexed, each problem named once."""
    import socket as socketmod
    (vault / "nul-yaml.md").write_text('---\ntitle: "a\\0b"\ntags: ["x\\0y"]\n---\n# NUL yaml\nbody one\n')
    (vault / "nul-body.md").write_bytes(b"# NUL body\nbefore\x00after\n")
    (vault / "surrogate.md").write_text('---\ntitle: "bad \\ud800 escape"\n---\n# Surrogate\nbody\n')
    os.close(os.open(os.fsencode(str(vault)) + b"/caf\xe9 latin1 name.md", os.O_CREAT | os.O_WRONLY, 0o644))
    with open(os.fsencode(str(vault)) + b"/caf\xe9 latin1 name.md", "wb") as f:
        f.write("# Café\nnamed in latin-1 zebracorn\n".encode())
    (vault / "loop-a.md").symlink_to(vault / "loop-b.md")
    (vault / "loop-b.md").symlink_to(vault / "loop-a.md")
    (vault / "dangling.md").symlink_to(vault / "no-such-note.md")
    os.mkfifo(vault / "pipe.md")
    sock = socketmod.socket(socketmod.AF_UNIX)
    sock.bind(str(vault / "sock.md"))
    (vault / "bomb.md").write_text(ALIAS_BOMB)
    (vault / "big-frontmatter.md").write_text("---\nnotes: " + "y" * 70_000 + "\n---\n# Big\nbig body survives\n")
    try:
        proc = start_cli("ingest", str(vault), "--json")
        out, err = proc.communicate(timeout=120)
    finally:
        sock.close()
    assert proc.returncode in (0, localrag.EXIT_PARTIAL), err
    result = json.loads(out)
    assert result["status"] == "success"
    failed = {f["path"]: f["error"] for f in result["files_failed"]}
    warned = {w["path"]: w["warning"] for w in result["warnings"]}
    assert set(failed) <= {"surrogate.md"}  # the C YAML parser rejects the escape; the pure one gives U+FFFD
    assert warned["loop-a.md"] == warned["loop-b.md"] == "symlink loop; skipped"
    assert warned["dangling.md"].startswith("dangling symlink") and "no-such-note.md" in warned["dangling.md"]
    assert warned["pipe.md"] == "not a regular file (FIFO); skipped"
    assert warned["sock.md"] == "not a regular file (socket); skipped"
    assert "alias" in warned["bomb.md"] and "over the 65536-byte limit" in warned["big-frontmatter.md"]
    assert "not valid UTF-8" in warned["caf\\xe9 latin1 name.md"]
    for path in list(failed) + list(warned):  # printed once each
        assert err.count(path) == 1, (path, err)
    with localrag.Store.open(db) as s:
        rows = dict(s.run("SELECT relative_path, frontmatter::text FROM documents"))
        assert json.loads(rows["nul-yaml.md"]) == {"title": "ab", "tags": ["xy"]}
        assert s.run("SELECT content FROM chunks WHERE relative_path = 'nul-body.md'")[0][0].endswith("beforeafter")
        assert rows["bomb.md"] == "{}" and rows["big-frontmatter.md"] == "{}"
        assert s.run("SELECT count(*) FROM chunks WHERE content LIKE '%alias bomb note survives%' OR content "
                     "LIKE '%big body survives%'")[0][0] == 2
        assert "caf\\xe9 latin1 name.md" in rows
        n_md = 13 + 5  # the sample vault + the five readable notes above (surrogate.md may fail alone)
        assert len(rows) in (n_md, n_md + 1)
    # A rerun changes nothing: the escaped name maps to the same file.
    code, out = run_cli("ingest", str(vault), "--json")
    assert json.loads(out)["documents_added"] == 0 and json.loads(out)["documents_deleted"] == 0


def test_a_file_name_with_a_line_break_is_named_on_one_line(db, tmp_path, capfd):
    """A file named "new\\nline.md" (a line break is a legal name byte) split its failed: / warning: line in two, the
    second half reading as a line of its own.  Each is one line, the break shown as \\n; --json keeps the name."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "a.md").write_text("# A\nalpha\n")
    (vault / "bin\nary.md").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" * 64)
    (vault / "dangling\nlink.md").symlink_to(vault / "gone\nnote.md")
    code, out = run_cli("ingest", str(vault), "--json")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_PARTIAL
    assert [f["path"] for f in json.loads(out)["files_failed"]] == ["bin\nary.md"]
    assert "failed: bin\\nary.md: binary data, not text (" in err.splitlines()[-2]
    assert err.splitlines()[-1] == (f"warning: dangling\\nlink.md: dangling symlink (its target {vault}/gone\\nnote.md "
                                    f"does not exist); skipped")


def test_frontmatter_bomb_is_bounded_in_time_and_size():
    doc = localrag.parse_markdown(ALIAS_BOMB, "bomb.md")
    assert doc.frontmatter == {} and "alias" in doc.warnings[0] and "survives" in doc.body


def test_fifo_swapped_in_after_the_scan_is_not_opened(db, tmp_path):
    """_read opens without blocking and checks the file type: a FIFO appearing between scan and read fails alone."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "a.md").write_text("# A\nalpha\n")
    (vault / "b.md").write_text("# B\nbeta\n")
    localrag.scan_vault(vault)
    (vault / "b.md").unlink()
    os.mkfifo(vault / "b.md")
    config = db
    with localrag.Store.open(config) as s:
        s.run("INSERT INTO ingest_runs (vault_path, embedding_provider, embedding_model, embedding_dim, status) "
              "VALUES ('x', 'fake', 'm', 1024, 'success')")
        job = localrag._IngestRun(config, s, vault.resolve(), str(vault.resolve()), 1, None, None)
        assert job._read("b.md", vault / "b.md", None, []) is None
    assert job.failed == [{"path": "b.md", "error": "not a regular file any more; skipped"}]


def test_the_word_null_stays_text_in_every_array_sent(db, tmp_path):
    """pg8000 quotes only "NULL" in an array literal and Postgres reads null in any case as NULL: a note whose
    whole text is `null`, the keyword term `null` and the tag `Null` must each stay text (found by the kill -9
    trials' keyword check: the term's document frequency was 0)."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "bare.md").write_text("null")
    (vault / "pointer.md").write_text("# Pointers\nA null pointer check for zebracorn. #Null\n")
    (vault / "other.md").write_text("# Other\nNothing to see about zebracorn here.\n")
    result = localrag.ingest(db, vault)
    assert result["status"] == "success" and result["documents_added"] == 3 and not result["files_failed"]
    assert query(db, "SELECT body FROM documents WHERE relative_path = 'bare.md'")[0][0] == "null"
    with localrag.Store.open(db) as s:
        n, _, df = s.keyword_stats(["null", "NULL", "zebracorn"])
    assert df == {"null": 2, "NULL": 0, "zebracorn": 2} and n == 3
    hits = localrag.search(db, "null pointer", retrieval="keyword")["results"]
    assert hits[0]["source"] == "pointer.md"
    scoped = localrag.search(db, "zebracorn", tag="Null")["results"]
    assert [r["source"] for r in scoped] == ["pointer.md"]
    check_consistent(db, vault)


def test_the_keyword_check_catches_a_drifted_index(ingested):
    """check_consistent's keyword part is not vacuous: a stray posting, a lost one, a wrong length and a missing
    chunk row are each caught."""
    from robust_util import check_keywords_rebuilt
    config, _, _ = ingested
    check_keywords_rebuilt(config)
    breakages = [
        ("INSERT INTO keyword_postings SELECT chunk_id, 'zzstray', 1, dl FROM keyword_postings LIMIT 1",
         "not in a rebuild"),
        ("DELETE FROM keyword_postings WHERE ctid = (SELECT min(ctid) FROM keyword_postings)", "missing"),
        ("UPDATE keyword_chunks SET length = length + 1 WHERE chunk_id = (SELECT min(chunk_id) FROM keyword_chunks)",
         "keyword_chunks rows differ"),
        ("DELETE FROM keyword_chunks WHERE chunk_id = (SELECT min(chunk_id) FROM keyword_chunks)",
         "chunks without a row"),
    ]
    for sql, needle in breakages:
        with localrag.Store.open(config) as s:
            s.run("BEGIN")
            s.run(sql)
            # the check reads through other connections: commit, check, then undo by rebuilding the keyword index
            s.run("COMMIT")
        with pytest.raises(AssertionError, match=needle):
            check_keywords_rebuilt(config)
        query(config, "TRUNCATE keyword_chunks")
        with localrag.Store.open(config) as s:
            s.run("DELETE FROM keyword_postings")
        localrag.ingest(config, ingested[1])      # backfills the keyword rows of every chunk
        check_keywords_rebuilt(config)


# --- mass delete guard ---------------------------------------------------------------------------------------------

def test_empty_or_unmounted_vault_is_refused_and_nothing_changes(ingested, tmp_path):
    config, vault, first = ingested
    before = counts(config)
    n_runs = len(runs(config))
    for child in list(vault.iterdir()):  # what an unmounted mount point looks like: an empty folder
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    code, out = run_cli("ingest", str(vault), "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_MASS_DELETE == 14 and err["code"] == "mass_delete_refused"
    assert "holds no .md files" in err["message"] and "--allow-delete" in err["message"]
    assert counts(config) == before and len(runs(config)) == n_runs
    code, out = run_cli("ingest", str(vault), "--allow-delete", "--json")
    assert code == 0 and json.loads(out)["documents_deleted"] == first["documents_added"]
    assert counts(config)["documents"] == 0


def test_excluding_every_note_is_refused_as_the_patterns_doing(ingested):
    """`--exclude '**/*.md'` on an indexed vault said it "holds no .md files; is the folder unmounted or the wrong
    path?": the notes are there, the patterns leave them out."""
    config, vault, _first = ingested
    before = counts(config)
    code, out = run_cli("ingest", str(vault), "--exclude", "**/*.md", "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_MASS_DELETE and "excluded" in err["message"] and "--exclude" in err["message"]
    assert "unmounted" not in err["message"] and counts(config) == before


def test_losing_more_than_half_is_refused_a_few_is_not(ingested):
    config, vault, first = ingested
    notes = sorted(p for p in vault.rglob("*.md") if ".obsidian" not in p.parts)
    notes[0].unlink()
    assert localrag.ingest(config, vault)["documents_deleted"] == 1
    for p in notes[1:9]:
        p.unlink()
    with pytest.raises(localrag.MassDeleteRefused, match=r"lacks 8 of the 12 indexed notes"):
        localrag.ingest(config, vault)
    assert localrag.ingest(config, vault, allow_delete=True)["documents_deleted"] == 8


def test_runs_record_counts_per_batch(db, vault, monkeypatch):
    """Each batch's transaction also updates its run row: what a killed run committed is visible."""
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 5)
    seen = []

    def watch(phase, done, total):
        if phase == "parse+embed" and done == 7:
            seen.append(query(db, "SELECT documents_added, chunks_written FROM ingest_runs "
                                  "WHERE status = 'running'")[0])

    localrag.ingest(db, vault, progress=watch)
    assert seen and 0 < seen[0][0] < 8 and seen[0][1] > 0


# --- crash consistency, proved: kill -9 at 20 random moments of real runs on a real corpus (slow) -------------------

@pytest.mark.slow
def test_kill_9_at_twenty_random_points_always_recovers(db, tmp_path):
    """Each trial changes the vault (edits, deletions, restorations) and drops some vectors (so the backfill phase
    runs), starts `localrag ingest` with worker processes and small batches, and kill -9s it at a random moment
    within its expected duration.  After each: no worker left, the next ingest completes, and the index passes
    check_consistent (every file its document, every document its chunks, every chunk its vector, no duplicates,
    no run left running).  Prints the figures the README reports."""
    import random
    import shutil as sh
    from conftest import CORPUS
    if not CORPUS.is_dir():
        pytest.skip("the shared Obsidian Help corpus is not beside the repo")
    rng = random.Random(10)
    vault, stash = tmp_path / "help", tmp_path / "stash"
    stash.mkdir()
    for note in sorted(CORPUS.rglob("*.md"))[:400]:
        dest = vault / note.relative_to(CORPUS)
        dest.parent.mkdir(parents=True, exist_ok=True)
        sh.copy(note, dest)
    started = time.monotonic()
    assert run_cli("ingest", str(vault))[0] == 0
    full = time.monotonic() - started
    trials, attempts, leftovers, reruns, phases = 0, 0, 0, [], collections.Counter()
    upper = full
    while trials < 20:
        attempts += 1
        assert attempts <= 60, "could not land 20 kills inside a run"
        notes = sorted(p for p in vault.rglob("*.md"))
        for p in rng.sample(notes, rng.randint(20, 250)):  # edits: updates
            with p.open("a", encoding="utf-8") as f:
                f.write(f"\n\nedit {attempts} zebracorn {rng.random()}\n")
        for p in rng.sample(notes, rng.randint(0, 40)):  # deletions (well under half)
            target = stash / f"{attempts}-{p.name}"
            p.rename(target)
            target.with_suffix(".from").write_text(str(p))
        for marker in list(stash.glob("*.from"))[:rng.randint(0, 30)]:  # restorations: additions
            note = marker.with_suffix(".md")
            Path(marker.read_text()).parent.mkdir(parents=True, exist_ok=True)
            note.rename(marker.read_text())
            marker.unlink()
        query(db, "DELETE FROM embeddings WHERE chunk_id IN (SELECT id FROM chunks WHERE document_id IN "
                  "(SELECT id FROM documents ORDER BY random() LIMIT :n))", n=rng.randint(0, 40))
        last_run = query(db, "SELECT coalesce(max(id), 0) FROM ingest_runs")[0][0]
        proc = start_cli("ingest", str(vault), env=WORKERS, batch_chunks=50)
        time.sleep(rng.uniform(0.05, upper))
        workers = children(proc.pid)
        proc.kill()
        proc.communicate()
        leftovers += len(wait_gone(workers, 5))
        if proc.returncode == -signal.SIGKILL:
            trials += 1
            row = query(db, "SELECT documents_added + documents_updated + documents_deleted, embeddings_written "
                            "FROM ingest_runs WHERE id > :i AND status = 'running'", i=last_run)
            phases["start-up: scan, lock, diff" if not row else "first batch" if row[0] == [0, 0]
                   else "after committed batches"] += 1
        else:  # the run finished first: still checked below, not counted; aim earlier next time
            upper = max(0.3, upper * 0.7)
        t0 = time.monotonic()
        code, out = run_cli("ingest", str(vault), "--json", "--allow-delete")
        reruns.append(time.monotonic() - t0)
        assert code == 0, out
        check_consistent(db, vault)
    print(f"\nkill -9 trials: {trials}/{trials} killed mid-run were consistent and recovered by the next run "
          f"({attempts - trials} runs finished before their kill, also checked); phases hit: {dict(phases)}; "
          f"{leftovers} processes left; full ingest {full:.1f}s; recovery run median "
          f"{sorted(reruns)[len(reruns) // 2]:.1f}s, max {max(reruns):.1f}s")
    assert leftovers == 0


@pytest.mark.slow
def test_embedded_postgres_killed_mid_ingest_next_command_restarts_it(tmp_path, monkeypatch):
    """kill -9 of the embedded server's postmaster while an ingest writes: the ingest fails with a database code
    (its workers end with it), and the next `localrag ingest` restarts the server and completes."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    home = tmp_path / "home"
    env = {"DATABASE_URL": "", "LOCALRAG_HOME": str(home), **WORKERS}
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "EMBEDDING_PROVIDER": "fake",
                                        "LLM_PROVIDER": "fake"}, cwd=tmp_path)
    vault = make_vault(tmp_path / "v", 400)
    init = start_cli("db", "init", env=env)
    assert init.wait(timeout=180) == 0, init.communicate()
    try:
        proc = start_cli("ingest", str(vault), env=env, batch_chunks=60)
        wait_for(lambda: _running_with_commits(cfg), timeout=120)
        workers = children(proc.pid)
        postmaster = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == localrag.EXIT_DB, err
        assert wait_gone(workers) == []
        again = start_cli("ingest", str(vault), "--json", env=env)
        out, err = again.communicate(timeout=300)
        assert again.returncode == 0, err
        check_consistent(cfg, vault)
    finally:
        stop = start_cli("db", "stop", env=env)
        stop.communicate(timeout=120)


def test_sigterm_while_waiting_for_the_lock(ingested):
    """Interrupting `ingest --wait` while it waits: exit 143 at once, no run row of its own, the holder unharmed."""
    config, vault, _ = ingested
    vault_key = str(vault.resolve())
    with localrag.Store.open(config) as holder:
        holder.run("SELECT pg_advisory_lock(:k, hashtext(:v))", k=localrag.INGEST_LOCK_KEY, v=vault_key)
        n_runs = len(runs(config))
        proc = start_cli("ingest", str(vault), "--wait")
        waiter = localrag._ingest_session_name(proc.pid)

        def last_query() -> tuple:
            rows = query(config, "SELECT query, query_start FROM pg_stat_activity WHERE application_name = :n",
                         n=waiter)
            return tuple(rows[0]) if rows else ("", None)

        # The "waiting for" notice follows the poll's last query (who holds the lock); once any later query has
        # started, it is out, so the signal lands while the process waits.
        def holder_named():
            sql, started = last_query()
            return started if "FROM pg_locks l JOIN" in sql else None

        named_at = wait_for(holder_named)
        wait_for(lambda: last_query()[1] > named_at)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 143 and "waiting for another ingest" in err and "interrupted (SIGTERM)" in err
        assert len(runs(config)) == n_runs
    assert localrag.ingest(config, vault)["status"] == "success"


@pytest.fixture(autouse=True)
def _no_process_left_behind():
    yield
    from robust_util import kill_started
    kill_started()


# --- real vaults: skip accounting, ignore files, other formats, aliases, links ----------------------------------

def _all_files(root):
    return sum(len(files) + sum(1 for d in dirs if os.path.islink(os.path.join(here, d)))
               for here, dirs, files in os.walk(root))


def accounted(result):
    return (result["documents_added"] + result["documents_updated"] + result["documents_skipped"]
            + result["documents_backfilled"] + len(result["files_failed"]) + sum(result["skipped_by_reason"].values()))


def test_every_file_is_accounted_for_by_reason(db, vault, monkeypatch):
    monkeypatch.setenv("LOCALRAG_MAX_FILE_MB", "1")
    (vault / ".trash").mkdir()  # hidden: these two, .hidden.md, .localragignore, .obsidian/app.json
    (vault / ".trash" / "old.md").write_text("# old\n")
    (vault / ".trash" / "older.md").write_text("# older\n")
    (vault / ".hidden.md").write_text("# hidden\n")
    (vault / "pic.png").write_bytes(b"\x89PNG\r\n")
    (vault / "drafts").mkdir()
    (vault / "drafts" / "a.md").write_text("# draft a\n")
    (vault / "drafts" / "keep.md").write_text("# keep\n")
    (vault / "private.md").write_text("# private\nsecret zorbulon\n")
    (vault / ".localragignore").write_text("# comment\ndrafts/\nprivate.md\n")
    (vault / "big.md").write_text("x" * 1_200_000)
    (vault / "notes.txt").write_text("A plain text note about quuxotic widgets.\n\nSecond paragraph.\n")
    (vault / "elsewhere").symlink_to(vault.parent)
    code, out = run_cli("ingest", str(vault), "--json", "--exclude", "*.tmp", "--exclude", "hr/")
    (vault / "scratch.tmp").write_text("tmp")
    result = json.loads(out)
    assert result["files_failed"] == [] and code == localrag.EXIT_PARTIAL  # big.md was not read
    assert result["skipped_by_reason"] == {"hidden": 5, "excluded": 4, "unsupported_extension": 1, "too_large": 1,
                                           "symlink": 1}
    assert result["files_found"] == _all_files(vault) - 1 == accounted(result)  # scratch.tmp came after
    with localrag.Store.open(db) as s:
        paths = {r[0] for r in s.run("SELECT relative_path FROM documents")}
        meta = s.run("SELECT metadata FROM ingest_runs ORDER BY id DESC LIMIT 1")[0][0]
    assert "notes.txt" in paths and not {p for p in paths if p.startswith(("drafts/", "hr/", "private"))}
    assert meta["skipped_by_reason"] == result["skipped_by_reason"] and meta["files_found"] == result["files_found"]
    second = localrag.ingest(localrag.load_config(), vault, excludes=["*.tmp", "hr/"])  # with the 1 MB limit
    assert second["documents_skipped"] == result["documents_added"] and accounted(second) == _all_files(vault)


def test_newly_ignored_files_leave_the_index(ingested):
    config, vault, first = ingested
    (vault / ".localragignore").write_text("hr/\n")
    result = localrag.ingest(config, vault)
    assert result["documents_deleted"] == 1 and result["skipped_by_reason"]["excluded"] == 1


@pytest.mark.parametrize("line, problem", [("notes/[abc", "never closed"), ("trailing\\", "backslash"),
                                           ("!", "empty")])
def test_bad_ignore_pattern_is_a_clear_error_and_changes_nothing(ingested, line, problem):
    config, vault, _ = ingested
    before = counts(config)
    (vault / ".localragignore").write_text(f"# ok\n*.tmp\n{line}\n")
    code, out = run_cli("ingest", str(vault), "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_USAGE and err["code"] == "ignore_pattern_invalid"
    assert ".localragignore line 3" in err["message"] and problem in err["message"]
    assert counts(config) == before
    code, out = run_cli("ingest", str(vault), "--json", "--exclude", "[x")
    assert json.loads(out)["error"]["code"] == "ignore_pattern_invalid" and "--exclude #1" in json.loads(out)["error"]["message"]


def test_txt_canvas_excalidraw_and_pdf_are_indexed(db, tmp_path):
    from conftest import make_pdf
    vault = tmp_path / "mixed"
    vault.mkdir()
    (vault / "log.txt").write_text("Quarterly zorbulon review.\n\nThe zorbulon budget is 40k.\n")
    (vault / "board.canvas").write_text(json.dumps({"nodes": [
        {"id": "card-7", "type": "text", "text": "Launch checklist: quuxotic flags on", "x": 0, "y": 0,
         "width": 1, "height": 1},
        {"id": "w", "type": "widget", "x": 0, "y": 0, "width": 1, "height": 1}], "edges": []}))
    (vault / "Arch.excalidraw.md").write_text("---\nexcalidraw-plugin: parsed\n---\n==⚠ Switch ⚠==\n# Text Elements\n"
                                              "Frobnitz gateway ^x1\n\n%%\n# Drawing\n```json\n{\"a\": 1}\n```\n%%\n")
    (vault / "Empty.excalidraw.md").write_text("---\nexcalidraw-plugin: parsed\n---\n%%\n# Drawing\n%%\n")
    (vault / "manual.pdf").write_bytes(make_pdf(["Intro page", "", "Torque spec: 42 Nm for the flanglewidget"]))
    (vault / "scan.pdf").write_bytes(make_pdf(["", ""]))
    (vault / "truncated.pdf").write_bytes(make_pdf(["Some text here"])[:150])
    (vault / "renamed.pdf").write_bytes(b"PK\x03\x04" + b"\x00" * 200)
    result = localrag.ingest(db, vault)
    failed = {f["path"]: f["error"] for f in result["files_failed"]}
    assert set(failed) == {"scan.pdf", "truncated.pdf", "renamed.pdf"}
    assert "scanned" in failed["scan.pdf"] and "ZIP" in failed["renamed.pdf"] and "PDF" in failed["truncated.pdf"]
    warned = {w["path"]: w["warning"] for w in result["warnings"]}
    assert "widget" in warned["board.canvas"] and "Text Elements" in warned["Empty.excalidraw.md"]
    assert result["documents_added"] == 5
    hit = localrag.search(db, "flanglewidget torque spec")["results"][0]
    assert hit["source"] == "manual.pdf" and hit["heading"] == "page 3"
    assert localrag.search(db, "quuxotic launch checklist")["results"][0]["heading_path"] == [
        "Launch checklist: quuxotic flags on"]
    assert localrag.search(db, "zorbulon budget")["results"][0]["source"] == "log.txt"
    top = localrag.search(db, "frobnitz gateway")["results"][0]
    assert top["source"] == "Arch.excalidraw.md" and "Switch" not in top["content"] and "^x1" not in top["content"]
    answer = localrag.ask(db, "What is the torque spec for the flanglewidget?")
    cited = answer["citations"][0]
    assert (cited["source"], cited["heading"]) == ("manual.pdf", "page 3") and answer["mode"] == "rag"
    assert cited["line_start"] is None  # a PDF has pages, not file lines
    # the cited page opens: the stored text keeps no page marks, its chunks say where each page starts
    page = localrag.get_note(db, "manual.pdf", "page 3")
    assert page["content"].startswith("Torque spec: 42 Nm") and page["line_start"] is None
    assert [s["heading_path"] for s in localrag.get_note(db, "manual.pdf")["sections"]] == [["page 1"], ["page 3"]]
    assert localrag.get_note(db, "manual.pdf", "page 1")["content"] == "Intro page"
    card = localrag.get_note(db, "board.canvas", "Launch checklist: quuxotic flags on")
    assert "quuxotic" in card["content"] and card["line_start"] is None


def test_pdf_without_pypdf_is_counted_with_the_install_hint(db, tmp_path):
    """Run in a child interpreter where pypdf cannot be imported (a meta-path blocker), as in a pyz without it."""
    import subprocess
    import sys
    from conftest import make_pdf
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "a.pdf").write_bytes(make_pdf(["text"]))
    (vault / "n.md").write_text("# n\nbody\n")
    code = ("import sys, json\nclass Block:\n    def find_spec(self, name, *a):\n"
            "        if name == 'pypdf' or name.startswith('pypdf.'): raise ImportError('blocked')\n"
            "sys.meta_path.insert(0, Block())\nimport localrag\n"
            "sys.exit(localrag.main(['ingest', sys.argv[1], '--json']))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(vault)], capture_output=True, text=True, timeout=120)
    result = json.loads(proc.stdout)
    assert "skipped_by_reason" in result, proc.stderr
    assert result["skipped_by_reason"] == {"pdf_extra_missing": 1} and result["documents_added"] == 1
    assert "localrag[pdf]" in proc.stderr


ALIAS_VAULT = {
    "people/Dana Li.md": "---\naliases: [Dana, DL]\n---\n# Dana Li\nDana leads the platform team and owns on-call.\n",
    "projects/Falcon.md": "---\naliases: PF-7\ntitle: Project Falcon\n---\n# Overview\nA migration of the billing "
                          "service to the new cluster, due in Q3. Owner: [[Dana]]. See [[people/Dana Li#Contact^c1|her]]"
                          " and [[../../outside]] and [[Nowhere]].\n",
    "projects/Heron.md": "# Overview\nHeron is the search rewrite; it reuses the cluster from the billing work.\n",
    "projects/Kestrel.md": "---\naliases: 5\n---\n# Overview\nKestrel retires the old cluster.\n",
    "notes/Standup.md": "# Standup\nWe talked about the cluster and the billing service.\n",
}


@pytest.fixture
def alias_vault(db, tmp_path):
    root = tmp_path / "aliases"
    for rel, text in ALIAS_VAULT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    result = localrag.ingest(db, root)
    return db, root, result


@pytest.mark.parametrize("question, source", [
    ("What is PF-7?", "projects/Falcon.md"),
    ("PF-7 deadline", "projects/Falcon.md"),
    ("Project Falcon", "projects/Falcon.md"),
    ("Who is DL?", "people/Dana Li.md"),
    ("What does Kestrel do?", "projects/Kestrel.md"),
])
def test_alias_questions_find_the_aliased_note_first(alias_vault, question, source):
    config, _, _ = alias_vault
    top = localrag.search(config, question)["results"][0]
    assert top["source"] == source
    assert top["title"] and isinstance(top["aliases"], list)


def test_aliases_and_title_ride_on_every_chunk_and_in_results(alias_vault):
    config, _, result = alias_vault
    assert any("aliases: 5" in w["warning"] for w in result["warnings"] if w["path"] == "projects/Kestrel.md")
    top = localrag.search(config, "What is PF-7?")["results"][0]
    assert top["title"] == "Project Falcon" and top["aliases"] == ["PF-7"]
    with localrag.Store.open(config) as s:
        assert s.run("SELECT metadata->'aliases' FROM chunks WHERE relative_path = 'people/Dana Li.md'")[0][0] == \
            ["Dana", "DL"]


def test_wikilinks_are_stored_resolved(alias_vault):
    config, root, result = alias_vault
    with localrag.Store.open(config) as s:
        rows = s.run("SELECT l.target, l.heading, l.block_id, l.alias, l.resolved_path, l.target_exists FROM links l "
                     "JOIN documents d ON d.id = l.document_id WHERE d.relative_path = 'projects/Falcon.md' ORDER BY l.id")
    assert rows == [["Dana", "", "", "", "people/Dana Li.md", True],
                    ["people/Dana Li", "Contact", "c1", "her", "people/Dana Li.md", True],
                    ["../../outside", "", "", "", None, False],
                    ["Nowhere", "", "", "", "Nowhere.md", False]]
    assert result["links"] == {"resolved": 2, "unresolved": 2}
    (root / "Nowhere.md").write_text("# now it exists\n")
    localrag.ingest(config, root)
    with localrag.Store.open(config) as s:
        assert s.run("SELECT target_exists FROM links WHERE target = 'Nowhere'")[0][0] is True


def test_markdown_format_links_are_stored_and_resolved_as_obsidian_does(db, tmp_path):
    """Internal links in Markdown format (`[text](Note%20name.md)`, Obsidian's format with "Use [[Wikilinks]]" off)
    had been no links: the links table, the run's link counts and the chunks' links missed them.  They resolve as
    Obsidian resolves them (looked up across the vault after decoding, as a wikilink is; `../` relative), in the
    order written among the wikilinks; URLs are none."""
    root = tmp_path / "mdlinks"
    notes = {
        "Sub/My Note.md": "# My Note\n## Part Two\nText.\n",
        "Sub/md2.md": "From Sub: [x](My%20Note.md) and [z](Sub/My%20Note.md#Part%20Two).\n",
        "md1.md": ("# Root\nSee [y](My%20Note.md), [[Sub/md2]], [sp](<Sub/My Note.md#^blk>), ![pic](img/p%201.png)"
                   ", [up](../md1.md), [here](#Root), [web](https://obsidian.md) and [ref][r].\n\n"
                   "[r]: Nowhere%20Yet.md\n"),
        "img/p 1.png": b"\x89PNG\r\n",
    }
    for rel, text in notes.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(text if isinstance(text, bytes) else text.encode())
    result = localrag.ingest(db, root)
    with localrag.Store.open(db) as s:
        rows = s.run("SELECT d.relative_path, l.target, l.heading, l.block_id, l.alias, l.embed, l.resolved_path, "
                     "l.target_exists FROM links l JOIN documents d ON d.id = l.document_id "
                     "ORDER BY d.relative_path, l.id")
        chunk_links = s.run("SELECT wikilinks FROM chunks WHERE relative_path = 'md1.md'")[0][0]
    assert rows == [
        ["Sub/md2.md", "My Note.md", "", "", "x", False, "Sub/My Note.md", True],
        ["Sub/md2.md", "Sub/My Note.md", "Part Two", "", "z", False, "Sub/My Note.md", True],
        ["md1.md", "My Note.md", "", "", "y", False, "Sub/My Note.md", True],
        ["md1.md", "Sub/md2", "", "", "", False, "Sub/md2.md", True],
        ["md1.md", "Sub/My Note.md", "", "blk", "sp", False, "Sub/My Note.md", True],
        ["md1.md", "img/p 1.png", "", "", "pic", True, "img/p 1.png", True],
        ["md1.md", "../md1.md", "", "", "up", False, None, False],
        ["md1.md", "", "Root", "", "here", False, "md1.md", True],
        ["md1.md", "Nowhere Yet.md", "", "", "ref", False, "Nowhere Yet.md", False]]
    assert result["links"] == {"resolved": 7, "unresolved": 2}
    assert chunk_links == ["My Note.md", "Sub/md2", "Sub/My Note.md", "img/p 1.png", "../md1.md", "Nowhere Yet.md"]


def test_block_ids_recorded_in_chunk_metadata(db, tmp_path):
    root = tmp_path / "b"
    root.mkdir()
    (root / "n.md").write_text("# N\nA claim. ^claim-1\n")
    localrag.ingest(db, root)
    with localrag.Store.open(db) as s:
        content, meta = s.run("SELECT content, metadata FROM chunks")[0]
    assert "^claim-1" not in content and meta["block_ids"] == ["claim-1"]


def test_interrupt_marks_the_run_failed_and_says_what_was_done(db, vault):
    calls = []

    def interrupt(phase, done, total):
        calls.append(phase)
        if phase == "parse+embed" and done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        localrag.ingest(db, vault, progress=interrupt)
    partial = info.value.partial
    assert partial["status"] == "failed" and partial["error_summary"] == (
        "interrupted (SIGINT) in the parse+embed phase: 5 of 13 files read; 0 written and committed, 5 read but not "
        "committed")
    assert partial["stopped_at"] == {"phase": "parse+embed", "files_read": 5, "files_total": 13,
                                     "files_uncommitted": 5, "files_unread": 8}
    assert runs(db)[-1][1] == "failed"
    assert localrag.ingest(db, vault)["status"] == "success"


@pytest.mark.slow
def test_whole_obsidian_help_corpus_is_accounted_for(db):
    """Every file of the Obsidian Help vault (all languages) is added, unchanged, failed or skipped for a reason."""
    from conftest import CORPUS
    if not CORPUS.is_dir():
        pytest.skip("the shared Obsidian Help corpus is not beside the repo")
    found = _all_files(CORPUS)
    first = localrag.ingest(db, CORPUS)
    assert first["files_found"] == found == accounted(first) and first["documents_added"] > 6000
    # Links between notes resolve (the corpus ships without its images, so links to attachments do not)
    with localrag.Store.open(db) as s:
        resolved, note_links = s.run("SELECT count(*) FILTER (WHERE target_exists), count(*) FROM links "
                                     "WHERE target !~ '[.][A-Za-z0-9]+$'")[0]
    assert resolved > 0.99 * note_links > 50000
    second = localrag.ingest(db, CORPUS)
    assert second["files_found"] == found == accounted(second)
    assert second["documents_skipped"] == first["documents_added"]
    print(f"\ncorpus: {found} files; first run {first['documents_added']} added, {len(first['files_failed'])} failed, "
          f"skipped {first['skipped_by_reason']}, links {first['links']} (between notes {resolved}/{note_links}), "
          f"{first['duration_s']} s; "
          f"rerun {second['documents_skipped']} unchanged in {second['duration_s']} s")


def test_each_long_step_names_itself_and_the_run_says_where_its_time_went(db, tmp_path):
    """Issue 13: the opening query (diff), the deletions and the statistics refresh after a bulk change (analyze)
    each show their phase before they start, so a slow one is not a silent stall behind the last file count; the
    run's metadata gives the seconds per step (phases_s)."""
    notes = tmp_path / "bulk"
    notes.mkdir()
    for n in range(130):   # 130 notes x 5 sections: over BULK_CHANGE_ROWS chunk + keyword rows
        (notes / f"note {n}.md").write_text(f"# Note {n}\n\n" + "".join(
            f"## Part {k}\n\nSection {k} of note {n} talks about topic{n}x{k} at some length.\n\n" for k in range(5)))
    phases = []
    result = localrag.ingest(db, notes, progress=lambda phase, done, total: phases.append(phase))
    assert result["chunks_written"] + result["keyword_chunks_written"] > localrag.BULK_CHANGE_ROWS
    steps = [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    # an opening "analyze" may come before "diff": tables that a previous load left without statistics
    opening = steps[2:4] if steps[1:2] == ["analyze"] else steps[1:3]
    assert steps[0] == "scan" and opening == ["diff", "parse+embed"] and steps[-1] == "analyze" and "write" in steps
    assert set(result["phases_s"]) <= set(localrag.INGEST_PHASES)
    assert {"scan", "read", "parse", "rows", "copy_chunks", "analyze"} <= set(result["phases_s"])
    stored = query(db, "SELECT metadata->'phases_s' FROM ingest_runs WHERE id = :i", i=result["id"])[0][0]
    assert stored == result["phases_s"]
    assert set(result["cpu_s"]) == {"this_process", "workers"} and min(result["cpu_s"].values()) >= 0
    for path in sorted(notes.iterdir())[:10]:
        path.unlink()
    phases.clear()
    again = localrag.ingest(db, notes, progress=lambda phase, done, total: phases.append(phase))
    assert again["documents_deleted"] == 10 and "delete" in phases and "analyze" not in phases


def test_a_fifo_named_like_a_note_is_skipped_by_name_and_the_run_succeeds(db, tmp_path):
    """A FIFO made ingest exit 10 with files_failed empty (the reason only as `unreadable`): it is skipped as
    not_regular_file, like a dangling symlink, and the run exits 0."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "a.md").write_text("# A\nalpha\n")
    os.mkfifo(vault / "pipe.md")
    (vault / "dangling.md").symlink_to(vault / "gone.md")
    proc = start_cli("ingest", str(vault), "--json")
    out, err = proc.communicate(timeout=120)
    result = json.loads(out)
    assert proc.returncode == 0, err
    assert result["skipped_by_reason"] == {"not_regular_file": 1, "symlink": 1} and result["files_failed"] == []
    assert {"path": "pipe.md", "warning": "not a regular file (FIFO); skipped"} in result["warnings"]
    assert result["documents_added"] == 1 and result["files_found"] == 3


def test_a_server_crash_discards_the_statistics_and_the_next_ingest_analyzes_first():
    """kill -9 of the embedded postmaster: crash recovery resets the statistics counters (n_live_tup and
    n_mod_since_analyze read 0) while reltuples stays as it was, so the check for unanalyzed tables saw nothing
    and, after a crash mid-load, the next ingest's diff query ran for minutes.  Counters that know nothing of a
    table whose file holds rows now count as a crash: the next ingest analyzes first (its `analyze` phase before
    `diff`), and only once."""
    import tempfile

    import psutil
    base = Path(tempfile.mkdtemp(prefix="lr-"))     # not pytest's tmp: the server runs as `pgserver` under root
    home = base / "h"
    vault = make_vault(base / "v", 60)
    cfg = localrag.load_config(environ={"LOCALRAG_HOME": str(home), "HOME": str(base)}, cwd=base)

    def opening(result_phases: list) -> list:
        steps = [p for i, p in enumerate(result_phases) if i == 0 or result_phases[i - 1] != p]
        return steps[:steps.index("diff") + 1]

    try:
        phases: list = []
        localrag.ingest(cfg, vault)
        postmaster = int((home / "pgdata" / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)
        psutil.Process(postmaster).wait(30)
        with localrag.Store.open(cfg) as s:     # started again: crash recovery discarded the counters
            counters = s.run("SELECT n_live_tup, n_mod_since_analyze FROM pg_stat_user_tables WHERE relname IN "
                             "('documents', 'chunks')")
            assert counters == [[0, 0], [0, 0]]   # what hid the crash from the old test
        (vault / "folder0" / "note 0000.md").write_text("# Changed\n\nNew text after the crash.\n", encoding="utf-8")
        again = localrag.ingest(cfg, vault, progress=lambda phase, done, total: phases.append(phase))
        assert again["status"] == "success" and again["documents_updated"] == 1
        assert opening(phases) == ["scan", "analyze", "diff"]
        phases.clear()
        localrag.ingest(cfg, vault, progress=lambda phase, done, total: phases.append(phase))
        assert opening(phases) == ["scan", "diff"]
    finally:
        localrag.stop_embedded(cfg)
        shutil.rmtree(base, ignore_errors=True)


# --- a first bulk load builds the keyword index after its rows (issue 13) -----------------------------------------

def _keyword_state(config) -> tuple:
    with localrag.Store.open(config) as s:
        return (s.run("SELECT c.relative_path, c.chunk_index, p.term, p.tf, p.dl FROM keyword_postings p "
                      "JOIN chunks c ON c.id = p.chunk_id ORDER BY 1, 2, 3"),
                s.run("SELECT sum(chunks), sum(total_length) FROM keyword_stats"),
                s.run("SELECT to_regclass('idx_keyword_postings_term') IS NOT NULL")[0][0])


def test_a_first_bulk_load_builds_the_keyword_index_after_and_stores_the_same(db, vault, monkeypatch):
    monkeypatch.setattr(localrag, "KEYWORD_BULK_LOAD_MIN_FILES", 10 ** 9)
    localrag.ingest(db, vault)
    maintained = _keyword_state(db)
    reset_database(db)
    monkeypatch.setattr(localrag, "KEYWORD_BULK_LOAD_MIN_FILES", 1)
    dropped = []
    monkeypatch.setattr(localrag.Store, "drop_keyword_index",
                        lambda self, drop=localrag.Store.drop_keyword_index: (dropped.append(1), drop(self)))
    phases = []
    result = localrag.ingest(db, vault, progress=lambda phase, done, total: phases.append(phase))
    assert result["status"] == "success" and dropped and "keyword_index" in result["phases_s"]
    assert phases.index("index") > phases.index("write")   # the build names itself: no silent stall
    assert _keyword_state(db) == maintained and maintained[2] is True and len(maintained[0]) > 500
    hits = localrag.search(db, "zebracorn escalation", retrieval="keyword")["results"]
    assert hits


def test_only_a_first_load_into_empty_keyword_tables_drops_the_index(ingested, monkeypatch):
    config, vault, _ = ingested
    monkeypatch.setattr(localrag, "KEYWORD_BULK_LOAD_MIN_FILES", 1)
    monkeypatch.setattr(localrag.Store, "drop_keyword_index", lambda self: pytest.fail("dropped on a later run"))
    note = vault / "hr" / "Onboarding Guide.md"
    note.write_text(note.read_text(encoding="utf-8") + "\nzebracorn onboarding\n", encoding="utf-8")
    assert localrag.ingest(config, vault)["documents_updated"] == 1         # a second run of the vault
    other = vault.parent / "other"
    write_vault(other, {f"n{i}.md": f"# Note {i}\nzebracorn {i}\n" for i in range(3)})
    assert localrag.ingest(config, other)["documents_added"] == 3           # a first run, postings already there
    assert _keyword_state(config)[2] is True


def test_a_bulk_load_killed_midway_gets_its_keyword_index_back_on_the_next_run(db, vault, monkeypatch):
    monkeypatch.setattr(localrag, "KEYWORD_BULK_LOAD_MIN_FILES", 1)
    monkeypatch.setattr(localrag, "INGEST_BATCH_CHUNKS", 10)
    ingest_killed_midway(db, vault)
    postings, _, indexed = _keyword_state(db)
    assert postings and not indexed                 # committed batches, loaded without the index
    assert isinstance(localrag.search(db, "escalation", retrieval="keyword")["results"], list)   # unindexed
    result = localrag.ingest(db, vault)
    assert result["status"] == "success" and _keyword_state(db)[2] is True
    assert localrag.search(db, "escalation", retrieval="keyword")["results"]


_term = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_term, st.integers(1, 40).map(lambda n: n / 4), max_size=30),
       st.integers(0, 2 ** 62))
def test_keyword_copy_bytes_are_the_plain_rows(tf, chunk_id):
    """_keyword_packed / _keyword_rows (the postings as one bytes object a chunk, the id put in by replace) write
    the COPY tuples _Copy.row writes, whatever the terms (0xff-free UTF-8, the slot's own bytes inside them)."""
    tf = {("\x08" + t if i % 3 == 0 else t): v for i, (t, v) in enumerate(tf.items())}
    length = float(sum(tf.values()))
    cid = localrag._Copy.int8(chunk_id)
    want_chunks, want_postings = localrag._Copy(3), localrag._Copy(4)
    want_chunks.row(cid, localrag._Copy.text(localrag.KEYWORD_TOKENIZER), localrag._Copy.float4(length))
    for term in sorted(tf):
        want_postings.row(cid, localrag._Copy.text(term), localrag._Copy.float4(tf[term]),
                          localrag._Copy.float4(length))
    got_chunks, got_postings = localrag._Copy(3), localrag._Copy(4)
    localrag._keyword_rows(got_chunks, got_postings, cid, localrag._keyword_packed(tf, length))
    assert got_chunks.buf.getvalue() == want_chunks.buf.getvalue() and got_chunks.rows == 1
    assert got_postings.buf.getvalue() == want_postings.buf.getvalue() and got_postings.rows == len(tf)


_field = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.lists(_field, max_size=3), _field, st.lists(_field, max_size=3),
       st.lists(st.tuples(st.one_of(st.none(), st.integers(1, 10 ** 6)), st.lists(_field, max_size=2)),
                min_size=1, max_size=4))
def test_chunk_copy_rows_carry_the_metadata_jsonb_writes(embeds, title, aliases, per_chunk):
    """The metadata _chunk_row_parts writes from its parts is the text _Copy.jsonb gives the whole dict (quotes,
    backslashes, control characters, non-ASCII, lines of a canvas (None), block ids or none)."""
    chunks = [localrag.Chunk(i, ("H",), i, i + 1, "x", 1) for i in range(len(per_chunk))]
    lines = [(line, None if line is None else line + 2) for line, _ in per_chunk]
    blocks = [b for _, b in per_chunk]
    doc = localrag._Prepared({}, (), (), embeds, chunks, None, lines=lines, title=title, aliases=tuple(aliases),
                             block_ids=blocks)
    C, field = localrag._Copy, localrag._copy_field
    for chunk, (line_start, line_end), b, (middle, tail) in zip(chunks, lines, blocks,
                                                                localrag._chunk_row_parts(doc, "n.md")):
        meta = {"char_start": chunk.start, "char_end": chunk.end, "line_start": line_start, "line_end": line_end,
                "embeds": embeds, "title": title, "aliases": aliases}
        if b:
            meta["block_ids"] = b
        assert middle == field(C.int4(chunk.index)) + field(C.text(chunk.content))
        assert tail == b"".join(field(f) for f in (
            C.text("n.md"), C.text_array(chunk.heading_path), C.jsonb({}), C.text_array(()), C.text_array(()),
            C.jsonb(meta), C.text(chunk.content_hash), C.int4(chunk.token_count)))


def test_two_file_names_that_compose_alike_are_indexed_once_and_stay_put(db, tmp_path):
    """"Café.md" beside a decomposed "Café.md" (copied from a Mac) are one stored path: both were read, the index
    took whichever came last, and every unchanged run "updated" the note, search answering from each file in turn
    (a review of a vault changing over a week).  The first in scan order is indexed, the other is skipped with a
    warning that says how each name is written, and a second run changes nothing."""
    import unicodedata
    root = tmp_path / "v"
    root.mkdir()
    (root / unicodedata.normalize("NFD", "Café.md")).write_text("# Menu\n\nCroissants nfdtwin.\n", encoding="utf-8")
    (root / unicodedata.normalize("NFC", "Café.md")).write_text("# Menu\n\nBaguettes nfctwin.\n", encoding="utf-8")
    first = localrag.ingest(db, root)
    assert first["documents_added"] == 1 and first["skipped_by_reason"] == {"duplicate_name": 1}, first
    assert first["files_found"] == 2 and [w["path"] for w in first["warnings"]] == ["Café.md"]
    assert "decomposed (NFD)" in first["warnings"][0]["warning"] and "composed (NFC)" in first["warnings"][0][
        "warning"]
    again = localrag.ingest(db, root)
    assert again["documents_updated"] == 0 and again["documents_skipped"] == 1, again
    assert localrag.get_note(db, "Café.md")["content"].endswith("Croissants nfdtwin.")


def test_the_summary_names_the_notes_added_updated_deleted_and_renamed(db, tmp_path, capsys):
    """An ingest after a week of edits said `2 added, 1 updated, 2 deleted`, not which notes, and a note renamed or
    moved in Obsidian was a delete and an add like any other (a review of a vault changing over a week).  The result
    names them under `changes` (a deleted note whose content one added note has is `renamed`; two empty notes are
    not), the text prints one line each, and an unchanged run prints none; a first run lists no names."""
    root = tmp_path / "v"
    write_vault(root, {"a.md": "# A\n\nAlpha text.\n", "b.md": "# B\n\nBravo text.\n", "old/c.md": "# C\n\nCharlie.\n",
                       "e1.md": "", "e2.md": "", "gone.md": "# G\n\nGolf.\n",
                       **{f"x{n}.md": f"# X\n\nOther {n}.\n" for n in range(4)}})
    code, _ = run_cli("ingest", str(root))
    assert code == 0 and not [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("added:")]
    (root / "old" / "c.md").rename(root / "c moved.md")                  # a move (and rename), content unchanged
    (root / "e1.md").rename(root / "e3.md")                              # empty, as e2: which one went to e3?
    (root / "e2.md").unlink()
    (root / "gone.md").unlink()
    (root / "b.md").write_text("# B\n\nBravo text, edited.\n", encoding="utf-8")
    (root / "new.md").write_text("# N\n\nNovember.\n", encoding="utf-8")
    code, out = run_cli("ingest", str(root), "--json")
    result = json.loads(out)
    assert code == 0 and result["changes"] == {"added": ["e3.md", "new.md"], "updated": ["b.md"],
                                               "deleted": ["e1.md", "e2.md", "gone.md"],
                                               "renamed": [{"from": "old/c.md", "to": "c moved.md"}]}, result
    (root / "c moved.md").rename(root / "c.md")
    capsys.readouterr()
    assert run_cli("ingest", str(root))[0] == 0
    err = capsys.readouterr().err
    assert "renamed: c moved.md -> c.md\n" in err and "1 deleted (1 of them renamed)" in err, err
    assert run_cli("ingest", str(root))[0] == 0
    err = capsys.readouterr().err
    assert not [ln for ln in err.splitlines() if ln.split(":")[0] in ("added", "updated", "deleted", "renamed")], err
