"""Measure this card in about ten minutes, with nothing to download:

    python benchmarks/gpu_check.py                 # the card torch sees (CPU: the tiny architecture)
    python benchmarks/gpu_check.py --budget-s 300  # stop starting new probes after 5 minutes

For each catalogue architecture the estimator says fits the card, the worst-case probe (trainer/probe.py: one
GRPO step at full batch and completion length, backward and an optimizer step) runs on that architecture
built from its facts with random weights (tiny_model/random_weights.py; memory does not depend on the weights'
values), in a process of its own, on the plain TRL + PEFT path and on Unsloth's path without vLLM, in 16-bit
and, where bitsandbytes imports, 4-bit. Then a rung sized past the card runs through the supervisor: its
genuine CUDA OOM must be read and fallen back from. Each probe's peaks (torch allocated / reserved, the
process's NVML usage) are set against the estimate, component by component, in benchmarks/gpu/<card>.md and
.json (commit them).

Without a GPU it runs the same steps on the tiny architecture on the CPU (the CI run that keeps it working);
the OOM there is injected (GRPO_INJECT_OOM, a genuine torch.OutOfMemoryError) since the host has no CUDA
allocator to exhaust.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contract.attempt import PROFILE_FILE, attempt_environment  # noqa: E402
from contract.environment import (ENV_ESTIMATE_GIB, ENV_INJECT_OOM, ENV_NO_UNSLOTH, ENV_PROBE_ONLY,  # noqa: E402
                                  ENV_RANDOM_WEIGHTS)

OUT_DIR = REPO / "benchmarks" / "gpu"
GPU_BASE = REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml"
CPU_BASE = REPO / "profiles" / "cpu-tiny-8gen.yaml"
BUDGET_S = 600
# Estimate components by what the probe exercises: held before its step (the model), the step itself, and
# what it does not run (generation's KV cache, vLLM).
HELD = ("weights", "lora", "reference", "master_weights", "runtime")  # runtime: the CPU process's libraries
NOT_PROBED = ("generate_kv_cache", "vllm_cache", "vllm_workspace", "standby_reuse", "cuda_context")
# The shape every probe here takes: GRPO's usual single-GPU settings, short enough to run in seconds.
GPU_SHAPE = ["max_seq_length=1024", "max_prompt_length=256", "max_completion_length=512", "lora_rank=16",
             "lora_alpha=16", "num_generations=4", "per_device_train_batch_size=4", "gradient_accumulation_steps=1",
             "fast_inference=false", "gradient_checkpointing=unsloth", "max_steps=1", "save_steps=1000",
             "dataset=arithmetic", "eval_samples=0", "train_samples=200"]
CPU_SHAPE = ["max_completion_length=32", "num_generations=4", "per_device_train_batch_size=8",
             "gradient_accumulation_steps=1", "max_steps=1", "save_steps=1000", "eval_samples=0",
             "train_samples=200"]


def importable(module: str, env: dict | None = None) -> bool:
    """Whether `module` imports in a fresh interpreter (Unsloth and bitsandbytes fail in many ways)."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, env=env, capture_output=True,
                          timeout=300)
    return done.returncode == 0


def card_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "card"


def short_name(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model.rpartition("/")[2]).lower()


# ------------------------------------------------------------------------------------------------ cases

def cases_for(machine, paths: list[str], four_bit: bool, models: list[str] | None) -> list[dict]:
    """Every (architecture, path, precision) to probe, in the order they run: each architecture once on the
    first path before any is repeated, smaller first, so that a short budget still covers the catalogue."""
    from launcher.memory.estimate import estimate
    from launcher.plan.choose import make_plan
    from profiles.catalog import CATALOGUE, TINY
    from profiles.load import load_profile

    gpu = machine.primary
    cuda = gpu is not None
    archs = sorted(CATALOGUE, key=lambda a: a.params) if cuda else [TINY]
    if models:
        archs = [a for a in archs if any(m.lower() in a.name.lower() for m in models)]
    # the CPU trains the tiny model in float32 (trainer.backends.model_dtype)
    precisions = ["16-bit" if cuda else "float32"] + (["4-bit"] if cuda and four_bit else [])
    cases = []
    for round_path in paths:
        for precision in precisions:
            for arch in archs:
                name = f"check-{short_name(arch.name)}-{precision.replace('-', '')}"
                shape = GPU_SHAPE if cuda else CPU_SHAPE
                overrides = [f"name={name}", f"model={arch.name}", f"load_in_4bit={str(precision == '4-bit').lower()}",
                             *shape]
                if cuda and not four_bit:
                    overrides.append("optim=adamw_torch")  # the 8-bit optimizer needs bitsandbytes
                profile = load_profile(GPU_BASE if cuda else CPU_BASE, overrides)
                candidate = make_plan([profile], machine).candidates[0]
                backend = "trl" if round_path == "trl+peft" else "unsloth"
                est = estimate(profile, gpu=gpu, backend=backend if cuda else None)
                cases.append({"name": name, "architecture": arch.name, "params": arch.params, "path": round_path,
                              "precision": precision, "profile": profile, "fits": candidate.fits,
                              "reason": candidate.reason, "estimate": est})
    return cases


# ------------------------------------------------------------------------------------------------ running

def run_probe(case: dict, folder: Path, runner, timeout_s: float) -> dict:
    """The probe of one case in its own process; what it measured (or why it did not)."""
    from launcher.run.attempts import read_result
    from launcher.run.child import attempt_command

    profile = case["profile"]
    attempt_dir = folder / f"{case['name']}-{case['path'].replace('+', '-')}"
    attempt_dir.mkdir(parents=True)
    (attempt_dir / PROFILE_FILE).write_text(profile.to_yaml(), encoding="utf-8")
    env = attempt_environment(profile)
    env[ENV_PROBE_ONLY] = "1"
    env[ENV_RANDOM_WEIGHTS] = "1"
    env[ENV_ESTIMATE_GIB] = repr(float(case["estimate"].total_gib))
    if case["path"] == "trl+peft":
        env[ENV_NO_UNSLOTH] = "1"
    else:
        env.pop(ENV_NO_UNSLOTH, None)
    started = time.time()
    argv = attempt_command(profile, attempt_dir, None, runner.override, env=env)
    returncode, tail = runner.run_argv(argv, attempt_dir, env)
    result = read_result(attempt_dir, returncode, tail, time.time() - started, bool(runner.signals))
    probe = {}
    outcome = attempt_dir / "outcome.json"
    if outcome.is_file():
        probe = json.loads(outcome.read_text(encoding="utf-8")).get("probe") or {}
    backend = _backend_line(attempt_dir / "train.log")
    return {"status": result.status, "error": (result.error or "")[:300] or None, "probe": probe,
            "backend": backend, "seconds": round(time.time() - started, 1)}


def _backend_line(log: Path) -> str | None:
    """Which path the attempt says it trained on ("attempt 'x': unsloth on NVIDIA ...")."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r"attempt '[^']+': (\S+) on ", text)
    return found.group(1) if found else None


def oom_fallback(machine, folder: Path, timeout_s: float) -> dict:
    """A rung sized past the card, through the supervisor (`train.py --profile`): its OOM must be read
    and fallen back from (the shrink halves the batch). On the CPU the OOM is injected in the probe and the
    fallback is the next rung of a two-rung ladder."""
    from launcher.memory.estimate import estimate
    from profiles.catalog import CATALOGUE
    from profiles.load import load_profile

    env = dict(os.environ, **{ENV_RANDOM_WEIGHTS: "1"})
    gpu = machine.primary
    run_dir = folder / "oom-fallback"
    if gpu is None:
        ladder = folder / "oom-ladder"
        ladder.mkdir()
        # the fallback takes only a rung estimated below the one that ran out of memory (even once shrunk)
        smaller = ["num_generations=2", "per_device_train_batch_size=2", "max_completion_length=16"]
        for name, rank, extra in (("check-oom-big", 1, []), ("check-oom-small", 2, smaller)):
            profile = load_profile(CPU_BASE, [f"name={name}", f"ladder={rank}", *CPU_SHAPE, *extra])
            (ladder / f"{name}.yaml").write_text(profile.to_yaml(), encoding="utf-8")
        env[ENV_INJECT_OOM] = "check-oom-big@probe"
        argv = [sys.executable, str(REPO / "train.py"), "--auto", "--profiles-dir", str(ladder),
                "--output-dir", str(run_dir), "--ignore-ledger"]
        planned = {"injected": True}
    else:
        smallest = min(CATALOGUE, key=lambda a: a.params)
        base = [f"model={smallest.name}", *GPU_SHAPE, "load_in_4bit=false", "name=check-oom-oversized",
                "gradient_accumulation_steps=1"]
        # the batch whose estimate passes the card by a quarter while half of it fits
        batch, chosen = 4, None
        while batch <= 4096:
            profile = load_profile(GPU_BASE, [*base, f"per_device_train_batch_size={batch}"])
            need = estimate(profile, gpu=gpu).total_gib
            if need > 1.25 * gpu.total_gib:
                chosen = (profile, need)
                break
            batch *= 2
        if chosen is None:
            return {"status": "not run", "why": "no batch up to 4096 passes the card"}
        path = folder / "check-oom-oversized.yaml"
        path.write_text(chosen[0].to_yaml(), encoding="utf-8")
        argv = [sys.executable, str(REPO / "train.py"), "--profile", str(path), "--output-dir", str(run_dir),
                "--ignore-ledger"]
        planned = {"injected": False, "batch": batch, "estimate_gib": round(chosen[1], 2)}
    started = time.time()
    try:
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = None, f"timed out after {timeout_s:.0f} s: {exc}"
    attempts = []
    for path in sorted(run_dir.glob("run-*/attempts.jsonl")):
        attempts += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    first_oom = next((a for a in attempts if a.get("status") == "oom"), None)
    recovered = bool(first_oom) and any(a.get("status") == "ok" for a in attempts[attempts.index(first_oom) + 1:])
    # the supervisor's decision lines: "attempt N: NAME OOM in ... (asked ..): halving ..." and "falling back to"
    decisions = [line.strip() for line in output.splitlines()
                 if (re.match(r"\s*attempt \d+: .* OOM ", line) and not re.search(r"after \d+ steps\s*$", line))
                 or re.search(r"\bfalling back to\b", line)][:6]
    status = "ok" if recovered and code == 0 else "failed"
    if status != "ok":
        print(output[-4000:], file=sys.stderr, flush=True)
    return {**planned, "exit": code, "seconds": round(time.time() - started, 1),
            "attempts": [_attempt_row(a) for a in attempts],
            "oom_read": first_oom is not None, "fell_back_and_finished": recovered, "decisions": decisions,
            "status": status}


def _attempt_row(attempt: dict) -> dict:
    """What the report keeps of one supervised attempt: its shape and, for an OOM, what the supervisor read."""
    settings, oom = attempt.get("settings") or {}, attempt.get("oom") or {}
    row = {"profile": attempt.get("profile"), "status": attempt.get("status"),
           "batch": settings.get("per_device_train_batch_size"),
           "accumulation": settings.get("gradient_accumulation_steps")}
    if oom:
        row.update({key: oom.get(key) for key in ("site", "asked_gib", "free_gib", "total_gib", "in_probe")})
    return row


def nvml_against_torch(results: list[dict]) -> list[dict]:
    """For each probe on a GPU: NVML's used memory at the end of the step against torch's reserved peak;
    the difference is the CUDA context, libraries' workspaces and any other process on the card."""
    rows = []
    for row in results:
        probe = row.get("probe") or {}
        if "nvml_used_gib" in probe and "peak_reserved_gib" in probe:
            rows.append({"case": f"{row['name']} ({row['path']})", "nvml_used_gib": probe["nvml_used_gib"],
                         "torch_reserved_gib": probe["peak_reserved_gib"],
                         "outside_torch_gib": round(probe["nvml_used_gib"] - probe["peak_reserved_gib"], 3)})
    return rows


# ------------------------------------------------------------------------------------------------ table

def split_estimate(est) -> dict:
    comp = dict(est.components)
    held = sum(comp.get(k, 0.0) for k in HELD)
    not_probed = sum(comp.get(k, 0.0) for k in NOT_PROBED)
    return {"held_gib": round(held, 3), "step_gib": round(est.total_gib - held - not_probed, 3),
            "not_probed_gib": round(not_probed, 3), "total_gib": round(est.total_gib, 3),
            "components": {k: round(v, 3) for k, v in comp.items()}}


def result_row(case: dict, outcome: dict | None) -> dict:
    row = {k: case[k] for k in ("name", "architecture", "params", "path", "precision", "fits")}
    row["estimate"] = split_estimate(case["estimate"])
    if outcome is None:
        row["status"] = "not run (does not fit)" if not case["fits"] else "not run (time budget)"
        return row
    row.update(status=outcome["status"], error=outcome["error"], backend=outcome["backend"],
               seconds=outcome["seconds"], probe=outcome["probe"])
    probe = outcome["probe"]
    if probe.get("peak_gib") is not None:
        held = probe.get("held_before_gib")
        peak = probe.get("peak_allocated_gib", probe["peak_gib"])
        row["measured"] = {"held_gib": held, "step_gib": None if held is None else round(peak - held, 3),
                           "peak_gib": probe["peak_gib"], "measure": probe.get("measure")}
        compared = row["estimate"]["total_gib"] - row["estimate"]["not_probed_gib"]
        row["measured_over_estimate"] = round(probe["peak_gib"] / compared, 3) if compared > 0 else None
    return row


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = card_slug(report["card"])
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    lines = [f"# {report['card']}: estimate against measured", "",
             f"{report['date']}, {report['device']}, torch {report['versions'].get('torch', '?')}, "
             f"transformers {report['versions'].get('transformers', '?')}, trl {report['versions'].get('trl', '?')}"
             f", unsloth {report['versions'].get('unsloth', 'absent')}; random weights from the catalogue's "
             f"facts; {report['seconds']:.0f} s in all. Written by `python benchmarks/gpu_check.py`.", "",
             "Estimate (GiB): held = weights and adapters (and, on the CPU, the process's libraries), step = "
             "gradients, optimizer, activations, logits "
             "(what the probe's step adds); generation's KV cache, vLLM and the CUDA context are left out, the "
             "probe does not run them. Measured: held = allocated when the step starts (on the CPU: the "
             "process's resident memory, libraries included), step = peak less that, peak = the probe's figure "
             "(" + report["peak_measure"] + ").", "",
             "| architecture | path | precision | est. held | est. step | measured held | measured step | "
             "measured peak | peak / estimate | status |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["probes"]:
        est, got = row["estimate"], row.get("measured") or {}

        def cell(value):
            return "-" if value is None else f"{value:.2f}"

        lines.append(f"| {row['architecture']} | {row['path']} | {row['precision']} | {cell(est['held_gib'])} | "
                     f"{cell(est['step_gib'])} | {cell(got.get('held_gib'))} | {cell(got.get('step_gib'))} | "
                     f"{cell(got.get('peak_gib'))} | {cell(row.get('measured_over_estimate'))} | "
                     f"{row['status']}{': ' + row['error'][:80] if row.get('error') else ''} |")
    oom = report["oom_fallback"]
    lines += ["", "## Out of memory, read and fallen back from", "",
              f"{'Injected (no CUDA on this machine)' if oom.get('injected') else 'A genuine CUDA OOM'}: "
              f"status {oom.get('status')}, exit {oom.get('exit')}, {oom.get('seconds', 0):.0f} s.", ""]
    for attempt in oom.get("attempts", []):
        read = (f", {attempt['site']} asked {attempt['asked_gib']:.3f} GiB with {attempt['free_gib']:.3f} free"
                if attempt.get("site") and attempt.get("asked_gib") is not None else "")
        lines.append(f"- {attempt.get('profile')} (batch {attempt.get('batch')} x {attempt.get('accumulation')}): "
                     f"{attempt.get('status')}{read}")
    for decision in oom.get("decisions", []):
        lines.append(f"- supervisor: {decision}")
    if report["nvml_against_torch"]:
        lines += ["", "## NVML against torch", "", "| probe | NVML used | torch reserved peak | outside torch |",
                  "|---|---|---|---|"]
        for row in report["nvml_against_torch"]:
            lines.append(f"| {row['case']} | {row['nvml_used_gib']:.2f} | {row['torch_reserved_gib']:.2f} | "
                         f"{row['outside_torch_gib']:.2f} |")
    else:
        lines += ["", "NVML against torch: no GPU here."]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return json_path, md_path


def versions() -> dict:
    from importlib import metadata

    found = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "bitsandbytes"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget-s", type=float, default=BUDGET_S,
                        help="start no new probe after this many seconds (default %(default)s)")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR, help="where <card>.md and .json go")
    parser.add_argument("--models", nargs="*", help="only architectures whose name contains one of these")
    parser.add_argument("--work-dir", type=Path, help="keep the attempts' folders here (default: a temporary one)")
    args = parser.parse_args(argv)

    from launcher.card.detect import detect_machine as detect
    from launcher.run.child import ChildRunner, signals_forwarded

    started = time.time()
    machine = detect()
    gpu = machine.primary
    plain_env = dict(os.environ, **{ENV_NO_UNSLOTH: "1"})
    paths = ["trl+peft"] + (["unsloth"] if importable("unsloth") else [])
    four_bit = gpu is not None and importable("bitsandbytes", plain_env)
    cases = cases_for(machine, paths, four_bit, args.models)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    runner = ChildRunner(None, echo=sys.stderr)
    outcomes: dict[int, dict] = {}
    # the OOM check and the report need about a minute at the end
    reserve = min(120.0, args.budget_s / 4)
    with signals_forwarded(runner):  # Ctrl-C reaches the probe running; what ran is reported
        for index, case in enumerate(cases):
            if runner.signals:
                break
            if not case["fits"]:
                continue
            if time.time() - started > args.budget_s - reserve:
                break
            print(f"probe: {case['architecture']} ({case['path']}, {case['precision']}), estimated "
                  f"{case['estimate'].total_gib:.2f} GiB", file=sys.stderr, flush=True)
            outcomes[index] = run_probe(case, work, runner, timeout_s=args.budget_s)
    rows = [result_row(case, outcomes.get(i)) for i, case in enumerate(cases)]
    oom = {"status": "not run (interrupted)"} if runner.signals else \
        oom_fallback(machine, work, timeout_s=max(120.0, args.budget_s - (time.time() - started)))
    report = {"card": gpu.name if gpu else "cpu", "device": f"{gpu.name}, {gpu.total_gib:.1f} GiB" if gpu
              else "no GPU (tiny architecture on the CPU)", "total_gib": gpu.total_gib if gpu else None,
              "date": datetime.now().isoformat(timespec="seconds"), "versions": versions(), "paths": paths,
              "four_bit": four_bit, "peak_measure": "torch peak reserved" if gpu else "process peak RSS",
              "probes": rows, "oom_fallback": oom, "nvml_against_torch": nvml_against_torch(rows),
              "seconds": round(time.time() - started, 1)}
    json_path, md_path = write_report(report, args.out_dir)
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    ran = [r for r in rows if r["status"] not in ("not run (does not fit)", "not run (time budget)")]
    failed = [r for r in ran if r["status"] != "ok"]
    print(f"{len(ran)} probe(s), {len(failed)} failed; OOM fallback: {oom['status']}; wrote {md_path} and "
          f"{json_path} in {report['seconds']:.0f} s", flush=True)
    if runner.signals:
        return 130
    return 0 if ran and not failed and oom["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
