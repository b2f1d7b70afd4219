"""The GRPO loss and sampling settings a profile may set: validated at load (types, ranges, combinations that
contradict the method they name), given alike to both training paths' GRPOConfig, accepted by the installed
TRL, and their cost in the estimate."""

from __future__ import annotations

from pathlib import Path

import pytest

from contract.errors import ProfileError
from launcher.memory.estimate import estimate
from profiles.load import load_profile
from support.waiting import run_to_end
from trainer.config import LOSS_SETTINGS, PROFILE_LOSS_KEYS, grpo_config_kwargs

REPO = Path(__file__).resolve().parents[3]
SINGLE = REPO / "profiles" / "gpu-80gb-qwen2.5-14b.yaml"
MULTI = REPO / "profiles" / "multi-4x80gb-qwen2.5-14b.yaml"
CPU = REPO / "profiles" / "cpu-tiny-4gen.yaml"

# a non-default value of every settable key, as a user would write it
CHANGED = {
    "loss_type": "grpo",
    "epsilon": 0.1,
    "epsilon_high": 0.28,
    "delta": 4.0,
    "importance_sampling_level": "sequence",
    "scale_rewards": "batch",
    "mask_truncated_completions": True,
    "num_iterations": 2,
    "beta": 0.04,
    "top_k": 50,
    "min_p": 0.05,
    "repetition_penalty": 1.1,
}


def overrides(values: dict) -> list[str]:
    return [f"{key}={value}" for key, value in values.items()]


def test_every_settable_key_is_a_profile_key_and_none_is_pinned():
    profile = load_profile(CPU)
    assert set(CHANGED) == set(PROFILE_LOSS_KEYS)
    for key in PROFILE_LOSS_KEYS:
        assert hasattr(profile, key), key
        assert key not in LOSS_SETTINGS, f"{key} is both settable and pinned"


def test_defaults_are_todays_values():
    kwargs = grpo_config_kwargs(load_profile(CPU), "out", device="cpu", bf16=False, use_vllm=False)
    assert {key: kwargs[key] for key in PROFILE_LOSS_KEYS} == {
        "loss_type": "dapo",
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "delta": None,
        "importance_sampling_level": "token",
        "scale_rewards": "group",
        "mask_truncated_completions": False,
        "num_iterations": 1,
        "beta": 0.0,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
    }


def test_both_paths_get_the_profile_values_alike():
    single = load_profile(SINGLE, overrides(CHANGED))
    multi = load_profile(MULTI, overrides(CHANGED))
    assert not single.distributed and multi.distributed
    one = grpo_config_kwargs(single, "out", device="cuda", bf16=True, use_vllm=True)
    many = grpo_config_kwargs(multi, "out", device="cuda", bf16=True, use_vllm=True)
    for key, value in CHANGED.items():
        assert one[key] == many[key] == value, key


def test_the_installed_trl_keeps_them():
    from trl import GRPOConfig

    profile = load_profile(CPU, overrides(CHANGED))
    built = GRPOConfig(**grpo_config_kwargs(profile, "out", device="cpu", bf16=False, use_vllm=False))
    for key, value in CHANGED.items():
        assert getattr(built, key) == value, key


@pytest.mark.parametrize(
    "written, key, read",
    [
        ("scale_rewards=true", "scale_rewards", "group"),
        ("scale_rewards=false", "scale_rewards", "none"),
        ("scale_rewards=Batch", "scale_rewards", "batch"),
        ("top_k=-1", "top_k", 0),
        ("delta=", None, None),
        ("eval_steps=auto", "eval_steps", "auto"),
        ("eval_steps=0", "eval_steps", 0),
        ("eval_steps=25", "eval_steps", 25),
    ],
)
def test_spellings_read_as_trl_reads_them(written, key, read):
    if key is None:  # an empty value is refused on the command line, as for every key
        with pytest.raises(ProfileError):
            load_profile(CPU, [written])
        return
    assert getattr(load_profile(CPU, [written]), key) == read


def test_an_empty_optional_value_in_a_file_means_off(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(CPU.read_text() + "delta:\nmin_p:\nepsilon_high:\n")
    profile = load_profile(path)
    assert profile.delta is None and profile.min_p is None and profile.epsilon_high is None


@pytest.mark.parametrize(
    "given, key, words",
    [
        (["loss_type=luspo"], "importance_sampling_level", "sequence-level loss"),
        (["loss_type=vespo", "importance_sampling_level=sequence"], "importance_sampling_level", "per-token ratios"),
        (["loss_type=cispo", "delta=4"], "delta", "ignore it"),
        (["delta=1.1"], "delta", "must exceed 1 + epsilon"),
        (["epsilon_high=0.1"], "epsilon_high", "below epsilon"),
        (["loss_type=ppo"], "loss_type", "is not one of"),
        (["importance_sampling_level=prompt"], "importance_sampling_level", "is not one of"),
        (["scale_rewards=std"], "scale_rewards", "is not one of"),
        (["epsilon=0"], "epsilon", "must be >"),
        (["num_iterations=0"], "num_iterations", "must be >="),
        (["top_k=-2"], "top_k", "must be >="),
        (["min_p=1.5"], "min_p", "must be <="),
        (["repetition_penalty=0"], "repetition_penalty", "must be >"),
        (["mask_truncated_completions=maybe"], "mask_truncated_completions", "true or false"),
        (["eval_steps=-1"], "eval_steps", "must be >= 0"),
        (["eval_steps=often"], "eval_steps", "expected 'auto'"),
    ],
)
def test_refusals_name_the_key_and_the_fix(given, key, words):
    with pytest.raises(ProfileError) as caught:
        load_profile(CPU, given)
    assert caught.value.key == key
    assert words in str(caught.value)


def test_cispo_may_cap_above_and_below_epsilon():
    assert load_profile(CPU, ["loss_type=cispo", "epsilon_high=5.0"]).epsilon_high == 5.0


def test_gspo_and_luspo_at_sequence_level_load():
    for loss in ("grpo", "luspo"):
        profile = load_profile(CPU, [f"loss_type={loss}", "importance_sampling_level=sequence"])
        assert profile.importance_sampling_level == "sequence"


def test_their_cost_in_the_estimate():
    base = estimate(load_profile(SINGLE))
    iterated = estimate(load_profile(SINGLE, ["num_iterations=4"]))
    profile = load_profile(SINGLE)
    assert "old_logprobs" not in base.components
    expected = profile.effective_batch * profile.max_completion_length * 4 / (1 << 30)
    assert iterated.components["old_logprobs"] == pytest.approx(expected)
    assert any("num_iterations 4" in note and "old policy's log-probs" in note for note in iterated.notes)
    # beta > 0: the reference is the adapter switched off under LoRA (time only), a full copy without it
    kl = estimate(load_profile(SINGLE, ["beta=0.04"]))
    assert kl.components["reference"] == 0 and any("adapter off" in note for note in kl.notes)
    full = load_profile(CPU, ["lora_rank=0", "beta=0.04"])
    assert estimate(full).components["reference"] == estimate(full).components["weights"] > 0
    # the distributed estimate counts them the same way
    multi = estimate(load_profile(MULTI, ["num_iterations=4"]))
    assert multi.components["old_logprobs"] > 0


# ---------------------------------------------------------------------------------------------------
# On CPU: a short run per loss type and per importance-sampling level reaches the trainer and trains

RUNS = [
    ("dapo", "token"),
    ("grpo", "token"),
    ("dr_grpo", "token"),
    ("bnpo", "token"),
    ("cispo", "token"),
    ("sapo", "token"),
    ("vespo", "token"),
    ("luspo", "sequence"),
    ("grpo", "sequence"),
]


# The nine attempts run one after another in one child process (as test_probe's pair does): each is the real
# attempt (trainer.run.run_attempt on the profile with its --set values), without nine interpreter starts and
# library imports.
_ATTEMPTS = """
import json, sys
from pathlib import Path
from commands.attempt import model_to_load
from profiles.load import load_profile
from trainer.run import run_attempt

out, profile_path, runs = Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
for name, sets in runs.items():
    code = run_attempt(load_profile(profile_path, sets), out / name, resolve_model=model_to_load)
    print(json.dumps({"attempt": name, "exit": code}), flush=True)
"""


def _sets(loss: str, level: str) -> list[str]:
    return [
        f"loss_type={loss}",
        f"importance_sampling_level={level}",
        "max_steps=2",
        "save_steps=2",
        "eval_samples=0",
        "train_samples=32",
        "num_iterations=2" if loss == "grpo" else "beta=0.0",
    ]


@pytest.fixture(scope="module")
def loss_attempts(tmp_path_factory, tiny_cache) -> tuple[Path, dict[str, int], str]:
    import json
    import sys

    from support.cli import cpu_run_env
    from support.once import once_per_run

    def attempts(out: Path) -> dict:
        env = cpu_run_env(tiny_cache)
        runs = {f"{loss}-{level}": _sets(loss, level) for loss, level in RUNS}
        done = run_to_end(
            [sys.executable, "-c", _ATTEMPTS, str(out), str(CPU), json.dumps(runs)],
            env=env,
            cwd=REPO,
        )
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"attempt"')]
        return {
            "codes": {row["attempt"]: row["exit"] for row in rows},
            "output": done.stdout[-3000:] + done.stderr[-3000:],
        }

    out, result = once_per_run(tmp_path_factory, "loss-types", attempts)
    return out, result["codes"], result["output"]


@pytest.mark.parametrize("loss, level", RUNS)
def test_each_loss_type_and_level_trains_on_cpu(loss_attempts, loss, level):
    import json
    import math

    out, codes, output = loss_attempts
    attempt = out / f"{loss}-{level}"
    assert codes.get(attempt.name) == 0, output
    summary = json.loads((attempt / "summary.json").read_text())
    held = summary["loss_settings"]  # read from the trainer's own config
    assert (held["loss_type"], held["importance_sampling_level"]) == (loss, level)
    assert held["num_iterations"] == (2 if loss == "grpo" else 1)
    assert summary["steps"] == 2
    rows = [json.loads(line) for line in (attempt / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["loss"] is not None and math.isfinite(r["loss"]) for r in rows)
    assert summary["rewards"]["total"]["first"] is not None
