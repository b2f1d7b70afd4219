"""HOW the model is loaded: Unsloth on a GPU (with vLLM when fast_inference), Unsloth's CPU fallback
without one, and plain transformers + PEFT where Unsloth cannot be imported at all.

The import order of an attempt, stated here once: `open_backend` sets the attempt's environment, then
imports Unsloth (which patches transformers, TRL and PEFT as it loads); only after it returns may anything
import transformers, TRL, PEFT, or trainer.callbacks (which imports transformers at module level).
Nothing here imports those at module level.
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from contract.attempt import apply_attempt_environment, bf16_capable
from contract.environment import ENV_NO_UNSLOTH
from profiles.keys import VLLM_LORA_RANKS


def world_size() -> int:
    """Training processes in this attempt (torchrun / accelerate set WORLD_SIZE); 1 when run alone."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def process_rank() -> int:
    """This process's global rank (0 when run alone): rank 0 writes the attempt's shared files."""
    return int(os.environ.get("RANK", "0") or 0)


def local_device_index() -> int:
    """The GPU of this process among the machine's visible ones (accelerate gives one per process)."""
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


@dataclass
class Backend:
    name: str  # "unsloth" (GPU), "unsloth-cpu" or "transformers"
    device: str  # "cuda" or "cpu"
    unsloth: ModuleType | None = None  # the imported module
    note: str = ""
    bf16: bool = False
    compute_capability: tuple | None = None
    gpu_name: str | None = None

    @property
    def uses_unsloth(self) -> bool:
        return self.unsloth is not None


def import_unsloth():
    """Import Unsloth if it can be, else None and one line that says why (never an import traceback).
    ENV_NO_UNSLOTH=1 trains through transformers + PEFT even where Unsloth imports: distributed attempts
    need it (Unsloth patches a single device only), and it tests the fallback."""
    if os.environ.get(ENV_NO_UNSLOTH, "") not in ("", "0"):
        return None, f"{ENV_NO_UNSLOTH} is set: training through transformers + peft"
    try:
        import unsloth  # noqa: F401  (patches transformers, TRL and PEFT)
    except Exception as exc:  # ImportError, or a broken dependency raising at import
        first = (str(exc).strip().splitlines() or [""])[0]
        return None, (
            f"unsloth cannot be imported on this machine ({type(exc).__name__}: {first[:200]}): "
            "training through transformers + peft"
        )
    return unsloth, ""


def import_training_libraries() -> None:
    """What every attempt goes on to import, after Unsloth (which patches them) or in its place: torch, PEFT and
    TRL's GRPO trainer (which bring transformers, accelerate and datasets)."""
    import peft  # noqa: F401
    import torch  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401


@contextmanager
def collector_paused():
    """The cyclic garbage collector off while the libraries import, and what they built frozen afterwards.
    Importing Unsloth, TRL and torch makes millions of objects that live as long as the process; the collector,
    triggered as their number grows, walked them again and again (1.2 of a CPU attempt's 5.2 CPU-seconds, a third
    of a GPU rehearsal's). Frozen, they are left out of every later collection (Unsloth's own gc.collect() calls
    included); what is allocated afterwards, the model first, is collected as usual."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def open_backend(profile) -> Backend:
    """Set the environment, import Unsloth (or not), and say which path this attempt trains on."""
    apply_attempt_environment(profile)  # Unsloth reads the allocator and standby settings at import
    if profile.device == "cuda":
        from trainer.memory_meter import take_card_baseline

        take_card_baseline()  # before Unsloth's import makes this process's CUDA context (its peaks count it)
    if profile.distributed or world_size() > 1:
        os.environ[ENV_NO_UNSLOTH] = "1"  # also when the processes were started by hand
    with collector_paused():
        module, note = import_unsloth()
        import_training_libraries()
    if note and process_rank() == 0:
        try:
            print(note, flush=True)
        except OSError:  # the reader of our output has gone; the note is not worth failing for
            pass
    import torch

    cuda = profile.device == "cuda" and torch.cuda.is_available()
    if profile.device == "cuda" and not cuda:
        raise RuntimeError(
            f"profile '{profile.name}' asks for device cuda, but torch sees no GPU "
            "(fix: use a cpu profile, or install the CUDA build of torch)"
        )
    index = local_device_index()
    capability = torch.cuda.get_device_capability(index) if cuda else None
    if module is None:
        name = "transformers"
    else:
        name = "unsloth" if cuda and not getattr(module, "_IS_CPU_BACKEND", False) else "unsloth-cpu"
    if name == "transformers" or not cuda:
        install_cpu_logprob_fallback()
    if not cuda and world_size() > 1:
        allow_indexed_cpu_location()
    return Backend(
        name=name,
        device="cuda" if cuda else "cpu",
        unsloth=module,
        note=note,
        bf16=cuda and bf16_capable(capability),
        compute_capability=capability,
        gpu_name=torch.cuda.get_device_name(index) if cuda else None,
    )


def model_dtype(backend: Backend):
    import torch

    if backend.device == "cpu":
        # Tiny CPU models train fastest and most reproducibly in fp32.
        return torch.float32
    return torch.bfloat16 if backend.bf16 else torch.float16


def vllm_lora_rank(rank: int) -> int:
    """The vLLM LoRA slot that holds `rank` (vLLM rounds up to one of its fixed ranks)."""
    for slot in VLLM_LORA_RANKS:
        if slot >= rank:
            return slot
    return VLLM_LORA_RANKS[-1]


def hf_token() -> str | None:
    """Hub token from the environment only (never from a profile, never printed)."""
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN") or None


def checkpointing_value(mode: str):
    """Profile `gradient_checkpointing` (unsloth|true|false) as Unsloth's use_gradient_checkpointing."""
    return {"unsloth": "unsloth", "true": True, "false": False}[mode]


def from_pretrained_kwargs(profile, model_path: str, dtype, *, fast_inference: bool | None = None) -> dict:
    """Keywords for FastLanguageModel.from_pretrained (checked against its signature in tests)."""
    fast = profile.fast_inference if fast_inference is None else fast_inference
    kwargs = {
        "model_name": model_path,
        "max_seq_length": profile.max_seq_length,
        "dtype": dtype,
        "load_in_4bit": profile.load_in_4bit,
        "full_finetuning": not profile.uses_lora,
        "fast_inference": fast,
        "trust_remote_code": profile.trust_remote_code,
        "use_gradient_checkpointing": checkpointing_value(profile.gradient_checkpointing),
        "random_state": profile.seed,
        "token": hf_token(),
    }
    if fast:
        kwargs["gpu_memory_utilization"] = profile.gpu_memory_utilization
        kwargs["max_lora_rank"] = vllm_lora_rank(max(profile.lora_rank, 1))
        if profile.vllm_max_num_seqs:
            # reaches unsloth_zoo's load_vllm through from_pretrained's **kwargs (its vLLM engine keywords);
            # an explicit count replaces the one Unsloth picks from the KV cache's size
            kwargs["max_num_seqs"] = profile.vllm_max_num_seqs
    return kwargs


def get_peft_model_kwargs(profile) -> dict:
    """Keywords for FastLanguageModel.get_peft_model (checked against its signature in tests)."""
    return {
        "r": profile.lora_rank,
        "target_modules": list(profile.target_modules),
        "lora_alpha": profile.lora_alpha,
        "lora_dropout": profile.lora_dropout,
        "bias": "none",
        "use_gradient_checkpointing": checkpointing_value(profile.gradient_checkpointing),
        "random_state": profile.seed,
        "use_rslora": False,
        "max_seq_length": profile.max_seq_length,
    }


def load_model(backend: Backend, profile, model_path: str):
    """(model, tokenizer) ready for GRPO: LoRA-wrapped at rank > 0, all weights trainable at rank 0."""
    dtype = model_dtype(backend)
    fast = profile.fast_inference and backend.name == "unsloth"
    if backend.uses_unsloth:
        from unsloth import FastLanguageModel

        model, tokenizer = FastLanguageModel.from_pretrained(
            **from_pretrained_kwargs(profile, model_path, dtype, fast_inference=fast)
        )
        if profile.uses_lora:
            model = FastLanguageModel.get_peft_model(model, **get_peft_model_kwargs(profile))
    else:
        model, tokenizer = _load_with_transformers(profile, model_path, dtype, backend.device)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def engine_started(model) -> bool:
    """Whether Unsloth started a vLLM engine for `model`. Unsloth turns fast_inference off by itself on some
    machines (compute capability below 7, NVIDIA GB10, model types its vLLM path cannot share) and says so
    only in its log; `fast_generate` exists either way (without an engine it wraps `generate` and refuses
    vLLM arguments), so the engine itself is what tells."""
    return getattr(model, "vllm_engine", None) is not None


def generation_path(profile, backend: Backend, model) -> str:
    """Which engine generates the completions: "unsloth-vllm" (the engine Unsloth started, one GPU),
    "trl-vllm-server" / "trl-vllm-colocate" (TRL's, under accelerate) or "transformers" (`generate`)."""
    if backend.name == "unsloth" and engine_started(model):
        return "unsloth-vllm"
    if profile.distributed and profile.fast_inference and backend.device == "cuda":
        return "trl-vllm-server" if profile.uses_vllm_server else "trl-vllm-colocate"
    return "transformers"


def _load_with_transformers(profile, model_path: str, dtype, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quantization = None
    if profile.load_in_4bit:
        from transformers import BitsAndBytesConfig

        quantization = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=dtype
        )
    token = hf_token()
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        dtype=dtype,
        trust_remote_code=profile.trust_remote_code,
        token=token,
        quantization_config=quantization,
        # each process loads onto its own GPU (a 4-bit model cannot be moved after loading)
        device_map=None if device == "cpu" else {"": local_device_index()},
    )
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=profile.trust_remote_code, token=token)
    if not profile.uses_lora:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        return model, tokenizer
    from peft import LoraConfig, get_peft_model

    if profile.gradient_checkpointing != "false":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    torch.manual_seed(profile.seed)
    config = LoraConfig(
        r=profile.lora_rank,
        lora_alpha=profile.lora_alpha,
        lora_dropout=profile.lora_dropout,
        target_modules=list(profile.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config), tokenizer


# -------------------------------------------------------------------------------------------------
# TRL 1.15 scores completions through a fused, chunked LM head whose kernel is Triton-only; without
# Triton (or on CPU tensors) it is unusable. This routes non-GPU tensors to a chunked torch version.


def _torch_chunked_log_probs(
    hidden,
    weight,
    bias,
    targets,
    temperature,
    chunk_size,
    final_logit_softcapping=None,
    logit_scale=1.0,
    outputs=("log_probs",),
):
    import torch

    rows = max(1, min(1024, (1 << 24) // max(1, weight.shape[0])))  # keep each logits tile ~64 MB in fp32
    pieces = {"log_probs": [], "entropy": [], "log_sum_sq_probs": [], "mean_logits": [], "is_top1": []}
    for start in range(0, hidden.shape[0], rows):
        logits = torch.nn.functional.linear(hidden[start : start + rows], weight, bias).float()
        logits = logits * logit_scale
        if final_logit_softcapping is not None:
            logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
        logits = logits / temperature
        log_softmax = torch.log_softmax(logits, dim=-1)
        target = targets[start : start + rows].unsqueeze(-1)
        pieces["log_probs"].append(log_softmax.gather(-1, target).squeeze(-1))
        if "entropy" in outputs:
            pieces["entropy"].append(-(log_softmax.exp() * log_softmax).sum(-1))
        if "log_sum_sq_probs" in outputs:
            pieces["log_sum_sq_probs"].append(torch.logsumexp(2 * log_softmax.detach(), dim=-1))
        if "mean_logits" in outputs:
            pieces["mean_logits"].append(logits.detach().mean(-1))
        if "is_top1" in outputs:
            pieces["is_top1"].append(logits.detach().gather(-1, target).squeeze(-1) >= logits.detach().amax(-1))
    order = ("log_probs", "entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
    empty = hidden.new_zeros((0,), dtype=torch.float32)
    result = []
    for name in order:
        if name != "log_probs" and name not in outputs:
            result.append(None)
        elif pieces[name]:
            result.append(torch.cat(pieces[name]))
        else:
            result.append(empty.bool() if name == "is_top1" else empty + hidden.sum() * 0)
    return tuple(result)


class _LogProbDispatch:
    """Stands in for TRL's chunked log-prob autograd function: its kernel on GPU tensors, torch elsewhere."""

    grpo_train_fallback = True
    kernel = None

    @classmethod
    def apply(cls, hidden, *args, **kwargs):
        if cls.kernel is not None and hidden.device.type in ("cuda", "xpu"):
            return cls.kernel.apply(hidden, *args, **kwargs)
        return _torch_chunked_log_probs(hidden, *args, **kwargs)


def install_cpu_logprob_fallback() -> bool:
    """Route TRL's fused LM head to torch where its Triton kernel cannot run. Idempotent; True when set."""
    try:
        from trl.trainer import utils as trl_utils
    except Exception:
        return False
    if not hasattr(trl_utils, "_ChunkedLogProbFunction"):
        return False  # a TRL without the fused head needs nothing
    current = trl_utils._ChunkedLogProbFunction
    if getattr(current, "grpo_train_fallback", False) or getattr(current, "_unsloth_cpu_dispatch", False):
        return True  # ours, or Unsloth's CPU backend already routes it
    _LogProbDispatch.kernel = current
    trl_utils._ChunkedLogProbFunction = _LogProbDispatch
    return True


def _indexed_cpu(storage, location: str):
    """torch.load's restorer for 'cpu:N': the storage as it is, already in host memory."""
    if location.startswith("cpu:") and location[4:].isdigit():
        return storage
    return None


def allow_indexed_cpu_location() -> bool:
    """Let torch.load read a checkpoint onto 'cpu:N'. With several CPU processes transformers loads the
    optimizer state with map_location=args.device, which is torch.device('cpu', rank) there, and torch's
    default restorer knows 'cpu' only ("don't know how to restore data location ... (tagged with cpu:0)"), so
    a distributed CPU attempt could not resume. Idempotent; True when set."""
    from torch import serialization

    if any(entry[2] is _indexed_cpu for entry in serialization._package_registry):
        return True
    serialization.register_package(5, lambda obj: None, _indexed_cpu)
    return True
