"""launcher.plan.choose and the planning CLI: verdicts, the choice, --dry-run, --json, --fit-table, lean imports."""

import json
import sys
from pathlib import Path

import pytest

from commands.plan import print_plan
from contract.errors import EXIT_OUT_OF_MEMORY
from launcher.card.detect import GpuInfo, Machine, detect_machine
from launcher.plan.cards import COMMON_CARDS, fit_table
from launcher.plan.choose import make_plan
from launcher.plan.margins import margin_for
from launcher.plan.request import PlanRequest
from profiles.load import load_profile, load_profiles, profile_from_dict
from support.cli import train_py as run_cli
from support.fake_nvml import FakeNvml
from support.waiting import run_to_end

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
GIB = 1024**3


def what_if(total, free=None, name="card"):
    gpu = GpuInfo(name, total, total if free is None else free, 0.0, (8, 0), None, None, 0, "what-if")
    return Machine([gpu], "what-if", 64.0, 60.0)


def planned(machine, profiles=None):
    """The shipped ladder as `train` plans it: each rung's `auto` keys derived for the machine's card."""
    return make_plan(PlanRequest(profiles or gpu_ladder(), machine))


def cpu_machine(ram=24.0, free=20.0):
    return Machine([], "no NVIDIA driver found: planning for the CPU ladder", ram, free)


def cpu_profile(name, ladder):
    return profile_from_dict(
        {
            "name": name,
            "ladder": ladder,
            "model": "tiny",
            "device": "cpu",
            "load_in_4bit": False,
            "fast_inference": False,
            "optim": "adamw_torch",
            "dataset": "arithmetic",
            "max_steps": 2,
            "save_steps": 1,
        },
        f"<{name}>",
    )


def gpu_ladder():
    return [p for p in load_profiles(PROFILES) if p.device == "cuda"]


def test_margin_is_five_percent_with_a_floor():
    assert margin_for(80) == pytest.approx(4.0)
    assert margin_for(16) == pytest.approx(0.8)
    assert margin_for(8) == 0.5
    assert margin_for(24, "cpu") == pytest.approx(2.4)
    assert margin_for(4, "cpu") == 1.0


# The ladder's choice for every card class (what-if: free = total), each rung derived for the card: the first
# whose derived cap holds the task's answers and whose run makes at least its min_updates in its default hours
EXPECTED_CHOICE = {
    "8 GB card (RTX 3070, 4060)": "gpu-16gb-llama3.2-3b",
    "12 GB card (RTX 3060, 4070)": "gpu-16gb-llama3.2-3b",
    "T4 16 GB": "gpu-16gb-llama3.2-3b",
    "16 GB card (RTX 4060 Ti 16GB, 4080)": "gpu-16gb-llama3.2-3b",
    "L4 / A10 24 GB": "gpu-16gb-llama3.2-3b",
    "RTX 3090 / 4090 24 GB": "gpu-40gb-qwen2.5-14b",
    "A100 40GB": "gpu-80gb-qwen2.5-14b",
    "A100 80GB": "gpu-80gb-qwen2.5-14b",
    "H100 80GB": "gpu-80gb-qwen2.5-14b",
}


def test_fit_table_gives_each_card_class_its_profile():
    rows = fit_table(load_profiles(PROFILES))
    assert {r["card"]: r["chosen"] for r in rows} == EXPECTED_CHOICE
    assert [r["card"] for r in rows] == [c[0] for c in COMMON_CARDS]
    t4 = next(r for r in rows if r["card"] == "T4 16 GB")
    assert t4["precision"] == "fp16"
    assert t4["fallbacks"][0] == "gpu-12gb-llama3.2-3b"
    for row in rows:
        assert row["estimate_gib"] <= row["total_gib"] - margin_for(row["total_gib"])


def test_first_fitting_rung_is_chosen_and_verdicts_name_their_reason():
    plan = planned(what_if(24, name="NVIDIA GeForce RTX 4090"))
    names = [c.profile.name for c in plan.candidates]
    assert names == [p.name for p in sorted(gpu_ladder(), key=lambda p: p.ladder)]
    assert plan.chosen.name == "gpu-40gb-qwen2.5-14b"
    verdicts = {c.profile.name: c for c in plan.candidates}
    assert verdicts["gpu-80gb-qwen2.5-14b"].reason.startswith("nothing fits: even")
    assert verdicts["gpu-40gb-qwen2.5-14b"].reason.startswith("fits: ")
    assert verdicts["gpu-24gb-llama3.1-8b"].reason.startswith("fits: ")
    assert plan.margin_gib == pytest.approx(1.2)


def test_vllm_share_must_fit_in_free_memory():
    profile = load_profile(PROFILES / "gpu-16gb-gemma3-1b.yaml")  # 0.5 x total
    plan = make_plan(PlanRequest([profile], what_if(16, free=7.5)))
    assert not plan.candidates[0].fits
    assert plan.candidates[0].reason.startswith(
        "vLLM asks 8.00 GiB (gpu_memory_utilization x total) but only 7.50 GiB is free"
    )


def test_nothing_fits_exits_3(capsys):
    profile = load_profile(PROFILES / "gpu-80gb-qwen2.5-14b.yaml")
    plan = make_plan(PlanRequest([profile], what_if(24)))
    assert plan.chosen is None
    assert print_plan(plan, as_json=True) == EXIT_OUT_OF_MEMORY
    assert json.loads(capsys.readouterr().out)["chosen"] is None


def test_cpu_machine_plans_the_cpu_profiles_only():
    profiles = gpu_ladder() + [cpu_profile("cpu-b", 910), cpu_profile("cpu-a", 900)]
    plan = make_plan(PlanRequest(profiles, cpu_machine()))
    assert [c.profile.name for c in plan.candidates] == ["cpu-a", "cpu-b"]
    assert plan.chosen.name == "cpu-a"
    assert plan.candidates[0].estimate.memory == "host"
    assert f"{len(gpu_ladder())} profile(s) for device cuda left out" in plan.notes
    assert plan.to_json()["gpu"]["source"] == "none"


def test_the_code_demo_is_no_rung_of_the_shipped_cpu_ladder():
    from launcher.plan.ladder import ladder_rungs

    shipped = load_profiles(REPO / "profiles", device="cpu")
    assert "cpu-tiny-code" in {p.name for p in shipped}
    rungs = [p.name for p in ladder_rungs(shipped)]
    # judged on programs passing test cases: a fallback to it would train another task than the one asked for
    assert "cpu-tiny-code" not in rungs and "cpu-tiny-8gen" in rungs and "cpu-tiny-4gen" in rungs
    alone = [load_profile(REPO / "profiles" / "cpu-tiny-code.yaml")]
    assert ladder_rungs(alone) == alone  # a folder of code profiles alone is a ladder of its own


def test_cuda_profile_without_a_gpu_does_not_fit():
    plan = make_plan(PlanRequest([load_profile(PROFILES / "gpu-16gb-gemma3-1b.yaml")], cpu_machine()))
    assert plan.chosen is None
    assert plan.candidates[0].reason.startswith("needs an NVIDIA GPU and none was found")


def test_fake_nvml_machine_is_planned_on_its_free_memory():
    used_card = {"name": "NVIDIA GeForce RTX 4090", "uuid": "GPU-1", "total": 24 * GIB, "free": 20 * GIB, "cc": (8, 9)}
    plan = planned(detect_machine(nvml=FakeNvml([used_card])))
    out = plan.to_json()
    assert out["gpu"] == {
        **out["gpu"],
        "name": "NVIDIA GeForce RTX 4090",
        "total_gib": 24.0,
        "free_gib": 20.0,
        "source": "nvml",
        "compute_capability": "8.9",
    }
    # 4 GiB already in use: the 14B rung, derived into the 18.8 GiB usable, takes fewer prompts a step and
    # would make fewer than its min_updates in its default hours: the plan goes on to the 8B rung, derived
    # within the 92% of usable memory an estimate alone may use
    verdicts = {c["profile"]: c for c in out["candidates"]}
    assert verdicts["gpu-40gb-qwen2.5-14b"]["reason"].startswith("derived for this card its run has")
    assert out["chosen"] == "gpu-24gb-llama3.1-8b"
    assert verdicts["gpu-24gb-llama3.1-8b"]["estimate"]["total_gib"] <= 0.92 * (20.0 - 1.2) + 1e-6


# ---------------------------------------------------------------------------------------------------
# The command line


def test_dry_run_json_is_the_design_object():
    result = run_cli("--auto", "--dry-run", "--json", "--gpu-memory", "16", "--gpu-name", "RTX 4080")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert {k: out["gpu"][k] for k in ("name", "total_gib", "free_gib", "source")} == {
        "name": "RTX 4080",
        "total_gib": 16.0,
        "free_gib": 16.0,
        "source": "what-if",
    }
    ladder = [c["ladder"] for c in out["candidates"]]
    assert ladder == sorted(ladder)
    for cand in out["candidates"]:
        assert {"profile", "path", "fits", "estimate"} <= set(cand)
        assert {"total_gib", "components"} <= set(cand["estimate"])
        assert cand["estimate"]["components"]["weights"] > 0
        assert Path(cand["path"]).is_file()
    assert out["chosen"] == "gpu-24gb-llama3.1-8b"
    assert "5% of the card" in out["margin"]


def test_dry_run_with_one_profile_gives_one_candidate():
    result = run_cli("--profile", "profiles/gpu-16gb-gemma3-1b.yaml", "--dry-run", "--json", "--gpu-memory", "15")
    out = json.loads(result.stdout)
    assert [c["profile"] for c in out["candidates"]] == ["gpu-16gb-gemma3-1b"]
    assert out["chosen"] == "gpu-16gb-gemma3-1b"


def test_dry_run_table_shows_gpu_candidates_and_choice():
    result = run_cli("--auto", "--dry-run", "--gpu-memory", "24", "--gpu-name", "NVIDIA GeForce RTX 4090")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert text.startswith("planning for NVIDIA GeForce RTX 4090 (24 GiB, all of it free): --gpu-memory")
    for name in ("gpu-80gb-qwen2.5-14b", "gpu-8gb-qwen2.5-0.5b", "nothing fits: even", "5% of the card"):
        assert name in text
    assert "chosen: gpu-40gb-qwen2.5-14b" in text


def test_fit_table_json():
    result = run_cli("--fit-table", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["cards"]
    assert {r["card"]: r["chosen"] for r in rows} == EXPECTED_CHOICE


def test_dry_run_imports_no_heavy_library_and_is_quick():
    probe_code = (
        "import sys, time, io, contextlib\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import train\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = train.main(['--auto', '--dry-run'])\n"
        "heavy = sorted(m for m in ('torch', 'unsloth', 'trl', 'transformers', 'vllm', 'datasets')\n"
        "               if m in sys.modules)\n"
        "print(code, ','.join(heavy))\n"
    )
    result = run_to_end([sys.executable, "-c", probe_code], cwd=REPO)
    assert result.returncode == 0, result.stderr
    code, _, heavy = result.stdout.strip().partition(" ")
    assert code == "0"
    assert heavy == ""
    # The speed itself (target <= 0.5 s) is measured by benchmarks/dry_run_time.py, not asserted here.


def test_console_script_plans_like_train_py():
    """`grpo-train` (pyproject's console script) runs the same main as `python train.py`."""
    import shutil

    script = shutil.which("grpo-train", path=str(Path(sys.executable).parent))
    if script is None:
        pytest.skip("the project is not installed in this environment (pip install -e .)")
    args = ["--auto", "--dry-run", "--json", "--gpu-memory", "24", "--gpu-name", "NVIDIA GeForce RTX 4090"]
    from_script = run_to_end([script, *args])
    from_file = run_cli(*args)
    assert from_script.returncode == from_file.returncode == 0, from_script.stderr
    assert json.loads(from_script.stdout)["chosen"] == json.loads(from_file.stdout)["chosen"] == "gpu-40gb-qwen2.5-14b"


def test_the_measurement_docs_cards_table_is_what_cards_says():
    text = (REPO / "docs" / "measurement.md").read_text()
    table = text.split("`python train.py cards` today", 1)[1].split("```", 2)[1]
    said = {}
    for line in table.strip().splitlines()[1:]:
        card, rest = line[:36].strip(), line[36:].split()
        said[card] = (rest[2], float(rest[3]))
    rows = fit_table(load_profiles(PROFILES))
    assert said == {r["card"]: (r["chosen"], r["estimate_gib"]) for r in rows}
