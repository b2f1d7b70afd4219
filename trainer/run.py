"""One training attempt in this process: load, evaluate, train with GRPO, save, evaluate, report.

Always leaves `outcome.json` in the attempt folder (what the supervisor reads) and returns the exit status:
0 ok, 1 error (or unsupported), 2 bad input, 3 out of memory, 130 interrupted.

Under accelerate (several processes) every rank trains, rank 0 alone writes the shared files (metrics,
adapter, summary, report, plots), evaluates and prints progress; rank N > 0 leaves only its own
`outcome-rank<N>.json`, which the supervisor merges with rank 0's.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.errors import EXIT_BAD_INPUT, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OUT_OF_MEMORY, EXIT_OK, \
    UsageError

EXIT_OOM = EXIT_OUT_OF_MEMORY
EXIT_CODES = {"ok": EXIT_OK, "oom": EXIT_OOM, "interrupted": EXIT_INTERRUPTED, "error": EXIT_FAILURE,
              "unsupported": EXIT_FAILURE}
_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
_DISK_TEXTS = ("No space left on device", "StorageFull", "Disk quota exceeded", "Read-only file system")


@dataclass
class Outcome:
    status: str = "error"
    steps: int = 0
    checkpoint: str | None = None
    error: str | None = None
    error_text: str | None = None
    traceback: str | None = None
    peak_gib: float | None = None
    estimate_gib: float | None = None


class AttemptState:
    """What is known so far, so that a failure at any point still reports steps, peak and checkpoint."""

    def __init__(self, profile, attempt_dir: Path, resume_from: str | None):
        self.profile = profile
        self.attempt_dir = attempt_dir
        self.resume_from = resume_from
        self.trainer = None
        self.memory = None
        self.estimate_gib = None
        self.started = time.time()

    @property
    def steps(self) -> int:
        if self.trainer is not None:
            return int(self.trainer.state.global_step)
        return _checkpoint_step(self.resume_from) if self.resume_from else 0

    def latest_checkpoint(self) -> str | None:
        found = sorted(self.attempt_dir.glob("checkpoint-*"), key=lambda p: _checkpoint_step(str(p)))
        found = [p for p in found if (p / "trainer_state.json").is_file()]
        if found:
            return str(found[-1])
        return str(self.resume_from) if self.resume_from else None


def say(text: str, error: bool = False) -> None:
    """Print a line; a closed pipe (the reader has gone) must not turn a good attempt into a failed one."""
    try:
        print(text, file=sys.stderr if error else sys.stdout, flush=True)
    except OSError:
        pass


def _checkpoint_step(path: str | None) -> int:
    try:
        return int(Path(path).name.rsplit("-", 1)[-1])
    except (TypeError, ValueError):
        return 0


def estimate_for(profile) -> float | None:
    """The launcher's memory estimate for this profile, when the estimator is there to ask."""
    try:
        from launcher.estimate import estimate
    except ImportError:
        return None
    try:
        return round(float(estimate(profile).total_gib), 4)
    except Exception as exc:  # an estimate is a comparison figure, never a reason to stop training
        say(f"note: no memory estimate for '{profile.name}' ({type(exc).__name__}: {exc})")
        return None


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return (lines[0] if lines else "")[:500]


def classify(exc: BaseException) -> tuple[str, str]:
    """(status, one-line error) for an exception raised during an attempt, read the supervisor's way."""
    from launcher.oom import classify_failure, is_oom_exception

    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "stopped by a second signal"
    if is_oom_exception(exc):
        return "oom", _one_line(text) or "CUDA out of memory"
    verdict = classify_failure(f"{name}: {text}")
    if verdict != "error":
        return verdict, _one_line(text)
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS or any(t in text for t in _DISK_TEXTS):
        where = getattr(exc, "filename", None)
        what = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else _one_line(text)
        return "error", (f"cannot write the attempt's files{f' to {where}' if where else ''}: {what} "
                         "(fix: free disk space, or choose a writable --output-dir)")
    return "error", f"{name}: {_one_line(text)}"


def outcome_name(rank: int) -> str:
    """Rank 0's outcome is outcome.json (the only one of a single process); rank N's outcome-rankN.json."""
    return "outcome.json" if rank == 0 else f"outcome-rank{rank}.json"


def write_outcome(attempt_dir: Path, outcome: Outcome, name: str = "outcome.json") -> None:
    path = attempt_dir / name
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(outcome), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def check_writable(attempt_dir: Path, rank: int = 0) -> None:
    attempt_dir.mkdir(parents=True, exist_ok=True)
    probe = attempt_dir / (".write-test" if rank == 0 else f".write-test-rank{rank}")  # ranks check at once
    with open(probe, "wb") as handle:
        handle.write(b"x" * 4096)
        handle.flush()
        os.fsync(handle.fileno())
    probe.unlink()


def run_attempt(profile, attempt_dir, resume_from=None) -> int:
    """Train one attempt of `profile` in `attempt_dir` (see the module docstring for the exit status)."""
    attempt_dir = Path(attempt_dir)
    from trainer.backends import process_rank

    rank = process_rank()
    outcome_file = outcome_name(rank)
    try:
        check_writable(attempt_dir, rank)
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        say(f"error: cannot write to the attempt folder {attempt_dir}: {reason} "
            "(fix: free disk space, or choose a writable --output-dir)", error=True)
        return EXIT_FAILURE

    state = AttemptState(profile, attempt_dir, str(resume_from) if resume_from else None)
    from trainer.signals import StopFlag

    stopper = StopFlag().install()
    outcome = Outcome(estimate_gib=None)
    code = EXIT_FAILURE
    try:
        outcome.status = _train(state, stopper)
        code = EXIT_CODES[outcome.status]
        if outcome.status == "interrupted":
            outcome.error = "stopped by a signal; the adapter and a checkpoint were saved"
    except BaseException as exc:  # every failure must leave an outcome.json for the supervisor
        if isinstance(exc, SystemExit):
            raise
        status, line = classify(exc)
        if isinstance(exc, UsageError):
            status, line, code = "error", str(exc), EXIT_BAD_INPUT
        else:
            code = EXIT_CODES[status]
        outcome.status = status
        outcome.error = line
        outcome.error_text = str(exc) or type(exc).__name__
        outcome.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        who = f"attempt '{profile.name}'" + (f" rank {rank}" if rank else "")
        say(f"{who} ended: {status}: {line}", error=True)
        if status == "error" and not isinstance(exc, UsageError):
            say(outcome.traceback, error=True)
    finally:
        stopper.uninstall()
        outcome.steps = state.steps
        outcome.checkpoint = state.latest_checkpoint()
        outcome.estimate_gib = state.estimate_gib
        if state.memory is not None:
            try:
                state.memory.sample()
            except Exception:
                pass
            outcome.peak_gib = round(state.memory.peak_gib, 4)
        try:
            write_outcome(attempt_dir, outcome, outcome_file)
        except OSError as exc:
            say(f"error: cannot write {attempt_dir / outcome_file}: {exc}", error=True)
            code = code or EXIT_FAILURE
    return code


def _train(state: AttemptState, signals) -> str:
    profile = state.profile
    attempt_dir = state.attempt_dir
    from trainer.inject import parse_inject, ENV as INJECT_ENV

    parse_inject(os.environ.get(INJECT_ENV))  # refuse a malformed value before anything loads
    state.estimate_gib = estimate_for(profile)

    from trainer.backends import load_model, open_backend, process_rank

    main = process_rank() == 0  # the one process that writes the attempt's shared files and prints
    backend = open_backend(profile)  # sets the Unsloth environment and imports it before TRL/transformers
    from trainer.callbacks import MemoryProbe, Progress, StopOnSignal, TelemetryCallback

    state.memory = MemoryProbe(backend.device)
    from tasks import load_task

    train_rows = load_task(profile.dataset, "train", limit=profile.train_samples, seed=profile.seed)
    eval_rows = load_task(profile.dataset, "test", limit=profile.eval_samples, seed=profile.seed) \
        if profile.eval_samples and main else []

    model_path = profile.model
    if profile.model == "tiny":
        from trainer.tiny import ensure_tiny

        model_path = str(ensure_tiny(profile.dataset, seed=profile.seed))
    if main:
        say(f"attempt '{profile.name}': {backend.name} on {backend.gpu_name or 'CPU'}, model {profile.model}, "
            f"estimate {state.estimate_gib if state.estimate_gib is not None else 'n/a'} GiB")
    model, tokenizer = load_model(backend, profile, model_path)
    if signals.stopped:
        return "interrupted"

    from tasks.gsm8k import filter_by_length

    kept, dropped = filter_by_length(train_rows, tokenizer, profile.max_prompt_length)
    if not kept:
        raise UsageError(f"dataset '{profile.dataset}': every prompt is longer than max_prompt_length "
                         f"({profile.max_prompt_length} tokens) (fix: raise max_prompt_length)")
    # test prompts obey the same limit: prompt + completion must fit max_seq_length (vLLM's max_model_len)
    eval_rows, eval_dropped = filter_by_length(eval_rows, tokenizer, profile.max_prompt_length)
    if main:
        say(f"dataset {profile.dataset}: {len(kept)} training prompts ({dropped} dropped as longer than "
            f"max_prompt_length {profile.max_prompt_length}), {len(eval_rows)} test prompts "
            f"({eval_dropped} dropped)")
    # Unsloth's engine on one GPU; TRL's (colocated, or the launcher's server) under accelerate
    unsloth_vllm = backend.name == "unsloth" and profile.fast_inference
    use_vllm = unsloth_vllm or (profile.distributed and profile.fast_inference and backend.device == "cuda")
    completion_tokens = profile.max_completion_length

    from trainer.evaluate import evaluate

    # evaluation generates through Unsloth's engine when there is one, else through `generate`
    accuracy_before = evaluate(model, tokenizer, eval_rows, max_new_tokens=completion_tokens,
                               use_vllm=unsloth_vllm)
    if signals.stopped:
        return "interrupted"

    from datasets import Dataset
    from trl import GRPOTrainer

    from rewards import get_reward_funcs
    from trainer.config import build_grpo_config
    from trainer.inject import make_injector

    reward_funcs, _weights = get_reward_funcs(profile.rewards)
    reward_names = [f.__name__ for f in reward_funcs]
    args = build_grpo_config(profile, str(attempt_dir), device=backend.device, bf16=backend.bf16,
                             use_vllm=use_vllm)
    progress = Progress(profile.name, profile.max_steps, backend.device) if main else None
    telemetry = TelemetryCallback(attempt_dir / "metrics.jsonl", reward_names, state.memory, progress) \
        if main else None
    stop = StopOnSignal(signals)
    callbacks = [telemetry, stop] if main else [stop]
    injector = make_injector(profile, state.estimate_gib)
    if injector is not None:
        callbacks.append(injector)
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args,
                          train_dataset=Dataset.from_list(kept), processing_class=tokenizer, callbacks=callbacks)
    state.trainer = trainer
    from transformers import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # our progress line replaces its raw dict per step
    train_started = time.time()
    try:
        trainer.train(resume_from_checkpoint=state.resume_from)
    finally:
        if main:
            progress.close()
            telemetry.close()
    train_seconds = time.time() - train_started

    adapter_dir = attempt_dir / "adapter"
    if profile.distributed:
        # every rank takes part (ZeRO gathers the weights), the main process alone writes
        trainer.save_model(str(adapter_dir))
    elif main:
        model.save_pretrained(str(adapter_dir))
        tokenizer.save_pretrained(str(adapter_dir))
    if signals.stopped:
        return "interrupted"
    if not main:
        return "ok"
    if profile.save_merged and backend.device == "cuda" and hasattr(model, "save_pretrained_merged"):
        model.save_pretrained_merged(str(attempt_dir / "merged"), tokenizer, save_method="merged_16bit")

    if profile.zero_stage == 3 and eval_rows:
        # ZeRO-3 keeps each weight in pieces across the ranks: generating alone would wait on them forever
        say("note: no evaluation after training under ZeRO-3 (the weights are partitioned across the ranks)")
        eval_rows = []
    accuracy_after = evaluate(model, tokenizer, eval_rows, max_new_tokens=completion_tokens,
                              use_vllm=unsloth_vllm, lora_path=str(adapter_dir) if profile.uses_lora else None)
    summary = build_summary(state, backend, telemetry.rows, reward_names, accuracy_before, accuracy_after,
                            train_seconds, len(kept), dropped, "ok")
    from trainer.report import write_plots, write_report

    summary["plots"] = write_plots(attempt_dir, telemetry.rows, reward_names, backend.device,
                                   state.estimate_gib, profile.name)
    write_report(attempt_dir, summary)
    say(f"attempt '{profile.name}' done: {summary['steps']} steps in {train_seconds:.1f} s, reward "
          f"{summary['rewards']['total']['first']} -> {summary['rewards']['total']['last']}, accuracy "
          f"{accuracy_before['accuracy']} -> {accuracy_after['accuracy']}, peak "
          f"{summary['memory']['peak_gib']:.2f} GiB ({summary['memory']['measure']}); report: "
        f"{attempt_dir / 'report.md'}")
    return "ok"


def build_summary(state: AttemptState, backend, rows, reward_names, before, after, train_seconds,
                  train_rows, dropped, status) -> dict:
    from trainer.report import reward_figures, scored_examples, warm_start_record

    profile = state.profile
    memory = state.memory.summary()
    peak = memory["peak_gib"]
    estimate = state.estimate_gib
    if backend.device == "cuda":
        import torch

        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / (1 << 30)
        device = {"name": backend.gpu_name, "total_gib": round(total, 2),
                  "compute_capability": list(backend.compute_capability or ()), "bf16": backend.bf16}
        measure = "torch peak reserved"
    else:
        import torch

        device = {"name": f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)", "total_gib": None,
                  "compute_capability": None, "bf16": False}
        measure = "process peak RSS"
    return {
        "status": status,
        "profile": profile.to_dict(),
        "backend": backend.name,
        "device": device,
        "steps": state.steps,
        "max_steps": profile.max_steps,
        "resumed_from": state.resume_from,
        "train_seconds": round(train_seconds, 2),
        "wall_seconds": round(time.time() - state.started, 2),
        "train_rows": train_rows,
        "dropped_prompts": dropped,
        "memory": {**memory, "estimate_gib": estimate, "measure": measure,
                   "ratio": round(peak / estimate, 3) if estimate else None},
        "rewards": reward_figures(rows, reward_names),
        "accuracy": {"samples": before["total"], "before": before["accuracy"], "after": after["accuracy"],
                     "correct_before": before["correct"], "correct_after": after["correct"],
                     "examples_before": scored_examples(before["examples"], profile.rewards),
                     "examples_after": scored_examples(after["examples"], profile.rewards)},
        "warm_start": warm_start_record(profile),
        "checkpoint": state.latest_checkpoint(),
    }
