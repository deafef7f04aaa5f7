"""Measure each answer-type rule on a dev set with tiers (answerable / near_miss / off_topic).

    LOCALRAG_HOME=... python bench/answer_rules.py eval/obsidian-dev.yaml [--json]

Uses the database of the current configuration, already ingested (e.g. the Obsidian Help en and zh vaults).
For every question: retrieval and the evidence gate as `ask` runs them, then context assembly and the
answer-type check (no model call).  Prints, per tier, the share answered (mode rag) with the gate only, with
every kept rule, and for each rule alone (the rule refusing, the others only recognising): what it adds to the
near_miss refusals and what it costs the answerable tier.  A rule pays when it refuses more near-miss questions
than it wrongly refuses answerable ones.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import localrag  # noqa: E402



def load(path: str) -> list[dict]:
    import yaml
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    items = data["questions"] if isinstance(data, dict) else data
    out = []
    for item in items:
        rag = item.get("expected_mode", "rag") == "rag"
        tier = item.get("tier") or ("answerable" if rag else "no_answer")
        out.append({"id": item["id"], "question": item["question"], "tier": tier, "answerable": rag})
    return out


def gate_and_blocks(config, store, question: str) -> tuple[str, list[dict]]:
    retrieved = localrag.run_retrieval(store, config, question, config.rag_top_k)
    mode, _reason, _signals = localrag.evidence_gate(localrag.gate_signals(retrieved),
                                                     localrag.GateSettings.from_config(config))
    if mode != "rag":
        return mode, []
    return mode, localrag.assemble_evidence(retrieved["results"], config.rag_context_token_budget,
                                            config.rag_top_k).blocks


def measure(path: str) -> dict:
    config = localrag.load_config()
    questions = load(path)
    with localrag.Store.open(config) as s:
        rows = []
        for q in questions:
            mode, blocks = gate_and_blocks(config, s, q["question"])
            rows.append({**q, "gate_mode": mode, "blocks": blocks,
                         "kind": localrag.answer_kind(q["question"])})
    rules = localrag.ANSWER_TYPE_RULES

    def answered(row: dict, table) -> bool:
        if row["gate_mode"] != "rag":
            return False
        return not localrag.answer_type_check(row["question"], row["blocks"], table)["refuses"]

    def groups() -> dict:
        out = {t: [r for r in rows if r["tier"] == t] for t in sorted({r["tier"] for r in rows})}
        out["ALL answerable"] = [r for r in rows if r["answerable"]]
        return out

    def tiers(table) -> dict:
        out = {}
        for tier, group in groups().items():
            share = sum(answered(r, table) for r in group) / len(group)
            out[tier] = {"n": len(group), "answered": round(share, 3), "refused": round(1 - share, 3)}
        return out

    none = tuple(dataclasses.replace(r, kept=False) for r in rules)
    every = tuple(dataclasses.replace(r, kept=True) for r in rules)
    report = {"questions": len(rows), "gate_only": tiers(none), "kept_rules": tiers(rules),
              "all_rules": tiers(every), "rules": []}
    for rule in rules:
        alone = tuple(dataclasses.replace(r, kept=(r.kind == rule.kind)) for r in rules)
        with_rule = tiers(alone)
        asked = [r for r in rows if r["kind"] == rule.kind]
        def delta(tier: str) -> int:
            group = groups()[tier]
            return sum(answered(r, none) and not answered(r, alone) for r in group)
        report["rules"].append({
            "kind": rule.kind, "kept": rule.kept, "asked_by": {t: sum(r in g for r in asked)
                                                                 for t, g in groups().items()},
            "near_miss_refused_added": delta("near_miss"), "answerable_refused_added": delta("ALL answerable"),
            "tiers_with_rule_alone": with_rule})
    report["questions_detail"] = [
        {"id": r["id"], "tier": r["tier"], "kind": r["kind"], "gate": r["gate_mode"],
         "answered": answered(r, rules),
         "check": localrag.answer_type_check(r["question"], r["blocks"]) if r["blocks"] else None} for r in rows]
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("questions")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--detail", action="store_true", help="list every question's kind and verdict")
    args = parser.parse_args()
    report = measure(args.questions)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    for name in ("gate_only", "kept_rules", "all_rules"):
        print(f"{name}:")
        for t, v in report[name].items():
            print(f"    {t:16} answered {v['answered']:.3f}  refused {v['refused']:.3f}  (n={v['n']})")
    print(f"\n{'rule':10} {'kept':5} {'asked (nm/ans)':15} {'+near_miss refused':19} {'+answerable refused':19}")
    for r in report["rules"]:
        print(f"{r['kind']:10} {str(r['kept']):5} {r['asked_by'].get('near_miss', 0):>5}/{r['asked_by'].get('ALL answerable', 0):<9} "
              f"{r['near_miss_refused_added']:>19} {r['answerable_refused_added']:>19}")
    if args.detail:
        for d in report["questions_detail"]:
            c = d["check"] or {}
            print(f"{d['id']:8} {d['tier']:11} {str(d['kind']):10} gate={d['gate']:9} answered={d['answered']!s:5} "
                  f"carried_by={c.get('carried_by')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
