"""HOW a trained adapter answers: loaded through the same backend as training (trainer.backends), answering
greedily, each answer scored by the profile's rewards with the correctness verdict. The `sample` command
chooses what to load and prints the answers."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.errors import UsageError

DEFAULT_FROM_TEST = 3
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass
class Answer:
    question: str
    gold: Any
    completion: str
    scores: dict = field(default_factory=dict)  # reward name -> score, or None when it could not score
    weighted: float = 0.0
    correct: bool | None = False  # None: not judged (the correctness reward did not run)


# ---------------------------------------------------------------------------------------------------
# Loading and answering


def load_trained(profile, adapter_dir: Path, base_path: str):
    """(backend, model, tokenizer, lora_path for vLLM or None) with the trained weights in place; `base_path` is
    the base model the adapter was trained on (a full fine-tune's adapter/ folder is the whole model)."""
    from trainer.backends import generation_path, load_model, open_backend

    try:
        backend = open_backend(profile)
    except RuntimeError as exc:  # e.g. a GPU profile on a machine without one
        raise UsageError(f"sample: {exc}") from None
    if not profile.uses_lora:  # full fine-tuning saved the whole model in adapter/
        model, tokenizer = load_model(backend, profile, str(adapter_dir))
        return backend, model, tokenizer, None
    model, tokenizer = load_model(backend, profile, base_path)
    # As the training load decides (trainer.load.load): whether Unsloth started an engine, not what the profile
    # asked; Unsloth turns fast_inference off by itself on some cards and models.
    if generation_path(profile, backend, model) == "unsloth-vllm":
        return backend, model, tokenizer, str(adapter_dir)  # vLLM takes the adapter as a LoRA request
    if profile.fast_inference and backend.name == "unsloth":
        print(
            "note: no vLLM engine was started (see Unsloth's lines above); answering with transformers", file=sys.stderr
        )
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model, load_file(str(adapter_dir / ADAPTER_WEIGHTS)))
    return backend, model, tokenizer, None


def rows_to_answer(profile, prompt: str | None, from_test: int | None) -> list[dict]:
    if prompt is not None:
        from tasks.prompts import build_prompt

        if not prompt.strip():
            raise UsageError("--prompt: give a question")
        return [{"prompt": build_prompt(prompt, profile.system_prompt), "answer": None}]  # no gold to compare
    from tasks import load_task

    rows = load_task(profile, "test", limit=from_test or DEFAULT_FROM_TEST, seed=profile.seed)
    if not rows:
        raise UsageError(f"sample: dataset {profile.dataset} has no test rows (fix: --prompt TEXT)")
    if from_test is not None and from_test > len(rows):
        print(
            f"note: --from-test {from_test}: the test split holds {len(rows)} rows; answering all of them",
            file=sys.stderr,
        )
    return rows


def score_answers(
    profile,
    rows: list[dict],
    completions: list[str],
    tokenizer,
    rewards: dict | None = None,
    correctness: str | None = "",
) -> list[Answer]:
    """Each completion with every reward's score (None where a reward could not score it: a --prompt row
    has no gold and no other columns), the weighted total and the correctness verdict. `rewards` (name ->
    weight, default the profile's) and `correctness` (default the profile's; None: not judged) are what the
    caller lets run."""
    from evaluation.generate import completion_token_ids
    from evaluation.score import FULL_SCORE, reward_inputs
    from rewards import get_reward, get_reward_funcs
    from rewards.user import scores_now

    rewards = profile.rewards if rewards is None else rewards
    correctness = profile.correctness if correctness == "" else correctness
    funcs, weights = get_reward_funcs(rewards) if rewards else ([], [])
    inputs = reward_inputs(rows, completions, completion_token_ids(tokenizer, completions))
    columns: dict[str, list] = {}
    for fn in funcs:
        try:
            columns[fn.__name__] = list(scores_now(fn, **inputs))
        except Exception as exc:
            print(
                f"note: reward '{fn.__name__}' could not score these answers ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else ''})",
                file=sys.stderr,
            )
            columns[fn.__name__] = [None] * len(rows)
    judged = correctness is not None
    try:
        correct = list(scores_now(get_reward(correctness), **inputs)) if judged else [None] * len(rows)
    except Exception:
        correct = [None] * len(rows)
    answers = []
    for i, (row, completion) in enumerate(zip(rows, completions)):
        scores = {name: values[i] for name, values in columns.items()}
        weighted = sum(w * s for w, s in zip(weights, scores.values()) if s is not None)
        question = row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else str(row["prompt"])
        verdict = (correct[i] is not None and correct[i] >= FULL_SCORE) if judged else None
        answers.append(Answer(question, row.get("answer"), completion, scores, round(weighted, 4), verdict))
    return answers


def answer(
    profile,
    adapter_dir: Path,
    base_path: str,
    rows: list[dict],
    rewards: dict | None = None,
    correctness: str | None = "",
) -> list[Answer]:
    """The trained model's greedy answers to `rows`, scored (score_answers: which rewards run)."""
    backend, model, tokenizer, lora_path = load_trained(profile, adapter_dir, base_path)
    from evaluation.generate import Greedy, generate
    from tasks.prompts import reads_thinking_switch, template_switches

    switches = template_switches(profile.chat_template_kwargs, reads_thinking_switch(tokenizer))
    greedy = Greedy(
        profile.max_completion_length, use_vllm=lora_path is not None, lora_path=lora_path, switches=switches
    )
    completions = generate(model, tokenizer, rows, greedy)
    return score_answers(profile, rows, completions, tokenizer, rewards, correctness)
