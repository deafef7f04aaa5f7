"""Issue 13: does a faster ingest store exactly what the old one stored?  Every file of a vault goes through
prepare_file (decode, frontmatter, parse, chunk, fake embedding, keyword rows, line ranges: everything a
worker hands to the database) in a base localrag.py and in a new one; any difference is listed.

    python bench/ingest_check.py --base /tmp/ing-base/localrag.py --new . [--corpus DIR] [--limit N]

Exit status 1 when any file differs.  The chunks' ids are assigned later, in the main process, by the database:
each chunk's `chunks` COPY tuple is compared for fixed ids, built as each module's ingest builds it.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora" / "obsidian-help"


def load(path: str, name: str):
    file = Path(path)
    if file.is_dir():
        file = file / "localrag.py"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def plain(value):
    """A _Prepared (or anything in it) as plain values, so two modules' dataclasses compare."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def prepared(module, rel: str, data: bytes):
    got = module.prepare_file(rel, data, module.FakeLexicalEmbedder())
    if isinstance(got, str):
        return got
    out = plain(got)
    out.pop("rows", None)   # checked against the rows the old main process built (chunk_rows)
    out["chunk_rows"] = chunk_rows(module, got, rel)
    out["keywords"] = keyword_rows(module, got)   # the COPY bytes, whatever form the worker hands them in
    return out


def keyword_rows(module, prepared) -> list[tuple[bytes, bytes]]:
    """Each chunk's keyword_chunks and keyword_postings COPY tuples as the ingest writes them, for chunk id 1."""
    rows = []
    for packed in prepared.keywords:
        chunks, postings = module._Copy(3), module._Copy(4)
        module._keyword_rows(chunks, postings, module._Copy.int8(1), packed)
        rows.append((chunks.buf.getvalue(), chunks.rows, postings.buf.getvalue(), postings.rows))
    return rows


def chunk_rows(module, prepared, rel: str) -> list[bytes]:
    """Each chunk's `chunks` COPY tuple as the ingest writes it, for chunk id 1, document id 2, path /f: from the
    worker's bytes when the module has them (_chunk_row_parts), else as the main process used to build it."""
    C = module._Copy
    cid, doc_id, path = C.int8(1), C.int8(2), C.text("/f")
    if hasattr(module, "_chunk_row_parts"):
        head, after_id, at = module._CHUNK_HEAD, module._INT4.pack(8) + doc_id, module._copy_field(path)
        return [b"".join((head, cid, after_id, middle, at, tail)) for middle, tail in prepared.rows]
    rows = []
    fm, tags, links = C.jsonb(prepared.frontmatter), C.text_array(prepared.tags), C.text_array(prepared.wikilinks)
    for chunk, (line_start, line_end), blocks in zip(prepared.chunks, prepared.lines,
                                                     prepared.block_ids or [[]] * len(prepared.chunks)):
        meta = {"char_start": chunk.start, "char_end": chunk.end, "line_start": line_start, "line_end": line_end,
                "embeds": prepared.embeds, "title": prepared.title, "aliases": list(prepared.aliases)}
        if blocks:
            meta["block_ids"] = blocks
        one = C(13)
        one.row(cid, doc_id, C.int4(chunk.index), C.text(chunk.content), path, C.text(rel),
                C.text_array(chunk.heading_path), fm, tags, links, C.jsonb(meta), C.text(chunk.content_hash),
                C.int4(chunk.token_count))
        rows.append(one.buf.getvalue()[19:])   # without the PGCOPY header
    return rows


def first_difference(a, b, where: str = "") -> str:
    if type(a) is not type(b):
        return f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return first_difference(a.get(key), b.get(key), f"{where}.{key}")
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return first_difference(x, y, f"{where}[{i}]")
    return f"{where}: {str(a)[:200]!r} != {str(b)[:200]!r}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the old localrag.py (or its folder)")
    parser.add_argument("--new", required=True, help="the new localrag.py (or its folder)")
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--limit", type=int, default=None, help="only the first N files")
    args = parser.parse_args()
    if not Path(args.corpus).is_dir():
        parser.error(f"no vault at {args.corpus}: give --corpus PATH")
    base, new = load(args.base, "localrag_base"), load(args.new, "localrag_new")
    files = new.scan_vault(Path(args.corpus)).files[:args.limit]
    differing, chunks, spent = [], 0, {"base": 0.0, "new": 0.0}
    fields: dict[tuple[str, ...], int] = {}   # which of prepare_file's fields differ, and in how many files
    for rel, path in files:
        data = path.read_bytes()
        t0 = time.perf_counter()
        old = prepared(base, rel, data)
        t1 = time.perf_counter()
        got = prepared(new, rel, data)
        t2 = time.perf_counter()
        spent["base"] += t1 - t0
        spent["new"] += t2 - t1
        if not isinstance(old, str):
            chunks += len(old["chunks"])
        if old != got:
            differing.append((rel, first_difference(old, got)))
            if isinstance(old, dict) and isinstance(got, dict):
                which = tuple(sorted(k for k in set(old) | set(got) if old.get(k) != got.get(k)))
                fields[which] = fields.get(which, 0) + 1
    for rel, what in differing[:20]:
        print(f"DIFFERS {rel}: {what}")
    for which, n in sorted(fields.items(), key=lambda kv: -kv[1]):
        print(f"{n:6d} files differ in {', '.join(which)}")
    print(f"{len(files)} files, {chunks} chunks: {len(differing)} differing "
          f"(prepare_file CPU: base {spent['base']:.2f} s, new {spent['new']:.2f} s)")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
