"""GRPO_INJECT_OOM=NAME[@STEP][,NAME[@STEP]...]: make an attempt of profile NAME raise a genuine
torch.OutOfMemoryError, worded as CUDA words it, at training step STEP (default 1), after the model has
loaded; STEP `probe` raises it inside the worst-case probe before training (trainer.probe). This is how
the supervisor's fallback is exercised on machines without a GPU."""

from __future__ import annotations

import os

from contract.attempt import INJECT_AT_PROBE as PROBE
from contract.attempt import parse_inject
from contract.environment import ENV_INJECT_OOM

GIB = float(1 << 30)
MIB = float(1 << 20)
# Cards the message may describe when there is no real one to read.
COMMON_CARD_GIB = (8.0, 12.0, 16.0, 24.0, 40.0, 48.0, 80.0, 94.0, 141.0)


def injected_step(profile_name: str, environ=None) -> int | str | None:
    environ = os.environ if environ is None else environ
    return parse_inject(environ.get(ENV_INJECT_OOM)).get(profile_name)


def injected_in_probe(profile_name: str, environ=None) -> bool:
    """Whether this profile's OOM is to be raised inside the worst-case probe."""
    return injected_step(profile_name, environ) == PROBE


def _size(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.2f} GiB" if n_bytes >= GIB else f"{n_bytes / MIB:.2f} MiB"


def oom_message(profile, vocab_size: int, total_gib: float | None = None, estimate_gib: float | None = None) -> str:
    """A CUDA OOM message with figures that fit the profile: the fp32 logits of one micro-batch do not fit."""
    tokens = profile.per_device_train_batch_size * (profile.max_prompt_length + profile.max_completion_length)
    asked = tokens * vocab_size * 4.0
    if total_gib is None:
        need = estimate_gib or 24.0
        total_gib = next((card for card in COMMON_CARD_GIB if card >= need), COMMON_CARD_GIB[-1])
    total = total_gib * 0.985 * GIB  # what the driver leaves of a card's nominal size
    free = min(asked * 0.45, total * 0.02)
    in_use = total - free
    # A capacity OOM, not fragmentation: the allocator's idle cache is smaller than the shortfall.
    reserved_unallocated = min(in_use * 0.04, (asked - free) * 0.5)
    allocated = in_use * 0.9
    return (
        f"CUDA out of memory. Tried to allocate {_size(asked)}. GPU 0 has a total capacity of "
        f"{_size(total)} of which {_size(free)} is free. Including non-PyTorch memory, this process has "
        f"{_size(in_use)} memory in use. Of the allocated memory {_size(allocated)} is allocated by "
        f"PyTorch, and {_size(reserved_unallocated)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _get_per_token_logps_and_entropies(message: str):
    """Named like the GRPO log-prob path so that the traceback points where real OOMs happen."""
    import torch

    raise torch.OutOfMemoryError(message)


def _card_total_gib() -> float | None:
    """The real card's nominal size when there is one, else the host's RAM (a CPU attempt's memory), for the
    message's figures: an injected OOM then reads as needing more than this machine has."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / GIB / 0.985
        import psutil

        return psutil.virtual_memory().total / GIB / 0.985
    except Exception:
        return None


def raise_injected_oom(profile, model, estimate_gib: float | None = None):
    """Raise the injected OOM now, worded for this profile and model."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 151936
    _get_per_token_logps_and_entropies(oom_message(profile, vocab, _card_total_gib(), estimate_gib))


def make_injector(profile, estimate_gib: float | None = None):
    """A TrainerCallback that raises at the chosen step, or None when this profile is not named (or its
    OOM is to come from the probe)."""
    step = injected_step(profile.name)
    if step is None or step == PROBE:
        return None
    from transformers import TrainerCallback

    class InjectOutOfMemory(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            if state.global_step + 1 != step:
                return
            raise_injected_oom(profile, model, estimate_gib)

    return InjectOutOfMemory()
