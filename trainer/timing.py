"""HOW LONG steps really took: the measured seconds per optimizer step of an attempt (set beside the plan's
prediction in summary.json, outcome.json and attempts.jsonl, and kept by the ledger per shape), and the timers
that measure one generation wave and one training step on a card.

benchmarks/gpu_check.py calls `time_generation_wave` and `time_training_step` (with `synchronize` around them)
so that the first card measured calibrates the step-time model (launcher/plan/speed.py): its report sets the
measured wave and step beside the model's generation and training times for the same shape.

Nothing here imports torch at module level: the step figures come from metrics.jsonl rows, and the timers
import it only to wait for the GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

# The first steps compile kernels, capture CUDA graphs and warm the allocator: not the steady state
WARMUP_STEPS = 1


def synchronize() -> None:
    """Wait for the GPU's queued work (nothing without CUDA)."""
    try:
        import torch
    except ImportError:
        return
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def measured_step(rows: list[dict], predicted_s: float | None = None) -> dict | None:
    """The steady-state seconds per optimizer step of an attempt from its metrics.jsonl rows (`step_time`,
    `completion_length`): the median over the steps after WARMUP_STEPS (all of them when there are no more),
    with the prediction beside it. None when no step was timed."""
    times = [r["step_time"] for r in rows if isinstance(r.get("step_time"), (int, float)) and r["step_time"] > 0]
    if not times:
        return None
    steady = times[WARMUP_STEPS:] or times
    lengths = [
        r["completion_length"]
        for r in rows[WARMUP_STEPS:] or rows
        if isinstance(r.get("completion_length"), (int, float))
    ]
    step = statistics.median(steady)
    return {
        "step_s": round(step, 4),
        "steps_timed": len(steady),
        "first_step_s": round(times[0], 4),
        "completion_mean": round(statistics.fmean(lengths), 1) if lengths else None,
        "predicted_step_s": None if predicted_s is None else round(predicted_s, 4),
        "ratio": round(step / predicted_s, 3) if predicted_s else None,
    }


def time_generation_wave(generate: Callable[[], list[int]], repeats: int = 3, warmups: int = 1) -> dict:
    """Seconds of one generation wave: `generate()` produces one batch of completions (every sequence of the
    wave at once: vLLM's `llm.generate` or transformers' `model.generate` on the prompts) and returns each
    completion's length in tokens. The median of `repeats` timed calls after `warmups` untimed ones."""
    for _ in range(warmups):
        generate()
    synchronize()
    seconds, tokens = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        lengths = list(generate())
        synchronize()
        seconds.append(time.perf_counter() - started)
        tokens.append(lengths)
    wave = statistics.median(seconds)
    last = tokens[seconds.index(wave)] if wave in seconds else tokens[-1]
    return {
        "seconds": round(wave, 4),
        "sequences": len(last),
        "tokens": int(sum(last)),
        "longest": int(max(last, default=0)),
        "mean_completion": round(statistics.fmean(last), 1) if last else 0.0,
        "tokens_per_s": round(sum(last) / wave, 1) if wave > 0 else None,
        "repeats": repeats,
    }


def time_training_step(step: Callable[[], object], repeats: int = 3, warmups: int = 1) -> dict:
    """Seconds of one training step: `step()` runs one forward, backward and optimizer step over a fixed batch.
    The median of `repeats` timed calls after `warmups` untimed ones (the first compiles)."""
    for _ in range(warmups):
        step()
    synchronize()
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        synchronize()
        seconds.append(time.perf_counter() - started)
    return {
        "seconds": round(statistics.median(seconds), 4),
        "min_s": round(min(seconds), 4),
        "max_s": round(max(seconds), 4),
        "repeats": repeats,
    }


def calibration(measured: dict, predicted: dict) -> dict:
    """Measured over predicted for each phase both give ("generation_s", "training_s", "step_s"): the factor
    by which the step-time model is off on this card (1.0 = exact)."""
    out = {}
    for key in ("generation_s", "training_s", "step_s"):
        m, p = measured.get(key), predicted.get(key)
        if isinstance(m, (int, float)) and isinstance(p, (int, float)) and p > 0:
            out[key] = round(m / p, 3)
    return out
