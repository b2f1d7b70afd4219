"""WHAT a model is made of: the shape facts the memory estimator needs, known offline.

A catalogue of the models the profiles use (from their public config.json files), found from a hub id
whatever its case, with or without Unsloth's `unsloth/` mirror prefix and its `-bnb-4bit` /
`-unsloth-bnb-4bit` pre-quantised suffixes. Any other model is read from a config.json: a local folder,
then the Hugging Face cache, then (only when online) the hub.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from contract.errors import UsageError


@dataclass(frozen=True)
class Architecture:
    name: str  # the hub id (or folder) it was resolved as
    params: int  # published parameter count (the computed one is `computed_params`)
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # FFN width of a dense block (every block of a dense model)
    vocab: int
    tied_embeddings: bool
    family: str = ""  # model_type in config.json: llama, qwen2, qwen3, gemma3_text, ...
    source: str = "catalogue"
    # Mixture of experts (0 throughout: a dense model). Every expert's weights are resident; a token passes
    # through `experts_per_token` of them (and the shared ones), which is what its compute and activations cost.
    experts: int = 0  # routed experts of one mixture-of-experts block
    experts_per_token: int = 0  # routed experts each token passes through
    expert_intermediate: int = 0  # FFN width of one routed expert
    shared_intermediate: int = 0  # FFN width of the shared expert(s) every token passes through (0: none)
    moe_layers: int = 0  # blocks that route through experts; the other blocks are dense
    # The longest sequence the model's positions cover (config.json's max_position_embeddings); 0: not stated.
    # Sliding-window layers attend a window of the sequence and bound nothing: only the positions count.
    max_positions: int = 0
    # Its chat template reads the thinking switch (tasks.prompts.THINKING_SWITCH) and thinks unless told not to:
    # a reasoning model (THINKING_FAMILIES), or the tiny model, whose template mimics one
    thinking_switch: bool = False

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.experts > 0 and self.moe_layers > 0

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    def module_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one decoder block (a dense block's MLP; an expert's
        MLP has the same names at `expert_intermediate`)."""
        h, q, kv, i = self.hidden, self.q_dim, self.kv_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    def _attention_params(self) -> int:
        return 2 * self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim

    def _blocks_linear_params(self, routed: int) -> int:
        """Every block's linear layers with `routed` experts counted per mixture-of-experts block."""
        h = self.hidden
        moe_block = 3 * h * (routed * self.expert_intermediate + self.shared_intermediate) + h * self.experts
        return (
            self.layers * self._attention_params()
            + self.dense_layers * 3 * h * self.intermediate
            + self.moe_layers * moe_block
        )

    @cached_property  # the planner asks for it thousands of times a plan; the shape never changes
    def linear_params(self) -> int:
        """Parameters of every block's linear layers (every expert, and the routers): all resident."""
        return self._blocks_linear_params(self.experts)

    @property
    def active_linear_params(self) -> int:
        """The linear weights one token multiplies through: every block's for a dense model, the chosen and
        shared experts' for a mixture of experts (what the step-time model's compute scales with)."""
        return self._blocks_linear_params(self.experts_per_token) if self.is_moe else self.linear_params

    @property
    def expert_params(self) -> int:
        """The routed experts' weights (transformers 5 keeps each block's experts as fused 3-D parameters)."""
        return self.moe_layers * self.experts * 3 * self.hidden * self.expert_intermediate

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        """A separate output matrix only when the embeddings are not tied."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def norm_params(self) -> int:
        return self.layers * 2 * self.hidden + self.hidden

    @cached_property
    def computed_params(self) -> int:
        return self.linear_params + self.embedding_params + self.lm_head_params + self.norm_params

    @property
    def active_params(self) -> int:
        """Parameters one token's forward pass multiplies through: what a step's compute scales with (the
        whole model for a dense one; the chosen experts and the shared ones for a mixture of experts)."""
        return self.computed_params - self.linear_params + self._blocks_linear_params(self.experts_per_token)

    @property
    def ffn_width(self) -> int:
        """The FFN width one token passes through in the widest block: what activations are kept for."""
        widths = [self.intermediate] if self.dense_layers else []
        if self.moe_layers:
            widths.append(self.experts_per_token * self.expert_intermediate + self.shared_intermediate)
        return max(widths)

    def kv_bytes_per_token(self, bytes_per_value: float = 2.0) -> float:
        """Keys and values of one token across all layers."""
        return 2 * self.layers * self.kv_dim * bytes_per_value

    def lora_params(self, rank: int, target_modules) -> int:
        """r x (d_in + d_out) per adapted matrix per layer; unknown module names add nothing. In a mixture
        of experts the MLP names adapt every expert (Unsloth passes them to PEFT as target_parameters) and
        the shared expert; the router is not adapted."""
        shapes = self.module_shapes()
        targets = [m for m in target_modules if m in shapes]
        attention = sum(rank * sum(shapes[m]) for m in targets if m in ("q_proj", "k_proj", "v_proj", "o_proj"))
        mlp = [m for m in targets if m in ("gate_proj", "up_proj", "down_proj")]
        h = self.hidden
        total = self.layers * attention + self.dense_layers * len(mlp) * rank * (h + self.intermediate)
        if self.moe_layers:
            per_block = (
                len(mlp)
                * rank
                * (
                    self.experts * (h + self.expert_intermediate)
                    + ((h + self.shared_intermediate) if self.shared_intermediate else 0)
                )
            )
            total += self.moe_layers * per_block
        return total


# Model families whose chat template reads `enable_thinking` and thinks unless it is false (Qwen3 and the models
# built on it: a derivative keeps the model_type). Instruct-only releases of the family (Qwen3-*-Instruct-2507)
# have no switch; the attempt reads the real template, and the plan then errs towards planning for it.
THINKING_FAMILIES = ("qwen3", "qwen3_moe")


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
        thinking_switch=family in THINKING_FAMILIES,
    )


# The offline CPU model (tiny_model/build.py builds exactly this shape). Its vocabulary is the byte-level
# BPE tokenizer's 512 tokens; the few special tokens the trainer adds are left out here.
TINY = _arch("tiny", 0, 64, 2, 4, 2, 16, 256, 512, True, "llama")
TINY = replace(TINY, params=TINY.computed_params, thinking_switch=True)  # its template reads enable_thinking
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
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
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
    moe: dict[str, int] = {}
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
    arch = replace(arch, thinking_switch=arch.family in THINKING_FAMILIES)
    return replace(arch, params=arch.computed_params)


# A config.json is a few KiB; a file far larger is not one (and would be read whole before any check).
MAX_CONFIG_BYTES = 4 << 20


def _read_config(path: Path, name: str) -> Architecture:
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
    """Where huggingface_hub keeps downloaded repositories (contract.attempt.hub_cache)."""
    from contract.attempt import hub_cache

    return [hub_cache()]


def _cached_config(model: str) -> Path | None:
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
            return _read_config(folder / "config.json", model)
        tried.append(f"local folder {folder} (it has no config.json)")
    else:
        tried.append("a local folder of that name (none)")

    key = catalogue_key(model)
    if key in _BY_SHORT_NAME:
        return _BY_SHORT_NAME[key]
    tried.append(f"the catalogue of {len(CATALOGUE)} models as '{key}'")

    if "/" in model and not model.startswith((".", "/", "~")):
        cached = _cached_config(model)
        if cached:
            return _read_config(cached, model)
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
