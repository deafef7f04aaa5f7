"""localrag.pyz: built with shiv, run from a temp dir with a clean environment (env -i, only PATH and HOME), no
virtualenv, no .env, no repo: db init, ingest, search, ask, eval, serve + /health, and a second ingest that skips
every file."""

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import QUESTIONS, ROOT, SAMPLE_VAULT

pytestmark = pytest.mark.slow
SYSTEM_PYTHON_DIRS = "/usr/local/bin:/usr/bin:/bin"


@pytest.fixture(scope="module")
def pyz(tmp_path_factory):
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    built = subprocess.run(["make", "-s", "pyz"], cwd=ROOT, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    first = (ROOT / "dist" / "localrag.pyz").read_bytes()
    work = tmp_path_factory.mktemp("laptop")
    shutil.copy(ROOT / "dist" / "localrag.pyz", work / "localrag.pyz")
    shutil.copytree(SAMPLE_VAULT, work / "vault")
    shutil.copy(QUESTIONS, work / "questions.yaml")
    (work / "home").mkdir()
    yield work, first
    subprocess.run(clean_cmd(work, "db", "stop"), cwd=work, env=clean_env(work), capture_output=True)


def clean_env(work: Path) -> dict:
    return {"PATH": SYSTEM_PYTHON_DIRS, "HOME": str(work / "home")}


def clean_cmd(work: Path, *args: str) -> list[str]:
    python = shutil.which("python3", path=SYSTEM_PYTHON_DIRS)
    return [python, str(work / "localrag.pyz"), *args]


def run(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(clean_cmd(work, *args), cwd=work, env=clean_env(work), capture_output=True, text=True,
                          timeout=300)


def test_build_is_repeatable(pyz):
    work, first = pyz
    again = subprocess.run(["make", "-s", "pyz"], cwd=ROOT, capture_output=True, text=True)
    assert again.returncode == 0
    assert (ROOT / "dist" / "localrag.pyz").read_bytes() == first


def test_pyz_end_to_end_in_a_clean_environment(pyz):
    work, _ = pyz
    assert run(work, "--version").stdout.strip().startswith("localrag ")
    config = json.loads(run(work, "config", "--json").stdout)
    assert config["env_file"] is None and config["database"] == "embedded"
    assert config["embedded_data_dir"].startswith(str(work / "home"))
    assert run(work, "db", "init").returncode == 0
    first = run(work, "ingest", "vault", "--json")
    assert first.returncode == 0, first.stderr
    added = json.loads(first.stdout)["documents_added"]
    assert added >= 9
    search = json.loads(run(work, "search", "客户 P1 工单应该怎么升级？", "--json").stdout)
    assert search["results"][0]["source"] == "policies/Support Escalation Policy.md"
    answer = json.loads(run(work, "ask", "客户 P1 工单应该怎么升级？", "--json").stdout)
    assert answer["mode"] == "rag" and answer["citation_check"]["ok"]
    evaluation = run(work, "eval", "--questions", "questions.yaml", "--min-hit-at-k", "0.9", "--min-rejection",
                     "0.8", "--json")
    assert evaluation.returncode == 0, evaluation.stderr
    second = json.loads(run(work, "ingest", "vault", "--json").stdout)
    assert second["documents_skipped"] == added and second["chunks_written"] == 0


def test_pyz_serves_health(pyz):
    work, _ = pyz
    assert run(work, "db", "init").returncode == 0
    proc = subprocess.Popen(clean_cmd(work, "serve", "--port", "0"), cwd=work, env=clean_env(work),
                            stderr=subprocess.PIPE, text=True)
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
        assert proc.wait(timeout=60) == 0
