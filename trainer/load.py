"""WHAT an attempt loads before it trains, the first of trainer.stages: the backend (opened first: the import
order is the one trainer.backends states), the model and tokenizer, the training and test rows that fit
max_prompt_length, the profile's tools and environment (imported, guarded, and the environment started once),
the chat template's switches every prompt is rendered with, and which engine generates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from contract.errors import UsageError
from trainer.state import AttemptState, say

if TYPE_CHECKING:  # the rewards load with the user's code, inside the load stage
    from rewards import RewardFn


@dataclass
class Loaded:
    """What the load stage gives the others."""

    backend: Any
    model: Any
    tokenizer: Any
    train_rows: list
    dropped: int
    eval_rows: list
    unsloth_vllm: bool  # Unsloth's own vLLM engine generates (single GPU)
    use_vllm: bool  # generation goes through vLLM at all (Unsloth's, or TRL's under accelerate)
    correctness: RewardFn | None = None  # the reward that judges an answer correct in evaluation (profile.correctness)
    generation: str = "transformers"  # trainer.backends.generation_path: which engine generated
    tools: list | None = None  # the profile's tools, imported and guarded (tools.load_tools)
    environment: Callable[[], Any] | None = (
        None  # the profile's environment as a guarded factory (tools.load_environment)
    )
    # the chat template's switches every prompt is rendered with (tasks.prompts.template_switches)
    switches: dict = field(default_factory=dict)


def load(state: AttemptState) -> Loaded:
    """The backend, the model and tokenizer, and the training and test rows that fit max_prompt_length."""
    profile = state.profile
    from trainer.backends import load_model, open_backend

    backend = open_backend(profile)  # first: see trainer.backends for the import order
    from tasks import load_task
    from tasks.prompts import filter_by_length
    from trainer.memory_meter import MemoryMeter

    state.memory = MemoryMeter(backend.device)
    train_rows = load_task(profile, "train", limit=profile.train_samples, seed=profile.seed)
    eval_rows = (
        load_task(profile, "test", limit=profile.eval_samples, seed=profile.seed)
        if profile.eval_samples and state.main
        else []
    )
    from rewards import get_reward
    from rewards import user as user_rewards

    if state.main:  # a process ended inside the user's reward is then named (contract.REWARD_RUNNING_FILE)
        user_rewards.attach(state.attempt_dir, say)
    correctness = get_reward(profile.correctness)  # the user's own reward is imported here, in the attempt
    if train_rows:  # its arguments against the data's columns, before the model loads
        user_rewards.check_columns(correctness, train_rows[0])
    offered, environment = load_tools(state, train_rows)
    model_path, state.model_built = state.resolve_model(profile)
    if state.main:
        say(
            f"attempt '{profile.name}': {backend.name} on {backend.gpu_name or 'CPU'}, model {profile.model}, "
            f"estimate {'n/a' if state.estimate_gib is None else f'{state.estimate_gib:.2f}'} GiB"
        )
    model, tokenizer = load_model(backend, profile, model_path)
    from tasks.prompts import reads_thinking_switch, template_switches

    switches = template_switches(profile.chat_template_kwargs, reads_thinking_switch(tokenizer))
    state.switches = switches
    if state.main and switches:
        say(f"chat template switches: {', '.join(f'{k}={v!r}' for k, v in switches.items())}")
    rendered = offered_tools(offered, environment)  # TRL renders them into every prompt
    kept, dropped = filter_by_length(train_rows, tokenizer, profile.max_prompt_length, switches, rendered)
    if not kept:
        raise UsageError(
            f"dataset '{profile.dataset}': every prompt is longer than max_prompt_length "
            f"({profile.max_prompt_length} tokens) (fix: raise max_prompt_length)"
        )
    # test prompts obey the same limit: prompt + completion must fit max_seq_length (vLLM's max_model_len)
    eval_rows, eval_dropped = filter_by_length(eval_rows, tokenizer, profile.max_prompt_length, switches, rendered)
    if state.main:
        say(
            f"dataset {profile.dataset}: {len(kept)} training prompts ({dropped} dropped as longer than "
            f"max_prompt_length {profile.max_prompt_length}), {len(eval_rows)} test prompts "
            f"({eval_dropped} dropped)"
        )
    # What Unsloth loaded decides, not the profile: it may have turned fast_inference off by itself.
    from trainer.backends import generation_path

    generation = generation_path(profile, backend, model)
    unsloth_vllm, use_vllm = generation == "unsloth-vllm", generation != "transformers"
    if backend.name == "unsloth" and profile.fast_inference and not unsloth_vllm and state.main:
        say(
            "note: no vLLM engine was started (see Unsloth's lines above); completions are generated with "
            "transformers, slower, and the KV cache lives beside training instead of in vLLM's share"
        )
    return Loaded(
        backend,
        model,
        tokenizer,
        kept,
        dropped,
        eval_rows,
        unsloth_vllm,
        use_vllm,
        correctness,
        generation,
        tools=offered,
        environment=environment,
        switches=switches,
    )


def offered_tools(tools: list, environment) -> list:
    """What TRL offers the model in a prompt: the tools and, with an environment, its methods."""
    if environment is None:
        return list(tools)
    from tools import tool_methods

    return list(tools) + tool_methods(environment())


# Training rows an environment is reset with before the model loads: one that cannot start is found in seconds
ENVIRONMENT_CHECK_ROWS = 8


def load_tools(state: AttemptState, rows: list) -> tuple[list, Any]:
    """The profile's tools and environment, imported (the user's code runs from here on) and guarded, and the
    environment reset with the first training rows: one that cannot start ends the attempt before the model
    loads (usercode.failure.UserCodeError names its line)."""
    profile = state.profile
    if not profile.tools and not profile.environment:
        return [], None
    from tools import check_environment_starts, guard, load_environment, load_tools

    if state.main:
        guard.attach(say)
    offered = load_tools(profile.tools)
    environment = load_environment(profile.environment)
    check_environment_starts(environment, rows[:ENVIRONMENT_CHECK_ROWS])
    if state.main:
        names = [t.__name__ for t in offered] + ([f"environment {environment.__name__}"] if environment else [])
        say(f"tools: {', '.join(names)}; at most {profile.max_tool_calls} tool-calling turns a completion")
    return offered, environment
