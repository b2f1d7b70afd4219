"""A stand-in for one training attempt, for the supervisor's policy tests (a GPU OOM cannot happen here).

Called exactly like the real child: `fake_child.py attempt --profile DIR/profile.yaml --attempt-dir DIR
[--resume-from CHECKPOINT]`. What it does is read from the JSON in FAKE_CHILD_PLAN, keyed by profile name:

  {"NAME": {"do": "ok" | "linger" | "oom" | "oom_silent" | "unsupported" | "error" | "usage" | "sigkill" |
                  "wait_signal" | "peer_lost" | "long_answers",
            "fill_disk": PATH,                 # first write zeros to PATH until its disk is full
            "text": "FILE in tests/data/oom",   # the text to report (OOM, unsupported, or an error's)
            "oom_if_batch_above": N,           # "oom" only while per_device_train_batch_size > N
            "only_if_batch_above": N,          # any action only while per_device_train_batch_size > N
            "at_step": N,                      # steps trained (checkpointing by save_steps) before failing
            "answers": N}}                     # "long_answers": the answers' 95th percentile, in tokens: a cap
                                               # at or below it ends the attempt `replanned` (GRPO_LENGTH_REPLAN=1)

It writes checkpoint-N/trainer_state.json like the trainer, outcome.json like the trainer (except
"oom_silent", which prints the text and exits 3 without one, and "sigkill"), and call.json with its argv,
the environment keys the supervisor sets, its process group and whether the vLLM server answered, for the
tests to check. Under accelerate (RANK > 0) it writes call-rank<N>.json and outcome-rank<N>.json instead,
and checkpoints and the adapter only from rank 0, as the trainer does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from contract.attempt import mark_checkpoint_complete, relative_path  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "tests" / "data" / "oom"
RANK = int(os.environ.get("RANK", "0"))
# `wait_signal` gives up after this long: only a signal that never comes reaches it, however busy the machine
WAIT_SIGNAL_S = 600
# an answer to /health: a loaded machine delays it by seconds, a server that hangs never gives it
HEALTH_S = 60


def ranked(name: str) -> str:
    """call.json -> call-rank1.json on rank 1 (rank 0 keeps the plain name)."""
    stem, suffix = name.rsplit(".", 1)
    return name if RANK == 0 else f"{stem}-rank{RANK}.{suffix}"


def server_status() -> int | None:
    """The HTTP status of the vLLM server's /health when the supervisor named one (-1: no answer), else None."""
    port = os.environ.get("GRPO_VLLM_PORT")
    if not port:
        return None
    url = f"http://{os.environ.get('GRPO_VLLM_HOST', '127.0.0.1')}:{port}/health"
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_S) as response:
            return response.status
    except (urllib.error.URLError, OSError):
        return -1


def arg(name: str) -> str | None:
    argv = sys.argv[1:]
    return argv[argv.index(name) + 1] if name in argv else None


def write_checkpoint(attempt_dir: Path, step: int) -> str:
    path = attempt_dir / f"checkpoint-{step}"
    if RANK == 0:
        path.mkdir(exist_ok=True)
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        # a complete checkpoint as the trainer leaves one: weights with a readable header, then the marker
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
        (path / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
        mark_checkpoint_complete(path)
    return str(path)


def train(attempt_dir: Path, start: int, stop: int, save_steps: int, checkpoint: str | None) -> str | None:
    for step in range(start + 1, stop + 1):
        if step % save_steps == 0:
            checkpoint = write_checkpoint(attempt_dir, step)
    return checkpoint


def lengths(cap: int, needs: int) -> dict:
    """The length probe's figures for answers whose 95th percentile would be `needs` tokens, at `cap`."""
    p95 = min(cap, needs)
    return {
        "samples": 24,
        "mean": round(0.8 * p95, 1),
        "p95": p95,
        "longest": p95,
        "cut_share": 0.5 if needs >= cap else 0.0,
        "cap": cap,
        "source": "probe",
        "switches": {},
        "planned_cap": cap,
        "planned_expected": None,
        "overruled": f"the 95th percentile ({p95} tokens) reaches the cap of {cap}" if needs >= cap else None,
    }


def outcome(
    attempt_dir: Path, status: str, steps: int, checkpoint: str | None, text: str | None = None, measured=None
) -> None:
    data = {
        "status": status,
        "steps": steps,
        "checkpoint": relative_path(checkpoint, attempt_dir),
        "error": text.strip().splitlines()[-1] if text else None,
        "error_text": text,
        "traceback": text,
        "peak_gib": 0.5,
        "estimate_gib": None,
        "lengths": measured,
    }
    if os.environ.get("GRPO_PROBE_ONLY") == "1" and status == "ok":  # a calibration's probe measured this
        data["probe"] = {"peak_gib": 0.42, "measure": "process RSS"}
    (attempt_dir / ranked("outcome.json")).write_text(json.dumps(data))


def main() -> int:
    profile = yaml.safe_load(Path(arg("--profile")).read_text())
    attempt_dir = Path(arg("--attempt-dir"))
    resume_from = arg("--resume-from")
    start = int(Path(resume_from).name.rsplit("-", 1)[-1]) if resume_from else 0
    (attempt_dir / ranked("call.json")).write_text(
        json.dumps(
            {
                "argv": sys.argv[1:],
                "pgid": os.getpgid(0),
                "pid": os.getpid(),
                "RANK": os.environ.get("RANK"),
                "WORLD_SIZE": os.environ.get("WORLD_SIZE"),
                "GRPO_TRAIN_NO_UNSLOTH": os.environ.get("GRPO_TRAIN_NO_UNSLOTH"),
                "GRPO_VLLM_PORT": os.environ.get("GRPO_VLLM_PORT"),
                "server_health": server_status(),
                "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                "UNSLOTH_VLLM_STANDBY": os.environ.get("UNSLOTH_VLLM_STANDBY"),
                "GRPO_INJECT_OOM": os.environ.get("GRPO_INJECT_OOM"),
                "GRPO_ATTEMPT_ESTIMATE_GIB": os.environ.get("GRPO_ATTEMPT_ESTIMATE_GIB"),
                "GRPO_ATTEMPT_EXPECTED_TOKENS": os.environ.get("GRPO_ATTEMPT_EXPECTED_TOKENS"),
                "GRPO_LENGTH_REPLAN": os.environ.get("GRPO_LENGTH_REPLAN"),
                "max_completion_length": profile["max_completion_length"],
                "per_device_train_batch_size": profile["per_device_train_batch_size"],
                "gradient_accumulation_steps": profile["gradient_accumulation_steps"],
                "gpu_memory_utilization": profile["gpu_memory_utilization"],
            }
        )
    )
    plan = json.loads(os.environ.get("FAKE_CHILD_PLAN", "{}")).get(profile["name"], {"do": "ok"})
    what = plan.get("do", "ok")
    text = (DATA / plan["text"]).read_text() if plan.get("text") else None
    max_steps, save_steps = profile["max_steps"], profile["save_steps"]
    print(f"fake attempt of {profile['name']}: {what}", flush=True)
    if plan.get("fill_disk"):  # leave the disk holding this file full, as another program might
        with open(plan["fill_disk"], "ab", buffering=0) as handle:
            try:
                while True:
                    handle.write(b"\0" * 4096)
            except OSError:
                pass

    if what == "oom" and profile["per_device_train_batch_size"] <= plan.get("oom_if_batch_above", 0):
        what = "ok"
    if profile["per_device_train_batch_size"] <= plan.get("only_if_batch_above", 0):
        what = "ok"
    measured = None
    if what == "long_answers":
        measured = lengths(profile["max_completion_length"], plan["answers"])
        if measured["overruled"] and os.environ.get("GRPO_LENGTH_REPLAN") == "1":
            outcome(attempt_dir, "replanned", start, resume_from, measured=measured)
            return 0
        what = "ok"
    if what in ("ok", "linger"):
        checkpoint = train(attempt_dir, start, max_steps, save_steps, resume_from)
        if RANK == 0:
            (attempt_dir / "adapter").mkdir(exist_ok=True)
        outcome(attempt_dir, "ok", max_steps, checkpoint, measured=measured)
        if what == "linger":  # as a reward that leaves a non-daemon thread: the interpreter waits on it forever
            import threading

            threading.Thread(target=time.sleep, args=(10**6,), name="left-by-a-reward").start()
        return 0
    at = max(plan.get("at_step", start), start)
    checkpoint = train(attempt_dir, start, at, save_steps, resume_from)
    if what == "oom":
        print(text, file=sys.stderr, flush=True)
        outcome(attempt_dir, "oom", at, checkpoint, text)
        return 3
    if what == "oom_silent":
        print(text, file=sys.stderr, flush=True)
        return 3
    if what == "unsupported":
        outcome(attempt_dir, "unsupported", at, checkpoint, text)
        return 1
    if what == "error":
        outcome(
            attempt_dir, "error", at, checkpoint, text or "Traceback (most recent call last):\nKeyError: 'question'"
        )
        return 1
    if what == "peer_lost":  # what a rank reports when another machine's rank went away (gloo's words)
        outcome(
            attempt_dir,
            "node",
            at,
            checkpoint,
            "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
            "pair.cc:537] Read error [127.0.0.1]:8884: Connection reset by peer",
        )
        return 1
    if what == "usage":  # bad input only the attempt can see (its data): exit 2, as the trainer does
        outcome(attempt_dir, "error", at, checkpoint, 'dataset data.jsonl: line 3 has no "question"')
        return 2
    if what == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "wait_signal":
        received = []
        signal.signal(signal.SIGTERM, lambda s, f: received.append(s))
        signal.signal(signal.SIGINT, lambda s, f: received.append(s))
        (attempt_dir / "ready").write_text(str(os.getpid()))
        deadline = time.monotonic() + WAIT_SIGNAL_S
        while not received and time.monotonic() < deadline:
            time.sleep(0.05)
        checkpoint = write_checkpoint(attempt_dir, at + 1)
        (attempt_dir / "adapter").mkdir(exist_ok=True)
        (attempt_dir / "signals.json").write_text(json.dumps(received))
        outcome(attempt_dir, "interrupted", at + 1, checkpoint)
        return 130
    raise SystemExit(f"fake_child: unknown action {what!r}")


if __name__ == "__main__":
    sys.exit(main())
