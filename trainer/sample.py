"""`python train.py --sample RUN_DIR_OR_ADAPTER [--prompt TEXT | --from-test N]`: a quick look at the trained
model. Loads the adapter through the same backend as training (trainer.backends), answers greedily, and
prints each answer with the profile's reward scores and the correctness verdict.

The profile comes from the attempt folder (profile.yaml as the supervisor wrote it, else summary.json), so
the rewards, prompts and lengths are the ones trained with; `--set KEY=VALUE` overrides it as for training.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract import attempt as contract
from contract.errors import UsageError

DEFAULT_FROM_TEST = 3
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass
class Target:
    attempt_dir: Path
    adapter_dir: Path


@dataclass
class Answer:
    question: str
    gold: Any
    completion: str
    scores: dict = field(default_factory=dict)  # reward name -> score, or None when it could not score
    weighted: float = 0.0
    correct: bool = False


# ---------------------------------------------------------------------------------------------------
# What to load


def _finished(attempt_dir: Path) -> bool:
    outcome = contract.Outcome.read(attempt_dir / contract.OUTCOME_FILE)
    return outcome is not None and outcome.status == contract.OK and (attempt_dir / contract.ADAPTER_DIR).is_dir()


def find_target(given: str | Path) -> Target:
    """The attempt folder and adapter for an adapter folder, an attempt folder, or a run folder (its last
    attempt that finished ok)."""
    path = Path(given).expanduser()
    if not path.is_dir():
        raise UsageError(f"--sample {given}: no such folder (fix: give a run folder outputs/run-..., one of its "
                         "attempt-* folders, or an adapter/ folder)")
    if (path / "adapter_config.json").is_file() or (path / ADAPTER_WEIGHTS).is_file():
        return Target(path.parent, path)
    if (path / contract.ADAPTER_DIR).is_dir():
        return Target(path, path / contract.ADAPTER_DIR)
    from launcher.run.attempts import read_attempts

    named = [path / Path(r.get("attempt_dir", "")).name for r in read_attempts(path) if r.get("status") == contract.OK]
    candidates = [d for d in named if d.is_dir()] or sorted(path.glob("attempt-*"))
    finished = [d for d in candidates if _finished(d)]
    if not finished:
        raise UsageError(f"--sample {given}: no attempt there finished with an adapter (fix: train to the end, "
                         "or give an attempt's adapter/ folder)")
    return Target(finished[-1], finished[-1] / contract.ADAPTER_DIR)


def profile_of(target: Target, overrides: list[str]):
    """The profile the adapter was trained with, with --set overrides applied."""
    from launcher.profile.load import load_profile, parse_overrides, profile_from_dict

    profile_file = target.attempt_dir / contract.PROFILE_FILE
    if profile_file.is_file():
        return load_profile(profile_file, overrides)
    summary_file = target.attempt_dir / contract.SUMMARY_FILE
    try:
        data = json.loads(summary_file.read_text(encoding="utf-8"))["profile"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"--sample: {target.attempt_dir} holds neither {contract.PROFILE_FILE} nor a readable "
                         f"{contract.SUMMARY_FILE} (fix: give the attempt folder the adapter was saved in)") from None
    return profile_from_dict({**data, **parse_overrides(overrides)}, str(summary_file))


def _base_model(profile, adapter_dir: Path) -> str:
    """The base the adapter was trained on: the folder its config names when it is still there (the tiny
    model's cache), else the profile's model (the tiny model is rebuilt from the same data and seed)."""
    try:
        named = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
        base = named.get("base_model_name_or_path")
    except (OSError, ValueError):
        base = None
    if base and Path(base).is_dir():
        return base
    from trainer.model_source import TINY, resolve_model

    if profile.model == TINY:
        from tasks import load_task

        load_task(profile, "train", limit=1)  # the tiny tokenizer reads the data with the profile's columns
    return resolve_model(profile).path


# ---------------------------------------------------------------------------------------------------
# Loading and answering


def load_trained(profile, adapter_dir: Path):
    """(backend, model, tokenizer, lora_path for vLLM or None) with the trained weights in place."""
    from trainer.backends import load_model, open_backend

    try:
        backend = open_backend(profile)
    except RuntimeError as exc:  # e.g. a GPU profile on a machine without one
        raise UsageError(f"--sample: {exc}") from None
    if not profile.uses_lora:  # full fine-tuning saved the whole model in adapter/
        model, tokenizer = load_model(backend, profile, str(adapter_dir))
        return backend, model, tokenizer, None
    model, tokenizer = load_model(backend, profile, _base_model(profile, adapter_dir))
    if profile.fast_inference and backend.name == "unsloth":
        return backend, model, tokenizer, str(adapter_dir)  # vLLM takes the adapter as a LoRA request
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
        raise UsageError(f"--sample: dataset {profile.dataset} has no test rows (fix: --prompt TEXT)")
    if from_test is not None and from_test > len(rows):
        print(f"note: --from-test {from_test}: the test split holds {len(rows)} rows; answering all of them",
              file=sys.stderr)
    return rows


def score_answers(profile, rows: list[dict], completions: list[str], tokenizer) -> list[Answer]:
    """Each completion with every reward's score (None where a reward could not score it: a --prompt row
    has no gold and no other columns), the weighted total and the correctness verdict."""
    from rewards import get_reward, get_reward_funcs
    from trainer.evaluate import FULL_SCORE, completion_token_ids, reward_inputs

    funcs, weights = get_reward_funcs(profile.rewards)
    inputs = reward_inputs(rows, completions, completion_token_ids(tokenizer, completions))
    columns: dict[str, list] = {}
    for fn in funcs:
        try:
            columns[fn.__name__] = list(fn(**inputs))
        except Exception as exc:
            print(f"note: reward '{fn.__name__}' could not score these answers ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''})", file=sys.stderr)
            columns[fn.__name__] = [None] * len(rows)
    try:
        correct = list(get_reward(profile.correctness)(**inputs))
    except Exception:
        correct = [None] * len(rows)
    answers = []
    for i, (row, completion) in enumerate(zip(rows, completions)):
        scores = {name: values[i] for name, values in columns.items()}
        weighted = sum(w * s for w, s in zip(weights, scores.values()) if s is not None)
        question = row["prompt"][-1]["content"] if isinstance(row["prompt"], list) else str(row["prompt"])
        answers.append(Answer(question, row.get("answer"), completion, scores, round(weighted, 4),
                              correct[i] is not None and correct[i] >= FULL_SCORE))
    return answers


def sample(given: str | Path, prompt: str | None = None, from_test: int | None = None,
           overrides: list[str] | None = None) -> tuple[Any, Target, list[Answer]]:
    """(profile, what was loaded, the answers) for --sample."""
    if prompt is not None and from_test is not None:
        raise UsageError("--sample: give --prompt TEXT or --from-test N, not both")
    if from_test is not None and from_test < 1:
        raise UsageError(f"--from-test {from_test}: give a number of test questions >= 1")
    target = find_target(given)
    profile = profile_of(target, overrides or [])
    rows = rows_to_answer(profile, prompt, from_test)
    backend, model, tokenizer, lora_path = load_trained(profile, target.adapter_dir)
    from trainer.evaluate import generate

    completions = generate(model, tokenizer, rows, max_new_tokens=profile.max_completion_length,
                           use_vllm=lora_path is not None, lora_path=lora_path)
    return profile, target, score_answers(profile, rows, completions, tokenizer)


def _shown(score) -> str:
    return "n/a" if score is None else f"{score:.2f}"


def sample_main(given: str, prompt: str | None = None, from_test: int | None = None,
                overrides: list[str] | None = None) -> int:
    profile, target, answers = sample(given, prompt, from_test, overrides)
    print(f"adapter {target.adapter_dir} (profile '{profile.name}', model {profile.model}, dataset "
          f"{profile.dataset})")
    for number, answer in enumerate(answers, 1):
        print(f"\n[{number}] question: {answer.question}")
        if answer.gold is not None:
            print(f"    gold: {answer.gold}")
        print("    answer: " + answer.completion.replace("\n", "\n            "))
        rewards = " | ".join(f"{name} {_shown(score)}" for name, score in answer.scores.items())
        verdict = f"correct ({profile.correctness})" if answer.correct else f"not correct ({profile.correctness})"
        print(f"    rewards: {rewards} | weighted {answer.weighted:.2f} | {verdict}")
    return 0
