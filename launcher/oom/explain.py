"""WHAT an OOM means for the person reading it: which part of training asked for the memory, the figures,
the fix and what the fix costs. `python train.py explain-oom FILE` prints it for a pasted error; the
supervisor prints it under each attempt that ran out of memory. The reading itself is contract.oom's."""

from __future__ import annotations

from contract.failure import read_unsupported
from contract.oom import (
    KIND_CUDA,
    KIND_DRIVER,
    KIND_HOST,
    KIND_VLLM,
    VLLM_SHARE_TOO_LARGE,
    OomReport,
    fmt_gib,
    read_oom,
)
from contract.oom_site import (
    SITE_BACKWARD,
    SITE_FORWARD,
    SITE_GENERATION,
    SITE_HOST,
    SITE_LOGITS,
    SITE_MODEL_LOAD,
    SITE_OPTIMIZER,
    SITE_UNKNOWN,
    SITE_VLLM_START,
)
from launcher.plan.margins import VLLM_HEADROOM_GIB

_CONSUMERS = {
    SITE_MODEL_LOAD: "the base model's weights while loading (and quantising) them",
    SITE_VLLM_START: "vLLM's reservation at start-up: its share of the card must hold the weights, "
    "CUDA graphs and the KV cache of at least one full-length sequence",
    SITE_GENERATION: "generation: the KV cache and sampling buffers of the whole generation batch "
    "(per_device_train_batch_size x gradient_accumulation_steps completions at once)",
    SITE_LOGITS: "the logits: batch x tokens x vocabulary, upcast to fp32 for the per-token log-probs",
    SITE_FORWARD: "the activations of the training forward pass (they grow with batch x sequence length)",
    SITE_BACKWARD: "the backward pass: gradients of the activations (they grow with batch x sequence length)",
    SITE_OPTIMIZER: "the optimizer state, allocated at the first optimizer step (AdamW keeps 8 bytes per "
    "trainable parameter in fp32)",
    SITE_HOST: "host RAM (not the GPU)",
    SITE_UNKNOWN: "not named by the text (no traceback); in GRPO it is most often the logits or activations",
}

_LEVERS = {
    SITE_MODEL_LOAD: (
        "load the weights in 4-bit (load_in_4bit: true) or pick a smaller model (the next profile)",
        "4-bit costs a little accuracy; a smaller model learns less",
    ),
    SITE_GENERATION: (
        "shorten max_completion_length or lower num_generations; with vLLM, give it a larger gpu_memory_utilization",
        "shorter completions cut reasoning off; fewer generations make "
        "the group advantages noisier; a larger vLLM share leaves less for training. Halving "
        "the per-device batch does not help here: the generation batch stays the same",
    ),
    SITE_LOGITS: (
        "halve per_device_train_batch_size and double gradient_accumulation_steps (effective batch "
        "kept); or shorten max_completion_length",
        "more micro-steps per optimizer step (slower), same learning; shorter completions cut reasoning off",
    ),
    SITE_FORWARD: (
        "halve per_device_train_batch_size and double gradient_accumulation_steps (effective batch "
        "kept); turn gradient_checkpointing on (unsloth or true)",
        "more micro-steps per optimizer "
        "step (slower), same learning; checkpointing recomputes activations (~20-30% slower)",
    ),
    SITE_BACKWARD: (
        "halve per_device_train_batch_size and double gradient_accumulation_steps (effective "
        "batch kept); turn gradient_checkpointing on (unsloth or true)",
        "more micro-steps per optimizer step (slower), same learning; checkpointing recomputes activations",
    ),
    SITE_OPTIMIZER: (
        "use an 8-bit optimizer (optim: adamw_8bit or paged_adamw_8bit) or a smaller LoRA rank",
        "8-bit state is ~4x smaller with a small precision cost; a smaller rank adapts less",
    ),
    SITE_HOST: (
        "give the machine more RAM or swap, use gradient_checkpointing: true instead of unsloth "
        "(which offloads activations to RAM), or a smaller model (the next profile)",
        "checkpointing on the GPU uses GPU memory instead; a smaller model learns less",
    ),
    SITE_UNKNOWN: (
        "halve per_device_train_batch_size and double gradient_accumulation_steps (effective batch kept)",
        "more micro-steps per optimizer step (slower), same learning",
    ),
}


def _vllm_lever(report: OomReport) -> tuple[str, str]:
    if report.vllm_problem == VLLM_SHARE_TOO_LARGE:
        # vLLM asked for more than was free when it started
        room = None
        if report.free_gib is not None and report.total_gib:
            room = max(report.free_gib - VLLM_HEADROOM_GIB, 0.0) / report.total_gib
        target = f" to {room:.2f} or less" if room else ""
        return (
            f"lower gpu_memory_utilization{target}, or free the card (other processes hold memory)",
            "a smaller vLLM share holds a smaller KV cache: fewer sequences generated at once (slower), "
            "and below weights + one sequence's KV cache vLLM refuses to start",
        )
    return (
        "raise gpu_memory_utilization (if the card has room) or lower max_seq_length",
        "a larger vLLM share leaves less memory for training; a shorter max_seq_length cuts prompts and completions",
    )


def explain(text: str, returncode: int | None = None) -> str:
    """The diagnosis an engineer would write for the failure in `text`; a short note when it is not an OOM."""
    report = read_oom(text, returncode)
    if report is None:
        unsupported = read_unsupported(text)
        if unsupported:
            return (
                "Not an out-of-memory error: the model's architecture is not supported by the library "
                f"that tried to load it.\n  {unsupported}\n"
                "Fix: pick a model the stack supports (see the catalogue), or turn fast_inference off "
                "when only vLLM lacks it."
            )
        return "Not an out-of-memory error: no CUDA, vLLM, cuBLAS or host-RAM OOM message found in the text."
    return describe(report)


def describe(report: OomReport) -> str:
    """The diagnosis of one OOM: what ran out, the figures, what asked for the memory, the fix, its cost."""
    if report.kind == KIND_HOST:
        lines, (lever, trade) = _host_lines(report), _LEVERS[SITE_HOST]
    elif report.kind == KIND_VLLM:
        lines, (lever, trade) = _vllm_lines(report), _vllm_lever(report)
    else:
        lines, (lever, trade) = _cuda_lines(report), _LEVERS[report.site]
        if report.fragmented:
            lines.append(
                "Note: the reserved-but-unallocated cache exceeds the shortfall: this is fragmentation. "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the supervisor sets it) may be enough."
            )
    lines.append(f"Fix: {lever}.")
    lines.append(f"Trade: {trade}.")
    return "\n".join(lines)


def _host_lines(report: OomReport) -> list[str]:
    lines = ["Out of host RAM (not a GPU OOM)."]
    if report.asked_gib is not None:
        lines.append(f"  asked     {fmt_gib(report.asked_gib)} from the CPU allocator")
    if report.site not in (SITE_HOST, SITE_UNKNOWN):
        lines.append(f"  where     {report.site}")
    lines.append(f"  evidence  {report.message}")
    lines.append(
        "  The kernel's OOM killer ends a process with SIGKILL and no traceback; "
        "`dmesg` or `journalctl -k` names it. GPU memory figures do not apply."
    )
    return lines


def _vllm_lines(report: OomReport) -> list[str]:
    lines = ["vLLM could not start: its share of the GPU cannot hold the weights and the KV cache."]
    if report.vllm_problem == VLLM_SHARE_TOO_LARGE:
        lines.append(
            f"  asked     {fmt_gib(report.asked_gib)} (gpu_memory_utilization {report.utilization:g}"
            f" of {fmt_gib(report.total_gib)})"
        )
        lines.append(f"  free      {fmt_gib(report.free_gib)} when vLLM started")
    elif report.asked_gib is not None:
        lines.append(
            f"  KV cache needed     {fmt_gib(report.asked_gib)} for one sequence of {report.max_model_len} tokens"
        )
        lines.append(f"  KV cache available  {fmt_gib(report.free_gib)} in vLLM's share")
    elif report.kv_tokens:
        lines.append(f"  KV cache holds {report.kv_tokens} tokens; one sequence needs {report.max_model_len}")
    else:
        share = ""
        if report.utilization is not None and report.total_gib is not None:
            share = (
                f" (gpu_memory_utilization {report.utilization:g} x {fmt_gib(report.total_gib)} = "
                f"{fmt_gib(report.utilization * report.total_gib)})"
            )
        lines.append(f"  nothing of vLLM's share{share} was left for KV cache blocks after the weights and activations")
    if report.shortfall_gib:
        lines.append(f"  shortfall {fmt_gib(report.shortfall_gib)}")
    lines.append(f"  message   {report.message}")
    lines.append(f"Consumer: {_CONSUMERS[SITE_VLLM_START]}.")
    return lines


def _cuda_lines(report: OomReport) -> list[str]:
    origin = {
        KIND_CUDA: "PyTorch's CUDA allocator",
        KIND_DRIVER: "the CUDA driver, outside PyTorch's allocator: vLLM's sleep/wake pool under standby",
    }.get(report.kind, "a cuBLAS/cuDNN workspace")
    gpu = f", GPU {report.gpu_index}" if report.gpu_index is not None else ""
    lines = [f"CUDA out of memory in {report.site} ({origin}{gpu})."]
    if report.asked_gib is not None:
        lines.append(f"  asked     {fmt_gib(report.asked_gib)}")
    if report.free_gib is not None:
        total = f" of {fmt_gib(report.total_gib)}" if report.total_gib is not None else ""
        lines.append(f"  free      {fmt_gib(report.free_gib)}{total}")
    if report.shortfall_gib is not None:
        lines.append(f"  shortfall {fmt_gib(report.shortfall_gib)} (asked - free)")
        if report.shortfall_gib == 0:
            lines.append(
                "            less was asked than was free: the free memory is fragmented (no block that large)"
            )
    if report.in_use_gib is not None:
        lines.append(f"  in use    {fmt_gib(report.in_use_gib)} by this process")
    if report.allocated_gib is not None:
        lines.append(f"            {fmt_gib(report.allocated_gib)} allocated by PyTorch tensors")
    if report.reserved_unallocated_gib is not None:
        lines.append(
            f"            {fmt_gib(report.reserved_unallocated_gib)} reserved by PyTorch but unallocated (cached)"
        )
    if report.other_processes_gib:
        lines.append(f"  others    {fmt_gib(report.other_processes_gib)} held by other processes on the card")
    if report.asked_gib is None:
        lines.append(f"  message   {report.message}")
    lines.append(f"Consumer: {_CONSUMERS[report.site]}.")
    return lines
