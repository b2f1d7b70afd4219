"""`sample RUN_DIR_OR_ADAPTER [--prompt TEXT | --from-test N]`: a quick look at the trained model. Loads the
adapter a run folder's last finished attempt saved (or an attempt folder, or an adapter folder), answers greedily,
and prints each answer with the profile's reward scores and the correctness verdict. `--best` loads the model of the
attempt's best held-out evaluation during training (its best-adapter/) instead of the final one.

The profile comes from the attempt folder (profile.yaml as the supervisor wrote it, else summary.json), so
the rewards, prompts and lengths are the ones trained with; `--set KEY=VALUE` overrides it as for training.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from contract import attempt as contract
from contract.errors import ProfileError, UsageError

if TYPE_CHECKING:  # profiles loads only when a command reads one
    from profiles.schema import Profile

ADAPTER_WEIGHTS = "adapter_model.safetensors"

SUMMARY = "answers of a trained model, with every reward's score"
EXAMPLES = (
    "python train.py sample outputs/latest",
    "python train.py sample outputs/latest --best",
    "python train.py sample outputs/run-... --prompt 'What is 7 + 5?'",
)


def add_arguments(parser) -> None:
    parser.add_argument(
        "run_dir",
        metavar="RUN_DIR_OR_ADAPTER",
        help="a run folder (its final attempt), outputs/latest, one of its attempt folders or RUN/final, or an adapter",
    )
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--prompt", metavar="TEXT", help="answer this question")
    what.add_argument(
        "--from-test", metavar="N", type=int, default=None, help="answer the first N test questions (default 3)"
    )
    add_best(parser)
    parser.add_argument(
        "--run-rewards",
        action="store_true",
        help="also import and run the reward files the run's profile names (Python from the run "
        "folder: only for a run you trust); without it those rewards are left out",
    )
    from commands.options import add_set

    add_set(parser)


def add_best(parser) -> None:
    """--best, for sample and export alike."""
    parser.add_argument(
        "--best",
        action="store_true",
        help=f"the model of the best held-out evaluation during training (the attempt's {contract.BEST_ADAPTER_DIR}/) "
        f"instead of the final one ({contract.ADAPTER_DIR}/); the final one where it scored as well",
    )


def run(args) -> int:
    return sample_main(
        args.run_dir,
        prompt=args.prompt,
        from_test=args.from_test,
        overrides=args.overrides,
        run_rewards=args.run_rewards,
        best=args.best,
    )


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
        raise UsageError(
            f"{given}: no such folder (fix: give a run folder outputs/run-..., one of its "
            "attempt-* folders, or an adapter/ folder)"
        )
    if any((path / name).is_file() for name in ("adapter_config.json", ADAPTER_WEIGHTS, contract.BEST_MARKER)):
        return Target(path.parent, path)  # best.json: a best-adapter/, a whole model at lora_rank 0
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
        raise UsageError(f"{given}: no attempt there finished with an adapter{_elsewhere(path)}")
    return Target(finished[-1], finished[-1] / contract.ADAPTER_DIR)


def best_of(target: Target, say) -> Target:
    """--best: the attempt's best-adapter/ (the model of its best held-out evaluation during training); the
    final adapter, said through `say`, where the run's summary names it the best (it scored at least as well,
    and best-adapter/ was removed). UsageError, saying why none was kept, otherwise."""
    from trainer.best_model import read_kept

    attempt_dir = target.attempt_dir
    folder = attempt_dir / contract.BEST_ADAPTER_DIR
    if target.adapter_dir.name == contract.BEST_ADAPTER_DIR or read_kept(folder) is not None:
        return Target(attempt_dir, folder)
    try:
        evaluation = json.loads((attempt_dir / contract.SUMMARY_FILE).read_text(encoding="utf-8"))["evaluation"]
        best = evaluation.get("best") or {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        evaluation, best = None, {}
    final = attempt_dir / contract.ADAPTER_DIR
    if best.get("saved_in") == contract.ADAPTER_DIR and final.is_dir():
        say(
            f"note: --best: the final model is the best of {attempt_dir.name} (accuracy {best.get('accuracy')} at "
            f"step {best.get('step')}; no evaluation during training scored higher): using {final}"
        )
        return Target(attempt_dir, final)
    fix = f"drop --best for the final model in {final}"
    if best.get("step") == 0 and best.get("accuracy") is not None:
        why = (
            f"its best held-out accuracy ({best['accuracy']}) was before training: no trained model scored higher, "
            "so none was kept"
        )
    elif folder.exists():
        why = f"{folder.name}/ is not whole (no {contract.BEST_MARKER}, or a file it lists is missing)"
    elif evaluation is not None and not evaluation.get("every"):
        why = "it evaluated nothing during training"
        fix += ", or train with evaluations during it (--set eval_steps=N, with eval_samples above 0)"
    else:
        why = "no evaluation during training has beaten the ones before it"
    raise UsageError(f"--best: {attempt_dir} holds no {contract.BEST_ADAPTER_DIR}/: {why} (fix: {fix})")


def _elsewhere(run_dir: Path) -> str:
    """Why a run folder has no result yet (a supervisor still trains it) and the newest run beside it that
    has one, as the end of a refusal with its fix."""
    from launcher.run.folder import RunLock

    if not run_dir.name.startswith("run-"):
        return " (fix: train to the end, or give an attempt's adapter/ folder)"
    training = RunLock(run_dir).live_owner()
    why = f" yet: it is still training (process {training})" if training is not None else ""
    finished_runs = sorted(
        (
            run
            for run in run_dir.parent.glob("run-*")
            if run != run_dir and run.is_dir() and any(_finished(d) for d in run.glob("attempt-*"))
        ),
        key=lambda run: (run.stat().st_mtime, run.name),
    )
    if finished_runs:
        from contract.shell import quoted

        return f"{why} (fix: the newest finished run is {finished_runs[-1]}: give {quoted(finished_runs[-1])})"
    return f"{why} (fix: train to the end, or give an attempt's adapter/ folder)"


@dataclass
class Sampling:
    """What a sampled folder will be scored with: the profile, the rewards that run (name -> weight), the
    user's reward entries left out (their code is not run), and whether the correctness reward runs."""

    profile: Profile
    rewards: dict[str, float]
    left_out: list[str]
    correctness_runs: bool = True


def _without_folder_code(data: dict, changes: dict, run_rewards: bool, where: str) -> tuple[dict, list[str], bool]:
    """The folder's profile data with the reward entries that are Python code (file.py:function,
    package.module:function) taken out, unless asked to run them; what the user sets with --set is the user's
    own choice and kept. (data, the entries left out, whether correctness was one of them)."""
    from usercode.entry import is_user_code

    left_out: list[str] = []
    correctness_left = False
    data = _without_tool_code(data, changes)
    if run_rewards:
        return data, left_out, correctness_left
    data = dict(data)
    rewards = data.get("rewards")
    if "rewards" not in changes and isinstance(rewards, dict):
        left_out = [str(name) for name in rewards if is_user_code(str(name))]
        if left_out:
            # the profile needs a reward to be valid; the stand-in is never scored (Sampling.rewards)
            data["rewards"] = {k: v for k, v in rewards.items() if not is_user_code(str(k))} or {"accuracy": 1.0}
    correctness = data.get("correctness")
    if "correctness" not in changes and isinstance(correctness, str) and is_user_code(correctness):
        left_out.append(correctness)
        correctness_left = True
        data["correctness"] = "accuracy"
    if data.get("trust_remote_code") is True and "trust_remote_code" not in changes:
        model = data.get("model", "the model")
        raise UsageError(
            f"{where}: the run's profile sets trust_remote_code: true, so loading {model} would "
            f"run the Python files that come with it (fix: --set trust_remote_code=true if you trust "
            f"{model}'s code, or --set trust_remote_code=false to load it without)"
        )
    return data, left_out, correctness_left


def _without_tool_code(data: dict, changes: dict) -> dict:
    """The folder's profile data without the tools and environment that are Python code (sample and export
    answer in one turn and call no tool, and the run folder's code is never imported): the shipped ones stay,
    and where only code was named the shipped calculator stands in, never called, so that the model resolves to
    the one trained (the tiny model's tool-calling build)."""
    from tools import SHIPPED_ENVIRONMENTS, SHIPPED_TOOLS

    data = dict(data)
    named = False
    if "tools" not in changes and isinstance(data.get("tools"), list):
        named = bool(data["tools"])
        data["tools"] = [t for t in data["tools"] if t in SHIPPED_TOOLS]
    environment = data.get("environment")
    if "environment" not in changes and isinstance(environment, str) and environment:
        named = True
        data["environment"] = environment if environment in SHIPPED_ENVIRONMENTS else ""
    if named and not data.get("tools") and not data.get("environment"):
        data["tools"] = [next(iter(SHIPPED_TOOLS))]
    return data


def profile_of(target: Target, overrides: list[str], run_rewards: bool = False) -> Sampling:
    """The profile the adapter was trained with, with --set overrides applied. The folder's own reward code is
    left out unless `run_rewards` (a folder someone sends must not run code on `sample`)."""
    from profiles.load import parse_overrides, profile_from_dict, read_profile_data
    from usercode.entry import is_user_code

    changes = parse_overrides(overrides)
    profile_file = target.attempt_dir / contract.PROFILE_FILE
    if profile_file.is_file():
        data, source = read_profile_data(profile_file), str(profile_file)
    else:
        summary_file = target.attempt_dir / contract.SUMMARY_FILE
        try:
            data = json.loads(summary_file.read_text(encoding="utf-8"))["profile"]
            if not isinstance(data, dict):
                raise TypeError
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            raise UsageError(
                f"{target.attempt_dir} holds neither {contract.PROFILE_FILE} nor a "
                f"readable {contract.SUMMARY_FILE} (fix: give the attempt folder the adapter was saved "
                "in)"
            ) from None
        source = str(summary_file)
    original = data
    data, left_out, correctness_left = _without_folder_code(data, changes, run_rewards, str(target.attempt_dir))
    try:
        profile = profile_from_dict(data, source)
    except ProfileError as exc:
        if exc.key is None or exc.key not in changes:
            raise
        # the --set replaces the very key the file gets wrong (a reward file since deleted, given new rewards)
        profile = profile_from_dict({**data, **changes}, f"{source} with --set")
    else:
        if changes:
            profile = profile_from_dict({**profile.to_dict(), **changes}, f"{source} with --set")
    rewards = dict(profile.rewards)
    if left_out and "rewards" not in changes and isinstance(original.get("rewards"), dict):
        rewards = {k: v for k, v in rewards.items() if k in original["rewards"] and not is_user_code(k)}
    return Sampling(profile, rewards, left_out, not correctness_left)


def sample(
    given: str | Path,
    prompt: str | None = None,
    from_test: int | None = None,
    overrides: list[str] | None = None,
    run_rewards: bool = False,
    say=None,
    best: bool = False,
):
    """(sampling, what was loaded, the answers); `say(text)` hears what runs whose code, before it runs, and
    which model --best (`best`) takes where it is not best-adapter/."""
    if prompt is not None and from_test is not None:
        raise UsageError("sample: give --prompt TEXT or --from-test N, not both")
    if from_test is not None and from_test < 1:
        raise UsageError(f"--from-test {from_test}: give a number of test questions >= 1")
    say = say or (lambda text: None)
    target = find_target(given)
    if best:
        target = best_of(target, say)
    sampling = profile_of(target, overrides or [], run_rewards)
    profile = sampling.profile
    # as an attempt of this profile runs, e.g. OpenMP's short spin on the CPU (set before torch loads)
    contract.apply_attempt_environment(profile)
    from tiny_model.source import base_model_path
    from trainer.sample import answer, rows_to_answer

    rows = rows_to_answer(profile, prompt, from_test)
    base = profile.model if not profile.uses_lora else base_model_path(profile, target.adapter_dir)
    for entry in sampling.left_out:
        say(
            f"note: reward {entry} is Python code named by the run's profile: not run (--run-rewards runs it, "
            "for a run you trust)"
        )
    if run_rewards:
        from usercode.entry import is_user_code

        for entry in [*sampling.rewards, profile.correctness]:
            if is_user_code(entry):
                say(f"note: running reward code {entry} (asked by --run-rewards)")
    from profiles.rules import remote_code_notice

    notice = remote_code_notice(profile)
    if notice:
        say(f"note: {notice}")
    return (
        sampling,
        target,
        answer(
            profile,
            target.adapter_dir,
            base,
            rows,
            rewards=sampling.rewards,
            correctness=profile.correctness if sampling.correctness_runs else None,
        ),
    )


def _shown(score) -> str:
    return "n/a" if score is None else f"{score:.2f}"


def sample_main(
    given: str,
    prompt: str | None = None,
    from_test: int | None = None,
    overrides: list[str] | None = None,
    run_rewards: bool = False,
    best: bool = False,
) -> int:
    import sys

    sampling, target, answers = sample(
        given,
        prompt,
        from_test,
        overrides,
        run_rewards,
        say=lambda text: print(text, file=sys.stderr, flush=True),
        best=best,
    )
    profile = sampling.profile
    print(f"adapter {target.adapter_dir} (profile '{profile.name}', model {profile.model}, dataset {profile.dataset})")
    for number, answer in enumerate(answers, 1):
        print(f"\n[{number}] question: {_shown_text(answer.question)}")
        if answer.gold is not None:
            print(f"    gold: {_shown_text(str(answer.gold))}")
        print("    answer: " + _shown_text(answer.completion).replace("\n", "\n            "))
        rewards = " | ".join(f"{name} {_shown(score)}" for name, score in answer.scores.items()) or "none run"
        if answer.correct is None:
            verdict = f"correctness not judged ({profile.correctness} not run)"
        else:
            verdict = f"correct ({profile.correctness})" if answer.correct else f"not correct ({profile.correctness})"
        print(f"    rewards: {rewards} | weighted {answer.weighted:.2f} | {verdict}")
    return 0


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _shown_text(text: str) -> str:
    """A model's text as a terminal should show it: control characters (escape sequences) visible as \\xNN,
    runs of blank lines as one, and a text of nothing but whitespace said in words, not as a screen of blank
    lines."""
    if not text.strip():
        return f"(nothing but whitespace: {len(text)} characters)" if text else "(empty)"
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\r\n", "\n").strip())
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text)
