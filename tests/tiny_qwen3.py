"""A tiny, random-weight stand-in for ``Qwen/Qwen3-Embedding-0.6B``, built on the fly.

Why this exists: localrag's default embedder is Qwen3-Embedding-0.6B, loaded through
sentence-transformers from the Hugging Face hub cache. Hugging Face is unreachable from
our machines and CI (only package registries are), and the real weights are >1 GB anyway.
So the tests build a look-alike with the same *shape* and put it where the real download
would land: a real ``Qwen3Model`` (``model_type: qwen3``, 1 layer, ``hidden_size == dim``),
a byte-level BPE tokenizer trained in a blink on the English+Chinese sentences below
(left padding, ``<|endoftext|>`` appended like the real tokenizer, for last-token pooling),
and the real repo's sentence-transformers files (Transformer -> last-token Pooling ->
Normalize, with the "query" instruction prompt), inside an HF hub cache layout
``models--Qwen--Qwen3-Embedding-0.6B/{refs/main,snapshots/<commit>}``. Code under test then
loads it by its real id with ``HF_HUB_OFFLINE=1`` and exercises the real loading path.

The embeddings are meaningless (random weights, fixed seed): test plumbing, not quality.
Heavy imports are done inside the functions so that importing this module does not freeze
huggingface_hub's offline constants before a test has set ``HF_HUB_OFFLINE``.
Run ``python tests/tiny_qwen3.py`` to build one in a temp dir and self-check it.
"""

from __future__ import annotations

import json
import pathlib
import shutil

MODEL_ID = "Qwen/Qwen3-Embedding-0.6B"
FAKE_COMMIT = "0123456789abcdef0123456789abcdef7e57ba5e"  # fixed fake 40-hex snapshot id
QUERY_PROMPT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
SEED = 1234
VOCAB_SIZE = 1024
MAX_SEQ_LENGTH = 512
PAD, EOS, IM_START = "<|endoftext|>", "<|im_end|>", "<|im_start|>"

# A few hundred short sentences (the cross product below) to train the tokenizer on.
_EN_SUBJECTS = ["The cat", "My friend", "The search engine", "This document", "A local model",
                "The index", "Our team", "The user", "Every query", "The database"]
_EN_PREDICATES = ["reads the report", "answers the question", "stores embeddings on disk",
                  "finds relevant passages", "runs without a network", "retrieves the notes",
                  "splits text into chunks", "ranks the results", "loads the tokenizer",
                  "explains how it works", "is fast and private", "searches my files"]
_ZH_SUBJECTS = ["我", "你", "我们", "这个模型", "搜索引擎", "用户", "文档", "数据库"]
_ZH_PREDICATES = ["喜欢读书", "回答问题", "检索相关段落", "在本地运行", "把文本切成小块",
                  "保存向量", "对结果排序", "不需要网络", "很快也很安全", "查找我的文件"]
_EXTRA = ["hello", "hello world", "你好", "你好，世界", "What is retrieval augmented generation?",
          "什么是检索增强生成？", "Query: where are my notes?", "Instruct: Given a web search query, "
          "retrieve relevant passages that answer the query", "0 1 2 3 4 5 6 7 8 9", "a.b-c_d/e:f"]


def training_sentences() -> list[str]:
    en = [f"{s} {p}." for s in _EN_SUBJECTS for p in _EN_PREDICATES]
    zh = [f"{s}{p}。" for s in _ZH_SUBJECTS for p in _ZH_PREDICATES]
    return en + zh + _EXTRA


def _build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[PAD, IM_START, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_sentences(), trainer=trainer)
    # Like the real Qwen3-Embedding tokenizer: append <|endoftext|> to every input, so
    # last-token pooling reads a fixed, always-present final token.
    pad_id = tok.token_to_id(PAD)
    tok.post_processor = processors.TemplateProcessing(
        single=f"$A {PAD}", pair=f"$A {PAD} $B {PAD}", special_tokens=[(PAD, pad_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS,
                                   padding_side="left", model_max_length=MAX_SEQ_LENGTH)


def _write_json(path: pathlib.Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def build_tiny_qwen3(cache_dir: pathlib.Path, *, dim: int = 1024, model_id: str = MODEL_ID) -> pathlib.Path:
    """Build a tiny random-weight Qwen3 embedding model and place it in a Hugging Face hub cache layout
    under cache_dir (models--Qwen--Qwen3-Embedding-0.6B/{refs/main, snapshots/<40-hex>/...}), so that
    SentenceTransformer(model_id, cache_folder=str(cache_dir), local_files_only=True, device="cpu")
    loads it with HF_HUB_OFFLINE=1. Returns the snapshot directory."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    repo_dir = pathlib.Path(cache_dir) / ("models--" + model_id.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / FAKE_COMMIT
    if snapshot.exists():  # rebuilding (maybe with another dim): start clean
        shutil.rmtree(snapshot)
    snapshot.mkdir(parents=True)
    (repo_dir / "blobs").mkdir(exist_ok=True)
    (repo_dir / "refs").mkdir(exist_ok=True)
    (repo_dir / "refs" / "main").write_text(FAKE_COMMIT)  # no newline, as huggingface_hub writes it

    tokenizer = _build_tokenizer()
    tokenizer.save_pretrained(str(snapshot))

    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=dim, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=32768,
        tie_word_embeddings=False, use_sliding_window=False, sliding_window=None,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):  # deterministic, without disturbing the caller's RNG
        torch.manual_seed(SEED)
        model = Qwen3Model(config).eval()
    model.save_pretrained(str(snapshot), safe_serialization=True)

    _write_json(snapshot / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])
    _write_json(snapshot / "sentence_bert_config.json",
                {"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    _write_json(snapshot / "config_sentence_transformers.json", {
        "prompts": {"query": QUERY_PROMPT, "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    })
    _write_json(snapshot / "1_Pooling" / "config.json", {
        "word_embedding_dimension": dim,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": True,
        "include_prompt": True,
    })
    (snapshot / "2_Normalize").mkdir()
    (snapshot / "README.md").write_text(f"# Tiny random stand-in for {model_id} (tests only)\n")
    return snapshot


def _self_check() -> None:
    import os
    import tempfile
    import time
    import warnings

    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # Decoy homes: cache_folder must win over these.
        os.environ["HF_HOME"] = str(tmp / "decoy_hf_home")
        os.environ["SENTENCE_TRANSFORMERS_HOME"] = str(tmp / "decoy_st_home")
        import numpy as np
        from sentence_transformers import SentenceTransformer

        for dim in (1024, 384):
            cache = tmp / f"cache{dim}"
            t0 = time.perf_counter()
            snapshot = build_tiny_qwen3(cache, dim=dim)
            print(f"built dim={dim} in {time.perf_counter() - t0:.2f}s at {snapshot}")
            for extra in ({}, {"local_files_only": True}):
                model = SentenceTransformer(MODEL_ID, cache_folder=str(cache), device="cpu", **extra)
                with warnings.catch_warnings():  # renamed get_embedding_dimension in ST 6
                    warnings.simplefilter("ignore", FutureWarning)
                    assert model.get_sentence_embedding_dimension() == dim
                emb = model.encode(["hello", "你好"], normalize_embeddings=True)
                assert emb.shape == (2, dim), emb.shape
                assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
                assert not np.allclose(emb[0], emb[1])
                q = model.encode(["q"], prompt_name="query")
                plain = model.encode(["q"])
                assert q.shape == (1, dim) and not np.allclose(q, plain)
                # batching/padding must not change a text's embedding (left padding + last token)
                alone = model.encode(["a much longer sentence about local search"])
                batched = model.encode(["hi", "a much longer sentence about local search"])
                assert np.allclose(alone[0], batched[1], atol=1e-4)
            assert not (tmp / "decoy_hf_home").exists() and not (tmp / "decoy_st_home").exists()
        # same seed -> byte-identical weights
        again = build_tiny_qwen3(tmp / "again", dim=1024)
        first = tmp / "cache1024" / "models--Qwen--Qwen3-Embedding-0.6B" / "snapshots" / FAKE_COMMIT
        for name in ("model.safetensors", "tokenizer.json"):
            assert (again / name).read_bytes() == (first / name).read_bytes(), name
    print("OK")


if __name__ == "__main__":
    _self_check()
