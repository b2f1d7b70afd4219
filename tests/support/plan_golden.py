"""The planner's golden grid: command lines of `plan --json`, `fit --json` and `cards --json` whose output is kept
byte for byte in tests/data/plan_golden/, so that a change to how the planner is built shows any change in what it
plans. Regenerate (only when a change of plan is meant): `python -m support.plan_golden --write` from tests/.

The grid: the shipped ladder on every card `cards` lists; `fit` of every catalogue model on five cards; the ladder
for a model of the user's; two and eight GPUs; two nodes; an --hours budget; a card the table does not know; a
profile with tools; a TRL recipe."""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "data" / "plan_golden"
PROFILES = REPO / "profiles"

# (card name as the card table knows it, GiB): the cards of `cards`, as launcher.plan.cards.COMMON_CARDS times them
CARDS = (
    ("NVIDIA GeForce RTX 3070", 8.0),
    ("NVIDIA GeForce RTX 3060", 12.0),
    ("Tesla T4", 15.0),
    ("NVIDIA GeForce RTX 4060 Ti", 16.0),
    ("NVIDIA L4", 22.5),
    ("NVIDIA GeForce RTX 4090", 24.0),
    ("NVIDIA A100-SXM4-40GB", 40.0),
    ("NVIDIA A100-SXM4-80GB", 80.0),
    ("NVIDIA H100 80GB HBM3", 79.6),
)
FIT_CARDS = (CARDS[2], CARDS[4], CARDS[6], CARDS[7], CARDS[8])

# A TRL `trl grpo --config` file for a GPU (the keys of tests/support/recipes.py's, a hub model, vLLM colocated)
TRL_GPU_RECIPE = """\
model_name_or_path: Qwen/Qwen2.5-1.5B-Instruct
torch_dtype: bfloat16
use_peft: true
lora_r: 16
lora_alpha: 32
lora_target_modules: all-linear
dataset_name: gsm8k
output_dir: trl-out
learning_rate: 1.0e-5
per_device_train_batch_size: 8
gradient_accumulation_steps: 2
num_generations: 8
max_prompt_length: 256
max_completion_length: 512
use_vllm: true
vllm_mode: colocate
vllm_gpu_memory_utilization: 0.3
max_steps: 200
save_steps: 50
logging_steps: 1
report_to: []
reward_funcs: [accuracy, xml_count]
beta: 0.0
"""


def _card(name: str, gib: float) -> list[str]:
    return ["--gpu-name", name, "--gpu-memory", f"{gib:g}"]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")


def cases() -> dict[str, list[str]]:
    """{case name: argv}, every case of the grid."""
    out: dict[str, list[str]] = {"cards": ["cards", "--json"]}
    h100, l4, t4 = CARDS[8], CARDS[4], CARDS[2]
    for name, gib in CARDS:
        out[f"plan-{_slug(name)}"] = ["plan", "--json", "--ignore-ledger", *_card(name, gib)]
    from profiles.catalog import CATALOGUE

    for arch in CATALOGUE:
        for name, gib in FIT_CARDS:
            out[f"fit-{_slug(arch.name)}-{_slug(name)}"] = [
                "fit",
                arch.name,
                "--json",
                "--ignore-ledger",
                *_card(name, gib),
            ]
    for model in ("Qwen/Qwen2.5-7B-Instruct", "google/gemma-3-1b-it", "microsoft/phi-4", "Qwen/Qwen3-4B"):
        for name, gib in (t4, l4, h100):
            out[f"plan-model-{_slug(model)}-{_slug(name)}"] = [
                "plan",
                "--json",
                "--ignore-ledger",
                "--set",
                f"model={model}",
                *_card(name, gib),
            ]
    for gpus in (2, 8):
        out[f"plan-gpus{gpus}-h100"] = ["plan", "--json", "--ignore-ledger", "--gpus", str(gpus), *_card(*h100)]
        out[f"plan-gpus{gpus}-model-qwen2.5-7b-l4"] = [
            "plan",
            "--json",
            "--ignore-ledger",
            "--gpus",
            str(gpus),
            "--set",
            "model=Qwen/Qwen2.5-7B-Instruct",
            *_card(*l4),
        ]
    out["plan-nodes2-h100"] = [
        "plan",
        "--json",
        "--ignore-ledger",
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        *_card(*h100),
    ]
    for name, gib in (t4, h100):
        out[f"plan-hours2-{_slug(name)}"] = ["plan", "--json", "--ignore-ledger", "--hours", "2", *_card(name, gib)]
    out["plan-unknown-card-24"] = ["plan", "--json", "--ignore-ledger", "--gpu-name", "Acme X1", "--gpu-memory", "24"]
    out["plan-profile-16gb-t4"] = [
        "plan",
        "--json",
        "--ignore-ledger",
        "--profile",
        str(PROFILES / "gpu-16gb-gemma3-1b.yaml"),
        *_card(*t4),
    ]
    out["plan-profile-tools-l4"] = [
        "plan",
        "--json",
        "--ignore-ledger",
        "--profile",
        str(PROFILES / "gpu-16gb-gemma3-1b.yaml"),
        "--set",
        "tools=[calculate]",
        "--set",
        "max_tool_calls=2",
        *_card(*l4),
    ]
    out["plan-recipe-trl-l4"] = ["plan", "--json", "--ignore-ledger", "--profile", "{recipe}", *_card(*l4)]
    out["plan-recipe-trl-h100-hours2"] = [
        "plan",
        "--json",
        "--ignore-ledger",
        "--hours",
        "2",
        "--profile",
        "{recipe}",
        *_card(*h100),
    ]
    return out


def render(argv: list[str], scratch: Path) -> str:
    """What the command line prints (exit status, stdout; stderr's last lines on failure), with the paths of
    this clone and of `scratch` written as $REPO and $SCRATCH so that the text is the same from any clone."""
    from commands import main

    recipe = scratch / "trl-grpo.yaml"
    recipe.write_text(TRL_GPU_RECIPE)
    argv = [str(recipe) if a == "{recipe}" else a for a in argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    text = json.dumps({"exit": code, "stdout": out.getvalue(), "stderr": err.getvalue()[-2000:] if code else ""})
    return text.replace(str(scratch), "$SCRATCH").replace(str(REPO), "$REPO")


def main(argv: list[str]) -> int:
    write = "--write" in argv
    changed = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases().items():
            text = render(case, Path(tmp))
            path = GOLDEN / f"{name}.json"
            if write:
                GOLDEN.mkdir(parents=True, exist_ok=True)
                path.write_text(text + "\n")
            elif not path.exists() or path.read_text() != text + "\n":
                changed.append(name)
    print("\n".join(changed) if changed else "the grid is as kept")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
