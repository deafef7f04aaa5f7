"""CLI conventions: every command has help with an example, --json keeps stdout pure, exit codes documented."""

import json
import subprocess
import sys

import pytest

import localrag
from conftest import ROOT, run_cli

COMMANDS = [["config"], ["db", "init"], ["db", "status"], ["db", "stop"], ["db", "schema"], ["ingest"], ["search"],
            ["ask"], ["show"], ["mcp"], ["eval"], ["serve"], ["embeddings", "warmup"], ["embeddings", "status"]]


def help_text(*args):
    parser = localrag.build_parser()
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args([*args, "--help"])
    return out.getvalue()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command):
    text = help_text(*command)
    assert "usage: localrag " + " ".join(command) in text
    top = help_text(command[0])
    assert "example" in top


def test_top_level_help_lists_exit_codes_and_readme_documents_them():
    text = help_text()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for code in (localrag.EXIT_OK, localrag.EXIT_INTERNAL, localrag.EXIT_USAGE, localrag.EXIT_CONFIG,
                 localrag.EXIT_DB, localrag.EXIT_SCHEMA, localrag.EXIT_NOT_READY, localrag.EXIT_EMBEDDING,
                 localrag.EXIT_LLM, localrag.EXIT_VAULT, localrag.EXIT_PARTIAL, localrag.EXIT_EVAL,
                 localrag.EXIT_BUSY, localrag.EXIT_NOT_FOUND, localrag.EXIT_INTERRUPTED, localrag.EXIT_TERMINATED):
        assert f"\n  {code} " in text
        assert f"| {code} |" in readme, f"README lacks exit code {code}"
    for key in localrag.ENV_KEYS:
        assert f"`{key}`" in readme, f"README lacks env key {key}"
    for command in COMMANDS:
        assert "localrag " + " ".join(command) in readme, command


def _error_classes(cls=localrag.LocalRagError):
    for sub in cls.__subclasses__():
        yield sub
        yield from _error_classes(sub)


def test_every_error_code_is_documented_with_its_status_and_exit_code():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for cls in _error_classes():
        assert f"`{cls.code}`" in readme, f"README lacks error code {cls.code}"
        assert 400 <= cls.http_status <= 599 and cls.exit_code in range(1, 256), cls


def test_version_and_no_command():
    assert run_cli("--version")[0] == 0
    assert run_cli()[0] == localrag.EXIT_USAGE
    assert run_cli("frobnicate")[0] == localrag.EXIT_USAGE


def test_json_stdout_is_pure_and_messages_go_to_stderr(ingested):
    config, vault, _ = ingested
    proc = subprocess.run([sys.executable, "-m", "localrag", "ingest", str(vault), "--json"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["documents_skipped"] > 0
    proc = subprocess.run([sys.executable, "-m", "localrag", "search", "   ", "--json"], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == localrag.EXIT_USAGE
    assert json.loads(proc.stdout)["error"]["code"] == "invalid_request"
    assert proc.stderr.strip().startswith("error [invalid_request]:") and len(proc.stderr.strip().splitlines()) == 1


def test_console_scripts_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'localrag = "localrag:main"' in text and 'rag = "localrag:main"' in text


# --- scripts (issue 12): stdin, --batch, argument errors as JSON ------------------------------------------------------

def _cli(*args, stdin: str = ""):
    return subprocess.run([sys.executable, "-m", "localrag", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT)


def test_ask_and_search_read_stdin(ingested):
    question = "客户 P1 工单应该怎么升级？"
    proc = _cli("ask", "-", "--json", stdin=question + "\n")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == json.loads(_cli("ask", question, "--json").stdout)
    proc = _cli("search", "-", "--json", stdin=question)
    assert proc.returncode == 0 and json.loads(proc.stdout)["results"]
    proc = _cli("ask", "-", "--json", stdin="   \n")
    assert proc.returncode == localrag.EXIT_USAGE
    assert json.loads(proc.stdout)["error"]["details"]["field"] == "question"


def test_ask_batch_writes_one_result_per_line_and_goes_on_past_failures(ingested, tmp_path):
    lines = [json.dumps({"question": "客户 P1 工单应该怎么升级？"}, ensure_ascii=False), "",
             json.dumps({"question": ""}), "not json", json.dumps({"question": "今天上海天气如何？", "top_k": 3},
                                                                  ensure_ascii=False),
             json.dumps({"question": "P1", "top_k": 99}), json.dumps({"quest": "typo"})]
    batch = tmp_path / "q.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for args, stdin in ((["ask", "--batch", str(batch)], ""), (["ask", "--batch", "-"], batch.read_text())):
        proc = _cli(*args, stdin=stdin)
        assert proc.returncode == localrag.EXIT_PARTIAL, proc.stderr
        out = [json.loads(line) for line in proc.stdout.splitlines()]
        assert [o["line"] for o in out] == [1, 3, 4, 5, 6, 7]
        assert out[0]["mode"] == "rag" and out[3]["mode"] == "no_answer"
        assert [o["error"]["code"] for o in out if "error" in o] == ["invalid_request"] * 4
        assert "2/6 line(s) answered, 4 failed" in proc.stderr
    ok = tmp_path / "ok.jsonl"
    ok.write_text(lines[0] + "\n", encoding="utf-8")
    assert _cli("ask", "--batch", str(ok)).returncode == 0
    proc = _cli("ask", "--batch", str(tmp_path / "missing.jsonl"), "--json")
    assert proc.returncode == localrag.EXIT_USAGE and json.loads(proc.stdout)["error"]["details"]["field"] == "batch"
    proc = _cli("ask", "a question", "--batch", str(ok), "--json")
    assert proc.returncode == localrag.EXIT_USAGE


@pytest.mark.parametrize("args", [["search", "--top-k", "x", "--json"], ["search", "--json"],
                                  ["ask", "q", "--no-such-flag", "--json"], ["frobnicate", "--json"]])
def test_argument_errors_print_the_error_document_with_json(args):
    code, out = run_cli(*args)
    assert code == localrag.EXIT_USAGE
    err = json.loads(out)["error"]
    assert err["code"] == "invalid_request" and err["message"] and "usage" in err["details"]


def test_argument_errors_without_json_keep_stdout_empty():
    proc = _cli("search", "--top-k", "x")
    assert proc.returncode == localrag.EXIT_USAGE and proc.stdout == ""
    assert "usage: localrag search" in proc.stderr and "error [invalid_request]" in proc.stderr
