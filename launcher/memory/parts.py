"""HOW MANY bytes each piece of one GRPO training step takes: the constants and formulas behind
launcher.memory.estimate, which adds them up per profile (that module's docstring tells the physics)."""

from __future__ import annotations

from launcher.memory.trl_step import optimizer_step_bytes
from launcher.memory.trl_step import training_pass as trl_pass
from profiles.catalog import Architecture
from profiles.keys import VLLM_LORA_RANKS

GIB = 1024**3

# A reward model scores this many completions per forward (rewards.model scores in batches of it)
REWARD_SCORE_BATCH = 16
HOST_ALLOCATOR_KEEPS = 2  # on CPU a scoring pass peaked at about twice its live activations (glibc keeps them)
REWARD_MODEL_HOST_FIXED_GIB = 0.03  # on CPU: the tokenizer and the first pass's thread pools, about 30 MiB

# Fixed costs
CUDA_CONTEXT_GIB = 0.75  # CUDA context + cuBLAS workspace + allocator slack (public range 0.5-1.0 GiB)
PYTHON_RUNTIME_GIB = 0.6  # CPU: torch + transformers + TRL imported (about 600 MB RSS measured)

# Bytes per parameter
NF4_BYTES = 0.5625  # bitsandbytes NF4: 4 bits + one 16-bit scale per 64 weights
HALF_BYTES = 2
FULL_BYTES = 4
OPTIMIZER_BYTES = {  # per trainable parameter
    "adamw_torch": 8,
    "adamw_torch_fused": 8,
    "paged_adamw_32bit": 8,  # two fp32 moments
    "adamw_8bit": 2,
    "adamw_bnb_8bit": 2,
    "paged_adamw_8bit": 2,  # two 8-bit moments (+ block scales)
    "adafactor": 0.5,  # factored second moment only: rows + columns, far under 1 B/param; 0.5 is generous
    "sgd": 0,  # plain SGD (TRL's default: no momentum) keeps no state
}
TORCH_OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "sgd")  # state in the parameters' dtype

# Logits (bytes per element of completion x vocab)
UNSLOTH_LOGIT_BYTES = 2 * HALF_BYTES  # two 16-bit tensors, one sequence at a time
# Materialised logits (TRL before its fused head, and the CPU path's torch fallback): the fp32 log-softmax kept
# for backward, then its gradient and the softmax in backward (a simulated step peaks at 12 B per logit)
TRL_LOGIT_BYTES = 3 * FULL_BYTES

# vLLM: what its share holds besides the weights and the KV cache (the "workspace"), in the terms of its start-up
# log ("non_torch_memory", "PyTorch activation peak", "Graph capturing ... took"). Checked against the seven
# start-up logs of Unsloth's GRPO notebooks (benchmarks/published_memory.py): the activation peak is the
# sampler's fp32 tensors over the vocabulary for every sequence of a batch (logits, their softmax and
# log-softmax, the sorted copy and its int64 indices for top-p/top-k: 36 bytes per sequence x vocabulary
# entry) and the profiling forward of one chunk of prefill tokens; the CUDA graphs grow with the batch sizes
# captured (up to max_num_seqs), the layers and the hidden size.
VLLM_NON_TORCH_GIB = 0.1  # logged 0.03-0.09 GiB
VLLM_SAMPLER_BYTES = 36  # per sequence x vocabulary entry
VLLM_GRAPH_BYTES = 24  # per sequence x layer x hidden unit (logged graph pools: 15-47, median 25)
VLLM_GRAPH_FLOOR_GIB = 0.15  # Unsloth's own graph reserve is never below this
# vLLM's own defaults (TRL's colocated engine and `trl vllm-serve`, which Unsloth's sizing does not reach)
VLLM_PREFILL_TOKENS = 8192
VLLM_SAMPLER_SEQS = 256
# unsloth_zoo's load_vllm sizes the engine from the memory its KV cache will have (GiB, after the weights,
# LoRA buffers and its graph reserve): (at most this much, max_num_batched_tokens, max_num_seqs). A test reads
# this table back from the installed unsloth_zoo source.
UNSLOTH_ENGINE_TIERS = (
    (2, 2048, 8),
    (4, 2048, 16),
    (8, 4096, 32),
    (12, 4096, 48),
    (16, 6144, 64),
    (24, 6144, 80),
    (40, 8192, 96),
    (48, 8192, 112),
    (80, 8192, 128),
    (float("inf"), 8192, 256),
)
# ... and reserves this for CUDA graphs before it: 172 graphs x hidden x layers x 4 bytes, within these bounds
UNSLOTH_GRAPH_RESERVE = (172 * 4, 0.15, 1.0)
# vLLM's packed size of a bitsandbytes 4-bit linear weight as unsloth_zoo counts it (2 bytes / (16/5))
UNSLOTH_NF4_BYTES = 0.625
STANDBY_UTILISATION = ((4.0, 0.925), (2.5, 0.9), (2.0, 0.825), (1.4, 0.8), (1.0, 0.775), (0.0, 0.75))
STANDBY_HEADROOM = 0.95


# Scale-out (accelerate + DeepSpeed). Bucket sizes are the ones launcher/run/distributed.py writes into the
# DeepSpeed configuration, in elements; the estimate and the configuration must agree.
ZERO_BUCKET_ELEMENTS = 50_000_000  # reduce_bucket_size and allgather_bucket_size (stages 1-2)
ZERO3_PREFETCH_ELEMENTS = 50_000_000  # stage3_prefetch_bucket_size
ZERO3_MAX_LIVE_ELEMENTS = 100_000_000  # stage3_max_live_parameters: gathered parameters held at once
COLLECTIVE_BUFFERS_GIB = 0.25  # NCCL's communicator buffers per GPU (a few MiB per channel and peer)
# DeepSpeed's mixed precision (ZeRO paper): 16-bit parameters and gradients, and an fp32 master copy of the
# trained parameters beside the optimizer's moments.
MASTER_BYTES = FULL_BYTES


# ---------------------------------------------------------------------------------------------------
# Pieces, each usable on its own (the tests check them against hand computations)


def weights_bytes(
    arch: Architecture, load_in_4bit: bool, device: str = "cuda", experts_quantised: bool = True
) -> float:
    """The base model as loaded, every expert of a mixture of experts included. NF4 shrinks the blocks' linear
    layers; embeddings, an untied lm_head and the norms stay 16-bit. A mixture's routed experts are fused 3-D
    parameters, which transformers' bitsandbytes integration leaves in 16-bit (`experts_quantised` False:
    plain TRL) and Unsloth quantises too. On CPU the model is fp32."""
    if device == "cpu":
        return arch.computed_params * FULL_BYTES
    if load_in_4bit:
        kept = 0 if experts_quantised else arch.expert_params
        rest = arch.embedding_params + arch.lm_head_params + arch.norm_params + kept
        return (arch.linear_params - kept) * NF4_BYTES + rest * HALF_BYTES
    return arch.computed_params * HALF_BYTES


# Model types Unsloth trains in float32 on a card without bfloat16 (unsloth_zoo.model_lists.FORCE_FLOAT32,
# 2026.10.9): float16 overflows in them. Below compute capability 8.0 its loader then keeps the weights 16-bit
# but turns mixed precision off, so activations, checkpoints and logits are float32.
UNSLOTH_FORCE_FLOAT32 = (
    "gemma3,",
    "gemma3text",
    "gemma3n",
    "gemma4",
    "gemma4text",
    "glm4_moe",
    "glm4_moe_lite",
    "gpt_oss",
    "qwen3_5",
    "qwen3_moe",
    "embedding_gemma2",
    "embedding_gemma2_text",
)


def unsloth_trains_in_float32(arch: Architecture, gpu) -> bool:
    """Whether Unsloth runs this model's training in float32 on `gpu`: a FORCE_FLOAT32 model type (matched as
    its loader does: the type without '-'/'_', or an entry inside the comma-joined type list) on a card known
    to lack bfloat16 (compute capability < 8.0). An unknown card is taken as modern."""
    from contract.attempt import bf16_capable

    capability = getattr(gpu, "compute_capability", None)
    if gpu is None or bf16_capable(capability) or not arch.family:
        return False
    joined, squeezed = f"{arch.family},", arch.family.replace("-", "").replace("_", "")
    return any(entry == squeezed or entry in joined for entry in UNSLOTH_FORCE_FLOAT32)


def expert_dequant_bytes(arch: Architecture, load_in_4bit: bool) -> float:
    """Unsloth runs 4-bit experts by dequantising one block's experts to 16-bit for its forward (and again
    in backward): one block's worth of experts in 16-bit, transient but at the peak."""
    if not (load_in_4bit and arch.is_moe):
        return 0.0
    return arch.expert_params / arch.moe_layers * HALF_BYTES


def activation_bytes_per_token_layer(
    arch: Architecture, element_bytes: int = HALF_BYTES, backend: str = "unsloth"
) -> float:
    """What one decoder block keeps for the backward pass per token (FlashAttention/SDPA: no s^2 scores).

    unsloth (fused RMSNorm, RoPE and SwiGLU kernels): both norms' input and output (4h), q and the attention
        output (2q), k and v (2kv), gate, up and their product (3i).
    trl (transformers' modules): each RMSNorm keeps an fp32 copy of its input, the fp32 normalised tensor
        and its 16-bit cast (5h per norm, 10h), RoPE keeps q, k and their rotated halves besides the
        rotated q, k and v (4q, 4kv), SwiGLU keeps gate, SiLU(gate), up and the product (4i).
    """
    h, q, kv, i = arch.hidden, arch.q_dim, arch.kv_dim, arch.ffn_width  # a token's experts, if any
    if backend == "unsloth":
        return element_bytes * (4 * h + 2 * q + 2 * kv + 3 * i)
    return element_bytes * (10 * h + 4 * q + 4 * kv + 4 * i)


def logits_bytes(batch: int, tokens: int, vocab: int, backend: str) -> float:
    if backend == "unsloth":
        return tokens * vocab * UNSLOTH_LOGIT_BYTES
    return batch * tokens * vocab * TRL_LOGIT_BYTES


def standby_utilisation(total_gib: float) -> float:
    """The gpu_memory_utilization Unsloth sets under standby on a card of `total_gib` (what torch reports)."""
    tenth = total_gib * 0.1
    tier = next(share for floor, share in STANDBY_UTILISATION if tenth >= floor)
    return tier * STANDBY_HEADROOM


def unsloth_vllm_utilisation(requested: float, total_gib: float, free_gib: float, standby: bool) -> float:
    """vLLM's gpu_memory_utilization as unsloth_zoo's load_vllm hands it over: the profile's share (Unsloth's
    standby tier under standby) is taken of the memory free when vLLM starts, then expressed as a share of the
    total again. (Unsloth lowers it further only when training's activations would not fit beside it, which
    no share below 0.9 of a card meets.)"""
    share = standby_utilisation(total_gib) if standby else requested
    return share * min(free_gib, total_gib) / total_gib


def vllm_workspace_bytes(arch: Architecture, seqs: int = VLLM_SAMPLER_SEQS, tokens: int = VLLM_PREFILL_TOKENS) -> float:
    """vLLM's memory besides weights and KV cache for an engine of `seqs` sequences at once and `tokens`
    prefill tokens per forward: non-torch memory, CUDA graphs, the profiling forward and the sampler."""
    prefill = tokens * HALF_BYTES * (arch.hidden + 2 * arch.ffn_width)
    sampler = seqs * arch.vocab * VLLM_SAMPLER_BYTES
    graphs = max(VLLM_GRAPH_FLOOR_GIB * GIB, VLLM_GRAPH_BYTES * seqs * arch.layers * arch.hidden)
    return VLLM_NON_TORCH_GIB * GIB + graphs + prefill + sampler


def unsloth_lora_rank(rank: int) -> int:
    """The max_lora_rank vLLM is given: the rank rounded up to the next rank vLLM serves."""
    return next((r for r in VLLM_LORA_RANKS if r >= rank), VLLM_LORA_RANKS[-1])


def unsloth_engine(profile, arch: Architecture, share_bytes: float, seqs: int | None = None) -> tuple[int, int, float]:
    """(max_num_seqs, max_num_batched_tokens, KV budget in bytes) of the engine unsloth_zoo's load_vllm starts
    for `profile` with `share_bytes` of the card: its own weight and LoRA-buffer count and graph reserve
    taken off the share give the KV budget, whose tier sets both sizes (UNSLOTH_ENGINE_TIERS); an explicit
    vllm_max_num_seqs (or `seqs`, which takes precedence) replaces the tier's sequences."""
    if profile.load_in_4bit:
        weights = (
            arch.linear_params * UNSLOTH_NF4_BYTES
            + (arch.embedding_params + arch.lm_head_params + arch.norm_params) * HALF_BYTES
        )
    else:
        weights = arch.computed_params * HALF_BYTES
    rank = unsloth_lora_rank(max(profile.lora_rank, 1))
    h, q, kv, i = arch.hidden, arch.q_dim, arch.kv_dim, arch.intermediate
    lora = arch.layers * HALF_BYTES * rank * ((3 * h + q) + (q + 2 * kv + h) + (2 * h + i) + (2 * i + h))
    per, low, high = UNSLOTH_GRAPH_RESERVE
    graphs = min(max(per * h * arch.layers, low * GIB), high * GIB)
    budget = max(share_bytes - weights - lora - graphs, 0.0)
    asked = seqs or getattr(profile, "vllm_max_num_seqs", 0)
    _, tokens, seqs = next(t for t in UNSLOTH_ENGINE_TIERS if budget / GIB <= t[0])
    if asked:
        seqs = asked
    tokens = max(min(tokens, seqs * profile.max_seq_length), seqs)
    return seqs, tokens, budget


# ---------------------------------------------------------------------------------------------------
# Parts that the single-device and the data-parallel estimates count the same way (bytes)


def sequence_tokens(profile) -> int:
    return profile.max_prompt_length + profile.max_completion_length


def model_states(
    profile,
    arch: Architecture,
    weights: float,
    element: int,
    notes: list[str],
    world: int = 1,
    stage: int = 0,
    backend: str = "unsloth",
) -> dict[str, float]:
    """What is trained (LoRA adapters or every parameter), its gradients and optimizer state, ZeRO's buckets,
    and the reference copy of `weights` (the weights one GPU holds) for full fine-tuning with beta > 0. One
    process is the ZeRO accounting at world size 1, stage 0, without DDP's bucket copy."""
    if profile.uses_lora:
        trainable = arch.lora_params(profile.lora_rank, profile.target_modules)
    else:
        trainable = arch.computed_params
        notes.append("full fine-tuning: every parameter has a gradient and optimizer state")
    comp = zero_model_state_bytes(trainable, profile.optim, world, stage, profile.uses_lora, element)
    if world == 1:
        comp.pop("gradient_buckets", None)  # one process: no DDP wrapper, no bucket copy
    if backend == "trl" and stage == 0 and not profile.uses_lora and profile.optim in TORCH_OPTIMIZERS:
        comp["optimizer"] *= element / FULL_BYTES  # torch keeps the moments in the (16-bit) parameters' dtype
        if element == HALF_BYTES:
            comp["optimizer_step"] = optimizer_step_bytes(profile.optim, trainable, element)
    elif backend == "trl" and stage == 0 and element == HALF_BYTES:
        comp["optimizer_step"] = optimizer_step_bytes(profile.optim, trainable, OPTIMIZER_BYTES[profile.optim] / 2)
    if stage in (1, 2):
        comp["zero_buckets"] = 2 * HALF_BYTES * min(ZERO_BUCKET_ELEMENTS, trainable)
    elif stage == 3:
        comp["zero_buckets"] = HALF_BYTES * min(ZERO_BUCKET_ELEMENTS, trainable)
    comp["reference"] = weights if (profile.beta > 0 and not profile.uses_lora) else 0.0
    comp.update(loss_setting_bytes(profile, notes))
    return comp


def loss_setting_bytes(profile, notes: list[str]) -> dict[str, float]:
    """What the GRPO loss settings add to a step besides the reference copy (model_states counts it): with
    num_iterations > 1 TRL keeps the old policy's log-probs of every completion of the generation batch (fp32,
    one per completion token) for the passes that reuse it. Their time is said in the notes: beta > 0 runs a
    reference forward pass per micro-batch, num_iterations > 1 one more forward pass per generation batch while
    generating only every num_iterations steps."""
    comp: dict[str, float] = {}
    if profile.beta > 0:
        how = "the base with the adapter off" if profile.uses_lora else "the reference copy"
        notes.append(f"beta {profile.beta:g}: a forward pass of {how} per micro-batch for the KL term (time)")
    if profile.num_iterations > 1 or profile.updates_per_generation > 1:
        served = profile.updates_per_generation
        comp["old_logprobs"] = profile.effective_batch * served * profile.max_completion_length * FULL_BYTES
        every = profile.num_iterations * served
        notes.append(
            f"completions generated every {every} steps (num_iterations {profile.num_iterations} x "
            f"{served} steps per generation); the old policy's log-probs kept for them, one more forward pass "
            "per generation batch"
        )
    return comp


def training_pass(
    profile, arch: Architecture, element: int, backend: str, notes: list[str], offload: bool
) -> tuple[dict[str, float], float]:
    """(activations, activation checkpoints and logits of one micro-batch, bytes offloaded to host RAM).
    `offload`: Unsloth's gradient_checkpointing "unsloth" moves the checkpoints to host RAM (on a GPU)."""
    if backend == "trl" and element == HALF_BYTES:
        targets = profile.target_modules if profile.uses_lora else None
        lora_params = arch.lora_params(profile.lora_rank, targets) if profile.uses_lora else 0
        return trl_pass(
            arch,
            profile.per_device_train_batch_size,
            sequence_tokens(profile),
            profile.max_completion_length,
            targets,
            lora_params,
            profile.gradient_checkpointing != "false",
        ), 0.0
    micro_tokens = profile.per_device_train_batch_size * sequence_tokens(profile)
    per_token_layer = activation_bytes_per_token_layer(arch, element, backend)
    hidden_state = micro_tokens * arch.hidden * element  # one layer's input: what a checkpoint keeps
    mode = profile.gradient_checkpointing
    host_offload = 0.0
    if mode == "false":
        comp = {"activations": arch.layers * micro_tokens * per_token_layer, "activation_checkpoints": 0.0}
    else:
        # the layer being recomputed holds its full activations
        comp = {"activations": micro_tokens * per_token_layer}
        checkpoints = arch.layers * hidden_state
        if mode == "unsloth" and offload:
            comp["activation_checkpoints"] = 2 * hidden_state  # in-flight copies to and from host RAM
            host_offload = checkpoints
            notes.append(f"Unsloth offloads activation checkpoints ({checkpoints / GIB:.2f} GiB) to host RAM")
        else:
            comp["activation_checkpoints"] = checkpoints
    comp["logits"] = logits_bytes(
        profile.per_device_train_batch_size, profile.max_completion_length, arch.vocab, backend
    )
    return comp, host_offload


def generate_kv_cache(arch: Architecture, completions: int, seq: int, element: int) -> float:
    """transformers' generate (no vLLM): the KV cache of `completions` full-length sequences."""
    return completions * seq * arch.kv_bytes_per_token(element)


# Unsloth's own decode (its generate without vLLM) keeps its KV cache in rows it allocates ahead
# (unsloth/models/llama.py KV_CACHE_INCREMENT, unsloth/models/_decode_graphs.py): the prompt, one row and 512
# more, grown by 512 when full; under its CUDA graphs rounded up to 256 rows and doubled when full. The H100 kit
# read 2.2-3.6x the token count's cache around Unsloth's waves (docs/measurement.md).
UNSLOTH_KV_INCREMENT = 512
UNSLOTH_GRAPH_BUCKET = 256
UNSLOTH_DECODE_FAMILIES = frozenset(
    {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "cohere", "granite", "falcon_h1"}
)
UNSLOTH_GRAPH_FAMILIES = frozenset({"llama", "qwen3"})


def unsloth_decode_rows(prompt: int, completion: int, graphs: bool) -> int:
    """The rows of Unsloth's decode cache once `completion` tokens are generated after a `prompt`-token prefill:
    a step writes row L of a cache of L tokens and grows it first when L + 1 reaches the rows."""

    def bucket(rows: int) -> int:
        return -(-rows // UNSLOTH_GRAPH_BUCKET) * UNSLOTH_GRAPH_BUCKET if graphs else rows

    rows = bucket(prompt + 1 + UNSLOTH_KV_INCREMENT)
    while rows < prompt + completion:
        rows = bucket(max(rows + UNSLOTH_KV_INCREMENT, 2 * rows)) if graphs else rows + UNSLOTH_KV_INCREMENT
    return rows


def unsloth_generate_kv_cache(
    arch: Architecture, completions: int, prompt: int, completion: int, element: int
) -> float:
    """Unsloth's generate (no vLLM): its decode cache where the family decodes through Unsloth's own kernels,
    else transformers' cache of full-length sequences."""
    if arch.family not in UNSLOTH_DECODE_FAMILIES:
        return generate_kv_cache(arch, completions, prompt + completion, element)
    rows = unsloth_decode_rows(prompt, completion, arch.family in UNSLOTH_GRAPH_FAMILIES)
    return completions * rows * arch.kv_bytes_per_token(element)


def cpu_process(arch: Architecture, completions: int, seq: int) -> dict[str, float]:
    """What a cpu process holds besides the model and the training pass: generate's fp32 KV cache, the runtime."""
    return {
        "generate_kv_cache": generate_kv_cache(arch, completions, seq, FULL_BYTES),
        "runtime": PYTHON_RUNTIME_GIB * GIB,
    }


def vllm_sizes(
    profile, arch: Architecture, tp: int = 1, share_bytes: float | None = None, seqs: int | None = None
) -> tuple[float, float, float]:
    """(workspace, KV bytes of one token, KV bytes of one max_seq_length sequence) of one vLLM GPU holding
    1/tp of the model. With `share_bytes` (Unsloth's colocated engine on one GPU) the workspace is sized as
    unsloth_zoo sizes that engine; without, with vLLM's own defaults."""
    kv_token = arch.kv_bytes_per_token(HALF_BYTES) / tp
    if share_bytes is None:
        workspace = vllm_workspace_bytes(arch)
    else:
        seqs, tokens, _ = unsloth_engine(profile, arch, share_bytes, seqs)
        workspace = vllm_workspace_bytes(arch, seqs, tokens)
    return workspace, kv_token, profile.max_seq_length * kv_token


def zero_model_state_bytes(
    trainable: int, optim: str, world: int, stage: int, lora: bool, element: int = HALF_BYTES
) -> dict[str, float]:
    """Per-GPU bytes of what is trained (Psi parameters), by the ZeRO paper's partitioning.

    stage 0 (DDP): as on one GPU (PEFT's fp32 adapters, or the full model in `element` bytes counted with
        the weights), plus DDP's gradient buckets: a second, flat copy of the gradients.
    stage >= 1 (DeepSpeed mixed precision): 16-bit parameters (2 Psi) and gradients (2 Psi), and
        K Psi of optimizer state = fp32 master copy (4) + the optimizer's moments. Stage 1 divides the K Psi
        by the world size, stage 2 also the gradients, stage 3 also the parameters.
    """
    optimizer = OPTIMIZER_BYTES[optim]
    if stage == 0:
        grad = FULL_BYTES if lora else element
        return {
            "lora": trainable * FULL_BYTES if lora else 0.0,
            "gradients": trainable * grad,
            "gradient_buckets": trainable * grad,
            "optimizer": trainable * optimizer,
        }
    params = trainable * HALF_BYTES
    grads = trainable * HALF_BYTES
    states = trainable * (MASTER_BYTES + optimizer)
    return {
        "lora": (params / (world if stage >= 3 else 1)) if lora else 0.0,
        "gradients": grads / (world if stage >= 2 else 1),
        "optimizer": states / world,
    }


def layer_params(arch: Architecture) -> int:
    return arch.linear_params // arch.layers + 2 * arch.hidden


def reward_model_gib(
    arch: Architecture, completions: int, tokens: int, element: int, host: bool = False
) -> tuple[float, float]:
    """(weights, activations) in GiB of a sequence-classification reward model that scores `completions` of
    `tokens` (prompt and completion) in inference mode, REWARD_SCORE_BATCH at a time, at `element` bytes a value:
    its blocks, embeddings and norms (the score head is one row of hidden units; there is no lm_head), and, for the
    batch in flight, a block's residual stream, attention output and the FFN's two intermediates (inference keeps
    nothing for backward, so one block's worth at a time). On the host (a cpu profile) the C allocator keeps the
    freed blocks of a pass beside the next one's, and the tokenizer and thread pools take a fixed amount
    (benchmarks/reward_model_memory.md measured both)."""
    weights = (arch.linear_params + arch.embedding_params + arch.norm_params + arch.hidden) * element
    batch = max(1, min(completions, REWARD_SCORE_BATCH))
    activations: float = batch * tokens * (3 * arch.hidden + 2 * arch.ffn_width) * element
    if host:
        activations = activations * HOST_ALLOCATOR_KEEPS + REWARD_MODEL_HOST_FIXED_GIB * GIB
    return weights / GIB, activations / GIB
