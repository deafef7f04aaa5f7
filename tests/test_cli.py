"""CLI conventions: every command has help with an example, --json keeps stdout pure, exit codes documented."""

import json
import signal
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from hypothesis import given, settings, strategies as st

import localrag
from conftest import ROOT, run_cli, write_vault

COMMANDS = [["config"], ["db", "init"], ["db", "status"], ["db", "stop"], ["db", "schema"], ["ingest"], ["search"],
            ["ask"], ["show"], ["mcp"], ["eval"], ["serve"], ["doctor"], ["embeddings", "warmup"],
            ["embeddings", "status"], ["vaults"], ["vaults", "rm"]]


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


def _command_forms():
    """(command, form) for every form a command takes as a sub-parser: ("db", "init"), ("history", "show"), ..."""
    import argparse
    top = next(a for a in localrag.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in top.choices.items():
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                yield from ((name, form) for form in action.choices)
            else:
                # a form taken as a positional argument with choices: its --help would be the command's
                assert action.option_strings or not action.choices, (name, action.dest)


def test_every_command_form_has_its_own_help():
    """`history show --help` printed the usage of `history` (show was a choice of a positional, so argparse had no
    parser for it; `eval init` the same): every `X Y --help` describes X Y, and X's help lists its forms."""
    forms = list(_command_forms())
    assert {("history", "show"), ("eval", "init"), ("eval", "run"), ("db", "init"), ("db", "stop"),
            ("db", "status"), ("vaults", "rm"), ("tickets", "show"), ("embeddings", "pack")} <= set(forms)
    for name, form in forms:
        text = help_text(name, form)
        assert text.startswith(f"usage: localrag {name} {form} "), (name, form)
        assert f"example:\n  " in text or "examples:\n  " in text, (name, form)   # README: each form has one
    assert "usage: localrag history show [-h] [--json] ID\n" in help_text("history", "show")
    history, evaluation = help_text("history"), help_text("eval")
    assert "localrag history [-h] [--limit N]" in history and "localrag history show ID [--json]" in history
    assert "localrag eval [run] [-h] [--questions PATH]" in evaluation and "localrag eval init [" in evaluation


def test_an_option_given_before_or_after_a_form_counts():
    """A form's copy of its command's option must not undo the command's (argparse copies a sub-parser's defaults
    over the parent's values)."""
    parse = localrag.build_parser().parse_args
    for argv in (["history", "--json", "show", "3"], ["history", "show", "3", "--json"]):
        args = parse(argv)
        assert (args.action, args.id, args.json) == ("show", "3", True), argv
    args = parse(["history", "--limit", "5"])
    assert (args.action, args.id, args.json, args.limit) == (None, None, False, 5)
    args = parse(["eval", "--json", "--path", "a/", "run", "--top-k", "3"])
    assert (args.action, args.json, args.path, args.top_k, args.calibrate) == ("run", True, ["a/"], 3, False)
    args = parse(["eval", "--questions", "q.yaml"])
    assert (args.action, args.questions, args.json, args.vault) == (None, "q.yaml", False, None)
    args = parse(["eval", "init", "--vault", "v"])
    assert (args.action, args.vault, args.questions, args.json) == ("init", "v", None, False)
    assert parse(["vaults", "--json", "rm", "x"]).json is True and parse(["vaults", "rm", "x"]).json is False


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


def test_output_in_a_locale_that_lacks_the_characters_never_fails(tmp_path):
    """stdout and stderr in Latin-1 (a Latin-1 locale, a Windows pipe in cp1252): a file or pipe gets UTF-8, a
    terminal an escape for what it cannot show; `show --help` (its examples are Chinese) ended in a traceback."""
    import pty
    env = {k: v for k, v in os.environ.items() if k not in localrag.ENV_KEYS}
    env.update(PYTHONIOENCODING="latin-1", LOCALRAG_HOME=str(tmp_path / "home"))
    proc = subprocess.run([sys.executable, "-m", "localrag", "show", "--help"], capture_output=True, env=env,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0 and "升级流程" in proc.stdout.decode("utf-8") and not proc.stderr
    proc = subprocess.run([sys.executable, "-m", "localrag", "search", "x", "--retrieval", "语义"],
                          capture_output=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == localrag.EXIT_USAGE and "语义" in proc.stderr.decode("utf-8")
    assert b"Traceback" not in proc.stderr
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "localrag", "show", "--help"], stdout=follower,
                              stderr=subprocess.PIPE, env=env, cwd=ROOT, timeout=60)
        os.close(follower)
        shown = b""
        while True:
            try:
                piece = os.read(leader, 65536)
            except OSError:    # the terminal closed: all read
                break
            if not piece:
                break
            shown += piece
    finally:
        os.close(leader)
    assert proc.returncode == 0 and b"\\u5347" in shown and b"Traceback" not in proc.stderr


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


def test_help_examples_make_sense_outside_the_repo():
    """A laptop has no samples/ or eval/: examples name a vault placeholder and `eval init`."""
    texts = [help_text()] + [help_text(*c) for c in COMMANDS] + [help_text(c[0]) for c in COMMANDS]
    assert not [t for t in texts if "samples/acme-vault" in t or "eval/questions.yaml " in t]
    assert "~/Vaults/Customer" in help_text() and "localrag doctor" in help_text()
    assert "eval init" in help_text("eval")


def test_eval_init_writes_a_starter_file_from_the_vault(env, vault, tmp_path, capfd):
    target = tmp_path / "my questions ü.yaml"
    code, out = run_cli("eval", "init", "--vault", str(vault), "--questions", str(target), "--json")
    assert code == 0 and json.loads(out)["questions"] == localrag.EVAL_STARTER_NOTES + 2
    questions = localrag.load_questions(target)  # the file is valid input for eval
    rag = [q for q in questions if q["expected_mode"] == "rag"]
    assert len(rag) == localrag.EVAL_STARTER_NOTES and all((vault / q["expected_sources"][0]).is_file() for q in rag)
    # from as many top-level folders as there are questions (the first notes in path order were all one folder's)
    folders = {q["expected_sources"][0].split("/")[0] for q in rag}
    assert len(folders) == min(localrag.EVAL_STARTER_NOTES, len({p.relative_to(vault).parts[0] for p in
                                                                   vault.rglob("*.md") if ".obsidian" not in p.parts}))
    before = target.read_bytes()
    code, _ = run_cli("eval", "init", "--questions", str(target))  # never overwrites
    assert code == localrag.EXIT_USAGE and target.read_bytes() == before
    assert "already exists" in capfd.readouterr().err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_eval_init_drafts_only_from_notes_ingest_would_index(env, tmp_path, capfd):
    """eval init walked the folder with its own code (outside review): it hung on a FIFO named *.md, followed a
    symlink out of the vault into the questions file, and drafted questions from binary files and dangling links
    that ingest never indexes.  It now takes ingest's scan and reads as ingest does."""
    vault, outside = tmp_path / "vault", tmp_path / "outside"
    vault.mkdir()
    outside.mkdir()
    (vault / "ok.md").write_text("# Good note\n\nbody\n", encoding="utf-8")
    (outside / "secret.md").write_text("# SECRET HEADING\n", encoding="utf-8")
    (vault / "link.md").symlink_to(outside / "secret.md")
    (vault / "dangling.md").symlink_to(tmp_path / "missing.md")
    (vault / "bin.md").write_bytes(b"\x00\x01\x02garbage")
    os.mkfifo(vault / "fifo.md")
    target = tmp_path / "q.yaml"
    proc = subprocess.run([sys.executable, "-m", "localrag", "eval", "init", "--vault", str(vault), "--questions",
                           str(target), "--json"], capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    rag = [q for q in localrag.load_questions(target) if q["expected_mode"] == "rag"]
    assert [(q["question"], q["expected_sources"]) for q in rag] == [("What is Good note?", ["ok.md"])]
    assert "SECRET" not in target.read_text(encoding="utf-8")


def test_eval_init_questions_are_answered_by_the_vault_they_come_from(ingested, tmp_path, capfd):
    """The drafted questions name only their note's title, in its language, so the gate answers them and the note
    is found: the starter file passes as it is (it used to say "What do our notes say about 客户支持升级政策?", whose
    Latin words read as product names, and "say" counted against coverage).  The next step names the vault."""
    config, vault, _ = ingested
    target = tmp_path / "starter.yaml"
    assert run_cli("eval", "init", "--vault", str(vault), "--questions", str(target))[0] == 0
    # the next step as the file's own header gives it, --calibrate included (the two had differed)
    assert f"localrag eval --questions {target} --vault {vault.resolve()} --calibrate" in capfd.readouterr().err
    assert f"# Then: localrag eval --questions {target} --vault {vault.resolve()} --calibrate" in \
        target.read_text(encoding="utf-8")
    code, out = run_cli("eval", "--questions", str(target), "--vault", str(vault), "--json")
    rows = json.loads(out)["questions"]
    assert code == 0 and [q["question"] for q in rows if q["expected_mode"] == "rag"][0].endswith("是什么？")
    assert all(q["mode"] == q["expected_mode"] for q in rows), [(q["question"], q["reason"]) for q in rows]
    assert all(q["rank"] is not None for q in rows if q["expected_mode"] == "rag")
    assert localrag._starter_question("Create a vault") == "What is Create a vault?"


def test_the_starter_file_names_every_tier_and_optional_field(tmp_path):
    """An operator turning the starter into a real set (tiers, near-misses, off-topic questions) found only id,
    question, expected_sources and expected_mode in it: the tier names were in the README alone."""
    target = tmp_path / "starter.yaml"
    localrag.eval_init(target)
    header = "".join(line for line in target.read_text(encoding="utf-8").splitlines(True) if line.startswith("#"))
    assert all(tier in header for tier in localrag.EVAL_TIERS), header
    assert all(f"{field}" in header for field in localrag.EVAL_QUESTION_FIELDS), header


def test_eval_warns_about_an_expected_source_that_is_not_indexed(ingested, tmp_path, capfd):
    """A typo in expected_sources was scored as a miss, silently: it looked like a retrieval regression."""
    target = tmp_path / "q.yaml"
    target.write_text('- id: typo\n  question: "客户 P1 工单应该怎么升级？"\n'
                      '  expected_sources: ["policies/Support Escalation Polcy.md"]\n'
                      '- id: fine\n  question: "客户 P1 工单应该怎么升级？"\n'
                      '  expected_sources: ["policies/Support Escalation Policy.md"]\n', encoding="utf-8")
    assert run_cli("eval", "--questions", str(target))[0] == 0
    err = capfd.readouterr().err
    assert "warning: typo: expected source 'policies/Support Escalation Polcy.md' is not indexed" in err
    assert "fine:" not in err


@pytest.mark.parametrize("written", ["Support Escalation Policy.md", "policies/Support Escalation Policy",
                                     "policies/support escalation policy.md", "Support Escalation Polcy.md"])
def test_an_expected_source_not_indexed_is_told_the_note_it_likely_means(ingested, tmp_path, capfd, written):
    """The file name alone (as Obsidian shows it), a path without its .md, another case, a typo: the warning said
    "a typo, or a note not ingested" and left the operator to find which note among the vault's."""
    target = tmp_path / "q.yaml"
    target.write_text(f'- id: esc\n  question: "客户 P1 工单应该怎么升级？"\n  expected_sources: ["{written}"]\n'
                      f'- id: gone\n  question: "客户 P1 工单应该怎么升级？"\n  expected_sources: ["zzz/qqq.md"]\n',
                      encoding="utf-8")
    assert run_cli("eval", "--questions", str(target))[0] == 0
    err = capfd.readouterr().err
    assert (f"warning: esc: expected source {written!r} is not indexed: it can never be a hit; did you mean "
            f"'policies/Support Escalation Policy.md'?") in err
    assert "warning: gone: expected source 'zzz/qqq.md' is not indexed: it can never be a hit (a typo, or a note " \
           "not ingested)" in err


def test_eval_init_without_a_vault_and_eval_finds_questions_yaml_in_cwd(env, ingested, capfd):
    """Without --vault or VAULT_PATH, the one vault the database holds is the one the questions come from (an
    operator got the sample vault's placeholder questions, each then warned "not indexed")."""
    _config, vault, _ = ingested
    code, _ = run_cli("eval", "init")  # cwd is a scratch folder outside the repo (the env fixture)
    assert code == 0 and f"wrote questions.yaml ({localrag.EVAL_STARTER_NOTES + 2} questions, drafted from " \
        f"{vault.resolve()})" in capfd.readouterr().err
    questions = localrag.load_questions("questions.yaml")
    assert all((vault / q["expected_sources"][0]).is_file() for q in questions if q["expected_mode"] == "rag")
    code, out = run_cli("eval", "--json")  # no --questions: ./questions.yaml
    assert code == 0 and json.loads(out)["summary"]["questions"] == localrag.EVAL_STARTER_NOTES + 2
    assert "is not indexed" not in capfd.readouterr().err


def test_eval_init_with_several_vaults_indexed_asks_which(env, ingested, tmp_path, capfd):
    config, _vault, _ = ingested
    other = tmp_path / "other"
    write_vault(other, {"a.md": "# Alpha\n\nAlpha notes.\n"})
    localrag.ingest(config, other)
    code, _ = run_cli("eval", "init", "--questions", str(tmp_path / "q.yaml"))
    assert code == 0 and "placeholders: 2 vaults are indexed, pass --vault PATH to draft from one" in \
        capfd.readouterr().err


def test_eval_without_any_questions_file_points_at_eval_init(env, capfd):
    code, _ = run_cli("eval")
    assert code == localrag.EXIT_USAGE and "localrag eval init" in capfd.readouterr().err


def test_doctor_reports_and_exits_by_its_problems(env, capfd):
    code, out = run_cli("doctor", "--json")
    report = json.loads(out)
    assert code == 0, report["problems"]
    assert report["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert report["pyz"] is None and report["database"]["ok"] and report["database"]["kind"] == "external"
    assert all(state["loaded"] for state in report["native"].values())
    assert report["folders"]["data (LOCALRAG_HOME)"]["path"] == env["LOCALRAG_HOME"]
    assert report["network"] == {"needed": False, "needed_for": []}
    assert report["local_qwen3"]["configured"] is False


FOLDERS_IN_FILES = [   # (LOCALRAG_HOME, EMBEDDING_CACHE_DIR) under tmp_path, where "homefile" is a file
    ("homefile", "homefile/embeddings"), ("home", "homefile"), ("home", "homefile/cache"), ("home", "cache")]


@pytest.mark.parametrize("home, cache", FOLDERS_IN_FILES, ids=["/".join(f) for f in FOLDERS_IN_FILES])
def test_doctor_calls_a_file_where_a_folder_belongs_not_a_folder(env, tmp_path, capsys, home, cache):
    """doctor said `data (LOCALRAG_HOME): /x/homefile (writable)` and then failed the database line: "is a file,
    not a folder" (outside review).  `config` lists such a LOCALRAG_HOME as a problem and falls back to the default
    (see test_config); doctor itself says it of any folder it is given."""
    import argparse
    import dataclasses
    (tmp_path / "homefile").write_text("x")
    cfg = localrag.load_config()
    # the embedded database where its start fails on the file (as in the review); else the test's, so no server starts
    cfg = dataclasses.replace(cfg, database_url="" if home == "homefile" else cfg.database_url,
                              localrag_home=tmp_path / home, embedding_cache_dir=tmp_path / cache)
    code = localrag._cmd_doctor(cfg, argparse.Namespace(json=False))
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("folder ")]

    def state(path):
        if path == "homefile":
            return "NOT a folder: it is a file"
        return f"NOT a folder: {tmp_path / 'homefile'} is a file" if path.startswith("homefile/") else "writable"
    assert lines == [f"folder          data (LOCALRAG_HOME): {tmp_path / home} ({state(home)})",
                     f"folder          embedding cache (EMBEDDING_CACHE_DIR): {tmp_path / cache} ({state(cache)})"]
    report = localrag.doctor(cfg) if home == "homefile" else None
    if report:
        assert code == localrag.EXIT_CONFIG
        assert report["folders"]["data (LOCALRAG_HOME)"] == {"path": str(tmp_path / home), "writable": False,
                                                            "file_in_the_way": str(tmp_path / "homefile")}
        assert [p["message"].split(";")[0] for p in report["problems"]] == [   # not also "is not writable"
            f"LOCALRAG_HOME={tmp_path / home} is a file, not a folder"]
    assert (tmp_path / "homefile").read_text() == "x" and not (tmp_path / "home" / "pgdata").exists()


@pytest.mark.parametrize("cache", ["homefile", "homefile/cache"])
def test_an_embedding_cache_in_a_file_is_told_how_to_fix_it_not_to_warm_up(env, tmp_path, monkeypatch, capfd,
                                                                            cache):
    """EMBEDDING_CACHE_DIR at or under a file: doctor said "NOT a folder", then hinted to run `embeddings warmup`,
    which failed the same way ("cannot be created (Not a directory)"); `embeddings status` and `unpack` as well.
    Each now says what fixes it: point the setting at a folder, or move the file away."""
    (tmp_path / "homefile").write_text("x")
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
    monkeypatch.delenv("EMBEDDING_MODEL")
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(tmp_path / cache))
    (tmp_path / "model.tar").write_bytes(b"not read: the cache folder is refused first")
    where = "is a file" if cache == "homefile" else f"is under {tmp_path / 'homefile'}, which is a file"
    fix = (f"EMBEDDING_CACHE_DIR {tmp_path / cache} {where}, not a folder: no model can be found or put there "
           f"(`embeddings warmup` and `embeddings unpack` fail on it too); set EMBEDDING_CACHE_DIR to a folder")
    code, out = run_cli("doctor", "--json")
    report = json.loads(out)
    messages = [p["message"] for p in report["problems"]]
    assert code == localrag.EXIT_EMBEDDING and any(m.startswith(fix) for m in messages), messages
    assert not any("embeddings warmup`;" in m or "run `localrag embeddings warmup`" in m for m in messages), messages
    assert not any("warmup" in n for n in report["network"]["needed_for"]), report["network"]
    code, out = run_cli("embeddings", "status", "--json")
    status = json.loads(out)
    assert status["hint"].startswith(fix) and status["pieces"]["model"]["hint"].startswith(fix), status
    for args in (("embeddings", "warmup", "--json"), ("embeddings", "unpack", str(tmp_path / "model.tar"), "--json")):
        code, out = run_cli(*args)
        assert code == localrag.EXIT_EMBEDDING and json.loads(out)["error"]["message"].startswith(fix), (args, out)
    assert (tmp_path / "homefile").read_text() == "x"
    capfd.readouterr()


def test_doctor_names_what_needs_the_network_and_what_fails(env, monkeypatch, capfd):
    monkeypatch.setenv("LLM_PROVIDER", "openai-compatible")
    monkeypatch.setenv("LLM_BASE_URL", "https://llm.example.com/v1")
    monkeypatch.setenv("DATABASE_URL", "postgresql://u:pw-SENTINEL@127.0.0.1:1/nothing_test")
    code, out = run_cli("doctor", "--json")
    report = json.loads(out)
    assert code == localrag.EXIT_DB and report["problems"][0]["code"] in ("database_unavailable", "database_refused")
    assert report["network"]["needed_for"] == ["answers: LLM_PROVIDER=openai-compatible calls llm.example.com"]
    assert "pw-SENTINEL" not in out + capfd.readouterr().err


def test_doctor_and_llm_check_say_that_llm_settings_go_unused_under_the_fake_provider(env, monkeypatch, capfd):
    """LLM_BASE_URL, LLM_MODEL and LLM_API_KEY given, LLM_PROVIDER left at fake (the .env.sample's): doctor read
    "llm  fake gpt-4o at https://api.example.com/v1: settings ok" and `llm check` "reachable", while every answer
    came from the extractive answerer.  A note, not a problem: the exit code stays 0."""
    monkeypatch.setenv("LLM_BASE_URL", "https://api.example.com/v1")
    monkeypatch.setenv("LLM_MODEL", "gpt-4o")
    monkeypatch.setenv("LLM_API_KEY", "sk-SENTINEL")
    says = "LLM_BASE_URL is set but unused: LLM_PROVIDER is fake"
    code, out = run_cli("doctor", "--json")
    assert code == 0 and says in json.loads(out)["llm"]["note"]
    code, out = run_cli("doctor")
    assert code == 0 and f"                ({says}" in out
    code, out = run_cli("llm", "check", "--json")
    assert code == 0 and says in json.loads(out)["note"]
    assert run_cli("llm", "check")[0] == 0 and f"note: {says}" in capfd.readouterr().err
    monkeypatch.delenv("LLM_BASE_URL")
    assert "note" not in json.loads(run_cli("doctor", "--json")[1])["llm"]
    assert "sk-SENTINEL" not in "".join(capfd.readouterr())


def test_doctor_checks_the_llm_settings_and_the_embeddings_api_the_configuration_needs(env, monkeypatch, capfd):
    """`LLM_PROVIDER=openai-compatible localrag doctor` with no LLM_BASE_URL / LLM_MODEL said "ready" (exit 0) while
    every ask exits 8; a remote EMBEDDING_BASE_URL was neither named as a network need nor probed."""
    from embeddings_stub import EmbeddingsStub
    from llm_stub import closed_port
    monkeypatch.setenv("LLM_PROVIDER", "openai-compatible")
    code, out = run_cli("doctor", "--json")
    report = json.loads(out)
    assert (code, report["problems"][0]["code"]) == (localrag.EXIT_LLM, "llm_config_missing")
    assert report["llm"]["ok"] is False and "LLM_BASE_URL, LLM_MODEL" in report["llm"]["error"]
    assert run_cli("doctor")[0] == localrag.EXIT_LLM
    assert "problem [llm_config_missing]" in capfd.readouterr().err
    monkeypatch.setenv("LLM_PROVIDER", "fake")
    with EmbeddingsStub() as stub:
        for key, value in {"EMBEDDING_PROVIDER": "openai-compatible", "EMBEDDING_MODEL": "stub-e5",
                           "EMBEDDING_BASE_URL": stub.base_url}.items():
            monkeypatch.setenv(key, value)
        code, out = run_cli("doctor", "--json")
        report = json.loads(out)
        assert code == 0 and report["embeddings_endpoint"]["ok"] and report["llm"]["ok"], report["problems"]
        assert report["network"]["needed_for"] == []   # the stub listens on loopback
    monkeypatch.setenv("EMBEDDING_BASE_URL", f"http://127.0.0.1:{closed_port()}/v1")
    code, out = run_cli("doctor", "--json")
    report = json.loads(out)
    assert (code, report["problems"][0]["code"]) == (localrag.EXIT_EMBEDDING, "embedding_model_unavailable")
    monkeypatch.setenv("EMBEDDING_BASE_URL", "https://embeddings.example.invalid/v1")
    monkeypatch.setenv("EMBEDDING_TIMEOUT_SECONDS", "5")
    code, out = run_cli("doctor", "--json")
    assert code == localrag.EXIT_EMBEDDING and json.loads(out)["network"]["needed_for"] == [
        "embeddings (ingest, search, ask): EMBEDDING_PROVIDER=openai-compatible calls embeddings.example.invalid"]
    capfd.readouterr()


# --- scripts (issue 12): stdin, --batch, argument errors as JSON ------------------------------------------------------

def _cli(*args, stdin: str = ""):
    return subprocess.run([sys.executable, "-m", "localrag", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT)


def test_ask_and_search_read_stdin(ingested):
    question = "客户 P1 工单应该怎么升级？"
    proc = _cli("ask", "-", "--json", stdin=question + "\n")
    assert proc.returncode == 0, proc.stderr
    from_stdin, from_arg = json.loads(proc.stdout), json.loads(_cli("ask", question, "--json").stdout)
    assert from_stdin.pop("answer_id") + 1 == from_arg.pop("answer_id")   # each ask is its own answer record
    assert from_stdin == from_arg
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


def test_an_interrupted_batch_keeps_its_output_json_lines_and_says_how_far_it_got(ingested):
    """SIGTERM between two lines of `ask --batch - --json`: stdout stays JSON Lines (the error body was an indented,
    multi-line object after the result lines) and stderr says how many lines were answered."""
    proc = subprocess.Popen([sys.executable, "-m", "localrag", "ask", "--batch", "-", "--json"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    proc.stdin.write(json.dumps({"question": "客户 P1 工单应该怎么升级？"}, ensure_ascii=False) + "\n")
    proc.stdin.flush()
    first = proc.stdout.readline()   # answered and written; the batch now waits for its next line
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    lines = [first, *out.splitlines()]
    assert json.loads(lines[0])["line"] == 1 and len(lines) == 2
    body = json.loads(lines[1])["error"]
    assert body["code"] == "interrupted" and body["details"]["batch"] == {"answered": 1, "failed": 0}
    assert "interrupted (SIGTERM): 1 line(s) answered and written before the stop, 0 failed" in err


@pytest.mark.parametrize("stdin_encoding", [None, "utf-8:strict"])
def test_stdin_text_that_is_not_utf8_is_refused_as_an_argument_is(ingested, stdin_encoding):
    """`printf 'P1 \\xff\\xfe 升级' | localrag ask - --json` was internal_error (exit 1: the request body and the
    record could not hold the bytes stdin decoded to surrogates), search answered with them; an argument with the
    same bytes was already invalid_request naming it.  The same for a strict stdin (PYTHONIOENCODING)."""
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    if stdin_encoding:
        env["PYTHONIOENCODING"] = stdin_encoding
    before = localrag.answer_history(localrag.load_config())["total"]
    for command, field in (("ask", "question"), ("search", "query"), ("tickets", "question")):
        args = ["tickets", "draft", "-"] if command == "tickets" else [command, "-"]
        proc = subprocess.run([sys.executable, "-m", "localrag", *args, "--json"], cwd=ROOT, env=env,
                              input=b"P1 \xff\xfe " + "升级".encode(), capture_output=True)
        assert proc.returncode == localrag.EXIT_USAGE, proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert (error["code"], error["details"]["field"]) == ("invalid_request", field)
        assert error["message"].startswith(f"{field.upper()} (read from stdin) is not valid UTF-8 text")
        assert "P1 \\xff\\xfe 升级" in error["message"] and b"Traceback" not in proc.stderr
    assert localrag.answer_history(localrag.load_config())["total"] == before


@pytest.mark.parametrize("via", ["file", "stdin", "strict stdin"])
def test_a_batch_line_that_is_not_utf8_fails_alone(ingested, tmp_path, via):
    """One byte 0xff on line 3 ended the whole batch with internal_error (exit 1), no line answered or numbered.
    A UTF-8 BOM (a file saved by a Windows tool) failed line 1, and a JSON array was "the request body"."""
    question = json.dumps({"question": "客户 P1 工单应该怎么升级？"}, ensure_ascii=False).encode()
    data = b"\xef\xbb\xbf" + question + b"\n[1]\n" + b'{"question": "P1 \xff"}\n' + question + b"\n"
    batch = tmp_path / "b.jsonl"
    batch.write_bytes(data)
    env = {**os.environ, "LC_ALL": "C.UTF-8", **({"PYTHONIOENCODING": "utf-8:strict"} if via == "strict stdin" else {})}
    args = ["ask", "--batch", str(batch) if via == "file" else "-", "--json"]
    proc = subprocess.run([sys.executable, "-m", "localrag", *args], cwd=ROOT, env=env,
                          input=b"" if via == "file" else data, capture_output=True)
    assert proc.returncode == localrag.EXIT_PARTIAL, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [o["line"] for o in out] == [1, 2, 3, 4]
    assert out[0]["mode"] == out[3]["mode"] == "rag"
    assert out[1]["error"]["message"].startswith("line 2 is a JSON list, not an object")
    assert out[2]["error"]["details"]["field"] == "line"
    assert out[2]["error"]["message"].startswith('line 3 is not valid UTF-8 text ("{"question": "P1 \\xff"}"')
    assert b"2/4 line(s) answered, 2 failed" in proc.stderr


def test_batch_lines_are_read_strictly(ingested, tmp_path):
    """A line naming "question" twice had been answered for the last one; a line nested past Python's recursion
    limit ended the whole batch with internal_error (exit 1), the lines after it unanswered.  Each is that line's
    invalid_request and the batch goes on."""
    lines = ['{"question": "P1", "question": "客户 P1 工单应该怎么升级？"}', '{"question": "P1", "top_k": NaN}',
             "[" * 100_000, json.dumps({"question": "客户 P1 工单应该怎么升级？"}, ensure_ascii=False)]
    batch = tmp_path / "strict.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out = run_cli("ask", "--batch", str(batch))
    results = [json.loads(line) for line in out.splitlines()]
    assert code == localrag.EXIT_PARTIAL and [r["line"] for r in results] == [1, 2, 3, 4]
    for r, says in zip(results, ("line 1 is not JSON (duplicate key 'question': line 1 column 20 (char 19))",
                                 "line 2 is not JSON (NaN is not JSON: line 1 column 29 (char 28))",
                                 "line 3 nests JSON too deeply")):
        assert r["error"]["details"]["field"] == "line" and r["error"]["message"].startswith(says), r
    assert results[3]["mode"] == "rag"


def test_json_output_is_utf8_when_a_file_name_is_not(tmp_path):
    """`--batch` naming a file whose name has the byte 0xff (surrogateescape: a lone surrogate) that cannot be read:
    the --json error body quoting the name wrote the raw byte, so stdout was not UTF-8 and `jq` failed on it."""
    name = os.fsencode(str(tmp_path)) + b"/q\xff.jsonl"
    env = {**os.environ, "LC_ALL": "C.UTF-8"}
    proc = subprocess.run([sys.executable, "-m", "localrag", "ask", "--batch", name, "--json"], cwd=ROOT, env=env,
                          capture_output=True)
    assert proc.returncode == localrag.EXIT_USAGE, proc.stderr
    error = json.loads(proc.stdout.decode("utf-8"))["error"]   # strict UTF-8
    assert error["details"]["field"] == "batch" and "q\udcff.jsonl" in error["message"]
    assert b"q\\udcff.jsonl" in proc.stdout
    assert localrag._json_text({"k\udcff": ["\ud800x"]}) == '{"k\\udcff": ["\\ud800x"]}'


def test_ask_batch_applies_the_command_line_flags_to_every_line(ingested, tmp_path, capfd):
    """--top-k, --path, --tag, --vault, --retrieval and --fallback were accepted with --batch and ignored: a batch
    scoped to one vault was answered from all of them, exit 0.  They now apply to every line, a line's own field
    wins; a bad flag fails once, before any line; --stream (a batch writes whole JSON lines) is refused."""
    config, vault, _ = ingested
    question = "客户 P1 工单应该怎么升级？"
    batch = tmp_path / "b.jsonl"
    batch.write_text("\n".join(json.dumps(line, ensure_ascii=False) for line in (
        {"question": question}, {"question": question, "top_k": 3}, {"question": question, "path": None},
        {"question": "今天上海天气如何？"}, {"question": "今天上海天气如何？", "fallback": False})) + "\n",
        encoding="utf-8")

    def batch_run(*flags):
        code, out = run_cli("ask", "--batch", str(batch), *flags)
        return code, [json.loads(line) for line in out.splitlines()]

    code, out = batch_run("--top-k", "1", "--fallback")
    assert code == 0 and [len(o["citations"]) for o in out[:3]] == [1, 3, 1]
    assert "fallback was requested" in out[3]["reason"] and "fallback was requested" not in out[4]["reason"]
    code, out = batch_run("--path", "no-such-folder/", "--retrieval", "keyword")
    assert code == 0 and [o["mode"] for o in out[:3]] == ["no_answer", "no_answer", "rag"]
    assert "no indexed note matches the scope" in out[0]["reason"] and out[2]["retrieval"] == "keyword"
    code, out = batch_run("--vault", str(vault))
    assert code == 0 and out[0]["mode"] == "rag"
    capfd.readouterr()
    for flags, exit_code, field in ((["--vault", str(tmp_path / "nope")], localrag.EXIT_VAULT, None),
                                    (["--top-k", "21"], localrag.EXIT_USAGE, "top_k"),
                                    (["--stream"], localrag.EXIT_USAGE, "stream")):
        code, out = batch_run(*flags)
        assert (code, out) == (exit_code, []), flags
        assert capfd.readouterr().err.count("error [") == 1
        if field:
            code, out = run_cli("ask", "--batch", str(batch), *flags, "--json")
            assert out.count("\n") == 1 and json.loads(out)["error"]["details"]["field"] == field
            capfd.readouterr()


@pytest.mark.parametrize("args", [["search", "--top-k", "x", "--json"], ["search", "--json"],
                                  ["ask", "q", "--no-such-flag", "--json"], ["frobnicate", "--json"]])
def test_argument_errors_print_the_error_document_with_json(args):
    code, out = run_cli(*args)
    assert code == localrag.EXIT_USAGE
    err = json.loads(out)["error"]
    assert err["code"] == "invalid_request" and err["message"] and "usage" in err["details"]


@pytest.mark.parametrize("args, field, says", [
    (["search", "x", "--top-k", "2.5"], "top_k", "'2.5' is not an integer from 1 to 20"),
    (["ask", "x", "--top-k", "0"], "top_k", "0 is out of range: it must be from 1 to 20"),
    (["eval", "--top-k", "21"], "top_k", "21 is out of range: it must be from 1 to 20"),
    (["search", "--json"], "query", "the following arguments are required: query"),
    (["serve", "--port", "x"], "port", "'x' is not an integer from 0 to 65535")])
def test_argument_errors_name_their_field_and_range(args, field, says):
    """Under --json an argument error had details.usage but no details.field (HTTP errors name theirs), and
    `--top-k 2.5` said "invalid int value" without the 1..20 that `--top-k 0` gave."""
    code, out = run_cli(*args, "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_USAGE and err["details"]["field"] == field and says in err["message"], err


@pytest.mark.parametrize("args, says", [
    (["serve", "--port", "70000"], "--port: 70000 is out of range: it must be from 0 to 65535"),
    (["serve", "--port", "-5"], "--port: -5 is out of range"),
    (["serve", "--grace", "-1"], "--grace: -1 is out of range: it must be a finite number, 0 or more"),
    (["serve", "--grace", "inf"], "--grace: inf is out of range: it must be a finite number, 0 or more"),
    (["eval", "--min-hit-at-k", "1.5"], "--min-hit-at-k: 1.5 is out of range: it must be from 0 to 1"),
    (["eval", "--min-rejection", "nan"], "--min-rejection: nan is out of range"),
    (["serve", "--port", "http"], "--port: 'http' is not an integer"),
    # an --offset's range was written "from 0 to 4.61169e+18" (:g), and history's had no upper bound at all
    (["tickets", "list", "--offset", "-1"], "--offset: -1 is out of range: it must be from 0 to 4611686018427387904"),
    (["tickets", "list", "--offset", str(2 ** 62 + 1)], f"it must be from 0 to {2 ** 62}"),
    (["history", "--offset", str(10 ** 30)], f"--offset: {10 ** 30} is out of range: it must be from 0 to {2 ** 62}"),
    (["history", "--offset", "x"], f"--offset: 'x' is not an integer from 0 to {2 ** 62}")])
def test_impossible_numbers_are_usage_errors(args, says):
    """A port outside 0..65535 was an internal error (OverflowError from bind), and a threshold above 1 an eval
    that could never pass: both are usage errors naming the range, before anything starts."""
    code, out = run_cli(*args, "--json")
    assert code == localrag.EXIT_USAGE and says in json.loads(out)["error"]["message"]


@pytest.mark.parametrize("args, field", [
    (["show", "--list", "--limit", "\u0663"], "limit"),            # Arabic-Indic three
    (["show", "x.md", "--max-chars", "\uff13\uff10"], "max_chars"),  # fullwidth 30
    (["show", "x.md", "--char-offset", "\u0665"], "char_offset"),
    (["history", "--limit", "\uff13"], "limit"),
    (["search", "x", "--top-k", "\u0663"], "top_k"),
    (["serve", "--port", "\uff18\uff10\uff10\uff10"], "port"),
    (["eval", "--min-hit-at-k", "\u0660.\u0665"], "min_hit_at_k"),
    (["tickets", "draft", "q", "--answer-id", "\u0663"], "answer_id")])
def test_numbers_in_other_digits_are_refused(args, field):
    """argparse's int() and float() read '\u0663' and '\uff13' as 3: `--limit \u0663` listed three notes.  A number is
    written with the digits 0-9; anything else is a usage error naming the option."""
    code, out = run_cli(*args, "--json")
    err = json.loads(out)["error"]
    assert code == localrag.EXIT_USAGE and err["details"]["field"] == field, err
    assert "write it with the digits 0-9" in err["message"], err


@pytest.mark.parametrize("args", [["history", "--limit", "1_0"], ["show", "--list", "--offset", "1_0"]])
def test_numbers_with_underscores_are_refused(args):
    code, out = run_cli(*args, "--json")
    assert code == localrag.EXIT_USAGE and "is not an integer" in json.loads(out)["error"]["message"]


def test_argument_errors_without_json_keep_stdout_empty():
    proc = _cli("search", "--top-k", "x")
    assert proc.returncode == localrag.EXIT_USAGE and proc.stdout == ""
    assert "usage: localrag search" in proc.stderr and "error [invalid_request]" in proc.stderr


# --- vaults ---------------------------------------------------------------------------------------------------------

def test_a_vault_inside_another_indexed_vault_is_named_on_ingest(ingested, tmp_path):
    """`ingest ~/Vaults` after `ingest ~/Vaults/Team` indexed Team's notes twice without a word, and search then
    showed each of them twice (a field walkthrough: obsidian-help after obsidian-help/en)."""
    import shutil
    from conftest import SAMPLE_VAULT
    config, _vault, _first = ingested
    outer = tmp_path / "outer"
    inner = outer / "team"
    shutil.copytree(SAMPLE_VAULT / "hr", inner)
    (outer / "top.md").write_text("# Top\n\nA note of the outer vault only.\n", encoding="utf-8")
    first = localrag.ingest(config, inner)
    assert not [w for w in first["warnings"] if "indexed twice" in w["warning"]]
    holds = [w for w in localrag.ingest(config, outer)["warnings"] if "indexed twice" in w["warning"]]
    assert [w["path"] for w in holds] == [str(inner.resolve())], holds
    assert "lies inside this one" in holds[0]["warning"]
    assert f"localrag vaults rm {inner.resolve()}" in holds[0]["warning"]
    assert f"localrag vaults rm {outer.resolve()}" in holds[0]["warning"]
    # ... and the inner one, ingested again, names the vault that holds it
    again = [w for w in localrag.ingest(config, inner)["warnings"] if "indexed twice" in w["warning"]]
    assert [w["path"] for w in again] == [str(outer.resolve())] and "holds this one" in again[0]["warning"]
    # a sibling whose name starts like the vault's ("team" and "team2") is no nested vault
    sibling = outer.parent / "outer2"
    shutil.copytree(SAMPLE_VAULT / "hr", sibling)
    assert not [w for w in localrag.ingest(config, sibling)["warnings"] if "indexed twice" in w["warning"]]


def test_vaults_lists_and_removes_one_vault(ingested, tmp_path, capfd):
    import shutil
    from conftest import SAMPLE_VAULT
    config, vault, first = ingested
    other = tmp_path / "other"
    shutil.copytree(SAMPLE_VAULT / "hr", other)
    localrag.ingest(config, other)
    code, out = run_cli("vaults", "--json")
    listed = {v["vault_path"]: v for v in json.loads(out)["vaults"]}
    assert code == 0 and set(listed) == {str(vault.resolve()), str(other.resolve())}
    mine = listed[str(vault.resolve())]
    assert mine["documents"] == first["documents_added"] and mine["chunks"] == first["chunks_written"]
    assert mine["last_run"]["status"] == "success" and mine["exists_on_disk"] is True
    code, out = run_cli("vaults")
    assert code == 0 and str(other.resolve()) in out and "documents" in out

    # not a terminal and no --yes: refused, nothing removed
    code, out = run_cli("vaults", "rm", str(vault), "--json")
    message = json.loads(out)["error"]["message"]
    assert code == localrag.EXIT_USAGE and "--yes" in message and f"({first['documents_added']} documents" in message
    assert len(json.loads(run_cli("vaults", "--json")[1])["vaults"]) == 2

    shutil.rmtree(vault)  # the folder may be gone already: the stored path still names the vault
    # ... and the next ingest of another vault says so, with the command that removes it (a moved vault's old
    # copy still answered, cited under a path that no longer opens)
    gone = [w for w in localrag.ingest(config, other)["warnings"] if w["path"] == str(vault.resolve())]
    assert len(gone) == 1 and "no longer exists" in gone[0]["warning"]
    assert f"localrag vaults rm {vault.resolve()}" in gone[0]["warning"]
    code, out = run_cli("vaults", "rm", str(vault), "--yes", "--json")
    removed = json.loads(out)
    assert code == 0 and removed["documents_removed"] == first["documents_added"] and removed["runs_removed"] >= 1
    with localrag.Store.open(config) as s:
        assert s.run("SELECT count(*) FROM documents WHERE vault_path = :v", v=str(vault.resolve()))[0][0] == 0
        assert s.run("SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id "
                     "WHERE d.id IS NULL")[0][0] == 0
        assert s.run("SELECT count(*) FROM embeddings e LEFT JOIN chunks c ON c.id = e.chunk_id "
                     "WHERE c.id IS NULL")[0][0] == 0
        assert s.run("SELECT count(*) FROM documents WHERE vault_path = :v", v=str(other.resolve()))[0][0] > 0
    assert [v["vault_path"] for v in json.loads(run_cli("vaults", "--json")[1])["vaults"]] == [str(other.resolve())]
    code, out = run_cli("vaults", "rm", str(vault), "--yes", "--json")
    assert code == localrag.EXIT_VAULT and json.loads(out)["error"]["code"] == "vault_not_indexed"
    # ... and without --yes: a path that is not indexed is said to be so, not offered for deletion
    code, out = run_cli("vaults", "rm", str(vault), "--json")
    assert code == localrag.EXIT_VAULT and json.loads(out)["error"]["code"] == "vault_not_indexed"


def test_db_status_lists_a_vault_whose_ingest_found_no_note(ingested, tmp_path):
    config, vault, _ = ingested
    empty = tmp_path / "empty-vault"
    empty.mkdir()
    localrag.ingest(config, empty)
    listed = {v["vault_path"]: v["documents"] for v in localrag.db_status(config)["vaults"]}
    assert listed[str(empty.resolve())] == 0 and listed[str(vault.resolve())] > 0
    assert set(listed) == {v["vault_path"] for v in localrag.vaults_list(config)["vaults"]}


def test_vaults_rm_prompts_on_a_terminal(ingested, monkeypatch, capsys):
    import io
    config, vault, _ = ingested

    class Tty(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stdin", Tty("n\n"))
    assert localrag.main(["vaults", "rm", str(vault)]) == 0
    assert "nothing removed" in capsys.readouterr().err
    assert json.loads(run_cli("vaults", "--json")[1])["vaults"][0]["documents"] > 0
    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    assert localrag.main(["vaults", "rm", str(vault)]) == 0
    assert "documents" in capsys.readouterr().err
    assert json.loads(run_cli("vaults", "--json")[1])["vaults"] == []


def test_vaults_rm_refuses_while_an_ingest_holds_the_vault(ingested):
    config, vault, _ = ingested
    with localrag.Store.open(config) as s:
        s.run("SELECT pg_advisory_lock(727274002, hashtext(:v))", v=str(vault.resolve()))
        code, out = run_cli("vaults", "rm", str(vault), "--yes", "--json")
        s.run("SELECT pg_advisory_unlock(727274002, hashtext(:v))", v=str(vault.resolve()))
    assert code == localrag.EXIT_BUSY and json.loads(out)["error"]["code"] == "ingest_in_progress"


# --- progress -------------------------------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_progress_on_a_terminal_is_one_line_fitting_the_width(monkeypatch):
    import io
    clock = Clock()
    monkeypatch.setattr(localrag.time, "monotonic", clock)
    monkeypatch.setenv("COLUMNS", "60")
    out = io.StringIO()
    p = localrag._ProgressPrinter("tty", out)
    p("scan", 0, 0)
    for done in range(0, 6280, 10):
        clock.now += 0.01
        p("parse+embed", done, 6279)
    p.close()
    frames = out.getvalue().split("\r")
    assert "\n" not in out.getvalue()  # rewritten in place, never scrolled
    assert all(len(f.replace("\x1b[K", "")) <= 59 for f in frames)
    assert 40 < len(frames) < 120  # at most ten redraws a second
    last = [f for f in frames if "parse+embed" in f][-1]
    assert "%" in last and "files/s" in last and "ETA" in last and "/6,279 files" in last


def test_progress_in_a_log_is_every_5s_or_10_percent_whichever_is_rarer(monkeypatch):
    import io
    clock = Clock()
    monkeypatch.setattr(localrag.time, "monotonic", clock)
    out = io.StringIO()
    p = localrag._ProgressPrinter("log", out)
    for done in range(1000):  # fast: 10% every 0.5 s, so the 5 s rule decides
        clock.now += 0.005
        p("parse+embed", done, 1000)
    fast = out.getvalue().splitlines()
    assert len(fast) == 1  # the phase start only: 5 s never passed
    out.truncate(0), out.seek(0)
    p = localrag._ProgressPrinter("log", out)
    for done in range(1000):  # slow: 5 s pass every 5 files, so the 10% rule decides
        clock.now += 1.0
        p("parse+embed", done, 1000)
    slow = out.getvalue().splitlines()
    assert 9 <= len(slow) <= 11 and all("ETA" in line for line in slow[1:])
    out.truncate(0), out.seek(0)
    p = localrag._ProgressPrinter("log", out)
    for done in range(6279):  # batches written every 200 files do not each start a line
        clock.now += 0.01
        p("parse+embed", done, 6279)
        if done % 200 == 0:
            p("write", done, 6279)
    assert len(out.getvalue().splitlines()) <= 14


def test_progress_in_a_log_says_when_a_phase_completes(monkeypatch):
    """A short run's log ended on "parse+embed: 0/173 files 0%" (an outside walkthrough read it as a stall): the
    phase's completion is a line too, once."""
    import io
    clock = Clock()
    monkeypatch.setattr(localrag.time, "monotonic", clock)
    out = io.StringIO()
    p = localrag._ProgressPrinter("log", out)
    for done in range(174):
        clock.now += 0.005
        p("parse+embed", done, 173)
    p("parse+embed", 173, 173)   # said again: not a second line
    assert out.getvalue().splitlines() == ["parse+embed: 0/173 files   0%",
                                           "parse+embed: 173/173 files 100%  200 files/s  ETA 0s"]


def test_progress_rate_of_a_per_batch_phase_counts_from_its_batch(monkeypatch):
    """"embed" runs once per batch, 0..n each time: its rate (and ETA) counts from the batch's start, not from the
    first batch's (10 batches of 100 chunks at 100 chunks/s with a 9 s pause between them read 10 chunks/s)."""
    import io
    clock = Clock()
    monkeypatch.setattr(localrag.time, "monotonic", clock)
    out = io.StringIO()
    p = localrag._ProgressPrinter("tty", out)
    for batch in range(10):
        clock.now += 9.0   # parsing and writing between the batches
        for done in range(0, 101, 10):
            p("embed", done, 100)
            clock.now += 0.1
    started = clock.now - 1.1   # the last batch's first call
    assert "100 chunks/s" in p.line("embed", 80, 100, started + 0.8)


def test_progress_rate_below_ten_keeps_a_decimal():
    """A slow model's rate reads as measured ("1.4 chunks/s", not "1 chunks/s"); from 10 up, whole numbers."""
    import io
    p = localrag._ProgressPrinter("log", io.StringIO())
    p.starts["embed"] = (100.0, 0)
    assert "  1.4 chunks/s  ETA 1m10s" in p.line("embed", 14, 112, 110.0)
    assert "  0.5 chunks/s" in p.line("embed", 5, 112, 110.0)
    assert "  10 chunks/s" in p.line("embed", 100, 1000, 110.0)
    assert "  9.9 chunks/s" in p.line("embed", 99, 1000, 110.0)


def test_ingest_progress_flags(ingested, capfd):
    config, vault, _ = ingested
    code, _ = run_cli("ingest", str(vault), "--quiet")
    assert code == 0 and capfd.readouterr().err == ""
    code, _ = run_cli("ingest", str(vault), "--progress", "never")
    err = capfd.readouterr().err
    assert "scan" not in err and "files found" in err
    code, _ = run_cli("ingest", str(vault), "--progress", "always")
    err = capfd.readouterr().err
    assert "\r" in err and "files found" in err
    code, _ = run_cli("ingest", str(vault))  # auto, stderr not a terminal: plain lines
    err = capfd.readouterr().err
    assert "\r" not in err and err.splitlines()[0] == "scan…"


def test_progress_on_a_terminal_erases_the_line_with_a_real_escape(ingested, capfd):
    """On a terminal the in-place line read `analyze…\\x1b[K files committed\\x1b[Kfiles/s  ETA 0s\\x1b[K`: stderr
    escapes every control character (a vault's ESC must not reach the terminal), the progress line's own erase
    included.  localrag's own ESC [ K goes out as is; a vault's control characters are still escaped."""
    import io
    config, vault, _ = ingested
    code, _ = run_cli("ingest", str(vault), "--progress", "always")
    err = capfd.readouterr().err
    assert code == 0 and "\r\x1b[K" in err and "\\x1b" not in err and err.count("\x1b") == err.count("\x1b[K")
    talk = localrag._TalkStream(io.StringIO())
    talk.write("warning: heading \x1b]0;owned\x07 skipped")
    assert talk.stream.getvalue() == "warning: heading \\x1b]0;owned\\x07 skipped"


# --- small things a fresh-eyes walkthrough found --------------------------------------------------------------------

def test_help_names_every_mcp_tool_and_what_exit_13_covers():
    tools = _cli("mcp", "--help").stdout
    assert all(name in tools for name in localrag._mcp_tools())    # draft_ticket was missing
    assert "a ticket (`localrag tickets show ID`)" in _cli("--help").stdout


def test_a_file_as_localrag_home_and_a_yaml_error_say_where(env, monkeypatch, tmp_path, capfd):
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("LOCALRAG_HOME", str(home))
    assert run_cli("search", "x")[0] == localrag.EXIT_CONFIG
    assert f"LOCALRAG_HOME={home} is a file, not a folder" in capfd.readouterr().err
    monkeypatch.undo()
    broken = tmp_path / "q.yaml"
    broken.write_text('- id: a\n  question: "unclosed\n- id: b\n', encoding="utf-8")
    with pytest.raises(localrag.InvalidRequest, match=r"is not readable YAML \(line \d+, column \d+\): "):
        localrag.load_question_set(broken)


def test_history_show_prints_latency_in_milliseconds(ingested):
    localrag.ask(ingested[0], "客户 P1 工单应该怎么升级？")
    record_id = localrag.answer_history(ingested[0], 1)["answers"][0]["id"]
    code, out = run_cli("history", "show", str(record_id))
    line = next(line for line in out.splitlines() if line.startswith("latency"))
    assert code == 0 and re.fullmatch(r"latency      retrieval [\d.]+ ms, model [\d.]+ ms, total [\d.]+ ms", line)
    assert "finish_reason stop" in out and "None" not in out.split("request")[0]


# --- the standard streams as a script leaves them (operator review) -------------------------------------------------

def _sh(redirects: str, *args: str, stdin: str | None = None):
    """Run the CLI with shell redirections applied (`2>&-` closes stderr, `2>/dev/full` makes it fail)."""
    script = f'exec "$@" {redirects}'
    return subprocess.run(["bash", "-c", script, "bash", sys.executable, "-m", "localrag", *args], input=stdin,
                          capture_output=True, text=True, cwd=ROOT)


def test_a_closed_or_full_stderr_never_fails_a_command(ingested):
    """`ingest --json 2>&-` exited 1 with nothing on stdout and nothing ingested, and an error under
    `2>/dev/full` lost its body and its exit code: writing talk must never fail a command."""
    config, vault, _ = ingested
    (vault / "new note.md").write_text("# New\n\nwritten after the first ingest\n", encoding="utf-8")
    proc = _sh("2>&-", "ingest", str(vault), "--json", "--progress", "always")
    assert proc.returncode == 0 and json.loads(proc.stdout)["documents_added"] == 1
    proc = _sh("2>/dev/full", "search", "x", "--vault", "/nope", "--json")
    assert proc.returncode == localrag.EXIT_VAULT
    assert json.loads(proc.stdout)["error"]["code"] == "vault_not_indexed"
    proc = _sh("2>/dev/full", "ingest", str(vault))
    assert proc.returncode == 0 and proc.stdout == ""


def test_a_closed_or_full_stdout_is_one_error_line_and_exit_2(ingested):
    """`search P1 --json >&-` ended in a two-exception traceback (exit 1), and `search P1 >&-` or
    `show --list >&-` exited 0 having written nothing: the lost result is now an error."""
    for args in (["search", "P1", "--json"], ["search", "P1"], ["show", "--list"], ["ask", "P1", "--json"]):
        proc = _sh(">&-", *args)
        assert proc.returncode == localrag.EXIT_USAGE, (args, proc.stderr)
        assert proc.stderr.startswith("error [output_unwritable]: stdout is closed") and \
            len(proc.stderr.splitlines()) == 1, (args, proc.stderr)
    proc = _sh(">/dev/full", "search", "P1", "--json")
    assert proc.returncode == localrag.EXIT_USAGE and "No space left on device" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = subprocess.run(["bash", "-c", '"$@" | head -1; exit ${PIPESTATUS[0]}', "bash", sys.executable, "-m",
                           "localrag", "search", "P1"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stderr == "" and proc.stdout.startswith("confidence")


@pytest.mark.parametrize("args, field", [(["search", "-"], "query"), (["ask", "-"], "question"),
                                         (["ask", "--batch", "-"], "batch"), (["tickets", "draft", "-"], "question"),
                                         (["tickets", "create", "--from", "-", "--confirm"], "from"),
                                         (["eval", "--questions", "-"], "questions"), (["mcp"], "stdin")])
def test_a_closed_stdin_is_an_invalid_request_naming_what_was_to_be_read(env, args, field):
    """`search - --json <&-` was internal_error (AttributeError on None), exit 1."""
    proc = _sh("<&-", *args, "--json") if args != ["mcp"] else _sh("<&-", *args)
    assert proc.returncode == localrag.EXIT_USAGE, proc.stderr
    assert proc.stderr.startswith("error [invalid_request]: stdin is closed") and "Traceback" not in proc.stderr
    if args != ["mcp"]:
        assert json.loads(proc.stdout)["error"]["details"]["field"] == field
    if field == "from":   # it said "there is no from to read from it"
        assert proc.stderr.startswith("error [invalid_request]: stdin is closed, so there is no draft to read")
    if field == "questions":   # it said "or give it as an argument": eval takes no question file as one
        assert "pipe it in, or pass --questions FILE" in proc.stderr


def test_mcp_refuses_a_closed_stdin_through_the_shared_helper(env, monkeypatch, capfd):
    """`mcp` had its own closed-stdin check beside _stdin: one mechanism now, the same message and field."""
    monkeypatch.setattr(sys, "stdin", None)
    with pytest.raises(localrag.InvalidRequest) as info:
        localrag._stdin("JSON-RPC messages", "stdin", hint=": see `localrag mcp --help`")
    assert info.value.message == "stdin is closed: see `localrag mcp --help`"
    assert run_cli("mcp")[0] == localrag.EXIT_USAGE
    err = capfd.readouterr().err
    assert err.startswith("error [invalid_request]: stdin is closed: `localrag mcp` reads its client's JSON-RPC "
                          "messages from stdin; let an MCP client start it (or use POST /mcp on `localrag serve`)")


def test_an_argument_that_is_not_utf8_is_refused_by_name_or_matched_as_ingest_stored_it(db, tmp_path):
    """`ask "$(printf 'P1 \\xff')"` was database_error (exit 4, UnicodeEncodeError storing the record) while search
    answered, and `vaults rm` of a folder ingest had indexed (as /…/v\\xffault) failed the same way."""
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "localrag", *args], capture_output=True, cwd=ROOT)

    for command in ("ask", "search"):
        proc = cli(command, b"P1 \xff", "--json")
        assert proc.returncode == localrag.EXIT_USAGE, proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert error["details"]["field"] in ("question", "query") and "not valid UTF-8" in error["message"]
    folder = os.fsencode(tmp_path) + b"/v\xffault"
    os.mkdir(folder)
    with open(folder + b"/lamp.md", "wb") as f:
        f.write(b"# Lamps\n\nThe lamp in the hall needs a new bulb.\n")
    assert cli("ingest", folder, "--quiet").returncode == 0
    stored = f"{tmp_path}/v\\xffault"
    proc = cli("search", "lamp bulb", "--vault", folder, "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["results"][0]["vault_path"] == stored
    proc = cli("vaults", "rm", folder + b"/", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["vault_path"] == stored and json.loads(proc.stdout)["documents_removed"] == 1
    proc = cli("vaults", "rm", folder, "--yes", "--json")
    assert proc.returncode == localrag.EXIT_VAULT and stored in json.loads(proc.stdout)["error"]["message"]


def test_stored_text_is_printed_with_its_terminal_escapes_escaped(ingested, capfd):
    """A question an HTTP or MCP client asked (`"P1 \\u001b[2J\\u001b]0;pwned\\u0007 升级"`) was printed raw by
    `history`, `history show` and `gaps`, and a ticket's title and note by `tickets`: whoever could call /ask could
    clear the operator's screen or retitle the window.  The --json output is unchanged (JSON escapes them)."""
    config = ingested[0]
    evil = "\x1b[2J\x1b]0;pwned\x07\x9b31m"
    answer = localrag.ask(config, f"zebra giraffe aquarium {evil} tickets")
    ticket = localrag.ticket_create(config, {"title": f"t {evil}", "description": f"d {evil}\nline 2",
                                             "category": f"c{evil}"}, True, "http")
    localrag.ticket_update(config, ticket["id"], "in_progress", f"n {evil}", "http")
    capfd.readouterr()
    for args in (["history", "--limit", "1"], ["history", "show", str(answer["answer_id"])], ["gaps"],
                 ["gaps", "--format", "md"], ["tickets", "list"], ["tickets", "show", str(ticket["id"])]):
        code, out = run_cli(*args)
        assert code == 0, args
        assert not any(c in out for c in "\x1b\x07\x9b") and "\\x1b" in out and "pwned\\x07" in out, (args, out)
    assert "    d \\x1b[2J" in out and "\n    line 2" in out   # line breaks stay (a description's lines indented)
    code, out = run_cli("history", "show", str(answer["answer_id"]), "--json")
    assert json.loads(out)["question"] == f"zebra giraffe aquarium {evil} tickets"
    # a carriage return overwrote the line on a terminal, and a line break in a question printed rows of its own
    forged = localrag.ask(config, "zebra tickets\n#999    2026-01-01T00:00:00  rag  forged\rquestion overwritten")
    code, out = run_cli("history", "show", str(forged["answer_id"]))
    assert "\r" not in out and "question     zebra tickets\\n#999" in out and "\n#999" not in out, out
    capfd.readouterr()


def test_the_empty_vault_warning_names_the_vault(db, tmp_path, capfd):
    """It said "warning: .: no notes found ..."."""
    empty = tmp_path / "empty vault"
    empty.mkdir()
    assert run_cli("ingest", str(empty))[0] == 0
    assert f"warning: {empty}: no notes found" in capfd.readouterr().err


def test_history_pages_with_offset(ingested, capfd):
    """`history --json` gave next_offset, but `history --offset 2` was an invalid choice."""
    for n in range(3):
        localrag.ask(ingested[0], f"P1 question {n}")
    first = json.loads(run_cli("history", "--limit", "2", "--json")[1])
    assert first["next_offset"] == 2 and len(first["answers"]) == 2
    code, out = run_cli("history", "--limit", "2", "--offset", str(first["next_offset"]), "--json")
    page = json.loads(out)   # answer records are append-only: other tests' records may follow
    assert code == 0 and page["offset"] == 2 and page["next_offset"] == (4 if page["total"] > 4 else None)
    ids = [a["id"] for a in first["answers"] + page["answers"]]
    assert len(ids) >= 3 and ids == sorted(set(ids), reverse=True)
    assert run_cli("history", "--offset", "-1")[0] == localrag.EXIT_USAGE
    code, _ = run_cli("history", "--offset", "99999")
    err = capfd.readouterr().err
    assert code == 0 and "no records from --offset 99999: there are" in err and "no answer records yet" not in err
    assert run_cli("history", "--limit", "1001")[0] == localrag.EXIT_USAGE
    assert "1 to 1000 (default 20)" in help_text("history")


def test_json_means_json_for_version_schema_and_gaps(env):
    """`--version --json` printed plain text, `db schema --json` raw SQL, `gaps --format md --json` Markdown."""
    code, out = run_cli("--version", "--json")
    assert code == 0 and json.loads(out) == {"localrag": localrag.__version__}
    assert run_cli("--version")[1] == f"localrag {localrag.__version__}\n"
    code, out = run_cli("db", "schema", "--json")
    schema = json.loads(out)
    assert code == 0 and schema["schema_version"] == localrag.SCHEMA_VERSION and schema["sql"] == localrag.SCHEMA_SQL
    code, out = run_cli("gaps", "--format", "md", "--json")
    assert code == localrag.EXIT_USAGE and json.loads(out)["error"]["details"]["field"] == "format"


def test_ingest_quiet_on_an_empty_database_prints_nothing(env, vault, monkeypatch, capfd):
    """`ingest -q` promised failures only, yet said "the database had no localrag schema: created it"."""
    from test_errors import fresh_database
    with fresh_database(env["DATABASE_URL"], "cli_quiet_fresh_test", vector=True) as url:
        monkeypatch.setenv("DATABASE_URL", url)
        capfd.readouterr()
        code, out = run_cli("ingest", str(vault), "-q")
        assert code == 0 and out == "" and capfd.readouterr().err == ""


def test_help_texts_state_ranges_defaults_and_limits(monkeypatch):
    """What the operator review found missing or wrong in --help."""
    assert "1 to 200 (default 50)" in help_text("show")
    ask, search = help_text("ask"), help_text("search")
    assert "1..20 (default RAG_TOP_K)" in ask and "up to 4,000 characters" in ask and "up to 4,000 characters" in search
    for command in ("config", "doctor", "gaps"):   # a description line under the usage
        assert help_text(command).split("\n\n")[1].strip() and not help_text(command).split("\n\n")[1].startswith(
            "options:"), command
    assert "under --json in files_failed" in help_text("ingest").replace("\n", " ")
    top = help_text()
    assert "not indexed" in top.split("\n  9 ")[1].split("\n")[0]
    codes = re.findall(r"^  (\d+) +(\S)", top, re.M)
    starts = {len(line) - len(line.lstrip(" ").split(" ", 1)[1].lstrip(" ")) for line in top.splitlines()
              if re.match(r"^  \d{1,2} ", line)}
    assert len(codes) >= 16 and starts == {6}   # one- and two-digit codes: the texts in one column


def test_progress_on_a_dumb_terminal_is_plain_lines(monkeypatch):
    """TERM=dumb on a terminal still got the in-place line with \\e[K."""
    monkeypatch.setattr(localrag.sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert localrag._progress_printer().style == "tty"
    monkeypatch.setenv("TERM", "dumb")
    assert localrag._progress_printer().style == "log"
    assert localrag._progress_printer("always").style == "tty"   # asked for explicitly


@pytest.mark.parametrize("argv, suggestion", [
    (["ingst", "x"], "did you mean 'ingest'?"),
    (["db", "stat"], "did you mean 'status'?"),
    (["ingest", ".", "--exlude", "x"], "did you mean '--exclude'?"),   # the top parser reports it: any command's
    (["zzzz"], None),                                                 # nothing close: no guess
    # localrag's own option after the command: the place is wrong, not the name ("did you mean '--debug'?")
    (["ask", "x", "--debug"], "--debug is an option of localrag itself: put it before the command"),
    (["search", "x", "--env-file", "/dev/null"], "--env-file is an option of localrag itself"),
    # ... after a command with forms, its value was read as the form: "invalid choice: '.env' (choose from 'run',
    # 'init')" (twelfth session, an operator applying a calibration)
    (["eval", "--questions", "q.yaml", "--env-file", ".env"], "invalid choice: '.env' (choose from 'run', 'init'); "
                                                             "--env-file is an option of localrag itself"),
    (["history", "--env-file", ".env"], "--env-file is an option of localrag itself: put it before the command"),
    (["--env-file", "/dev/null", "eval", "rn"], "did you mean 'run'?"),   # a mistyped form is still that
    # another command's option: said so, not "did you mean" the option itself (outside review)
    (["mcp", "--json"], "`localrag mcp` has no --json option"),
    (["tickets", "show", "3", "--limit", "5"], "`localrag tickets show` has no --limit option"),
    (["history", "show", "3", "--limit", "5"], "--limit is an option of `localrag history`: put it before `show`"),
    (["search", "x", "--top-kk", "3"], "did you mean '--top-k'?"),    # the command's own options are the candidates
])
def test_a_mistyped_command_or_option_gets_a_suggestion(argv, suggestion, capfd):
    """`localrag ingst` listed every command and left the reader to spot the one meant."""
    code, _out = run_cli(*argv)
    err = capfd.readouterr().err
    assert code == localrag.EXIT_USAGE and "invalid_request" in err
    assert (suggestion in err) if suggestion else "did you mean" not in err


def test_a_stop_signal_that_lands_where_python_ignores_exceptions_still_stops():
    """A SIGHUP arriving while the ingest workers were forked ran the handler inside logging's at-fork callback,
    where Python prints an exception and goes on: the Signalled was printed as "Exception ignored", the ingest ran
    on to success, and the next Ctrl-C ended it without its clean-up (outside review, 1 run in 63).  The hook raises
    it again in the code that runs next."""
    import time

    class Finalized:
        def __del__(self):   # Python ignores what a __del__ raises
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.2)   # the handler runs here, inside __del__

    previous = localrag._install_interrupt_handlers()
    try:
        with pytest.raises(localrag.Signalled) as info:
            Finalized()
            for _ in range(200):
                time.sleep(0.005)
        assert info.value.signum == signal.SIGHUP
    finally:
        localrag._restore_interrupt_handlers(previous)


def test_control_characters_from_the_vault_never_reach_the_terminal(env, tmp_path, capfd):
    """File names and headings are the vault's, an untrusted input: an ESC or BEL in them went to the operator's
    terminal raw from ingest's warnings, search, ask's sources and show --list (set the window title, blink text;
    outside review).  Every line of output shows them escaped."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "title\x1b]0;PWNED\x07.md").write_text("# T\x1b[5mBLINK\n\nbody text about blinking lamps\n",
                                                    encoding="utf-8")
    (vault / "\x1b[31mRED.md").write_bytes(b"\x00\x01\x02garbage")
    outputs = []
    for args in (("ingest", str(vault)), ("search", "blinking lamps"), ("ask", "blinking lamps"),
                 ("show", "--list", "--vault", str(vault))):
        code, out = run_cli(*args)
        outputs.append(out + capfd.readouterr().err)
    text = "\n".join(outputs)
    assert "\x1b" not in text and "\x07" not in text, text
    assert "\\x1b]0;PWNED\\x07" in text and "\\x1b[31mRED" in text   # shown, escaped



# --- a stop signal before main() has its handlers --------------------------------------------------------------------
# Ctrl-C in the first ~0.3 s (while `import localrag` runs) printed a KeyboardInterrupt traceback, and SIGTERM ended
# the process by the signal.  Now the console script and `python -m localrag` end as interrupted from the module's
# first lines on: one line, 128 + signal, no traceback.

CONSOLE_SCRIPT = """import re
import sys
import time
from localrag import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""   # what pip writes for [project.scripts] localrag = "localrag:main"


def catches(pid: int, sig: int) -> bool | None:
    """Whether process `pid` has a handler for `sig` (Linux /proc); None once it has ended."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return None
    if re.search(r"^State:\s*Z", status, re.M):
        return None
    return bool(int(re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.M).group(1), 16) >> (sig - 1) & 1)


def signalled_early(cmd: list[str], sig: int, delay_s: float, **popen) -> subprocess.CompletedProcess:
    """Start `cmd`, wait until its first handler for SIGTERM is in place (the earliest our code can act), then send
    `sig` after `delay_s`: during the import, long before the command could finish."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    try:
        while True:
            seen = catches(proc.pid, signal.SIGTERM)
            assert seen is not None, "the process ended without ever handling SIGTERM: " + proc.communicate()[1]
            if seen:
                break
            time.sleep(0.0005)
        time.sleep(delay_s)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the signal mask from /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_localrag_is_imported_is_a_quiet_interruption(tmp_path, sig):
    script = tmp_path / "bin" / "localrag"
    script.parent.mkdir()
    script.write_text(CONSOLE_SCRIPT)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    name = signal.Signals(sig).name
    for delay_s in (0, 0.002, 0.005, 0.01, 0.02):
        for cmd in ([sys.executable, str(script), "--help"], [sys.executable, "-m", "localrag", "config"]):
            done = signalled_early(cmd, sig, delay_s, env=env, cwd=tmp_path)
            assert (done.returncode, done.stderr, done.stdout) == (128 + sig, f"interrupted ({name})\n", ""), \
                (cmd, delay_s, done.stderr)


def test_a_signal_at_a_known_point_of_the_import_is_a_quiet_interruption(tmp_path):
    """The same, placed exactly: SIGINT sent while `import localrag` imports http.server (a module localrag loads
    after its first lines), as a real Ctrl-C would arrive; under --json stdout carries the error body."""
    driver = ("import os, signal, sys\n"
              "class Trip:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'http.server':\n"
              "            sys.meta_path.remove(self)\n"
              "            os.kill(os.getpid(), signal.SIGINT)\n"
              "sys.meta_path.insert(0, Trip())\n"
              f"sys.argv[0] = {str(tmp_path / 'bin' / 'localrag')!r}\n"
              "from localrag import main\n"
              "sys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", driver, "search", "x", "--json"], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
                          cwd=tmp_path)
    assert (done.returncode, done.stderr) == (130, "interrupted (SIGINT)\n")
    assert json.loads(done.stdout)["error"] == {"code": "interrupted", "message": "interrupted (SIGINT)",
                                                "details": {"signal": "SIGINT"}}


def test_a_signal_handled_where_python_ignores_exceptions_during_the_import_is_still_one_line(tmp_path):
    """CI once saw the stop's SystemExit raised inside an import lock's weakref callback: Python printed "Exception
    ignored in ... SystemExit: 129" under the line.  Placed exactly: the signal is handled inside a __del__ that runs
    while localrag imports http.server; the command still ends with the line alone and 128 + signal."""
    driver = ("import os, signal, sys\n"
              "class Bomb:\n"
              "    def __del__(self):\n"
              "        os.kill(os.getpid(), signal.SIGHUP)\n"
              "class Trip:\n"
              "    def find_spec(self, name, path=None, target=None):\n"
              "        if name == 'http.server':\n"
              "            sys.meta_path.remove(self)\n"
              "            Bomb()\n"
              "sys.meta_path.insert(0, Trip())\n"
              f"sys.argv[0] = {str(tmp_path / 'bin' / 'localrag')!r}\n"
              "from localrag import main\n"
              "sys.exit(main())\n")
    done = subprocess.run([sys.executable, "-c", driver, "config"], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)},
                          cwd=tmp_path)
    assert (done.returncode, done.stderr, done.stdout) == (129, "interrupted (SIGHUP)\n", "")


def test_an_importing_program_keeps_its_own_signal_handling():
    """Only a command started from the command line gets the early handlers: a program that imports localrag
    keeps Python's KeyboardInterrupt (and its own handlers)."""
    done = subprocess.run([sys.executable, "-c", "import signal, localrag; "
                           "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler, "
                           "signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert done.stdout.split() == ["True", "True"], done.stderr


def test_a_malformed_env_line_is_reported_once_in_localrags_words(tmp_path):
    """python-dotenv's own "could not parse statement starting at line 2" (no file named) beside localrag's line:
    the command line shows localrag's line alone, once, though config reads the file twice after a bad value."""
    bad = tmp_path / "bad.env"
    bad.write_text("RAG_TOP_K=99\nthis is no setting line\nLLM_MODEL=\"unterminated\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "localrag", "--env-file", str(bad), "config"], capture_output=True,
                          text=True, cwd=tmp_path, env={"PATH": os.environ["PATH"], "HOME": str(tmp_path),
                                                        "PYTHONPATH": str(ROOT)})
    lines = done.stderr.splitlines()
    assert "python-dotenv" not in done.stderr and "could not parse" not in done.stderr
    assert [line for line in lines if "not a KEY=value line" in line] == [
        f"warning: {bad}, line 2: not a KEY=value line; ignored (fix or remove it)",
        f"warning: {bad}, line 3: not a KEY=value line; ignored (fix or remove it)"]


def test_a_line_break_in_a_note_name_is_shown_as_backslash_n(db, tmp_path, capfd):
    """A file name may hold a line break (legal on Linux): `search`, `show --list`, the citations and `show`'s own
    header printed it raw, the name's second half reading as a line of its own.  Text output shows it as \\n (as
    ingest's failed:/warning: lines do), the `open:` command is one line whose $'...' passes the real name, --json
    keeps the real name, and `show` takes the real name."""
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "new\nline.md").write_text("# Zebra crossing\n\nThe zebracrossing policy says walk.\n", encoding="utf-8")
    (vault / "other.md").write_text("# Other\n\nNothing here about animals.\n", encoding="utf-8")
    (vault / "tab\there.md").write_text("Tabbed.\n", encoding="utf-8")   # show --list's columns are tab-separated
    assert localrag.ingest(db, vault)["status"] == "success"
    capfd.readouterr()
    code, out = run_cli("search", "zebracrossing")
    assert code == 0 and "[1] " in out and "  new\\nline.md  ›  Zebra crossing" in out, out
    code, out = run_cli("show", "--list")
    assert code == 0 and out.splitlines()[0] == "new\\nline.md\tnew\\nline", out
    assert "tab\\there.md\ttab\\there" in out.splitlines(), out
    code, out = run_cli("ask", "what does the zebracrossing policy say?")
    assert code == 0 and "[1] new\\nline.md:1-3 › Zebra crossing" in out, out
    assert "    open: localrag show $'new\\nline.md#Zebra crossing' --line 3" in out.splitlines(), out
    for lines in (out, run_cli("search", "zebracrossing")[1]):
        assert not any(line.startswith("line.md") for line in lines.splitlines()), lines
    assert json.loads(run_cli("search", "zebracrossing", "--json")[1])["results"][0]["source"] == "new\nline.md"
    capfd.readouterr()
    code, out = run_cli("show", "new\nline.md")
    assert code == 0 and "zebracrossing policy says walk" in out
    assert capfd.readouterr().err.startswith(f"{vault}/new\\nline.md:1-3")
    for name in ("new\nline.md", "it's a\\b\tc\u2028d\x1b.md", "plain name.md"):   # the shell gets the real name
        word = localrag._shell_word(name)
        assert "\n" not in word and subprocess.run(["bash", "-c", "printf %s " + word], capture_output=True,
                                                   text=True).stdout == name, word


def test_a_vault_named_with_a_leading_dash_gets_a_hint(env, tmp_path, monkeypatch):
    """`localrag ingest -vault` (a folder named with a leading dash) was argparse's bare "unrecognized arguments:
    -vault"; the error says how to pass it (./-vault, or `--` before it), both of which work; a word that names
    nothing on disk gets no such hint."""
    (tmp_path / "-vault").mkdir()
    monkeypatch.chdir(tmp_path)
    code, out = run_cli("ingest", "-vault", "--json")
    error = json.loads(out)["error"]
    assert code == localrag.EXIT_USAGE and error["message"] == (
        "localrag: unrecognized arguments: -vault; -vault is a folder here, but a name starting with - reads as an "
        "option: write ./-vault (or localrag ingest -- -vault)"), error
    assert "is a folder here" not in json.loads(run_cli("ingest", "-nothere", "--json")[1])["error"]["message"]
    parser = localrag.build_parser()
    for argv in (["ingest", "./-vault"], ["ingest", "--", "-vault"]):
        assert os.path.samefile(parser.parse_args(argv).path, tmp_path / "-vault"), argv


def test_a_line_break_in_a_vault_path_is_shown_as_backslash_n(db, tmp_path, capfd):
    """A vault folder's name may hold a line break too: `vaults`, `db status`, search's `vault` column, the
    citations' `vault:` line (two vaults indexed) and an error quoting the path print it as \\n, one line each;
    --json keeps the real path."""
    vaults = [tmp_path / "new\nvault", tmp_path / "plain"]
    for vault, word in zip(vaults, ("zebracrossing", "giraffecrossing")):
        vault.mkdir()
        (vault / "a.md").write_text(f"# Crossing\n\nThe {word} policy says walk.\n", encoding="utf-8")
        assert localrag.ingest(db, vault)["status"] == "success"
    capfd.readouterr()
    shown = str(vaults[0]).replace("\n", "\\n")
    code, out = run_cli("vaults")
    assert code == 0 and any(line.startswith(f"{shown}  1 documents") for line in out.splitlines()), out
    code, out = run_cli("db", "status")
    assert code == 0 and f"vault           {shown} (1 documents)" in out.splitlines(), out
    code, out = run_cli("search", "zebracrossing")
    assert code == 0 and f"vault {shown}" in out.splitlines()[2], out
    code, out = run_cli("ask", "what does the zebracrossing policy say?")
    assert code == 0 and f"    vault: {shown}" in out.splitlines(), out
    for text in (run_cli("vaults")[1], run_cli("db", "status")[1], run_cli("search", "zebracrossing")[1], out):
        # the folder name's second half ("vault") never starts a line of its own
        assert not [line for line in text.splitlines() if line.startswith("vault") and
                    not line.startswith("vault           ")], text
    assert json.loads(run_cli("search", "zebracrossing", "--json")[1])["results"][0]["vault_path"] == str(vaults[0])
    capfd.readouterr()
    code, _ = run_cli("ingest", str(tmp_path / "gone\nfolder"))
    err = capfd.readouterr().err.strip().splitlines()
    assert code == localrag.VaultError.exit_code and len(err) == 1 and "gone\\nfolder" in err[0], err


def test_a_key_set_twice_in_the_env_is_named_once_and_a_long_bad_value_is_quoted_shortened(tmp_path):
    """A .env setting a key twice (an edit that missed the first line) took the last value without a word; a text
    setting's bad value was quoted whole (a file pasted into it printed back).  Now one warning names both lines
    (once, though config reads the file twice after a bad value), and the value is quoted within 80 characters."""
    env_file = tmp_path / "dup.env"
    env_file.write_text("RAG_TOP_K=3\nLLM_PROVIDER=fake\nRAG_TOP_K=7\nRAG_FUSION=" + "x" * 5000 + "\n",
                        encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "localrag", "--env-file", str(env_file), "config", "--json"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)})
    assert [line for line in done.stderr.splitlines() if "set again" in line] == [
        f"warning: {env_file}, line 3: RAG_TOP_K is set again; this value replaces line 1's (remove one of them)"]
    body = json.loads(done.stdout)
    assert done.returncode == localrag.EXIT_CONFIG and body["rag_top_k"] == 7, body
    message = body["problems"][0]["message"]
    assert message.startswith("RAG_FUSION='xxx") and "x" * 100 not in message and "use one of" in message, message
    assert all(len(line) < 300 for line in done.stderr.splitlines())


def test_open_commands_name_the_pyz_when_localrag_runs_from_one(db, tmp_path, monkeypatch, capfd):
    """`open:` lines (and a note's `open`) said `localrag show …` under the zipapp too, where no `localrag` command
    exists: a field engineer pasting one got "command not found".  They name the pyz as it was started."""
    import shlex
    assert localrag.command_name("localrag") == "localrag"
    assert localrag.command_name("/usr/bin/pytest") == "localrag"
    assert localrag.command_name("localrag.pyz") == "python3 localrag.pyz"
    assert localrag.command_name("/opt/my tools/localrag-linux-x86_64.pyz") == \
        "python3 '/opt/my tools/localrag-linux-x86_64.pyz'"
    assert localrag.command_name(r"C:\tools\localrag.PYZ", platform="win32") == r"python 'C:\tools\localrag.PYZ'"
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "kiwi.md").write_text("# Kiwi\n\n## Kiwi storage\n\nKiwis keep for weeks when cold.\n", encoding="utf-8")
    assert localrag.ingest(db, vault)["status"] == "success"
    monkeypatch.setattr(sys, "argv", ["./field/localrag.pyz", "ask"])
    code, out = run_cli("ask", "how long do kiwis keep in kiwi storage?")
    commands = [line.split("open: ", 1)[1] for line in out.splitlines() if line.startswith("    open: ")]
    assert code == 0 and commands and all(c.startswith("python3 ./field/localrag.pyz show ") for c in commands), out
    assert "(python3 ./field/localrag.pyz history show " in out, out   # the record line: another command to paste
    code, out = run_cli("show", *shlex.split(commands[0])[3:], "--json")
    assert code == 0 and json.loads(out)["open"].startswith("python3 ./field/localrag.pyz show "), out
    # ... and so do the commands that hints on stderr quote (`localrag db init`, `localrag ingest PATH`)
    capfd.readouterr()
    code, _ = run_cli("show", "no-such-note.md")
    err = capfd.readouterr().err
    assert code == localrag.EXIT_NOT_FOUND and "`python3 ./field/localrag.pyz show --list`" in err, err
    assert "`localrag " not in err, err
    monkeypatch.setattr(sys, "argv", ["localrag"])
    code, out = run_cli("show", "kiwi.md", "--json")
    assert code == 0 and json.loads(out)["open"] == "localrag show kiwi.md", out
    code, _ = run_cli("show", "no-such-note.md")
    assert "`localrag show --list`" in capfd.readouterr().err


@pytest.mark.parametrize("argv0,name", [("./field/localrag.pyz", "python3 ./field/localrag.pyz"),
                                        ("localrag", "localrag")], ids=["pyz", "localrag"])
def test_json_texts_that_are_no_error_name_localrag_as_it_was_started(db, tmp_path, monkeypatch, argv0, name):
    """Under the zipapp the error bodies named `python3 localrag.pyz db init`, but JSON that is no error still said
    `localrag …`: ask's and search's scope-empty reason, a ticket draft's `localrag history show N`, db status's hint,
    ingest's nested-vault warnings, /health's hint, embeddings status's and doctor's hints and problems, and the
    draft_ticket tool's description.  Each names localrag as it was started; started as `localrag`, nothing
    changes.  The vault text quoting a command is the vault's: never rewritten."""
    monkeypatch.setattr(sys, "argv", [argv0])
    outer, other = tmp_path / "v", f"`{'python3 ./field/localrag.pyz' if name == 'localrag' else 'localrag'} "
    (outer / "team").mkdir(parents=True)
    (outer / "kiwi.md").write_text("# Kiwi\n\nKiwis keep for weeks when cold; `localrag ingest` reads them.\n")
    (outer / "team" / "fig.md").write_text("# Fig\n\nFigs keep for days.\n")
    texts: list[str] = []

    def said(*args: str, code: int = 0) -> dict:
        got, out = run_cli(*args, "--json")
        assert got == code, (args, out)
        texts.append(out)
        return json.loads(out)

    with localrag.Store.open(db) as s:
        s.run("DROP TABLE IF EXISTS keyword_postings, keyword_chunks, links, embeddings, chunks, documents, "
              "ingest_runs CASCADE")
    assert said("db", "status")["hint"] == f"run `{name} db init` to create the schema"
    assert said("db", "init")
    assert f"`{name} ingest PATH`" in localrag.health(db)["details"]["hint"]
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "plum.md").write_text("# Plum\n\nPlums keep for days.\n")
    said("ingest", str(tmp_path / "gone"))
    shutil.rmtree(tmp_path / "gone")
    said("ingest", str(outer / "team"))
    gone, nested = [w["warning"] for w in said("ingest", str(outer))["warnings"]]
    assert gone.endswith(f"`{name} vaults rm {tmp_path / 'gone'}` removes them"), gone
    assert nested.endswith(f"`{name} vaults rm {outer / 'team'}` or `{name} vaults rm {outer}`"), nested
    for command in ("ask", "search"):
        body = said(command, "how long do kiwis keep?", "--path", "nowhere/")
        reason = body["reason"] if command == "ask" else body["gate"]["reason"]
        assert f"check it; `{name} show --list`, GET /notes/list" in reason, reason
    found = said("search", "kiwis keep for weeks when cold")["results"]
    assert "`localrag ingest` reads them" in json.dumps(found), found   # the vault's text, as it is
    asked = said("ask", "how long do kiwis keep?")
    draft = said("tickets", "draft", "how long do kiwis keep?", "--answer-id", str(asked["answer_id"]))
    assert f"Answer record: {asked['answer_id']} (`{name} history show {asked['answer_id']}`)" in \
        draft["description"], draft
    assert f"`{name} tickets create`" in localrag._mcp_tools()["draft_ticket"].definition()["description"]
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")
    monkeypatch.delenv("EMBEDDING_MODEL")
    monkeypatch.setenv("EMBEDDING_CACHE_DIR", str(tmp_path / "cache"))
    status = said("embeddings", "status", code=localrag.EXIT_EMBEDDING)
    assert status["hint"].startswith(f"run `{name} embeddings warmup` while online"), status
    assert f"`{name} embeddings unpack QWEN.tar`" in status["pieces"]["model"]["hint"], status
    report = said("doctor", code=localrag.EXIT_EMBEDDING)
    assert f"the one-time model download (`{name} embeddings warmup`)" in report["network"]["needed_for"], report
    assert any(f"While online run `{name} embeddings warmup`" in p["message"] for p in report["problems"]), report
    # and the commands doctor's and db status's human lines quote on stdout
    for key, value in {"LLM_PROVIDER": "openai-compatible", "LLM_BASE_URL": "http://127.0.0.1:9/v1",
                       "LLM_MODEL": "m", "LLM_API_KEY": "k"}.items():
        monkeypatch.setenv(key, value)
    code, out = run_cli("doctor")
    assert f"settings ok (`{name} llm check` sends a request)" in out, out
    assert localrag._started_note(True, "to read this status").endswith(f"; `{name} db stop` stops it")
    texts.append(out)
    joined = "\n".join(texts)
    assert other not in joined.replace("`localrag ingest` reads them", ""), [
        line for line in joined.splitlines() if other in line]


def test_the_open_command_of_a_citation_under_a_parent_heading_prints_its_section(db, tmp_path, capfd):
    """A section's chunk that begins with its parent's heading line (`# Title` with no text, then `## Section`)
    starts at line 1, outside the section it names: its `open:` command said `--line 1` and `show` refused it
    (note_not_found, exit 13).  The command names the chunk's last line, inside the section."""
    import shlex
    vault = tmp_path / "v"
    vault.mkdir()
    (vault / "zebra.md").write_text(
        "# Zebracrossing\n\n## Zebracrossing policy\n\nThe zebracrossing policy says walk.\n", encoding="utf-8")
    assert localrag.ingest(db, vault)["status"] == "success"
    code, out = run_cli("ask", "what does the zebracrossing policy say?")
    assert code == 0 and "[1] zebra.md:1-5 › Zebracrossing › Zebracrossing policy" in out, out
    command = [line.split("open: ", 1)[1] for line in out.splitlines() if line.startswith("    open: ")][0]
    assert command == "localrag show 'zebra.md#Zebracrossing#Zebracrossing policy' --line 5", command
    capfd.readouterr()
    code, shown = run_cli(*shlex.split(command)[1:])
    assert code == 0 and shown.strip() == "## Zebracrossing policy\n\nThe zebracrossing policy says walk.", shown


@pytest.mark.parametrize("argv0,name", [("./field/localrag.pyz", "python3 ./field/localrag.pyz"),
                                        ("localrag", "localrag")], ids=["pyz", "localrag"])
def test_help_names_localrag_as_it_was_started(monkeypatch, capsys, argv0, name):
    """`python3 localrag.pyz --help` said `usage: localrag …` and showed examples (`localrag ingest …`, `localrag
    tickets create --from d.json`) that a pyz user cannot paste.  Its usage lines, examples and quoted commands name
    localrag as it was started; `--version` says localrag's name."""
    monkeypatch.setattr(sys, "argv", [argv0])
    for args in ([], ["tickets"], ["eval"]):
        with pytest.raises(SystemExit):
            localrag.build_parser().parse_args([*args, "--help"])
        text = capsys.readouterr().out
        assert text.startswith(f"usage: {name} {' '.join(args)}".rstrip() + " "), text[:200]
        assert f"{name} tickets create --from d.json" in text if args == ["tickets"] else True
        if name != "localrag":
            assert not re.search(r"(?m)(^\s*|&&\s+|\s{2,})localrag ", text), text
            assert "`localrag " not in text
    with pytest.raises(SystemExit):
        localrag.build_parser().parse_args(["--version"])
    assert capsys.readouterr().out.startswith("localrag ")
    with pytest.raises(localrag.InvalidRequest) as exc:
        localrag.build_parser().parse_args(["ask", "q", "--top-k", "x"])
    assert exc.value.details["usage"].startswith(f"usage: {name} ask ")


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_shell_words_quote_as_shlex_does_without_importing_it(text):
    """`--help` under the zipapp names the pyz as it was started; importing shlex for that made the pyz check its
    unpacked layers on `--help`, which must cost nothing.  The quoting is shlex.quote's, written out."""
    import shlex
    if not localrag._SHELL_ESCAPED_RE.search(text):
        assert localrag._shell_word(text) == shlex.quote(text)
