"""WHAT an attempt's environment holds, the same on every machine: the contract's variables, the plan's figures
the child reports back beside what it measured (estimate, seconds per step, expected completion length), whether
it stops for a re-plan when its answers are cut, the run's time budget under --hours, and a distributed
attempt's launch settings. Machine 0's supervisor (launcher.run.supervisor) and the machines that follow it
(launcher.run.follow) build it here alike.
"""

from __future__ import annotations

from contract.attempt import attempt_environment
from contract.environment import (
    ENV_ESTIMATE_GIB,
    ENV_EXPECTED_TOKENS,
    ENV_LENGTH_REPLAN,
    ENV_PREDICTED_STEP_S,
    ENV_RUN_BUDGET_S,
    ENV_RUN_DEADLINE,
)
from launcher.run.distributed import launch_env
from profiles.schema import Profile


def attempt_env(
    profile: Profile,
    estimate_gib: float | None,
    base: dict | None = None,
    predicted_step_s: float | None = None,
    expected_tokens: int | None = None,
    replan_lengths: bool = False,
    budget: tuple[float, float] | None = None,
) -> dict:
    """An attempt's environment, the same on every machine: the contract's, the plan's estimate, predicted
    seconds per step and expected completion length (the child reports them back beside what it measured),
    whether it stops for a re-plan when its answers are cut, the run's time budget (deadline, seconds) under
    --hours, and a distributed attempt's settings with its vLLM server's address and ports."""
    env = attempt_environment(profile, base)
    for name in (
        ENV_ESTIMATE_GIB,
        ENV_PREDICTED_STEP_S,
        ENV_EXPECTED_TOKENS,
        ENV_LENGTH_REPLAN,
        ENV_RUN_DEADLINE,
        ENV_RUN_BUDGET_S,
    ):
        env.pop(name, None)  # never a figure left over from elsewhere
    if estimate_gib is not None:
        env[ENV_ESTIMATE_GIB] = repr(float(estimate_gib))
    if predicted_step_s is not None:
        env[ENV_PREDICTED_STEP_S] = repr(float(predicted_step_s))
    if expected_tokens:
        env[ENV_EXPECTED_TOKENS] = str(int(expected_tokens))
    if replan_lengths:
        env[ENV_LENGTH_REPLAN] = "1"
    if budget is not None:
        env[ENV_RUN_DEADLINE], env[ENV_RUN_BUDGET_S] = repr(float(budget[0])), repr(float(budget[1]))
    return launch_env(profile, env)
