"""WHEN the test rows are scored during training: every how many optimizer steps a profile's run evaluates
(profile key eval_steps), read by the trainer that evaluates and by the planner that times the run. Pure."""

from __future__ import annotations

import math

# Evaluation during training (profile key eval_steps: auto) may take about this share of training time.
EVAL_TIME_SHARE = 0.1
# Generating with transformers where training generates with vLLM (under accelerate, rank 0 evaluates with
# `generate`) is several times slower per completion than the step's own generation.
GENERATE_VS_VLLM = 5.0


def eval_interval(profile) -> tuple[int, str]:
    """(every how many steps the test rows are scored during training, 0 = never; why, in a few words).

    auto: one evaluation generates eval_samples greedy completions where a step generates effective_batch
    sampled ones per process and trains on them, so it costs at most eval_samples / effective_batch steps; the
    interval makes that EVAL_TIME_SHARE of the steps between two evaluations, and is off where that interval
    is not shorter than the run (the final evaluation is always made)."""
    if not profile.eval_samples:
        return 0, "eval_samples is 0"
    if profile.zero_stage == 3:
        return 0, "ZeRO-3 partitions the weights across the ranks: rank 0 cannot generate alone"
    if profile.eval_steps != "auto":
        every = int(profile.eval_steps)
        return (
            (every, f"every {every} steps (eval_steps)")
            if 0 < every < profile.max_steps
            else (0, "eval_steps is 0" if not every else f"eval_steps {every} >= max_steps {profile.max_steps}")
        )
    cost = profile.eval_samples / profile.effective_batch
    if profile.distributed and profile.fast_inference and profile.device == "cuda":
        cost *= GENERATE_VS_VLLM
    every = max(1, math.ceil(cost / EVAL_TIME_SHARE))
    if every >= profile.max_steps:
        return 0, (
            f"auto: one evaluation costs ~{cost:.1f} steps; at a tenth of training time that is every "
            f"{every} steps, not shorter than the run ({profile.max_steps})"
        )
    return every, f"auto: every {every} steps (one evaluation costs ~{cost:.1f} steps, a tenth of the time)"
