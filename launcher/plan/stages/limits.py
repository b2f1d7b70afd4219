"""The model's limits, the stage that adds WHETHER a candidate can run on this machine at all, before its memory is
judged: a GPU for a cuda profile, sequences within the positions its model reads, and vLLM where the card's
precision lets it generate (else transformers, or no run for a vLLM server)."""

from __future__ import annotations

from launcher.card.detect import GpuInfo, bf16_supported
from launcher.plan.candidate import Candidate
from launcher.plan.request import Planning
from profiles.catalog import vllm_refuses

NO_GPU = "needs an NVIDIA GPU and none was found (plan for a card with --gpu-memory GIB, or use a cpu profile)"


def add(candidate: Candidate, planning: Planning) -> Candidate:
    """The candidate settled with why it cannot run here, or as it can run (vLLM off, and why, where the card
    refuses it)."""
    profile = candidate.profile
    if profile.device == "cuda" and planning.gpu is None:
        return settle(candidate, NO_GPU)
    arch = planning.arch(profile.model)
    past = past_positions(profile, arch)
    if past:
        return settle(candidate, past)
    runnable, refusal = without_refused_vllm(profile, arch, planning.gpu)
    if runnable is None:
        return settle(candidate, f"{refusal}: its vLLM server cannot start here")
    candidate.profile, candidate.vllm_off = runnable, refusal
    return candidate


def settle(candidate: Candidate, reason: str) -> Candidate:
    candidate.fits, candidate.reason, candidate.settled = False, reason, True
    return candidate


def without_refused_vllm(profile, arch, gpu: GpuInfo | None):
    """(the profile as it can run on `gpu`, why vLLM is off or None). vLLM refuses float16 for some model
    families, and a card below compute capability 8.0 has nothing else to give it: such a profile generates with
    transformers instead (fast_inference off), and is estimated and run that way. A vLLM server cannot be
    turned into that: (None, why)."""
    if profile.device != "cuda" or not profile.fast_inference or gpu is None:
        return profile, None
    refusal = vllm_refuses(arch, bf16_supported(gpu))
    if refusal is None:
        return profile, None
    if profile.uses_vllm_server:
        return None, refusal
    return profile.replace(fast_inference=False, vllm_standby=False, vllm_tensor_parallel=1), refusal


def past_positions(profile, arch) -> str | None:
    """Why `profile` asks for longer sequences than the positions its model reads (config.json's
    max_position_embeddings), with the fix; None when it stays within them or the model does not say."""
    positions = arch.max_positions
    if not positions:
        return None
    reads = f"the {positions} positions {profile.model} reads (max_position_embeddings)"
    if profile.max_prompt_length >= positions:
        return (
            f"max_prompt_length {profile.max_prompt_length} leaves no room for a completion within {reads} "
            f"(fix: --set max_prompt_length={positions // 2} --set max_completion_length={positions // 2} "
            f"--set max_seq_length={positions})"
        )
    if profile.max_seq_length > positions:
        room = positions - profile.max_prompt_length
        return (
            f"max_seq_length {profile.max_seq_length} is past {reads} (fix: --set max_seq_length={positions} "
            f"--set max_completion_length={min(room, profile.max_completion_length)})"
        )
    return None
