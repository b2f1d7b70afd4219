"""HOW LONG a whole run takes, from the command to its report: the steps (launcher.plan.duration) and what the run
does beside them, each predicted so that the plan states the time a user waits (no torch).

  start        the libraries' import in the attempt's process, the model's load (its weights read at
               LOAD_GB_S) and, where vLLM generates, the engine's start
  probes       the length probe (profile key length_probe: that many answers sampled at the cap) and the memory
               probe (one step at the cap, profile key probe)
  evaluations  the test rows scored before training, every eval_steps during it
               (profiles.evaluation_steps) and after it: eval_samples greedy answers each, generated as the step's
               own generation is timed (transformers' generate 16 rows at a time, vLLM all at once), and
               EVAL_ROW_S an answer to decode and judge it
  checkpoints  one every save_steps, and the adapter at the end: the trained weights and, in a checkpoint, their
               optimizer state written at SAVE_GB_S
  report       the summary and the plots

The step-time models (launcher.plan.speed, launcher.plan.cpu_speed) time the generations; the constants here are
this project's measurements: FITTED on the CPU's 2-thread machine class (by `python benchmarks/cpu_run_time.py
--constants-from RUNS.json`: benchmarks/cpu_run_time.md), the card's imports from the H100 kit's log
(benchmarks/gpu/nvidia-h100-80gb-hbm3-kit.log: Unsloth imported in 25-36 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from launcher.plan import cpu_speed
from launcher.plan.speed import generation_time, training_time
from launcher.plan.step_shape import StepShape, cores, shape_of
from profiles.evaluation_steps import eval_interval

# Seconds from the command to the attempt's first work: the supervisor's plan, the attempt's imports
CPU_START_S = 6.0  # fitted on the CPU (the module's docstring)
GPU_START_S = 45.0  # Unsloth's and TRL's imports (the H100 kit: 25-36 s for Unsloth alone) and CUDA's start
VLLM_START_S = 60.0  # vLLM's engine: its memory profile, KV cache and CUDA graphs (not yet timed by the kit)
LOAD_GB_S = 1.0  # weights read from the local cache and placed on the device
SAVE_GB_S = 0.5  # checkpoints written
SAVE_S = 0.3  # one save's own work (its folder, its small files)
REPORT_S = 0.85  # the adapter, the summary, five plots and the report; fitted on the CPU
EVAL_ROW_S = 0.0003  # a held-out answer beside its generation: decoded, its answer read and judged; fitted on the CPU
EVAL_BATCH = 16  # rows transformers' generate answers at once (evaluation.generate)
FITTED = ("CPU_START_S", "REPORT_S", "EVAL_ROW_S")


@dataclass(frozen=True)
class RunTime:
    """Predicted seconds of a run's parts beside its steps, in the order a run meets them."""

    parts: dict[str, float]
    evaluations: int
    checkpoints: int

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    def to_json(self) -> dict:
        return {
            **{f"{name}_s": round(value, 1) for name, value in self.parts.items()},
            "evaluations": self.evaluations,
            "checkpoints": self.checkpoints,
        }


def _generation_s(profile, shape: StepShape, card, sequences: int, completion: float, greedy: bool) -> float:
    """Seconds to generate `sequences` answers of about `completion` tokens (greedy: each as long as expected)."""
    cap = profile.max_completion_length
    expected = max(1, int(round(min(completion, cap))))
    one = replace(shape, generations=1, expected=expected, cap=cap if not greedy else expected, num_iterations=1)
    one = replace(one, steps_per_generation=1, tool_calls=0)
    if shape.generator == "vllm":
        batches, size = 1, sequences
    else:
        batches, size = math.ceil(sequences / EVAL_BATCH), min(sequences, EVAL_BATCH)
    one = replace(one, prompts=max(1, size))
    if card is None:
        return batches * cpu_speed.generation_time(one, cpu_speed.FLOPS_PER_THREAD * cores())
    return batches * generation_time(one, card)[0]


def _step_at_cap_s(shape: StepShape, card) -> float:
    at_cap = replace(shape, expected=shape.cap)
    if card is None:
        flops = cpu_speed.FLOPS_PER_THREAD * cores()
        return cpu_speed.generation_time(at_cap, flops) + cpu_speed.training_time(at_cap, flops)
    return generation_time(at_cap, card)[0] + training_time(at_cap, card)


def run_time(profile, arch, steps: int, gpu=None, estimate=None, lengths=None) -> RunTime:
    """The parts of `profile`'s run of `steps` optimizer steps beside them, on `gpu` (None: the CPU)."""
    from launcher.card.facts import DEFAULT, card_facts

    on_cpu = profile.device == "cpu" or gpu is None
    shape = shape_of(profile, arch, None if on_cpu else gpu, estimate, lengths)
    card = None if on_cpu else (card_facts(gpu.name, gpu.total_gib) or DEFAULT)
    if on_cpu:
        shape = replace(shape, generator="transformers", float32=True)
    weights_gb = arch.computed_params * (0.5625 if profile.load_in_4bit else (4.0 if on_cpu else 2.0)) / 1e9
    start = (CPU_START_S if on_cpu else GPU_START_S) + weights_gb / LOAD_GB_S
    if profile.fast_inference and not on_cpu:
        start += VLLM_START_S
    parts = {"start": start}
    probes = 0.0
    if profile.length_probe and not profile.distributed:
        probes += _generation_s(profile, shape, card, profile.length_probe, profile.max_completion_length, False)
    if getattr(profile, "probe", True) and not profile.distributed:
        probes += _step_at_cap_s(shape, card)
    parts["probes"] = probes
    every, _ = eval_interval(profile.model_copy(update={"max_steps": steps}))
    evaluations = (2 + ((steps - 1) // every if every else 0)) if profile.eval_samples else 0
    one_eval = (
        _generation_s(profile, shape, card, profile.eval_samples, shape.expected, True)
        + EVAL_ROW_S * profile.eval_samples
        if evaluations
        else 0.0
    )
    parts["evaluations"] = evaluations * one_eval
    checkpoints = steps // profile.save_steps if profile.save_steps else 0
    trained_gb = shape.trainable_params * 4.0 / 1e9  # float32 adapters or weights
    parts["checkpoints"] = checkpoints * (SAVE_S + 3.0 * trained_gb / SAVE_GB_S) + SAVE_S + trained_gb / SAVE_GB_S
    parts["report"] = REPORT_S
    return RunTime(parts, evaluations, checkpoints)
