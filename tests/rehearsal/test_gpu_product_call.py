"""The product call (docs/gpu.md): the documented command line, run as written with a fresh folder as $OUT, on
the CPU: the environment makes it CPU-sized (PRODUCT_CPU=1: CUDA hidden, the CPU demo's rung, the out-of-memory
injected with GRPO_INJECT_OOM, since a host has no CUDA allocator to exhaust; on a card the error is a real
one). It runs the commands a user runs, and what comes back is at most 8 files: the plan, the runs packed, the
summary of the figures the closing note needs, the log and env.txt."""

from __future__ import annotations

import json
import sys
import tarfile
from pathlib import Path

from support.cli import REPO, cpu_run_env
from support.waiting import run_to_end

sys.path.insert(0, str(REPO / "scripts"))

import gpu_product  # noqa: E402

FILES = {
    "env.txt",
    "product.log",
    "plan.json",
    "summary.json",
    "summary.md",
    "train-run.tar.gz",
    "compare-runs.tar.gz",
    "oom-run.tar.gz",
}
MIB = 1 << 20


def _documented_call() -> str:
    """The command line docs/gpu.md gives for the product call, exactly as written there."""
    text = (REPO / "docs" / "gpu.md").read_text(encoding="utf-8")
    (line,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("bash scripts/gpu-product.sh")]
    assert '"$OUT"' in line and len(line) < 2000
    return line


def _records(archive: Path, name: str) -> list[dict]:
    """The lines of every `name` file in a packed run folder, in path order."""
    with tarfile.open(archive) as packed:
        members = sorted((m for m in packed.getmembers() if m.name.endswith(f"/{name}")), key=lambda m: m.name)
        rows = []
        for member in members:
            handle = packed.extractfile(member)
            assert handle is not None
            rows += [json.loads(line) for line in handle.read().decode().splitlines() if line.strip()]
    return rows


def test_the_notebook_settings_move_only_what_the_notebook_sets():
    base = {"name": "x", "max_prompt_length": 160, "learning_rate": 5e-4, "lora_rank": 16, "seed": 3407}
    notebook = gpu_product.notebook_rung(base, cpu=False)
    assert notebook["per_device_train_batch_size"] // notebook["num_generations"] == 1  # 1 prompt a step
    assert (notebook["learning_rate"], notebook["max_completion_length"]) == (5e-6, 200)
    assert notebook["max_seq_length"] == 160 + 200 and notebook["lora_rank"] == 16 and notebook["seed"] == 3407


def test_the_oom_rung_is_sized_past_the_card_and_planned_on_a_card_that_holds_it():
    from launcher.card.detect import GpuInfo, Machine
    from launcher.memory.estimate import estimate
    from launcher.plan.choose import make_plan
    from launcher.plan.request import PlanRequest
    from profiles.schema import profile_from_dict

    for total in (79.6, 139.8):
        card = GpuInfo("NVIDIA H100", total, total - 0.5, 0.5, (9, 0), "580", "13.0", 0, "nvml")
        (big, small), what_if = gpu_product.oom_rungs(card)
        needed = estimate(profile_from_dict(big, "big"), gpu=card).total_gib
        assert needed >= gpu_product.OOM_OVER * total  # a real out-of-memory on this card
        larger = GpuInfo("what-if", what_if, what_if, 0.0, (9, 0), None, None, 0, "what-if")
        machine = Machine([larger], "what-if", 64.0, 60.0)
        plan = make_plan(PlanRequest([profile_from_dict(big, "big"), profile_from_dict(small, "small")], machine))
        assert plan.chosen is not None and plan.chosen.name == "oom-big"  # judged to fit the card it is told of
        assert all(c.fits for c in plan.candidates)


def test_the_documented_call_runs_as_written_and_brings_back_what_the_closing_note_needs(tmp_path, tiny_cache):
    out = tmp_path / "out"  # fresh, as $OUT is at every call
    env = cpu_run_env(
        tiny_cache,
        OUT=str(out),
        PYTHON=sys.executable,
        TMPDIR=str(tmp_path),
        KIT_CARRY="none",  # the libraries of this environment: the carry is the kit's (test_gpu_kit_call.py)
        PRODUCT_CPU="1",
        PRODUCT_SEEDS="3407",
        # no phase is cut on a loaded machine: the CPU-sized rungs end on their steps, not on these limits
        PRODUCT_CALL_S="54000",
        PRODUCT_ARM_S="3600",
    )
    done = run_to_end(["bash", "-c", _documented_call()], cwd=REPO, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    names = {p.name for p in out.iterdir()}
    assert names == FILES and len(names) <= 8
    assert all(p.is_file() and p.stat().st_size < 16 * MIB for p in out.iterdir())
    assert not list(tmp_path.glob("grpo-product.*"))  # the work folder goes with the call

    plan = json.loads((out / "plan.json").read_text(encoding="utf-8"))
    assert plan["gpu"]["device"] == "cpu" and plan["chosen"]
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert {"device", "card", "call_s", "plan", "plan_tiny", "train", "comparison", "oom", "plan_after"} <= set(summary)
    assert summary["device"] == "cpu" and summary["left_out"] == []

    train = summary["train"]  # the product run: accuracy before and after, seconds a step, the run's wall time
    assert 0 <= train["accuracy_before"] <= 1 and 0 <= train["accuracy_after"] <= 1
    assert train["steps"] == gpu_product.CPU_SIZES["max_steps"] and train["step_s"] > 0 and train["wall_s"] > 0
    assert [a["status"] for a in train["attempts"]] == ["ok"]

    (seed,) = summary["comparison"]["seeds"]  # one seed, both arms, the same budget
    assert seed["seed"] == "3407"
    for arm in ("planner", "notebook"):
        assert seed[arm]["ran"] and isinstance(seed[arm]["gain_per_min"], float), seed[arm]
    assert (
        seed["notebook"]["settings"]["per_device_train_batch_size"] == seed["notebook"]["settings"]["num_generations"]
    )
    assert "ratio" in summary["comparison"] and summary["comparison"]["ratio_note"]

    oom = summary["oom"]
    assert oom["oom_read"] and oom["fell_back"] and oom["resumed"] and oom["finished"], oom["attempts"]
    assert "CUDA out of memory" in oom["oom_text"] and oom["explain_oom"]
    # attempts.jsonl as it came back: the OOM (injected here, by name), the fallback in later attempts, the stop
    # after its checkpoint, and the resume from that checkpoint, finished
    records = _records(out / "oom-run.tar.gz", "attempts.jsonl")
    statuses = [r["status"] for r in records]
    assert statuses[0] == "oom" and records[0]["oom"] and records[0]["env"]["GRPO_INJECT_OOM"] == "oom-big@1"
    assert "interrupted" in statuses and statuses[-1] == "ok"
    stopped = records[statuses.index("interrupted")]
    assert stopped["profile"] != "oom-big" or stopped["shrink"]  # what it fell back to
    assert records[-1]["resumed_from"] and records[-1]["resumed_from"].startswith(stopped["attempt_dir"])
    assert summary["plan_after"]["measured"] and summary["ledger_entries"] > 0  # the next plan read the ledger

    with tarfile.open(out / "train-run.tar.gz") as packed:
        packed_names = packed.getnames()
    assert any(n.endswith("/report.md") for n in packed_names) and any(
        n.endswith("/summary.json") for n in packed_names
    )
    assert not any(n.endswith((".safetensors", ".pt")) for n in packed_names)
    assert "## The out-of-memory" in (out / "summary.md").read_text(encoding="utf-8")
    assert "rehearsal: 1" in (out / "env.txt").read_text(encoding="utf-8")
