"""HOW MUCH memory one GRPO attempt of a profile needs, by named component (GiB).

The physics of one step (see the README's memory section): base weights counted once (vLLM shares them with
training in Unsloth's fast_inference), LoRA adapters, gradients and optimizer state of what is trained, a
reference copy only for full fine-tuning with beta > 0, the activations kept for the backward pass, the
logits of the GRPO loss, vLLM's reservation (utilisation x the card's total memory) or, without vLLM, the
KV cache of transformers' generate, and the CUDA context. A cpu profile is estimated the same way in host
RAM (fp32, no CUDA context, no vLLM).

Two trainer paths count the training pass differently, as each library runs it:
  "unsloth" (every cuda profile): fused kernels; Unsloth's GRPO loss works one sequence at a time and
      keeps two 16-bit tensors of completion x vocab (its own published accounting: 9.8 GiB at 20K tokens x
      128K vocab);
  "trl" (plain TRL 1.15 + PEFT: multi-GPU profiles; launcher/memory/trl_step.py): transformers' modules
      block by block, TRL's chunked LM head (a tile, never the full logits), torch's bf16 moments and
      foreach step for full fine-tuning, and what never peaks together (peak_overlap, negative). Each term
      is held within 10% of a simulated step (benchmarks/estimator_vs_simulation.md). The CPU path (fp32,
      torch's log-prob fallback) keeps the materialised count: 12 bytes per logit.

Constants and formulas live in launcher/memory/parts.py (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.memory.parts import (  # noqa: F401 - re-exported: other modules import them from here
    COLLECTIVE_BUFFERS_GIB,
    CUDA_CONTEXT_GIB,
    FULL_BYTES,
    GIB,
    HALF_BYTES,
    ZERO3_MAX_LIVE_ELEMENTS,
    ZERO3_PREFETCH_ELEMENTS,
    ZERO_BUCKET_ELEMENTS,
    cpu_process,
    expert_dequant_bytes,
    generate_kv_cache,
    layer_params,
    model_states,
    sequence_tokens,
    standby_utilisation,
    training_pass,
    unsloth_engine,
    unsloth_generate_kv_cache,
    unsloth_trains_in_float32,
    unsloth_vllm_utilisation,
    vllm_sizes,
    vllm_workspace_bytes,
    weights_bytes,
    zero_model_state_bytes,
)
from launcher.memory.trl_step import peak_overlap
from profiles.catalog import Architecture, resolve


def _experts_note(arch: Architecture) -> str:
    return (
        f"mixture of experts: all {arch.experts} experts of {arch.moe_layers} block(s) resident "
        f"({arch.computed_params / 1e9:.1f}B parameters), {arch.experts_per_token} per token "
        f"({arch.active_params / 1e9:.1f}B active)"
    )


@dataclass
class Estimate:
    total_gib: float
    components: dict[str, float]
    notes: list[str] = field(default_factory=list)
    # vLLM's reservation (GiB) and why it cannot start, when it cannot; None without vLLM
    vllm_share_gib: float | None = None
    vllm_problem: str | None = None
    # why a reward model of the profile cannot be placed (its size unknown here); None when there is none or it can
    scorer_problem: str | None = None
    host_offload_gib: float = 0.0  # Unsloth's offloaded activation checkpoints, in host RAM
    memory: str = "gpu"  # "gpu" or "host": where these GiB are needed
    backend: str = "unsloth"
    # Scale-out: the figures above are per training GPU (per process on a cpu profile)
    world_size: int = 1
    zero_stage: int = 0
    gpus_needed: int = 1
    server: Estimate | None = None  # one GPU of the vLLM server (server mode)
    # Unsloth's colocated engine as load_vllm sizes it: max_num_seqs, max_num_batched_tokens, kv_cache_gib,
    # kv_tokens, workspace_gib (None without vLLM or on an unknown card)
    vllm_engine: dict | None = None

    def to_json(self) -> dict:
        out = {
            "total_gib": round(self.total_gib, 3),
            "components": {k: round(v, 3) for k, v in self.components.items()},
            "memory": self.memory,
            "backend": self.backend,
            "vllm_share_gib": None if self.vllm_share_gib is None else round(self.vllm_share_gib, 3),
            "vllm_problem": self.vllm_problem,
            "host_offload_gib": round(self.host_offload_gib, 3),
            "notes": list(self.notes),
            "world_size": self.world_size,
            "zero_stage": self.zero_stage,
            "gpus_needed": self.gpus_needed,
            "per": "process" if self.memory == "host" else "gpu",
        }
        if self.server is not None:
            out["server"] = self.server.to_json()
        if self.vllm_engine is not None:
            out["vllm_engine"] = dict(self.vllm_engine)
        if self.scorer_problem is not None:
            out["scorer_problem"] = self.scorer_problem
        return out


def _in_gib(
    comp: dict[str, float], notes: list[str], vllm_share: float | None = None, host_offload: float = 0.0, **fields
) -> Estimate:
    """The Estimate of components counted in bytes: total and every figure in GiB."""
    total = sum(comp.values())
    return Estimate(
        total_gib=total / GIB,
        components={k: v / GIB for k, v in comp.items()},
        notes=notes,
        vllm_share_gib=None if vllm_share is None else vllm_share / GIB,
        host_offload_gib=host_offload / GIB,
        **fields,
    )


# ---------------------------------------------------------------------------------------------------


def estimate(profile, arch: Architecture | None = None, gpu=None, backend: str | None = None) -> Estimate:
    """Peak memory of one attempt of `profile` on `gpu` (a launcher.card.detect.GpuInfo; None = card unknown)."""
    arch = arch or resolve(profile.model)
    if getattr(profile, "distributed", False):
        return estimate_distributed(profile, arch, gpu)
    cpu = profile.device == "cpu"
    backend = backend or ("trl" if cpu else "unsloth")
    element = FULL_BYTES if cpu else HALF_BYTES
    notes: list[str] = []
    seq = sequence_tokens(profile)
    generation_batch = profile.generation_batch  # generated in one call, for every optimizer step it serves

    weights = weights_bytes(arch, profile.load_in_4bit and not cpu, profile.device)
    comp: dict[str, float] = {"weights": weights}
    if arch.is_moe:
        notes.append(_experts_note(arch))
        if not cpu and expert_dequant_bytes(arch, profile.load_in_4bit):
            comp["expert_dequant"] = expert_dequant_bytes(arch, profile.load_in_4bit)
    comp.update(model_states(profile, arch, weights, element, notes, backend=backend))
    if comp["reference"]:
        notes.append("beta > 0 without LoRA: a second copy of the model serves as reference")
    float32 = backend == "unsloth" and not cpu and unsloth_trains_in_float32(arch, gpu)
    if float32:
        notes.append(
            f"Unsloth trains {arch.family} in float32 on this card (no bfloat16): activations, "
            "checkpoints and logits at 4 bytes"
        )
    training, host_offload = training_pass(
        profile, arch, FULL_BYTES if float32 else element, backend, notes, offload=not cpu
    )
    if float32:
        training["logits"] *= FULL_BYTES / HALF_BYTES  # Unsloth's two logit tensors, float32
    comp.update(training)
    if backend == "trl" and not cpu:
        comp["peak_overlap"] = peak_overlap(comp, arch, profile.uses_lora, profile.gradient_checkpointing != "false")

    vllm_share = None
    vllm_problem = None
    engine = None
    if cpu:
        comp.update(cpu_process(arch, generation_batch, seq))
    else:
        comp["cuda_context"] = CUDA_CONTEXT_GIB * GIB
        if profile.fast_inference:
            vllm_share, vllm_problem, share_note, engine = _vllm_share(
                profile, arch, weights, gpu, generation_batch, seq
            )
            notes.append(share_note)
            # the share holds the (shared) weights; the rest is vLLM's KV cache, graphs and workspace
            comp["vllm_cache"] = max(vllm_share - weights, 0.0)
            if profile.vllm_standby:
                # asleep during training, vLLM lends its KV memory to the backward pass
                lent = comp["activations"] + comp["activation_checkpoints"] + comp["logits"]
                workspace = engine["workspace_gib"] * GIB if engine else vllm_workspace_bytes(arch)
                overlap = min(lent, max(comp["vllm_cache"] - workspace, 0.0))
                comp["standby_reuse"] = -overlap
                notes.append("vLLM standby: training reuses the sleeping KV cache")
        elif backend == "unsloth":
            comp["generate_kv_cache"] = unsloth_generate_kv_cache(
                arch, generation_batch, profile.max_prompt_length, profile.max_completion_length, HALF_BYTES
            )
        else:
            comp["generate_kv_cache"] = generate_kv_cache(arch, generation_batch, seq, HALF_BYTES)

    scorers, scorer_problem = _reward_models(profile, generation_batch, seq, element, notes)
    if scorers:
        comp["reward_model"] = scorers
    out = _in_gib(
        comp,
        notes,
        vllm_share=vllm_share,
        host_offload=host_offload,
        vllm_problem=vllm_problem,
        scorer_problem=scorer_problem,
        memory="host" if cpu else "gpu",
        backend=backend,
    )
    out.vllm_engine = engine
    return out


def _reward_models(profile, completions: int, seq: int, element: int, notes: list[str]) -> tuple[float, str | None]:
    """(bytes, problem) of the reward models the profile's rewards name (launcher.memory.scorers): each loaded
    once in the training process, beside the policy, and run over the step's completions in batches; a model
    whose size cannot be read here is the problem."""
    from launcher.memory.parts import REWARD_SCORE_BATCH, reward_model_gib
    from launcher.memory.scorers import scorers

    total, problem = 0.0, None
    for scorer in scorers(profile):
        if scorer.arch is None:
            problem = scorer.problem
            continue
        weights, activations = reward_model_gib(scorer.arch, completions, seq, element, host=profile.device == "cpu")
        total += (weights + activations) * GIB
        notes.append(
            f"reward model {scorer.name}: weights {weights:.2f} GiB, activations {activations:.2f} GiB scoring "
            f"{min(completions, REWARD_SCORE_BATCH)} completions of {seq} tokens at a time"
        )
    return total, problem


def _vllm_share(profile, arch: Architecture, weights: float, gpu, generation_batch: int, seq: int):
    """(reservation bytes, problem or None, note, engine sizes or None). vLLM reserves utilisation x TOTAL
    memory at start and refuses to start when that cannot hold the weights, its workspace and one full-length
    sequence. Its workspace and sequences at once are sized as unsloth_zoo's load_vllm sizes them."""
    if gpu is None:
        # card unknown: count the least share that holds the whole generation batch at once
        workspace, kv_token, one_sequence = vllm_sizes(profile, arch)
        share = weights + workspace + generation_batch * seq * kv_token
        return share, None, "card unknown: vLLM share counted as weights + workspace + one generation batch", None
    utilisation = profile.gpu_memory_utilization
    if profile.vllm_standby:
        # Unsloth's own tier, of the memory free when vLLM starts (unsloth_vllm_utilisation)
        utilisation = unsloth_vllm_utilisation(utilisation, gpu.total_gib, gpu.free_gib, True)
    share = utilisation * gpu.total_gib * GIB
    seqs, tokens, _budget = unsloth_engine(profile, arch, share)
    workspace, kv_token, one_sequence = vllm_sizes(profile, arch, share_bytes=share)
    room = share - weights - workspace
    kv_tokens = max(int(room // kv_token), 0)
    engine = {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "kv_cache_gib": round(max(room, 0) / GIB, 4),
        "kv_tokens": kv_tokens,
        "workspace_gib": round(workspace / GIB, 4),
    }
    note = (
        f"vLLM share {utilisation:g} x {gpu.total_gib:.1f} GiB = {share / GIB:.2f} GiB: weights "
        f"{weights / GIB:.2f}, workspace {workspace / GIB:.2f} (max_num_seqs {seqs}, prefill {tokens} tokens), "
        f"KV cache {max(room, 0) / GIB:.2f} GiB (~{kv_tokens} tokens)"
    )
    problem = None
    if room < one_sequence:
        need = (weights + workspace + one_sequence) / (gpu.total_gib * GIB)
        fix = (
            f"gpu_memory_utilization >= {need + 0.005:.2f} would"
            if need + 0.005 < 0.95
            else "no utilisation leaves room beside training on this card"
        )
        if profile.vllm_standby:
            fix = "under standby Unsloth sets the share itself; vllm_standby: false lets gpu_memory_utilization choose"
        problem = (
            f"vLLM share too small: {utilisation:g} x {gpu.total_gib:.1f} GiB = {share / GIB:.2f} GiB < "
            f"weights {weights / GIB:.2f} + workspace {workspace / GIB:.2f} + KV cache of one "
            f"{profile.max_seq_length}-token sequence {one_sequence / GIB:.2f}; {fix}"
        )
    return share, problem, note, engine


# ---------------------------------------------------------------------------------------------------
# More than one GPU: accelerate (DDP or DeepSpeed ZeRO) with plain TRL + PEFT, one process per GPU


def estimate_distributed(profile, arch: Architecture, gpu=None) -> Estimate:
    """Peak memory of ONE training GPU (one process on a cpu profile) of a data-parallel run, and, in
    server mode, of one GPU of the vLLM server (`Estimate.server`)."""
    cpu = profile.device == "cpu"
    backend = "trl"
    element = FULL_BYTES if cpu else HALF_BYTES
    world = profile.num_gpus
    stage = profile.zero_stage
    notes: list[str] = []

    seq = sequence_tokens(profile)
    rank_generation = profile.generation_batch  # each rank generates its share of the generation batch
    unit = "process" if cpu else "GPU"
    if world > 1:
        notes.append(
            f"data-parallel over {world} {unit}s"
            + (f", DeepSpeed ZeRO stage {stage}" if stage else ", plain DDP")
            + f": {profile.completions_per_step} completions per optimizer step ({profile.effective_batch} per {unit})"
        )
    else:
        notes.append(
            f"one training {unit} (plain TRL + PEFT): {profile.effective_batch} completions per optimizer step"
        )

    # plain TRL: transformers' bitsandbytes integration leaves a mixture's fused experts in 16-bit
    weights = weights_bytes(arch, profile.load_in_4bit and not cpu, profile.device, experts_quantised=False)
    if arch.is_moe:
        notes.append(
            _experts_note(arch)
            + ("; the experts stay 16-bit under plain TRL's 4-bit loading" if profile.load_in_4bit and not cpu else "")
        )
    comp: dict[str, float] = {"weights": weights / (world if stage == 3 else 1)}
    if stage == 3:
        gathered = HALF_BYTES * (
            max(ZERO3_MAX_LIVE_ELEMENTS, layer_params(arch), arch.embedding_params) + ZERO3_PREFETCH_ELEMENTS
        )
        comp["zero3_gathered"] = min(gathered, weights - comp["weights"])
        notes.append("ZeRO-3: each GPU keeps 1/world of the weights and gathers the layers it runs")
    comp.update(model_states(profile, arch, comp["weights"], element, notes, world, stage, backend))
    training, _ = training_pass(profile, arch, element, backend, notes, offload=False)
    comp.update(training)
    if stage == 0 and not cpu:
        comp["peak_overlap"] = peak_overlap(comp, arch, profile.uses_lora, profile.gradient_checkpointing != "false")

    vllm_share = None
    vllm_problem = None
    server = None
    if cpu:
        comp.update(cpu_process(arch, rank_generation, seq))
    else:
        comp["cuda_context"] = CUDA_CONTEXT_GIB * GIB
        if world > 1 or profile.uses_vllm_server:
            # gradient all-reduce between ranks, and the weight broadcast to a vLLM server, go through NCCL
            comp["collective_buffers"] = COLLECTIVE_BUFFERS_GIB * GIB
        vllm_weights = weights_bytes(arch, profile.load_in_4bit, "cuda")
        tp = profile.vllm_tensor_parallel
        if profile.uses_vllm_server:
            server = _server_estimate(profile, arch, vllm_weights, gpu)
            copies = profile.vllm_server_gpus // tp
            notes.append(
                f"vLLM server on {profile.vllm_server_gpus} GPU(s) of its own "
                f"(tensor parallel {tp}, {copies} cop{'y' if copies == 1 else 'ies'}); the training GPUs "
                "hold no vLLM memory"
            )
        elif profile.fast_inference:
            # TRL's colocated engine holds its own 16-bit copy (merged LoRA weights are pushed into it)
            vllm_share, vllm_problem, share_note = _colocated_share(
                profile, arch, vllm_weights / tp, gpu, rank_generation, seq, tp
            )
            notes.append(share_note)
            comp["vllm"] = vllm_share
        else:
            comp["generate_kv_cache"] = generate_kv_cache(arch, rank_generation, seq, HALF_BYTES)

    scorers, scorer_problem = _reward_models(profile, rank_generation, seq, element, notes)
    if scorers:
        comp["reward_model"] = scorers
    return _in_gib(
        comp,
        notes,
        vllm_share=vllm_share,
        vllm_problem=vllm_problem,
        scorer_problem=scorer_problem,
        memory="host" if cpu else "gpu",
        backend=backend,
        world_size=world,
        zero_stage=stage,
        gpus_needed=profile.gpus_needed,
        server=server,
    )


def _tp_that_fits(weights: float, workspace: float, one_sequence: float, share: float, limit: int) -> int | None:
    """The least tensor-parallel degree (a power of two up to `limit`) whose slice fits the share."""
    tp = 1
    while tp <= limit:
        if share - weights / tp - workspace >= one_sequence / tp:
            return tp
        tp *= 2
    return None


def _colocated_share(profile, arch: Architecture, weights_slice: float, gpu, generation_batch: int, seq: int, tp: int):
    workspace, kv_token, one_sequence = vllm_sizes(profile, arch, tp)
    if gpu is None:
        share = weights_slice + workspace + generation_batch * seq * kv_token
        return share, None, "card unknown: colocated vLLM counted as its weights + workspace + one generation batch"
    share = profile.gpu_memory_utilization * gpu.total_gib * GIB
    room = share - weights_slice - workspace
    note = (
        f"colocated vLLM in each training process: {profile.gpu_memory_utilization:g} x "
        f"{gpu.total_gib:.1f} GiB = {share / GIB:.2f} GiB holding its own weights "
        f"{weights_slice / GIB:.2f} (tensor parallel {tp}), workspace {workspace / GIB:.2f}, KV cache "
        f"{max(room, 0) / GIB:.2f} GiB"
    )
    problem = None
    if room < one_sequence:
        problem = (
            f"colocated vLLM share too small: {profile.gpu_memory_utilization:g} x {gpu.total_gib:.1f} GiB "
            f"= {share / GIB:.2f} GiB < its weights {weights_slice / GIB:.2f} + workspace "
            f"{workspace / GIB:.2f} + KV cache of one {profile.max_seq_length}-token sequence "
            f"{one_sequence / GIB:.2f}; raise gpu_memory_utilization or vllm_tensor_parallel, or use "
            "vllm_mode: server"
        )
    return share, problem, note


def _server_estimate(profile, arch: Architecture, weights: float, gpu) -> Estimate:
    """One GPU of `trl vllm-serve`: its share holds 1/tp of the weights, the workspace and the KV cache."""
    tp = profile.vllm_tensor_parallel
    workspace, kv_token, one_sequence = vllm_sizes(profile, arch, tp)
    comp = {"weights": weights / tp, "vllm_workspace": workspace}
    problem = None
    notes = []
    if gpu is None:
        comp["kv_cache"] = profile.generation_batch * profile.num_gpus * sequence_tokens(profile) * kv_token
        share = sum(comp.values())
    else:
        share = profile.gpu_memory_utilization * gpu.total_gib * GIB
        comp["kv_cache"] = max(share - weights / tp - workspace, 0.0)
        notes.append(
            f"vLLM server share {profile.gpu_memory_utilization:g} x {gpu.total_gib:.1f} GiB = "
            f"{share / GIB:.2f} GiB per server GPU: weights {weights / tp / GIB:.2f} (1/{tp}), "
            f"KV cache {comp['kv_cache'] / GIB:.2f} GiB (~{int(comp['kv_cache'] // kv_token)} tokens)"
        )
        if share - weights / tp - workspace < one_sequence:
            fit = _tp_that_fits(
                weights, workspace, profile.max_seq_length * kv_token * tp, share, profile.vllm_server_gpus
            )
            fix = (
                f"vllm_tensor_parallel: {fit} would"
                if fit
                else "more server GPUs (vllm_server_gpus and vllm_tensor_parallel) would"
            )
            problem = (
                f"vLLM server GPU too small: {profile.gpu_memory_utilization:g} x {gpu.total_gib:.1f} GiB = "
                f"{share / GIB:.2f} GiB < weights {weights / tp / GIB:.2f} (1/{tp} of the model) + "
                f"workspace {workspace / GIB:.2f} + KV cache of one {profile.max_seq_length}-token "
                f"sequence {one_sequence / GIB:.2f}; {fix}"
            )
    comp["cuda_context"] = CUDA_CONTEXT_GIB * GIB
    if tp > 1:
        comp["collective_buffers"] = COLLECTIVE_BUFFERS_GIB * GIB
    return _in_gib(
        comp,
        notes,
        vllm_share=share,
        vllm_problem=problem,
        backend="vllm-server",
        world_size=profile.vllm_server_gpus,
        zero_stage=0,
        gpus_needed=profile.vllm_server_gpus,
    )
