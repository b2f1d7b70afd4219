"""Planning for learning per hour (issue 30) and `fit`'s pinned values (issue 34, items 2 and 7): the objective and
the order of the levers, the card table, the step-time model against published runs, the task's completion cap,
vLLM's engine as unsloth_zoo sizes it, the margins, standby, what `plan --json` and `fit` show, measured step
times beside the prediction (attempts, summary, ledger), and a profile printed by `fit` loading back with exactly
the figures it printed."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

import train
from contract.attempt import Outcome
from launcher.card.detect import detect_machine
from launcher.card.facts import CARDS, DEFAULT, SOURCES, card_facts
from launcher.memory.estimate import estimate
from launcher.memory.ledger import record as ledger_record
from launcher.memory.ledger.store import Entry
from launcher.memory.ledger.weigh import measured_for
from launcher.memory.parts import UNSLOTH_ENGINE_TIERS, UNSLOTH_GRAPH_RESERVE
from launcher.plan import levers, solve
from launcher.plan.choose import make_plan
from launcher.plan.completion_lengths import DEFAULT_CAP, completion_plan
from launcher.plan.margins import ESTIMATE_MAX_USE, estimate_limit
from launcher.plan.request import PlanRequest
from launcher.plan.speed import predict
from launcher.plan.stages.memory import _judge, _Room
from launcher.run.attempts import AttemptRecord
from profiles.catalog import resolve
from profiles.load import load_profile
from profiles.schema import profile_from_dict
from tasks import arithmetic
from tasks.reference_lengths import ARITHMETIC, GSM8K, measure, reference_lengths
from trainer.timing import calibration, measured_step, time_generation_wave, time_training_step

ROOT = Path(__file__).resolve().parents[3]
PROFILES = ROOT / "profiles"
GSM8K_DIR = ROOT.parent / "shared" / "data" / "gsm8k"


def machine(gib: float, name: str | None = None):
    return detect_machine(what_if_gib=gib, what_if_name=name)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = train.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------------------------------
# The objective and the order of the levers, in code and in the docs


def test_the_objective_and_the_order_of_the_levers_are_stated():
    assert levers.OBJECTIVE == "learning per hour: updates per hour x P / (P + B)"
    assert levers.LEARNING_LEVERS == ("completion_length", "generations", "lora_rank", "16-bit")
    assert levers.THROUGHPUT_LEVERS == ("prompts_per_step", "batch", "checkpointing", "standby", "vllm_share")
    assert levers.GIVEN_UP_ORDER == (
        "vllm_share",
        "prompts_per_step",
        "batch",
        "checkpointing",
        "standby",
        "4-bit",
        "lora_rank",
        "generations",
        "completion_length",
        "generator",
    )
    assert (levers.GENERATIONS_AMBITION, levers.MIN_GENERATIONS, levers.MAX_GENERATIONS) == (8, 4, 16)
    docs = (ROOT / "docs" / "planning.md").read_text(encoding="utf-8")
    for lever in levers.GIVEN_UP_ORDER:
        assert f"`{lever}`" in docs, lever
    order = [docs.index(f"`{lever}`") for lever in levers.GIVEN_UP_ORDER]
    assert order == sorted(order), "docs/planning.md lists the levers in another order"


def test_quality_orders_learning_before_prompts_per_hour():
    p = load_profile(PROFILES / "gpu-16gb-gemma3-1b.yaml")  # written whole: a 768-token cap
    shorter = p.model_copy(update={"max_completion_length": 512})
    assert levers.quality_key(p) > levers.quality_key(shorter)
    # a cap above what the task needs counts as the need: prompts per hour decide between them
    assert levers.quality_key(p, need=512)[0] == levers.quality_key(shorter, need=512)[0]


# ---------------------------------------------------------------------------------------------------
# The card table


def test_every_card_the_project_names_is_in_the_table_with_its_sources():
    from benchmarks.fit_grid import CARDS as GRID

    records = yaml.safe_load((ROOT / "benchmarks" / "published_step_times.yaml").read_text(encoding="utf-8"))
    names = {name for _, name in GRID} | {r["card"] for r in records if r.get("card")}
    names |= {
        "Tesla T4",
        "Tesla V100-SXM2-16GB",
        "NVIDIA L4",
        "NVIDIA A10G",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA GeForce RTX 3090",
        "RTX 4090",
        "NVIDIA L40S",
        "NVIDIA H200",
    }
    for name in names:
        assert card_facts(name) is not None, name
    for card in CARDS:
        assert card.bandwidth_gb_s > 0 and card.tflops_16bit > 0 and len(card.capability) == 2
        assert all(key in SOURCES for key in card.sources), card.name


def test_a_named_card_below_turing_gets_no_gpu_rung(capsys):
    m = machine(32, "Tesla V100-SXM2-32GB")
    assert m.primary is None and "compute capability 7.0" in m.message
    code, out, err = run(capsys, "plan", "--gpu-memory", "32", "--gpu-name", "Tesla V100-SXM2-32GB", "--json")
    plan = json.loads(out)
    assert plan["gpu"]["device"] == "cpu"
    assert all(not c["profile"].startswith("gpu-") for c in plan["candidates"] if c["fits"])
    code, out, err = run(capsys, "fit", "Qwen/Qwen3-4B", "--gpu-memory", "32", "--gpu-name", "Tesla V100-SXM2-32GB")
    assert code == 2 and "compute capability 7.0" in err


def test_an_unknown_card_takes_the_stated_default_and_the_plan_says_so(capsys):
    code, out, _ = run(capsys, "plan", "--gpu-memory", "24", "--gpu-name", "my lab card", "--json")
    plan = json.loads(out)
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    assert chosen["speed"]["card_known"] is False and chosen["speed"]["card"] == DEFAULT.name
    assert any("not in the card table" in note for note in chosen["speed"]["notes"])


# ---------------------------------------------------------------------------------------------------
# plan --json and fit show the predicted step


def test_plan_json_candidates_carry_their_speed(capsys):
    code, out, _ = run(
        capsys,
        "plan",
        "--gpu-memory",
        "24",
        "--gpu-name",
        "NVIDIA GeForce RTX 4090",
        "--set",
        "model=Qwen/Qwen3-4B",
        "--json",
    )
    plan = json.loads(out)
    assert code == 0 and plan["chosen"].startswith("fit-qwen3-4b-")
    for cand in plan["candidates"]:
        speed = cand["speed"]
        assert {"step_s", "generation_s", "training_s", "prompts_per_hour", "limited_by"} <= set(speed)
        assert speed["step_s"] == pytest.approx(
            speed["generation_s"] + speed["training_s"] + speed["sync_s"] + speed["fixed_s"], abs=0.01
        )
        assert speed["prompts_per_hour"] == pytest.approx(
            3600 * cand["settings"]["effective_batch"] / cand["settings"]["num_generations"] / speed["step_s"], rel=0.01
        )
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    assert chosen["speed"]["limited_by"] in ("memory", "objective", "cap")
    assert chosen["speed"]["learning_per_hour"] == pytest.approx(
        chosen["speed"]["updates_per_hour"]
        * chosen["speed"]["prompts_per_step"]
        / (chosen["speed"]["prompts_per_step"] + chosen["speed"]["critical_batch"]),
        rel=0.01,
    )


def test_fit_json_gives_the_objective_and_what_limits_it(capsys):
    code, out, _ = run(capsys, "fit", "Qwen/Qwen3-4B", "--gpu-memory", "15", "--gpu-name", "Tesla T4", "--json")
    data = json.loads(out)
    assert code == 0 and data["objective"] == levers.OBJECTIVE
    assert data["prompts_per_hour"] == pytest.approx(data["speed"]["prompts_per_hour"], rel=0.01)
    assert data["speed"]["limited_by"] in ("memory", "objective", "cap")
    assert data["ambition"]["completion_basis"].startswith("gsm8k: reference solutions")


# ---------------------------------------------------------------------------------------------------
# The task's completion cap and expected length


def test_shipped_task_figures_are_the_data_s_own():
    rows = arithmetic.generate(5000, seed=0)
    again = measure("arithmetic", [r["question"] for r in rows], [r["answer_text"] for r in rows], "")
    assert (round(again.question_mean_chars, 1), round(again.answer_mean_chars, 1), again.answer_p99_chars) == (
        ARITHMETIC.question_mean_chars,
        ARITHMETIC.answer_mean_chars,
        ARITHMETIC.answer_p99_chars,
    )
    if not (GSM8K_DIR / "train.jsonl").is_file():
        pytest.skip("GSM8K data not found at ../shared/data/gsm8k next to the repository")
    data = [json.loads(line) for line in (GSM8K_DIR / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    again = measure("gsm8k", [r["question"] for r in data], [r["answer"] for r in data], "")
    assert again.rows == GSM8K.rows and again.answer_p99_chars == GSM8K.answer_p99_chars
    assert round(again.answer_mean_chars, 1) == GSM8K.answer_mean_chars
    assert round(again.question_mean_chars, 1) == GSM8K.question_mean_chars


def test_the_cap_follows_the_task_and_the_tokenizer_and_a_pin_wins():
    rung = load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml")
    llama = completion_plan(rung, resolve(rung.model))
    qwen = completion_plan(rung.model_copy(update={"model": "Qwen/Qwen3-4B"}), resolve("Qwen/Qwen3-4B"))
    # Qwen's tokenizer splits numbers into digits: more tokens for the same solutions
    assert llama.cap < qwen.cap <= 1024 and llama.expected < qwen.expected
    assert 150 <= llama.expected <= 300  # published GSM8K runs log mean completions of 157-203 tokens
    assert llama.cap % 128 == 0 and "max_completion_length" in rung.derived  # the rung leaves it to the task
    pinned = completion_plan(rung, resolve(rung.model), {"max_completion_length"})
    assert pinned.cap == rung.max_completion_length
    own = completion_plan(rung.model_copy(update={"expected_completion_length": 99}), resolve(rung.model))
    assert own.expected == 99


def test_users_data_with_worked_solutions_is_measured_else_a_default(tmp_path):
    worked = tmp_path / "worked.jsonl"
    worked.write_text(
        "\n".join(json.dumps({"question": "q" * 50, "answer": "step " * 60 + "#### 3"}) for _ in range(20))
    )
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(json.dumps({"question": "q", "answer": "3"}) for _ in range(20)))
    arch = resolve("Qwen/Qwen3-4B")
    rung = load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml")
    measured = reference_lengths(str(worked))
    assert measured.worked and measured.answer_mean_chars == 306
    plan = completion_plan(rung.model_copy(update={"dataset": str(worked), "model": "Qwen/Qwen3-4B"}), arch)
    assert plan.cap < DEFAULT_CAP and "worked.jsonl" in plan.basis
    default = completion_plan(rung.model_copy(update={"dataset": str(short), "model": "Qwen/Qwen3-4B"}), arch)
    assert default.cap == DEFAULT_CAP and "not worked solutions" in default.basis


# ---------------------------------------------------------------------------------------------------
# vLLM's engine as unsloth_zoo sizes it


def _unsloth_source() -> str:
    spec = importlib.util.find_spec("unsloth_zoo")
    return Path(list(spec.submodule_search_locations)[0], "vllm_utils.py").read_text(encoding="utf-8")


def test_engine_tiers_are_unsloth_zoos_own():
    source = _unsloth_source()
    load_vllm = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "load_vllm")
    text = ast.unparse(load_vllm)
    found = re.findall(
        r"memory_left_for_kv_cache_gb (<=|>) (\d+):\s*\(?max_num_batched_tokens, approx_max_num_seqs\)?"
        r" = \(?(\d+), (\d+)\)?",
        text,
    )
    assert found, "unsloth_zoo's engine tiers were not found in load_vllm"
    tiers = [(float("inf") if sign == ">" else float(gib), int(tokens), int(seqs)) for sign, gib, tokens, seqs in found]
    assert tiers == list(UNSLOTH_ENGINE_TIERS)
    # and the graph reserve taken off the share before the tiers
    estimate_fn = next(
        n
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef) and n.name == "approximate_vllm_memory_usage"
    )
    body = ast.unparse(estimate_fn)
    graphs = int(re.search(r"num_cuda_graphs = (\d+)", body).group(1))
    per_graph = int(re.search(r"per_graph_estimate = hd \* n_layers \* (\d+)", body).group(1))
    floor = float(re.search(r"max\(_cuda_graph_overhead, int\(([\d.]+) \* 1024 \*\* 3\)\)", body).group(1))
    cap = float(re.search(r"min\(_cuda_graph_overhead, int\(([\d.]+) \* 1024 \*\* 3\)\)", body).group(1))
    assert UNSLOTH_GRAPH_RESERVE == (graphs * per_graph, floor, cap)


def test_the_engine_gets_the_sequences_the_plan_sized():
    """The solver sets max_num_seqs so that a step's completions generate in as few waves as the share allows,
    and the estimate sizes vLLM's workspace for exactly that engine."""
    result = solve.fit(
        load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml").model_copy(update={"model": "Qwen/Qwen2.5-1.5B-Instruct"}),
        machine(40, "A100 40GB").primary,
    )
    p = result.profile
    assert p.vllm_max_num_seqs >= p.num_generations
    assert result.estimate.vllm_engine["max_num_seqs"] == p.vllm_max_num_seqs
    assert result.speed.sequences_at_once == min(p.vllm_max_num_seqs, p.effective_batch)
    from trainer.backends import from_pretrained_kwargs

    assert from_pretrained_kwargs(p, p.model, None)["max_num_seqs"] == p.vllm_max_num_seqs


def test_unsloth_passes_max_num_seqs_to_its_engine():
    loader = (
        Path(list(importlib.util.find_spec("unsloth").submodule_search_locations)[0]) / "models" / "loader.py"
    ).read_text(encoding="utf-8")
    passed = re.search(r"_VLLM_ENGINE_KWARGS = \(([^)]*)\)", loader).group(1)
    assert '"max_num_seqs"' in passed
    load_vllm = next(
        n for n in ast.walk(ast.parse(_unsloth_source())) if isinstance(n, ast.FunctionDef) and n.name == "load_vllm"
    )
    assert "max_num_seqs" in [a.arg for a in load_vllm.args.args + load_vllm.args.kwonlyargs]


# ---------------------------------------------------------------------------------------------------
# Memory: published figures, the margins, standby


def test_published_notebooks_phi4_fits_and_qwen3_is_within_its_bracket():
    from benchmarks.published_memory import QWEN3_TOLERANCE, T4_TORCH_TOTAL_GIB, t4_runs, workspace_rows

    runs = t4_runs()
    assert runs["phi4"]["fits"], runs["phi4"]["reason"]
    assert runs["qwen3"]["within"], runs["qwen3"]["estimate_gib"]
    assert (1 - QWEN3_TOLERANCE) * T4_TORCH_TOTAL_GIB <= runs["qwen3"]["estimate_gib"] <= T4_TORCH_TOTAL_GIB
    for row in workspace_rows():  # vLLM's workspace against each start-up log
        assert 0.8 <= row["ratio"] <= 1.25, row


def test_an_estimate_alone_keeps_headroom_a_measurement_may_pack_close():
    m = machine(24.0)
    gpu = m.primary
    usable = gpu.free_gib - 1.2
    assert estimate_limit(usable) == pytest.approx(min(ESTIMATE_MAX_USE * usable, usable - 0.5))
    profile = load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml")
    est = estimate(profile, resolve(profile.model), gpu)
    est.total_gib = 0.95 * usable  # inside usable memory, past what an estimate alone may use
    room = _Room(gpu, m, 1.2)
    fits, reason = _judge(est, room)
    assert not fits and reason.startswith("too close")
    fits, reason = _judge(est, room, headroom_refuses=False)  # a profile the user named
    assert fits and "it may run out of memory" in reason

    class Measured:
        need_gib = 0.97 * usable

        def text(self):
            return "measured here"

    assert _judge(est, room, Measured())[0]


def test_standby_is_never_chosen_with_4bit_and_a_pinned_one_says_why(capsys):
    for model, gib, name in (
        ("Qwen/Qwen3-8B", 16.0, "NVIDIA GeForce RTX 4060 Ti"),
        ("microsoft/phi-4", 15.0, "Tesla T4"),
        ("Qwen/Qwen3-4B", 24.0, "NVIDIA GeForce RTX 4090"),
    ):
        p = solve.fit(
            load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml").model_copy(update={"model": model}),
            machine(gib, name).primary,
        ).profile
        assert not (p.vllm_standby and p.load_in_4bit), (model, gib)
    code, out, _ = run(
        capsys, "fit", "Qwen/Qwen3-4B", "--gpu-memory", "24", "--set", "vllm_standby=true", "--set", "load_in_4bit=true"
    )
    assert code == 0 and "unsloth #3542" in out


# ---------------------------------------------------------------------------------------------------
# The step-time model against published runs


def test_step_time_model_holds_its_measured_error_on_published_runs():
    from benchmarks.published_step_times import DATA, clean, predicted

    records = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    assert len(records) >= 20
    ratios, clean_ratios = {}, []
    for record in records:
        if not record.get("card") or record.get("num_generations") is None:
            continue
        ratio = predicted(record)["predicted_s"] / record["seconds_per_step"]
        ratios[record["id"]] = ratio
        if clean(record):
            clean_ratios.append(max(ratio, 1 / ratio))
    factors = sorted(max(r, 1 / r) for r in ratios.values())
    assert factors[len(factors) // 2] <= 1.3  # all records: the median factor off (docs/planning.md)
    assert factors[-1] <= 3.0  # and the worst
    # gpt-oss generated by transformers 4.56 through every expert: within 1.35x of each measurement and not above it
    # by more than the model's own noise (the reward's code runs, not predicted, only add)
    oss = [r for name, r in ratios.items() if "gpt-oss" in name]
    assert len(oss) == 8 and all(0.75 <= r <= 1.05 for r in oss)
    assert sorted(clean_ratios)[len(clean_ratios) // 2] <= 1.3  # the clean ones
    # the cleanest card-to-card pair: the same 4-bit run on a T4 and an A100 80GB, measured 4.83x apart
    pair = ratios["unsloth-openenv-gpt-oss-20b-2048-t4"] / ratios["unsloth-openenv-gpt-oss-20b-2048-a100-80"]
    assert 0.6 <= pair <= 1.4


def test_a_longer_completion_and_a_slower_card_take_longer():
    rung = load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml")
    arch = resolve(rung.model)
    fast, slow = machine(24, "NVIDIA GeForce RTX 4090").primary, machine(15, "Tesla T4").primary
    assert predict(rung, arch, slow).step_s > predict(rung, arch, fast).step_s
    longer = rung.model_copy(update={"expected_completion_length": 600})
    shorter = rung.model_copy(update={"expected_completion_length": 150})
    assert predict(longer, arch, fast).generation_s > predict(shorter, arch, fast).generation_s


# ---------------------------------------------------------------------------------------------------
# Measured seconds per step beside the prediction: the attempt, summary, attempts.jsonl, the ledger


def test_measured_step_leaves_out_the_first_and_sets_the_prediction_beside_it():
    rows = [{"step_time": 30.0, "completion_length": 300}] + [
        {"step_time": t, "completion_length": 200} for t in (10.0, 12.0, 11.0)
    ]
    timing = measured_step(rows, predicted_s=10.0)
    assert timing["step_s"] == 11.0 and timing["first_step_s"] == 30.0 and timing["steps_timed"] == 3
    assert timing["completion_mean"] == 200 and timing["ratio"] == 1.1
    assert measured_step([]) is None
    assert calibration({"generation_s": 6.0, "step_s": 12.0}, {"generation_s": 4.0, "step_s": 10.0}) == {
        "generation_s": 1.5,
        "step_s": 1.2,
    }


def test_the_timers_gpu_check_calls_time_a_wave_and_a_step_without_a_gpu():
    wave = time_generation_wave(lambda: [10, 20, 30], repeats=2)
    assert wave["sequences"] == 3 and wave["tokens"] == 60 and wave["longest"] == 30 and wave["seconds"] >= 0
    calls = []
    step = time_training_step(lambda: calls.append(1), repeats=3, warmups=1)
    assert len(calls) == 4 and step["repeats"] == 3


def test_outcome_and_attempt_record_carry_the_measured_step():
    timing = {"step_s": 11.0, "predicted_step_s": 10.0, "steps_timed": 3}
    outcome = Outcome.from_dict(json.loads(Outcome(status="ok", timing=timing).to_json()))
    assert outcome.timing == timing
    record = AttemptRecord(attempt=1, profile="p", status="ok", predicted_step_s=10.0, step_s=11.0, timing=timing)
    data = AttemptRecord.from_dict(json.loads(json.dumps(record.to_dict()))).to_dict()
    assert (data["predicted_step_s"], data["step_s"], data["timing"]) == (10.0, 11.0, timing)


def test_the_ledger_keeps_a_shapes_step_time_and_the_next_plan_uses_it():
    m = machine(24.0, "NVIDIA GeForce RTX 4090")
    profile = load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml")
    entry = ledger_record.make_entry(
        profile,
        m,
        status="ok",
        peak_gib=18.0,
        timing={"step_s": 42.5, "predicted_step_s": 30.0, "completion_mean": 180.0},
    )
    assert (entry.step_s, entry.predicted_step_s, entry.completion_mean) == (42.5, 30.0, 180.0)
    again = Entry.from_dict(json.loads(entry.to_json()))
    measured = measured_for([again], profile, m)
    assert measured.step_s == 42.5
    plan = make_plan(PlanRequest([profile], m, measurements=[again], derive=False))
    assert plan.candidates[0].speed.step_s == 42.5 and plan.candidates[0].speed.measured_s == 42.5
    with pytest.raises(ValueError, match="step_s"):
        Entry.from_dict({**json.loads(entry.to_json()), "step_s": -1})


# ---------------------------------------------------------------------------------------------------
# fit's pinned values (issue 34, items 2 and 7)

PINS = [
    ["gradient_checkpointing=false"],
    ["num_generations=6"],
    ["lora_rank=16"],
    ["load_in_4bit=true"],
    ["max_completion_length=512"],
    ["max_seq_length=1000"],
    ["per_device_train_batch_size=2"],
    ["gpu_memory_utilization=0.5"],
    ["vllm_standby=true"],
    ["fast_inference=false"],
    ["max_prompt_length=200"],
    ["expected_completion_length=150"],
    ["vllm_max_num_seqs=12"],
    ["lora_alpha=8"],
    ["beta=0.04"],
    ["optim=adamw_torch"],
    ["gradient_accumulation_steps=4"],
    [
        "num_generations=4",
        "lora_rank=8",
        "gradient_checkpointing=true",
        "max_completion_length=384",
        "load_in_4bit=false",
        "per_device_train_batch_size=4",
    ],
]


@pytest.mark.parametrize("pins", PINS, ids=lambda pins: ",".join(pins))
def test_a_profile_printed_by_fit_loads_back_with_exactly_its_figures(capsys, tmp_path, pins):
    card = ["--gpu-memory", "24", "--gpu-name", "NVIDIA GeForce RTX 4090"]
    sets = [a for pin in pins for a in ("--set", pin)]
    code, out, err = run(capsys, "fit", "Qwen/Qwen3-4B", *card, *sets)
    assert code == 0, err
    need = re.search(r"^# fits: ([\d.]+) of [\d.]+ GiB usable", out, re.M).group(1)
    predicted = re.search(r"^# predicted: ([\d.]+) s per step", out, re.M).group(1)
    path = tmp_path / "fit.yaml"
    path.write_text(out)
    profile = load_profile(path)
    for pin in pins:  # a pinned key is never moved
        key, _, value = pin.partition("=")
        assert (
            getattr(profile, key)
            == profile_from_dict({**profile.to_dict(), key: yaml.safe_load(value)}, "<pin>").model_dump()[key]
        ), pin
    code, out, err = run(capsys, "plan", "--profile", str(path), *card, "--json")
    plan = json.loads(out)
    cand = plan["candidates"][0]
    assert code == 0 and cand["fits"] and plan["chosen"] == profile.name
    # the same figures, to the precision each was printed with (the JSON rounds to 3 decimals itself)
    assert cand["estimate"]["total_gib"] == pytest.approx(float(need), abs=0.0051)
    assert cand["speed"]["step_s"] == pytest.approx(float(predicted), abs=0.051)


@pytest.mark.parametrize(
    "pin, words",
    [
        ("num_generations=4.5", "expected a whole number"),
        ("max_completion_length='512'", "expected a whole number"),
        ("load_in_4bit=maybe", "expected true or false"),
        ("device=cpu", "fit plans a configuration for a GPU"),
        ("num_gpus=2", "needs 2 GPUs, the plan has 1"),
        ("vllm_mode=bogus", "is not one of"),
        ("gradient_checkpointing=sometimes", "is not one of"),
    ],
)
def test_fit_refuses_a_pin_it_cannot_take_with_exit_2(capsys, pin, words):
    code, out, err = run(capsys, "fit", "Qwen/Qwen3-4B", "--gpu-memory", "24", "--set", pin)
    assert code == 2 and words in err and "Traceback" not in err, err


def test_fit_on_pinned_batches_that_cannot_divide_exits_2_like_train(capsys):
    code, _, err = run(
        capsys,
        "fit",
        "Qwen/Qwen3-4B",
        "--gpu-memory",
        "16",
        "--set",
        "num_generations=3",
        "--set",
        "per_device_train_batch_size=4",
        "--set",
        "gradient_accumulation_steps=1",
    )
    assert code == 2 and "whole groups" in err
    code, _, err = run(capsys, "fit", "Qwen/Qwen3-4B", "--gpu-memory", "16", "--set", "num_generations=4096")
    assert code == 2 and "num_generations" in err and "without them a configuration does" in err
    # batches that can hold whole groups at some prompts per step: a correct result, every group whole
    code, out, err = run(
        capsys,
        "fit",
        "Qwen/Qwen3-4B",
        "--gpu-memory",
        "16",
        "--set",
        "num_generations=3",
        "--set",
        "per_device_train_batch_size=4",
        "--json",
    )
    p = json.loads(out)["profile"]
    assert code == 0, err
    assert p["num_generations"] == 3 and p["per_device_train_batch_size"] == 4
    assert (p["per_device_train_batch_size"] * p["gradient_accumulation_steps"]) % 3 == 0


def test_a_pinned_split_is_the_one_fitted(capsys):
    code, out, err = run(
        capsys, "fit", "Qwen/Qwen3-4B", "--gpu-memory", "24", "--gpus", "2", "--set", "vllm_mode=server", "--json"
    )
    assert code == 0, err
    p = json.loads(out)["profile"]
    assert p["vllm_mode"] == "server" and p["num_gpus"] == 1 and p["vllm_server_gpus"] == 1


def test_the_attempt_is_told_the_predicted_step_and_reads_it_back():
    from contract.attempt import predicted_step_from_env
    from contract.environment import ENV_PREDICTED_STEP_S
    from launcher.run.supervise import Supervisor

    profile = load_profile(PROFILES / "gpu-24gb-llama3.1-8b.yaml")
    env = Supervisor._environment(profile, 19.5, 42.25)
    assert predicted_step_from_env(env) == 42.25
    assert ENV_PREDICTED_STEP_S not in Supervisor._environment(profile, 19.5, None)
