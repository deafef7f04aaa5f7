"""Per-file CPU of reading notes: parse_note over every Markdown, canvas and text file of a vault, and of finding
a note's tags and links (extract_tags + extract_links on the text parse_note hands them), for one or more
localrag.py files side by side (interleaved, so machine noise hits each alike); the median of N rounds.

    python bench/parse_time.py /tmp/base/localrag.py localrag.py [--corpus DIR] [--rounds 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from ingest_check import CORPUS, load


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="+", help="localrag.py files (or their folders)")
    parser.add_argument("--corpus", default=str(CORPUS))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(args.corpus)
    files = [(str(p.relative_to(root)), p.read_bytes()) for p in sorted(root.rglob("*"))
             if p.is_file() and p.suffix in (".md", ".canvas", ".txt")]
    runs = []
    for n, path in enumerate(args.modules):
        module = load(path, f"localrag_{n}")
        module._tag_re()   # compiled once, on first use
        texts: list[str] = []
        strip = module._strip_code
        module._strip_code = lambda *a, _strip=strip, **k: texts.append(_strip(*a, **k)) or texts[-1]
        for rel, data in files:
            module.parse_note(rel, data)
        module._strip_code = strip
        runs.append((path, module, texts, [], []))
    for _ in range(args.rounds):
        for _, module, texts, parse, found in runs:
            started = time.process_time()
            for rel, data in files:
                module.parse_note(rel, data)
            middle = time.process_time()
            for text in texts:
                module.extract_tags(text, {})
                module.extract_links(text)
            parse.append(middle - started)
            found.append(time.process_time() - middle)
    print(f"{len(files)} files, median of {args.rounds} rounds, per file:")
    for path, _, _, parse, found in runs:
        print(f"  {path}: parse_note {statistics.median(parse) * 1e6 / len(files):.0f} us, "
              f"tags+links {statistics.median(found) * 1e6 / len(files):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
