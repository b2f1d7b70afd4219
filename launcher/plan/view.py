"""HOW a plan is shown: the ladder table (or its JSON), and which profile common cards get (--fit-table)."""

from __future__ import annotations

import json

from contract.attempt import bf16_capable
from contract.errors import EXIT_OK, EXIT_OUT_OF_MEMORY, UsageError
from launcher.memory.estimate import Estimate
from launcher.card.detect import GpuInfo, Machine
from launcher.plan.choose import GPU_MARGIN_TEXT, HOST_MARGIN_TEXT, Plan, make_plan

# Cards for --fit-table: (name, total GiB as NVML reports it, compute capability)
COMMON_CARDS = (
    ("8 GB card (RTX 3070, 4060)", 8.0, (8, 6)),
    ("12 GB card (RTX 3060, 4070)", 12.0, (8, 6)),
    ("T4 16 GB", 15.0, (7, 5)),
    ("16 GB card (RTX 4060 Ti 16GB, 4080)", 16.0, (8, 9)),
    ("L4 / A10 24 GB", 22.5, (8, 9)),
    ("RTX 3090 / 4090 24 GB", 24.0, (8, 9)),
    ("A100 40GB", 40.0, (8, 0)),
    ("A100 80GB", 80.0, (8, 0)),
    ("H100 80GB", 79.6, (9, 0)),
)


# ---------------------------------------------------------------------------------------------------
# Output

def _console():
    from rich.console import Console
    import os

    console = Console()
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(width=160)  # piped output: wider than rich's 80 columns so the verdicts stay readable
    return console


def _shape(profile) -> str:
    weights = "4-bit" if profile.load_in_4bit else ("fp32" if profile.device == "cpu" else "16-bit")
    tune = f"LoRA {profile.lora_rank}" if profile.uses_lora else "full FT"
    gen = f"vLLM {profile.gpu_memory_utilization:g}" if profile.fast_inference else "HF generate"
    if profile.uses_vllm_server:
        gen = f"vLLM server on {profile.vllm_server_gpus} GPU(s), TP {profile.vllm_tensor_parallel}"
    text = f"{weights}, {tune}, {gen}"
    if profile.num_gpus > 1:
        unit = "processes" if profile.device == "cpu" else "GPUs"
        text += f", {profile.num_gpus} {unit} " + (f"ZeRO-{profile.zero_stage}" if profile.zero_stage else "DDP")
    return text


def _top_components(est: Estimate, n: int = 3) -> str:
    parts = sorted(((v, k) for k, v in est.components.items() if v > 0), reverse=True)[:n]
    return ", ".join(f"{k} {v:.1f}" for v, k in parts)


def print_plan(plan: Plan, as_json: bool = False) -> int:
    """The plan as a table (or one JSON object); 0 when a profile fits, 3 when none does."""
    code = EXIT_OK if plan.chosen is not None else EXIT_OUT_OF_MEMORY
    if as_json:
        print(json.dumps(plan.to_json(), indent=2))
        return code
    from rich.table import Table

    console = _console()
    console.print(plan.machine.message, markup=False, highlight=False)
    for note in plan.notes:
        console.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)  # one line, for grep too
    gpu = plan.machine.primary
    where = "GPU" if gpu else "RAM"
    table = Table(title=f"Ladder (lower rung = tried first); {where} margin {plan.margin_gib:.2f} GiB")
    for column, justify in (("rung", "right"), ("profile", "left"), ("model", "left"), ("set-up", "left"),
                            ("batch x acc / gens / completion", "left"), ("estimate GiB", "right"),
                            ("largest parts (GiB)", "left"), ("verdict", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for cand in plan.candidates:
        p = cand.profile
        chosen = plan.chosen is not None and p is plan.chosen
        verdict = ("[bold green]CHOSEN[/] " if chosen else "") + \
            ("[green]" if cand.fits else "[red]") + _escape(cand.reason) + "[/]"
        table.add_row(str(p.ladder), p.name, p.model.removeprefix("unsloth/"), _shape(p),
                      f"{p.per_device_train_batch_size} x {p.gradient_accumulation_steps} / {p.num_generations} / "
                      f"{p.max_completion_length}",
                      f"{cand.estimate.total_gib:.2f}" if cand.estimate else "-",
                      _top_components(cand.estimate) if cand.estimate else "-", verdict)
    console.print(table)
    console.print(GPU_MARGIN_TEXT if gpu else HOST_MARGIN_TEXT, markup=False, highlight=False)
    if plan.chosen is not None:
        console.print(f"chosen: {plan.chosen.name} ({plan.chosen.source})", markup=False, highlight=False)
    else:
        console.print("nothing fits: no profile of the ladder fits this machine (exit 3); "
                      "try --gpu-memory to see what a larger card would run, or write a smaller profile",
                      markup=False, highlight=False)
    return code


def _escape(text: str) -> str:
    return text.replace("[", r"\[")


def fit_table(profiles, cards=COMMON_CARDS) -> list[dict]:
    """For each card: the profile the ladder gives it (what-if planning, free = total). One card each:
    multi-GPU profiles are left out (plan those with --gpus N)."""
    cuda = [p for p in profiles if p.device == "cuda" and p.gpus_needed == 1]
    if not cuda:
        raise UsageError("--fit-table: no cuda profiles in the ladder (fix: --profiles-dir with gpu-*.yaml)")
    rows = []
    for name, total, capability in cards:
        gpu = GpuInfo(name=name, total_gib=total, free_gib=total, used_gib=0.0, compute_capability=capability,
                      driver=None, cuda_driver=None, index=0, source="what-if")
        plan = make_plan(cuda, Machine([gpu], f"{name}: what-if", 0.0, 0.0))
        chosen = next((c for c in plan.candidates if c.fits), None)
        rows.append({
            "card": name, "total_gib": total, "precision": "bf16" if bf16_capable(capability) else "fp16",
            "chosen": chosen.profile.name if chosen else None,
            "estimate_gib": round(chosen.estimate.total_gib, 2) if chosen else None,
            "fallbacks": [c.profile.name for c in plan.candidates if c.fits and c is not chosen],
        })
    return rows


def _next_rung(fallbacks: list[str]) -> str:
    if not fallbacks:
        return "-"
    more = len(fallbacks) - 1
    return fallbacks[0] + (f" (+{more} more)" if more else "")


def print_fit_table(profiles, as_json: bool = False, cards=COMMON_CARDS) -> int:
    rows = fit_table(profiles, cards)
    if as_json:
        print(json.dumps({"margin": GPU_MARGIN_TEXT, "cards": rows}, indent=2))
        return EXIT_OK
    from rich.table import Table

    table = Table(title="Which profile fits my card (python train.py --auto picks the first rung that fits)")
    for column, justify in (("card", "left"), ("GiB", "right"), ("precision", "left"), ("profile", "left"),
                            ("estimate GiB", "right"), ("next rung if it fails", "left")):
        table.add_column(column, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(row["card"], f"{row['total_gib']:g}", row["precision"], row["chosen"] or "nothing fits",
                      f"{row['estimate_gib']:.2f}" if row["estimate_gib"] is not None else "-",
                      _next_rung(row["fallbacks"]))
    console = _console()
    console.print(table)
    console.print(GPU_MARGIN_TEXT, markup=False, highlight=False)
    return EXIT_OK
