"""Embedders: fake-lexical-v1 exactly as seed 000 specifies (golden values + hypothesis properties)."""

import hashlib
import math
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

import localrag


def reference_bucket(feature: str) -> int:
    digest = hashlib.sha256(f"fake-lexical-v1:{feature}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 1024


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


def test_normalization_and_tokens():
    assert localrag.fake_normalize("Ａtlas_CRM-v2.Export/Limits\\X  \t y") == "atlas crm v2 export limits x y"
    # single-character [a-z0-9] tokens are dropped; CJK unigrams + adjacent bigrams
    assert localrag.fake_tokens("a P1 客户工单 b") == ["p1", "客", "户", "客户", "工", "户工", "单", "工单"]
    assert localrag.fake_tokens("客 户") == ["客", "户"]  # not adjacent: no bigram


def test_bucket_matches_reference_and_golden():
    for feature in ["客户", "p1", "升级", "atlas", "数据导出"]:
        assert localrag.fake_bucket(feature) == reference_bucket(feature)
    assert (localrag.fake_bucket("客户"), localrag.fake_bucket("p1"), localrag.fake_bucket("升级")) == (854, 60, 784)


def test_golden_vector_with_per_field_cap():
    v = localrag.fake_vector({"content": "客户 P1 升级 升级 升级 升级 升级 升级"})
    nonzero = {i: round(x, 6) for i, x in enumerate(v) if x}
    # counts: p1, 客, 户, 客户 once; 升, 级, 升级 six times, capped at 4 x 1.0
    assert nonzero == {60: 0.138675, 147: 0.5547, 288: 0.138675, 425: 0.5547, 784: 0.5547, 831: 0.138675,
                       854: 0.138675}


def test_field_weights_and_caps():
    v = localrag.fake_vector({"content": "", "heading_path": "upgrade upgrade upgrade upgrade upgrade"})
    assert abs(v[localrag.fake_bucket("upgrade")] - 1.0) < 1e-9
    raw = {}
    fields = localrag.document_fields("alpha", ["beta"], "gamma.md", ["delta"], ["epsilon"])
    for field, weight in localrag.FAKE_FIELD_WEIGHTS.items():
        for tok in localrag.fake_tokens(fields[field]):
            raw[localrag.fake_bucket(tok)] = raw.get(localrag.fake_bucket(tok), 0) + weight
    norm = math.sqrt(sum(x * x for x in raw.values()))
    vec = localrag.fake_vector(fields)
    for bucket, value in raw.items():
        assert abs(vec[bucket] - value / norm) < 1e-9


def test_empty_input_is_zero_vector_and_query_uses_content_only():
    assert not any(localrag.fake_vector({"content": ""}))
    assert not any(localrag.FakeLexicalEmbedder().embed_query("??? !!! a"))
    assert localrag.FakeLexicalEmbedder().embed_query("客户 升级") == localrag.fake_vector({"content": "客户 升级"})


texts = st.text(alphabet=st.sampled_from(list("abcdefxyz0123 客户工单升级数据导出延迟。.-_/")), max_size=200)


@settings(max_examples=200, deadline=None)
@given(texts, texts, texts)
def test_unit_norm_or_zero(content, heading, path):
    v = localrag.fake_vector(localrag.document_fields(content, [heading], path, [], []))
    assert len(v) == 1024
    norm = math.sqrt(sum(x * x for x in v))
    assert norm == 0.0 or abs(norm - 1.0) < 1e-9


words = st.lists(st.sampled_from(["atlas", "export", "limit", "客户", "工单", "升级", "latency", "runbook"]),
                 min_size=2, max_size=6, unique=True)
unrelated = st.lists(st.sampled_from(["天气", "烹饪", "足球", "poem", "weather", "recipe", "guitar", "火星"]),
                     min_size=3, max_size=8, unique=True)


@settings(max_examples=150, deadline=None)
@given(words, unrelated)
def test_query_sharing_words_scores_above_unrelated_text(shared, other):
    query = localrag.FakeLexicalEmbedder().embed_query(" ".join(shared))
    chunk = localrag.fake_vector(localrag.document_fields(" ".join(shared + ["policy", "规定"]), ["章节"], "doc.md",
                                                          [], []))
    noise = localrag.fake_vector(localrag.document_fields(" ".join(other), ["其他"], "other.md", [], []))
    assert cosine(query, chunk) > cosine(query, noise)


def test_deterministic_across_processes():
    code = ("import localrag,json;print(json.dumps(localrag.fake_vector(localrag.document_fields("
            "'客户 P1 工单 escalation', ['升级'], 'policies/x.md', ['support'], ['Atlas CRM']))))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, cwd=localrag.__file__.rsplit("/", 1)[0]
                           ).stdout for seed in ("1", "2", "3")}
    assert len(outs) == 1
    here = localrag.fake_vector(localrag.document_fields("客户 P1 工单 escalation", ["升级"], "policies/x.md",
                                                         ["support"], ["Atlas CRM"]))
    assert [round(x, 12) for x in here] == [round(x, 12) for x in __import__("json").loads(outs.pop())]


def test_fake_path_does_not_import_torch():
    code = ("import sys, localrag; localrag.FakeLexicalEmbedder().embed_query('x y'); "
            "localrag.main(['--help']); print('torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=localrag.__file__.rsplit("/", 1)[0]).stdout
    assert out.strip().splitlines()[-1] == "False False"


def test_qwen_install_hint_outside_and_inside_a_pyz():
    import localrag
    assert localrag.qwen_install_hint(False) == localrag.QWEN_INSTALL_HINT
    linux = localrag.qwen_install_hint(True, "/usr/bin/python3.12", "linux")
    assert "/usr/bin/python3.12 -m pip install --user torch --index-url https://download.pytorch.org/whl/cpu" in linux
    assert "-m pip install --user 'sentence-transformers>=2.7.0' 'transformers>=4.51.0'" in linux
    assert "localrag[local-qwen3]" not in linux and "\n" not in linux
    mac = localrag.qwen_install_hint(True, "/opt/homebrew/bin/python3.13", "darwin")
    assert "/opt/homebrew/bin/python3.13 -m pip install --user torch 'sentence-transformers" in mac
    assert "download.pytorch.org" not in mac
    win = localrag.qwen_install_hint(True, "C:\\Program Files\\Python312\\python.exe", "win32")
    assert '"C:\\Program Files\\Python312\\python.exe" -m pip install --user torch' in win
