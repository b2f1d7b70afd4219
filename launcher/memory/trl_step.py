"""HOW MANY bytes one plain TRL + PEFT training step holds on a GPU (the estimator's "trl" path, 16-bit).

Each term restates what a simulated step (benchmarks/step_simulation.py: transformers' modules, PEFT,
TRL 1.15's chunked LM head, bf16 autocast, AdamW) keeps alive; benchmarks/estimator_vs_simulation.md
holds the comparison and tests/unit/launcher/test_estimator_simulation.py keeps it within 10%.

- A decoder block keeps, per token: an fp32 copy of each RMSNorm's input; rotated q, and k and v repeated
  to every head (transformers repeats them when a padding mask is given, as TRL always does), the
  attention output, an fp32 log-sum-exp per head and the additive mask row (2 bytes per key); gate, up and
  act(gate) of the MLP. LoRA adds PEFT's 16-bit copy of each adapted layer's input; full fine-tuning adds
  the tensors the weights' gradients need (each norm's normalised input, the two norm outputs that feed
  linear layers, down_proj's input).
- Gradient checkpointing keeps each block's 16-bit input, and once the boolean mask; the backward
  recomputes one block, and holds beside it PEFT's fp32 input casts (LoRA) or the MLP's gradients.
- Autocast keeps a 16-bit copy of the fp32 adapters for the step.
- TRL 1.15 scores completions through a chunked LM head: one (4096 tokens x 32768 vocabulary) 16-bit tile
  at a time, a copy of the scored hidden states, and in backward their fp32 gradient; full fine-tuning
  accumulates the head's weight gradient in fp32 (4 bytes x vocab x hidden).
- Full fine-tuning: a tied embedding's gradient arrives last as a dense (vocab x hidden) tensor added to
  the head's; torch's AdamW (foreach, the CUDA default) makes one moment-sized temporary for every
  parameter at the step.
"""

from __future__ import annotations

from profiles.catalog import Architecture

HALF = 2
FULL = 4
HEAD_TOKENS = 4096  # trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE
HEAD_VOCAB = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE
HEAD_STATS = 8  # fp32 per-token statistics of the online log-sum-exp (max, sums, target, ...)
QK_NORM_FAMILIES = ("gemma3", "qwen3")


def _norm_widths(arch: Architecture) -> list[int]:
    """Widths of the RMSNorms one block runs: Gemma 3 has four per block, others two; Gemma 3 and Qwen 3 also
    normalise q and k."""
    widths = [arch.hidden] * (4 if arch.family.startswith("gemma") else 2)
    if arch.family.startswith(QK_NORM_FAMILIES):
        widths += [arch.q_dim, arch.kv_dim]
    return widths


def block_bytes_per_token(arch: Architecture, seq: int, lora_targets=None) -> float:
    """What one decoder block keeps for backward per token; `lora_targets` None = full fine-tuning."""
    h, q, i = arch.hidden, arch.q_dim, arch.ffn_width  # a token's experts, if any
    norms = _norm_widths(arch)
    kept = FULL * sum(norms)  # each norm's fp32 input
    kept += HALF * 4 * q + FULL * arch.heads + HALF * seq  # q, repeated k and v, output; lse; mask row
    kept += HALF * 3 * i  # gate, up, act(gate)
    if lora_targets is None:
        normalised = FULL if arch.family.startswith("gemma") else HALF  # Gemma scales in fp32
        kept += normalised * sum(norms) + HALF * (2 * h + i)
    else:
        shapes = arch.module_shapes()
        kept += HALF * sum(shapes[m][0] for m in lora_targets if m in shapes)
    return kept


def outside_bytes_per_token(arch: Architecture, lora: bool, checkpointing: bool, seq: int) -> float:
    """Per token outside the blocks: the embedding output and the final norm's input (and the boolean mask,
    which checkpointed blocks keep for their recompute)."""
    per_token = (8 if not lora else 6 if checkpointing else 2) * arch.hidden
    return per_token + (seq if checkpointing else 0)


def training_pass(
    arch: Architecture, batch: int, seq: int, completion: int, lora_targets, lora_params: int, checkpointing: bool
) -> dict[str, float]:
    """activations (all blocks, or the recomputed one), activation_checkpoints and logits (the LM head)."""
    tokens = batch * seq
    lora = lora_targets is not None
    block = block_bytes_per_token(arch, seq, lora_targets)
    stored = tokens * outside_bytes_per_token(arch, lora, checkpointing, seq) + HALF * lora_params
    if checkpointing:
        extra = (8 if lora else 4) * arch.ffn_width + 2 * arch.hidden
        recompute = tokens * (block + extra)
        if not lora and arch.tied_embeddings:
            # the embedding's dense gradient, summed into the head's (tied) gradient at the end
            recompute = max(recompute, HALF * arch.embedding_params)
        comp = {"activations": recompute, "activation_checkpoints": stored + arch.layers * tokens * HALF * arch.hidden}
    else:
        comp = {"activations": stored + arch.layers * tokens * block, "activation_checkpoints": 0.0}
    comp["logits"] = head_bytes(arch, batch * completion, full=not lora)
    return comp


def head_bytes(arch: Architecture, scored: int, full: bool) -> float:
    """TRL's chunked LM head over `scored` completion tokens: one 16-bit logits tile, the scored hidden
    states, their fp32 gradient and its 16-bit cast, the per-token statistics; in full fine-tuning the fp32
    weight gradient."""
    tile = HALF * min(scored, HEAD_TOKENS) * min(arch.vocab, HEAD_VOCAB)
    hidden = scored * arch.hidden * (HALF + FULL + HALF) + scored * FULL * HEAD_STATS
    return tile + hidden + (FULL * arch.vocab * arch.hidden if full else 0.0)


def optimizer_step_bytes(optim: str, trainable: int, moment_bytes: float) -> float:
    """torch's foreach AdamW builds the square root of every second moment at once; fused, 8-bit (bitsandbytes)
    and stateless optimizers update in place."""
    return trainable * moment_bytes if optim == "adamw_torch" else 0.0


def peak_overlap(comp: dict[str, float], arch: Architecture, lora: bool, checkpointing: bool) -> float:
    """What the sum of the components counts twice, as a negative figure: the head and the recomputed block
    run one after the other; the optimizer step's temporaries, and full fine-tuning's gradients (but the
    head's, made first), are live only once the training pass has released its activations."""
    head, recompute = comp["logits"], comp["activations"]
    overlap = min(head, recompute) if checkpointing else 0.0
    training = comp["activations"] + comp["activation_checkpoints"] + comp["logits"] - overlap
    after = comp.get("optimizer_step", 0.0)
    if not lora:
        after += comp["gradients"] - HALF * arch.vocab * arch.hidden
    return -(overlap + min(training, max(after, 0.0)))
