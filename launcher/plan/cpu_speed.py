"""HOW LONG one optimizer step takes on the CPU (no torch): the CPU's step-time model, beside the cards' in
launcher.plan.speed, and read the same way (a StepTime).

On the CPU, PyTorch runs one op after another on the cores, in float32, and transformers' generate writes the
completions. For the small models a CPU trains, a step is mostly Python's and the ops' own work, not arithmetic;
for larger ones the arithmetic takes over. The model:

  generation   every completion of the step at once, for as many decode steps as the longest (launcher.plan.speed
               longest_of): each decode step dispatches every layer's ops (DISPATCH_S a layer), runs the generate
               loop's own work (GENERATE_STEP_S: sampling, stopping, the cache) and computes 2 x parameters FLOPs
               a sequence; the prompts' prefill at the FLOP rate
  training     each micro-batch's forward and backward (and the reference's forward when beta > 0) over prompt +
               completion tokens: 2 x parameters FLOPs a token a forward (twice that backward for full
               fine-tuning) and the ops' dispatch of each pass; the optimizer over what is trained
  fixed        STEP_S a step (TRL's bookkeeping, logging, the optimizer's Python) and COMPLETION_S a completion
               (what grows with the completions beside the arithmetic: sampling and copying its tokens,
               the log-softmax over the vocabulary, decoding it to text, its rewards), and the programs that
               code rewards run (launcher.plan.speed programs_time)

The rate is FLOPS_PER_THREAD x the threads PyTorch runs on (the cores this process may use). DISPATCH_S is the
CPU kit's (benchmarks/gpu/cpu.md: a decode step of the tiny model's 2 layers in 1.8-1.9 ms); FITTED were fitted
to steps timed on this project's CPU machine class (2 threads, x86_64 with AVX-512) by `python
benchmarks/cpu_run_time.py --constants-from RUNS.json`, whose table (benchmarks/cpu_run_time.md) holds the fit's
runs and the runs that check it. A step this machine measured (the ledger's) is the step's time instead, as on
a card.
"""

from __future__ import annotations

import math
from dataclasses import replace

from launcher.plan.speed import StepTime, as_measured, longest_of, programs_time
from launcher.plan.step_shape import StepShape, cores, shape_of

NAME = "CPU"
DISPATCH_S = 0.0009  # one layer's ops dispatched once (a forward pass over one layer)
# Fitted to this machine class (the module's docstring)
GENERATE_STEP_S = 0.0  # one decode step of transformers' generate beyond its layers (fitted: nothing beyond them)
STEP_S = 0.0  # per optimizer step (fitted: nothing beyond the layers' dispatch and the completions)
COMPLETION_S = 0.0018  # per completion
FLOPS_PER_THREAD = 5.0e10  # float32 matrix products one thread sustains: 46-84 GFLOPS measured here (2 threads,
#                            AVX-512; the tiny model's 64 x 256 products at the low end, 2048-wide at the high)
FITTED = ("GENERATE_STEP_S", "STEP_S", "COMPLETION_S")


def generation_time(s: StepShape, flops: float) -> float:
    """Seconds transformers' generate takes for the step's completions, all at once."""
    n = max(1, s.completions)
    longest = longest_of(n, s.expected, s.cap)
    params = s.active_linear_params + s.lm_head_params
    prefill = n * s.prompt_tokens * 2.0 * params / flops
    decode = DISPATCH_S * s.layers + GENERATE_STEP_S + 2.0 * params * n / flops
    return prefill + longest * decode


def training_time(s: StepShape, flops: float) -> float:
    """Seconds of forward, backward and the optimizer over the step's completions."""
    micro_batches = max(1, math.ceil(s.completions / max(s.micro_batch, 1)))
    size = min(s.micro_batch, s.completions)
    longest = longest_of(size, s.expected, s.cap)
    tokens = size * (s.prompt_tokens + longest)
    backward = 1.0 if s.lora else 2.0
    forwards = 1.0 + backward + (1.0 if s.checkpointing else 0.0) + s.extra_forwards + s.old_policy_forwards
    arithmetic = forwards * (2.0 * s.active_linear_params * tokens + 2.0 * s.lm_head_params * size * longest)
    passes = 2.0 + (1.0 if s.checkpointing else 0.0) + s.extra_forwards + s.old_policy_forwards
    per_micro = arithmetic / flops + passes * s.layers * DISPATCH_S
    optimizer = 16.0 * s.trainable_params / (flops / 4.0)  # float32 parameter, gradient and two moments
    return micro_batches * per_micro + optimizer


def step_time(s: StepShape, cpu_threads: int | None = None) -> StepTime:
    """The predicted step of `s` on this machine's CPU (`cpu_threads`: the threads PyTorch uses; None: this
    process's cores)."""
    used = cpu_threads or cores()
    flops = FLOPS_PER_THREAD * used
    every = s.generate_every
    batch = replace(s, prompts=s.prompts * max(1, s.steps_per_generation)) if s.steps_per_generation > 1 else s
    generation = generation_time(batch, flops) / every
    training = training_time(s, flops)
    fixed = STEP_S + (COMPLETION_S * batch.completions + programs_time(batch)) / every
    return StepTime(
        generation + training + fixed,
        generation,
        training,
        0.0,
        fixed,
        s.prompts,
        1.0,
        s.completions,
        "engine",
        f"{NAME} ({used} threads)",
        True,
        [f"the CPU's step-time model ({used} threads), fitted on 2 threads of an x86_64 CPU"],
        num_iterations=max(1, s.num_iterations),
        generate_every=every,
    )


def predict(profile, arch, lengths=None, measured=None, cpu_threads: int | None = None) -> StepTime:
    """The predicted step of `profile` on the CPU; with `measured` (this machine's ledger figures for the shape)
    carrying a measured step time, that time is the step's."""
    shape = replace(shape_of(profile, arch, None, None, lengths), generator="transformers", float32=True)
    return as_measured(step_time(shape, cpu_threads), measured)
