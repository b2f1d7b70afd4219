"""Run the planned profile in child processes and survive out-of-memory: shrink, fall back, resume.

Every attempt is a fresh `python train.py --profile DIR/profile.yaml --attempt-dir DIR` process, so each one
starts with a clean GPU (vLLM does not give its memory back inside a process, and a caught OOM keeps tensors
alive through its traceback). A distributed profile (several GPUs, or a vLLM server) runs the same script under
accelerate, one process per training GPU, with its vLLM server started and health-checked before the attempt
and stopped after it (launcher.distributed). The child writes DIR/outcome.json (each further rank its own
outcome-rank<N>.json); the supervisor reads them (or, when the child died without one, its exit status and the
tail of its output), appends one line to the run's attempts.jsonl, and decides:

  ok            done (exit 0)
  oom           shrink what the OOM site names, once per profile, keeping the effective batch; otherwise the
                next profile on the ladder that the estimate says fits and that is estimated below every
                attempt that ran out of memory; nothing left: exit 3 with the table of attempts
  unsupported   the next profile (an architecture the stack cannot load says nothing about memory)
  error         stop (exit 1): a bug or bad data would fail the same way on every profile
  interrupted   stop (exit 130); `--resume` continues from the last checkpoint

An attempt with the same model and LoRA shape as an earlier one continues from its last checkpoint
(`--resume-from`), so the global step goes on; otherwise it starts fresh. Nothing is deleted.

Run folder: OUTPUT_DIR/run-YYYYmmdd-HHMMSS/{plan.json, attempts.jsonl, attempt-NN-<profile>/}.
"""

from __future__ import annotations

import codecs
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.markup import escape

from launcher import distributed
from launcher import oom as oomlib
from launcher.errors import (EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OUT_OF_MEMORY, EXIT_OK, UsageError)
from launcher.profiles import Profile, load_profile

TRAIN_PY = Path(__file__).resolve().parents[1] / "train.py"
STATUSES = ("ok", "oom", "unsupported", "error", "interrupted")
ATTEMPTS_FILE = "attempts.jsonl"
PLAN_FILE = "plan.json"
LOG_FILE = "train.log"
OUTCOME_FILE = "outcome.json"
# vLLM's share is set so that this much of the free memory stays free when it is lowered
VLLM_HEADROOM_GIB = 0.5
DEFAULT_MARGIN_GIB = 1.0
# Keys that decide whether a checkpoint's adapter fits the next attempt's model
SHAPE_KEYS = ("model", "lora_rank", "target_modules", "load_in_4bit")
_TAIL_BYTES = 256 * 1024


# ---------------------------------------------------------------------------------------------------
# Small helpers

def shape_of(profile: Profile) -> tuple:
    """The model and LoRA shape: a checkpoint resumes only into an attempt with the same shape."""
    return (profile.model, profile.lora_rank, tuple(profile.target_modules), profile.load_in_4bit)


def _estimate_of(candidate) -> float | None:
    est = getattr(candidate, "estimate", None)
    value = getattr(est, "total_gib", None)
    return float(value) if value is not None else None


def estimate_profile(profile: Profile, machine) -> Any:
    """The estimator's Estimate for a (changed) profile on this machine, or None when it cannot tell."""
    try:
        from launcher.estimate import estimate
        gpu = machine.primary if machine is not None and profile.device == "cuda" else None
        return estimate(profile, gpu=gpu)
    except Exception:  # an estimate guides the fallback; it never stops it
        return None


def latest_checkpoint(attempt_dir: Path) -> Path | None:
    """The highest-numbered complete checkpoint-N folder in an attempt (complete: has trainer_state.json)."""
    found = []
    for path in list(attempt_dir.glob("checkpoint-*")) + list(attempt_dir.glob("*/checkpoint-*")):
        try:
            step = int(path.name.rsplit("-", 1)[-1])
        except ValueError:
            continue
        if path.is_dir() and (path / "trainer_state.json").is_file():
            found.append((step, path))
    return max(found)[1] if found else None


def checkpoint_step(path: str | Path | None) -> int:
    try:
        return int(Path(path).name.rsplit("-", 1)[-1])
    except (TypeError, ValueError):
        return 0


def child_env(profile: Profile, base: dict | None = None) -> dict:
    """The child's environment: expandable segments against fragmentation, except under vLLM standby
    (Unsloth's standby allocator does not work with them). GRPO_INJECT_OOM and the rest pass unchanged."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"  # the child's output reaches the log as it happens
    parts = [p for p in env.get("PYTORCH_CUDA_ALLOC_CONF", "").split(",") if p.strip()]
    if profile.vllm_standby:
        parts = [p for p in parts if not p.strip().startswith("expandable_segments")]
        env["UNSLOTH_VLLM_STANDBY"] = "1"
    elif not any(p.strip().startswith("expandable_segments") for p in parts):
        parts.append("expandable_segments:True")  # a user's explicit choice is kept
    if parts:
        env["PYTORCH_CUDA_ALLOC_CONF"] = ",".join(parts)
    else:
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return env


def _settings_text(profile: Profile) -> str:
    text = (f"batch {profile.per_device_train_batch_size} x {profile.gradient_accumulation_steps}, "
            f"{profile.num_generations} generations")
    if profile.fast_inference:
        text += f", vLLM {profile.gpu_memory_utilization:g}"
    return text


# ---------------------------------------------------------------------------------------------------
# The fallback policy (pure: no processes; tested on its own)

@dataclass
class Decision:
    action: str                      # "shrink", "next", "stop"
    text: str                        # what is done and why, in plain words
    profile: Profile | None = None
    changes: dict = field(default_factory=dict)   # key -> [old, new] for a shrink
    skipped: list[str] = field(default_factory=list)


def _smallest_factor(n: int) -> int:
    for f in range(2, int(math.isqrt(n)) + 1):
        if n % f == 0:
            return f
    return n


def shrink_batch(profile: Profile) -> tuple[Profile | None, dict, str]:
    """Fewer completions per forward/backward, more accumulation: the effective batch and the group rule
    (per-device x accumulation divisible by num_generations) stay as they were."""
    b, ga = profile.per_device_train_batch_size, profile.gradient_accumulation_steps
    if b == 1:
        return None, {}, "per_device_train_batch_size is already 1: nothing to halve"
    factor = _smallest_factor(b)
    new_b, new_ga = b // factor, ga * factor
    verb = "halving" if factor == 2 else f"dividing by {factor}"
    shrunk = profile.replace(per_device_train_batch_size=new_b, gradient_accumulation_steps=new_ga)
    changes = {"per_device_train_batch_size": [b, new_b], "gradient_accumulation_steps": [ga, new_ga]}
    return shrunk, changes, (f"{verb} per_device_train_batch_size {b} -> {new_b}, gradient_accumulation_steps "
                             f"{ga} -> {new_ga}, effective batch kept at {shrunk.effective_batch}")


def shrink_vllm(profile: Profile, report: oomlib.OomReport, machine) -> tuple[Profile | None, dict, str]:
    """Move vLLM's share the way its refusal asks, when the estimate says the result can start and fit."""
    if not profile.fast_inference:
        return None, {}, "the profile does not use vLLM"
    gpu = machine.primary if machine is not None else None
    total = report.total_gib or (gpu.total_gib if gpu is not None else None)
    if not total:
        return None, {}, "the card's total memory is unknown"
    old = profile.gpu_memory_utilization
    if report.vllm_problem == oomlib.VLLM_SHARE_TOO_LARGE:
        if report.free_gib is None:
            return None, {}, "the message does not say how much memory was free"
        new = math.floor(round((report.free_gib - VLLM_HEADROOM_GIB) / total * 100, 6)) / 100
        if new <= 0 or new >= old:
            return None, {}, f"only {oomlib.fmt_gib(report.free_gib)} was free: no smaller share helps"
    elif report.vllm_problem == oomlib.VLLM_SHARE_TOO_SMALL:
        short = report.shortfall_gib
        extra = (short + 0.25) if short else 0.1 * total
        new = math.ceil(round((old * total + extra) / total * 100, 6)) / 100
        if new >= 0.95:
            return None, {}, f"vLLM would need gpu_memory_utilization {new:.2f}: more than the card can give"
    else:
        return None, {}, "the message does not say which way vLLM's share is wrong"
    try:
        shrunk = profile.replace(gpu_memory_utilization=new)
    except UsageError as exc:
        return None, {}, str(exc)
    est = estimate_profile(shrunk, machine)
    if est is not None:
        if getattr(est, "vllm_problem", None):
            return None, {}, f"at {new:.2f} the estimate says vLLM cannot start ({est.vllm_problem})"
        free = gpu.free_gib if gpu is not None else None
        if new > old and free is not None and est.total_gib > free:
            return None, {}, (f"at {new:.2f} the estimate ({est.total_gib:.2f} GiB) exceeds the free "
                              f"{free:.2f} GiB")
    verb = "lowering" if new < old else "raising"
    return shrunk, {"gpu_memory_utilization": [old, new]}, f"{verb} gpu_memory_utilization {old:g} -> {new:g}"


def shrink_optimizer(profile: Profile) -> tuple[Profile | None, dict, str]:
    if "8bit" in profile.optim or profile.optim in ("sgd", "adafactor"):
        return None, {}, f"the optimizer ({profile.optim}) is already small"
    if profile.device != "cuda":
        return None, {}, "8-bit optimizers need a GPU"
    shrunk = profile.replace(optim="adamw_8bit")
    return shrunk, {"optim": [profile.optim, "adamw_8bit"]}, \
        f"switching optim {profile.optim} -> adamw_8bit (optimizer state ~4x smaller)"


def shrink_for(profile: Profile, report: oomlib.OomReport, machine) -> tuple[Profile | None, dict, str]:
    """The one shrink the OOM's site calls for: (new profile, changes, text) or (None, {}, why not)."""
    site = report.site
    if report.kind == oomlib.KIND_HOST:
        return None, {}, "host RAM ran out: a smaller GPU batch does not fix that"
    if report.kind == oomlib.KIND_VLLM or site == oomlib.SITE_VLLM_START:
        return shrink_vllm(profile, report, machine)
    if site == oomlib.SITE_MODEL_LOAD:
        return None, {}, "the weights alone do not fit"
    if site == oomlib.SITE_GENERATION:
        return None, {}, ("generation runs the whole generation batch at once: halving the per-device batch "
                          "would not change it")
    if site == oomlib.SITE_OPTIMIZER:
        return shrink_optimizer(profile)
    # logits/log-probs, activations, backward, or a site the text does not name (GRPO's usual suspects)
    return shrink_batch(profile)


def next_profile(plan, current: str, tried: set[str], ceiling: tuple[float, str] | None) -> Decision:
    """The next profile down the ladder that the estimate says fits, estimated below the failed ones."""
    names = [c.profile.name for c in plan.candidates]
    start = names.index(current) + 1 if current in names else 0
    skipped = []
    for cand in plan.candidates[start:]:
        name = cand.profile.name
        est = _estimate_of(cand)
        if name in tried:
            continue
        if not cand.fits:
            skipped.append(f"skipping {name}: {cand.reason or 'the estimate says it does not fit'}")
            continue
        if ceiling is not None and est is not None and est >= ceiling[0]:
            skipped.append(f"skipping {name}: estimated {est:.2f} GiB, not below the {ceiling[0]:.2f} GiB of "
                           f"{ceiling[1]}, which ran out of memory")
            continue
        return Decision("next", f"falling back to {name}" + (f" (estimated {est:.2f} GiB)" if est else ""),
                        profile=cand.profile, skipped=skipped)
    return Decision("stop", "no profile left on the ladder", skipped=skipped)


def decide(plan, profile: Profile, status: str, report: oomlib.OomReport | None, shrunk: set[str],
           tried: set[str], ceiling: tuple[float, str] | None) -> Decision:
    """What to do after a failed attempt of `profile` (status oom or unsupported)."""
    prefix = ""
    if status == "oom" and report is not None:
        if profile.name not in shrunk:
            new, changes, text = shrink_for(profile, report, plan.machine)
            if new is not None:
                return Decision("shrink", text, profile=new, changes=changes)
            prefix = f"no shrink ({text}); "
        else:
            prefix = f"{profile.name} was already shrunk once; "
    elif status == "unsupported":
        prefix = "the architecture cannot be loaded; "
    nxt = next_profile(plan, profile.name, tried, ceiling)
    nxt.text = prefix + nxt.text
    return nxt


# ---------------------------------------------------------------------------------------------------
# One child process

@dataclass
class AttemptResult:
    status: str
    steps: int
    checkpoint: str | None
    exit_code: int | None
    error: str | None
    report: oomlib.OomReport | None
    duration_s: float
    peak_gib: float | None = None


def _tail(data: bytearray, chunk: bytes) -> None:
    data.extend(chunk)
    if len(data) > _TAIL_BYTES:
        del data[:len(data) - _TAIL_BYTES]


def read_result(attempt_dir: Path, returncode: int | None, tail_text: str, duration: float,
                interrupted: bool) -> AttemptResult:
    """The attempt's outcome: the ranks' outcome files merged (worst status first) when the child wrote
    any, else its exit status and output."""
    outcome: dict = {}
    data = distributed.merge_outcomes(attempt_dir)
    if isinstance(data, dict) and data.get("status") in STATUSES:
        outcome = data
    # With an outcome, only its own texts count (a log may mention an OOM that was caught and survived).
    if outcome:
        text = "\n".join(str(outcome.get(k) or "") for k in ("traceback", "error_text", "error")).strip()
    else:
        text = tail_text
    report = oomlib.read_oom(text, None if outcome else returncode)
    if outcome:
        status = outcome["status"]
        error = outcome.get("error")
        # The child may call a vLLM start-up refusal an error: the text says what it was.
        if status == "error" and report is not None:
            status = "oom"
        elif status == "error" and oomlib.read_unsupported(text):
            status = "unsupported"
    else:
        if returncode == 0:
            status, error = "error", f"the attempt exited 0 without writing {OUTCOME_FILE}"
        elif returncode in (EXIT_INTERRUPTED, -signal.SIGINT, -signal.SIGTERM):
            status, error = "interrupted", f"stopped by a signal (exit {returncode})"
        elif report is not None:
            status, error = "oom", report.message
        elif oomlib.read_unsupported(text):
            status, error = "unsupported", oomlib.read_unsupported(text)
        else:
            last = [line for line in text.strip().splitlines() if line.strip()]
            status = "error"
            error = f"exit {returncode} without {OUTCOME_FILE}" + (f": {last[-1][:300]}" if last else "")
    if interrupted and status not in ("ok", "interrupted"):
        status = "interrupted"
    if status != "oom":
        report = None
    checkpoint = outcome.get("checkpoint") or None
    if checkpoint is None:
        found = latest_checkpoint(attempt_dir)
        checkpoint = str(found) if found else None
    steps = outcome.get("steps")
    if not isinstance(steps, int):
        steps = checkpoint_step(checkpoint)
    return AttemptResult(status=status, steps=steps, checkpoint=checkpoint, exit_code=returncode, error=error,
                         report=report, duration_s=round(duration, 2), peak_gib=outcome.get("peak_gib"))


def server_failure_result(text: str, resume_from: str | None, duration: float,
                          interrupted: bool) -> AttemptResult:
    """The result of an attempt whose vLLM server did not come up (no training process ran): an OOM when the
    server's words say so (its share of the card), else an unsupported model or an error."""
    report = oomlib.read_oom(text)
    if interrupted:
        status, report = "interrupted", None
    elif report is not None:
        status = "oom"
    elif oomlib.read_unsupported(text):
        status = "unsupported"
    else:
        status = "error"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    error = (lines[0] if lines else "the vLLM server did not start")[:500]
    return AttemptResult(status=status, steps=checkpoint_step(resume_from), checkpoint=None, exit_code=None,
                         error=error, report=report, duration_s=round(duration, 2))


def attempt_command(profile: Profile, attempt_dir: Path, resume_from: str | None,
                    override: list[str] | None = None) -> list[str]:
    """The attempt's argv (launcher.distributed.child_command). `override` stands for `[python, train.py]`
    (tests run a fake child through it): the single-GPU command becomes `override + arguments`, and under
    accelerate the script and the interpreter are replaced, the launcher's own arguments kept."""
    argv = distributed.child_command(profile, attempt_dir, resume_from)
    if not override:
        return argv
    script = argv.index(str(distributed.TRAIN_PY))
    return [override[0], *argv[1:script], *override[1:], *argv[script + 1:]]


class ChildRunner:
    """Runs one attempt's process, tees its output to the terminal and DIR/train.log, forwards signals."""

    def __init__(self, command: list[str] | None = None, echo=None):
        self.override = list(command) if command else None
        self.command = command or [sys.executable, str(TRAIN_PY)]
        self.echo = echo if echo is not None else sys.stdout
        self.proc: subprocess.Popen | None = None
        self.signals: list[int] = []
        # True while a vLLM server loads (minutes): a signal then stops the wait instead of being held
        self.waiting_for_server = False

    # Signals arrive in the main thread; the child runs in its own process group so that a terminal's
    # Ctrl-C reaches only the supervisor, which forwards exactly one signal per press (the trainer reads a
    # second one as "stop now").
    def handle_signal(self, signum, frame) -> None:
        self.signals.append(signum)
        proc = self.proc
        if proc is None and self.waiting_for_server:
            self.waiting_for_server = False
            raise KeyboardInterrupt(signal.Signals(signum).name)
        if proc is None or proc.poll() is not None:
            return
        name = signal.Signals(signum).name
        try:
            if len(self.signals) >= 3:
                os.write(2, f"\n{name} again: killing attempt (pid {proc.pid}) and its processes\n".encode())
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                hint = "; press again to stop without waiting, a third time to kill" \
                    if len(self.signals) == 1 else ""
                os.write(2, f"\n{name}: asking the attempt (pid {proc.pid}) to save and stop{hint}\n".encode())
                os.kill(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def run(self, attempt_dir: Path, profile_path: Path, resume_from: str | None, env: dict) -> tuple[int, str]:
        argv = self.command + ["--profile", str(profile_path), "--attempt-dir", str(attempt_dir)]
        if resume_from:
            argv += ["--resume-from", str(resume_from)]
        return self.run_argv(argv, attempt_dir, env)

    def run_argv(self, argv: list[str], attempt_dir: Path, env: dict) -> tuple[int, str]:
        """Run one attempt's command to its end (output read until the process exits); (status, output tail)."""
        tail = bytearray()
        log_path = attempt_dir / LOG_FILE
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=distributed.parent_death_signal())
            reader = threading.Thread(target=self._pump, args=(self.proc.stdout, log, tail), daemon=True)
            reader.start()
            while True:
                try:
                    returncode = self.proc.wait()
                    break
                except KeyboardInterrupt:  # only when no handler is installed (not the main thread)
                    continue
            reader.join(timeout=30)
        self.proc = None
        return returncode, tail.decode("utf-8", errors="replace")

    def _pump(self, stream, log, tail: bytearray) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            log.write(chunk)
            log.flush()
            _tail(tail, chunk)
            try:
                self.echo.write(decoder.decode(chunk))
                self.echo.flush()
            except (OSError, ValueError):
                pass
        stream.close()


# ---------------------------------------------------------------------------------------------------
# The run

def _new_run_dir(output_dir: Path) -> Path:
    output_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        path = output_dir / (f"run-{stamp}" if n == 1 else f"run-{stamp}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise UsageError(f"{output_dir}: cannot create a new run folder (fix: choose another --output-dir)")


def latest_run_dir(output_dir: Path) -> Path:
    runs = sorted((p for p in output_dir.glob("run-*") if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))
    if not runs:
        raise UsageError(f"--resume: no run-* folder in {output_dir} (fix: start a run with --auto, or give "
                         "the --output-dir that holds it)")
    return runs[-1]


def read_attempts(run_dir: Path) -> list[dict]:
    records = []
    try:
        lines = (run_dir / ATTEMPTS_FILE).read_text(encoding="utf-8").splitlines()
    except OSError:
        return records
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a crash; the attempt folder still holds the rest
        if isinstance(record, dict):
            records.append(record)
    return records


def _report_from_dict(data: dict | None) -> oomlib.OomReport | None:
    if not data:
        return None
    names = set(oomlib.OomReport.__dataclass_fields__)
    return oomlib.OomReport(**{k: v for k, v in data.items() if k in names and k != "frames"})


class Supervisor:
    def __init__(self, plan, run_dir: Path, console, runner: ChildRunner, overrides: list[str],
                 server_command: list[str] | None = None):
        self.plan = plan
        self.server_command = server_command  # stands in for `trl vllm-serve` in tests
        self.run_dir = run_dir
        self.console = console
        self.runner = runner
        self.overrides = list(overrides or [])
        self.records: list[dict] = read_attempts(run_dir)
        self.shrunk: set[str] = {r["profile"] for r in self.records if r.get("shrink")}
        self.tried: set[str] = {r["profile"] for r in self.records}
        self.ceiling: tuple[float, str] | None = None
        for r in self.records:
            self._lower_ceiling(r)
        self.attempt_shapes: list[tuple[tuple, str | None]] = []  # (shape, checkpoint) per attempt, in order
        for r in self.records:
            settings = r.get("settings") or {}
            shape = (settings.get("model"), settings.get("lora_rank"), tuple(settings.get("target_modules") or ()),
                     settings.get("load_in_4bit"))
            self.attempt_shapes.append((shape, r.get("checkpoint")))

    # -- bookkeeping ----------------------------------------------------------------------------------
    def _lower_ceiling(self, record: dict) -> None:
        oom_data = record.get("oom") or {}
        est = record.get("estimate_gib")
        if record.get("status") == "oom" and est is not None and oom_data.get("kind") != oomlib.KIND_HOST:
            if self.ceiling is None or est < self.ceiling[0]:
                self.ceiling = (float(est), record["profile"])

    def next_number(self) -> int:
        numbers = [int(r.get("attempt", 0)) for r in self.records]
        for path in self.run_dir.glob("attempt-*"):
            try:
                numbers.append(int(path.name.split("-")[1]))
            except (IndexError, ValueError):
                pass
        return max(numbers, default=0) + 1

    def resume_point(self, profile: Profile) -> str | None:
        """The latest checkpoint of an earlier attempt with the same model and LoRA shape."""
        shape = shape_of(profile)
        for earlier_shape, checkpoint in reversed(self.attempt_shapes):
            if earlier_shape == shape and checkpoint and Path(checkpoint).is_dir():
                return checkpoint
        return None

    def _estimate_for(self, profile: Profile) -> float | None:
        for cand in self.plan.candidates:
            if cand.profile == profile:
                return _estimate_of(cand)
        est = estimate_profile(profile, self.plan.machine)
        return float(est.total_gib) if est is not None else None

    # -- one attempt ----------------------------------------------------------------------------------
    def attempt(self, profile: Profile, changes: dict | None, decision_text: str | None) -> dict:
        number = self.next_number()
        attempt_dir = self.run_dir / f"attempt-{number:02d}-{profile.name}"
        attempt_dir.mkdir(parents=True, exist_ok=False)
        profile_path = attempt_dir / "profile.yaml"
        profile_path.write_text(profile.to_yaml(), encoding="utf-8")
        resume_from = self.resume_point(profile)
        estimate_gib = self._estimate_for(profile)
        start_text = f"attempt {number}: {profile.name} ({_settings_text(profile)}"
        if estimate_gib is not None:
            start_text += f", estimated {estimate_gib:.2f} GiB"
        start_text += ")"
        if resume_from:
            start_text += f", resuming from {resume_from} (step {checkpoint_step(resume_from)})"
        self.console.print(f"[bold]{start_text}[/bold]")
        started = time.time()
        argv = attempt_command(profile, attempt_dir, resume_from, self.runner.override)
        port = distributed.free_port() if profile.uses_vllm_server else None
        env = distributed.launch_env(profile, child_env(profile), server_port=port)
        server = None
        try:
            try:
                server = self._start_server(profile, attempt_dir, env)
            except distributed.ServerError as exc:
                result = server_failure_result(str(exc), resume_from, time.time() - started,
                                               bool(self.runner.signals))
            else:
                returncode, tail = self.runner.run_argv(argv, attempt_dir, env)
                result = read_result(attempt_dir, returncode, tail, time.time() - started,
                                     bool(self.runner.signals))
        finally:
            if server is not None:
                server.stop()
        record = {
            "attempt": number,
            "profile": profile.name,
            "status": result.status,
            "steps": result.steps,
            "started": datetime.fromtimestamp(started).isoformat(timespec="seconds"),
            "duration_s": result.duration_s,
            "exit_code": result.exit_code,
            "attempt_dir": str(attempt_dir),
            "resumed_from": resume_from,
            "checkpoint": result.checkpoint,
            "shrink": changes or None,
            "estimate_gib": estimate_gib,
            "peak_gib": result.peak_gib,
            "oom": result.report.to_dict() if result.report else None,
            "error": result.error,
            "decided": decision_text,
            "env": {"PYTORCH_CUDA_ALLOC_CONF": env.get("PYTORCH_CUDA_ALLOC_CONF"),
                    "GRPO_INJECT_OOM": env.get("GRPO_INJECT_OOM")},
            "settings": profile.to_dict(),
        }
        with open(self.run_dir / ATTEMPTS_FILE, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.records.append(record)
        self.tried.add(profile.name)
        if changes:
            self.shrunk.add(profile.name)
        self.attempt_shapes.append((shape_of(profile), result.checkpoint))
        self._lower_ceiling(record)
        self._print_result(number, profile, result)
        record["_report"] = result.report
        return record

    def _start_server(self, profile: Profile, attempt_dir: Path, env: dict):
        """The attempt's vLLM server, up and healthy (None without server mode); ServerError otherwise."""
        if not profile.uses_vllm_server or profile.device != "cuda" or distributed.topology(env).machine_rank:
            return None  # only machine 0 of a run serves
        self.console.print(f"starting the vLLM server for {profile.name} "
                           f"(log: {attempt_dir / distributed.SERVER_LOG})", markup=False)
        self.runner.waiting_for_server = True
        try:
            server = distributed.start_server(profile, attempt_dir, env=env, command=self.server_command)
        except KeyboardInterrupt as exc:  # start_server has stopped the server already
            raise distributed.ServerError(f"stopped by {exc or 'a signal'} while the vLLM server was starting")
        finally:
            self.runner.waiting_for_server = False
        if server is not None:
            self.console.print(f"vLLM server ready at {server.url}", markup=False)
        return server

    def _print_result(self, number: int, profile: Profile, result: AttemptResult) -> None:
        style = {"ok": "green", "oom": "yellow", "unsupported": "yellow", "interrupted": "magenta"}.get(
            result.status, "red")
        text = f"attempt {number}: {profile.name} [{style}]{result.status}[/{style}] after {result.steps} steps"
        if result.report is not None:
            text = f"attempt {number}: {profile.name} [{style}]{result.report.summary()}[/{style}] " \
                   f"after {result.steps} steps"
        elif result.error and result.status != "ok":
            text += f": {escape(result.error)}"
        self.console.print(text, highlight=False)
        if result.report is not None:
            for line in oomlib.describe(result.report).splitlines():
                self.console.print(f"    {line}", highlight=False, markup=False)

    # -- the loop -------------------------------------------------------------------------------------
    def run(self, profile: Profile, changes: dict | None = None, decision_text: str | None = None) -> int:
        while True:
            if self.runner.signals:
                self.console.print("interrupted before the next attempt started")
                return EXIT_INTERRUPTED
            record = self.attempt(profile, changes, decision_text)
            status = record["status"]
            if status == "ok":
                self.console.print(f"[green]done[/green]: {record['attempt_dir']}")
                return EXIT_OK
            if status == "interrupted":
                where = record["checkpoint"] or "no checkpoint yet"
                self.console.print(f"interrupted after {record['steps']} steps ({where}); continue with "
                                   f"`python train.py --auto --resume --output-dir {self.run_dir.parent}`")
                return EXIT_INTERRUPTED
            if status == "error":
                self.console.print(f"[red]attempt {record['attempt']} failed with an error that is not about "
                                   f"memory[/red]: {escape(str(record['error']))}\n  see {Path(record['attempt_dir']) / LOG_FILE};"
                                   " not falling back: another profile would most likely fail the same way")
                return EXIT_FAILURE
            decision = self.decide_after(profile, status, record.get("_report"))
            for line in decision.skipped:
                self.console.print(f"  {line}")
            failed = (record["_report"].summary() if record.get("_report") else status)
            self.console.print(f"attempt {record['attempt']}: {profile.name} {failed}: {decision.text}",
                               highlight=False, markup=False)
            if decision.action == "stop":
                return EXIT_OUT_OF_MEMORY
            profile, changes, decision_text = decision.profile, decision.changes or None, decision.text

    def decide_after(self, profile: Profile, status: str, report) -> Decision:
        return decide(self.plan, profile, status, report, self.shrunk, self.tried, self.ceiling)


# ---------------------------------------------------------------------------------------------------
# The table

def attempts_table(records: list[dict]):
    from rich.table import Table

    table = Table(title="attempts", show_lines=False)
    for col in ("#", "profile", "status", "steps", "batch", "vLLM", "memory", "time", "resumed from / change"):
        table.add_column(col, overflow="fold")
    for r in records:
        s = r.get("settings") or {}
        batch = f"{s.get('per_device_train_batch_size')} x {s.get('gradient_accumulation_steps')}"
        vllm = f"{s.get('gpu_memory_utilization'):g}" if s.get("fast_inference") else "-"
        memory = ""
        if r.get("oom"):
            rep = _report_from_dict(r["oom"])
            memory = rep.summary() if rep else ""
        elif r.get("peak_gib") is not None:
            memory = f"peak {r['peak_gib']:.2f} GiB"
        if r.get("estimate_gib") is not None:
            memory = (memory + f"; est. {r['estimate_gib']:.2f} GiB").lstrip("; ")
        note = ""
        if r.get("shrink"):
            note = ", ".join(f"{k} {v[0]}->{v[1]}" for k, v in r["shrink"].items())
        if r.get("resumed_from"):
            note = (note + "; " if note else "") + f"from step {checkpoint_step(r['resumed_from'])}"
        status = r.get("status", "?")
        style = {"ok": "green", "interrupted": "magenta", "error": "red"}.get(status, "yellow")
        table.add_row(str(r.get("attempt")), str(r.get("profile")), f"[{style}]{status}[/{style}]",
                      str(r.get("steps")), batch, vllm, memory, f"{r.get('duration_s', 0):.0f}s", note)
    return table


def _make_console():
    from rich.console import Console

    # Not a terminal (a log, a test): wide enough that the table does not wrap into a column of letters.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def _print_plan_choice(console, plan) -> None:
    machine = plan.machine
    message = getattr(machine, "message", "")
    if message:
        console.print(f"plan: {message}", markup=False)
    chosen = plan.chosen
    if chosen is None:
        return
    cand = next((c for c in plan.candidates if c.profile.name == chosen.name), None)
    est = _estimate_of(cand) if cand else None
    more = [c.profile.name for c in plan.candidates if not c.fits]
    line = f"plan: chose {chosen.name}"
    if est is not None:
        line += f", estimated {est:.2f} GiB"
    if cand is not None and cand.reason:
        line += f" ({cand.reason})"
    console.print(line, markup=False)
    if more:
        console.print(f"plan: more ambitious or not fitting: {', '.join(more)}", markup=False)


# ---------------------------------------------------------------------------------------------------
# Entry point

def supervise(plan, output_dir: Path, overrides: list[str] | None = None, resume: bool = False,
              child_command: list[str] | None = None, console=None,
              server_command: list[str] | None = None) -> int:
    """Run the plan's chosen profile (or, with resume, continue the latest run); exit status per design.

    `child_command` replaces `[python, train.py]` and `server_command` the `trl vllm-serve` command of
    server mode (tests run small fakes through them).
    """
    console = console or _make_console()
    output_dir = Path(output_dir)
    runner = ChildRunner(child_command)
    if resume:
        run_dir = latest_run_dir(output_dir)
    else:
        if plan.chosen is None:
            _print_plan_choice(console, plan)
            console.print("[red]nothing fits[/red]: no profile on the ladder is estimated to fit this machine "
                          "(see `python train.py --auto --dry-run` for the estimates)")
            for candidate in plan.candidates:
                console.print(f"  {candidate.profile.name}: {candidate.reason}", markup=False, highlight=False)
            return EXIT_OUT_OF_MEMORY
        run_dir = _new_run_dir(output_dir)
    supervisor = Supervisor(plan, run_dir, console, runner, overrides or [], server_command=server_command)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, runner.handle_signal)
    try:
        if resume:
            code = _resume(supervisor, run_dir, overrides or [], console)
        else:
            (run_dir / PLAN_FILE).write_text(json.dumps(plan.to_json(), indent=2) + "\n", encoding="utf-8")
            console.print(f"run folder: {run_dir}", markup=False)
            _print_plan_choice(console, plan)
            code = supervisor.run(plan.chosen)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    records = [{k: v for k, v in r.items() if not k.startswith("_")} for r in supervisor.records]
    if records:
        console.print(attempts_table(records))
    if code == EXIT_OUT_OF_MEMORY:
        console.print("[red]every profile that could run here ran out of memory or could not load[/red]; "
                      "the table above lists the attempts. Try a profile with a smaller model, shorter "
                      "max_completion_length or fewer num_generations (--set KEY=VALUE).")
    return code


def _resume(supervisor: Supervisor, run_dir: Path, overrides: list[str], console) -> int:
    """Continue the latest run: re-run its last attempt's profile from its last checkpoint, or, when that
    attempt ran out of memory and the run stopped before deciding, take the decision it would have taken."""
    attempt_dirs = sorted((p for p in run_dir.glob("attempt-*") if (p / "profile.yaml").is_file()),
                          key=lambda p: p.name)
    if not attempt_dirs:
        raise UsageError(f"--resume: {run_dir} holds no attempt (fix: start a new run with --auto)")
    last_dir = attempt_dirs[-1]
    record = next((r for r in supervisor.records if r.get("attempt_dir") and
                   Path(r["attempt_dir"]).name == last_dir.name), None)
    console.print(f"resuming run {run_dir}", markup=False)
    if record is not None and record.get("status") == "ok":
        console.print(f"{last_dir.name} already finished ok: nothing to resume")
        return EXIT_OK
    profile = load_profile(last_dir / "profile.yaml", overrides)
    if record is None:
        # The supervisor stopped while this attempt ran: count its checkpoints too.
        found = latest_checkpoint(last_dir)
        supervisor.attempt_shapes.append((shape_of(profile), str(found) if found else None))
        return supervisor.run(profile, None, "resumed: the run stopped during this attempt")
    if record.get("status") in ("oom", "unsupported"):
        decision = supervisor.decide_after(profile, record["status"], _report_from_dict(record.get("oom")))
        for line in decision.skipped:
            console.print(f"  {line}")
        console.print(f"resumed after attempt {record['attempt']} ({record['status']}): {decision.text}",
                      markup=False)
        if decision.action == "stop":
            return EXIT_OUT_OF_MEMORY
        return supervisor.run(decision.profile, decision.changes or None, decision.text)
    return supervisor.run(profile, None, f"resumed after attempt {record['attempt']} ({record['status']})")
