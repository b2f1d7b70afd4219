"""HOW a model's facts are read from its config.json: every size checked as what it is, an architecture the
estimator does not know how to count refused, the file found in a local folder or the Hugging Face cache.

Multimodal configs give their text part. Every refusal is a UsageError naming the file, the key, the value and the
fix, never a traceback or a plan built on a broken file.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from contract.errors import UsageError
from profiles.architecture import Architecture, thinking_of

# Sizes a config.json may give, with the largest value taken as a size: far above any published model,
# far below what would overflow the arithmetic (a 10^30-layer "model" is a broken file, not a plan).
SIZE_LIMITS = {
    "hidden_size": 1 << 17,
    "num_hidden_layers": 4096,
    "num_attention_heads": 4096,
    "num_key_value_heads": 4096,
    "head_dim": 1 << 14,
    "intermediate_size": 1 << 20,
    "vocab_size": 1 << 23,
    "experts": 1 << 14,
    "experts_per_token": 1 << 14,
    "expert_intermediate": 1 << 20,
    "shared_experts": 1 << 10,
    "positions": 1 << 26,
}
# Where configs say how many positions the model reads (transformers' names), first found wins.
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")

# Where mixture-of-experts configs say their facts (transformers' configuration classes), first found wins.
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
EXPERTS_PER_TOKEN_KEYS = (
    "num_experts_per_tok",
    "experts_per_token",
    "num_experts_per_token",
    "moe_topk",
    "moe_top_k",
    "moe_k",
    "top_k_experts",
)
EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "expert_ffn_hidden_size")  # else intermediate_size is one expert's
SHARED_WIDTH_KEYS = ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size")
SHARED_COUNT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
# What the estimator does not know how to count: the key that says so, and what it is.
UNCOUNTED = {
    "kv_lora_rank": "multi-head latent attention (compressed keys and values)",
    "q_lora_rank": "multi-head latent attention (compressed queries)",
    "ssm_state_size": "state-space (Mamba) layers",
    "mamba_d_state": "state-space (Mamba) layers",
    "linear_num_value_heads": "linear-attention layers",
    "layers_block_type": "a hybrid of attention and other layer kinds",
    "hybrid_override_pattern": "a hybrid of attention and other layer kinds",
    "attn_layer_period": "a hybrid of attention and other layer kinds",
    "expert_layer_period": "experts in every n-th layer of a hybrid model",
    "moe_layer_start_index": "experts in a range of layers",
    "moe_layer_interval": "experts in every n-th layer of a range",
    "ffn_config": "expert settings nested under ffn_config",
    "moe_latent_size": "experts working in a latent space",
    "zero_expert_num": "zero-computation experts",
}
# layer_types a decoder block may have and still be counted as attention + MLP
COUNTED_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "attention")


class _Experts(TypedDict, total=False):
    """The mixture-of-experts sizes of an Architecture (none: a dense model)."""

    experts: int
    experts_per_token: int
    expert_intermediate: int
    shared_intermediate: int
    moe_layers: int


class _ConfigReader:
    """The keys of one config.json's text part, each checked as what it is (a size, a flag), so that a broken
    file ends in one line naming the file, the key, the value and the fix, never in a traceback or a plan."""

    def __init__(self, config: dict, text: dict, source: str):
        self.config, self.text, self.source = config, text, source

    def refuse(self, key: str, why: str, fix: str | None = None) -> UsageError:
        return UsageError(
            f"{self.source}: key '{key}' {why} (fix: "
            f"{fix or 'correct it, or point `model` at the model folder as its publisher ships it'})"
        )

    def get(self, key: str):
        value = self.text.get(key)
        return self.config.get(key) if value is None and self.text is not self.config else value

    def first(self, keys) -> tuple[str | None, object]:
        for key in keys:
            if self.get(key) is not None:
                return key, self.get(key)
        return None, None

    def size(self, key: str, value=None, limit_key: str | None = None, low: int = 1) -> int:
        """A whole number in [low, its limit]; `true`, text, fractions, Infinity, NaN and absurd sizes refused."""
        value = self.get(key) if value is None else value
        if value is None:
            raise UsageError(
                f"{self.source}: config.json lacks '{key}' (fix: point `model` at a causal language "
                "model; its config.json gives hidden_size, num_hidden_layers, num_attention_heads, "
                "intermediate_size and vocab_size)"
            )
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refuse(key, f"is {_shown(value)}, not a whole number")
        limit = SIZE_LIMITS[limit_key or key]
        if not low <= value <= limit:
            raise self.refuse(key, f"is {_shown(value)}: a size must lie between {low} and {limit}")
        return value

    def optional_size(self, key: str, default: int, limit_key: str | None = None, low: int = 1) -> int:
        return default if self.get(key) is None else self.size(key, limit_key=limit_key, low=low)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.refuse(key, f"is {_shown(value)}, not true or false")
        return value


def _shown(value) -> str:
    text = json.dumps(value, allow_nan=True) if isinstance(value, (int, float, bool, str)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _uncounted(reader: _ConfigReader) -> None:
    """UsageError when the config describes an architecture the estimator does not know how to count."""
    what = None
    for key, kind in UNCOUNTED.items():
        value = reader.get(key)
        if value is not None and value is not False and value != 0 and value != []:
            what = (key, kind)
            break
    layer_types = reader.get("layer_types")
    if what is None and isinstance(layer_types, list):
        odd = sorted({str(t) for t in layer_types if t not in COUNTED_LAYER_TYPES})
        if odd:
            what = ("layer_types", f"layers of kind {', '.join(odd[:3])}")
    if what is None and reader.config.get("is_encoder_decoder") is True:
        what = ("is_encoder_decoder", "an encoder-decoder model")
    if what is not None:
        key, kind = what
        model_type = reader.get("model_type") or "this model"
        raise UsageError(
            f"{reader.source}: {model_type} has {kind} (config.json key '{key}'), which the memory "
            "estimator does not know how to count; a plan from it would be wrong (fix: a decoder-only "
            "model with attention and dense or mixture-of-experts MLP blocks, e.g. Llama, Qwen, "
            "Mistral, Gemma, Mixtral or Qwen3-MoE)"
        )


def _moe_layers(reader: _ConfigReader, layers: int) -> int:
    """How many blocks route through experts, by whichever layout the config states."""
    listed = reader.get("moe_layers")
    if isinstance(listed, list):
        return len({i for i in listed if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers})
    dense_only = reader.get("mlp_only_layers") or []
    if not isinstance(dense_only, list):
        raise reader.refuse("mlp_only_layers", f"is {_shown(dense_only)}, not a list of layer numbers")
    step = reader.optional_size("decoder_sparse_step", 1, "num_hidden_layers")
    step = reader.optional_size("interleave_moe_layer_step", step, "num_hidden_layers")
    first_dense = reader.optional_size("first_k_dense_replace", 0, "num_hidden_layers", low=0)
    frequency = reader.optional_size("moe_layer_freq", 1, "num_hidden_layers")
    return sum(
        1
        for i in range(layers)
        if i not in dense_only and (i + 1) % step == 0 and i >= first_dense and (i - first_dense) % frequency == 0
    )


def from_config(config: dict, name: str, source: str) -> Architecture:
    """Architecture facts from a transformers config.json (multimodal configs: their text part), every size
    checked; UsageError for a broken file or an architecture the estimator does not know how to count."""
    if not isinstance(config, dict):
        raise UsageError(f"{source}: config.json is not a JSON object (fix: point `model` at a causal language model)")
    text_config = config.get("text_config")
    text: dict = text_config if isinstance(text_config, dict) else config
    reader = _ConfigReader(config, text, source)
    _uncounted(reader)
    hidden = reader.size("hidden_size")
    layers = reader.size("num_hidden_layers")
    heads = reader.size("num_attention_heads")
    intermediate = reader.size("intermediate_size")
    vocab = reader.size("vocab_size")
    kv_heads = reader.optional_size("num_key_value_heads", heads)
    if kv_heads > heads or heads % kv_heads:
        raise reader.refuse(
            "num_key_value_heads",
            f"is {kv_heads}, which does not divide num_attention_heads ({heads}) into equal groups",
        )
    if reader.get("head_dim") is None and hidden < heads:
        raise reader.refuse(
            "num_attention_heads",
            f"is {heads}, more heads than hidden_size ({hidden}) has values, and no head_dim is given",
        )
    head_dim = reader.optional_size("head_dim", hidden // heads)
    # transformers' own default is tied; Llama-family configs state it explicitly when untied.
    tied = reader.flag("tie_word_embeddings", True)
    moe: _Experts = {}
    count_key, count = reader.first(EXPERT_COUNT_KEYS)
    if count_key is not None and reader.size(count_key, count, "experts", low=0) > 1:
        experts = reader.size(count_key, count, "experts")
        per_token_key, per_token = reader.first(EXPERTS_PER_TOKEN_KEYS)
        if per_token_key is None:
            raise reader.refuse(
                count_key,
                f"gives {experts} experts but no key says how many a token passes "
                f"through ({', '.join(EXPERTS_PER_TOKEN_KEYS[:2])})",
            )
        chosen = reader.size(per_token_key, per_token, "experts_per_token")
        if chosen > experts:
            raise reader.refuse(per_token_key, f"is {chosen}, more experts per token than the {experts} there are")
        width_key, width = reader.first(EXPERT_WIDTH_KEYS)
        expert_width = reader.size(width_key, width, "expert_intermediate") if width_key else intermediate
        shared_width_key, shared_width = reader.first(SHARED_WIDTH_KEYS)
        shared_count_key, shared_count = reader.first(SHARED_COUNT_KEYS)
        if shared_width_key is not None:
            shared = reader.size(shared_width_key, shared_width, "expert_intermediate", low=0)
        elif shared_count_key is not None:
            shared = reader.size(shared_count_key, shared_count, "shared_experts", low=0) * expert_width
        elif str(reader.get("model_type") or "").startswith("llama4"):
            shared = expert_width  # Llama 4's MoE block always adds one shared expert of the experts' width
        else:
            shared = 0
        moe = {
            "experts": experts,
            "experts_per_token": chosen,
            "expert_intermediate": expert_width,
            "shared_intermediate": shared,
            "moe_layers": _moe_layers(reader, layers),
        }
        if "intermediate_size_mlp" in text:  # Llama 4: its dense blocks are wider than one expert
            intermediate = reader.size("intermediate_size_mlp", limit_key="intermediate_size")
    positions_key, positions = reader.first(POSITION_KEYS)
    max_positions = reader.size(positions_key, positions, "positions") if positions_key else 0
    arch = Architecture(
        name=name,
        params=0,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=vocab,
        tied_embeddings=tied,
        family=str(text.get("model_type") or config.get("model_type") or ""),
        source=source,
        max_positions=max_positions,
        **moe,
    )
    arch = replace(arch, thinking=thinking_of(arch.family, name))
    return replace(arch, params=arch.computed_params)


# A config.json is a few KiB; a file far larger is not one (and would be read whole before any check).
MAX_CONFIG_BYTES = 4 << 20


def read_config(path: Path, name: str) -> Architecture:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise UsageError(
                f"{path}: over {MAX_CONFIG_BYTES >> 20} MiB, not a model's config.json (fix: point "
                "`model` at the model's folder)"
            )
        config = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise UsageError(f"{path}: cannot read the model's config.json: {what}") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path}: config.json is not a JSON object")
    return from_config(config, name, str(path))


def hf_cache_dirs() -> list[Path]:
    """Where huggingface_hub keeps downloaded repositories (contract.environment.hub_cache)."""
    from contract.environment import hub_cache

    return [hub_cache()]


def cached_config(model: str) -> Path | None:
    """config.json of `model` in the HF cache (repository folder matched case-insensitively)."""
    wanted = "models--" + model.strip().strip("/").replace("/", "--").lower()
    for cache in hf_cache_dirs():
        if not cache.is_dir():
            continue
        for repo in cache.iterdir():
            if repo.name.lower() != wanted:
                continue
            snapshots = repo / "snapshots"
            ref = repo / "refs" / "main"
            if ref.is_file():
                candidate = snapshots / ref.read_text(encoding="ascii").strip() / "config.json"
                if candidate.is_file():
                    return candidate
            found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            if found:
                return found[0]
    return None
