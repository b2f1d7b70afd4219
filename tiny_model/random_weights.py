"""The other offline model: any catalogue architecture with random weights, built from the catalogue's facts
(profiles.catalog), so that memory can be measured on a card before (or without) downloading the
model. Memory does not depend on the weights' values: the same shapes load, quantise
to 4-bit and train the same way.

The folder holds a transformers config of the architecture's family and shape, random weights in the model's
16-bit dtype (built on the GPU when there is one), and the offline tiny model's tokenizer (a byte-level BPE
trained on the task's text): its ids are a subset of the model's vocabulary, and the probe's completions
are drawn over the whole vocabulary, so the logits are the real model's size. Built once per shape and
cached beside the tiny model; nothing is downloaded.

Not the same as the real model: multimodal families (Gemma 3 4B) are built as their text decoder alone, and
the prompts are the task's text through the small tokenizer, not the model's own.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from contract.safe_write import publish_folder

BUILD_VERSION = 1
RECORD_FILE = "random_weights.json"
# Families whose catalogue entry names a multimodal model: the text decoder's own model type.
TEXT_MODEL_TYPE = {"gemma3": "gemma3_text"}


def config_kwargs(arch, vocab: int, max_positions: int) -> dict:
    """transformers config keywords for `arch` (profiles.catalog.Architecture)."""
    return {
        "vocab_size": vocab,
        "hidden_size": arch.hidden,
        "intermediate_size": arch.intermediate,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "head_dim": arch.head_dim,
        "tie_word_embeddings": arch.tied_embeddings,
        "max_position_embeddings": max_positions,
    }


def model_type(arch) -> str:
    return TEXT_MODEL_TYPE.get(arch.family, arch.family or "llama")


def build_key(arch, dtype_name: str, max_positions: int) -> str:
    spec = {
        "type": model_type(arch),
        "shape": config_kwargs(arch, arch.vocab, max_positions),
        "dtype": dtype_name,
        "version": BUILD_VERSION,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def ensure_random_model(
    model: str,
    *,
    dataset: str = "arithmetic",
    seed: int = 0,
    max_positions: int = 4096,
    root: Path | None = None,
    device: str | None = None,
) -> Path:
    """The folder of `model`'s architecture with random weights (built on first use, then reused)."""
    import torch

    from profiles.catalog import resolve
    from tiny_model.build import cache_root

    arch = resolve(model, allow_hub=False)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    dtype_name = str(dtype).removeprefix("torch.")
    root = Path(root) if root else cache_root()
    name = (arch.name.rstrip("/").rpartition("/")[2] or "model").lower()
    target = root / f"random-{name}-{build_key(arch, dtype_name, max_positions)}"
    if (target / "config.json").is_file() and (target / RECORD_FILE).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)

    def write(staged: Path) -> None:
        _build(arch, staged, dataset=dataset, seed=seed, max_positions=max_positions, dtype=dtype, device=device)
        (staged / RECORD_FILE).write_text(
            json.dumps(
                {
                    "architecture": arch.name,
                    "model_type": model_type(arch),
                    "dtype": dtype_name,
                    "params": arch.params,
                    "random_weights": True,
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )

    publish_folder(target, write, shared=True)
    return target


def _build(arch, folder: Path, *, dataset: str, seed: int, max_positions: int, dtype, device: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from tiny_model.build import TinyShape, _build_tokenizer, _corpus, _pin_tokenizer_class

    tokenizer = _build_tokenizer(_corpus(dataset, seed), TinyShape())
    config = AutoConfig.for_model(
        model_type(arch), **config_kwargs(arch, max(arch.vocab, len(tokenizer)), max_positions)
    )
    config.bos_token_id = None
    config.eos_token_id = tokenizer.eos_token_id
    config.pad_token_id = tokenizer.pad_token_id
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    tokenizer.save_pretrained(folder)
    _pin_tokenizer_class(folder)


def read_record(folder) -> dict | None:
    try:
        return json.loads((Path(folder) / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
