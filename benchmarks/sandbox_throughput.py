"""Sandbox throughput: completions scored per second by the `code` reward in the local sandbox, one run at a
time and os.cpu_count() at a time.

    python benchmarks/sandbox_throughput.py [--completions N] [--repeats R] [--json] [--markdown FILE]

The problem is a typical stdin/stdout one with 3 test cases (read n numbers, print their sum and their
maximum); the completions are a mix as a GRPO group holds them: half right, a quarter wrong (min for max: one
test of three passes), a quarter failing with an exception. Every completion costs 3 runs of a fresh Python.
The figure is the best of R passes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards import execution  # noqa: E402
from rewards.sandbox import Limits  # noqa: E402

RIGHT = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))\nprint(max(xs))"
WRONG = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))\nprint(min(xs))"
CRASH = "n = int(input())\nxs = list(map(int, input().split()))\nprint(xs[n])"
CASES = [
    {"type": "stdin_stdout", "input": "3\n1 2 3\n", "output": "6\n3\n"},
    {"type": "stdin_stdout", "input": "1\n-5\n", "output": "-5\n-5\n"},
    {"type": "stdin_stdout", "input": "5\n10 -2 7 7 0\n", "output": "22\n10\n"},
]
INFO = {"language": "python", "test_cases": CASES}


def completion(program: str) -> str:
    return f"<think>\nSum and max.\n</think>\n<answer>\n```python\n{program}\n```\n</answer>"


def build_batch(count: int) -> tuple[list[str], list[float]]:
    """count completions and the score each must get."""
    kinds = [(RIGHT, 1.0), (WRONG, 1 / 3), (RIGHT, 1.0), (CRASH, 0.0)]
    chosen = [kinds[i % len(kinds)] for i in range(count)]
    return [completion(program) for program, _ in chosen], [score for _, score in chosen]


def cpu_seconds() -> float:
    """CPU time of this process and its finished children, user and system."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(completions: list[str], expected: list[float], workers: int | None, repeats: int) -> tuple[float, float]:
    """Best completions per second over repeats passes, and the CPU milliseconds one completion costs (parent
    and sandboxes together: what a machine's other load does not change); stops when a score is wrong."""
    execution.WORKERS = workers
    best, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        scores = execution.code(completions, verification_info=[INFO] * len(completions))
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, cpu_seconds() - start_cpu)
        if scores != expected:
            raise SystemExit(f"wrong scores with workers={workers}: {scores}")
    return len(completions) / best, 1000 * cpu / len(completions)


def markdown(result: dict) -> str:
    serial, parallel = result["serial_per_second"], result["parallel_per_second"]
    return "\n".join(
        [
            "# Sandbox throughput",
            "",
            "`python benchmarks/sandbox_throughput.py --markdown benchmarks/sandbox_throughput.md`: the `code` reward"
            " scoring completions of a 3-test stdin/stdout problem in the local sandbox (half right, a quarter"
            " passing one test of three, a quarter raising), best of "
            f"{result['repeats']} passes over {result['completions']} completions.",
            "",
            f"Machine: {result['cpus']} CPU cores ({result['machine']}), Python {result['python']}; load average"
            f" {result['load_average_before']} before the run (other work on the same cores).",
            "",
            "| runs at once | completions/s | program runs/s | ms per run |",
            "|---|---|---|---|",
            f"| 1 | {serial:.1f} | {serial * 3:.1f} | {1000 / (serial * 3):.1f} |",
            f"| {result['workers']} (os.cpu_count()) | {parallel:.1f} | {parallel * 3:.1f} |"
            f" {1000 / (parallel * 3):.1f} |",
            "",
            f"Speed-up: {parallel / serial:.2f}x. One completion costs {result['cpu_ms_per_completion']} ms of CPU"
            f" (parent and sandboxes), so each core left free scores about {1000 / result['cpu_ms_per_completion']:.0f}"
            " completions per second: the parallel figure grows with the cores the machine's other work leaves."
            " Each run starts a fresh Python, so the cost is the interpreter's start and the guard's set-up, not"
            " the program. A program that hangs costs its wall-clock limit"
            f" ({Limits().wall_s:g} s by default) for each of its test cases.",
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--completions", type=int, default=32, help="completions per pass (default 32)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes; the best counts (default 3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--markdown", type=Path, help="also write the result as a Markdown page here")
    args = parser.parse_args(argv)
    completions, expected = build_batch(args.completions)
    load = os.getloadavg()[0]
    serial, cpu_ms = measure(completions, expected, 1, args.repeats)
    parallel, _ = measure(completions, expected, None, args.repeats)
    result = {
        "serial_per_second": round(serial, 2),
        "parallel_per_second": round(parallel, 2),
        "cpu_ms_per_completion": round(cpu_ms, 1),
        "load_average_before": round(load, 2),
        "workers": os.cpu_count(),
        "tests_per_completion": len(CASES),
        "completions": len(completions),
        "repeats": args.repeats,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
    }
    if args.markdown:
        args.markdown.write_text(markdown(result))
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"code reward, 3 tests each: {serial:.1f} completions/s one run at a time, "
            f"{parallel:.1f} /s with {os.cpu_count()} at a time"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
