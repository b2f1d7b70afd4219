"""summary.json of one attempt: what ran where, for how long, with what memory against the estimate, and
what it learned (rewards first and last, accuracy before and after, and how the model was built when the
project built it)."""

from __future__ import annotations

import platform
import time

from contract import attempt as contract
from trainer.state import AttemptState


def build_summary(
    state: AttemptState, backend, rows, reward_names, before, after, train_seconds, train_rows, dropped, status
) -> dict:
    """summary.json: what ran where, for how long, with what memory against the estimate, and the result."""
    import torch

    from trainer.report import reward_figures, scored_examples, signal_figures
    from trainer.timing import measured_step

    profile = state.profile
    memory = state.memory.summary()
    peak = memory["peak_gib"]
    estimate = state.estimate_gib
    if backend.device == "cuda":
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / (1 << 30)
        device = {
            "name": backend.gpu_name,
            "total_gib": round(total, 2),
            "compute_capability": list(backend.compute_capability or ()),
            "bf16": backend.bf16,
        }
        measure = memory.get("measure")
    else:
        device = {
            "name": f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)",
            "total_gib": None,
            "compute_capability": None,
            "bf16": False,
            # the vector unit torch's kernels ran on (AVX512, AVX2, DEFAULT): they round differently
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        }
        measure = "process peak RSS"
    return {
        "status": status,
        "profile": profile.to_dict(),
        "backend": backend.name,
        "device": device,
        "steps": state.steps,
        "max_steps": profile.max_steps,
        "stopped_by": getattr(state, "stopped_by", None),
        "resumed_from": contract.relative_path(state.resume_from, state.attempt_dir),
        "train_seconds": round(train_seconds, 2),
        "wall_seconds": round(time.time() - state.started, 2),
        "phases": dict(getattr(state, "phases", {})),
        "train_rows": train_rows,
        "dropped_prompts": dropped,
        "memory": {
            **memory,
            "estimate_gib": estimate,
            "measure": measure,
            "ratio": round(peak / estimate, 3) if estimate else None,
        },
        # seconds per optimizer step, measured (steady state) beside the plan's prediction
        "speed": measured_step(rows, state.predicted_step_s),
        "rewards": reward_figures(rows, reward_names),
        "group_signal": signal_figures(rows),
        "accuracy": {
            "correctness": profile.correctness,
            "samples": before["total"],
            "before": before["accuracy"],
            "after": after["accuracy"],
            "correct_before": before["correct"],
            "correct_after": after["correct"],
            "well_formed_before": before.get("well_formed"),
            "well_formed_after": after.get("well_formed"),
            "examples_before": scored_examples(before["examples"], _text_rewards(profile)),
            "examples_after": scored_examples(after["examples"], _text_rewards(profile)),
        },
        "warm_start": state.model_built,
        "checkpoint": contract.relative_path(state.latest_checkpoint(), state.attempt_dir),
        "probe": state.probe,
    }


def _text_rewards(profile) -> dict:
    """The rewards a sample answer's text can be scored by alone: with tools or an environment, the shipped
    ones only (the user's may read the rollout's messages or its environment, which a text does not hold)."""
    if not (getattr(profile, "tools", None) or getattr(profile, "environment", "")):
        return profile.rewards
    return {name: weight for name, weight in profile.rewards.items() if ":" not in name}
