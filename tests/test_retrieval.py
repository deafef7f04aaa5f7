"""Retrieval: the keyword-v2 tokenizer, the keyword channel in Postgres (kept equal to a rebuild), retrieval modes,
fusion, scope filters, the evidence gate and its calibration, bad queries.

Pure parts (tokenizer, fusion, gate, calibration) are driven without a database; the rest runs on the sample vault.
"""

import dataclasses
import json
import shutil

import pytest
import yaml
from hypothesis import given, settings, strategies as st

import localrag
from conftest import QUESTIONS, SAMPLE_VAULT, reset_database, run_cli, write_vault

# === 1. Tokenizer (keyword-v2) =====================================================================================

CJK = st.sampled_from(list("客户工单升级数据库磁盘笔记插件白板同步发布ひらがなカタカナ한국어검색"))
LATIN_WORDS = st.sampled_from(["canvas", "Sync", "PLUGINS", "notes", "vault", "graph", "p1", "2024", "API", "the",
                               "and", "Obsidian's", "pg_stat", "v1.2"])


def test_keyword_terms_examples():
    t = localrag.keyword_terms
    assert t("How do I bake sourdough bread?") == ["bake", "sourdough", "bread"]
    assert t("客户 P1 工单应该如何升级？") == ["客户", "p1", "工单", "升级"]      # 应该/如何 break the run
    assert t("今天上海天气") == ["今天", "天上", "上海", "海天", "天气"]
    assert t("笔") == ["笔"]                                                  # a one-character run is itself
    assert t("ＡＰＩ　Ｌａｔｅｎｃｙ") == ["api", "latency"]                   # NFKC: full-width to ASCII
    assert t("Notes, QUERIES and classes") == ["note", "query", "class"]      # plural folding
    # -es after ch/sh/x goes whole (matches was "matche", never "match"); a singular in -che folds with its plural
    assert t("matches match boxes box pushes caches cache") == ["match", "match", "box", "box", "push", "cach", "cach"]
    assert t("macOS and iPadOS photos") == ["mac", "ipados", "photo"]   # an OS name is not a plural; macOS is Mac
    assert t("on a Mac") == t("on macOS") == ["mac"]
    # a hyphenated word with a one- or two-letter part is one word (the parts alone matched rare pieces elsewhere)
    assert t("Wi-Fi e-mail to-do pop-up re-index right-click UTF-8") == \
        ["wifi", "email", "todo", "popup", "reindex", "right", "click", "utf", "8"]
    assert t("家里的 Wi-Fi 密码") == t("家里的 WiFi 密码")
    assert t("Wie verwende ich die Suche?") == ["wie", "verwende", "ich", "die", "suche"]   # not "such", a stopword
    assert t("HTTP 429 and 2024") == ["http", "429", "2024"]                   # numbers kept
    assert t("검색 기능") == ["검색", "기능"]                                   # Hangul bigrams
    assert t("ノートを検索") == ["ノー", "ート", "トを", "を検", "検索"]          # kana and Han in one run
    assert t("Can I host it myself, please?") == ["host"]                     # keyword-v2's asking words
    assert t("Which regions can I change mine to?") == ["region", "change"]


@pytest.mark.parametrize("text", ["the of and", "The OF And?", "的了吗", "吗？的。了！", "", "   ", "???!!!", "🙂🚀✨",
                                  "— … ·"])
def test_stopwords_punctuation_and_emoji_give_no_terms(text):
    assert localrag.keyword_terms(text) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(CJK, min_size=2, max_size=12))
def test_cjk_run_is_cut_into_overlapping_bigrams(chars):
    run = "".join(chars)
    terms = localrag.keyword_terms(run)
    for term in terms:
        assert term in run and 1 <= len(term) <= 2
    # consecutive bigrams of one unbroken piece overlap by one character
    bigrams = [x for x in terms if len(x) == 2]
    for a, b in zip(bigrams, bigrams[1:]):
        if run.find(a + b[1]) >= 0:
            assert a[1] == b[0]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(LATIN_WORDS, st.lists(CJK, min_size=1, max_size=6).map("".join),
                          st.sampled_from([" ", "，", "。", "/", "-", "的", "？"])), max_size=20).map("".join))
def test_mixed_scripts_and_idempotence(text):
    terms = localrag.keyword_terms(text)
    assert all(term == term.casefold() and term.strip() == term and term for term in terms)
    assert not set(terms) & localrag.KEYWORD_STOPWORDS
    # the terms of the terms are the terms: nothing is re-split, re-stemmed or dropped
    assert localrag.keyword_terms(" ".join(terms)) == terms


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_is_idempotent(text):
    terms = localrag.keyword_terms(text)
    assert localrag.keyword_terms(" ".join(terms)) == terms


def test_keyword_vector_weights_fields():
    tf, length = localrag.keyword_vector("Canvas cards hold notes", ["Canvas"], "Plugins/Canvas.md", ["howto"])
    assert tf["canvas"] == 1.0 + 2.0 + 2.0        # content + heading + file name (without .md)
    assert tf["howto"] == 1.0
    assert tf["plugin"] == 1.0    # the folder weighs like content (keyword-v5): less than the note's own name
    assert length == sum(tf.values())
    tf, _ = localrag.keyword_vector("Canvas cards hold notes", ["Canvas"], "Plugins/Canvas.md", [],
                                    localrag.alias_text("Canvas", ["Whiteboard", "白板"], "Plugins/Canvas.md"))
    assert tf["whiteboard"] == 1.0 and tf["白板"] == 1.0   # the note's other names, weighed like its content


def test_a_note_is_found_and_answered_by_its_alias(db, tmp_path):
    """keyword-v3 indexes a note's aliases: asking by one found nothing in the keyword channel, and its words
    counted as words the knowledge base never uses, so the gate refused ("the knowledge base never uses handbook")."""
    vault = tmp_path / "alias-vault"
    vault.mkdir()
    (vault / "fm-list.md").write_text("---\naliases: [Beaver Handbook]\n---\n# Dam building\n\nBeavers fell trees "
                                      "near the river and build their dams from the branches in autumn.\n",
                                      encoding="utf-8")
    (vault / "other.md").write_text("# Otters\n\nOtters swim in the river and eat fish all year.\n", encoding="utf-8")
    localrag.ingest(db, vault)
    found = localrag.search(db, "handbook", 3, retrieval="keyword")["results"]
    assert found and found[0]["source"] == "fm-list.md" and found[0]["scores"]["keyword"] > 0
    answer = localrag.ask(db, "Beaver Handbook: when do beavers build their dams?")
    assert answer["mode"] == "rag" and "handbook" not in (answer["gate"]["unknown_words"] or []), answer["reason"]


# --- Regional spelling: colour and color are one word ------------------------------------------------------------

@pytest.mark.parametrize("word, variants", [
    ("colour", ["color"]), ("color", ["colour"]), ("favourite", ["favorite"]), ("behaviour", ["behavior"]),
    ("organised", ["organized"]), ("customisation", ["customization"]), ("analyse", ["analyze"]),
    ("centre", ["center"]), ("center", ["centre"]), ("licence", ["license"]), ("catalogue", ["catalog"]),
    ("travelled", ["traveled"]), ("labeled", ["labelled"]), ("grey", ["gray"]),
    # short words and words whose "other spelling" is another word are left alone
    ("four", []), ("hour", []), ("your", []), ("user", []), ("store", []), ("filed", []), ("called", []),
    ("色彩", []), ("p2p", []),
])
def test_regional_variants_examples(word, variants):
    assert localrag.regional_variants(word) == variants


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="abcdefghilnorstuyzegv", min_size=0, max_size=14))
def test_regional_variants_are_other_words_and_lead_back(word):
    variants = localrag.regional_variants(word)
    assert word not in variants and len(variants) == len(set(variants))
    for v in variants:   # each rule has its way back: the word is a variant of each of its variants
        assert v.isalpha() and word in localrag.regional_variants(v) + [localrag.spelling_key(v)]
    # the answerer's key reads both spellings as one
    assert all(localrag.spelling_key(v) == localrag.spelling_key(word) for v in variants
               if localrag.spelling_key(word) != word or localrag.spelling_key(v) != v)


def test_respell_regional_only_changes_a_word_the_knowledge_base_never_uses():
    respell = localrag.respell_regional
    assert respell(["colour", "callout"], {"color": 12, "callout": 40}) == {"colour": "color"}
    assert respell(["colour"], {"colour": 1, "color": 12}) == {}          # a word the vault uses stays
    assert respell(["colour"], {}) == {}                                  # neither spelling: still unknown
    assert respell(["centre", "centre"], {"center": 3}) == {"centre": "center"}


@pytest.mark.parametrize("question", ["Which variable defines the colour of a callout?",
                                      "Which variable defines the color of a callout?"])
def test_a_british_or_american_spelling_finds_and_answers_the_other(db, tmp_path, question):
    """check17 para-en-03 asked for headings "in a different colour": the Obsidian docs say color, "colour" was a
    word the knowledge base never uses, and the gate refused with the right note first."""
    vault = tmp_path / "spelling-vault"
    write_vault(vault, {
        "callouts.md": "# Callouts\n\nThe callout-color variable defines the background color of a callout. Pick any "
                       "CSS color.\n",
        "canada.md": "# Canada\n\nThe centre of the map shows the favourite lake of each province.\n",
        "otters.md": "# Otters\n\nOtters swim in the river and eat fish all year.\n"})
    localrag.ingest(db, vault)
    answer = localrag.ask(db, question)
    assert answer["mode"] == "rag", answer["reason"]
    assert answer["citations"][0]["source"] == "callouts.md"
    assert answer["answer"].startswith("The callout-color variable defines the background color of a callout.")
    assert not answer["gate"]["unknown_words"]
    # a word the vault uses is never respelt (it says centre: "centre" is no "center")
    found = localrag.search(db, "favourite centre", 3, retrieval="keyword")["results"]
    assert found[0]["source"] == "canada.md" and found[0]["scores"]["keyword"] > 0


def test_the_answerer_reads_either_spelling_as_the_question_s_word():
    """A vault written in British English answers an American question with its own sentence, and the other way."""
    blocks = [{"n": 1, "source": "a.md", "heading": "Look", "heading_path": ["Look"], "score": 0.5,
               "content": "A search result sets the highlight of its matches. "
                          "The accent colour sets the highlight of links."}]
    assert localrag.fake_answer("Which setting sets the highlight color?", blocks).splitlines()[0] == \
        "The accent colour sets the highlight of links. [1]"
    blocks[0]["content"] = blocks[0]["content"].replace("colour", "color")
    assert localrag.fake_answer("Which setting sets the highlight colour?", blocks).splitlines()[0] == \
        "The accent color sets the highlight of links. [1]"


# --- The terms of a question: function words of other languages (question_terms) ---------------------------------

# (language, question, the terms it keeps): the question side drops pronouns, articles, auxiliaries, question words,
# particles and polite endings; topic words stay (eval/obsidian-lang.yaml's wording).
QUESTION_TERMS = [
    ("de", "Wie importiere ich meine Evernote-Notizbücher in Obsidian?",
     ["importiere", "evernote", "notizbücher", "obsidian"]),
    ("de", "Wie kann ich einen Hinweisblock einklappbar machen?", ["hinweisblock", "einklappbar", "machen"]),
    ("de", "Wie verwende ich die Suche?", ["verwende", "suche"]),
    ("fr", "Comment importer mes carnets Evernote dans Obsidian ?", ["importer", "carnet", "evernote", "obsidian"]),
    ("fr", "Combien de jours ai-je pour demander un remboursement ?", ["jour", "demander", "remboursement"]),
    ("es", "¿Cómo puedo crear un nuevo lienzo en mi bóveda?", ["crear", "nuevo", "lienzo", "bóveda"]),
    ("it", "Come posso installare un plugin della comunità?", ["installare", "plugin", "comunità"]),
    ("pt", "Como posso criar uma nota diária a partir de um modelo?", ["criar", "nota", "diária", "partir", "modelo"]),
    ("nl", "Hoe kan ik mijn notities van Evernote importeren?", ["notity", "evernote", "importeren"]),  # English
    # plural folding (-ies), as the index folds it: left as it is (keyword-v4)
    ("ru", "Как создать новый холст?", ["создать", "новый", "холст"]),
    ("ja", "Evernoteのノートをインポートするにはどうすればいいですか？",
     ["evernote", "ノー", "ート", "イン", "ンポ", "ポー", "ート"]),
    ("ja", "明日の東京の天気はどうですか？", ["明日", "東京", "天気"]),
    ("ja", "Obsidian Syncの月額料金はいくらですか？", ["obsidian", "sync", "月額", "額料", "料金"]),
    ("ko", "중첩 태그는 어떻게 만드나요?", ["중첩", "태그", "만드"]),
    ("ko", "노트에 별칭을 추가하려면 어떻게 해야 하나요?", ["노트", "별칭", "추가"]),   # 추가 keeps its 가
    ("ko", "Joplin에 있는 노트들을 Importer로 가져올 수 있나요?", ["joplin", "노트", "importer", "가져", "져올"]),
    ("ko", "연말정산은 어떻게 신청하나요?", ["연말", "말정", "정산", "신청"]),
]


@pytest.mark.parametrize("lang,question,terms", QUESTION_TERMS, ids=[f"{x[0]}-{i}" for i, x in enumerate(QUESTION_TERMS)])
def test_question_terms_drop_the_languages_function_words(lang, question, terms):
    assert localrag.question_language(question) == lang
    assert localrag.question_terms(question) == terms
    assert localrag.asked_terms(question) == set(terms) - localrag._QUESTION_STOPWORDS


# English and Chinese questions (and the unsure) are read exactly as keyword_terms reads them: one German "die" or
# Spanish "de" in an English question changes nothing.
@pytest.mark.parametrize("question", [
    "How do I create a new canvas?", "Why does my sync die after an hour?", "What is the de facto plugin for tasks?",
    "Die Hard", "Obsidian Sync", "客户 P1 工单应该如何升级？", "如何在Obsidian中创建白板", "",
    "Is there an Apple Watch app?", "Can I use a template in a daily note?"])
def test_english_and_chinese_questions_keep_their_keyword_terms(question):
    assert localrag.question_language(question) == ""
    assert localrag.question_terms(question) == localrag.keyword_terms(question)
    assert localrag.asked_terms(question) == localrag.answer_terms(question)


def test_question_terms_leave_the_index_tokenizer_alone():
    """The function-word lists are the question side only: a document keeps its German "die" and "wie"."""
    assert localrag.keyword_terms("Wie verwende ich die Suche?") == ["wie", "verwende", "ich", "die", "suche"]


@pytest.mark.parametrize("question, terms", [
    # how a person asks (我想, 还能, 有什么办法) and the pronouns and 被/把 that join no word break a Chinese question's
    # runs: neither they nor the bigrams across them (想同, 能找, 记被, 被我) are asked for (check8 para-zh-01/04)
    ("我没有开同步，笔记被我改乱了，还能找回几天前的旧内容吗？",
     ["开同", "同步", "笔记", "改乱", "找回", "回几", "几天", "天前", "旧内", "内容"]),
    ("白板里怎么把几张卡片编成一组？", ["白板", "板里", "几张", "张卡", "卡片", "片编", "编成", "成一", "一组"]),
    ("我想知道怎么导出 PDF", ["导出", "pdf"]),
    ("其他人能看到我的光标吗？", ["其他", "他人", "人能", "能看", "看到", "光标"]),   # 他 is half of 其他: kept
    # how one goes about it (之后, 一篇, 一起, 总是): 笔记 is asked, 一篇笔记 is how (check17 lex-zh-02)
    ("我把一篇笔记拖进侧边栏并锁定了，之后再打开别的笔记",
     ["笔记", "记拖", "拖进", "进侧", "侧边", "边栏", "栏并", "并锁", "锁定", "再打", "打开", "开别", "笔记"]),
    ("怎么把附件也一起导进来？", ["附件", "件也", "导进", "进来"]),
    ("手机总是收不到通知", ["手机", "收不", "不到", "到通", "通知"]),
    # a locative and the 掉 of a spoken verb: 删掉 is no word a note writes (删除), nor a sign of another topic
    ("删除书签组，里面的书签也会删掉吗？", ["删除", "除书", "书签", "签组", "书签", "签也", "也会", "会删"]),
    # spoken fillers (有个, 自己, 从来, 原来, 靠谱, 一下, 提到), which the notes seldom or never write (they say 原始, 可靠,
    # 提及), and the bigrams across them (个社, 己从, 来没): cuts (check19 lex-zh-05, check5 lex-zh-05)
    ("有个社区插件提示我更新安装程序，可它自己从来没提示过", ["社区", "区插", "插件", "件提", "提示", "更新", "新安",
                                                     "安装", "装程", "程序", "可它", "没提", "提示", "示过"]),
    ("移到别的笔记后，原来的位置会留下什么？", ["移到", "到别", "笔记", "记后", "位置", "置会", "会留", "留下"]),
])
def test_a_chinese_questions_way_of_asking_is_no_term(question, terms):
    assert localrag.question_terms(question) == terms
    assert localrag.keyword_terms(question) != terms   # the index reads the same text whole


def test_en_zh_eval_questions_are_read_as_before():
    """Every question of the English/Chinese sets gets keyword_terms unchanged (their README figures hold), but for
    the word after "how" (how long, how often: test_the_word_after_how_asks_for_a_kind_of_fact_and_names_no_topic),
    a Chinese question's way of asking (test_a_chinese_questions_way_of_asking_is_no_term) and the "mean" of "What
    does X mean?" (what "What is X?" asks)."""
    root = SAMPLE_VAULT.parent.parent / "eval"
    for path in sorted(root.glob("*.yaml")):
        if path.name == "obsidian-lang.yaml":
            continue
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for item in data["questions"] if isinstance(data, dict) else data:
            q = item["question"]
            read = localrag._ZH_ASKING_RE.sub(" ", localrag._HOW_FRAME_RE.sub("how", localrag._MEAN_FRAME_RE.sub(
                r"\1", q)))
            assert localrag.question_terms(q) == localrag.keyword_terms(read), (path.name, q)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=200))
def test_keyword_terms_of_ascii_text_skip_normalization_only(text):
    """ASCII text takes a shortcut (NFKC leaves it as it is, casefold is lower there); what follows a CJK run takes
    the full path, so the shortcut's terms must be what that path gives the same text."""
    assert localrag.keyword_terms(text + " 字") == localrag.keyword_terms(text) + ["字"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["Notes", "notes", "CRM", "客户", "工单", "Ａtlas", "the", "x1", "ß"]), max_size=30),
       st.lists(st.sampled_from(["Setup", "客户"]), max_size=3))
def test_keyword_vector_counts_as_repeated_additions(words, heading):
    """keyword_vector counts each field's terms in C and multiplies by the weight: the same floats as adding the
    weight once per occurrence, in the same first-seen order."""
    content = " ".join(words)
    tf, length = localrag.keyword_vector(content, heading, "Folder/Some notes.md", ["crm"])
    expected: dict = {}
    for field, text in (("content", content), ("heading_path", " ".join(heading)), ("relative_path", "Some notes"),
                        ("tags", "crm"), ("folders", "Folder")):
        for term in localrag.keyword_terms(text) if text else []:
            expected[term] = expected.get(term, 0.0) + localrag.KEYWORD_FIELD_WEIGHTS[field]
    assert list(tf.items()) == list(expected.items()) and length == float(sum(expected.values()))


# === 2. Fusion and term weights (pure) =============================================================================

scores = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(1, 40), st.tuples(scores, scores, st.sampled_from(["both", "vector", "keyword"])),
                       min_size=2, max_size=25),
       st.sampled_from(["weighted", "rrf"]), st.floats(0.0, 1.0))
def test_fusion_never_ranks_a_two_channel_result_below_a_dominated_one(raw, method, weight):
    candidates = {cid: {"vector": v, "keyword": k,
                        "channels": ["keyword", "vector"] if ch == "both" else [ch]} for cid, (v, k, ch) in raw.items()}
    order = localrag.fuse(candidates, method, weight)
    assert sorted(order) == sorted(candidates)
    rank = {cid: i for i, cid in enumerate(order)}
    for a, ca in candidates.items():
        if len(ca["channels"]) != 2:
            continue
        for b, cb in candidates.items():
            if len(cb["channels"]) == 1 and cb["vector"] < ca["vector"] and cb["keyword"] < ca["keyword"]:
                assert rank[a] < rank[b], (method, weight, ca, cb)


def test_fusion_weights_decide_between_channels():
    cands = lambda: {1: {"vector": 0.9, "keyword": 0.1, "channels": ["vector"]},  # noqa: E731
                     2: {"vector": 0.1, "keyword": 0.9, "channels": ["keyword"]}}
    assert localrag.fuse(cands(), "weighted", 0.2) == [1, 2]
    assert localrag.fuse(cands(), "weighted", 0.8) == [2, 1]
    assert localrag.fuse(cands(), "rrf", 0.8) == [2, 1]


def test_rrf_scores_are_exact():
    """RRF: weight / (60 + rank) per channel; equal scores share a rank (competition ranking 1, 1, 3); a channel
    that scored 0 (no match) or was not run adds nothing."""
    w = 0.25
    cands = {1: {"vector": 0.9, "keyword": 0.5, "channels": ["keyword", "vector"]},
             2: {"vector": 0.9, "keyword": 0.0, "channels": ["vector"]},
             3: {"vector": 0.3, "keyword": 0.2, "channels": ["keyword", "vector"]},
             4: {"vector": None, "keyword": 0.1, "channels": ["keyword"]}}
    order = localrag.fuse(cands, "rrf", w)
    expected = {1: (1 - w) / 61 + w / 61, 2: (1 - w) / 61, 3: (1 - w) / 63 + w / 62, 4: w / 63}
    assert {cid: c["fused"] for cid, c in cands.items()} == pytest.approx(expected, rel=1e-12)
    assert order == [1, 3, 2, 4]


def test_title_match_needs_the_whole_name():
    """The share of the question's weight covered by the best note name whose terms all occur in the question."""
    terms = [{"term": "status", "weight": 2.0}, {"term": "bar", "weight": 2.0}, {"term": "show", "weight": 1.0}]
    assert localrag.title_match(terms, ["Status bar"]) == pytest.approx(0.8)
    assert localrag.title_match(terms, ["Status bar settings"]) == 0.0        # "settings" is not in the question
    assert localrag.title_match(terms, ["The", "", "Bars"]) == pytest.approx(0.4)  # stopwords name nothing; plural
    assert localrag.title_match(terms, ["Status", "Status bar"]) == pytest.approx(0.8)  # the best name counts
    assert localrag.title_match([], ["Status bar"]) == 0.0
    zh = [{"term": t, "weight": 1.0} for t in dict.fromkeys(localrag.keyword_terms("怎么折叠标题和列表？"))]
    assert localrag.title_match(zh, ["折叠"]) == pytest.approx(1 / len(zh))
    assert localrag.title_match(zh, ["折叠列表"]) == 0.0                      # 叠列 is not a bigram of the question


def test_fusion_title_weight_is_a_third_signal():
    cands = lambda: {1: {"vector": 0.5, "keyword": 0.5, "title": 0.0, "channels": ["keyword", "vector"]},  # noqa: E731
                     2: {"vector": 0.45, "keyword": 0.45, "title": 0.5, "channels": ["keyword", "vector"]}}
    assert localrag.fuse(cands(), "weighted", 0.5) == [1, 2]
    c = cands()
    assert localrag.fuse(c, "weighted", 0.5, 0.2) == [2, 1]
    assert c[1]["fused"] == pytest.approx(0.8 * 0.5) and c[2]["fused"] == pytest.approx(0.8 * 0.45 + 0.2 * 0.5)
    c = cands()
    assert localrag.fuse(c, "rrf", 0.5, 0.2) == [2, 1]  # rrf: 0.2 / (60 + rank among the title matches)
    assert c[2]["fused"] == pytest.approx(0.8 * (0.5 / 62 + 0.5 / 62) + 0.2 / 61)


def test_a_question_that_is_a_notes_name_gets_its_opening_first():
    """Only when the note's name covers the whole question: its first chunk takes the place of its best chunk, and
    no other note moves (a chunk of note 8 stays between them as before)."""
    def cands(title):
        return {1: {"vector": 0.6, "keyword": 0.9, "title": title, "opening": False, "document": 7, "channels": []},
                2: {"vector": 0.5, "keyword": 0.8, "title": 0.0, "opening": True, "document": 8, "channels": []},
                3: {"vector": 0.2, "keyword": 0.8, "title": title, "opening": True, "document": 7, "channels": []}}
    c = cands(1.0)
    assert localrag.fuse(c, "weighted", 0.5, 0.2) == [3, 1, 2]
    assert c[3]["fused"] == pytest.approx(c[1]["fused"] + localrag.NOTE_OPENING_LEAD)
    assert localrag.fuse(cands(0.5), "weighted", 0.5, 0.2) == [1, 2, 3]      # the name is part of the question
    assert localrag.fuse(cands(1.0), "weighted", 0.5) == [1, 2, 3]           # no title signal: nothing moves


def test_a_question_that_is_a_notes_name_is_answered_from_its_opening(ingested):
    config, _, _ = ingested
    every = dataclasses.replace(config, rag_max_chunks_per_note=0)   # all of the note's chunks by their scores
    results = localrag.search(every, "What is the Support Escalation Policy?", 10)["results"]
    note = [r for r in results if r["source"] == "policies/Support Escalation Policy.md"]
    assert results[0] is note[0] and len(note) > 2    # the note's opening text leads, above its sections
    assert note[0]["line_start"] == min(r["line_start"] for r in note) and note[0]["heading_path"] == ["客户支持升级政策"]
    spread = localrag.search(config, "What is the Support Escalation Policy?", 10)["results"]
    assert spread[0] == results[0] and [r["source"] for r in spread].count(note[0]["source"]) == 2


def test_a_question_naming_a_note_ranks_it_first(ingested, monkeypatch):
    config, _, _ = ingested
    question = "What does the Onboarding Guide say about the first week?"
    for retrieval in ("hybrid", "keyword"):
        top = localrag.search(config, question, 5, retrieval=retrieval)["results"][0]
        assert top["source"] == "hr/Onboarding Guide.md" and top["scores"]["title"] > 0, retrieval
    assert all(r["scores"]["title"] is None for r in localrag.search(config, question, 5, retrieval="vector")["results"])
    monkeypatch.setenv("RAG_TITLE_WEIGHT", "0")
    off = localrag.search(localrag.load_config(), question, 5)["results"]
    assert all(r["scores"]["title"] == 0.0 for r in off)


def test_fusion_ties_break_on_channels_then_summed_scores_then_id():
    # equal fused score (0.2): the result found by both channels first, though its id is larger
    cands = {1: {"vector": 0.4, "keyword": 0.0, "channels": ["vector"]},
             2: {"vector": 0.2, "keyword": 0.2, "channels": ["keyword", "vector"]}}
    assert localrag.fuse(cands, "weighted", 0.5) == [2, 1] and cands[1]["fused"] == cands[2]["fused"] == 0.2
    # equal fused score (0.5) and channels: the higher summed channel scores first (1.0 before 0.75)
    cands = {1: {"vector": 0.625, "keyword": 0.125, "channels": ["keyword", "vector"]},
             2: {"vector": 0.5, "keyword": 0.5, "channels": ["keyword", "vector"]}}
    assert localrag.fuse(cands, "weighted", 0.25) == [2, 1] and cands[1]["fused"] == cands[2]["fused"] == 0.5
    # all equal: by chunk id
    cands = {7: {"vector": 0.5, "keyword": 0.5, "channels": ["keyword", "vector"]},
             3: {"vector": 0.5, "keyword": 0.5, "channels": ["keyword", "vector"]}}
    assert localrag.fuse(cands, "rrf", 0.3) == [3, 7] and localrag.fuse(cands, "weighted", 0.3) == [3, 7]


def test_unseen_cjk_bigram_straddling_a_known_word_is_backed_off():
    terms = localrag.keyword_terms("今天上海天气")
    out = {t["term"]: t for t in localrag.query_term_weights(terms, 1000, {"上海": 5}, 0.25)}
    assert out["上海"]["weight"] == out["上海"]["idf"]
    assert out["天上"]["weight"] == pytest.approx(0.25 * out["天上"]["idf"], abs=1e-5)   # overlaps 上海
    assert out["海天"]["weight"] == pytest.approx(0.25 * out["海天"]["idf"], abs=1e-5)
    assert out["天气"]["weight"] == out["天气"]["idf"]      # unseen, but not next to a known word: a real clue
    assert out["天气"]["idf"] > out["上海"]["idf"] > 0


def test_a_seen_cjk_pair_far_rarer_than_its_neighbours_counts_little_in_coverage():
    """以后再次导入: 后再 and 次导 occur in the vault, but ten times less often than each pair they overlap: a pair
    across a word boundary.  Coverage counts them at the unseen backoff (check9 had been refused at 0.399 for such
    pairs); their weight, which ranks and breaks ties, stays the idf.  A pair not ten times rarer than each
    neighbour (标滚 beside 滚轮, as often) keeps its coverage weight."""
    terms = localrag.keyword_terms("以后再次导入")
    df = {"以后": 40, "后再": 2, "再次": 30, "次导": 1, "导入": 200}
    out = {t["term"]: t for t in localrag.query_term_weights(terms, 3000, df, 0.25)}
    for pair in ("后再", "次导"):
        assert out[pair]["coverage_weight"] == pytest.approx(0.25 * out[pair]["weight"], abs=1e-5)
        assert out[pair]["weight"] == out[pair]["idf"]
    for word in ("以后", "再次", "导入"):
        assert out[word]["coverage_weight"] == out[word]["weight"]
    out = {t["term"]: t for t in localrag.query_term_weights(localrag.keyword_terms("鼠标滚轮"), 3000,
                                                              {"鼠标": 20, "标滚": 3, "滚轮": 3}, 0.25)}
    assert out["标滚"]["coverage_weight"] == out["标滚"]["weight"]    # 3 vs 20 and 3: not ten times rarer than both




def test_a_seen_preposition_junction_or_lone_character_counts_little_in_coverage():
    """用 Obsidian CLI 时，怎么指定命令在哪个仓库里执行: 库里 (仓库 + the postposition 里) and the lone 用 and 时 are
    seen in the vault, rarely as such pieces, so their idf was most of the question's weight and the right section was
    refused at coverage 0.27.  Coverage counts them at the backoff; the words (仓库, 执行) and a Latin term keep
    theirs, and the ranking weight stays the idf."""
    terms = localrag.keyword_terms("用 Obsidian CLI 时，怎么指定命令在哪个仓库里执行")
    df = {"用": 4, "时": 17, "obsidian": 2000, "cli": 300, "指定": 49, "定命": 1, "命令": 295, "仓库": 300, "库里": 1,
          "执行": 45}
    out = {t["term"]: t for t in localrag.query_term_weights(terms, 3000, df, 0.25)}
    for piece in ("用", "时", "库里"):
        assert out[piece]["coverage_weight"] == pytest.approx(0.25 * out[piece]["weight"], abs=1e-5), piece
        assert out[piece]["weight"] == out[piece]["idf"]
    for word in ("指定", "命令", "仓库", "执行", "cli"):
        assert out[word]["coverage_weight"] == out[word]["weight"], word
    # an unseen lone character was backed off before (its weight): not twice
    out = {t["term"]: t for t in localrag.query_term_weights(["跟"], 3000, {}, 0.25)}
    assert out["跟"]["coverage_weight"] == out["跟"]["weight"] == pytest.approx(0.25 * out["跟"]["idf"], abs=1e-5)
# === 3. Evidence gate (pure, no database) ==========================================================================

def signals(**kw):
    base = {"retrieval": "hybrid", "similarity": 0.5, "keyword": 0.5, "coverage": 0.8, "matched_terms": ["canvas"],
            "missing_terms": ["guitar"], "unseen_terms": [], "query_terms": 2, "results": 5}
    return {**base, **kw}


GATE = localrag.GateSettings(min_similarity=0.2, min_coverage=0.4, min_matched_terms=1, min_coverage_unseen=0.6)


@pytest.mark.parametrize("kw, mode, says", [
    ({}, "rag", "coverage 0.80 >= 0.40"),
    ({"results": 0}, "no_answer", "no evidence"),
    ({"query_terms": 0, "matched_terms": []}, "no_answer", "no content terms"),
    ({"similarity": 0.1}, "no_answer", "confidence 0.1000 is below the threshold 0.20 (RAG_MIN_SIMILARITY)"),
    ({"coverage": 0.3}, "no_answer", "coverage 0.30 is below RAG_MIN_COVERAGE 0.40: the top evidence lacks guitar"),
    ({"matched_terms": [], "coverage": 0.9}, "no_answer", "below RAG_MIN_MATCHED_TERMS 1"),
    ({"similarity": None, "retrieval": "keyword"}, "rag", "no vector channel"),
    ({"similarity": 0.2, "coverage": 0.4}, "rag", ">= threshold 0.20"),            # equal to a threshold passes
    ({"unknown_words": ["bank"], "coverage": 0.5}, "no_answer",
     "never uses bank, and coverage 0.50 is below RAG_MIN_COVERAGE_UNSEEN 0.60"),
    ({"unknown_words": ["bank"], "coverage": 0.6}, "rag", "coverage 0.60 >= 0.40"),
    # a value just below a threshold is never printed as the threshold itself
    ({"coverage": 0.396025}, "no_answer", "coverage 0.396 is below RAG_MIN_COVERAGE 0.40"),
    ({"unknown_words": ["bank"], "coverage": 0.5999}, "no_answer", "coverage 0.5999 is below RAG_MIN_COVERAGE_UNSEEN"),
    ({"results": 0, "scope_empty": True}, "no_answer", "no indexed note matches the scope"),
])
def test_gate_decisions_name_the_deciding_signal(kw, mode, says):
    got_mode, reason, sig = localrag.evidence_gate(signals(**kw), GATE)
    assert got_mode == mode and says in reason and sig == signals(**kw)


ALONE = localrag.GateSettings(min_similarity=0.8, min_coverage=0.4, min_matched_terms=1, min_coverage_unseen=0.6,
                              min_similarity_alone=0.86)


@pytest.mark.parametrize("kw, mode, says", [
    # a paraphrase: high similarity, few shared words -> answered by the vector evidence alone, saying so
    ({"similarity": 0.88, "coverage": 0.1}, "rag", "confidence 0.8800 >= RAG_MIN_SIMILARITY_ALONE 0.86"),
    ({"similarity": 0.88, "coverage": 0.0, "matched_terms": []}, "rag", "answers on its own (coverage 0.00, 0 of 2"),
    ({"similarity": 0.86, "coverage": 0.1}, "rag", "RAG_MIN_SIMILARITY_ALONE"),          # equal passes
    # below the line, or a word the vault never uses: the lexical checks decide as without the setting
    ({"similarity": 0.85, "coverage": 0.1}, "no_answer", "coverage 0.10 is below RAG_MIN_COVERAGE 0.40"),
    ({"similarity": 0.95, "coverage": 0.1, "unknown_words": ["guitar"]}, "no_answer", "below RAG_MIN_COVERAGE"),
    ({"similarity": 0.79, "coverage": 0.1}, "no_answer", "below the threshold 0.80 (RAG_MIN_SIMILARITY)"),
    # enough coverage anyway: the usual reason
    ({"similarity": 0.9, "coverage": 0.8}, "rag", "coverage 0.80 >= 0.40"),
    ({"similarity": None, "retrieval": "keyword", "coverage": 0.1}, "no_answer", "below RAG_MIN_COVERAGE"),
])
def test_gate_similarity_alone_answers_a_paraphrase_only_when_set(kw, mode, says):
    got_mode, reason, _ = localrag.evidence_gate(signals(**kw), ALONE)
    assert got_mode == mode and says in reason, reason
    if mode == "rag" and "ALONE" in says:  # without the setting the same signals are refused
        assert localrag.evidence_gate(signals(**kw), dataclasses.replace(ALONE, min_similarity_alone=None))[0] == \
            "no_answer"


def test_gate_signals_use_the_best_single_chunk():
    terms = [{"term": t, "df": 1, "idf": 1.0, "weight": w} for t, w in (("canvas", 2.0), ("card", 1.0), ("zzz", 1.0))]
    result = lambda matched, vec=0.3: {"matched_terms": matched, "scores": {"vector": vec, "keyword": 0.2}}  # noqa
    of = lambda r, source: dict(r, source=source, vault_path="/v")  # noqa
    # the fourth chunk holds every term but is not among the top GATE_EVIDENCE_CHUNKS (3): not evidence
    sig = localrag.gate_signals({"mode": "hybrid", "terms": terms,
                                 "results": [of(result(["card"]), "a.md"), of(result(["canvas"], 0.6), "b.md"),
                                             of(result(["zzz"]), "c.md"),
                                             of(result(["canvas", "card", "zzz"], 0.2), "d.md")]})
    assert sig["coverage"] == 0.5 and sig["matched_terms"] == ["canvas"] and sig["similarity"] == 0.6
    assert sig["missing_terms"] == ["card", "zzz"] and sig["query_terms"] == 3 and sig["unknown_words"] == []
    # ... unless it is another chunk of a top-3 chunk's note, within the top GATE_NOTE_EVIDENCE_CHUNKS (5): the
    # note's other section (check13 lex-en-19: the code of conduct's rules at 1, its self-promotion paragraph at 4)
    results = [of(result(["card"]), "a.md"), of(result(["canvas"], 0.6), "b.md"), of(result(["zzz"]), "c.md"),
               of(result(["canvas", "card", "zzz"], 0.2), "b.md")]
    sig = localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": results})
    assert sig["coverage"] == 1.0 and sig["matched_terms"] == ["canvas", "card", "zzz"]
    # a fourth note's chunk, the same chunk in another vault, or a sixth chunk of a top note: not evidence
    for late in ([*results[:3], of(result(["canvas", "card", "zzz"]), "d.md")],
                 [*results[:3], dict(results[3], vault_path="/w")],
                 [*results[:3], results[0], results[0], results[3]]):
        assert localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": late})["coverage"] == 0.5
    # a run's "ranked" list (the top chunks by score) is what the gate reads, not its results spread over notes:
    # b.md's third chunk, moved out of the results by RAG_MAX_CHUNKS_PER_NOTE, still counts
    b = of(result(["canvas"], 0.6), "b.md")
    ranked, spread = [b, b, of(result(["canvas", "card", "zzz"]), "b.md")], [b, b, of(result(["zzz"]), "c.md")]
    sig = localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": spread, "ranked": ranked})
    assert sig["coverage"] == 1.0 and sig["results"] == 3


def test_gate_counts_what_a_chunk_says_not_its_folders_name():
    """keyword-v5 indexes folder names: they rank a note, but are no evidence that it answers.  The near-miss
    "Can the Web Clipper's reader read articles aloud?" passed the gate on its folder's words (check6 nm-zh-02)."""
    terms = [{"term": t, "df": 1, "idf": 1.0, "weight": 1.0} for t in ("clipper", "reader", "aloud")]
    chunk = {"matched_terms": ["clipper", "reader"], "scores": {"vector": 0.4, "keyword": 0.3},
             "relative_path": "Web Clipper/Reader.md", "source": "Web Clipper/Reader.md", "heading_path": ["Reader"],
             "content": "Reader strips clutter from the page.", "title": "Reader", "aliases": []}
    sig = localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": [chunk]})
    assert sig["matched_terms"] == ["reader"] and sig["coverage"] == pytest.approx(1 / 3)
    said = dict(chunk, content="The Web Clipper's Reader strips clutter from the page.")   # said in the text: counts
    assert localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": [said]})["matched_terms"] == \
        ["clipper", "reader"]


def test_gate_finds_an_ed_or_ing_word_the_chunk_says_in_another_form():
    """"How do I keep a specific note from ever being published?": the chunk says "publish", the keyword channel
    matches terms exactly, and the gate had refused at coverage 0.399.  An "-ed" / "-ing" word counts as found where
    the chunk says its base (published: publish; closing: close; embedding: embed); other words do not."""
    terms = [{"term": t, "df": 1, "idf": 1.0, "weight": 1.0} for t in ("published", "closing", "embedding", "sync")]
    chunk = {"matched_terms": ["sync"], "scores": {"vector": 0.4, "keyword": 0.3}, "relative_path": "Publish.md",
             "source": "Publish.md", "heading_path": ["Close the menu"], "title": "Publish", "aliases": [],
             "content": "To publish a note, embed it first. Syncs run hourly."}
    sig = localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": [chunk]})
    assert sig["matched_terms"] == ["closing", "embedding", "published", "sync"] and sig["coverage"] == 1.0
    other = dict(chunk, heading_path=[], title="Notes", content="Publishing notes and closed menus, embedded.")
    assert localrag.gate_signals({"mode": "hybrid", "terms": terms, "results": [other]})["matched_terms"] == ["sync"]
    assert localrag._word_stems("running") == ("runn", "runne", "run") and localrag._word_stems("need") == ()
    assert localrag._word_stems("发布了") == ()
    # ... or its noun of the act ("Sync keeps getting interrupted." against "unexpected interruptions": check12
    # lex-en-19 was refused at coverage 0.39 with its note second); not for a short base (a "used" is no "usion")
    acts = [{"term": t, "df": 1, "idf": 1.0, "weight": 1.0} for t in ("interrupted", "configured", "sync")]
    noun = dict(chunk, heading_path=[], title="Sync", content="Unexpected interruptions? Check the configuration.")
    assert localrag.gate_signals({"mode": "hybrid", "terms": acts, "results": [noun]})["matched_terms"] == \
        ["configured", "interrupted", "sync"]
    assert "usion" not in "".join(localrag._word_stems("used")) and localrag._word_stems("added") == ("add", "adde")
    # ... and the other way: a noun of the act asked, its verb said ("Is travel reimbursement capped?" against "Travel
    # is reimbursed up to …": an operator's lexical question was refused); a short noun (version, action) has none
    asked = [{"term": t, "df": 1, "idf": 1.0, "weight": 1.0} for t in ("reimbursement", "installation", "travel")]
    verb = dict(chunk, heading_path=[], title="Travel", content="Travel is reimbursed monthly once you install it.")
    assert localrag.gate_signals({"mode": "hybrid", "terms": asked, "results": [verb]})["matched_terms"] == \
        ["installation", "reimbursement", "sync"]
    assert localrag._word_stems("reimbursement") == ("reimburse", "reimbursed", "reimbursing")
    assert localrag._word_stems("version") == localrag._word_stems("action") == ()


@pytest.mark.parametrize("question, unknown", [
    # 电池 and 保养 stand alone between function words: words the vault never uses (laptop battery care)
    ("笔记本电脑的电池应该怎么保养？", ["电池", "保养"]),
    # pieces of a longer run cut at an arbitrary place are no words; a colloquial question word is no topic
    ("许可证有哪几个等级？", []),
    ("接口老是返回 429 是怎么回事？", []),
    ("How do I tune the guitar?", ["guitar", "tune"]),
])
def test_gate_unknown_words_are_whole_words_cjk_included(question, unknown):
    """unknown_words (a word the knowledge base never uses raises the coverage needed) holds Latin words and CJK
    bigrams that stand alone; "笔记本电脑的电池应该怎么保养？" was answered from notes about notebooks (笔记本) with
    coverage 0.52, its two real content words absent from the vault."""
    words = localrag.keyword_terms(question)
    seen = {"笔记", "记本", "本电", "电脑", "许可", "可证", "等级", "接口", "返回", "429", "how"}
    terms = [{"term": t, "df": 1 if t in seen else 0, "idf": 1.0, "weight": 1.0} for t in dict.fromkeys(words)]
    sig = localrag.gate_signals({"mode": "keyword", "terms": terms, "results": []})
    assert sorted(sig["unknown_words"]) == sorted(unknown)


def test_apply_fallback_keeps_seed_mode_table():
    assert localrag.apply_fallback("rag", "r", True, True) == ("rag", "r")
    assert localrag.apply_fallback("no_answer", "r", False, True) == ("no_answer", "r")
    assert localrag.apply_fallback("no_answer", "r", True, False)[0] == "no_answer"
    assert "disabled globally" in localrag.apply_fallback("no_answer", "r", True, False)[1]
    assert localrag.apply_fallback("no_answer", "r", True, True)[0] == "fallback"


def test_calibration_picks_a_separating_point_and_prints_the_trade_off():
    rows = [{"expected_mode": "rag", "gate": signals(coverage=c, similarity=0.4)} for c in (0.6, 0.7, 0.9)] + \
           [{"expected_mode": "no_answer", "gate": signals(coverage=c, similarity=0.3)} for c in (0.0, 0.2, 0.3)]
    cal = localrag.calibrate_gate(rows, GATE)
    chosen = cal["chosen"]
    assert chosen["answered"] == 1.0 and chosen["refused"] == 1.0
    assert 0.3 < chosen["min_coverage"] <= 0.6 and chosen["min_similarity"] <= 0.3
    assert "RAG_MIN_COVERAGE" in cal["rule"] and len(cal["table"]) == len(localrag.CALIBRATION_COVERAGE_GRID) * \
        len(localrag.CALIBRATION_SIMILARITY_GRID)
    text = localrag.calibration_text(cal)
    assert "<- chosen" in text and "rule: rag when" in text


def test_calibration_prefers_a_broad_plateau_to_a_lone_peak_one_question_higher():
    """The dev set's own calibration had jumped from coverage 0.3 to a lone 0.65 for a score 0.004 higher (seven
    answerable questions refused for four unanswerable ones), and the sample vault's point then missed it by 11
    points.  A point is judged with its grid neighbours: the broad plateau wins, the lone peak is reported."""
    rows = [{"expected_mode": "rag", "gate": signals(coverage=c, similarity=0.4)} for c in [0.9] * 20 + [0.67] * 3 +
            [0.4] * 4] + \
           [{"expected_mode": "no_answer", "gate": signals(coverage=c, similarity=0.4)} for c in [0.2] * 10 + [0.62] * 2]
    cal = localrag.calibrate_gate(rows, GATE)
    best = max(r["score"] for r in cal["table"])
    peak = [r["min_coverage"] for r in cal["table"] if r["score"] == best]
    assert set(peak) == {0.65}                                   # the raw best: a lone coverage value
    assert 0.25 <= cal["chosen"]["min_coverage"] <= 0.4 and cal["chosen"]["score"] < best
    assert cal["chosen"]["answered"] == 1.0


# --- Did you mean: spelling suggestions (pure parts) ---------------------------------------------------------------

def _dl_distance(a: str, b: str) -> int:
    """Optimal-string-alignment distance, written here independently of localrag."""
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[len(a)][len(b)]


QWERTY = ["qwertyuiop", "asdfghjkl", "zxcvbnm"]


def _keys_touch(a: str, b: str) -> bool:
    (ra, ia), = [(r, row.index(a)) for r, row in enumerate(QWERTY) if a in row]
    (rb, ib), = [(r, row.index(b)) for r, row in enumerate(QWERTY) if b in row]
    return abs(ra - rb) <= 1 and abs(ia - ib) <= 1


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=9))
def test_spelling_variants_are_one_typing_slip_away(word):
    variants = localrag.spelling_variants(word)
    assert len(variants) == len(set(variants)) and word not in variants
    for v in variants:
        assert _dl_distance(word, v) == 1, v
        if len(v) == len(word) and sorted(v) != sorted(word):      # a changed letter: a key next to the typed one
            (i,) = [k for k in range(len(v)) if v[k] != word[k]]
            assert _keys_touch(word[i], v[i]), (word, v)
        if len(v) == len(word) - 1:                                # a dropped letter: never the last one
            assert v[-1] == word[-1], (word, v)


def test_spelling_variants_examples():
    v = localrag.spelling_variants
    assert "enable" in v("enabel") and "change" in v("chnage")            # swapped neighbours
    assert "community" in v("comunity") and "install" in v("instal")      # a missed key
    assert "change" in v("chanhe") and "sync" in v("syncc")               # a key next to it; an extra key
    assert "back" not in v("bank") and "break" not in v("bread")          # n/c and d/k are not neighbours
    assert "release" not in v("released")                                 # the last letter is not dropped


def test_misspelt_words_takes_only_unknown_long_plain_words():
    got = localrag.misspelt_words("How do I enabel Snyc on my 2nd iPaad? 工作区 threshlods", ["enabel", "snyc",
                                                                                            "2nd", "ipaad", "threshlod"])
    assert set(got) == {"enabel", "ipaad", "threshlods"}        # snyc: too short; 2nd: not letters only
    assert got["enabel"]["enable"] == "enable" and got["threshlods"]["thresholds"] == "threshold"
    assert "released" not in localrag.misspelt_words("x", ["released"])          # not in the question
    assert localrag.misspelt_words("When was it released?", ["released"])["released"].get("release") is None
    assert localrag.misspelt_words("How do I enabel it?", []) == {}
    assert localrag.misspelt_words("How do I enable it?", ["zzz"]) == {}          # its words are all known
    many = "qwertz asdfgh yxcvbn poiuzt"                                         # more than SPELLING_MAX_WORDS
    assert len(localrag.misspelt_words(many, many.split()[:3])) == 3
    assert localrag.misspelt_words(many, many.split()) == {}
    long_word = "abcdefghij" * 3                                                # over SPELLING_MAX_LENGTH: no typo
    assert localrag.misspelt_words(f"How do I {long_word}?", [long_word]) == {}


def test_choose_corrections_prefers_the_word_most_chunks_use():
    candidates = {"canvs": {"canvas": "canva", "canes": "cane"}, "zzzzz": {"zzzz": "zzzz"}}
    assert localrag.choose_corrections(candidates, {"canva": 12, "cane": 3}) == {"canvs": "canvas"}
    assert localrag.choose_corrections(candidates, {"canva": 3, "cane": 3}) == {"canvs": "canvas"}  # tie: earlier
    assert localrag.choose_corrections(candidates, {}) == {}


@pytest.mark.parametrize("question, fixes, expected", [
    ("How do I enabel sync?", {"enabel": "enable"}, "How do I enable sync?"),
    ("Enabel sync", {"enabel": "enable"}, "Enable sync"),
    ("ENABEL SYNC", {"enabel": "enable"}, "ENABLE SYNC"),
    ("Can I send PII to ChtaGPT?", {"chtagpt": "chatgpt"}, "Can I send PII to ChatGPT?"),
    ("instal, instal!", {"instal": "install"}, "install, install!"),
    ("reinstal or instalx", {"instal": "install"}, "reinstal or instalx"),       # whole words only
    ("pg_instal", {"instal": "install"}, "pg_install"),                         # _ splits words, as in the index
    ("客户的数据能发给ChtaGPT吗", {"chtagpt": "chatgpt"}, "客户的数据能发给ChatGPT吗"),
    ("unchanged", {}, "unchanged"),
])
def test_corrected_question_keeps_the_writing(question, fixes, expected):
    assert localrag.corrected_question(question, fixes) == expected


# === 4. Modes, scores and scope on the sample vault ================================================================

Q_P1 = "客户 P1 工单应该怎么升级？"


@pytest.mark.parametrize("retrieval", ["hybrid", "vector", "keyword"])
def test_every_mode_answers_the_sample_questions(ingested, retrieval):
    config, _, _ = ingested
    rag = [q for q in localrag.load_questions(QUESTIONS) if q["expected_mode"] == "rag"]
    misses = []
    for q in rag:
        sources = [r["source"] for r in localrag.search(config, q["question"], 5, retrieval=retrieval)["results"]]
        if not set(sources) & set(q["expected_sources"]):
            misses.append(q["id"])
    assert not misses


def test_hybrid_similarity_is_the_vector_channels_best(ingested):
    """The gate's similarity is the vector channel's top cosine in hybrid too, also when the fused top k leaves
    out the chunk nearest the question ("复制延迟了怎么办？": 0.132 among the fused top 5, 0.239 nearest; it was
    refused on that despite coverage 1.00)."""
    config, _, _ = ingested
    for q in [Q_P1, "复制延迟了怎么办？", "What are the API latency alert thresholds?", "How do I bake sourdough bread?"]:
        hybrid, vector = localrag.search(config, q, 5), localrag.search(config, q, 5, retrieval="vector")
        assert hybrid["confidence"] == vector["confidence"] == vector["results"][0]["scores"]["vector"], q
        assert hybrid["confidence"] >= max(r["scores"]["vector"] for r in hybrid["results"])
    # by scores alone the fused top 5 leaves the nearest chunk out (spreading the top 5 over notes brings it in)
    lag = localrag.search(dataclasses.replace(config, rag_max_chunks_per_note=0), "复制延迟了怎么办？", 5)
    assert lag["confidence"] > max(r["scores"]["vector"] for r in lag["results"]) and lag["gate"]["mode"] == "rag"


def test_hybrid_scores_and_channels(ingested):
    config, _, _ = ingested
    results = localrag.search(config, Q_P1, 10)["results"]
    top = results[0]
    assert top["channels"] == ["keyword", "vector"] and top["source"] == "policies/Support Escalation Policy.md"
    w, t = config.rag_keyword_weight, config.rag_title_weight
    for r in results:
        fused = (1 - t) * ((1 - w) * r["scores"]["vector"] + w * r["scores"]["keyword"]) + t * r["scores"]["title"]
        assert r["score"] == pytest.approx(fused, abs=1e-5)


def test_keyword_score_is_bm25_over_a_full_match_at_saturation(ingested):
    """keyword score = BM25 / ((k1 + 1) x the query's summed term weights).  Each term adds less than (k1 + 1) x
    its idf, and a Latin word's weight is its idf, so a chunk scores below the weighted share of the terms it
    matched: under 1 unless it matches them all (here it cannot: no note says zanzibar)."""
    config = ingested[0]
    with localrag.Store.open(config) as s:
        run = localrag.run_retrieval(s, config, "onboarding training zanzibar", 10, "keyword")
    weight = {t["term"]: t["weight"] for t in run["terms"]}
    assert set(weight) == {"onboarding", "training", "zanzibar"}
    assert all(weight[t["term"]] == t["idf"] for t in run["terms"])
    assert run["results"]
    for r in run["results"]:
        share = sum(weight[t] for t in r["matched_terms"]) / sum(weight.values())
        assert 0 < r["scores"]["keyword"] < share <= 2 / 3 + 1e-9, (r["matched_terms"], r["scores"])


def test_keyword_scores_do_not_depend_on_the_query_plan(ingested):
    """The keyword channel's scores, and so its order, are the same whichever plan sums a chunk's terms: a float sum
    depends on the order its terms arrive in, and plans change with statistics (an ingest's ANALYZE), so the same
    question ranked two equal chunks differently from one run to the next (seen on the Obsidian vault: the first
    eval after an ingest named another note than later runs)."""
    config = ingested[0]
    question = "How do I escalate a P1 ticket to the on-call engineer and the customer success manager?"
    with localrag.Store.open(config) as s:
        words = localrag.keyword_terms(question)
        n, avgdl, df = s.keyword_stats(list(dict.fromkeys(words)))
        terms = [t for t in localrag.query_term_weights(words, n, df, 0.5) if t["df"]]
        runs = []
        for settings in ((), ("enable_hashjoin", "enable_mergejoin"), ("enable_nestloop", "enable_mergejoin"),
                         ("enable_hashagg",)):
            with s.snapshot():
                for name in settings:
                    s.run(f"SET LOCAL {name} = off")
                runs.append(s.keyword_candidates([t["term"] for t in terms], [t["idf"] for t in terms], avgdl, 50,
                                                 None))
    assert len(runs[0]) > 10 and all(run == runs[0] for run in runs[1:])


def test_rrf_fusion_setting(ingested, monkeypatch):
    monkeypatch.setenv("RAG_FUSION", "rrf")
    config = localrag.load_config()
    results = localrag.search(config, Q_P1, 5)["results"]
    assert results[0]["source"] == "policies/Support Escalation Policy.md" and results[0]["score"] < 0.05


def test_path_filter_is_applied_before_top_k(ingested):
    config, _, _ = ingested
    # the support policy dominates this query; the HR folder holds nothing about it, yet with the filter its
    # chunks are what comes back (the filter runs inside SQL, not on the global top 5)
    unscoped = localrag.search(config, Q_P1, 5)["results"]
    assert all(not r["source"].startswith("hr/") for r in unscoped)
    for retrieval in ("vector", "hybrid"):
        scoped = localrag.search(config, Q_P1, 5, retrieval=retrieval, path=["hr/"])["results"]
        assert scoped and all(r["source"].startswith("hr/") for r in scoped)


def test_repeated_paths_tags_and_vault(ingested, tmp_path):
    config, vault, _ = ingested
    both = localrag.search(config, "值班", 20, path=["runbooks/", "engineering"])["results"]
    assert {r["source"].split("/")[0] for r in both} == {"runbooks", "engineering"}
    # tags: case-insensitive, with or without #, nested tags included (#runbook matches #runbook/postgres)
    tagged = localrag.search(config, "数据库 磁盘", 20, tag=["#Runbook"])["results"]
    assert tagged and {r["source"] for r in tagged} <= {"runbooks/Postgres Incident Runbook.md",
                                                        "runbooks/API Latency Runbook.md"}
    assert localrag.search(config, "数据库 磁盘", 5, tag="runbook/postgres")["results"][0]["source"] == \
        "runbooks/Postgres Incident Runbook.md"
    assert localrag.search(config, Q_P1, 5, vault=str(vault))["results"]


def test_a_vault_that_is_not_indexed_is_an_error_naming_the_indexed_ones(ingested, tmp_path):
    """A mistyped --vault used to give an empty result and a no_answer that `gaps` then listed as a knowledge gap."""
    config, vault, _ = ingested
    recorded = localrag.answer_history(config, 5)["total"]
    for call in (lambda: localrag.search(config, Q_P1, 5, vault=str(tmp_path / "elsewhere")),
                 lambda: localrag.ask(config, Q_P1, vault=str(tmp_path / "elsewhere"))):
        with pytest.raises(localrag.VaultNotIndexed) as err:
            call()
        assert str(tmp_path / "elsewhere") in err.value.message and str(vault.resolve()) in err.value.message
    code, out = run_cli("ask", Q_P1, "--vault", str(tmp_path / "elsewhere"), "--json")
    assert code == localrag.EXIT_VAULT and json.loads(out)["error"]["code"] == "vault_not_indexed"
    assert localrag.answer_history(config, 5)["total"] == recorded      # nothing recorded, no gap


def test_two_vaults_are_told_apart(db, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(SAMPLE_VAULT / "policies", a / "policies")
    shutil.copytree(SAMPLE_VAULT / "policies", b / "policies")
    localrag.ingest(db, a)
    localrag.ingest(db, b)
    results = localrag.search(db, Q_P1, 4)["results"]
    assert {r["vault_path"] for r in results} == {str(a), str(b)}
    only_b = localrag.search(db, Q_P1, 4, vault=str(b))["results"]
    assert only_b and {r["vault_path"] for r in only_b} == {str(b)}


@pytest.mark.parametrize("retrieval", ["hybrid", "vector", "keyword"])
def test_path_matching_nothing_is_empty_not_an_error(ingested, retrieval):
    config, _, _ = ingested
    result = localrag.search(config, Q_P1, 5, retrieval=retrieval, path="no/such/folder/")
    assert result["results"] == [] and result["gate"]["mode"] == "no_answer" and result["gate"]["scope_empty"]
    code, out = run_cli("search", Q_P1, "--path", "no/such/folder/", "--json")
    assert code == 0 and json.loads(out)["results"] == []
    response = localrag.ask(config, Q_P1, path="no/such/folder/", tag="support")
    assert response["mode"] == "no_answer" and response["citations"] == []
    assert "list_notes" in response["reason"] and "GET /notes/list" in response["reason"]   # an agent's way too
    assert response["reason"].startswith("no indexed note matches the scope")   # the filter, not the vault's gap
    code, out = run_cli("search", Q_P1, "--tag", "no-such-tag")
    assert code == 0 and "no results (no indexed note matches the scope" in out
    # a scope that holds notes but no match for the question says so in the usual words
    result = localrag.search(config, "xylophone quasar", 5, retrieval=retrieval, path="hr/")
    assert not result["gate"]["scope_empty"]


# === 5. Bad input ==================================================================================================

@pytest.mark.parametrize("question", ["the of and", "的了吗", "What is the?", "???", "！？"])
def test_stopword_only_question_is_refused(ingested, question):
    config, _, _ = ingested
    response = localrag.ask(config, question)
    assert response["mode"] == "no_answer" and "no content terms" in response["reason"]
    assert response["gate"]["query_terms"] == 0


def test_four_thousand_character_query(ingested):
    config, _, _ = ingested
    long = ("客户 P1 工单升级 escalation policy " * 200)[:4000]
    result = localrag.search(config, long, 5)
    assert result["results"] and result["results"][0]["source"] == "policies/Support Escalation Policy.md"
    code, out = run_cli("search", long + "x", "--json")
    assert code == localrag.EXIT_USAGE and "the limit is 4000" in json.loads(out)["error"]["message"]


def test_unknown_retrieval_mode(ingested, capsys):
    config, _, _ = ingested
    with pytest.raises(localrag.InvalidRequest) as err:
        localrag.search(config, Q_P1, retrieval="semantic")
    assert err.value.http_status == 422 and "hybrid, vector, keyword" in err.value.message
    code, _ = run_cli("search", Q_P1, "--retrieval", "semantic")
    assert code == localrag.EXIT_USAGE == 2
    assert "invalid choice: 'semantic'" in capsys.readouterr().err


@pytest.mark.parametrize("kw, field", [({"path": [""]}, "path"), ({"path": [1]}, "path"), ({"tag": ["#"]}, "tag"),
                                       ({"vault": " "}, "vault"), ({"path": ["x"] * 21}, "path")])
def test_bad_scope_values(ingested, kw, field):
    config, _, _ = ingested
    with pytest.raises(localrag.InvalidRequest) as err:
        localrag.search(config, Q_P1, **kw)
    assert err.value.details["field"] == field


def test_bad_retrieval_setting(env, monkeypatch):
    monkeypatch.setenv("RAG_RETRIEVAL", "bm25")
    with pytest.raises(localrag.ConfigInvalid) as err:
        localrag.load_config()
    assert "hybrid, vector, keyword" in err.value.message
    monkeypatch.setenv("RAG_RETRIEVAL", "")
    monkeypatch.setenv("RAG_MIN_COVERAGE", "1.5")
    with pytest.raises(localrag.ConfigInvalid):
        localrag.load_config()


def test_keyword_mode_works_without_current_embeddings(ingested, monkeypatch):
    monkeypatch.setenv("EMBEDDING_PROVIDER", "local-qwen3")   # no vectors for this provider in the database
    monkeypatch.setenv("EMBEDDING_MODEL", "")
    config = localrag.load_config()
    result = localrag.search(config, Q_P1, 3, retrieval="keyword")
    assert result["results"][0]["source"] == "policies/Support Escalation Policy.md"
    with pytest.raises(localrag.RetrievalNotReady):
        localrag.search(config, Q_P1, 3, retrieval="hybrid")


# === 6. The keyword index stays equal to a rebuild =================================================================

def keyword_snapshot(config) -> list:
    with localrag.Store.open(config) as s:
        return s.run(
            "SELECT d.vault_path, c.relative_path, c.chunk_index, k.tokenizer, k.length, "
            "(SELECT array_agg(p.term || ':' || p.tf || ':' || p.dl ORDER BY p.term) FROM keyword_postings p "
            "WHERE p.chunk_id = c.id) FROM chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN keyword_chunks k ON k.chunk_id = c.id ORDER BY 1, 2, 3")


def search_snapshot(config) -> list:
    out = []
    for q in ("客户 P1 工单升级", "数据库 磁盘", "onboarding training", "Atlas CRM 导出", "zanzibar"):
        for r in localrag.search(config, q, 10, retrieval="keyword")["results"]:
            out.append((q, r["source"], r["heading_path"], r["scores"]["keyword"]))
    return out


def test_keyword_index_equals_a_rebuild_after_add_update_delete(db, vault):
    localrag.ingest(db, vault)
    (vault / "support" / "Common Customer Issues.md").unlink()                              # delete
    policy = vault / "policies" / "Data Handling Policy.md"
    policy.write_text(policy.read_text(encoding="utf-8") + "\n\n## zanzibar\nzanzibar 数据 磁盘\n", encoding="utf-8")
    (vault / "new note.md").write_text("# Zanzibar\n数据库 磁盘 onboarding zanzibar\n", encoding="utf-8")  # add
    result = localrag.ingest(db, vault)
    assert (result["documents_added"], result["documents_updated"], result["documents_deleted"]) == (1, 1, 1)
    incremental, searched = keyword_snapshot(db), search_snapshot(db)
    reset_database(db)
    localrag.ingest(db, vault)
    assert keyword_snapshot(db) == incremental
    assert search_snapshot(db) == searched
    with localrag.Store.open(db) as s:   # no orphans: every chunk has its keyword row and nothing else has one
        assert s.run("SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM keyword_chunks), "
                     "(SELECT count(*) FROM keyword_postings p WHERE NOT EXISTS "
                     "(SELECT 1 FROM chunks c WHERE c.id = p.chunk_id))")[0] == [len(incremental)] * 2 + [0]


def test_ingest_backfills_keywords_for_a_database_without_them(ingested):
    config, vault, _ = ingested
    before = keyword_snapshot(config)
    with localrag.Store.open(config) as s:
        s.run("TRUNCATE keyword_chunks, keyword_postings")
    with pytest.raises(localrag.RetrievalNotReady):
        localrag.search(config, Q_P1, 3, retrieval="keyword")
    assert localrag.search(config, Q_P1, 3)["results"]   # hybrid still has the vector channel
    result = localrag.ingest(config, vault)
    assert result["documents_skipped"] == 0 and result["documents_backfilled"] == 13
    assert result["keyword_chunks_written"] == len(before) and result["embeddings_written"] == 0
    assert keyword_snapshot(config) == before


def test_an_older_tokenizers_rows_are_replaced_by_the_next_ingest(ingested):
    """keyword-v1 -> v2 (a bigger stoplist): searching keeps working on the old rows, and the next ingest rewrites
    every chunk's rows with the current tokenizer, equal to a fresh index, without re-embedding anything."""
    config, vault, _ = ingested
    before = keyword_snapshot(config)
    with localrag.Store.open(config) as s:
        s.run("UPDATE keyword_chunks SET tokenizer = 'keyword-v1'")
    assert localrag.search(config, Q_P1, 3, retrieval="keyword")["results"]
    result = localrag.ingest(config, vault)
    assert result["documents_backfilled"] == 13 and result["embeddings_written"] == 0
    assert keyword_snapshot(config) == before
    with localrag.Store.open(config) as s:
        assert s.run("SELECT DISTINCT tokenizer FROM keyword_chunks") == [[localrag.KEYWORD_TOKENIZER]]


def test_a_first_release_database_upgrades_with_db_init(ingested):
    config, vault, _ = ingested
    with localrag.Store.open(config) as s:
        s.run("DROP TABLE keyword_postings, keyword_chunks")
    code, out = run_cli("search", Q_P1, "--json")
    assert code == localrag.EXIT_SCHEMA and "db init" in json.loads(out)["error"]["message"]
    assert run_cli("db", "init")[0] == 0
    localrag.ingest(config, vault)
    assert localrag.search(config, Q_P1, 3, retrieval="keyword")["results"][0]["source"] == \
        "policies/Support Escalation Policy.md"


# === 7. Eval: the dev-set format and per-tier metrics ===============================================================

def test_eval_reads_the_dev_set_format_and_reports_tiers(ingested, tmp_path):
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump({"corpus": "../somewhere", "vaults": ["acme"], "questions": [
        {"id": "lex-1", "tier": "lexical", "lang": "zh", "question": Q_P1,
         "expected_sources": ["policies/Support Escalation Policy.md"], "expected_mode": "rag"},
        {"id": "para-1", "tier": "paraphrase", "lang": "en", "question": "how fast must we reply to a P1 ticket",
         "expected_sources": ["policies/Support Escalation Policy.md"]},
        {"id": "off-1", "tier": "offtopic", "lang": "en", "question": "How do I bake sourdough bread?"},
    ]}, allow_unicode=True), encoding="utf-8")
    qs = localrag.load_questions(path)
    assert [q["expected_mode"] for q in qs] == ["rag", "rag", "no_answer"]   # offtopic defaults to no_answer
    code, out = run_cli("eval", "--questions", str(path), "--json")
    data = json.loads(out)
    tiers = data["summary"]["tiers"]
    assert code == 0 and set(tiers) == {"lexical", "paraphrase", "offtopic"}
    assert tiers["lexical"]["hit_at_1"] == 1.0 and tiers["lexical"]["answered"] == 1.0
    assert tiers["offtopic"]["refused"] == 1.0 and tiers["offtopic"]["hit_at_1"] is None
    assert all(set(m) >= {"hit_at_1", "hit_at_k", "mrr", "answered", "refused", "latency_ms_p50"}
               for m in tiers.values())
    assert "table" not in data["calibration"]
    code, out = run_cli("eval", "--questions", str(path))
    assert code == 0 and "lexical" in out and "offtopic" in out and "hit@5" in out


@pytest.mark.parametrize("item, says", [
    ({"id": "x", "tier": "easy", "question": "q", "expected_sources": ["a.md"]}, "tier must be one of"),
    ({"id": "x", "lang": 5, "question": "q", "expected_sources": ["a.md"]}, "lang must be"),
])
def test_eval_rejects_bad_tier_or_lang(tmp_path, item, says):
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump({"questions": [item]}), encoding="utf-8")
    with pytest.raises(localrag.InvalidRequest) as err:
        localrag.load_questions(path)
    assert says in err.value.message


def test_eval_rejects_unknown_top_level_keys(tmp_path):
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump({"questionz": []}), encoding="utf-8")
    with pytest.raises(localrag.InvalidRequest) as err:
        localrag.load_questions(path)
    assert "questionz" in err.value.message


def test_eval_scope_and_retrieval_flags(ingested):
    code, out = run_cli("eval", "--questions", str(QUESTIONS), "--retrieval", "keyword", "--path", "policies/",
                        "--json")
    summary = json.loads(out)["summary"]
    assert code == 0 and summary["retrieval"] == "keyword" and summary["scope"]["paths"] == ["policies/"]
    assert summary["hit_at_k"] < 1.0   # questions about other folders cannot hit inside policies/


# === 8. HTTP: the retrieval fields in /search, /ask, /ask/stream and the OpenAPI document ==========================

@pytest.fixture
def http_api(ingested):
    import contextlib
    import http.client
    import io
    import threading
    config, vault, _ = ingested
    server = localrag.make_server(config, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]

    def post(path: str, body) -> tuple[int, str]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read().decode("utf-8")
        conn.close()
        return resp.status, text

    with contextlib.redirect_stderr(io.StringIO()):   # the access log
        yield post, vault
        server.shutdown()
        server.server_close()
        server.api.pool.close()


def test_http_search_and_ask_take_retrieval_and_scope(http_api):
    post, vault = http_api
    status, text = post("/search", {"query": Q_P1, "retrieval": "keyword", "path": "policies/", "tag": ["support"],
                                    "vault": str(vault)})
    data = json.loads(text)
    assert status == 200 and data["retrieval"] == "keyword" and data["results"]
    assert all(r["source"].startswith("policies/") and r["channels"] == ["keyword"] for r in data["results"])
    status, text = post("/ask", {"question": Q_P1, "retrieval": "vector", "path": ["policies/"]})
    data = json.loads(text)
    assert status == 200 and data["mode"] == "rag" and data["retrieval"] == "vector" and data["gate"]["coverage"]
    status, text = post("/ask/stream", {"question": Q_P1, "path": "nowhere/"})
    assert status == 200 and "event: done" in text and '"mode": "no_answer"' in text
    status, text = post("/search", {"query": Q_P1, "path": "nowhere/"})
    assert status == 200 and json.loads(text)["results"] == []


@pytest.mark.parametrize("body, field", [
    ({"query": Q_P1, "retrieval": "semantic"}, "retrieval"), ({"query": Q_P1, "retrieval": 1}, "retrieval"),
    ({"query": Q_P1, "path": 3}, "path"), ({"query": Q_P1, "path": [3]}, "path"), ({"query": Q_P1, "tag": {}}, "tag"),
    ({"query": Q_P1, "vault": ["a"]}, "vault"), ({"query": Q_P1, "path": "a\u0000b"}, "path"),
    ({"query": Q_P1, "vault": "\u0000"}, "vault"),
])
def test_http_bad_retrieval_fields_are_422(http_api, body, field):
    post, _ = http_api
    status, text = post("/search", body)
    error = json.loads(text)["error"]
    assert status == 422 and error["code"] == "invalid_request" and error["details"]["field"] == field
    if field == "retrieval" and body["retrieval"] == "semantic":
        assert "hybrid, vector, keyword" in error["message"]


def test_openapi_documents_the_retrieval_fields():
    spec = localrag.openapi_spec()["components"]["schemas"]
    for name in ("SearchRequest", "AskRequest"):
        props = spec[name]["properties"]
        assert props["retrieval"]["enum"] == ["hybrid", "vector", "keyword", None]
        assert {"path", "tag", "vault"} <= set(props)
    assert {"scores", "channels", "vault_path"} <= set(spec["SearchResult"]["properties"])
    assert "gate" in spec["AskResponse"]["properties"] and "gate" in spec["SearchResponse"]["properties"]


def test_postings_follow_their_chunks_on_sql_deletes_and_truncates(ingested):
    config, _, _ = ingested
    with localrag.Store.open(config) as s:
        s.run("DELETE FROM documents WHERE relative_path = 'policies/Support Escalation Policy.md'")
        assert s.run("SELECT count(*) FROM keyword_postings p WHERE NOT EXISTS "
                     "(SELECT 1 FROM keyword_chunks k WHERE k.chunk_id = p.chunk_id)")[0][0] == 0
        s.run("TRUNCATE documents CASCADE")
        assert s.run("SELECT (SELECT count(*) FROM keyword_chunks), (SELECT count(*) FROM keyword_postings)")[0] == \
            [0, 0]


def test_eval_warns_about_question_set_vaults_that_are_not_ingested(ingested, tmp_path, monkeypatch, capsys):
    config, vault, _ = ingested
    (tmp_path / "corpus" / "other").mkdir(parents=True)
    shutil.copytree(vault, tmp_path / "corpus" / "acme")
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump({"corpus": "corpus", "vaults": ["other"], "questions": [
        {"id": "q", "question": Q_P1, "expected_sources": ["policies/Support Escalation Policy.md"]}]}),
        encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert run_cli("eval", "--questions", str(path), "--json")[0] == 0
    err = capsys.readouterr().err
    assert f"vault {tmp_path / 'corpus' / 'other'} is not ingested" in err
    # the ingested sample vault is not one the set names: its notes compete, and eval says so
    assert f"also holds 1 vault(s) the question set does not name ({vault.resolve()})" in err
    path.write_text(yaml.safe_dump({"corpus": "corpus", "vaults": ["other"], "questions": [
        {"id": "q", "question": Q_P1, "expected_sources": ["policies/Support Escalation Policy.md"]}]}),
        encoding="utf-8")
    assert run_cli("eval", "--questions", str(path), "--vault", str(vault), "--json")[0] == 0
    assert "also holds" not in capsys.readouterr().err   # scoped to one vault: nothing else competes


def test_removing_a_vault_removes_its_keyword_rows(ingested):
    config, vault, _ = ingested
    code, _out = run_cli("vaults", "rm", str(vault), "--yes", "--json")
    assert code == 0
    with localrag.Store.open(config) as s:
        assert s.run("SELECT (SELECT count(*) FROM keyword_chunks), (SELECT count(*) FROM keyword_postings)")[0] == \
            [0, 0]


# === 9. Did you mean: a misspelt word on the sample vault ===========================================================

TYPO_Q = "What are the API latency alert threshlods?"


def test_a_misspelt_question_is_refused_with_the_corrected_one_offered(ingested):
    config, _, _ = ingested
    response = localrag.ask(config, TYPO_Q)
    assert response["mode"] == "no_answer" and "never uses threshlod" in response["reason"]
    suggestion = response["suggestion"]
    assert suggestion["question"] == "What are the API latency alert thresholds?"
    assert suggestion["corrections"] == [{"word": "threshlods", "suggestion": "thresholds"}]
    again = localrag.ask(config, suggestion["question"])          # the offer holds: the gate answers it
    assert again["mode"] == "rag" and again["suggestion"] is None and suggestion["reason"] == again["reason"]
    assert localrag.search(config, TYPO_Q)["suggestion"] == suggestion
    record = localrag.answer_show(config, response["answer_id"])   # the record keeps what was offered
    assert record["gate"]["suggestion"] == suggestion


def test_no_suggestion_for_questions_the_vault_cannot_answer(ingested):
    config, _, _ = ingested
    for q in NO_ANSWER_SAMPLE:
        response = localrag.search(config, q)
        assert response["gate"]["mode"] == "no_answer" and response["suggestion"] is None, q


def test_no_suggestion_for_another_form_of_a_word_the_vault_uses(db, tmp_path):
    """"Who founded …?" where the vault says "found" but never "founded": a real word's other form, not a slip;
    offering "rounded" (one letter away, and in the vault) invited a meaningless question (check11 nm-en-04).  A real
    slip next to it is still corrected."""
    vault = tmp_path / "v"
    write_vault(vault, {"Reports.md": "# Reports\n\nThe report total is rounded to two decimals when the report "
                                      "is exported.\n",
                        "Lost.md": "# Lost items\n\nWe found the lost item in the archive room.\n"})
    assert localrag.ingest(db, vault)["status"] == "success"
    refused = localrag.search(db, "Is the total founded to two decimals?")
    assert refused["gate"]["mode"] == "no_answer" and "founded" in refused["gate"]["unknown_words"]
    assert refused["suggestion"] is None
    slip = localrag.search(db, "Is the total roundde to two decimals?")
    assert slip["suggestion"] and slip["suggestion"]["question"] == "Is the total rounded to two decimals?"


NO_ANSWER_SAMPLE = [q["question"] for q in localrag.load_questions(QUESTIONS) if q["expected_mode"] == "no_answer"] + [
    "How do I link my bank account to PayPal?", "When was the marathon relesed?"]


# === 10. The closest notes of a refusal =============================================================================

def _closest_run(results: list[tuple[str, list[str]]]) -> dict:
    terms = [{"term": t, "weight": w, "df": 1} for t, w in (("atlas", 1.0), ("crm", 1.0), ("price", 3.0),
                                                              ("edition", 1.0), ("year", 1.0))]
    return {"terms": terms, "results": [{"source": src, "vault_path": "/v", "heading_path": ["H"], "title": src,
                                         "matched_terms": matched, "score": 0.5} for src, matched in results]}


def test_closest_notes_are_distinct_notes_sharing_enough_of_the_question():
    run = _closest_run([("a.md", ["atlas", "crm"]),            # 2 of 7 weight: 0.29
                        ("a.md", ["atlas", "crm", "edition"]),  # the same note again
                        ("b.md", ["price"]),                    # 0.43, but one term only
                        ("c.md", ["edition", "year"]),          # 0.29
                        ("d.md", ["year"]),                     # one everyday word
                        ("e.md", ["atlas", "edition"]),
                        ("f.md", ["atlas", "crm", "year"])])    # a fourth: past the limit
    notes = localrag.closest_notes(run)
    assert [n["source"] for n in notes] == ["a.md", "c.md", "e.md"]
    assert notes[0] == {"source": "a.md", "vault_path": "/v", "heading_path": ["H"], "title": "a.md",
                        "shared_terms": ["atlas", "crm"], "coverage": round(2 / 7, 6), "score": 0.5}
    assert localrag.closest_notes(_closest_run([("g.md", ["year", "edition"])]), limit=1)[0]["source"] == "g.md"
    # below a fifth of the weight in two terms: no lead
    assert localrag.closest_notes({"terms": [{"term": t, "weight": 1.0, "df": 1} for t in "abcdefghijk"],
                                   "results": [{"source": "x.md", "matched_terms": ["a", "b"], "score": 1}]}) == []
    assert localrag.closest_notes({"terms": [], "results": []}) == []
    # a question of one term shares at most that one: an alert's name pasted alone ("PgConnectionsHigh") is refused
    # by the similarity threshold (seed 000's contract), and the note that names it is the lead
    one = {"terms": [{"term": "pgconnectionshigh", "weight": 9.0, "df": 1}],
           "results": [{"source": "runbook.md", "matched_terms": ["pgconnectionshigh"], "score": 0.4}]}
    assert [n["source"] for n in localrag.closest_notes(one)] == ["runbook.md"]


def test_a_refusal_names_the_closest_notes_and_an_answer_none(ingested):
    """A question in the vault's domain whose fact is not there (a price) is refused, and the refusal names the
    notes that share its words: where a person would look.  Off-topic questions, which share at most an everyday
    word, get none; an answer has none (null)."""
    config, _, _ = ingested
    response = localrag.ask(config, "What is the price of Atlas CRM Enterprise?")
    assert response["mode"] == "no_answer" and response["citations"] == []
    closest = response["closest"]
    assert closest and closest[0]["source"].startswith("products/Atlas CRM")
    assert all({"atlas", "crm", "enterprise"} <= set(c["shared_terms"]) for c in closest)
    assert len({c["source"] for c in closest}) == len(closest) <= localrag.CLOSEST_NOTES_MAX
    assert localrag.answer_show(config, response["answer_id"])["gate"]["closest"] == closest   # kept for audit
    for q in NO_ANSWER_SAMPLE:
        assert localrag.ask(config, q)["closest"] == [], q
    assert localrag.ask(config, Q_P1)["closest"] is None


def test_cli_http_and_openapi_show_the_closest_notes(http_api):
    post, _ = http_api
    question = "What is the price of Atlas CRM Enterprise?"
    code, out = run_cli("ask", question)
    assert code == 0 and "closest notes (not an answer; they share some of the question's words):" in out
    assert "products/Atlas CRM.md" in out and "(shares: atlas, crm, enterprise)" in out
    assert "open: localrag show " in out.split("closest notes")[1]
    code, out = run_cli("history", "show", str(localrag.answer_history(localrag.load_config(), 1)["answers"][0]["id"]))
    assert code == 0 and "closest      products/Atlas CRM" in out
    status, text = post("/ask", {"question": question})
    assert status == 200 and json.loads(text)["closest"][0]["source"].startswith("products/Atlas CRM")
    status, text = post("/ask/stream", {"question": question})
    assert status == 200 and '"closest": [{"source": "products/Atlas CRM' in text
    assert "closest" in localrag.openapi_spec()["components"]["schemas"]["AskResponse"]["properties"]


def test_cli_and_http_show_the_suggestion(http_api):
    post, _ = http_api
    code, out = run_cli("ask", TYPO_Q)
    assert code == 0 and "did you mean: What are the API latency alert thresholds?  (threshlods -> thresholds" in out
    code, out = run_cli("search", TYPO_Q)
    assert code == 0 and "did you mean: What are the API latency alert thresholds?" in out
    code, out = run_cli("history", "show", str(localrag.answer_history(localrag.load_config(), 1)["answers"][0]["id"]))
    assert code == 0 and "did you mean What are the API latency alert thresholds?" in out
    for path, field in (("/ask", "question"), ("/search", "query")):
        status, text = post(path, {field: TYPO_Q})
        assert status == 200 and json.loads(text)["suggestion"]["question"].endswith("thresholds?")
    status, text = post("/ask/stream", {"question": TYPO_Q})
    assert status == 200 and '"suggestion": {"question": "What are the API latency alert thresholds?"' in text
    spec = localrag.openapi_spec()["components"]["schemas"]
    assert "suggestion" in spec["AskResponse"]["properties"] and "suggestion" in spec["SearchResponse"]["properties"]


def test_a_question_the_embedder_cannot_read_is_answered_by_the_keyword_channel(db, tmp_path):
    """fake-lexical-v1 reads [a-z0-9] words and CJK (seed 000), so a Russian question is the zero vector: its cosine
    of 0 refused every question over a Russian vault (an other-language reviewer).  Hybrid then runs the keyword
    channel alone and the gate decides without a similarity; an explicit --retrieval vector is left as asked."""
    vault = tmp_path / "ru"
    write_vault(vault, {"Синхронизация.md": "# Синхронизация\n\nЧтобы включить синхронизацию, откройте настройки "
                                            "и выберите раздел синхронизации хранилища.\n",
                        "Темы.md": "# Темы\n\nТемы меняют внешний вид приложения: цвета, шрифты и отступы.\n"})
    localrag.ingest(db, vault)
    answer = localrag.ask(db, "Как включить синхронизацию хранилища?")
    assert answer["mode"] == "rag" and answer["citations"][0]["source"] == "Синхронизация.md"
    assert "no vector channel" in answer["reason"]
    with localrag.Store.open(db) as store:
        got = localrag.run_retrieval(store, db, "Как включить синхронизацию хранилища?", 3)
        assert got["search_path"] is None and "keyword channel alone" in got["search_path_reason"]
        assert got["vector_top"] is None and all(r["channels"] == ["keyword"] for r in got["results"])
        assert localrag.run_retrieval(store, db, "Как включить синхронизацию?", 3, "vector")["search_path"] == "exact"
    assert localrag.ask(db, "Как испечь хлеб на закваске?")["mode"] == "no_answer"   # off-topic stays refused


def test_the_word_after_how_asks_for_a_kind_of_fact_and_names_no_topic():
    """"How long should I keep my tax receipts?" passed the gate on "keep" and "long" (the vault's "as long as you
    renew"); an answering sentence says "retained for 1 month", never "long" (check5)."""
    assert localrag.question_terms("How long should I keep my tax receipts?") == ["keep", "tax", "receipt"]
    assert localrag.question_terms("How often does it check?") == ["check"]
    assert localrag.question_terms("Is there a limit on long notes?") == ["limit", "long", "note"]   # a topic here


@given(st.lists(st.integers(0, 5), max_size=30), st.integers(0, 4))
def test_spread_notes_moves_only_a_notes_chunks_beyond_the_limit(notes, limit):
    order = list(range(100, 100 + len(notes)))          # chunk ids, best first; notes[i] is chunk i's note
    document_of = dict(zip(order, notes))
    out = localrag.spread_notes(order, document_of, limit)
    assert sorted(out) == order                          # nothing lost, nothing added
    for note in set(notes):                              # a note's chunks keep their order
        assert [c for c in out if document_of[c] == note] == [c for c in order if document_of[c] == note]
    if not limit:
        assert out == order
        return
    # each chunk's place among its note's chunks: the first `limit` of every note, in order, then the rest, in order
    place = {c: [x for x in order if document_of[x] == document_of[c]].index(c) for c in order}
    assert out == [c for c in order if place[c] < limit] + [c for c in order if place[c] >= limit]


def test_spread_notes_leaves_a_chunk_without_a_note_in_place():
    assert localrag.spread_notes([1, 2, 3, 4], {1: 7, 2: 7, 3: 7}, 1) == [1, 4, 2, 3]


def test_results_spread_over_notes_while_the_gate_reads_the_top_by_score(ingested, monkeypatch):
    """RAG_MAX_CHUNKS_PER_NOTE (default 2): a note's third chunk waits behind every other note's candidates, so
    the top k names more notes; the evidence gate still reads the top chunks by score, so its decision and signals
    do not move; a search scoped to that note still gets all of it."""
    config, _, _ = ingested
    question, source = "What is the Support Escalation Policy?", "policies/Support Escalation Policy.md"
    plain_config = dataclasses.replace(config, rag_max_chunks_per_note=0)
    plain = localrag.search(plain_config, question, 5)
    spread = localrag.search(config, question, 5)
    assert [r["source"] for r in plain["results"]].count(source) > 2
    assert [r["source"] for r in spread["results"]].count(source) == 2
    assert spread["results"][:2] == [r for r in plain["results"] if r["source"] == source][:2]
    assert len({r["source"] for r in spread["results"]}) > len({r["source"] for r in plain["results"]})
    assert spread["gate"] == plain["gate"] and spread["confidence"] == plain["confidence"]
    scoped = localrag.search(config, question, 5, path=source)["results"]
    assert len(scoped) > 2 and {r["source"] for r in scoped} == {source}
    one = localrag.search(dataclasses.replace(config, rag_max_chunks_per_note=1), question, 5)
    assert [r["source"] for r in one["results"]].count(source) == 1
    for retrieval in ("vector", "keyword"):   # each mode takes candidates beyond the top k to spread over
        alone = [r["source"] for r in localrag.search(config, question, 5, retrieval=retrieval)["results"]]
        assert alone.count(source) == 2 and len(alone) == 5, retrieval
    # the CLI says why a score below is higher than one above it (the other notes' candidates ran out: a
    # keyword that ten chunks hold, the On-call note's third after them)
    scores = [r["score"] for r in localrag.search(config, "on-call", 10, retrieval="keyword")["results"]]
    assert any(later > earlier for earlier, later in zip(scores, scores[1:]))
    code, out = run_cli("search", "on-call", "--top-k", "10", "--retrieval", "keyword")
    assert code == 0 and "scores out of order: a note's chunks after its first 2 follow the other notes'" in out
    assert "out of order" not in run_cli("search", question)[1]
    monkeypatch.setenv("RAG_MAX_CHUNKS_PER_NOTE", "0")
    assert "out of order" not in run_cli("search", "on-call", "--top-k", "10", "--retrieval", "keyword")[1]
    # ask answers from the top chunks by score: the same evidence whatever the limit
    answered = localrag.ask(config, question)
    assert answered["mode"] == "rag" and answered == {**localrag.ask(plain_config, question),
                                                      "answer_id": answered["answer_id"]}
    assert [c["source"] for c in answered["citations"]].count(source) > 2
