"""WHERE in training an out-of-memory failure happened, read from its traceback: model load, vLLM start,
generation, logits/log-probs, forward activations, backward, optimizer step. The site names the part of
memory that ran short, and so the shrink that helps (launcher.run.fallback) and the advice (launcher.oom.explain).
"""

from __future__ import annotations

import re

# Where it happened (from the traceback)
SITE_MODEL_LOAD = "model load"
SITE_VLLM_START = "vLLM start"
SITE_GENERATION = "generation"
SITE_LOGITS = "logits/log-probs"
SITE_FORWARD = "forward (activations)"
SITE_BACKWARD = "backward"
SITE_OPTIMIZER = "optimizer step"
SITE_HOST = "host RAM"
SITE_UNKNOWN = "unknown"

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')

_LOGITS_FUNCS = {
    "_get_per_token_logps",
    "_get_per_token_logps_and_entropies",
    "selective_log_softmax",
    "chunked_selective_log_softmax",
    "chunked_hidden_states_selective_log_softmax",
    "chunked_hidden_states_selective_log_softmax_recompute",
    "grpo_chunked_hidden_states_logprobs",
    "grpo_compute_loss",
    "grpo_accumulated_loss",
    "entropy_from_logits",
    "log_softmax",
    "chunked_logprob",
    "_compute_loss",
    "compute_loss",
}
_LOGITS_CODE = re.compile(r"\blogits\b|lm_head|log_softmax|logsumexp|logprob", re.IGNORECASE)
_BACKWARD_FUNCS = {"backward", "_engine_run_backward", "run_backward", "_backward"}
_OPTIMIZER_FUNCS = {
    "_init_group",
    "_single_tensor_adamw",
    "_multi_tensor_adamw",
    "_fused_adamw",
    "adamw",
    "_single_tensor_adam",
    "_multi_tensor_adam",
    "init_state",
    "update_step",
    "optimizer_step",
}
_GENERATION_FUNCS = {
    "generate",
    "_generate",
    "_generate_single_turn",
    "_sample",
    "_beam_search",
    "vllm_generate",
    "_run_engine",
    "execute_model",
    "sample_tokens",
    "_generate_and_score_completions",
}
_VLLM_START_FUNCS = {
    "determine_num_available_blocks",
    "_initialize_kv_caches",
    "initialize_kv_cache",
    "initialize_from_config",
    "profile_run",
    "_dummy_run",
    "_dummy_sampler_run",
    "determine_available_memory",
    "init_device",
    "load_vllm",
    "capture_model",
    "check_enough_kv_cache_memory",
    "get_kv_cache_config",
    "get_kv_cache_configs",
}
_MODEL_LOAD_FUNCS = {
    "from_pretrained",
    "_load_pretrained_model",
    "_load_state_dict_into_meta_model",
    "load_shard_file",
    "get_peft_model",
    "dispatch_model",
    "quantize_4bit",
}


def parse_frames(text: str) -> list[tuple[str, str, str]]:
    """(file, function, code line) of every traceback frame in the text, outermost first.

    Log prefixes such as vLLM's "ERROR 06-30 13:53:19 [core.py:515]" before each line are tolerated.
    """
    lines = text.splitlines()
    frames = []
    for i, line in enumerate(lines):
        m = _FRAME.search(line)
        if not m:
            continue
        code = ""
        if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]):
            code = re.sub(r"^.*?\]\s{1,}", "", lines[i + 1]) if "]" in lines[i + 1][:80] else lines[i + 1]
            code = code.strip()
        frames.append((m.group(1), m.group(3), code))
    return frames


def _frame_site(path: str, func: str, code: str) -> str | None:
    norm = path.replace("\\", "/")
    if (
        func in _OPTIMIZER_FUNCS
        or "/torch/optim/" in norm
        or "/bitsandbytes/optim/" in norm
        or re.search(r"optimizer\.step\(", code)
    ):
        return SITE_OPTIMIZER
    if func in _BACKWARD_FUNCS or re.search(r"\.backward\(", code):
        return SITE_BACKWARD
    if func in _LOGITS_FUNCS:
        return SITE_LOGITS
    if func in _GENERATION_FUNCS and func != "_generate_and_score_completions":
        return SITE_GENERATION
    if func in _MODEL_LOAD_FUNCS:
        return SITE_MODEL_LOAD
    return None


def _starts_vllm(path: str, func: str, code: str) -> bool:
    norm = path.replace("\\", "/")
    if func in _VLLM_START_FUNCS:
        return True
    if "load_vllm(" in code:
        return True
    # vLLM's engine being built (LLM(...) -> LLMEngine.from_engine_args -> executor -> worker)
    return "/vllm/" in norm and func in ("from_engine_args", "_init_executor", "load_model", "init_worker")


def _is_model_frame(path: str) -> bool:
    norm = path.replace("\\", "/")
    name = norm.rsplit("/", 1)[-1]
    return name.startswith("modeling_") or "/unsloth/models/" in norm or "/peft/tuners/" in norm


def classify_site(frames: list[tuple[str, str, str]]) -> str:
    """The phase an OOM happened in, from its traceback frames (outermost first).

    The innermost frame that names a phase decides (log-probs computed inside generation count as
    logits). Inside a training forward, the innermost model frame tells activations from the LM head.
    """
    # vLLM's start-up runs a dummy forward and sampler: those frames look like generation but are not.
    if any(_starts_vllm(*frame) for frame in frames):
        return SITE_VLLM_START
    site: str | None = None
    phase_index = 0  # where `site` was found (set with it)
    for index in range(len(frames) - 1, -1, -1):
        found = _frame_site(*frames[index])
        if found:
            site, phase_index = found, index
            break
    if site is None:
        outer = {fn for _, fn, _ in frames}
        if "_generate_and_score_completions" in outer:
            site, phase_index = SITE_GENERATION, 0
        elif outer & {"training_step", "train", "_inner_training_loop"} or any(
            _is_model_frame(path) for path, _, _ in frames
        ):
            site, phase_index = SITE_FORWARD, 0
        else:
            return SITE_UNKNOWN
    if site in (SITE_LOGITS, SITE_FORWARD):
        inner_model = [f for f in frames[phase_index + 1 :] if _is_model_frame(f[0])]
        if inner_model:
            _, func, code = inner_model[-1]
            return SITE_LOGITS if _LOGITS_CODE.search(code) or "lm_head" in func else SITE_FORWARD
    return site
