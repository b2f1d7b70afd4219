"""Measure this card against the estimate, within a time budget, with nothing to download:

    python benchmarks/gpu_check.py                     # the card torch sees (CPU: the tiny architecture)
    python benchmarks/gpu_check.py --budget-s 300      # everything, the report included, ends within 5 minutes

For each catalogue architecture the estimator says fits the card, smallest first, architecture by architecture:
the worst-case probe (trainer/probe.py: one GRPO step at full batch and completion length, backward and an
optimizer step) on that architecture built from its facts with random weights (tiny_model/random_weights.py;
memory does not depend on the weights' values), each in a process of its own with its own timeout: Unsloth's
path first (the one every single-GPU run takes), then plain TRL + PEFT, in 16-bit and, where bitsandbytes
imports, 4-bit. After its probe, each process times one generation wave and one training step of that shape
(`time_generation_wave_and_training_step`). An architecture's random weights are removed once its probes are
done. After the first architecture, a rung sized past the card runs through the supervisor: its genuine CUDA
OOM must be read and fallen back from (without bitsandbytes on a plain optimizer).

The report, benchmarks/gpu/<card>.md and .json (commit them), is rewritten after every probe, so a run cut off
still leaves its table; a later run on the same card and libraries continues it (`--fresh` starts over), which
is how the kit spreads over two calls of a machine that cannot hold all its packages at once (docs/gpu.md).

Without a GPU it runs the same steps on the tiny architecture on the CPU (the CI run that keeps it working);
the OOM there is injected (GRPO_INJECT_OOM, a genuine torch.OutOfMemoryError) since the host has no CUDA
allocator to exhaust. Every option is checked before anything heavy loads: a bad one exits 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from contract.attempt import PROFILE_FILE, attempt_environment  # noqa: E402
from contract.environment import (  # noqa: E402
    ENV_CACHE,
    ENV_ESTIMATE_GIB,
    ENV_INJECT_OOM,
    ENV_NO_UNSLOTH,
    ENV_PROBE_ONLY,
    ENV_RANDOM_WEIGHTS,
)

KIT = Path(__file__).resolve()
OUT_DIR = REPO / "benchmarks" / "gpu"
GPU_BASE = REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml"
CPU_BASE = REPO / "profiles" / "cpu-tiny-8gen.yaml"
REPORT_VERSION = 2
# One call of a GPU machine is 600 s; the install before the kit takes some of it (scripts/gpu-kit.sh).
BUDGET_S = 540.0
PROBE_TIMEOUT_S = 240.0
LONGEST_S = 24 * 3600.0  # no option asks for more than a day
FINISH_RESERVE_S = 15.0  # stopping a child that ran past its time, and the last report
MIN_PROBE_S = 45.0  # less than this left: a probe could not even import its libraries
STOP_GRACE_S = 10.0  # a child told to stop (SIGINT) gets this long before SIGKILL
IMPORT_CHECK_S = 120.0
# Estimate components by what the probe exercises: held before its step (the model), the step itself, and
# what it does not run (generation's KV cache, vLLM).
HELD = ("weights", "lora", "reference", "master_weights", "runtime")  # runtime: the CPU process's libraries
NOT_PROBED = ("generate_kv_cache", "vllm_cache", "vllm_workspace", "standby_reuse", "cuda_context")
# The shape every probe here takes: GRPO's usual single-GPU settings, short enough to run in seconds.
GPU_SHAPE = [
    "max_seq_length=1024",
    "max_prompt_length=256",
    "max_completion_length=512",
    "lora_rank=16",
    "lora_alpha=16",
    "num_generations=4",
    "per_device_train_batch_size=4",
    "gradient_accumulation_steps=1",
    "fast_inference=false",
    "gradient_checkpointing=unsloth",
    "max_steps=1",
    "save_steps=1000",
    "dataset=arithmetic",
    "eval_samples=0",
    "train_samples=200",
]
CPU_SHAPE = [
    "max_completion_length=32",
    "num_generations=4",
    "per_device_train_batch_size=8",
    "gradient_accumulation_steps=1",
    "max_steps=1",
    "save_steps=1000",
    "eval_samples=0",
    "train_samples=200",
]
UNSLOTH, PLAIN = "unsloth", "trl+peft"
# A row's status once measured (kept when a later run continues the report) or not (tried again then)
MEASURED = ("ok", "oom", "error", "unsupported", "timed out")
NOT_RUN_FIT, NOT_RUN_TIME, PENDING = "not run (does not fit)", "not run (time budget)", "not run yet"


# ------------------------------------------------------------------------------------------------ options


class BadOption(Exception):
    """An option the kit cannot run with: its message names the option, the value and the fix."""


def seconds_option(name: str, low: float):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not math.isfinite(value) or not low <= value <= LONGEST_S:
            raise argparse.ArgumentTypeError(
                f"{text} is outside {low:g} to {LONGEST_S:g} seconds (fix: give a "
                f"finite number of seconds in that range)"
            )
        return value

    parse.__name__ = name
    return parse


def writable_folder(option: str, path: Path) -> Path:
    """`path` as a folder this process can write, created if missing; BadOption naming `option` otherwise."""
    path = path.expanduser()
    if path.exists() and not path.is_dir():
        raise BadOption(f"{option} {path}: this is a file, not a folder (fix: give a folder, or move the file)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        from contract.failure import write_fix, write_problem

        raise BadOption(
            f"{option} {path}: cannot write there ({exc.strerror or exc}) {write_fix(write_problem(exc, path), path)}"
        ) from None
    return path.resolve()


def parse_options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--budget-s",
        type=seconds_option("budget", 60.0),
        default=BUDGET_S,
        help="everything, the last report included, ends within this many seconds (default %(default)g)",
    )
    parser.add_argument(
        "--probe-timeout-s",
        type=seconds_option("timeout", 10.0),
        default=PROBE_TIMEOUT_S,
        help="stop one probe's process after this many seconds (default %(default)g)",
    )
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR, help="where <card>.md and .json go")
    parser.add_argument(
        "--models", nargs="+", metavar="NAME", help="only architectures whose name contains one of these"
    )
    parser.add_argument(
        "--work-dir", type=Path, help="keep the probes' folders here (default: a temporary folder, removed at the end)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the report over instead of continuing this card's report in --out-dir",
    )
    parser.add_argument("--probe-child", metavar="ATTEMPT_DIR", help=argparse.SUPPRESS)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse has printed its message; a bad option is bad input
        raise SystemExit(2 if exc.code else 0) from None
    if args.probe_child:
        return args
    if args.probe_timeout_s > args.budget_s:
        raise BadOption(
            f"--probe-timeout-s {args.probe_timeout_s:g} is longer than --budget-s {args.budget_s:g} "
            "(fix: give a probe timeout within the budget)"
        )
    if args.models:
        from profiles.catalog import CATALOGUE, TINY

        names = [a.name for a in (*CATALOGUE, TINY)]
        unknown = [m for m in args.models if not any(m.lower() in n.lower() for n in names)]
        if unknown:
            raise BadOption(
                f"--models {' '.join(unknown)}: no catalogue architecture has that in its name (fix: "
                f"one of {', '.join(n.rpartition('/')[2] for n in names)})"
            )
    args.out_dir = writable_folder("--out-dir", args.out_dir)
    if args.work_dir is not None:
        args.work_dir = writable_folder("--work-dir", args.work_dir)
        if args.work_dir == args.out_dir:
            raise BadOption(
                f"--work-dir {args.work_dir} is --out-dir too (fix: give the probes' folders a place of their own)"
            )
    return args


# ------------------------------------------------------------------------------------------------ helpers


def importable(module: str, env: dict | None = None, timeout_s: float = IMPORT_CHECK_S) -> bool:
    """Whether `module` imports in a fresh interpreter (Unsloth and bitsandbytes fail in many ways)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", f"import {module}"], cwd=REPO, env=env, capture_output=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def card_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "card"


def short_name(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model.rpartition("/")[2]).lower()


def case_key(row: dict) -> str:
    return f"{row['architecture']}|{row['path']}|{row['precision']}"


def versions() -> dict:
    from importlib import metadata

    found = {}
    for name in ("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "unsloth_zoo", "bitsandbytes"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


# The libraries a continued report must share with this run: measurements under another torch, transformers,
# TRL or PEFT are not comparable. Unsloth and bitsandbytes may arrive between two runs (the second carry).
SAME_LIBRARIES = ("torch", "transformers", "trl", "peft")


def remove_random_models(cache: Path) -> list[str]:
    """Remove the random-weight models built in the kit's cache (tens of GB for the large architectures); the
    names removed."""
    removed = []
    for folder in sorted(cache.glob("random-*")) if cache.is_dir() else []:
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder.name)
    return removed


class Stopper:
    """SIGINT / SIGTERM to the kit: stop the running child (its own process group), write the report, exit."""

    def __init__(self):
        self.signal: int | None = None
        self.child: subprocess.Popen | None = None

    def install(self) -> Stopper:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.signal = signum
        if self.child is not None and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, signal.SIGINT)
            except OSError:
                pass


def run_bounded(argv: list[str], env: dict, timeout_s: float, log: Path, stopper: Stopper) -> tuple[int | None, bool]:
    """Run `argv` in a process group of its own, its output in `log`, for at most `timeout_s` seconds: then
    SIGINT (the supervisor and the trainer stop as on a Ctrl-C), and SIGKILL after STOP_GRACE_S. (exit status or
    None, whether it was stopped for time)."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        stopper.child = proc
        try:
            try:
                return proc.wait(timeout=max(timeout_s, 1.0)), False
            except subprocess.TimeoutExpired:
                pass
            for signum, wait_s in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
                try:
                    os.killpg(proc.pid, signum)
                except OSError:
                    pass
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return proc.poll(), True
        finally:
            stopper.child = None


def log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------------------------------------ cases


def path_requirements(cuda: bool, unsloth: bool, bitsandbytes: bool) -> dict[tuple[str, str], str | None]:
    """(path, precision) -> why it cannot run here, or None. Unsloth's GPU load imports bitsandbytes for every
    model (unsloth_zoo patches 4-bit layers by class), so its path needs both; 4-bit needs bitsandbytes."""
    precisions = ["16-bit", "4-bit"] if cuda else ["float32"]  # the CPU trains the tiny model in float32
    needs = {}
    for path in (UNSLOTH, PLAIN):
        for precision in precisions:
            missing = []
            if path == UNSLOTH and not unsloth:
                missing.append("unsloth")
            if cuda and (precision == "4-bit" or path == UNSLOTH) and not bitsandbytes:
                missing.append("bitsandbytes")
            needs[(path, precision)] = f"not run (needs {' and '.join(missing)})" if missing else None
    return needs


def kit_profile(arch_name: str, path: str, precision: str, cuda: bool, bitsandbytes: bool, extra=()):
    from profiles.load import load_profile

    name = f"check-{short_name(arch_name)}-{path.replace('+', '-')}-{precision.replace('-', '')}"
    overrides = [
        f"name={name}",
        f"model={arch_name}",
        f"load_in_4bit={str(precision == '4-bit').lower()}",
        *(GPU_SHAPE if cuda else CPU_SHAPE),
        *extra,
    ]
    if cuda and not bitsandbytes:
        overrides.append("optim=adamw_torch")  # the 8-bit optimizers are bitsandbytes'
    return load_profile(GPU_BASE if cuda else CPU_BASE, overrides)


def plan_cases(machine, unsloth: bool, bitsandbytes: bool, models: list[str] | None) -> list[dict]:
    """Every (architecture, path, precision) in the order they run: architecture by architecture, smallest
    first, and within one Unsloth's path before plain TRL + PEFT, 16-bit before 4-bit. Each case carries its
    estimate, whether the plan says it fits, and why it cannot run here (a missing library) if so."""
    from launcher.memory.estimate import estimate
    from launcher.plan.choose import make_plan
    from profiles.catalog import CATALOGUE, TINY

    gpu = machine.primary
    cuda = gpu is not None
    archs = sorted(CATALOGUE, key=lambda a: a.params) if cuda else [TINY]
    if models:
        archs = [a for a in archs if any(m.lower() in a.name.lower() for m in models)]
    needs = path_requirements(cuda, unsloth, bitsandbytes)
    cases = []
    for arch in archs:
        for (path, precision), missing in needs.items():
            profile = kit_profile(arch.name, path, precision, cuda, bitsandbytes)
            candidate = make_plan([profile], machine).candidates[0]
            est = estimate(profile, gpu=gpu, backend=("trl" if path == PLAIN else "unsloth") if cuda else None)
            cases.append(
                {
                    "name": profile.name,
                    "architecture": arch.name,
                    "params": arch.params,
                    "path": path,
                    "precision": precision,
                    "optim": profile.optim,
                    "profile": profile,
                    "fits": candidate.fits,
                    "reason": candidate.reason,
                    "estimate": est,
                    "missing": missing,
                    "predicted": predicted_timing(profile, gpu) if cuda else None,
                }
            )
    return cases


# ------------------------------------------------------------------------------------------------ probing


def run_probe(case: dict, work: Path, cache: Path, timeout_s: float, stopper: Stopper) -> dict:
    """The probe of one case in a process of its own, stopped after `timeout_s`; what it measured (or why not)."""
    from contract.failure import classify_failure

    profile = case["profile"]
    attempt_dir = work / case["name"]
    shutil.rmtree(attempt_dir, ignore_errors=True)
    attempt_dir.mkdir(parents=True)
    (attempt_dir / PROFILE_FILE).write_text(profile.to_yaml(), encoding="utf-8")
    env = attempt_environment(profile)
    env.update(
        {
            ENV_PROBE_ONLY: "1",
            ENV_RANDOM_WEIGHTS: "1",
            ENV_CACHE: str(cache),
            "HF_HUB_OFFLINE": "1",
            ENV_ESTIMATE_GIB: repr(float(case["estimate"].total_gib)),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if case["path"] == PLAIN:
        env[ENV_NO_UNSLOTH] = "1"
    else:
        env.pop(ENV_NO_UNSLOTH, None)
    started = time.monotonic()
    log = attempt_dir / "train.log"
    code, stopped = run_bounded(
        [sys.executable, str(KIT), "--probe-child", str(attempt_dir)], env, timeout_s, log, stopper
    )
    outcome = {}
    try:
        outcome = json.loads((attempt_dir / "outcome.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    tail = log_tail(log)
    status = outcome.get("status") if code == 0 else None
    if status is None:
        status = "timed out" if stopped else (outcome.get("status") or classify_failure(tail, code))
    error = outcome.get("error") or (None if status == "ok" else (tail.strip().splitlines() or [""])[-1])
    backend = re.search(r"attempt '[^']+': (\S+) on ", tail)
    return {
        "status": status,
        "error": (error or "")[:300] or None,
        "probe": outcome.get("probe") or {},
        "backend": backend.group(1) if backend else None,
        "seconds": round(time.monotonic() - started, 1),
        "timeout_s": round(timeout_s, 1),
        "log_tail": None if status == "ok" else tail[-2000:],
    }


def time_generation_wave_and_training_step(trainer, loaded) -> dict:
    """One generation wave (the generation batch TRL generates at once, every completion max_completion_length
    tokens long) and one training step (the trainer's own loss, backward and optimizer step at the probe's
    shapes), timed by trainer.timing (warm-up call first, device synchronised): the figures the step-time model
    is calibrated with on this card."""
    import torch

    from trainer.probe import completion_token_ids, longest_prompts, restored_state, synthetic_inputs, worst_case_step
    from trainer.timing import time_generation_wave, time_training_step

    profile, model, tokenizer = trainer.args, trainer.model, loaded.tokenizer
    cuda = next(model.parameters()).is_cuda
    batch = int(profile.per_device_train_batch_size)
    wave = batch * int(getattr(profile, "steps_per_generation", None) or profile.gradient_accumulation_steps or 1)
    generations = int(getattr(trainer, "num_generations", None) or batch)
    length = int(getattr(trainer, "max_completion_length", None) or profile.max_completion_length)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: dict = {
        "timing": "trainer.timing: one warm-up call, then the median of one timed call, device synchronised",
        "wave_completions": wave,
        "completion_tokens": length,
    }
    prompts = longest_prompts(loaded.train_rows, tokenizer, wave, generations)
    width = max(len(ids) for ids in prompts)
    ids = torch.full((wave, width), pad, dtype=torch.long)
    mask = torch.zeros((wave, width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    device = next(model.parameters()).device
    ids, mask = ids.to(device), mask.to(device)
    generator = trainer.accelerator.unwrap_model(model)
    was_training = model.training

    def one_wave() -> list[int]:
        with torch.no_grad():
            generated = generator.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=length,
                min_new_tokens=length,
                do_sample=True,
                pad_token_id=pad,
            )
        return [int(generated.shape[1] - width)] * wave

    try:
        model.eval()
        timed = time_generation_wave(one_wave, repeats=1, warmups=1)
        out.update(
            generation_wave_s=timed["seconds"],
            generated_tokens=timed["tokens"],
            generation_tokens_per_s=timed["tokens_per_s"],
        )
    except Exception as exc:  # noqa: BLE001 - a timing that fails is reported, the probe's figures stand
        out["generation_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        model.train(was_training)
    try:
        step_prompts = longest_prompts(loaded.train_rows, tokenizer, batch, generations)
        vocab = int(getattr(getattr(model, "config", None), "vocab_size", None) or len(tokenizer))
        completions = completion_token_ids(tokenizer, batch, length, vocab, seed=1)
        inputs = synthetic_inputs(trainer, step_prompts, completions, pad)

        def one_step() -> None:
            with restored_state(trainer):  # what is learned is unchanged: the state is put back after each
                model.train()
                worst_case_step(trainer, inputs)

        timed = time_training_step(one_step, repeats=1, warmups=1)
        tokens = batch * (max(len(p) for p in step_prompts) + length)
        out.update(
            training_step_s=timed["seconds"],
            step_tokens=tokens,
            training_tokens_per_s=round(tokens / timed["seconds"], 1) if timed["seconds"] > 0 else None,
        )
    except Exception as exc:  # noqa: BLE001
        out["training_step_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    if cuda:
        torch.cuda.empty_cache()
    return {"timed": out}


def predicted_timing(profile, gpu) -> dict | None:
    """The step-time model's generation and training seconds for a probed shape, beside the kit's timing."""
    try:
        from launcher.memory.estimate import estimate
        from launcher.plan.speed import predict
        from profiles.catalog import resolve

        arch = resolve(profile.model)
        predicted = predict(profile, arch, gpu, estimate(profile, arch, gpu))
    except Exception:  # noqa: BLE001 - a prediction is a comparison, never a reason to stop measuring
        return None
    return {
        "generation_s": round(predicted.generation_s, 4),
        "training_s": round(predicted.training_s, 4),
        "step_s": round(predicted.step_s, 4),
        "card_known": predicted.card_known,
    }


def probe_child(attempt_dir: Path) -> int:
    """One probe-only attempt in this process (the kit's child): load, probe, time, record outcome.json."""
    from commands.attempt import attempt_estimate, model_to_load
    from contract.errors import EXIT_INTERRUPTED
    from profiles.load import load_profile
    from trainer.run import run_attempt
    from trainer.signals import exit_on_signal

    profile = load_profile(attempt_dir / PROFILE_FILE)
    code = run_attempt(
        profile,
        attempt_dir,
        resolve_model=model_to_load,
        estimate_gib=attempt_estimate(profile),
        after_probe=time_generation_wave_and_training_step,
    )
    exit_on_signal(EXIT_INTERRUPTED)
    return code


# ------------------------------------------------------------------------------------------------ OOM check


def oom_fallback(
    machine, folder: Path, cache: Path, bitsandbytes: bool, unsloth: bool, timeout_s: float, stopper: Stopper
) -> dict:
    """A rung sized past the card, through the supervisor (`train.py --profile`): its OOM must be read and
    fallen back from (the shrink halves the batch). Without bitsandbytes the rung takes a plain optimizer and
    the plain path, so that the run meets the card's memory, not an ImportError. On the CPU the OOM is
    injected in the probe and the fallback is the next rung of a two-rung ladder."""
    from launcher.memory.estimate import estimate
    from profiles.load import load_profile

    env = dict(os.environ, **{ENV_RANDOM_WEIGHTS: "1", ENV_CACHE: str(cache), "HF_HUB_OFFLINE": "1"})
    gpu = machine.primary
    run_dir = folder / "oom-fallback"
    shutil.rmtree(run_dir, ignore_errors=True)
    if gpu is None:
        ladder = folder / "oom-ladder"
        shutil.rmtree(ladder, ignore_errors=True)
        ladder.mkdir(parents=True)
        # the fallback takes only a rung estimated below the one that ran out of memory (even once shrunk)
        smaller = ["num_generations=2", "per_device_train_batch_size=2", "max_completion_length=16"]
        for name, rank, extra in (("check-oom-big", 1, []), ("check-oom-small", 2, smaller)):
            profile = load_profile(CPU_BASE, [f"name={name}", f"ladder={rank}", *CPU_SHAPE, *extra])
            (ladder / f"{name}.yaml").write_text(profile.to_yaml(), encoding="utf-8")
        env[ENV_INJECT_OOM] = "check-oom-big@probe"
        argv = [
            sys.executable,
            str(REPO / "train.py"),
            "train",
            "--profiles-dir",
            str(ladder),
            "--output-dir",
            str(run_dir),
            "--ignore-ledger",
        ]
        planned = {"injected": True}
    else:
        if not (unsloth and bitsandbytes):
            env[ENV_NO_UNSLOTH] = "1"  # Unsloth's GPU load needs bitsandbytes: the plain path meets the OOM
        profile = oversized_rung(gpu, bitsandbytes)
        if profile is None:
            return {"status": "not run", "why": "no batch up to 4096 passes the card"}
        path = folder / "check-oom-oversized.yaml"
        path.write_text(profile.to_yaml(), encoding="utf-8")
        argv = [
            sys.executable,
            str(REPO / "train.py"),
            "train",
            "--profile",
            str(path),
            "--output-dir",
            str(run_dir),
            "--ignore-ledger",
        ]
        planned = {
            "injected": False,
            "batch": profile.per_device_train_batch_size,
            "optim": profile.optim,
            "path": UNSLOTH if ENV_NO_UNSLOTH not in env else PLAIN,
            "estimate_gib": round(estimate(profile, gpu=gpu).total_gib, 2),
        }
    started = time.monotonic()
    run_dir.mkdir(parents=True, exist_ok=True)
    log = folder / "oom-fallback.log"
    code, stopped = run_bounded(argv, env, timeout_s, log, stopper)
    output = log_tail(log, 400)
    attempts = []
    for found in sorted(run_dir.glob("run-*/attempts.jsonl")):
        attempts += [json.loads(line) for line in found.read_text(encoding="utf-8").splitlines() if line.strip()]
    first_oom = next((a for a in attempts if a.get("status") == "oom"), None)
    recovered = bool(first_oom) and any(a.get("status") == "ok" for a in attempts[attempts.index(first_oom) + 1 :])
    # the supervisor's decision lines: "attempt N: NAME OOM in ... (asked ..): halving ..." and "falling back to"
    decisions = [
        line.strip()
        for line in output.splitlines()
        if (re.match(r"\s*attempt \d+: .* OOM ", line) and not re.search(r"after \d+ steps\s*$", line))
        or re.search(r"\bfalling back to\b", line)
    ][:6]
    status = "ok" if recovered and code == 0 else ("timed out" if stopped else "failed")
    return {
        **planned,
        "exit": code,
        "seconds": round(time.monotonic() - started, 1),
        "timeout_s": round(timeout_s, 1),
        "attempts": [_attempt_row(a) for a in attempts],
        "oom_read": first_oom is not None,
        "fell_back_and_finished": recovered,
        "decisions": decisions,
        "status": status,
        "log_tail": None if status == "ok" else output[-2000:],
    }


def oversized_rung(gpu, bitsandbytes: bool):
    """The smallest architecture at the first batch (doubling from 4) whose estimate passes the card by a
    quarter while half of it fits, on a plain optimizer where bitsandbytes is missing; None if none does."""
    from launcher.memory.estimate import estimate
    from profiles.catalog import CATALOGUE
    from profiles.load import load_profile

    smallest = min(CATALOGUE, key=lambda a: a.params)
    base = [
        f"model={smallest.name}",
        *GPU_SHAPE,
        "load_in_4bit=false",
        "name=check-oom-oversized",
        "gradient_accumulation_steps=1",
    ] + ([] if bitsandbytes else ["optim=adamw_torch"])
    batch = 4
    while batch <= 4096:
        profile = load_profile(GPU_BASE, [*base, f"per_device_train_batch_size={batch}"])
        if estimate(profile, gpu=gpu).total_gib > 1.25 * gpu.total_gib:
            return profile
        batch *= 2
    return None


def _attempt_row(attempt: dict) -> dict:
    """What the report keeps of one supervised attempt: its shape and, for an OOM, what the supervisor read."""
    settings, oom = attempt.get("settings") or {}, attempt.get("oom") or {}
    row = {
        "profile": attempt.get("profile"),
        "status": attempt.get("status"),
        "batch": settings.get("per_device_train_batch_size"),
        "accumulation": settings.get("gradient_accumulation_steps"),
    }
    if oom:
        row.update({key: oom.get(key) for key in ("site", "asked_gib", "free_gib", "total_gib", "in_probe")})
    return row


# ------------------------------------------------------------------------------------------------ table


def split_estimate(est) -> dict:
    comp = dict(est.components)
    held = sum(comp.get(k, 0.0) for k in HELD)
    not_probed = sum(comp.get(k, 0.0) for k in NOT_PROBED)
    return {
        "held_gib": round(held, 3),
        "step_gib": round(est.total_gib - held - not_probed, 3),
        "not_probed_gib": round(not_probed, 3),
        "total_gib": round(est.total_gib, 3),
        "components": {k: round(v, 3) for k, v in comp.items()},
    }


def case_row(case: dict, status: str) -> dict:
    row = {k: case[k] for k in ("name", "architecture", "params", "path", "precision", "optim", "fits")}
    row["estimate"] = split_estimate(case["estimate"])
    row["status"] = status
    return row


def measured_row(case: dict, outcome: dict) -> dict:
    row = case_row(case, outcome["status"])
    row.update(
        error=outcome["error"],
        backend=outcome["backend"],
        seconds=outcome["seconds"],
        timeout_s=outcome["timeout_s"],
        probe=outcome["probe"],
        log_tail=outcome["log_tail"],
    )
    probe = outcome["probe"]
    if probe.get("timed"):
        timed, predicted = dict(probe["timed"]), case.get("predicted")
        if predicted:  # measured over predicted, per phase: how far the step-time model is off on this card
            timed["predicted"] = predicted
            timed["measured_over_predicted"] = {
                phase: round(timed[measured] / predicted[phase], 3)
                for measured, phase in (("generation_wave_s", "generation_s"), ("training_step_s", "training_s"))
                if isinstance(timed.get(measured), (int, float)) and predicted.get(phase)
            }
        row["timed"] = timed
    if probe.get("peak_gib") is not None:
        held = probe.get("held_before_gib")
        peak = probe.get("peak_allocated_gib", probe["peak_gib"])
        row["measured"] = {
            "held_gib": held,
            "step_gib": None if held is None else round(peak - held, 3),
            "peak_gib": probe["peak_gib"],
            "measure": probe.get("measure"),
        }
        compared = row["estimate"]["total_gib"] - row["estimate"]["not_probed_gib"]
        row["measured_over_estimate"] = round(probe["peak_gib"] / compared, 3) if compared > 0 else None
    return row


def nvml_against_torch(rows: list[dict]) -> list[dict]:
    """For each probe on a GPU: NVML's used memory at the end of the step against torch's reserved peak;
    the difference is the CUDA context, libraries' workspaces and any other process on the card."""
    out = []
    for row in rows:
        probe = row.get("probe") or {}
        if "nvml_used_gib" in probe and "peak_reserved_gib" in probe:
            out.append(
                {
                    "case": f"{row['architecture']} ({row['path']}, {row['precision']})",
                    "nvml_used_gib": probe["nvml_used_gib"],
                    "torch_reserved_gib": probe["peak_reserved_gib"],
                    "outside_torch_gib": round(probe["nvml_used_gib"] - probe["peak_reserved_gib"], 3),
                }
            )
    return out


def _cell(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    """<card>.json and <card>.md, each replaced whole (written beside, then renamed): a run stopped at any
    moment leaves the last complete table."""
    stem = card_slug(report["card"])
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    report["nvml_against_torch"] = nvml_against_torch(report["probes"])
    budgets = ", ".join(f"{run['budget_s']:.0f}" for run in report["runs"])
    lines = [
        f"# {report['card']}: estimate against measured",
        "",
        f"{report['date']}, {report['device']}, torch {report['versions'].get('torch', '?')}, "
        f"transformers {report['versions'].get('transformers', '?')}, trl {report['versions'].get('trl', '?')}, "
        f"unsloth {report['versions'].get('unsloth', 'absent')}, bitsandbytes "
        f"{report['versions'].get('bitsandbytes', 'absent')}; random weights from the catalogue's facts; "
        f"{len(report['runs'])} run(s), {sum(r['seconds'] for r in report['runs']):.0f} s in all (budgets "
        f"{budgets} s). Written by "
        "`python benchmarks/gpu_check.py`.",
        "",
        "Estimate (GiB): held = weights and adapters (and, on the CPU, the process's libraries), step = "
        "gradients, optimizer, activations, logits (what the probe's step adds); generation's KV cache, vLLM "
        "and the CUDA context are left out, the probe does not run them. Measured: held = allocated when the "
        "step starts (on the CPU: the process's resident memory, libraries included), step = peak less that, "
        "peak = the probe's figure (" + report["peak_measure"] + "). Timed after the probe, device "
        "synchronised: one generation wave (transformers' generate, every completion full length) and one "
        "training step.",
        "",
        "| architecture | path | precision | optimizer | est. held | est. step | measured held | measured step | "
        "measured peak | peak / estimate | wave s | step s | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["probes"]:
        est, got, timed = row["estimate"], row.get("measured") or {}, row.get("timed") or {}
        error = f": {row['error'][:80]}" if row.get("error") else ""
        lines.append(
            f"| {row['architecture']} | {row['path']} | {row['precision']} | {row['optim']} | "
            f"{_cell(est['held_gib'])} | {_cell(est['step_gib'])} | {_cell(got.get('held_gib'))} | "
            f"{_cell(got.get('step_gib'))} | {_cell(got.get('peak_gib'))} | "
            f"{_cell(row.get('measured_over_estimate'))} | {_cell(timed.get('generation_wave_s'))} | "
            f"{_cell(timed.get('training_step_s'))} | {row['status']}{error} |"
        )
    oom = report["oom_fallback"]
    lines += ["", "## Out of memory, read and fallen back from", ""]
    if oom.get("status") in (None, "not run", PENDING):
        lines.append(f"Not run: {oom.get('why', 'not reached')}.")
    else:
        lines += [
            f"{'Injected (no CUDA on this machine)' if oom.get('injected') else 'A genuine CUDA OOM'}: "
            f"status {oom.get('status')}, exit {oom.get('exit')}, {oom.get('seconds', 0):.0f} s"
            + (f", optimizer {oom['optim']}, {oom['path']} path" if oom.get("optim") else "")
            + ".",
            "",
        ]
        for attempt in oom.get("attempts", []):
            read = (
                f", {attempt['site']} asked {attempt['asked_gib']:.3f} GiB with {attempt['free_gib']:.3f} free"
                if attempt.get("site") and attempt.get("asked_gib") is not None
                else ""
            )
            lines.append(
                f"- {attempt.get('profile')} (batch {attempt.get('batch')} x {attempt.get('accumulation')}): "
                f"{attempt.get('status')}{read}"
            )
        for decision in oom.get("decisions", []):
            lines.append(f"- supervisor: {decision}")
    if report["nvml_against_torch"]:
        lines += [
            "",
            "## NVML against torch",
            "",
            "| probe | NVML used | torch reserved peak | outside torch |",
            "|---|---|---|---|",
        ]
        for row in report["nvml_against_torch"]:
            lines.append(
                f"| {row['case']} | {row['nvml_used_gib']:.2f} | {row['torch_reserved_gib']:.2f} | "
                f"{row['outside_torch_gib']:.2f} |"
            )
    elif report["card"] == "cpu":
        lines += ["", "NVML against torch: no GPU here."]
    for path, text in ((json_path, json.dumps(report, indent=2) + "\n"), (md_path, "\n".join(lines) + "\n")):
        staging = path.with_name(f".{path.name}.writing")
        staging.write_text(text, encoding="utf-8")
        staging.replace(path)
    return json_path, md_path


def previous_report(out_dir: Path, card: str, now_versions: dict, fresh: bool) -> tuple[dict | None, str]:
    """This card's report in `out_dir` to continue, and a line saying what was kept (or why not)."""
    path = out_dir / f"{card_slug(card)}.json"
    if fresh or not path.is_file():
        return None, "a fresh report" + (" (--fresh)" if fresh and path.is_file() else "")
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return None, f"a fresh report ({path} cannot be read: {exc})"
    if not isinstance(old, dict) or old.get("report_version") != REPORT_VERSION:
        return None, f"a fresh report ({path} is from another version of the kit)"
    changed = [n for n in SAME_LIBRARIES if (old.get("versions") or {}).get(n) != now_versions.get(n)]
    if changed:
        return None, f"a fresh report ({path} was measured with other {', '.join(changed)})"
    kept = sum(1 for row in old.get("probes", []) if row.get("status") in MEASURED)
    return old, f"continuing {path} ({kept} probe(s) kept; --fresh measures them again)"


# ------------------------------------------------------------------------------------------------ the run


def run_kit(args) -> int:
    from launcher.card.detect import detect_machine

    started = time.monotonic()
    deadline = started + args.budget_s
    stopper = Stopper().install()
    machine = detect_machine()
    gpu = machine.primary
    plain_env = dict(os.environ, **{ENV_NO_UNSLOTH: "1"})
    unsloth = importable("unsloth", timeout_s=min(IMPORT_CHECK_S, args.budget_s / 4))
    bitsandbytes = importable("bitsandbytes", plain_env, timeout_s=min(IMPORT_CHECK_S, args.budget_s / 4))
    now_versions = versions()
    card = gpu.name if gpu else "cpu"
    old, continuing = previous_report(args.out_dir, card, now_versions, args.fresh)
    cases = plan_cases(machine, unsloth, bitsandbytes, args.models)
    kept = {case_key(row): row for row in (old or {}).get("probes", []) if row.get("status") in MEASURED}
    rows = {}
    for case in cases:
        key = case_key(case)
        if key in kept:
            rows[key] = kept[key]
        else:
            rows[key] = case_row(case, case["missing"] or (PENDING if case["fits"] else NOT_RUN_FIT))
    previous_oom = (old or {}).get("oom_fallback") or {}
    report = {
        "report_version": REPORT_VERSION,
        "card": card,
        "device": f"{gpu.name}, {gpu.total_gib:.1f} GiB" if gpu else "no GPU (tiny architecture on the CPU)",
        "total_gib": gpu.total_gib if gpu else None,
        "date": datetime.now().isoformat(timespec="seconds"),
        "versions": {**(old or {}).get("versions", {}), **now_versions},
        "peak_measure": "the probe's measure per row (GPU: NVML process or card figure, else torch peak reserved)"
        if gpu
        else "process peak RSS",
        "probes": [rows[case_key(c)] for c in cases],
        "oom_fallback": previous_oom if previous_oom.get("status") in ("ok", "failed") else {"status": PENDING},
        "runs": [
            *(old or {}).get("runs", []),
            {
                "started": datetime.now().isoformat(timespec="seconds"),
                "budget_s": args.budget_s,
                "seconds": 0.0,
                "unsloth": unsloth,
                "bitsandbytes": bitsandbytes,
                "versions": now_versions,
            },
        ],
    }
    this_run = report["runs"][-1]

    def save():
        this_run["seconds"] = round(time.monotonic() - started, 1)
        report["date"] = datetime.now().isoformat(timespec="seconds")
        return write_report(report, args.out_dir)

    json_path, md_path = save()
    print(
        f"gpu-check: {report['device']}; unsloth {'imports' if unsloth else 'absent'}, bitsandbytes "
        f"{'imports' if bitsandbytes else 'absent'}; {continuing}; budget {args.budget_s:.0f} s, each probe at "
        f"most {args.probe_timeout_s:.0f} s; report {md_path}",
        file=sys.stderr,
        flush=True,
    )
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    cache = work / "cache"
    groups: dict[str, list[dict]] = {}
    for case in cases:
        groups.setdefault(case["architecture"], []).append(case)
    try:
        for architecture, group in groups.items():
            for case in group:
                key = case_key(case)
                if rows[key]["status"] != PENDING:
                    continue
                left = deadline - time.monotonic() - FINISH_RESERVE_S
                if stopper.signal is not None or left < MIN_PROBE_S:
                    rows[key]["status"] = NOT_RUN_TIME if stopper.signal is None else "not run (stopped)"
                    continue
                timeout = min(args.probe_timeout_s, left)
                print(
                    f"probe: {architecture} ({case['path']}, {case['precision']}), estimated "
                    f"{case['estimate'].total_gib:.2f} GiB, at most {timeout:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
                outcome = run_probe(case, work, cache, timeout, stopper)
                if stopper.signal is not None and outcome["status"] != "ok":
                    outcome["status"] = "interrupted"  # stopped with the kit: a later run measures it again
                elif outcome["status"] == "timed out" and timeout < args.probe_timeout_s:
                    outcome["status"] = NOT_RUN_TIME  # cut by the budget, not its own limit: a later run retries
                rows[key] = measured_row(case, outcome)
                report["probes"] = [rows[case_key(c)] for c in cases]
                save()
                print(
                    f"probe: {architecture} ({case['path']}, {case['precision']}): {outcome['status']} in "
                    f"{outcome['seconds']:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
            removed = remove_random_models(cache)
            if removed:
                print(
                    f"removed the random weights of {architecture} ({', '.join(removed)})", file=sys.stderr, flush=True
                )
            if report["oom_fallback"].get("status") in ("ok", "failed") or stopper.signal is not None:
                continue
            left = deadline - time.monotonic() - FINISH_RESERVE_S
            if left < MIN_PROBE_S:
                report["oom_fallback"] = {"status": "not run", "why": "the budget ran out first"}
                continue
            print(
                f"oom check: a rung past the card through the supervisor, at most {left:.0f} s",
                file=sys.stderr,
                flush=True,
            )
            report["oom_fallback"] = oom_fallback(
                machine, work, cache, bitsandbytes, unsloth, min(2 * args.probe_timeout_s, left), stopper
            )
            remove_random_models(cache)
            save()
    finally:
        for row in report["probes"]:
            if row["status"] == PENDING:
                row["status"] = NOT_RUN_TIME if stopper.signal is None else "not run (stopped)"
        json_path, md_path = save()
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            remove_random_models(cache)
    ran = [r for r in report["probes"] if r["status"] in MEASURED]
    failed = [r for r in ran if r["status"] != "ok"]
    oom = report["oom_fallback"]
    print(
        f"{len(ran)} probe(s) measured, {len(failed)} failed; OOM fallback: {oom['status']}; wrote {md_path} and "
        f"{json_path} in {this_run['seconds']:.0f} s (budget {args.budget_s:.0f} s)",
        flush=True,
    )
    if stopper.signal is not None:
        return 130
    return 0 if ran and not failed and oom["status"] == "ok" else 1


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_options(argv)
    except BadOption as exc:
        print(f"gpu_check.py: error: {exc}", file=sys.stderr)
        return 2
    if args.probe_child:
        return probe_child(Path(args.probe_child))
    return run_kit(args)


if __name__ == "__main__":
    sys.exit(main())
