"""WHAT a model is made of: the shape facts of one architecture (Architecture) and the sizes the memory
estimator counts from them: parameters dense and mixture-of-experts, LoRA adapters, the KV cache per token.

The facts come from profiles.catalog (the shipped table, or a config.json read by profiles.config_json).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tasks.prompts import EFFORT_SWITCH, THINKING_SWITCH, THINKS_ALWAYS, THINKS_NEVER


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
    # What its chat template does about thinking, as far as the family and name tell (thinking_of; the template's
    # own text, where it is on this machine, says better: profiles.tokenizer): tasks.prompts' THINKS_NEVER (""),
    # THINKS_ALWAYS, THINKING_SWITCH (thinks unless told not to: Qwen3, and the tiny model whose template mimics
    # it) or EFFORT_SWITCH (gpt-oss)
    thinking: str = ""

    @property
    def thinking_switch(self) -> bool:
        """Whether its chat template reads tasks.prompts.THINKING_SWITCH (and thinks unless it is false)."""
        return self.thinking == THINKING_SWITCH

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
# Families whose template (OpenAI's harmony format) reads `reasoning_effort`: the answer opens on the analysis
# channel at every level, the level sets how long
EFFORT_FAMILIES = ("gpt_oss",)
# Models that think whatever their family's template, known by name: their model_type is the base model's
# (qwen2, llama, phi3, qwen3), and their template opens a <think> block in the generation prompt (DeepSeek-R1 and
# its distillations, QwQ, Qwen3's *-Thinking-2507) or asks for one in its own system message (Phi-4-reasoning,
# Phi-4-mini-reasoning). Matched in the hub id's name part, lower case.
ALWAYS_THINKING_NAMES = (
    "deepseek-r1",
    "r1-distill",
    "qwq-",
    "phi-4-reasoning",
    "phi-4-mini-reasoning",
    "thinking-2507",
)


def thinking_of(family: str, name: str) -> str:
    """What a model's chat template does about thinking, from its family (model_type) and its hub id or folder
    name: tasks.prompts' THINKS_ALWAYS, EFFORT_SWITCH, THINKING_SWITCH or THINKS_NEVER."""
    short = str(name).strip().rstrip("/").rsplit("/", 1)[-1].lower()
    if any(mark in short for mark in ALWAYS_THINKING_NAMES):
        return THINKS_ALWAYS
    family = str(family).lower()
    if family in EFFORT_FAMILIES:
        return EFFORT_SWITCH
    if family in THINKING_FAMILIES:
        return THINKING_SWITCH
    return THINKS_NEVER
