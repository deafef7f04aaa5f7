"""Model archive (section 6b): `embeddings pack` / `unpack` / `wheelhouse` and the three pieces `embeddings status`
reports.  Most tests use a model-shaped snapshot of plain files (no torch needed: pack and unpack only move bytes);
the end-to-end test packs the tiny Qwen3 the qwen tests build, unpacks it into an empty cache and searches with
the network unusable."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import localrag
from conftest import ROOT, run_cli

REPO = localrag.QWEN_REPO_DIR
REV = "0123456789abcdef0123456789abcdef7e57ba5e"


def make_snapshot(cache: Path, payload_bytes: int = 3_000_000, dim: int = 1024, rev: str = REV) -> Path:
    """A model-shaped HF cache entry: refs/main, a snapshot with config files, an empty module folder, a weights
    file, and a tokenizer stored as a symlink into blobs/ (as huggingface_hub writes it)."""
    repo = cache / REPO
    snap = repo / "snapshots" / rev
    (snap / "1_Pooling").mkdir(parents=True)
    (snap / "2_Normalize").mkdir()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    (snap / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": dim}))
    (snap / "modules.json").write_text("[]")
    (snap / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": dim}))
    (snap / "model.safetensors").write_bytes(os.urandom(payload_bytes))
    (repo / "blobs").mkdir(exist_ok=True)
    (repo / "blobs" / "a1b2c3").write_text('{"tokenizer": true}')
    (snap / "tokenizer.json").symlink_to(Path("..") / ".." / "blobs" / "a1b2c3")
    return snap


def tree(folder: Path) -> dict:
    """Every file under folder with its sha256 (symlinks followed), for 'the cache is unchanged' checks."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            out[p.relative_to(folder).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
        elif p.is_dir():
            out[p.relative_to(folder).as_posix() + "/"] = "dir"
    return out


@pytest.fixture
def packed(tmp_path, monkeypatch):
    """A packed model-shaped snapshot: (archive path, source snapshot, a config pointing at an empty cache)."""
    src = tmp_path / "src-cache"
    snap = make_snapshot(src)
    cfg = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(src)}, cwd=tmp_path)
    archive = tmp_path / "qwen3.tar"
    result = localrag.embeddings_pack(cfg, archive)
    assert result["files"] == 6 and result["revision"] == REV and result["dim"] == 1024
    target = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(tmp_path / "laptop-cache")}, cwd=tmp_path)
    return archive, snap, target


def members(archive: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return tar.getmembers()


def test_pack_writes_manifest_first_and_only_the_snapshot(packed):
    archive, snap, _ = packed
    names = [m.name for m in members(archive)]
    assert names[0] == localrag.MODEL_ARCHIVE_MANIFEST
    assert set(names[1:]) == {f"{REPO}/refs/main", *(f"{REPO}/snapshots/{REV}/{n}" for n in (
        "config.json", "modules.json", "1_Pooling/config.json", "model.safetensors", "tokenizer.json"))}
    assert not any("blobs" in n for n in names)  # symlinks dereferenced, blobs not doubled
    assert all(m.isreg() and m.mtime == 0 and m.uid == 0 for m in members(archive))
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile(localrag.MODEL_ARCHIVE_MANIFEST))
    assert manifest["model"] == localrag.QWEN_MODEL and manifest["localrag_version"] == localrag.__version__
    weights = next(f for f in manifest["files"] if f["path"].endswith("model.safetensors"))
    assert weights["sha256"] == hashlib.sha256((snap / "model.safetensors").read_bytes()).hexdigest()
    assert f"{REPO}/snapshots/{REV}/2_Normalize" in manifest["dirs"]


def test_unpack_into_empty_cache_then_status_is_ready(packed):
    archive, snap, target = packed
    result = localrag.embeddings_unpack(target, archive)
    placed = target.embedding_cache_dir / REPO / "snapshots" / REV
    assert tree(placed) == tree(snap)
    assert (target.embedding_cache_dir / REPO / "refs" / "main").read_text() == REV
    assert result["status"]["cached"] and result["status"]["pieces"]["model"]["verified"] == "sizes"
    assert not [p for p in target.embedding_cache_dir.iterdir() if p.name.startswith(".localrag-unpack-")]
    verified = localrag.embeddings_status(target, verify=True)["pieces"]["model"]
    assert verified["ok"] and verified["verified"] == "sha256"
    # a file damaged after unpacking is reported by status
    (placed / "modules.json").write_text("[1]")
    model = localrag.embeddings_status(target)["pieces"]["model"]
    assert not model["ok"] and "modules.json" in model["problem"] and "unpack" in model["hint"]


def test_unpack_keeps_other_models_and_other_snapshots(packed):
    archive, _, target = packed
    cache = target.embedding_cache_dir
    other = cache / "models--BAAI--bge-m3" / "snapshots" / "x"
    other.mkdir(parents=True)
    (other / "weights.bin").write_bytes(b"other model")
    old = make_snapshot(cache, payload_bytes=10, rev="old-revision")
    localrag.embeddings_unpack(target, archive)
    assert (other / "weights.bin").read_bytes() == b"other model"
    assert (old / "model.safetensors").exists()
    assert (cache / REPO / "refs" / "main").read_text() == REV
    # unpacking again over the same revision replaces it and still works
    localrag.embeddings_unpack(target, archive)
    assert localrag.embeddings_status(target, verify=True)["pieces"]["model"]["ok"]


def refused(target, archive: Path, needle: str) -> localrag.ModelArchiveInvalid:
    cache = target.embedding_cache_dir
    before = tree(cache) if cache.exists() else None
    with pytest.raises(localrag.ModelArchiveInvalid) as info:
        localrag.embeddings_unpack(target, archive)
    assert needle in info.value.message, info.value.message
    assert (tree(cache) if cache.exists() else None) == before  # the cache is as it was
    assert info.value.code == "model_archive_invalid" and info.value.exit_code == localrag.EXIT_EMBEDDING
    return info.value


def test_tampered_file_is_named_and_nothing_placed(packed):
    archive, _, target = packed
    make_snapshot(target.embedding_cache_dir, payload_bytes=10, rev="old-revision")  # an existing cache
    data = bytearray(archive.read_bytes())
    offset = next(m.offset_data for m in members(archive) if m.name.endswith("model.safetensors"))
    data[offset + 1000] ^= 0xFF
    archive.write_bytes(bytes(data))
    refused(target, archive, f"{REPO}/snapshots/{REV}/model.safetensors does not match its sha256")


def test_truncated_archive_is_refused(packed):
    archive, _, target = packed
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    refused(target, archive, "truncated")
    empty = archive.with_name("empty.tar")
    empty.write_bytes(b"")
    refused(target, empty, "truncated or damaged")


def rebuild(archive: Path, dest: Path, edit_manifest=None, extra: list[tarfile.TarInfo] | None = None,
            drop: str | None = None) -> Path:
    """The archive rewritten: manifest edited, members dropped, hand-made members appended."""
    with tarfile.open(archive) as src, tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as out:
        for m in src.getmembers():
            data = src.extractfile(m).read()
            if m.name == localrag.MODEL_ARCHIVE_MANIFEST and edit_manifest:
                manifest = json.loads(data)
                edit_manifest(manifest)
                data = json.dumps(manifest).encode()
                m.size = len(data)
            if drop and m.name.endswith(drop):
                continue
            out.addfile(m, io.BytesIO(data))
        for info in extra or []:
            out.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return dest


def reg(name: str, size: int = 1) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


def test_missing_file_is_truncation(packed, tmp_path):
    archive, _, target = packed
    refused(target, rebuild(archive, tmp_path / "short.tar", drop="model.safetensors"),
            f"ends before {REPO}/snapshots/{REV}/model.safetensors")


@pytest.mark.parametrize("edit,needle", [
    (lambda m: m.update(model="BAAI/bge-m3"), "BAAI/bge-m3"),
    (lambda m: m.update(dim=384), "384-dimensional"),
    (lambda m: m.update(format="something-else"), "not a localrag model manifest"),
    (lambda m: m.update(format_version=99), "format 99"),
    (lambda m: m.update(revision="../../etc"), "not a snapshot name"),
    (lambda m: m["files"].append({"path": f"{REPO}/snapshots/{REV}/../../../../evil", "size": 1,
                                  "sha256": "0" * 64}), "outside the model's snapshot"),
    (lambda m: m["files"].append({"path": "/etc/evil", "size": 1, "sha256": "0" * 64}), "outside"),
    (lambda m: m["files"].append({"path": "models--BAAI--bge-m3/snapshots/x/w.bin", "size": 1,
                                  "sha256": "0" * 64}), "outside"),
    (lambda m: m["dirs"].append("../../evil"), "outside"),
])
def test_foreign_or_unsafe_manifest_is_refused(packed, tmp_path, edit, needle):
    archive, _, target = packed
    refused(target, rebuild(archive, tmp_path / "edited.tar", edit_manifest=edit), needle)
    assert not list(tmp_path.rglob("evil"))


def test_escaping_members_and_links_are_refused(packed, tmp_path):
    archive, _, target = packed
    refused(target, rebuild(archive, tmp_path / "a.tar", extra=[reg("../../evil")]), "'../../evil'")
    refused(target, rebuild(archive, tmp_path / "b.tar", extra=[reg("/tmp/evil")]), "'/tmp/evil'")
    link = tarfile.TarInfo(f"{REPO}/snapshots/{REV}/model.safetensors")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    refused(target, rebuild(archive, tmp_path / "c.tar", drop="model.safetensors", extra=[link]),
            "link or special file")
    assert not list(tmp_path.rglob("evil"))


def test_not_an_archive(tmp_path, packed):
    _, _, target = packed
    bogus = tmp_path / "notes.tar"
    with tarfile.open(bogus, "w") as tar:
        tar.addfile(reg("readme.txt", 3), io.BytesIO(b"abc"))
    refused(target, bogus, "not a localrag model archive")
    code, out = run_cli("--env-file", str(write_env(tmp_path, target)), "embeddings", "unpack",
                        str(tmp_path / "nope.tar"), "--json")
    assert code == localrag.EXIT_EMBEDDING and "does not exist" in json.loads(out)["error"]["message"]


def write_env(tmp_path: Path, cfg) -> Path:
    env = tmp_path / "archive.env"
    env.write_text(f"EMBEDDING_CACHE_DIR={cfg.embedding_cache_dir}\n")
    return env


def test_full_disk_during_unpack_leaves_the_cache_as_it_was(packed, tmp_path):
    """A file-size limit stands in for a full disk: the write fails midway (EFBIG, like ENOSPC) for real."""
    archive, _, target = packed
    make_snapshot(target.embedding_cache_dir, payload_bytes=10, rev="old-revision")
    before = tree(target.embedding_cache_dir)
    code = ("import resource, signal, sys, localrag; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, 1_000_000)); "
            "sys.exit(localrag.main(sys.argv[1:]))")
    env = {**os.environ, "EMBEDDING_CACHE_DIR": str(target.embedding_cache_dir)}
    proc = subprocess.run([sys.executable, "-c", code, "embeddings", "unpack", str(archive), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == localrag.EXIT_EMBEDDING, proc.stderr
    error = json.loads(proc.stdout)["error"]
    assert error["code"] == "model_cache_write_failed" and "model.safetensors" in error["message"]
    assert tree(target.embedding_cache_dir) == before


def test_pack_without_a_cached_model_says_what_to_do(tmp_path, monkeypatch):
    env = tmp_path / "e.env"
    env.write_text(f"EMBEDDING_CACHE_DIR={tmp_path / 'empty'}\n")
    monkeypatch.delenv("EMBEDDING_CACHE_DIR", raising=False)  # the .env decides
    code, out = run_cli("--env-file", str(env), "embeddings", "pack", str(tmp_path / "x.tar"), "--json")
    assert code == localrag.EXIT_EMBEDDING
    assert "warmup" in json.loads(out)["error"]["message"] and not (tmp_path / "x.tar").exists()


def test_pack_refuses_another_dimension(tmp_path):
    make_snapshot(tmp_path / "c", dim=384)
    cfg = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(tmp_path / "c")}, cwd=tmp_path)
    with pytest.raises(localrag.EmbeddingDimMismatch, match="384"):
        localrag.embeddings_pack(cfg, tmp_path / "x.tar")
    assert not list(tmp_path.glob("x.tar*"))


def test_status_names_the_missing_pieces(tmp_path):
    cfg = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(tmp_path / "none")}, cwd=tmp_path)
    pieces = localrag.model_pieces(cfg)
    assert set(pieces) == {"localrag", "packages", "model", "ready"}
    assert pieces["localrag"]["ok"] and pieces["localrag"]["version"] == localrag.__version__
    assert not pieces["model"]["ok"] and "embeddings unpack" in pieces["model"]["hint"]
    assert not pieces["ready"]
    # packages: what this venv has (the qwen extra may or may not be installed); a missing one comes with the hint
    packages = pieces["packages"]
    assert packages["ok"] == (not packages["missing"])
    if packages["missing"]:
        assert "wheelhouse" in packages["hint"]
    # status does not import torch
    probe = subprocess.run([sys.executable, "-c", "import sys, localrag; localrag.model_pieces(localrag.load_config("
                            "environ={})); print('torch' in sys.modules)"], capture_output=True, text=True,
                           cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert probe.stdout.strip() == "False", probe.stderr


# --- wheelhouse ------------------------------------------------------------------------------------------------

def test_wheelhouse_command_linux_uses_the_cpu_index():
    argv, reqs = localrag.wheelhouse_command("linux-x86_64", "3.11", "/tmp/wh")
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv and argv[argv.index("--python-version") + 1] == "3.11"
    assert argv[argv.index("--implementation") + 1] == "cp" and argv[argv.index("--dest") + 1] == "/tmp/wh"
    platforms = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    assert "manylinux2014_x86_64" in platforms and "manylinux_2_28_x86_64" in platforms
    assert argv[argv.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    assert reqs[0] == f"torch=={localrag.TORCH_VERSION}+cpu" and argv[-len(reqs):] == reqs
    assert any(r.startswith("sentence-transformers") for r in reqs)


def test_wheelhouse_takes_every_python_the_pyz_runs_on():
    """--python 3.10 was refused ("3.11 or later") though the pyz runs on CPython 3.10-3.13 and torch has wheels
    for it: a 3.10 laptop following the README found out at this step."""
    for python in ("3.10", "3.11", "3.12", "3.13"):
        argv, _reqs = localrag.wheelhouse_command("linux-x86_64", python, "/tmp/wh")
        assert argv[argv.index("--python-version") + 1] == python
    code, out = run_cli("embeddings", "wheelhouse", "--platform", "linux-x86_64", "--python", "3.10", "/tmp/wh",
                        "--dry-run", "--json")
    assert code == 0 and json.loads(out)["install_on_laptop"].startswith("python3.10 -m pip install")


@pytest.mark.parametrize("platform,tag", [("macos-arm64", "macosx_11_0_arm64"), ("win_amd64", "win_amd64"),
                                          ("manylinux2014_aarch64", "manylinux2014_aarch64")])
def test_wheelhouse_command_other_platforms(platform, tag):
    argv, reqs = localrag.wheelhouse_command(platform, "3.12", "out")
    assert tag in argv and "--extra-index-url" not in argv  # PyPI's torch is the CPU build there
    assert reqs[0] == f"torch=={localrag.TORCH_VERSION}"


@pytest.mark.parametrize("platform,python,needle", [("sparc", "3.11", "--platform 'sparc'"),
                                                    ("macosx_10_9_x86_64", "3.11", "macOS x86_64"),
                                                    ("linux-x86_64", "3.9", "3.10 or later"),
                                                    ("linux-x86_64", "three", "--python")])
def test_wheelhouse_bad_arguments(tmp_path, platform, python, needle):
    code, out = run_cli("embeddings", "wheelhouse", "--platform", platform, "--python", python,
                        str(tmp_path / "wh"), "--json")
    assert code == localrag.EXIT_USAGE and needle in json.loads(out)["error"]["message"]
    assert not (tmp_path / "wh").exists()


def test_wheelhouse_dry_run_prints_the_laptop_line(tmp_path):
    code, out = run_cli("embeddings", "wheelhouse", "--platform", "linux-x86_64", "--python", "3.11",
                        str(tmp_path / "wh"), "--dry-run", "--json")
    result = json.loads(out)
    assert code == 0 and not result["downloaded"]
    assert result["install_on_laptop"] == (f"python3.11 -m pip install --no-index --find-links {tmp_path / 'wh'} "
                                           f"-r {tmp_path / 'wh' / 'requirements.txt'}")


def make_wheel(folder: Path, name: str, version: str, tag: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal valid wheel (a package with an __init__.py, METADATA, WHEEL, RECORD) that pip can download and
    install: the stand-in for torch & co. in the offline wheelhouse tests."""
    import zipfile
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {f"{dist}/__init__.py": f"__version__ = {version!r}\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n"
                                 + "".join(f"Requires-Dist: {r}\n" for r in requires),
             f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: localrag-tests\nRoot-Is-Purelib: false\nTag: {tag}\n"}
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        for n, text in files.items():
            z.writestr(n, text)
    return path


@pytest.fixture
def pip_isolated(monkeypatch):
    """pip with no configuration file and none of this machine's PIP_* settings (its local indexes and wheels)."""
    for key in list(os.environ):
        if key.startswith("PIP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")


def test_wheelhouse_from_a_local_folder_then_the_laptop_line_installs_offline(tmp_path, pip_isolated):
    """`--find-links DIR`: pip takes the wheels from DIR only (no index, no network), only those for the target
    platform and Python; requirements.txt is written once all are there, and the printed laptop line installs
    them with --no-index."""
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    src = tmp_path / "mirror"
    src.mkdir()
    make_wheel(src, "torch", f"{localrag.TORCH_VERSION}+cpu", f"{cp}-{cp}-manylinux_2_17_x86_64")
    make_wheel(src, "torch", f"{localrag.TORCH_VERSION}", f"{cp}-{cp}-win_amd64")            # another platform
    make_wheel(src, "sentence-transformers", "5.1.0", "py3-none-any", ("transformers>=4.41.0", "torch>=1.11"))
    make_wheel(src, "transformers", "4.57.1", "py3-none-any")
    make_wheel(src, "unrelated", "1.0", "py3-none-any")
    out = tmp_path / "wheelhouse"
    code, stdout = run_cli("embeddings", "wheelhouse", "--platform", "linux-x86_64", "--python", py, str(out),
                           "--find-links", str(src), "--json")
    result = json.loads(stdout)
    assert code == 0 and result["downloaded"], stdout
    assert "--no-index" in result["command"] and "--extra-index-url" not in result["command"]
    assert result["wheels"] == sorted(p.name for p in out.glob("*.whl"))
    assert {w.split("-")[0] for w in result["wheels"]} == {"torch", "sentence_transformers", "transformers"}
    assert not any("win_amd64" in w for w in result["wheels"])
    assert (out / "requirements.txt").read_text().splitlines() == result["requirements"]
    # the laptop line, as printed, into a target folder instead of this venv
    line = result["install_on_laptop"].split()
    assert line[:2] == [f"python{py}", "-m"] and "--no-index" in line
    target = tmp_path / "laptop-site"
    done = subprocess.run([sys.executable, *line[1:], "--target", str(target)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "torch" / "__init__.py").is_file() and (target / "sentence_transformers").is_dir()


def test_wheelhouse_offline_is_one_clear_error(tmp_path, pip_isolated, monkeypatch):
    """No network: pip's index (here a local port nobody listens on) cannot be reached.  One error line says so and
    what to do (exit 7, `wheelhouse_download_failed`, details.offline), nothing is left in OUTDIR."""
    import socket
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))       # bound, never listening: connections are refused
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{sock.getsockname()[1]}/simple")
        monkeypatch.setenv("PIP_RETRIES", "0")
        out = tmp_path / "wheelhouse"
        code, stdout = run_cli("embeddings", "wheelhouse", "--platform", "macos-arm64", "--python", "3.12", str(out),
                               "--json")
    finally:
        sock.close()
    error = json.loads(stdout)["error"]
    assert code == localrag.EXIT_EMBEDDING and error["code"] == "wheelhouse_download_failed"
    assert "could not reach the package index" in error["message"] and "--find-links" in error["message"]
    assert error["details"]["offline"] is True and "\n" not in error["message"]
    assert not out.exists()


def test_wheelhouse_find_links_must_exist(tmp_path):
    code, stdout = run_cli("embeddings", "wheelhouse", "--platform", "linux-x86_64", "--python", "3.11",
                           str(tmp_path / "wh"), "--find-links", str(tmp_path / "nope"), "--json")
    assert code == localrag.EXIT_USAGE and "--find-links" in json.loads(stdout)["error"]["message"]
    assert not (tmp_path / "wh").exists()


# --- interrupted: a signal mid-unpack, mid-pack or mid-download leaves nothing behind (issue 10) -----------------

def _signalled_cli(args: list[str], hook: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    """`localrag ARGS` in a real process that sends itself SIGTERM from inside `hook` (a module function), i.e.
    in the middle of the work at a known point: the signal is real, only its timing is fixed."""
    code = ("import os, signal, sys, localrag\n"
            f"real = localrag.{hook}\n"
            "def stop(*a, **k):\n"
            "    out = real(*a, **k)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    return out\n"
            f"localrag.{hook} = stop\n"
            "sys.exit(localrag.main(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, cwd=cwd)


def test_sigterm_mid_unpack_leaves_the_cache_as_it_was(packed, tmp_path):
    archive, _, target = packed
    make_snapshot(target.embedding_cache_dir, payload_bytes=10, rev="old-revision")
    before = tree(target.embedding_cache_dir)
    done = _signalled_cli(["embeddings", "unpack", str(archive)], "_write_all",
                          {"EMBEDDING_CACHE_DIR": str(target.embedding_cache_dir)}, tmp_path)
    assert done.returncode == 143 and "interrupted (SIGTERM)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert tree(target.embedding_cache_dir) == before          # no staging folder, nothing placed


def test_sigterm_mid_pack_leaves_no_partial_archive(packed, tmp_path):
    archive, snap, _ = packed
    out = tmp_path / "again.tar"
    done = _signalled_cli(["embeddings", "pack", str(out)], "_sha256_file",
                          {"EMBEDDING_CACHE_DIR": str(snap.parent.parent.parent)}, tmp_path)
    assert done.returncode == 143 and "interrupted (SIGTERM)" in done.stderr, done.stderr
    assert not out.exists() and not out.with_name(out.name + ".partial").exists()


@pytest.mark.parametrize("sig", [15, 9], ids=["SIGTERM", "SIGKILL"])
def test_a_signal_while_pip_downloads_ends_pip_too(tmp_path, pip_isolated, sig):
    """A signal sent to localrag alone (a supervisor, `kill PID`, `kill -9 PID`) while pip waits on an index that
    never answers: localrag ends (143 for SIGTERM) and pip does not run on."""
    import socket
    from robust_util import children, start_cli, wait_for, wait_gone
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)                  # accepts (the kernel does), never answers
    try:
        proc = start_cli("embeddings", "wheelhouse", "--platform", "macos-arm64", "--python", "3.12",
                         str(tmp_path / "wh"), env={"PIP_INDEX_URL": f"http://127.0.0.1:{silent.getsockname()[1]}/s",
                                                    "PIP_DEFAULT_TIMEOUT": "120", "PIP_RETRIES": "0"})
        pip = wait_for(lambda: children(proc.pid), timeout=30)
        time.sleep(1.0)               # pip is up and waiting on the index
        os.kill(proc.pid, sig)
        _, err = proc.communicate(timeout=20)
        if sig == 15:
            assert proc.returncode == 143 and "interrupted (SIGTERM)" in err, err[-2000:]
        assert wait_gone(pip, 10) == []    # pip's own timeout here is 120 s
    finally:
        silent.close()


# --- end to end with the tiny Qwen3 ------------------------------------------------------------------------------

@pytest.mark.qwen
def test_pack_unpack_then_ingest_and_search_offline(db, vault, tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_qwen3 import build_tiny_qwen3
    build_tiny_qwen3(tmp_path / "connected")
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(tmp_path / "connected"))
    code, out = run_cli("embeddings", "pack", str(tmp_path / "q.tar"), "--json")
    assert code == 0, out
    laptop = tmp_path / "laptop"
    child = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    child.update(HF_ENDPOINT="http://127.0.0.1:9", EMBEDDING_CACHE_DIR=str(laptop),
                 EMBEDDING_PROVIDER="local-qwen3", EMBEDDING_MODEL="", https_proxy="http://127.0.0.1:9",
                 http_proxy="http://127.0.0.1:9")
    run = lambda *a: subprocess.run([sys.executable, "-m", "localrag", *a], capture_output=True, text=True,
                                    env=child, cwd=ROOT)
    unpack = run("embeddings", "unpack", str(tmp_path / "q.tar"), "--json")
    assert unpack.returncode == 0, unpack.stderr
    pieces = json.loads(unpack.stdout)["status"]["pieces"]
    assert pieces["ready"] and pieces["model"]["verified"] == "sizes"
    ingest = run("ingest", str(vault), "--json")
    assert ingest.returncode == 0, ingest.stderr
    search = run("search", "API 延迟", "--json")
    assert search.returncode == 0 and len(json.loads(search.stdout)["results"]) == 5
