"""HOW MUCH memory one GRPO attempt of a profile needs, by named component (GiB).

The physics of one step (see the README's memory section): base weights counted once (vLLM shares them with
training in Unsloth's fast_inference), LoRA adapters, gradients and optimizer state of what is trained, a
reference copy only for full fine-tuning with beta > 0, the activations kept for the backward pass, the
logits of the GRPO loss, vLLM's reservation (utilisation x the card's total memory) or, without vLLM, the
KV cache of transformers' generate, and the CUDA context. A cpu profile is estimated the same way in host
RAM (fp32, no CUDA context, no vLLM).

Two trainer paths count the logits differently, as each library does:
  "unsloth" (every cuda profile): Unsloth's GRPO loss works one sequence at a time and keeps two 16-bit
      tensors of completion x vocab (its own published accounting: 9.8 GiB at 20K tokens x 128K vocab);
  "trl" (plain TRL, and the CPU path): batch x completion x vocab logits in 16-bit, their fp32 upcast and
      the fp32 log-softmax: 10 bytes per logit (trl #3678 measured 310 MB of fp32 logits for 2 x 256 x
      151,665).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.catalog import Architecture, resolve

GIB = 1024 ** 3

# Fixed costs
CUDA_CONTEXT_GIB = 0.75      # CUDA context + cuBLAS workspace + allocator slack (public range 0.5-1.0 GiB)
PYTHON_RUNTIME_GIB = 0.6     # CPU: torch + transformers + TRL imported (about 600 MB RSS measured)

# Bytes per parameter
NF4_BYTES = 0.5625           # bitsandbytes NF4: 4 bits + one 16-bit scale per 64 weights
HALF_BYTES = 2
FULL_BYTES = 4
OPTIMIZER_BYTES = {          # per trainable parameter
    "adamw_torch": 8, "adamw_torch_fused": 8, "paged_adamw_32bit": 8,   # two fp32 moments
    "adamw_8bit": 2, "adamw_bnb_8bit": 2, "paged_adamw_8bit": 2,        # two 8-bit moments (+ block scales)
    "adafactor": 0.5,        # factored second moment only: rows + columns, far under 1 B/param; 0.5 is generous
    "sgd": 0,                # plain SGD (TRL's default: no momentum) keeps no state
}

# Logits (bytes per element of completion x vocab)
UNSLOTH_LOGIT_BYTES = 2 * HALF_BYTES     # two 16-bit tensors, one sequence at a time
TRL_LOGIT_BYTES = HALF_BYTES + FULL_BYTES + FULL_BYTES  # 16-bit logits, fp32 upcast, fp32 log-softmax

# vLLM (colocated through Unsloth's fast_inference)
VLLM_FIXED_GIB = 0.5          # CUDA graphs and vLLM's non-torch memory
VLLM_PREFILL_TOKENS = 8192    # Unsloth's chunked-prefill budget: the profiling forward vLLM measures
VLLM_SAMPLER_SEQS = 256       # max_num_seqs: the sampler holds fp32 logits for this many sequences
# UNSLOTH_VLLM_STANDBY replaces gpu_memory_utilization with its own tier (about 0.76 on 16 GB, 0.88 on 80 GB)
STANDBY_UTILISATION = ((16.0, 0.76), (80.0, 0.88))


# Scale-out (accelerate + DeepSpeed). Bucket sizes are the ones launcher/distributed.py writes into the
# DeepSpeed configuration, in elements; the estimate and the configuration must agree.
ZERO_BUCKET_ELEMENTS = 50_000_000      # reduce_bucket_size and allgather_bucket_size (stages 1-2)
ZERO3_PREFETCH_ELEMENTS = 50_000_000   # stage3_prefetch_bucket_size
ZERO3_MAX_LIVE_ELEMENTS = 100_000_000  # stage3_max_live_parameters: gathered parameters held at once
COLLECTIVE_BUFFERS_GIB = 0.25          # NCCL's communicator buffers per GPU (a few MiB per channel and peer)
# DeepSpeed's mixed precision (ZeRO paper): 16-bit parameters and gradients, and an fp32 master copy of the
# trained parameters beside the optimizer's moments.
MASTER_BYTES = FULL_BYTES


@dataclass
class Estimate:
    total_gib: float
    components: dict[str, float]
    notes: list[str] = field(default_factory=list)
    # vLLM's reservation (GiB) and why it cannot start, when it cannot; None without vLLM
    vllm_share_gib: float | None = None
    vllm_problem: str | None = None
    host_offload_gib: float = 0.0      # Unsloth's offloaded activation checkpoints, in host RAM
    memory: str = "gpu"                # "gpu" or "host": where these GiB are needed
    backend: str = "unsloth"
    # Scale-out: the figures above are per training GPU (per process on a cpu profile)
    world_size: int = 1
    zero_stage: int = 0
    gpus_needed: int = 1
    server: "Estimate | None" = None   # one GPU of the vLLM server (server mode)

    def to_json(self) -> dict:
        out = {"total_gib": round(self.total_gib, 3),
               "components": {k: round(v, 3) for k, v in self.components.items()},
               "memory": self.memory, "backend": self.backend,
               "vllm_share_gib": None if self.vllm_share_gib is None else round(self.vllm_share_gib, 3),
               "vllm_problem": self.vllm_problem,
               "host_offload_gib": round(self.host_offload_gib, 3),
               "notes": list(self.notes),
               "world_size": self.world_size, "zero_stage": self.zero_stage, "gpus_needed": self.gpus_needed,
               "per": "process" if self.memory == "host" else "gpu"}
        if self.server is not None:
            out["server"] = self.server.to_json()
        return out


# ---------------------------------------------------------------------------------------------------
# Pieces, each usable on its own (the tests check them against hand computations)

def weights_bytes(arch: Architecture, load_in_4bit: bool, device: str = "cuda") -> float:
    """The base model as loaded. NF4 shrinks the blocks' linear layers; embeddings, an untied lm_head and
    the norms stay 16-bit. On CPU the model is fp32."""
    if device == "cpu":
        return arch.computed_params * FULL_BYTES
    if load_in_4bit:
        rest = arch.embedding_params + arch.lm_head_params + arch.norm_params
        return arch.linear_params * NF4_BYTES + rest * HALF_BYTES
    return arch.computed_params * HALF_BYTES


def activation_bytes_per_token_layer(arch: Architecture, element_bytes: int = HALF_BYTES,
                                     backend: str = "unsloth") -> float:
    """What one decoder block keeps for the backward pass per token (FlashAttention/SDPA: no s^2 scores).

    unsloth (fused RMSNorm, RoPE and SwiGLU kernels): both norms' input and output (4h), q and the attention
        output (2q), k and v (2kv), gate, up and their product (3i).
    trl (transformers' modules): each RMSNorm keeps an fp32 copy of its input, the fp32 normalised tensor
        and its 16-bit cast (5h per norm, 10h), RoPE keeps q, k and their rotated halves besides the
        rotated q, k and v (4q, 4kv), SwiGLU keeps gate, SiLU(gate), up and the product (4i).
    """
    h, q, kv, i = arch.hidden, arch.q_dim, arch.kv_dim, arch.intermediate
    if backend == "unsloth":
        return element_bytes * (4 * h + 2 * q + 2 * kv + 3 * i)
    return element_bytes * (10 * h + 4 * q + 4 * kv + 4 * i)


def logits_bytes(batch: int, tokens: int, vocab: int, backend: str) -> float:
    if backend == "unsloth":
        return tokens * vocab * UNSLOTH_LOGIT_BYTES
    return batch * tokens * vocab * TRL_LOGIT_BYTES


def standby_utilisation(total_gib: float) -> float:
    (low_gib, low), (high_gib, high) = STANDBY_UTILISATION
    if total_gib <= low_gib:
        return low
    if total_gib >= high_gib:
        return high
    return low + (high - low) * (total_gib - low_gib) / (high_gib - low_gib)


def vllm_workspace_bytes(arch: Architecture) -> float:
    """vLLM's memory besides weights and KV cache: graphs, the profiling forward, the sampler's logits."""
    prefill = VLLM_PREFILL_TOKENS * HALF_BYTES * (arch.hidden + 2 * arch.intermediate)
    sampler = VLLM_SAMPLER_SEQS * arch.vocab * FULL_BYTES
    return VLLM_FIXED_GIB * GIB + prefill + sampler


# ---------------------------------------------------------------------------------------------------
# Parts that the single-device and the data-parallel estimates count the same way (bytes)

def _sequence_tokens(profile) -> int:
    return profile.max_prompt_length + profile.max_completion_length


def _model_states(profile, arch: Architecture, weights: float, element: int, notes: list[str], world: int = 1,
                  stage: int = 0) -> dict[str, float]:
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
    if stage in (1, 2):
        comp["zero_buckets"] = 2 * HALF_BYTES * min(ZERO_BUCKET_ELEMENTS, trainable)
    elif stage == 3:
        comp["zero_buckets"] = HALF_BYTES * min(ZERO_BUCKET_ELEMENTS, trainable)
    comp["reference"] = weights if (profile.beta > 0 and not profile.uses_lora) else 0.0
    return comp


def _training_pass(profile, arch: Architecture, element: int, backend: str, notes: list[str],
                   offload: bool) -> tuple[dict[str, float], float]:
    """(activations, activation checkpoints and logits of one micro-batch, bytes offloaded to host RAM).
    `offload`: Unsloth's gradient_checkpointing "unsloth" moves the checkpoints to host RAM (on a GPU)."""
    micro_tokens = profile.per_device_train_batch_size * _sequence_tokens(profile)
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
    comp["logits"] = logits_bytes(profile.per_device_train_batch_size, profile.max_completion_length,
                                  arch.vocab, backend)
    return comp, host_offload


def _generate_kv_cache(arch: Architecture, completions: int, seq: int, element: int) -> float:
    """transformers' generate (no vLLM): the KV cache of `completions` full-length sequences."""
    return completions * seq * arch.kv_bytes_per_token(element)


def _cpu_process(arch: Architecture, completions: int, seq: int) -> dict[str, float]:
    """What a cpu process holds besides the model and the training pass: generate's fp32 KV cache, the runtime."""
    return {"generate_kv_cache": _generate_kv_cache(arch, completions, seq, FULL_BYTES),
            "runtime": PYTHON_RUNTIME_GIB * GIB}


def _vllm_sizes(profile, arch: Architecture, tp: int = 1) -> tuple[float, float, float]:
    """(workspace, KV bytes of one token, KV bytes of one max_seq_length sequence) of one vLLM GPU holding
    1/tp of the model."""
    kv_token = arch.kv_bytes_per_token(HALF_BYTES) / tp
    return vllm_workspace_bytes(arch), kv_token, profile.max_seq_length * kv_token


def _in_gib(comp: dict[str, float], notes: list[str], vllm_share: float | None = None, host_offload: float = 0.0,
            **fields) -> Estimate:
    """The Estimate of components counted in bytes: total and every figure in GiB."""
    total = sum(comp.values())
    return Estimate(total_gib=total / GIB, components={k: v / GIB for k, v in comp.items()}, notes=notes,
                    vllm_share_gib=None if vllm_share is None else vllm_share / GIB,
                    host_offload_gib=host_offload / GIB, **fields)


# ---------------------------------------------------------------------------------------------------

def estimate(profile, arch: Architecture | None = None, gpu=None, backend: str | None = None) -> Estimate:
    """Peak memory of one attempt of `profile` on `gpu` (a launcher.gpu.GpuInfo; None = card unknown)."""
    arch = arch or resolve(profile.model)
    if getattr(profile, "distributed", False):
        return estimate_distributed(profile, arch, gpu)
    cpu = profile.device == "cpu"
    backend = backend or ("trl" if cpu else "unsloth")
    element = FULL_BYTES if cpu else HALF_BYTES
    notes: list[str] = []
    seq = _sequence_tokens(profile)
    generation_batch = profile.effective_batch  # TRL: generation_batch_size = batch x accumulation

    weights = weights_bytes(arch, profile.load_in_4bit and not cpu, profile.device)
    comp: dict[str, float] = {"weights": weights}
    comp.update(_model_states(profile, arch, weights, element, notes))
    if comp["reference"]:
        notes.append("beta > 0 without LoRA: a second copy of the model serves as reference")
    training, host_offload = _training_pass(profile, arch, element, backend, notes, offload=not cpu)
    comp.update(training)

    vllm_share = None
    vllm_problem = None
    if cpu:
        comp.update(_cpu_process(arch, generation_batch, seq))
    else:
        comp["cuda_context"] = CUDA_CONTEXT_GIB * GIB
        if profile.fast_inference:
            vllm_share, vllm_problem, share_note = _vllm_share(profile, arch, weights, gpu, generation_batch, seq)
            notes.append(share_note)
            # the share holds the (shared) weights; the rest is vLLM's KV cache, graphs and workspace
            comp["vllm_cache"] = max(vllm_share - weights, 0.0)
            if profile.vllm_standby:
                # asleep during training, vLLM lends its KV memory to the backward pass
                lent = comp["activations"] + comp["activation_checkpoints"] + comp["logits"]
                overlap = min(lent, max(comp["vllm_cache"] - vllm_workspace_bytes(arch), 0.0))
                comp["standby_reuse"] = -overlap
                notes.append("vLLM standby: training reuses the sleeping KV cache")
        else:
            comp["generate_kv_cache"] = _generate_kv_cache(arch, generation_batch, seq, HALF_BYTES)

    return _in_gib(comp, notes, vllm_share=vllm_share, host_offload=host_offload, vllm_problem=vllm_problem,
                   memory="host" if cpu else "gpu", backend=backend)


def _vllm_share(profile, arch: Architecture, weights: float, gpu, generation_batch: int, seq: int):
    """(reservation bytes, problem or None, note). vLLM reserves utilisation x TOTAL memory at start and
    refuses to start when that cannot hold the weights, its workspace and one full-length sequence."""
    workspace, kv_token, one_sequence = _vllm_sizes(profile, arch)
    if gpu is None:
        # card unknown: count the least share that holds the whole generation batch at once
        share = weights + workspace + generation_batch * seq * kv_token
        return share, None, "card unknown: vLLM share counted as weights + workspace + one generation batch"
    utilisation = profile.gpu_memory_utilization
    if profile.vllm_standby:
        utilisation = standby_utilisation(gpu.total_gib)
    share = utilisation * gpu.total_gib * GIB
    room = share - weights - workspace
    note = (f"vLLM share {utilisation:g} x {gpu.total_gib:.1f} GiB = {share / GIB:.2f} GiB: weights "
            f"{weights / GIB:.2f}, workspace {workspace / GIB:.2f}, KV cache {max(room, 0) / GIB:.2f} GiB "
            f"(~{max(int(room // kv_token), 0)} tokens)")
    problem = None
    if room < one_sequence:
        need = (weights + workspace + one_sequence) / (gpu.total_gib * GIB)
        fix = (f"gpu_memory_utilization >= {need + 0.005:.2f} would" if need + 0.005 < 0.95 else
               "no utilisation leaves room beside training on this card")
        problem = (f"vLLM share too small: {utilisation:g} x {gpu.total_gib:.1f} GiB = {share / GIB:.2f} GiB < "
                   f"weights {weights / GIB:.2f} + workspace {workspace / GIB:.2f} + KV cache of one "
                   f"{profile.max_seq_length}-token sequence {one_sequence / GIB:.2f}; {fix}")
    return share, problem, note


# ---------------------------------------------------------------------------------------------------
# More than one GPU: accelerate (DDP or DeepSpeed ZeRO) with plain TRL + PEFT, one process per GPU

def zero_model_state_bytes(trainable: int, optim: str, world: int, stage: int, lora: bool,
                           element: int = HALF_BYTES) -> dict[str, float]:
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
        return {"lora": trainable * FULL_BYTES if lora else 0.0,
                "gradients": trainable * grad,
                "gradient_buckets": trainable * grad,
                "optimizer": trainable * optimizer}
    params = trainable * HALF_BYTES
    grads = trainable * HALF_BYTES
    states = trainable * (MASTER_BYTES + optimizer)
    return {"lora": (params / (world if stage >= 3 else 1)) if lora else 0.0,
            "gradients": grads / (world if stage >= 2 else 1),
            "optimizer": states / world}


def layer_params(arch: Architecture) -> int:
    return arch.linear_params // arch.layers + 2 * arch.hidden

def estimate_distributed(profile, arch: Architecture, gpu=None) -> Estimate:
    """Peak memory of ONE training GPU (one process on a cpu profile) of a data-parallel run, and, in
    server mode, of one GPU of the vLLM server (`Estimate.server`)."""
    cpu = profile.device == "cpu"
    backend = "trl"
    element = FULL_BYTES if cpu else HALF_BYTES
    world = profile.num_gpus
    stage = profile.zero_stage
    notes: list[str] = []

    seq = _sequence_tokens(profile)
    rank_generation = profile.effective_batch  # each rank generates batch x accumulation completions
    unit = "process" if cpu else "GPU"
    if world > 1:
        notes.append(f"data-parallel over {world} {unit}s"
                     + (f", DeepSpeed ZeRO stage {stage}" if stage else ", plain DDP") +
                     f": {rank_generation * world} completions per optimizer step ({rank_generation} per {unit})")
    else:
        notes.append(f"one training {unit} (plain TRL + PEFT): {rank_generation} completions per optimizer step")

    weights = weights_bytes(arch, profile.load_in_4bit and not cpu, profile.device)
    comp: dict[str, float] = {"weights": weights / (world if stage == 3 else 1)}
    if stage == 3:
        gathered = HALF_BYTES * (max(ZERO3_MAX_LIVE_ELEMENTS, layer_params(arch), arch.embedding_params)
                                 + ZERO3_PREFETCH_ELEMENTS)
        comp["zero3_gathered"] = min(gathered, weights - comp["weights"])
        notes.append("ZeRO-3: each GPU keeps 1/world of the weights and gathers the layers it runs")
    comp.update(_model_states(profile, arch, comp["weights"], element, notes, world, stage))
    training, _ = _training_pass(profile, arch, element, backend, notes, offload=False)
    comp.update(training)

    vllm_share = None
    vllm_problem = None
    server = None
    if cpu:
        comp.update(_cpu_process(arch, rank_generation, seq))
    else:
        comp["cuda_context"] = CUDA_CONTEXT_GIB * GIB
        if world > 1 or profile.uses_vllm_server:
            # gradient all-reduce between ranks, and the weight broadcast to a vLLM server, go through NCCL
            comp["collective_buffers"] = COLLECTIVE_BUFFERS_GIB * GIB
        vllm_weights = weights_bytes(arch, profile.load_in_4bit, "cuda")
        tp = profile.vllm_tensor_parallel
        if profile.uses_vllm_server:
            server = _server_estimate(profile, arch, vllm_weights, gpu)
            notes.append(f"vLLM server on {profile.vllm_server_gpus} GPU(s) of its own "
                         f"(tensor parallel {tp}, {profile.vllm_server_gpus // tp} cop{'y' if profile.vllm_server_gpus // tp == 1 else 'ies'}); the training GPUs "
                         "hold no vLLM memory")
        elif profile.fast_inference:
            # TRL's colocated engine holds its own 16-bit copy (merged LoRA weights are pushed into it)
            vllm_share, vllm_problem, share_note = _colocated_share(profile, arch, vllm_weights / tp, gpu,
                                                                   rank_generation, seq, tp)
            notes.append(share_note)
            comp["vllm"] = vllm_share
        else:
            comp["generate_kv_cache"] = _generate_kv_cache(arch, rank_generation, seq, HALF_BYTES)

    return _in_gib(comp, notes, vllm_share=vllm_share, vllm_problem=vllm_problem, memory="host" if cpu else "gpu",
                   backend=backend, world_size=world, zero_stage=stage, gpus_needed=profile.gpus_needed,
                   server=server)


def _tp_that_fits(weights: float, workspace: float, one_sequence: float, share: float, limit: int) -> int | None:
    """The least tensor-parallel degree (a power of two up to `limit`) whose slice fits the share."""
    tp = 1
    while tp <= limit:
        if share - weights / tp - workspace >= one_sequence / tp:
            return tp
        tp *= 2
    return None


def _colocated_share(profile, arch: Architecture, weights_slice: float, gpu, generation_batch: int, seq: int,
                     tp: int):
    workspace, kv_token, one_sequence = _vllm_sizes(profile, arch, tp)
    if gpu is None:
        share = weights_slice + workspace + generation_batch * seq * kv_token
        return share, None, "card unknown: colocated vLLM counted as its weights + workspace + one generation batch"
    share = profile.gpu_memory_utilization * gpu.total_gib * GIB
    room = share - weights_slice - workspace
    note = (f"colocated vLLM in each training process: {profile.gpu_memory_utilization:g} x "
            f"{gpu.total_gib:.1f} GiB = {share / GIB:.2f} GiB holding its own weights "
            f"{weights_slice / GIB:.2f} (tensor parallel {tp}), workspace {workspace / GIB:.2f}, KV cache "
            f"{max(room, 0) / GIB:.2f} GiB")
    problem = None
    if room < one_sequence:
        problem = (f"colocated vLLM share too small: {profile.gpu_memory_utilization:g} x {gpu.total_gib:.1f} GiB "
                   f"= {share / GIB:.2f} GiB < its weights {weights_slice / GIB:.2f} + workspace "
                   f"{workspace / GIB:.2f} + KV cache of one {profile.max_seq_length}-token sequence "
                   f"{one_sequence / GIB:.2f}; raise gpu_memory_utilization or vllm_tensor_parallel, or use "
                   "vllm_mode: server")
    return share, problem, note


def _server_estimate(profile, arch: Architecture, weights: float, gpu) -> Estimate:
    """One GPU of `trl vllm-serve`: its share holds 1/tp of the weights, the workspace and the KV cache."""
    tp = profile.vllm_tensor_parallel
    workspace, kv_token, one_sequence = _vllm_sizes(profile, arch, tp)
    comp = {"weights": weights / tp, "vllm_workspace": workspace}
    problem = None
    notes = []
    if gpu is None:
        comp["kv_cache"] = profile.effective_batch * profile.num_gpus * \
            _sequence_tokens(profile) * kv_token
        share = sum(comp.values())
    else:
        share = profile.gpu_memory_utilization * gpu.total_gib * GIB
        comp["kv_cache"] = max(share - weights / tp - workspace, 0.0)
        notes.append(f"vLLM server share {profile.gpu_memory_utilization:g} x {gpu.total_gib:.1f} GiB = "
                     f"{share / GIB:.2f} GiB per server GPU: weights {weights / tp / GIB:.2f} (1/{tp}), "
                     f"KV cache {comp['kv_cache'] / GIB:.2f} GiB (~{int(comp['kv_cache'] // kv_token)} tokens)")
        if share - weights / tp - workspace < one_sequence:
            fit = _tp_that_fits(weights, workspace, profile.max_seq_length * kv_token * tp, share,
                                profile.vllm_server_gpus)
            fix = (f"vllm_tensor_parallel: {fit} would" if fit else
                   "more server GPUs (vllm_server_gpus and vllm_tensor_parallel) would")
            problem = (f"vLLM server GPU too small: {profile.gpu_memory_utilization:g} x {gpu.total_gib:.1f} GiB = "
                       f"{share / GIB:.2f} GiB < weights {weights / tp / GIB:.2f} (1/{tp} of the model) + "
                       f"workspace {workspace / GIB:.2f} + KV cache of one {profile.max_seq_length}-token "
                       f"sequence {one_sequence / GIB:.2f}; {fix}")
    comp["cuda_context"] = CUDA_CONTEXT_GIB * GIB
    if tp > 1:
        comp["collective_buffers"] = COLLECTIVE_BUFFERS_GIB * GIB
    return _in_gib(comp, notes, vllm_share=share, vllm_problem=problem, backend="vllm-server",
                   world_size=profile.vllm_server_gpus, zero_stage=0, gpus_needed=profile.vllm_server_gpus)
