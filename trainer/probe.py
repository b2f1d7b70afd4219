"""The worst-case probe: before training starts (or resumes), one step at the largest shapes the attempt
will ever see, so that an out-of-memory comes at once instead of hundreds of steps in, when a long sample
finally shows up.

The step is synthetic but goes through the trainer's own loss and backward: the longest training prompts,
completions of exactly max_completion_length tokens with no end-of-sequence, the full per-device batch, and
a throwaway optimizer of the training optimizer's class (learning rate 0) stepped once so that its state is
allocated as the real first step allocates it. Everything the step could touch is put back afterwards
(random generators, gradients, trainer counters and logged metrics, the model's train/eval mode), so the
weights learned are the same with and without the probe.
"""

from __future__ import annotations

import copy
import random
import threading
import time
from contextlib import contextmanager

GIB = float(1 << 30)
# Trainer attributes that the GRPO loss appends to or counts with; put back after the probe.
_TRAINER_CONTAINERS = ("_metrics", "_logs", "_textual_logs", "_buffered_inputs", "_entropy_window_stats")
_MISSING = object()


def probe_enabled(profile) -> bool:
    """Profile key `probe` (default true)."""
    return bool(getattr(profile, "probe", True))


# ----------------------------------------------------------------------------------------------- batch


def prompt_token_ids(prompt, tokenizer, switches: dict | None = None, tools: list | None = None) -> list[int]:
    """The ids the trainer generates from (tasks.prompts.render_ids: the chat template with its switches and the
    tools offered)."""
    from tasks.prompts import render_ids

    return [int(i) for i in render_ids(prompt, tokenizer, switches, tools)]


def longest_prompts(
    rows: list[dict], tokenizer, batch: int, generations: int, switches: dict | None = None, tools: list | None = None
) -> list[list[int]]:
    """`batch` prompt id lists: the longest prompts (rendered as TRL renders them: the template's switches, the
    tools offered), each repeated `generations` times as GRPO groups them."""
    by_length = sorted(
        (prompt_token_ids(row["prompt"], tokenizer, switches, tools) for row in rows), key=len, reverse=True
    )
    distinct = max(1, -(-batch // max(1, generations)))
    chosen = by_length[:distinct]
    out = []
    while len(out) < batch:
        for ids in chosen:
            out.extend([ids] * generations)
    return out[:batch]


def completion_token_ids(tokenizer, batch: int, length: int, vocab_size: int, seed: int):
    """(batch, length) ordinary token ids: no end-of-sequence or other special token, so no completion ends
    early. Drawn from a generator of its own: the global random state is left alone."""
    import torch

    special = sorted(
        {int(i) for i in (getattr(tokenizer, "all_special_ids", None) or []) if i is not None}
        | {i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id) if i is not None}
    )
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab_size, (batch, length), generator=generator)
    ordinary = next(i for i in range(vocab_size) if i not in set(special))
    if special:
        ids[torch.isin(ids, torch.tensor(special))] = ordinary
    return ids


def synthetic_inputs(trainer, prompts: list[list[int]], completions, pad_id: int) -> dict:
    """The dict TRL's _generate_and_score_completions hands to compute_loss, for these prompts and
    completions: prompts left-padded, every completion token counted, advantages of both signs."""
    import torch

    device = trainer.accelerator.device
    width = max(len(ids) for ids in prompts)
    prompt_ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, ids in enumerate(prompts):
        prompt_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
        prompt_mask[row, width - len(ids) :] = 1
    completion_mask = torch.ones_like(completions)
    advantages = torch.tensor([1.0 if row % 2 == 0 else -1.0 for row in range(len(prompts))])
    steps_per_generation = getattr(trainer.args, "steps_per_generation", 1) or 1
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completions,
        "completion_mask": completion_mask,
        "advantages": advantages,
        # the generation batch's completion tokens, as TRL counts them for the dapo-style normalisers
        "num_items_in_batch": torch.tensor(float(completion_mask.sum()) * steps_per_generation),
    }
    if getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False):
        inputs["importance_sampling_ratio"] = torch.ones(completions.shape, dtype=torch.float32)
    if float(getattr(trainer, "beta", 0.0) or 0.0) != 0.0:
        # the reference is scored without gradients before the loss; its exact values change no shape
        inputs["ref_per_token_logps"] = torch.zeros(completions.shape, dtype=torch.float32)
    return {key: value.to(device) for key, value in inputs.items()}


# ----------------------------------------------------------------------------------------------- state


@contextmanager
def restored_state(trainer):
    """Whatever happens inside, put back every random generator, the trainer's scalar counters and metric
    containers, and the model's mode; free the gradients."""
    import numpy
    import torch

    rng = (
        random.getstate(),
        numpy.random.get_state(),
        torch.get_rng_state(),
        torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
    )
    scalars = {k: v for k, v in vars(trainer).items() if v is None or isinstance(v, (bool, int, float, str))}
    containers = {k: copy.deepcopy(getattr(trainer, k, _MISSING)) for k in _TRAINER_CONTAINERS}
    state = copy.deepcopy(trainer.state)
    model = trainer.model
    was_training = model.training
    try:
        yield
    finally:
        model.zero_grad(set_to_none=True)
        model.train(was_training)
        for key in [
            k
            for k, v in vars(trainer).items()
            if (v is None or isinstance(v, (bool, int, float, str))) and k not in scalars
        ]:
            delattr(trainer, key)  # a counter the probe's step created (current_gradient_accumulation_steps)
        for key, value in {**scalars, **containers}.items():
            if value is _MISSING:
                if hasattr(trainer, key):
                    delattr(trainer, key)
            else:
                setattr(trainer, key, value)
        trainer.state = state
        random.setstate(rng[0])
        numpy.random.set_state(rng[1])
        torch.set_rng_state(rng[2])
        if rng[3] is not None:
            torch.cuda.set_rng_state_all(rng[3])


@contextmanager
def training_mode(trainer):
    """The model as the trainer's own train() sets it for a step. Unsloth's trainer ends its constructor in
    inference mode (for_inference: gradient checkpointing off, the KV cache on) and switches to training mode
    (for_training, with the checkpointing chosen at load) only when train() starts; a step taken in between
    keeps every layer's activations, about twice the training step's memory (measured on an H100: an 8B in
    4-bit peaked at 15.5 GiB that way). Put back as found afterwards."""
    model = trainer.model
    to_training = getattr(model, "for_training", None)
    if not callable(to_training):
        model.train()
        yield
        return
    was_training = model.training
    if hasattr(model, "_unsloth_gradient_checkpointing"):
        checkpointing = model._unsloth_gradient_checkpointing
    else:
        checkpointing = getattr(trainer.args, "gradient_checkpointing", True)
    to_training(use_gradient_checkpointing=checkpointing)
    try:
        yield
    finally:
        to_inference = getattr(model, "for_inference", None)
        if not was_training and callable(to_inference):
            to_inference()


def checkpointing_state(model) -> dict:
    """Whether the step about to run checkpoints its layers: how many modules have gradient checkpointing on,
    and the model's use_cache (a layer handed a cache skips checkpointing)."""
    flagged = [m for m in model.modules() if hasattr(m, "gradient_checkpointing")]
    config = getattr(model, "config", None)
    return {
        "modules_checkpointing": sum(1 for m in flagged if m.gradient_checkpointing),
        "modules_that_can": len(flagged),
        "use_cache": getattr(config, "use_cache", None),
        "training": bool(model.training),
    }


def throwaway_optimizer(trainer):
    """The training optimizer's class and settings at learning rate 0, over the trainable parameters: its
    step allocates the optimizer state without moving a weight. It is dropped after the probe; the trainer
    builds its own in train()."""
    cls, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
    kwargs = dict(kwargs, lr=0.0)
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    return cls(params, **kwargs)


# ----------------------------------------------------------------------------------------------- peak


def _vm_hwm_gib() -> float | None:
    """The kernel's high-water mark of this process's resident memory (Linux), or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / GIB
    except (OSError, ValueError, IndexError):
        return None
    return None


class PeakMeter:
    """The peak memory of the probe alone. GPU: torch's allocator peaks after a reset, and NVML's used at
    the end of the step. CPU: the resident high-water mark after resetting it (Linux clear_refs), else the
    largest of RSS samples taken every few milliseconds."""

    def __init__(self, device: str, memory=None):
        self.device = device
        self.memory = memory  # trainer.memory_meter.MemoryMeter: the run's own peaks, folded in before a reset
        self._poller = None
        self._polled = 0.0
        self._stop = threading.Event()
        self.held_before: float | None = None

    def start(self) -> None:
        import torch

        if self.memory is not None:
            self.memory.sample()  # the run's peak so far is kept before the probe resets the counters
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.held_before = torch.cuda.memory_allocated() / GIB  # weights, adapters: what the step starts on
            torch.cuda.reset_peak_memory_stats()
            return
        import psutil

        self.held_before = psutil.Process().memory_info().rss / GIB
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
                handle.write("5")  # resets the resident high-water mark to the resident size now
            return
        except OSError:
            pass
        self._poller = threading.Thread(target=self._poll, daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        import psutil

        process = psutil.Process()
        while not self._stop.is_set():
            self._polled = max(self._polled, process.memory_info().rss / GIB)
            self._stop.wait(0.005)

    def stop(self) -> dict:
        import torch

        if self.device == "cuda":
            from trainer.memory_meter import MEASURE_GPU_PROCESS, MEASURE_TORCH, gpu_process_peak_gib

            torch.cuda.synchronize()
            allocated = torch.cuda.max_memory_allocated() / GIB
            reserved = torch.cuda.max_memory_reserved() / GIB
            out = {
                "peak_gib": round(max(allocated, reserved), 4),
                "measure": MEASURE_TORCH,
                "peak_allocated_gib": round(allocated, 4),
                "peak_reserved_gib": round(reserved, 4),
                "held_before_gib": round(self.held_before or 0.0, 4),
            }
            used = self._nvml_used_gib()
            if used is not None:
                out["nvml_used_gib"] = round(used, 4)
            process = self.memory.process_gib() if self.memory is not None else None
            if process is not None:
                # the estimate's terms: context and memory outside torch in, vLLM's sleeping KV cache out
                out["nvml_process_gib"] = round(process, 4)
                out["torch_peak_gib"] = out["peak_gib"]
                out["peak_gib"] = round(
                    gpu_process_peak_gib(max(allocated, reserved), torch.cuda.memory_reserved() / GIB, process), 4
                )
                out["measure"] = self.memory.process_measure or MEASURE_GPU_PROCESS
            return out
        if self._poller is not None:
            self._stop.set()
            self._poller.join()
            return {
                "peak_gib": round(self._polled, 4),
                "measure": "process RSS, sampled",
                "held_before_gib": round(self.held_before or 0.0, 4),
            }
        return {
            "peak_gib": round(_vm_hwm_gib() or 0.0, 4),
            "measure": "process peak RSS",
            "held_before_gib": round(self.held_before or 0.0, 4),
        }

    def _nvml_used_gib(self) -> float | None:
        handle = getattr(self.memory, "_nvml_handle", None)
        if handle is None:
            return None
        try:
            import pynvml

            return pynvml.nvmlDeviceGetMemoryInfo(handle).used / GIB
        except Exception:  # NVML is a second opinion; torch's figures stand without it
            return None


# ----------------------------------------------------------------------------------------------- step


def generation_engine(trainer):
    """The colocated vLLM engine of this trainer, or None: TRL 1.15 keeps it on `trainer.vllm_generation.llm`
    (Unsloth hands its own engine over to it), an Unsloth model carries it as `vllm_engine`."""
    generation = getattr(trainer, "vllm_generation", None)
    return (
        getattr(generation, "llm", None)
        or getattr(trainer, "llm", None)
        or getattr(getattr(trainer, "model", None), "vllm_engine", None)
    )


def engine_asleep(llm) -> bool | None:
    """Whether vLLM's engine is asleep now (vLLM's LLMEngine.is_sleeping), None where it cannot say."""
    ask = getattr(getattr(llm, "llm_engine", None), "is_sleeping", None)
    try:
        return bool(ask()) if callable(ask) else None
    except Exception:  # noqa: BLE001 - an engine that cannot answer: treat as unknown
        return None


def rest_generation_engine(trainer) -> str:
    """Have a colocated vLLM engine with sleep mode (Unsloth's standby) asleep during the probe, as it is during
    every real backward pass, so that its KV cache is not held against the probe. What it did:

    "no engine" / "no sleep mode": nothing to do;
    "already asleep": TRL 1.15 puts the engine to sleep (level 2) when the trainer is built and after every
        generation, so at the probe it normally sleeps already; a second sleep would only log vLLM's "Executor
        is already sleeping";
    "put to sleep": it was awake (a generate outside TRL woke it): put to sleep at TRL's level 2, and TRL's flag
        set, so that its next generate wakes the weights first, as after its own sleep."""
    llm = generation_engine(trainer)
    config = getattr(getattr(getattr(llm, "llm_engine", None), "vllm_config", None), "model_config", None)
    if llm is None:
        return "no engine"
    if not getattr(config, "enable_sleep_mode", False):
        return "no sleep mode"
    import gc

    import torch

    state = "already asleep"
    if engine_asleep(llm) is not True:
        llm.sleep(level=2)
        generation = getattr(trainer, "vllm_generation", None)
        if generation is not None and hasattr(generation, "_llm_weights_sleeping"):
            generation._llm_weights_sleeping = True
        state = "put to sleep"
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return state


def worst_case_step(trainer, inputs) -> None:
    """The trainer's own loss and backward on `inputs`, gradient clipping, and one step of a throwaway
    optimizer, as one real optimizer step does them."""
    import torch

    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    optimizer = throwaway_optimizer(trainer)
    with trainer.compute_loss_context_manager(), trainer.accelerator.autocast():
        loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    if trainer.args.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(params, trainer.args.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    release_paged_state(optimizer)
    del loss, optimizer


def release_paged_state(optimizer) -> int:
    """bitsandbytes' paged optimizers (paged_adamw_8bit, ...) register each paged state buffer with a
    process-wide page manager, which keeps it alive after the optimizer is dropped: the throwaway's state
    would stay allocated beside the real optimizer's for the whole run. Drop its buffers from the manager;
    returns how many."""
    import torch

    manager = getattr(optimizer, "page_mng", None)
    if manager is None or not getattr(optimizer, "is_paged", False):
        return 0
    mine = {id(t) for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t)}
    kept = [t for t in manager.paged_tensors if id(t) not in mine]
    released = len(manager.paged_tensors) - len(kept)
    manager.paged_tensors[:] = kept
    return released


def run_probe(
    trainer, rows: list[dict], tokenizer, profile, memory=None, estimate_gib=None, tools: list | None = None
) -> dict:
    """One step at the attempt's largest shapes; {peak_gib, seconds, prompt_tokens, completion_tokens,
    batch, measure, ...}; `tools`: what TRL offers in every prompt (their descriptions lengthen it). An
    out-of-memory propagates (this frame named in its traceback): it is the attempt's own OOM."""
    import torch

    from trainer.inject import injected_in_probe, raise_injected_oom

    model = trainer.model
    batch = int(trainer.args.per_device_train_batch_size)
    generations = int(getattr(trainer, "num_generations", None) or profile.num_generations)
    # rendered as TRL renders them, with the switches the trainer holds (GRPOConfig.chat_template_kwargs)
    prompts = longest_prompts(
        rows, tokenizer, batch, generations, getattr(trainer, "chat_template_kwargs", None), tools
    )
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", None) or len(tokenizer))
    completions = completion_token_ids(tokenizer, batch, int(profile.max_completion_length), vocab, profile.seed)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    inputs = synthetic_inputs(trainer, prompts, completions, pad_id)
    device = "cuda" if inputs["prompt_ids"].is_cuda else "cpu"
    engine = rest_generation_engine(trainer) if device == "cuda" else "no engine"
    meter = PeakMeter(device, memory)
    started, cpu_started = time.perf_counter(), time.process_time()
    with restored_state(trainer), training_mode(trainer):
        checkpointing = checkpointing_state(model)
        meter.start()
        if injected_in_probe(profile.name):
            raise_injected_oom(profile, model, estimate_gib)
        worst_case_step(trainer, inputs)
        peaks = meter.stop()
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    del inputs
    if device == "cuda":
        torch.cuda.empty_cache()  # the probe's blocks go back: generation (vLLM) may need them first
        torch.cuda.reset_peak_memory_stats()  # the first step's telemetry is the step's own
    from contract.attempt import random_weights_requested

    # measured on random weights (`calibrate --random-weights`): the ledger keeps the mark with the figures
    marked = {"random_weights": True} if random_weights_requested() else {}
    return {
        **peaks,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "prompt_tokens": int(inputs_width(prompts)),
        "completion_tokens": int(profile.max_completion_length),
        "batch": batch,
        "num_generations": generations,
        "generation_engine": engine,
        "checkpointing": checkpointing,
        **marked,
    }


def inputs_width(prompts: list[list[int]]) -> int:
    return max(len(ids) for ids in prompts)
