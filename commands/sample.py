"""`sample RUN_DIR_OR_ADAPTER [--prompt TEXT | --from-test N]`: a quick look at the trained model. Loads the
adapter a run folder's last finished attempt saved (or an attempt folder, or an adapter folder), answers greedily,
and prints each answer with the profile's reward scores and the correctness verdict.

The profile comes from the attempt folder (profile.yaml as the supervisor wrote it, else summary.json), so
the rewards, prompts and lengths are the ones trained with; `--set KEY=VALUE` overrides it as for training.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from contract import attempt as contract
from contract.errors import UsageError

ADAPTER_WEIGHTS = "adapter_model.safetensors"

SUMMARY = "answers of a trained model, with every reward's score"
EXAMPLES = ("python train.py sample outputs/latest", "python train.py sample outputs/run-... --prompt 'What is 7 + 5?'")


def add_arguments(parser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR_OR_ADAPTER",
                        help="a run folder (its final attempt), outputs/latest, one of its attempt folders or "
                             "RUN/final, or an adapter")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--prompt", metavar="TEXT", help="answer this question")
    what.add_argument("--from-test", metavar="N", type=int, default=None,
                      help="answer the first N test questions (default 3)")
    from commands.options import add_set

    add_set(parser)


def run(args) -> int:
    return sample_main(args.run_dir, prompt=args.prompt, from_test=args.from_test, overrides=args.overrides)


@dataclass
class Target:
    attempt_dir: Path
    adapter_dir: Path


def _finished(attempt_dir: Path) -> bool:
    outcome = contract.Outcome.read(attempt_dir / contract.OUTCOME_FILE)
    return outcome is not None and outcome.status == contract.OK and (attempt_dir / contract.ADAPTER_DIR).is_dir()


def find_target(given: str | Path) -> Target:
    """The attempt folder and adapter for an adapter folder, an attempt folder, or a run folder (its last
    attempt that finished ok)."""
    from launcher.run.folder import FINAL, follow, stable_target

    path = stable_target(Path(given).expanduser())  # outputs/latest, RUN/final: the folders they name
    if not path.is_dir():
        raise UsageError(f"--sample {given}: no such folder (fix: give a run folder outputs/run-..., one of its "
                         "attempt-* folders, or an adapter/ folder)")
    if (path / "adapter_config.json").is_file() or (path / ADAPTER_WEIGHTS).is_file():
        return Target(path.parent, path)
    if (path / contract.ADAPTER_DIR).is_dir():
        return Target(path, path / contract.ADAPTER_DIR)
    final = follow(path / FINAL)  # the run's result, as the supervisor marked it
    if final is not None and _finished(final):
        return Target(final, final / contract.ADAPTER_DIR)
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
    from profiles.load import load_profile, parse_overrides, profile_from_dict

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


def sample(given: str | Path, prompt: str | None = None, from_test: int | None = None,
           overrides: list[str] | None = None):
    """(profile, what was loaded, the answers)."""
    if prompt is not None and from_test is not None:
        raise UsageError("--sample: give --prompt TEXT or --from-test N, not both")
    if from_test is not None and from_test < 1:
        raise UsageError(f"--from-test {from_test}: give a number of test questions >= 1")
    target = find_target(given)
    profile = profile_of(target, overrides or [])
    from tiny_model.source import base_model_path
    from trainer.sample import answer, rows_to_answer

    rows = rows_to_answer(profile, prompt, from_test)
    base = profile.model if not profile.uses_lora else base_model_path(profile, target.adapter_dir)
    return profile, target, answer(profile, target.adapter_dir, base, rows)


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
