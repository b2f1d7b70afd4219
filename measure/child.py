"""WHAT one probe process measures after the worst-case probe, with the model still loaded: memory read at
each phase of one training step (the CUDA context, weights and LoRA, forward and loss, backward, the optimizer
step) and around generation waves (their KV cache), and one generation wave and one training step timed at
each of two completion lengths. Runs in the kit's child process (`train.py gpu-check --probe-child DIR`),
through trainer.run's `after_probe` hook; the figures join the probe's in outcome.json.

On the CPU the same phases are read from the process's resident memory (noisy: freed memory is not always
handed back), so that the rehearsal exercises every line the GPU runs.
"""

from __future__ import annotations

import json
from pathlib import Path

GIB = float(1 << 30)
KIT_FILE = "kit.json"  # in the attempt folder: what the kit asks of the child (the lengths to time)
WARMUP_TOKENS = 16  # the untimed first wave: kernels compiled, the allocator warm
# The plan's shape is timed only where this many times its predicted seconds (a warm-up and a timed run of
# each, and a prediction that may be short) leave the probe PLANNED_RESERVE_S to write what it measured
PLANNED_MARGIN = 3.0
PLANNED_RESERVE_S = 20.0


class MemoryReader:
    """Allocated memory now and its peak since the last reset: torch's allocator on a GPU, the process's
    resident memory (and its kernel high-water mark) on the CPU."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.measure = "torch allocated" if cuda else "process RSS"

    def sync(self) -> None:
        from trainer.timing import synchronize

        synchronize()

    def allocated(self) -> float:
        self.sync()
        if self.cuda:
            import torch

            return torch.cuda.memory_allocated() / GIB
        import psutil

        return psutil.Process().memory_info().rss / GIB

    def reset(self) -> None:
        self.sync()
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()
            return
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
                handle.write("5")  # the resident high-water mark back to the resident size now
        except OSError:
            pass

    def peak(self) -> float:
        self.sync()
        if self.cuda:
            import torch

            return torch.cuda.max_memory_allocated() / GIB
        from trainer.probe import _vm_hwm_gib

        return max(_vm_hwm_gib() or 0.0, self.allocated())


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def cuda_context_gib() -> float | None:
    """The CUDA context and what else lies outside torch's allocator: the card's use above what it held before
    this process's first CUDA call (trainer.memory_meter's baseline), less torch's reservation. None where NVML
    cannot say or the baseline came after the context."""
    try:
        import pynvml
        import torch

        from trainer.memory_meter import CardBaseline, _nvml_handle_of_this_process

        baseline = CardBaseline.taken
        if baseline is None or not baseline.before_context:
            return None
        pynvml.nvmlInit()
        used = pynvml.nvmlDeviceGetMemoryInfo(_nvml_handle_of_this_process(pynvml)).used / GIB
        return used - baseline.used_gib - torch.cuda.memory_reserved() / GIB
    except Exception:  # noqa: BLE001 - no NVML: the context stays unmeasured
        return None


def parameter_gib(model) -> tuple[float, float]:
    """(frozen, trainable) GiB of the model's tensors: the weights (4-bit ones as stored, with the buffers) and
    what is trained (the LoRA adapters)."""
    frozen = trainable = 0
    for param in model.parameters():
        size = param.numel() * param.element_size()
        if param.requires_grad:
            trainable += size
        else:
            frozen += size
    frozen += sum(buffer.numel() * buffer.element_size() for buffer in model.buffers())
    return frozen / GIB, trainable / GIB


def step_components(trainer, inputs, reader: MemoryReader) -> dict:
    """One training step at the probe's shape, memory read at each phase boundary (GiB): what the step starts
    on, what forward and loss keep for the backward and their peak, the gradients and the backward's peak, the
    optimizer's state and its step's peak. Learning is unchanged: the state is put back (trainer.probe)."""
    import torch

    from trainer.probe import (
        checkpointing_state,
        release_paged_state,
        restored_state,
        throwaway_optimizer,
        training_mode,
    )

    model = trainer.model
    out: dict = {}
    with restored_state(trainer), training_mode(trainer):
        checkpointing = checkpointing_state(model)
        trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
        optimizer = throwaway_optimizer(trainer)
        base = reader.allocated()
        reader.reset()
        with trainer.compute_loss_context_manager(), trainer.accelerator.autocast():
            loss = trainer.compute_loss(model, inputs)
        after_forward = reader.allocated()
        out["forward_peak_gib"] = reader.peak() - base
        out["forward_kept_gib"] = after_forward - base
        reader.reset()
        loss.backward()
        after_backward = reader.allocated()
        out["backward_peak_gib"] = reader.peak() - after_forward
        out["gradients_gib"] = after_backward - base
        params = [p for p in model.parameters() if p.requires_grad]
        if trainer.args.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(params, trainer.args.max_grad_norm)
        reader.reset()
        optimizer.step()
        out["optimizer_state_gib"] = reader.allocated() - after_backward
        out["optimizer_peak_gib"] = reader.peak() - after_backward
        optimizer.zero_grad(set_to_none=True)
        release_paged_state(optimizer)
        del loss, optimizer
    return {**{key: _r(value) for key, value in out.items()}, "checkpointing": checkpointing}


def _left_padded(prompts: list[list[int]], pad: int, device):
    import torch

    width = max(len(ids) for ids in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device), width


# the trainer's methods that generate, the first one found is read (TRL 1.x: _generate_single_turn)
GENERATING_METHODS = ("_generate_single_turn", "_generate")


def generation_unwrap(trainer):
    """The context the trainer generates its completions in: `unwrap_model_for_generation` as the method that
    generates sees it (Unsloth rebinds it to its own, which switches the model to inference mode and decodes
    with CUDA graphs, then back to training mode), so that a timed wave is one generation as the trainer runs
    it. (a function of the trainer returning that context, its dotted name)."""
    import sys
    from contextlib import nullcontext

    spaces = [getattr(getattr(type(trainer), name, None), "__globals__", None) for name in GENERATING_METHODS]
    spaces += [
        vars(module)
        for name in (type(trainer).__module__, "trl.trainer.grpo_trainer")
        if (module := sys.modules.get(name))
    ]
    for space in spaces:
        unwrap = (space or {}).get("unwrap_model_for_generation")
        if callable(unwrap):
            dotted = f"{getattr(unwrap, '__module__', '?')}.{getattr(unwrap, '__qualname__', 'unwrap')}"
            return (lambda t, bound=unwrap: bound(getattr(t, "model_wrapped", t.model), t.accelerator)), dotted
    return (lambda t: nullcontext(t.accelerator.unwrap_model(t.model))), "accelerator.unwrap_model"


def _prompts(loaded, batch: int, generations: int, width: int | None) -> list[list[int]]:
    """`batch` prompts grouped as GRPO groups them: the data's longest, or (`width`) each made exactly `width`
    tokens long by repeating its tokens (a shape the plan expects; the weights are random, the text is not
    read)."""
    from trainer.probe import longest_prompts

    prompts = longest_prompts(
        loaded.train_rows, loaded.tokenizer, batch, generations, getattr(loaded, "switches", None)
    )
    if width:
        prompts = [(ids * (width // max(1, len(ids)) + 1))[:width] for ids in prompts]
    return prompts


def timed_waves(trainer, loaded, lengths, reader: MemoryReader, shape: dict | None = None) -> list[dict]:
    """One generation wave (the generation batch TRL generates at once, every completion exactly `length`
    tokens) per length, after an untimed short wave (decoding compiles nothing per length: an H100 gave the same
    seconds a token at 64 and 320 tokens); each with its peak above what it started on (the KV cache and
    decoding's own tensors). `shape` (the plan's: sequences, generations, prompt_tokens) in place of the
    probe's generation batch and the data's prompts."""
    import torch

    from trainer.timing import time_generation_wave

    profile, model, tokenizer = trainer.args, trainer.model, loaded.tokenizer
    batch = int(profile.per_device_train_batch_size)
    wave = batch * int(getattr(profile, "steps_per_generation", None) or profile.gradient_accumulation_steps or 1)
    generations = int(getattr(trainer, "num_generations", None) or batch)
    if shape:
        wave, generations = int(shape["sequences"]), int(shape["generations"])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = _prompts(loaded, wave, generations, (shape or {}).get("prompt_tokens"))
    ids, mask, width = _left_padded(prompts, pad, next(model.parameters()).device)
    was_training = model.training
    generation_context, through = generation_unwrap(trainer)

    def one_wave(length: int):
        def run() -> list[int]:
            with torch.no_grad(), generation_context(trainer) as generator:
                generated = generator.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=length,
                    min_new_tokens=length,
                    do_sample=True,
                    pad_token_id=pad,
                )
            return [int(generated.shape[1] - width)] * wave

        return run

    rows = []
    try:
        model.eval()
        # a generator that keeps its KV cache between calls (Unsloth's) allocates it in the first wave: the
        # waves' peak is read from before that one
        before_waves = reader.allocated()
        reader.reset()
        one_wave(min(WARMUP_TOKENS, min(lengths)))()
        warm_peak = reader.peak() - before_waves
        for length in lengths:
            base = reader.allocated()
            reader.reset()
            timed = time_generation_wave(one_wave(length), repeats=1, warmups=0)
            rows.append(
                {
                    "sequences": wave,
                    "generations": generations,
                    "prompt_tokens": width,
                    "completion_tokens": timed["longest"],
                    "seconds": timed["seconds"],
                    "tokens_per_s": timed["tokens_per_s"],
                    "warmed_at_this_shape": False,
                    "through": through,
                    "peak_above_start_gib": _r(reader.peak() - base),
                    "peak_above_before_waves_gib": _r(max(reader.peak() - before_waves, warm_peak)),
                    "held_after_gib": _r(reader.allocated() - before_waves),
                }
            )
    finally:
        model.train(was_training)
    return rows


def timed_steps(trainer, loaded, lengths, reader: MemoryReader, shape: dict | None = None) -> list[dict]:
    """One training step (the trainer's own loss, backward and optimizer step, one micro-batch) per length,
    each after an untimed step at the same length (the first step at a new shape compiles: 10-15 s of
    Unsloth's kernels on an H100); each with its peak above what it started on. `shape` (the plan's:
    micro_batch, generations, prompt_tokens) in place of the probe's micro-batch and the data's prompts."""
    from trainer.probe import (
        completion_token_ids,
        restored_state,
        synthetic_inputs,
        training_mode,
        worst_case_step,
    )
    from trainer.timing import time_training_step

    profile, model, tokenizer = trainer.args, trainer.model, loaded.tokenizer
    batch = int(profile.per_device_train_batch_size)
    generations = int(getattr(trainer, "num_generations", None) or batch)
    if shape:
        batch, generations = int(shape["micro_batch"]), int(shape["generations"])
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    prompts = _prompts(loaded, batch, generations, (shape or {}).get("prompt_tokens"))
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", None) or len(tokenizer))

    def step_at(length: int):
        inputs = synthetic_inputs(trainer, prompts, completion_token_ids(tokenizer, batch, length, vocab, seed=1), pad)

        def run() -> None:
            # what is learned is unchanged: the state is put back after each
            with restored_state(trainer), training_mode(trainer):
                worst_case_step(trainer, inputs)

        return run

    rows = []
    for length in lengths:
        run = step_at(length)
        run()
        base = reader.allocated()
        reader.reset()
        timed = time_training_step(run, repeats=1, warmups=0)
        rows.append(
            {
                "sequences": batch,
                "generations": generations,
                "prompt_tokens": max(len(p) for p in prompts),
                "completion_tokens": length,
                "seconds": timed["seconds"],
                "warmed_at_this_shape": True,
                "peak_above_start_gib": _r(reader.peak() - base),
            }
        )
    return rows


def timed_planned(trainer, loaded, planned: dict, reader: MemoryReader, deadline: float | None) -> dict:
    """One generation wave at the plan's generation batch and one training step at its micro-batch, each at
    the longest completion the step-time model charges there ({"plan": planned, "generation": [...],
    "training": [...]}), or why not: left out where three times their predicted seconds would run past the
    probe's `deadline` (time.time()), so that a long shape never costs the probe its other figures."""
    import time

    out: dict = {"plan": planned}
    predicted = [planned.get("predicted_wave_s"), planned.get("predicted_step_s")]
    need = PLANNED_MARGIN * sum(x for x in predicted if isinstance(x, (int, float)))
    left = None if deadline is None else deadline - time.time() - PLANNED_RESERVE_S
    if left is not None and need > left:
        out["why"] = (
            f"not timed: {need:.0f} s ({PLANNED_MARGIN:g}x the predicted seconds) and {max(left, 0):.0f} s left to "
            "the probe"
        )
        return out
    for key, measure, tokens in (
        ("generation", timed_waves, planned["wave_tokens"]),
        ("training", timed_steps, planned["step_tokens"]),
    ):
        try:
            out[key] = measure(trainer, loaded, [int(tokens)], reader, shape=planned)
        except Exception as exc:  # noqa: BLE001 - reported; the probe's figures stand (an OOM here among them)
            out[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            _release_cached(reader)
    return out


def _release_cached(reader: MemoryReader) -> None:
    if reader.cuda:
        import torch

        torch.cuda.empty_cache()


def measure_loaded(trainer, loaded, lengths, planned: dict | None = None, deadline: float | None = None) -> dict:
    """Everything the kit reads of one loaded model after its probe: {"components": ..., "timed": ...}. A phase
    that fails is reported by name; the probe's own figures stand. `planned`: the plan's shape for this model
    on this card (measure.cases.planned_shape), timed last (timed_planned)."""
    from trainer.probe import completion_token_ids, synthetic_inputs

    model, tokenizer, profile = trainer.model, loaded.tokenizer, trainer.args
    cuda = next(model.parameters()).is_cuda
    reader = MemoryReader(cuda)
    frozen, trainable = parameter_gib(model)
    components: dict = {
        "measure": reader.measure,
        "held_gib": _r(reader.allocated()),
        "weights_gib": _r(frozen),
        "lora_gib": _r(trainable),
        "cuda_context_gib": _r(cuda_context_gib()) if cuda else None,
    }
    try:
        batch = int(profile.per_device_train_batch_size)
        generations = int(getattr(trainer, "num_generations", None) or batch)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", None) or len(tokenizer))
        prompts = _prompts(loaded, batch, generations, None)
        completions = completion_token_ids(tokenizer, batch, int(profile.max_completion_length), vocab, seed=2)
        components.update(step_components(trainer, synthetic_inputs(trainer, prompts, completions, pad), reader))
        components["completion_tokens"] = int(profile.max_completion_length)
    except Exception as exc:  # noqa: BLE001 - reported; the timings still run
        components["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    timed: dict = {
        "timing": "trainer.timing, device synchronised: a wave timed once per length after one untimed short "
        "wave; a step timed once per length, each after an untimed step at that length",
        "lengths": list(lengths),
    }
    for key, measure in (("generation", timed_waves), ("training", timed_steps)):
        try:
            timed[key] = measure(trainer, loaded, lengths, reader)
        except Exception as exc:  # noqa: BLE001
            timed[f"{key}_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    waves, steps = timed.get("generation") or [], timed.get("training") or []
    if waves:
        components["generation_peak_gib"] = max(w["peak_above_before_waves_gib"] for w in waves)
        timed.update(
            generation_wave_s=waves[-1]["seconds"],
            wave_completions=waves[-1]["sequences"],
            generated_tokens=waves[-1]["sequences"] * waves[-1]["completion_tokens"],
        )
    if steps:
        timed["training_step_s"] = steps[-1]["seconds"]
    timed["completion_tokens"] = max(lengths)
    if planned and planned.get("sequences"):
        timed["planned"] = timed_planned(trainer, loaded, planned, reader, deadline)
    elif planned:  # no rung of the plan fits, or the plan could not be made: said beside the other figures
        timed["planned"] = {"plan": planned, "why": planned.get("why", "not planned")}
    _release_cached(reader)
    return {"components": components, "timed": timed}


def read_kit_file(attempt_dir: Path, default) -> tuple[tuple[int, ...], dict | None, float | None]:
    """(the lengths to time, the plan's shape or None, the probe's deadline or None) the kit wrote for this
    probe; the default lengths alone where the file is missing or not as the kit writes it."""
    try:
        asked = json.loads((attempt_dir / KIT_FILE).read_text(encoding="utf-8"))
        lengths = tuple(int(n) for n in asked["lengths"])
    except (OSError, ValueError, KeyError, TypeError):
        return tuple(default), None, None
    planned = asked.get("planned") if isinstance(asked.get("planned"), dict) else None
    deadline = asked.get("deadline")
    return lengths, planned, float(deadline) if isinstance(deadline, (int, float)) else None


def probe_child(attempt_dir: Path, profile, resolve_model, estimate_gib, default_lengths) -> int:
    """One probe-only attempt of `profile` in this process (the kit's child): load, probe, measure, and record
    outcome.json; the attempt's exit status."""
    from contract.errors import EXIT_INTERRUPTED
    from trainer.run import run_attempt
    from trainer.signals import exit_on_signal

    lengths, planned, deadline = read_kit_file(attempt_dir, default_lengths)
    code = run_attempt(
        profile,
        attempt_dir,
        resolve_model=resolve_model,
        estimate_gib=estimate_gib,
        after_probe=lambda trainer, loaded: measure_loaded(trainer, loaded, lengths, planned, deadline),
    )
    exit_on_signal(EXIT_INTERRUPTED)
    return code
