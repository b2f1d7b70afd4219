"""Reward throughput: completions scored per second by `accuracy` + `xml_strict` on one CPU core.

    python benchmarks/rewards_throughput.py [--completions N] [--repeats R] [--min-chars C] [--json]

The completions are GSM8K-shaped worked solutions from the arithmetic generator, in a realistic mix:
right answers in the strict format, wrong numbers, loose spacing, no tags, and conversational messages.
The figure is the best of R timed passes over N completions (each completion goes through both rewards).
Target: >= 50,000 completions per second.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards import REWARDS  # noqa: E402
from tasks.arithmetic import generate  # noqa: E402

TARGET_PER_SECOND = 50_000


def build_batch(count: int, seed: int = 0, min_chars: int = 0) -> tuple[list, list[str]]:
    """count completions and their gold answers, cycling through five kinds of completion; the reasoning
    is repeated until it is at least min_chars long (a model's reasoning is often longer than GSM8K's)."""
    completions, golds = [], []
    for index, row in enumerate(generate(count, seed=seed)):
        reasoning = row["answer_text"].rpartition("####")[0].strip()
        if reasoning and len(reasoning) < min_chars:
            reasoning = "\n".join([reasoning] * -(-min_chars // len(reasoning)))
        gold = row["answer"]
        kind = index % 5
        if kind == 0:  # right, strict format
            text = f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{gold}\n</answer>\n"
        elif kind == 1:  # wrong number, strict format
            text = f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{int(gold) + 1}\n</answer>"
        elif kind == 2:  # right, loose spacing and a unit
            text = f"<reasoning> {reasoning} </reasoning> <answer> ${gold} dollars </answer>"
        elif kind == 3:  # no tags at all
            text = f"{reasoning}\nThe answer is {gold}."
        else:  # conversational, right, strict
            text = [
                {"role": "assistant", "content": f"<reasoning>\n{reasoning}\n</reasoning>\n<answer>\n{gold}\n</answer>"}
            ]
        completions.append(text)
        golds.append(gold)
    return completions, golds


def measure(completions: list, golds: list[str], names: list[str], repeats: int) -> float:
    """Best completions-per-second over repeats passes, each pass scoring every completion with every name."""
    functions = [REWARDS[name] for name in names]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for function in functions:
            function(completions=completions, answer=golds)
        best = min(best, time.perf_counter() - start)
    return len(completions) / best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=20_000, help="completions per pass (default 20000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes; the best counts (default 5)")
    parser.add_argument(
        "--min-chars",
        type=int,
        default=0,
        help="repeat each reasoning to at least this many characters (default 0: as generated)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):  # one core, whatever the machine has
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    completions, golds = build_batch(args.completions, min_chars=args.min_chars)
    mean_chars = sum(len(c if isinstance(c, str) else c[0]["content"]) for c in completions) / len(completions)
    combined = measure(completions, golds, ["accuracy", "xml_strict"], args.repeats)
    each = {name: measure(completions, golds, [name], args.repeats) for name in REWARDS}
    result = {
        "accuracy+xml_strict_per_second": round(combined),
        "per_reward_per_second": {name: round(rate) for name, rate in each.items()},
        "completions": len(completions),
        "mean_chars": round(mean_chars),
        "target_per_second": TARGET_PER_SECOND,
        "meets_target": combined >= TARGET_PER_SECOND,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"accuracy + xml_strict: {combined:,.0f} completions/s on one core "
            f"(target {TARGET_PER_SECOND:,}; {len(completions):,} completions of {mean_chars:.0f} chars on average)"
        )
        for name, rate in each.items():
            print(f"  {name:<10} {rate:>12,.0f} /s")
    return 0 if combined >= TARGET_PER_SECOND else 1


if __name__ == "__main__":
    raise SystemExit(main())
