"""The .localragignore matcher (gitignore syntax): hand cases, and hypothesis against `git check-ignore` itself."""

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import localrag


def excluded(rules, rel):
    """What the scan does: a file is out when it matches, or when any folder above it matched (the walk prunes
    that folder, and git does not re-include below an excluded folder)."""
    parts = rel.split("/")
    for i in range(1, len(parts)):
        if localrag.is_ignored(rules, "/".join(parts[:i]), True):
            return True
    return localrag.is_ignored(rules, rel, False)


def rules_of(text):
    return localrag.parse_ignore_file(text, ".localragignore")


@pytest.mark.parametrize("patterns, path, out", [
    ("*.pdf", "a/b/c.pdf", True),
    ("/*.pdf", "a/c.pdf", False),
    ("/*.pdf", "c.pdf", True),
    ("drafts/", "drafts/x.md", True),
    ("drafts/", "drafts", False),                      # a file named drafts: the slash means folders only
    ("docs/*.md", "docs/a.md", True),
    ("docs/*.md", "x/docs/a.md", False),               # a slash in the middle anchors
    ("**/tmp", "a/b/tmp/x.md", True),
    ("a/**/z.md", "a/z.md", True),
    ("a/**/z.md", "a/b/c/z.md", True),
    ("a/**", "a/b/c.md", True),
    ("*.md\n!keep.md", "keep.md", False),
    ("*.md\n!keep.md", "x/keep.md", False),
    ("private/\n!private/ok.md", "private/ok.md", True),  # no re-include below an excluded folder
    ("\\#hash.md", "#hash.md", True),
    ("\\!bang.md", "!bang.md", True),
    ("[ab].md", "b.md", True),
    ("[!ab].md", "c.md", True),
    ("[!ab].md", "a.md", False),
    ("spaced.md   ", "spaced.md", True),
    ("# only a comment", "x.md", False),
])
def test_hand_cases(patterns, path, out):
    assert excluded(rules_of(patterns), path) is out


def test_nested_ignore_file_is_relative_to_its_folder():
    rules = localrag.parse_ignore_file("/local.md\n", "sub/.localragignore", "sub")
    assert localrag.is_ignored(rules, "sub/local.md", False)
    assert not localrag.is_ignored(rules, "local.md", False)
    assert not localrag.is_ignored(rules, "sub/deeper/local.md", False)


@pytest.mark.parametrize("line, words", [("a[bc", "never closed"), ("x\\", "backslash"), ("!", "empty"),
                                         ("/", "empty")])
def test_bad_patterns_name_the_line(line, words):
    with pytest.raises(localrag.IgnorePatternInvalid, match=rf".localragignore line 2: .*{words}"):
        rules_of(f"ok.md\n{line}\n")


_segment = st.sampled_from(["a", "b", "ab", "*", "?", "**", "a*", "*.md", "[ab]", "[!a]*", "b.md"])
_pattern = st.builds(lambda neg, lead, segs, trail: ("!" if neg else "") + ("/" if lead else "") + "/".join(segs)
                     + ("/" if trail else ""), st.booleans(), st.booleans(), st.lists(_segment, min_size=1, max_size=3),
                     st.booleans())
_path = st.lists(st.sampled_from(["a", "b", "ab", "a.md", "b.md", "c"]), min_size=1, max_size=4).map("/".join)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_pattern, min_size=1, max_size=4), st.lists(_path, min_size=1, max_size=12, unique=True))
def test_matches_git_check_ignore(tmp_path, patterns, paths):
    """Our verdict equals git's for random patterns and paths (git treats every leading path component as a
    folder, as our walk does)."""
    repo = tmp_path / "repo"
    if not (repo / ".git").exists():
        repo.mkdir(exist_ok=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".gitignore").write_text("\n".join(patterns) + "\n")
    proc = subprocess.run(["git", "-C", str(repo), "check-ignore", "--no-index", "--stdin"], input="\n".join(paths),
                          capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    git_says = set(proc.stdout.split("\n")) - {""}
    rules = rules_of("\n".join(patterns))
    ours = {p for p in paths if excluded(rules, p)}
    assert ours == git_says, (patterns, paths)


@pytest.mark.parametrize("pattern, meant", [("./policies/", "policies/"), ("!./keep.md", "!keep.md"),
                                            ("{vault}/policies", "policies"), ("{vault}/", "*")])
def test_an_exclude_written_as_a_path_is_refused_with_the_pattern_meant(tmp_path, pattern, meant):
    """An outside review's `--exclude ./policies/` and `--exclude /abs/vault/policies` excluded nothing, silently:
    the confidential folder was indexed.  gitignore reads both literally (they match nothing)."""
    vault = tmp_path / "vault"
    (vault / "policies").mkdir(parents=True)
    (vault / "policies" / "secret.md").write_text("# Secret\n")
    with pytest.raises(localrag.IgnorePatternInvalid, match=rf"relative to the vault folder.*write {meant!r}"):
        localrag.scan_vault(vault, excludes=[pattern.format(vault=vault)])


def test_an_exclude_that_matches_nothing_is_warned_about(tmp_path):
    vault = tmp_path / "ex"
    (vault / "policies").mkdir(parents=True)
    (vault / "policies" / "secret.md").write_text("# Secret\n")
    (vault / "a.md").write_text("# A\n")
    scan = localrag.scan_vault(vault, excludes=["ex/policies/", "drafts/", "policies/"])
    warned = [w["warning"] for w in scan.warnings]
    assert warned == ["--exclude 'ex/policies/' matches no file or folder of the vault; patterns are relative to "
                      "the vault folder: did you mean 'policies/'?",
                      "--exclude 'drafts/' matches no file or folder of the vault (patterns are relative to the "
                      "vault folder, as in .gitignore)"]
    assert [rel for rel, _ in scan.files] == ["a.md"] and scan.skipped["excluded"] == 1
