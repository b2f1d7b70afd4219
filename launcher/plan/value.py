"""HOW MUCH a configuration learns per hour: the objective the planner ranks configurations by.

An optimizer step of P prompts (each a GRPO group) moves the model as far as P / (P + B) of a step whose
gradient had no sampling noise, B being the critical batch in prompts: the scale where more prompts per update
stop paying for themselves (the gradient noise scale of McCandlish et al. 2018, "An Empirical Model of
Large-Batch Training", arXiv 1812.06162; extended to GRPO's groups by "Critical Batch Size for LLM Policy
Optimization", ICML 2026 HiLD workshop). Learning per hour is then

    updates per hour x P / (P + B)

which grows with P while P is below B and the step costs little more, and falls once a larger step buys less
than the time it takes. A step that reuses a generation batch (num_iterations > 1) counts as an update like
any other; the planner never chooses reuse itself (its value is not measured here).

B is measured where this project can measure it: on the CPU default, `python benchmarks/batch_sweep.py` trains
the tiny model at 1 to 32 prompts per step for the same wall time and fits B to the held-out accuracy gained
per minute (benchmarks/batch_sweep.md). On a GPU B is an estimate from published GRPO practice (docs/planning.md)
until a card measures it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Measured on the CPU default (tiny model, generated arithmetic, 8 generations): benchmarks/batch_sweep.md
CRITICAL_BATCH_CPU = 83.0
# Estimated for GPU models on GSM8K-like tasks from published recipes (docs/planning.md): DeepSeekMath updated
# on 16 questions of 64 outputs, DAPO on mini-batches of 32 prompts of 16; not yet measured on a card
CRITICAL_BATCH_GPU = 16.0


@dataclass(frozen=True)
class CriticalBatch:
    prompts: float
    source: str  # "measured ..." or "estimate ..."

    def text(self) -> str:
        return f"B = {self.prompts:g} prompts ({self.source})"


def critical_batch(device: str = "cuda") -> CriticalBatch:
    """The critical batch the planner values updates by on `device` ("cuda" or "cpu")."""
    if device == "cpu":
        return CriticalBatch(CRITICAL_BATCH_CPU, "measured on the CPU default, benchmarks/batch_sweep.md")
    return CriticalBatch(CRITICAL_BATCH_GPU, "estimate from published GRPO recipes, docs/planning.md")


# What an update on the completions of an older policy is worth against one on fresh completions, by optimizer
# steps one generation batch serves (steps_per_generation). Measured on the CPU default at equal wall time
# (benchmarks/generation_reuse.md, 3 seeds): serving 2 and 4 steps gained +37.7 and +35.0 points against +34.8
# with fewer updates, 1.12 and 1.17 times the gain per update; credited at most as much as a fresh update
REUSE_VALUE = {1: 1.0, 2: 1.0, 4: 1.0}


def reuse_value(updates_per_generation: int) -> float:
    """What each update of a generation batch serving `updates_per_generation` steps is worth (REUSE_VALUE)."""
    return REUSE_VALUE.get(max(1, updates_per_generation), min(REUSE_VALUE.values()))


def update_value(prompts: float, critical: float) -> float:
    """What one update of `prompts` prompts is worth against a noiseless one: P / (P + B)."""
    if prompts <= 0:
        return 0.0
    return prompts / (prompts + max(critical, 0.0))


def learning_per_hour(updates_per_hour: float, prompts: float, critical: float) -> float:
    """The objective: updates per hour, each worth P / (P + B)."""
    return max(updates_per_hour, 0.0) * update_value(prompts, critical)
