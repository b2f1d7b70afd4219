"""HOW MUCH is kept free, in one place: the margin a plan keeps on the card (or in RAM) on top of the
estimate, the headroom a shrink after an OOM adds to the shortfall, and what stays free when vLLM's share is
lowered to what was free."""

from __future__ import annotations

# Kept free on top of the estimate: the allocator's fragmentation and the slow creep of reserved memory
# over a long run (reported in unsloth #2470 and trl #2927), plus a desktop's display and other processes.
GPU_MARGIN_SHARE, GPU_MARGIN_MIN_GIB = 0.05, 0.5
# Host RAM also serves the OS, the data loader and the page cache.
HOST_MARGIN_SHARE, HOST_MARGIN_MIN_GIB = 0.10, 1.0
GPU_MARGIN_TEXT = (
    "margin: 5% of the card (at least 0.5 GiB) stays free for allocator fragmentation, memory "
    "that creeps up over steps, and other processes"
)
HOST_MARGIN_TEXT = "margin: 10% of RAM (at least 1 GiB) stays free for the OS, the data loader and other processes"


# A configuration judged by the estimate alone (no measurement of its shape on this machine in the ledger) keeps
# headroom for the estimate's own error on top of the margin: at most ESTIMATE_MAX_USE of usable memory, and
# at least ESTIMATE_HEADROOM_MIN_GIB of it left. The error is relative on large shapes (each term is held within
# 10% of a simulated step, benchmarks/estimator_vs_simulation.md; vLLM's workspace within its published start-up
# logs, benchmarks/published_memory.py) and absolute on small cards, where the CUDA context and vLLM's non-torch
# memory (0.5-1.0 GiB between machines) dominate it. A shape the ledger measured here is judged by that
# measurement against all of usable memory: it may be packed close.
ESTIMATE_MAX_USE = 0.92
ESTIMATE_HEADROOM_MIN_GIB = 0.5
ESTIMATE_HEADROOM_TEXT = (
    f"an estimate alone uses at most {ESTIMATE_MAX_USE:.0%} of usable memory and leaves "
    f"{ESTIMATE_HEADROOM_MIN_GIB} GiB of it: headroom for the estimate's own error; a shape "
    "measured here (the ledger) may use all of it"
)


def estimate_limit(usable_gib: float) -> float:
    """What a configuration judged by the estimate alone may need of `usable_gib`."""
    return min(usable_gib * ESTIMATE_MAX_USE, usable_gib - ESTIMATE_HEADROOM_MIN_GIB)


def margin_for(total_gib: float, device: str = "cuda") -> float:
    if device == "cpu":
        return max(HOST_MARGIN_MIN_GIB, HOST_MARGIN_SHARE * total_gib)
    return max(GPU_MARGIN_MIN_GIB, GPU_MARGIN_SHARE * total_gib)


# Kept free on top of an OOM's shortfall when the fallback shrinks: the failed allocation is rarely the step's
# last one.
OOM_HEADROOM_GIB = 0.5
# What stays free when vLLM's share is lowered to what was free (the fallback's shrink and the advice agree).
VLLM_HEADROOM_GIB = 0.5


def card_for(need_gib: float) -> float:
    """The least card whose memory less the plan's margin (5%, at least 0.5 GiB) holds `need_gib`."""
    return max(need_gib + GPU_MARGIN_MIN_GIB, need_gib / (1 - GPU_MARGIN_SHARE))
