"""WHICH architecture a model name means: the shape facts of the models the profiles use, known offline, and
where any other model's facts are found.

A catalogue of the models the profiles use (from their public config.json files), found from a hub id
whatever its case, with or without Unsloth's `unsloth/` mirror prefix and its `-bnb-4bit` /
`-unsloth-bnb-4bit` pre-quantised suffixes. Any other model is read from a config.json (profiles.config_json):
a local folder, then the Hugging Face cache, then (only when online) the hub. What the facts are and what the
estimator counts from them: profiles.architecture.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from contract.errors import UsageError
from profiles.architecture import Architecture, thinking_of
from profiles.config_json import cached_config, from_config, hf_cache_dirs, read_config
from tasks.prompts import THINKING_SWITCH


def _arch(name, params, hidden, layers, heads, kv_heads, head_dim, intermediate, vocab, tied, family):
    return Architecture(
        name=name,
        params=int(params),
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        tied_embeddings=tied,
        family=family,
        thinking=thinking_of(family, name),
    )


# The offline CPU model (tiny_model/build.py builds exactly this shape). Its vocabulary is the byte-level
# BPE tokenizer's 512 tokens; the few special tokens the trainer adds are left out here.
TINY = _arch("tiny", 0, 64, 2, 4, 2, 16, 256, 512, True, "llama")
TINY = replace(TINY, params=TINY.computed_params, thinking=THINKING_SWITCH)  # its template reads enable_thinking
# The names of the offline models of that shape: `tiny`, and `tiny-long`, warm-started to write long answers (it
# shows the length probe's re-plan on a CPU)
TINY_MODELS = ("tiny", "tiny-long")


def is_tiny(model: str) -> bool:
    """Whether `model` names one of the project's offline tiny models."""
    return str(model).strip().lower() in TINY_MODELS


CATALOGUE: tuple[Architecture, ...] = (
    _arch("google/gemma-3-1b-it", 1.00e9, 1152, 26, 4, 1, 256, 6912, 262144, True, "gemma3_text"),
    _arch("google/gemma-3-4b-it", 3.88e9, 2560, 34, 8, 4, 256, 10240, 262208, True, "gemma3"),
    _arch("meta-llama/Llama-3.2-1B-Instruct", 1.24e9, 2048, 16, 32, 8, 64, 8192, 128256, True, "llama"),
    _arch("meta-llama/Llama-3.2-3B-Instruct", 3.21e9, 3072, 28, 24, 8, 128, 8192, 128256, True, "llama"),
    _arch("meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 4096, 32, 32, 8, 128, 14336, 128256, False, "llama"),
    _arch("Qwen/Qwen2.5-0.5B-Instruct", 0.49e9, 896, 24, 14, 2, 64, 4864, 151936, True, "qwen2"),
    _arch("Qwen/Qwen2.5-1.5B-Instruct", 1.54e9, 1536, 28, 12, 2, 128, 8960, 151936, True, "qwen2"),
    _arch("Qwen/Qwen2.5-3B-Instruct", 3.09e9, 2048, 36, 16, 2, 128, 11008, 151936, True, "qwen2"),
    _arch("Qwen/Qwen2.5-7B-Instruct", 7.62e9, 3584, 28, 28, 4, 128, 18944, 152064, False, "qwen2"),
    _arch("Qwen/Qwen2.5-14B-Instruct", 14.7e9, 5120, 48, 40, 8, 128, 13824, 152064, False, "qwen2"),
    _arch("Qwen/Qwen3-0.6B", 0.60e9, 1024, 28, 16, 8, 128, 3072, 151936, True, "qwen3"),
    _arch("Qwen/Qwen3-1.7B", 1.72e9, 2048, 28, 16, 8, 128, 6144, 151936, True, "qwen3"),
    _arch("Qwen/Qwen3-4B", 4.02e9, 2560, 36, 32, 8, 128, 9728, 151936, True, "qwen3"),
    _arch("Qwen/Qwen3-8B", 8.19e9, 4096, 36, 32, 8, 128, 12288, 151936, False, "qwen3"),
    _arch("Qwen/Qwen3-14B", 14.8e9, 5120, 40, 40, 8, 128, 17408, 151936, False, "qwen3"),
    _arch("mistralai/Mistral-7B-Instruct-v0.3", 7.25e9, 4096, 32, 32, 8, 128, 14336, 32768, False, "mistral"),
    _arch("microsoft/phi-4", 14.7e9, 5120, 40, 40, 10, 128, 17920, 100352, False, "phi3"),
)

# Model types vLLM refuses to run in float16 ("The model type ... does not support float16. Reason: Numerical
# instability", vllm/config/model.py _FLOAT16_NOT_SUPPORTED_MODELS, vLLM 0.32). Below compute capability 8.0
# Unsloth hands vLLM float16 (no bfloat16 there) and vLLM refuses these at start: tests/rehearsal/test_vllm_glue.py keeps
# this list equal to vLLM's.
VLLM_FLOAT16_REFUSED = ("gemma2", "gemma3", "gemma3_text", "glm4")


def vllm_refuses(arch: Architecture, bf16: bool) -> str | None:
    """Why vLLM will not start for this model on a card with (bf16=True) or without bfloat16, else None."""
    if bf16 or arch.family not in VLLM_FLOAT16_REFUSED:
        return None
    return f"vLLM refuses float16 for {arch.family} and this card has no bfloat16 (compute capability < 8.0)"


# Characters of English worked-maths text per token, by tokenizer family (model_type; Llama's by its vocabulary).
# Estimates, not measured here (no tokenizer files offline): English BPE runs about 4 characters a token, and
# maths text less, the more so where the tokenizer splits numbers into single digits (Qwen, Mistral, Gemma,
# Llama 2) rather than groups of up to three (Llama 3, Phi-4's and gpt-oss's tiktoken-style vocabularies).
# Held against the mean completion lengths published GRPO runs log on GSM8K (docs/planning.md).
CHARS_PER_TOKEN = {"llama3": 3.6, "llama2": 2.9, "mistral": 2.9, "qwen": 3.2, "gemma": 3.3, "phi": 3.6, "gpt_oss": 3.7}
CHARS_PER_TOKEN_DEFAULT = 3.0  # an unknown tokenizer: more tokens, so a cap errs long


def chars_per_token(arch: Architecture) -> tuple[float, str]:
    """(characters per token of worked-maths text under the model's tokenizer, the family it was taken for)."""
    family = arch.family.lower()
    if family == "llama":
        key = "llama3" if arch.vocab >= 100_000 else "llama2"
    elif family.startswith("qwen"):
        key = "qwen"
    elif family.startswith("gemma"):
        key = "gemma"
    elif family.startswith("phi"):
        key = "phi"
    else:
        key = family if family in CHARS_PER_TOKEN else ""
    if not key:
        return CHARS_PER_TOKEN_DEFAULT, f"unknown tokenizer ({arch.family or 'no model_type'})"
    return CHARS_PER_TOKEN[key], key


# Unsloth's mirrors rename a few models (Meta-Llama-3.1-...); these spellings map to the same entry.
ALIASES = {
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b-instruct",
}
QUANTISED_SUFFIXES = ("-unsloth-bnb-4bit", "-bnb-4bit")


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1].lower()


_BY_SHORT_NAME = {_short(a.name): a for a in CATALOGUE}


def catalogue_key(model: str) -> str:
    """The name part of a hub id, lower case, without the unsloth/ prefix or a 4-bit suffix."""
    key = _short(model.strip())
    for suffix in QUANTISED_SUFFIXES:
        if key.endswith(suffix):
            key = key[: -len(suffix)]
            break
    return ALIASES.get(key, key)


def hub_allowed() -> bool:
    """The hub is asked only when the user has not said offline (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)."""
    return not any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def _hub_config(model: str) -> dict:
    """config.json from the hub; the token (HF_TOKEN), if any, is sent and never shown."""
    from urllib.request import Request, urlopen

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = Request(f"{endpoint}/{model}/resolve/main/config.json")
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urlopen(request, timeout=10) as response:  # noqa: S310 - a fixed https endpoint
        return json.loads(response.read().decode("utf-8"))


def resolve(model: str, allow_hub: bool | None = None) -> Architecture:
    """The architecture of `model`: `tiny`, a catalogue hub id, a local folder, the HF cache, the hub."""
    if not model or not model.strip():
        raise UsageError("model: empty name (fix: give a hub id such as unsloth/Llama-3.2-3B-Instruct)")
    model = model.strip()
    tried: list[str] = []
    if is_tiny(model):
        return TINY

    folder = Path(model).expanduser()
    if folder.is_dir():
        if (folder / "config.json").is_file():
            return read_config(folder / "config.json", model)
        tried.append(f"local folder {folder} (it has no config.json)")
    else:
        tried.append("a local folder of that name (none)")

    key = catalogue_key(model)
    if key in _BY_SHORT_NAME:
        return _BY_SHORT_NAME[key]
    tried.append(f"the catalogue of {len(CATALOGUE)} models as '{key}'")

    if "/" in model and not model.startswith((".", "/", "~")):
        cached = cached_config(model)
        if cached:
            return read_config(cached, model)
        tried.append(f"the Hugging Face cache in {', '.join(map(str, hf_cache_dirs()))}")
        if allow_hub is None:
            allow_hub = hub_allowed()
        if allow_hub:
            try:
                return from_config(_hub_config(model), model, f"hub:{model}")
            except UsageError:
                raise
            except Exception as exc:  # noqa: BLE001 - any network or HTTP failure: report and stop
                tried.append(f"the hub ({type(exc).__name__}: {exc})")
        else:
            tried.append("the hub (skipped: offline)")
    raise UsageError(
        f"model {model!r}: unknown architecture; tried {'; '.join(tried)} "
        "(fix: use a model from the catalogue, e.g. unsloth/Llama-3.2-3B-Instruct, "
        "or a folder holding its config.json)"
    )
