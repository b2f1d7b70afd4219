"""WHAT a profile means to learn, given memory enough: its ambition (the generations, the completion cap the
task needs, the LoRA rank, 16-bit weights) and the keys the user pinned, from which the fit solver gives up
only what the card makes it."""

from __future__ import annotations

from dataclasses import dataclass

from launcher.plan.completion_lengths import CompletionPlan, completion_plan
from launcher.plan.levers import GENERATIONS_AMBITION, pinned_prompts
from profiles.catalog import Architecture, resolve


@dataclass(frozen=True)
class Ambition:
    """What a configuration would learn with given enough memory, and the keys the user pinned."""

    generations: int
    prompts_per_step: int  # the least prompts per step (a pinned or held one: the only one)
    completion: int  # the cap the task needs, or the pinned cap
    prompt: int
    rank: int
    sixteen_bit: bool
    checkpointing: str
    batch: int
    standby: bool
    source: str  # the rung it comes from
    pinned: frozenset = frozenset()
    expected: int = 0  # tokens a completion is expected to run (0: the task's)
    basis: str = ""  # where the cap and the expected length come from

    def text(self) -> str:
        weights = "16-bit" if self.sixteen_bit else "4-bit"
        return (
            f"{self.generations} generations of up to {self.completion} tokens, LoRA {self.rank}, {weights} "
            f"(from {self.source})"
        )


def ambition_of(
    profile,
    pinned=(),
    source: str | None = None,
    arch: Architecture | None = None,
    lengths: CompletionPlan | None = None,
    measurements=None,
) -> Ambition:
    """A profile's intent as an ambition: generations 8 (or pinned), the cap the task needs (or pinned; measured
    where the ledger has the answers' lengths), its LoRA rank, 16-bit weights unless load_in_4bit is pinned; the
    throughput levers are the solver's."""
    pinned = frozenset(pinned)
    arch = arch or resolve(profile.model)
    if lengths is None:
        lengths = completion_plan(profile, arch, pinned, measurements)
    generations = profile.num_generations if "num_generations" in pinned else GENERATIONS_AMBITION
    sixteen = True if "load_in_4bit" not in pinned else not profile.load_in_4bit
    prompts = pinned_prompts(profile, pinned)
    completion = lengths.cap
    if arch.max_positions:  # never past the positions the model reads: what the prompt leaves, at most
        completion = max(0, min(completion, arch.max_positions - profile.max_prompt_length))
    return Ambition(
        generations=generations,
        prompts_per_step=prompts or 1,
        completion=completion,
        prompt=profile.max_prompt_length,
        rank=profile.lora_rank,
        sixteen_bit=sixteen or profile.lora_rank == 0,
        checkpointing=profile.gradient_checkpointing,
        batch=profile.per_device_train_batch_size,
        standby=profile.vllm_standby,
        source=source or profile.name,
        pinned=pinned,
        expected=lengths.expected,
        basis=lengths.basis,
    )
