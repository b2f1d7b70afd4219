"""Planning past one GPU: ZeRO's division of model states, per-GPU estimates of the shipped multi-GPU tiers
checked against hand computations, which profiles are candidates for how many GPUs, and the new keys' rules."""

import json
import re
from pathlib import Path

import pytest

from contract.errors import ProfileError, UsageError
from launcher.card.detect import GpuInfo, Machine, detect_machine
from launcher.memory.estimate import GIB, estimate, zero_model_state_bytes
from launcher.plan.cards import fit_table
from launcher.plan.choose import make_plan
from launcher.plan.request import PlanRequest
from profiles.catalog import resolve
from profiles.load import load_profile, load_profiles, profile_from_dict
from support.cli import train_py as run_cli

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "profiles"
MULTI = sorted(PROFILES.glob("multi-*.yaml"))


def cards(total, count, free=None):
    gpus = [
        GpuInfo(f"card {i}", total, total if free is None else free, 0.0, None, None, None, i, "what-if")
        for i in range(count)
    ]
    return Machine(gpus, f"{count} x {total} GiB", 64.0, 60.0)


# ---------------------------------------------------------------------------------------------------
# ZeRO: the paper's own example (Rajbhandari et al. 2019, figure 1): a 7.5B-parameter model, mixed-precision
# Adam (K = 12: fp32 master weights + two fp32 moments), 64 GPUs: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB per GPU.


@pytest.mark.parametrize("stage, gigabytes", [(1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_stages_reproduce_the_papers_example(stage, gigabytes):
    parts = zero_model_state_bytes(7_500_000_000, "adamw_torch", 64, stage, lora=True)
    assert sum(parts.values()) / 1e9 == pytest.approx(gigabytes, abs=0.05)


def test_zero_stage_divides_exactly_what_the_paper_says():
    psi, n = 1_000_000, 8
    one = zero_model_state_bytes(psi, "adamw_torch", n, 1, lora=True)
    two = zero_model_state_bytes(psi, "adamw_torch", n, 2, lora=True)
    three = zero_model_state_bytes(psi, "adamw_torch", n, 3, lora=True)
    assert (one["lora"], one["gradients"], one["optimizer"]) == (2 * psi, 2 * psi, 12 * psi / n)
    assert (two["lora"], two["gradients"], two["optimizer"]) == (2 * psi, 2 * psi / n, 12 * psi / n)
    assert (three["lora"], three["gradients"], three["optimizer"]) == (2 * psi / n, 2 * psi / n, 12 * psi / n)
    # stage 0 is DDP: PEFT's fp32 adapters, fp32 gradients and their flat bucket copy, 8-bit-free AdamW
    ddp = zero_model_state_bytes(psi, "adamw_torch", n, 0, lora=True)
    assert ddp == {"lora": 4 * psi, "gradients": 4 * psi, "gradient_buckets": 4 * psi, "optimizer": 8 * psi}


# ---------------------------------------------------------------------------------------------------
# The shipped tiers against hand computations


def test_2x24_plan_by_hand():
    """Llama-3.1-8B, 16-bit, LoRA 32, training on one 24 GiB card, vLLM server on the other."""
    result = run_cli("--auto", "--dry-run", "--json", "--gpu-memory", "24", "--gpus", "2")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["gpu"]["count"] == 2
    assert out["chosen"] == "multi-2x24gb-llama3.1-8b"
    verdicts = {c["profile"]: c for c in out["candidates"]}
    assert not verdicts["multi-4x80gb-qwen2.5-14b"]["fits"] and not verdicts["multi-8x80gb-qwen2.5-14b"]["fits"]
    cand = next(c for c in out["candidates"] if c["profile"] == "multi-2x24gb-llama3.1-8b")
    assert (cand["world_size"], cand["zero_stage"], cand["gpus"], cand["vllm_mode"]) == (1, 0, 2, "server")
    comp = cand["estimate"]["components"]

    # parameters: 32 blocks of q 4096x4096, k and v 4096x1024, o 4096x4096, three MLP 4096x14336;
    # untied embeddings and lm_head 128256 x 4096; norms 2 x 4096 per block + 4096
    block = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336
    params = 32 * block + 2 * 128256 * 4096 + 32 * 2 * 4096 + 4096
    assert params == 8_030_261_248
    lora = 32 * 32 * ((4096 + 4096) * 2 + (4096 + 1024) * 2 + (4096 + 14336) * 2 + (14336 + 4096))
    assert lora == 83_886_080
    seq = 256 + 1024
    tokens = 2 * seq  # per-device batch x sequence
    # per token, one block keeps: two fp32 norm inputs; q, repeated k and v, the attention output (16-bit);
    # an fp32 log-sum-exp per head; a 16-bit mask row; gate, up, act(gate); PEFT's copy of each adapted
    # layer's input (six of width 4096, down_proj's 14336). The recompute adds fp32 input casts and the
    # block's input and output gradients.
    block_kept = 4 * 2 * 4096 + 2 * 4 * 4096 + 4 * 32 + 2 * seq + 2 * 3 * 14336 + 2 * (6 * 4096 + 14336)
    recompute_extra = 8 * 14336 + 2 * 4096
    # one 4096-token x 32768-vocabulary 16-bit tile, the 2048 scored hidden states (16-bit, fp32 gradient,
    # its 16-bit cast) and 8 fp32 statistics per token
    head = 2 * 2048 * 32768 + 2048 * 4096 * 8 + 2048 * 4 * 8
    by_hand = {
        "weights": params * 2,  # 16-bit, counted once (no vLLM on this GPU)
        "lora": lora * 4,
        "gradients": lora * 4,  # PEFT's fp32 adapters and their gradients
        "optimizer": lora * 2,  # adamw_8bit: two 8-bit moments
        "activations": tokens * (block_kept + recompute_extra),  # the one block the backward recomputes
        "activation_checkpoints": tokens * (6 * 4096 + seq) + 2 * lora + 32 * tokens * 4096 * 2,
        "logits": head,  # TRL 1.15's chunked LM head
        "peak_overlap": -head,  # the head and the recompute run one after the other
        "cuda_context": 0.75 * GIB,
        "collective_buffers": 0.25 * GIB,
    }
    for key, value in by_hand.items():
        assert comp[key] == pytest.approx(value / GIB, abs=1e-3), key
    assert "gradient_buckets" not in comp  # one training process: no DDP
    total = sum(by_hand.values()) / GIB
    assert total == pytest.approx(18.428, abs=1e-3)
    assert cand["estimate"]["total_gib"] == pytest.approx(total, abs=2e-3)
    assert cand["fits"] and "18.43 of 22.80 GiB usable" in cand["reason"]  # 24 - 5% margin (1.2)

    # the server GPU: 0.9 x 24 GiB reserved by vLLM, plus its CUDA context
    server = cand["estimate"]["server"]
    # vLLM's own defaults (256 sequences, 8192 prefill tokens): non-torch memory, CUDA graphs (24 bytes per
    # sequence x layer x hidden unit), the profiling forward and the sampler's fp32 tensors (36 bytes per sequence x
    # vocabulary entry), as vLLM's start-up logs show them (benchmarks/published_memory.py)
    workspace = 0.1 * GIB + 24 * 256 * 32 * 4096 + 8192 * 2 * (4096 + 2 * 14336) + 256 * 128256 * 36
    assert server["components"]["weights"] == pytest.approx(params * 2 / GIB, abs=1e-3)
    assert server["components"]["vllm_workspace"] == pytest.approx(workspace / GIB, abs=1e-3)
    assert server["components"]["kv_cache"] == pytest.approx(21.6 - (params * 2 + workspace) / GIB, abs=1e-3)
    assert server["total_gib"] == pytest.approx(21.6 + 0.75, abs=1e-3)
    assert server["vllm_problem"] is None


def test_8x80_plan_by_hand():
    """Qwen2.5-14B, 16-bit, LoRA 64: six GPUs train with DDP, two serve vLLM."""
    result = run_cli("--auto", "--dry-run", "--json", "--gpu-memory", "80", "--gpus", "8")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["gpu"]["count"] == 8
    assert out["chosen"] == "multi-8x80gb-qwen2.5-14b"
    cand = out["candidates"][0]
    assert cand["profile"] == "multi-8x80gb-qwen2.5-14b"
    assert (cand["world_size"], cand["zero_stage"], cand["gpus"]) == (6, 0, 8)
    est = cand["estimate"]
    assert (est["world_size"], est["zero_stage"], est["per"]) == (6, 0, "gpu")
    comp = est["components"]

    block = 5120 * 5120 * 2 + 5120 * 1024 * 2 + 3 * 5120 * 13824
    params = 48 * block + 2 * 152064 * 5120 + 48 * 2 * 5120 + 5120
    assert params == 14_769_689_600
    psi = 48 * 64 * ((5120 + 5120) * 2 + (5120 + 1024) * 2 + (5120 + 13824) * 2 + (13824 + 5120))
    assert psi == 275_251_200
    seq = 256 + 2048
    tokens = 4 * seq
    block_kept = 4 * 2 * 5120 + 2 * 4 * 5120 + 4 * 40 + 2 * seq + 2 * 3 * 13824 + 2 * (6 * 5120 + 13824)
    by_hand = {
        "weights": params * 2,  # DDP keeps every parameter on every GPU
        "lora": 4 * psi,  # PEFT's adapters in fp32 ...
        "gradients": 4 * psi,  # ... their fp32 gradients ...
        "gradient_buckets": 4 * psi,  # ... and DDP's flat bucket copy of them
        "optimizer": 2 * psi,  # two 8-bit Adam moments
        "activations": tokens * (block_kept + 8 * 13824 + 2 * 5120),  # the recomputed block, as above
        "activation_checkpoints": tokens * (6 * 5120 + seq) + 2 * psi + 48 * tokens * 5120 * 2,
        "logits": 2 * 4096 * 32768 + 8192 * 5120 * 8 + 8192 * 4 * 8,  # chunked head over 4 x 2048 tokens
        "cuda_context": 0.75 * GIB,
        "collective_buffers": 0.25 * GIB,
    }
    by_hand["peak_overlap"] = -by_hand["logits"]  # the head and the recompute run one after the other
    for key, value in by_hand.items():
        assert comp[key] == pytest.approx(value / GIB, abs=1e-3), key
    total = sum(by_hand.values()) / GIB
    assert total == pytest.approx(40.372, abs=1e-3)
    assert est["total_gib"] == pytest.approx(total, abs=2e-3)
    assert "per training GPU (6 x DDP): fits: 40.37 of 76.00 GiB usable" in cand["reason"]
    assert "on 2 GPU(s)" in cand["reason"]
    # each server GPU: its share, the CUDA context and NCCL's buffers of the tensor-parallel pair
    assert est["server"]["total_gib"] == pytest.approx(0.9 * 80 + 0.75 + 0.25, abs=1e-3)


def test_zero3_divides_the_weights_too():
    base = load_profile(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml").replace(zero_stage=2, optim="adamw_torch")
    gpu = cards(80, 1).gpus[0]
    two = estimate(base, gpu=gpu).components
    three = estimate(base.replace(zero_stage=3), gpu=gpu).components
    psi = 275_251_200
    assert three["weights"] == pytest.approx(two["weights"] / 6, abs=1e-6)
    assert three["lora"] == pytest.approx(2 * psi / 6 / GIB, abs=1e-6)
    # gathered at once: the embedding (152064 x 5120 > one block, > 1e8 live) plus the 5e7 prefetch bucket
    assert three["zero3_gathered"] == pytest.approx(2 * (152064 * 5120 + 50_000_000) / GIB, abs=1e-6)
    zero1 = estimate(base.replace(zero_stage=1), gpu=gpu).components
    assert zero1["gradients"] == pytest.approx(2 * psi / GIB, abs=1e-6)
    assert zero1["optimizer"] == pytest.approx(12 * psi / 6 / GIB, abs=1e-6)


def test_full_fine_tuning_under_zero3_on_8_gpus():
    """Qwen2.5-7B full fine-tuning: 16 bytes per parameter of model states, divided by 8 under ZeRO-3."""
    p = profile_from_dict(
        dict(
            model="Qwen/Qwen2.5-7B-Instruct",
            load_in_4bit=False,
            lora_rank=0,
            num_gpus=8,
            zero_stage=3,
            fast_inference=False,
            optim="adamw_torch",
            gradient_checkpointing="true",
            dataset="arithmetic",
        ),
        "<test>",
    )
    arch = resolve(p.model)
    comp = estimate(p, arch, cards(80, 8).gpus[0]).components
    n = arch.computed_params
    assert comp["weights"] == pytest.approx(2 * n / 8 / GIB, abs=1e-6)
    assert comp["gradients"] == pytest.approx(2 * n / 8 / GIB, abs=1e-6)
    assert comp["optimizer"] == pytest.approx(12 * n / 8 / GIB, abs=1e-6)
    assert comp["lora"] == 0.0


# ---------------------------------------------------------------------------------------------------
# Candidates by GPU count


def test_one_gpu_lists_multi_gpu_profiles_but_never_chooses_them():
    plan = make_plan(PlanRequest(load_profiles(PROFILES), cards(80, 1)))
    multi = [c for c in plan.candidates if c.profile.name.startswith("multi-")]
    assert len(multi) == len(MULTI) == 3
    for cand in multi:
        need = cand.profile.gpus_needed
        assert not cand.fits
        assert (
            cand.reason == f"needs {need} GPUs on this machine, 1 visible (plan for them with --gpus {need} "
            "--gpu-memory GIB)"
        )
        assert cand.estimate.components["weights"] > 0  # still says what each GPU would need
    assert (
        "3 profile(s) need more GPUs than the 1 visible: listed, not chosen (plan for more with --gpus N)" in plan.notes
    )
    assert plan.chosen.name == "gpu-80gb-qwen2.5-14b"


def test_single_gpu_profiles_stay_candidates_on_many_gpus():
    plan = make_plan(PlanRequest(load_profiles(PROFILES), cards(80, 4)))
    verdicts = {c.profile.name: c for c in plan.candidates}
    assert not verdicts["multi-8x80gb-qwen2.5-14b"].fits
    assert verdicts["multi-2x24gb-llama3.1-8b"].fits and verdicts["gpu-80gb-qwen2.5-14b"].fits
    assert plan.chosen.name == "multi-4x80gb-qwen2.5-14b"


def test_a_busy_gpu_decides_for_all_training_gpus():
    machine = cards(24, 2)
    machine.gpus[0].free_gib = 18.0  # another process holds 6 GiB of the first training GPU
    plan = make_plan(PlanRequest([load_profile(PROFILES / "multi-2x24gb-llama3.1-8b.yaml")], machine))
    cand = plan.candidates[0]
    assert not cand.fits
    assert "training GPU: too large: needs 18.43 GiB, 16.80 usable (18.00 free - 1.20 margin)" == cand.reason


def test_one_profile_ladder_without_its_gpus_says_how_many():
    plan = make_plan(PlanRequest([load_profile(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml")], cards(80, 2)))
    assert plan.chosen is None
    assert plan.candidates[0].reason == (
        "needs 8 GPUs on this machine, 2 visible (plan for them with --gpus 8 --gpu-memory GIB)"
    )


def test_server_too_small_names_the_tensor_parallel_that_fits():
    p = load_profile(PROFILES / "multi-2x24gb-llama3.1-8b.yaml").replace(
        model="unsloth/Qwen2.5-14B-Instruct", vllm_server_gpus=2
    )
    plan = make_plan(PlanRequest([p], cards(24, 3)))
    cand = plan.candidates[0]
    assert not cand.fits
    assert cand.reason.startswith("vLLM server GPU too small: 0.9 x 24.0 GiB = 21.60 GiB < weights 27.51")
    assert cand.reason.endswith("vllm_tensor_parallel: 2 would")
    split = make_plan(PlanRequest([p.replace(vllm_tensor_parallel=2)], cards(24, 3))).candidates[0]
    assert split.estimate.server.components["weights"] == pytest.approx(27.511 / 2, abs=1e-3)
    assert split.estimate.server.vllm_problem is None


def test_colocated_vllm_holds_its_own_copy_on_every_gpu():
    p = profile_from_dict(
        dict(
            model="unsloth/Llama-3.2-3B-Instruct",
            load_in_4bit=False,
            num_gpus=2,
            gpu_memory_utilization=0.3,
            gradient_checkpointing="true",
            dataset="arithmetic",
        ),
        "<test>",
    )
    est = estimate(p, gpu=cards(40, 2).gpus[0])
    assert est.components["vllm"] == pytest.approx(0.3 * 40, abs=1e-9)
    assert est.vllm_share_gib == pytest.approx(12.0)
    assert "gradient_buckets" in est.components
    assert est.gpus_needed == 2


def test_cpu_processes_each_need_their_ram():
    p = load_profile(PROFILES / "cpu-tiny-4gen.yaml", ["num_gpus=2"])
    machine = Machine([], "no GPU", 10.0, 2.0)  # 1 GiB margin: 1 GiB usable
    one = make_plan(PlanRequest([load_profile(PROFILES / "cpu-tiny-4gen.yaml")], machine)).candidates[0]
    two = make_plan(PlanRequest([p], machine)).candidates[0]
    each = two.estimate.total_gib
    assert two.estimate.world_size == 2 and 0.5 < each < 1.0
    assert one.fits and one.reason == f"fits: {one.estimate.total_gib:.2f} of 1.00 GiB usable RAM"
    assert not two.fits
    assert two.reason == (
        f"too large: needs {2 * each:.2f} GiB of RAM (2 processes x {each:.2f}), 1.00 usable "
        "(2.00 available - 1.00 margin)"
    )


def test_fit_table_stays_single_gpu():
    rows = fit_table(load_profiles(PROFILES))
    chosen = {r["chosen"] for r in rows} | {f for r in rows for f in r["fallbacks"]}
    assert not any(name and name.startswith("multi-") for name in chosen)


def test_gpus_flag_needs_a_card_size_without_a_driver():
    class NoDriver:
        class NVMLError(Exception):
            pass

        def nvmlInit(self):
            raise self.NVMLError("driver not loaded")

    with pytest.raises(UsageError, match=r"--gpus 2: no GPU found \(fix: add --gpu-memory GIB"):
        detect_machine(what_if_count=2, nvml=NoDriver())
    result = run_cli("--auto", "--dry-run", "--gpus", "0", "--gpu-memory", "24")
    assert result.returncode == 2 and "--gpus 0: must be 1 or more" in result.stderr


def test_machine_count_changes_gpus_needed_per_machine(monkeypatch):
    monkeypatch.setenv("GRPO_NUM_MACHINES", "2")
    monkeypatch.setenv("GRPO_MAIN_ADDRESS", "10.0.0.1")
    p = load_profile(PROFILES / "multi-8x80gb-qwen2.5-14b.yaml")  # 6 training GPUs, 2 server GPUs
    plan = make_plan(PlanRequest([p], cards(80, 5)))  # 3 training GPUs here + the server's 2
    assert plan.candidates[0].fits, plan.candidates[0].reason


# ---------------------------------------------------------------------------------------------------
# The shipped multi-GPU profiles and the new keys


@pytest.mark.parametrize("path", MULTI, ids=lambda p: p.stem)
def test_multi_profile_header_matches_the_estimator(path):
    import re

    text = path.read_text()
    match = re.search(
        r"^# Estimator's peak: ([\d.]+) GiB per training GPU, ([\d.]+) GiB on the vLLM server GPU, "
        r"on (\d+) GiB cards \(`python train.py plan --profile profiles/[^ ]+ --gpu-memory \d+ "
        r"--gpus (\d+)`\)",
        text,
        re.M,
    )
    assert match, "header lacks the estimator's peak"
    train, server, card, count = float(match[1]), float(match[2]), float(match[3]), int(match[4])
    p = load_profile(path)
    assert p.gpus_needed == count
    plan = make_plan(PlanRequest([p], cards(card, count)))
    cand = plan.candidates[0]
    assert cand.fits, cand.reason
    assert cand.estimate.total_gib == pytest.approx(train, abs=0.05)
    assert cand.estimate.server.total_gib == pytest.approx(server, abs=0.05)
    assert re.search(r"^# First lever on OOM: .+", text, re.M)


@pytest.mark.parametrize(
    "keys, key, words",
    [
        (dict(zero_stage=2), "zero_stage", "num_gpus is 1: there is nothing to shard over"),
        (
            dict(device="cpu", fast_inference=False, load_in_4bit=False, optim="adamw_torch", num_gpus=2, zero_stage=1),
            "zero_stage",
            "DeepSpeed ZeRO needs GPUs",
        ),
        (dict(vllm_mode="server", fast_inference=False), "vllm_mode", "fast_inference: false"),
        (dict(num_gpus=2, vllm_standby=True), "vllm_standby", "Unsloth trains on one GPU"),
        (dict(num_gpus=2), "gradient_checkpointing", "needs the single-GPU Unsloth path"),
        (
            dict(vllm_mode="server", vllm_server_gpus=3, vllm_tensor_parallel=2, gradient_checkpointing="true"),
            "vllm_tensor_parallel",
            "vllm_server_gpus (3) is not a multiple of vllm_tensor_parallel (2)",
        ),
        (
            dict(num_gpus=3, vllm_tensor_parallel=2, gradient_checkpointing="true"),
            "vllm_tensor_parallel",
            "num_gpus (3) is not a multiple",
        ),
        (dict(vllm_tensor_parallel=2), "vllm_tensor_parallel", "num_gpus (1) is not a multiple"),
        (dict(zero_stage=4, num_gpus=2), "zero_stage", "4 must be <= 3"),
        (dict(vllm_mode="remote"), "vllm_mode", "'remote' is not one of colocate, server"),
    ],
)
def test_scale_out_rules_name_their_key(keys, key, words):
    data = {"dataset": "arithmetic", **keys}
    with pytest.raises(ProfileError) as info:
        profile_from_dict(data, "<test>")
    assert info.value.key == key
    assert words in str(info.value)


def test_defaults_keep_every_single_gpu_profile_on_the_unsloth_path():
    for p in load_profiles(PROFILES):
        if p.name.startswith("multi-"):
            assert p.distributed and p.device == "cuda"
            continue
        assert (p.num_gpus, p.zero_stage, p.vllm_mode, p.distributed) == (1, 0, "colocate", False)
        assert p.gpus_needed == (1 if p.device == "cuda" else 0)


def test_zero_profile_on_real_gpus_needs_deepspeed_installed(monkeypatch):
    """Found through NVML (not a what-if), a ZeRO profile is chosen only where deepspeed can be imported."""
    import launcher.plan.stages.memory as plan_module

    real = [GpuInfo(f"NVIDIA H100 {i}", 80.0, 80.0, 0.0, (9, 0), "580.65", "13.0", i, "nvml") for i in range(8)]
    machine = Machine(real, "8 x H100", 64.0, 60.0)
    # the shipped 8x80 tier trains with DDP; its ZeRO-2 variant stands for any profile that asks for ZeRO
    profiles = [
        p.replace(zero_stage=2, optim="adamw_torch") if p.name == "multi-8x80gb-qwen2.5-14b" else p
        for p in load_profiles(PROFILES)
    ]

    monkeypatch.setattr(plan_module, "_deepspeed_installed", lambda: False)
    plan = make_plan(PlanRequest(profiles, machine))
    zero = next(c for c in plan.candidates if c.profile.name == "multi-8x80gb-qwen2.5-14b")
    assert not zero.fits
    assert zero.reason.startswith("needs the deepspeed package for ZeRO stage 2")
    assert plan.chosen.name == "multi-4x80gb-qwen2.5-14b"

    monkeypatch.setattr(plan_module, "_deepspeed_installed", lambda: True)
    assert make_plan(PlanRequest(profiles, machine)).chosen.name == "multi-8x80gb-qwen2.5-14b"


# ---------------------------------------------------------------------------------------------------
# Planner and launcher agree on how a profile's GPUs split over machines: a profile the planner marks as
# fitting must be one the launcher starts.


def _grid_profile(num_gpus: int, server: bool):
    return profile_from_dict(
        dict(
            name=f"grid-{num_gpus}-{'server' if server else 'colocate'}",
            model="Qwen/Qwen2.5-0.5B-Instruct",
            load_in_4bit=False,
            num_gpus=num_gpus,
            fast_inference=True,
            vllm_mode="server" if server else "colocate",
            gpu_memory_utilization=0.3,
            gradient_checkpointing="true",
            dataset="arithmetic",
        ),
        "<test>",
    )


def test_planner_never_marks_as_fitting_a_split_the_launcher_refuses(tmp_path, monkeypatch):
    from launcher.card.topology import gpu_assignment, local_gpus_needed
    from launcher.run import distributed as dist

    disagreements, fitting = [], 0
    for machines in range(1, 5):
        env = {"GRPO_NUM_MACHINES": str(machines), "GRPO_MACHINE_RANK": "0", "GRPO_MAIN_ADDRESS": "10.0.0.1"}
        for key in ("GRPO_NUM_MACHINES", "GRPO_MACHINE_RANK", "GRPO_MAIN_ADDRESS", "GRPO_MAIN_PORT"):
            monkeypatch.delenv(key, raising=False)
        for key, value in env.items():
            monkeypatch.setenv(key, value)  # the planner reads the topology from the environment
        for num_gpus in range(1, 17):
            for server in (False, True):
                p = _grid_profile(num_gpus, server)
                fits = make_plan(PlanRequest([p], cards(80, 20))).candidates[0].fits
                fitting += fits
                if not p.distributed:
                    continue  # one plain process: no split, nothing for the launcher to refuse
                try:
                    dist.write_launch_files(p, tmp_path / f"{machines}-{p.name}", env=env)
                except UsageError:
                    if fits:
                        disagreements.append((num_gpus, machines, server))
                    continue
                # where the launcher starts it, the planner counted the GPUs this machine must show
                train, serve = gpu_assignment(p, env=env)
                assert len(train) + len(serve) == local_gpus_needed(p, machines), (num_gpus, machines, server)
    assert disagreements == []
    assert fitting > 60  # the grid is not judged by refusing everything


def test_the_ladder_uses_no_package_the_image_lacks():
    """The image installs wheels only and deepspeed has none, so no shipped profile asks for ZeRO (DDP holds the
    LoRA tiers at about half an 80 GiB card; ZeRO-2 would save under 2.1 GiB per GPU of it)."""
    repo = PROFILES.parent
    lock = (repo / "requirements" / "gpu.lock").read_text().lower()
    dockerfile = (repo / "Dockerfile").read_text().lower()
    assert "deepspeed" not in lock and not re.search(r"install[^\n]*deepspeed", dockerfile)
    multi = [p for p in load_profiles(PROFILES) if p.device == "cuda" and p.num_gpus > 1]
    assert len(multi) >= 2 and all(p.zero_stage == 0 for p in multi)
    gpu = cards(80, 1).gpus[0]
    for p in multi:
        ddp = estimate(p, gpu=gpu).total_gib
        assert ddp < 0.6 * 80
        assert 0 < ddp - estimate(p.replace(zero_stage=2), gpu=gpu).total_gib < 2.1
