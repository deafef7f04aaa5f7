"""Embedders: fake-lexical-v1 exactly as seed 000 specifies (golden values + hypothesis properties)."""

import collections
import hashlib
import math
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

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


# --- An independent reference implementation of fake-lexical-v1, written from seed 000's text -----------------
# It shares nothing with localrag but the seed: "CJK character" is decided by Unicode character names (Han
# unified/compatibility ideographs, anything named HIRAGANA/KATAKANA, hentaigana, Hangul syllables), not by code-point ranges.

REF_WEIGHTS = {"content": 1.0, "heading_path": 2.0, "relative_path": 1.5, "tags": 1.25, "wikilinks": 1.25}


def ref_is_cjk(ch: str) -> bool:
    name = unicodedata.name(ch, "")
    return (name.startswith(("CJK UNIFIED IDEOGRAPH-", "CJK COMPATIBILITY IDEOGRAPH-", "HANGUL SYLLABLE "))
            or "HIRAGANA" in name or "KATAKANA" in name or name.startswith("HENTAIGANA "))


def ref_normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    for sep in "/\\._-":
        text = text.replace(sep, " ")
    return re.sub(r"\s+", " ", text).strip()


def ref_tokens(text: str) -> collections.Counter:
    norm = ref_normalize(text)
    feats = collections.Counter(t for t in re.findall(r"[a-z0-9]+", norm) if len(t) != 1)
    for i, ch in enumerate(norm):
        if ref_is_cjk(ch):
            feats[ch] += 1
            if i + 1 < len(norm) and ref_is_cjk(norm[i + 1]):
                feats[ch + norm[i + 1]] += 1
    return feats


def ref_vector(fields: dict) -> list:
    acc = [0.0] * 1024
    for field, text in fields.items():
        w = REF_WEIGHTS[field]
        for feat, n in ref_tokens(text).items():
            acc[reference_bucket(feat)] += min(n * w, 4 * w)
    norm = math.sqrt(sum(x * x for x in acc))
    return [x / norm for x in acc] if norm else acc


# Arbitrary Unicode, minus unassigned code points (the seed cannot say whether a future character is CJK) and
# lone surrogates (not text); weighted towards the interesting scripts so runs of CJK actually occur.
any_char = st.characters(blacklist_categories=("Cs", "Cn"))
cjk_char = st.one_of(st.characters(min_codepoint=0x3040, max_codepoint=0x30FF),
                     st.characters(min_codepoint=0x31F0, max_codepoint=0x31FF),
                     st.characters(min_codepoint=0x4E00, max_codepoint=0x4E40),
                     st.characters(min_codepoint=0xAC00, max_codepoint=0xAC10),
                     st.characters(min_codepoint=0xF900, max_codepoint=0xFAD9),
                     st.characters(min_codepoint=0x1B000, max_codepoint=0x1B122),
                     st.characters(min_codepoint=0x20000, max_codepoint=0x20010))
unicode_text = st.text(alphabet=st.one_of(any_char, cjk_char, st.sampled_from(list("ab1 ._-/\\ ＡＢ①ｶﾞ"))),
                       max_size=60).filter(lambda t: all(unicodedata.category(c) != "Cn" for c in t))
field_dicts = st.fixed_dictionaries({k: unicode_text for k in REF_WEIGHTS})


@settings(max_examples=400, deadline=None)
@given(unicode_text)
def test_tokens_equal_the_reference_on_arbitrary_unicode(text):
    assert collections.Counter(localrag.fake_tokens(text)) == ref_tokens(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_bucket_equals_the_reference_on_arbitrary_unicode(feature):
    assert localrag.fake_bucket(feature) == reference_bucket(feature)


@settings(max_examples=300, deadline=None)
@given(field_dicts)
def test_vector_equals_the_reference_and_has_unit_norm(fields):
    vec = localrag.fake_vector(fields)
    ref = ref_vector(fields)
    assert len(vec) == 1024
    assert max(abs(a - b) for a, b in zip(vec, ref)) < 1e-12, ascii(fields)
    has_features = any(ref_tokens(t) for t in fields.values())
    norm = math.sqrt(sum(x * x for x in vec))
    if has_features:  # an all-zero vector for a text with features is a bug, not an "empty" case
        assert abs(norm - 1.0) < 1e-12
    else:
        assert vec == [0.0] * 1024


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(REF_WEIGHTS)), st.sampled_from(["upgrade", "客户", "p1", "ガ"]), st.integers(1, 12),
       st.integers(1, 3))
def test_per_field_cap_is_four_times_the_weight(field, token, repeats, other_repeats):
    """A token repeated n times in one field adds min(n, 4) x weight; another token fixes the scale."""
    other = "zebra"
    text = " ".join([token] * repeats + [other] * other_repeats)
    vec = localrag.fake_vector({field: text})
    w = REF_WEIGHTS[field]
    feats = ref_tokens(token)
    raw = {}
    for feat, n in feats.items():
        raw[reference_bucket(feat)] = raw.get(reference_bucket(feat), 0) + min(n * repeats, 4) * w
    raw[reference_bucket(other)] = raw.get(reference_bucket(other), 0) + min(other_repeats, 4) * w
    # the ratio of a token's bucket to the other token's bucket is independent of the normalisation
    b_tok, b_other = reference_bucket(token), reference_bucket(other)
    assert b_tok != b_other
    assert abs(vec[b_tok] / vec[b_other] - raw[b_tok] / raw[b_other]) < 1e-9
    # the same text split across two fields is not capped together: each field has its own cap
    both = localrag.fake_vector({"content": " ".join([token] * 8), "heading_path": " ".join([token] * 8)})
    assert both == ref_vector({"content": " ".join([token] * 8), "heading_path": " ".join([token] * 8)})


def test_norm_check_rejects_an_all_zero_vector_for_real_text():
    """The unit-norm property above must fail for a zero vector: the text below has features."""
    fields = {"content": "客户 upgrade"}
    assert ref_tokens(fields["content"])
    assert abs(math.sqrt(sum(x * x for x in localrag.fake_vector(fields))) - 1.0) < 1e-12


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


@settings(max_examples=100, deadline=None)
@given(st.lists(field_dicts, min_size=1, max_size=6))
def test_token_caches_stay_bounded_and_change_no_result(field_lists):
    """The per-process token caches (fake-lexical-v1 buckets, keyword terms) are cleared when full: a vault's
    vocabulary does not grow an ingest worker without bound, and a cleared cache changes no vector or term."""
    import pytest
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(localrag, "TOKEN_CACHE_ENTRIES", 8)
        localrag._bucket_cache.clear()
        localrag._kw_word_cache.clear()
        for fields in field_lists:
            assert localrag.fake_vector(fields) == pytest.approx(ref_vector(fields), abs=1e-6)
            text = " ".join(fields.values())
            got = localrag.keyword_terms(text)
            assert len(localrag._bucket_cache) <= 8 and len(localrag._kw_word_cache) <= 8
            localrag._kw_word_cache.clear()
            assert got == localrag.keyword_terms(text)
    localrag._bucket_cache.clear()
    localrag._kw_word_cache.clear()


def test_qwen_requirements_match_the_local_qwen3_extra():
    """The install hint and the offline wheelhouse name the same packages as pyproject.toml's [local-qwen3] extra
    (beside torch, which each pins its own way)."""
    import localrag
    text = (Path(localrag.__file__).resolve().parent / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^local-qwen3 = \[(.*?)\]", text, re.MULTILINE | re.DOTALL).group(1)
    assert [r for r in re.findall(r'"([^"]+)"', extra) if r != "torch"] == list(localrag.QWEN_EXTRA_REQUIREMENTS)
    assert all(r in localrag.qwen_install_hint(True, "python3", "linux") for r in localrag.QWEN_EXTRA_REQUIREMENTS)


@settings(max_examples=300, deadline=None)
@given(field_dicts)
def test_vector_is_the_reference_to_the_last_bit_and_its_binary_form_the_same(fields):
    """fake_vector sums a note's repeated fields apart from the chunk's own (the weights are multiples of 1/4, so
    every sum is exact in any order): the reference's plain field-by-field sums give the same floats, bit for bit,
    and fake_vector_copy (what ingest's workers send) is that vector in pgvector's binary form."""
    vec = localrag.fake_vector(fields)
    assert vec == ref_vector(fields), ascii(fields)
    assert localrag.fake_vector_copy(fields) == localrag._Copy.vector(vec)
