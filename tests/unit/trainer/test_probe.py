"""The worst-case probe before training: its batch (the longest prompts, full-length completions without an
end), its injected OOM (an ordinary `oom` outcome naming run_probe), its figures in the outcome, summary and
report, on both CPU backends, and that it leaves learning unchanged."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import pytest

from support.cli import REPO, train_py
from support.waiting import run_to_end

SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"
QUICK = ["max_steps=1", "save_steps=1", "eval_samples=2", "train_samples=48"]
BACKENDS = {"unsloth-cpu": {}, "transformers": {"GRPO_TRAIN_NO_UNSLOTH": "1"}}
PROBE_KEYS = {"peak_gib", "seconds", "prompt_tokens", "completion_tokens", "batch", "measure"}


@pytest.fixture(scope="session")
def cache_env(tiny_cache):
    env = dict(os.environ)
    env["GRPO_TRAIN_CACHE"] = str(tiny_cache)  # the session's tiny model, built once for every CPU run
    for name in ("GRPO_INJECT_OOM", "GRPO_TRAIN_NO_UNSLOTH", "GRPO_ATTEMPT_ESTIMATE_GIB"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_cache, tiny_seed):
    from transformers import AutoTokenizer

    from tiny_model.build import ensure_tiny

    return AutoTokenizer.from_pretrained(str(ensure_tiny("arithmetic", seed=tiny_seed, root=tiny_cache)))


def _rows(count: int) -> list[dict]:
    from tasks.prompts import build_prompt

    # question i has i extra words: the last rows are the longest
    return [{"prompt": build_prompt("What is 1 + 1?" + " plus one" * i), "answer": "2"} for i in range(count)]


# ------------------------------------------------------------------------------------------------ unit


def test_inject_accepts_probe_as_the_step(monkeypatch):
    from trainer.inject import PROBE, injected_in_probe, make_injector, parse_inject

    assert parse_inject("a@probe, b@2, c") == {"a": PROBE, "b": 2, "c": 1}
    assert parse_inject("a@Probe") == {"a": PROBE}
    with pytest.raises(ValueError, match="probe"):
        parse_inject("a@probes")
    monkeypatch.setenv("GRPO_INJECT_OOM", "cpu-tiny-4gen@probe")
    assert injected_in_probe("cpu-tiny-4gen") and not injected_in_probe("other")

    class Named:
        name = "cpu-tiny-4gen"

    assert make_injector(Named()) is None  # the probe raises it, not a training step


def test_injected_probe_oom_is_a_real_oom_raised_in_run_probe():
    import torch

    from trainer.inject import raise_injected_oom

    class Named:
        name, per_device_train_batch_size, max_prompt_length, max_completion_length = "p", 4, 128, 64

    def run_probe():  # the frame name the supervisor's reader looks for
        raise_injected_oom(Named(), model=None, estimate_gib=10.0)

    with pytest.raises(torch.OutOfMemoryError) as info:
        run_probe()
    names = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert "run_probe" in names and str(info.value).startswith("CUDA out of memory.")


def test_longest_prompts_fill_the_batch_in_groups(tiny_tokenizer):
    from trainer.probe import longest_prompts, prompt_token_ids

    rows = _rows(12)
    lengths = sorted((len(prompt_token_ids(r["prompt"], tiny_tokenizer)) for r in rows), reverse=True)
    chosen = longest_prompts(rows, tiny_tokenizer, batch=8, generations=4)
    assert len(chosen) == 8
    assert [len(ids) for ids in chosen] == [lengths[0]] * 4 + [lengths[1]] * 4
    assert chosen[0] == chosen[3] != chosen[4]
    # fewer rows than the batch: the longest are repeated until it is full
    assert len(longest_prompts(rows[:1], tiny_tokenizer, batch=6, generations=4)) == 6


def test_completions_are_full_length_without_an_end(tiny_tokenizer):
    import torch

    from trainer.probe import completion_token_ids

    state = torch.get_rng_state()
    ids = completion_token_ids(tiny_tokenizer, batch=4, length=300, vocab_size=len(tiny_tokenizer), seed=1)
    assert ids.shape == (4, 300)
    special = set(tiny_tokenizer.all_special_ids) | {tiny_tokenizer.eos_token_id}
    assert not special & set(ids.flatten().tolist())
    assert torch.equal(state, torch.get_rng_state())  # its own generator: the global one is untouched


def _engine(sleep_mode: bool, asleep: bool):
    """A stand-in for vLLM's LLM (no CPU build beside this environment) with vLLM 0.32's sleep bookkeeping: the
    executor refuses a second sleep ("Executor is already sleeping") and says whether it sleeps."""
    from types import SimpleNamespace

    calls = []
    state = {"asleep": asleep}

    def sleep(level=1):
        calls.append(level)
        if state["asleep"]:
            return  # vLLM: "Executor is already sleeping."
        state["asleep"] = True

    config = SimpleNamespace(model_config=SimpleNamespace(enable_sleep_mode=sleep_mode))
    engine = SimpleNamespace(vllm_config=config, is_sleeping=lambda: state["asleep"])
    return SimpleNamespace(llm_engine=engine, sleep=sleep), calls


def test_under_trl_the_engine_already_sleeps_at_the_probe_and_is_left_alone():
    """TRL 1.15 puts the colocated engine to sleep (level 2) when GRPOTrainer is built and after each generation,
    and keeps it on trainer.vllm_generation.llm (Unsloth hands its engine over there)."""
    from types import SimpleNamespace

    from trainer.probe import rest_generation_engine

    llm, calls = _engine(sleep_mode=True, asleep=True)
    generation = SimpleNamespace(llm=llm, _llm_weights_sleeping=True)
    trainer = SimpleNamespace(vllm_generation=generation, model=SimpleNamespace(vllm_engine=llm))
    assert rest_generation_engine(trainer) == "already asleep" and calls == []


def test_an_awake_standby_engine_is_put_to_sleep_as_trl_does():
    from types import SimpleNamespace

    from trainer.probe import rest_generation_engine

    llm, calls = _engine(sleep_mode=True, asleep=False)  # e.g. woken by a generate outside TRL
    generation = SimpleNamespace(llm=llm, _llm_weights_sleeping=False)
    trainer = SimpleNamespace(vllm_generation=generation, model=None)
    assert rest_generation_engine(trainer) == "put to sleep"
    assert calls == [2] and generation._llm_weights_sleeping is True  # TRL's next generate wakes the weights
    # Unsloth's engine on the model, before TRL has it
    llm, calls = _engine(sleep_mode=True, asleep=False)
    assert rest_generation_engine(SimpleNamespace(model=SimpleNamespace(vllm_engine=llm))) == "put to sleep"
    assert calls == [2]


def test_an_engine_without_sleep_mode_or_no_engine_is_left_alone():
    from types import SimpleNamespace

    from trainer.probe import rest_generation_engine

    llm, calls = _engine(sleep_mode=False, asleep=False)
    assert (
        rest_generation_engine(SimpleNamespace(vllm_generation=SimpleNamespace(llm=llm), model=None)) == "no sleep mode"
        and calls == []
    )
    assert rest_generation_engine(SimpleNamespace(model=object())) == "no engine"


def test_profile_key_probe_is_on_unless_turned_off():
    from profiles.load import load_profile
    from trainer.probe import probe_enabled

    assert probe_enabled(load_profile(SMALL)) and load_profile(SMALL).probe is True
    off = load_profile(SMALL, ["probe=false"])
    assert off.probe is False and not probe_enabled(off)
    with pytest.raises(Exception, match="probe"):
        load_profile(SMALL, ["probe=sometimes"])


def test_an_oom_outside_the_probe_is_not_read_as_the_probe_s():
    from contract.oom import read_oom

    trace = (
        'Traceback (most recent call last):\n  File "trainer/stages.py", line 190, in train\n'
        "    session.trainer.train()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 23.56 GiB of which 1.00 GiB is free."
    )
    report = read_oom(trace)
    assert report is not None and not report.in_probe and "probe" not in report.summary()
    assert read_oom(trace.replace("in train\n", "in run_probe\n")).in_probe


def test_outcome_carries_the_probe(tmp_path):
    from contract.attempt import OOM, Outcome

    figures = {
        "peak_gib": 1.5,
        "seconds": 2.0,
        "prompt_tokens": 100,
        "completion_tokens": 64,
        "batch": 4,
        "measure": "torch peak reserved",
    }
    Outcome(status=OOM, probe=figures).write(tmp_path)
    assert Outcome.read(tmp_path / "outcome.json").probe == figures
    assert Outcome().probe is None


def test_report_line_names_the_probe():
    from trainer.report import _probe_line

    line = _probe_line(
        {
            "peak_gib": 0.51,
            "seconds": 2.04,
            "prompt_tokens": 137,
            "completion_tokens": 32,
            "batch": 4,
            "measure": "process peak RSS",
        }
    )
    assert line == (
        "- worst-case probe: 4 x (137 prompt + 32 completion) tokens, peak 0.51 GiB (process peak RSS) in 2.0 s"
    )
    assert _probe_line(None) == "- worst-case probe: not run"


# ------------------------------------------------------------------------------------------------ runs


def _attempt(attempt_dir: Path, env: dict, *overrides: str, resume_from: Path | None = None):
    sets = [arg for pair in overrides for arg in ("--set", pair)]
    resume = ["--resume-from", str(resume_from)] if resume_from else []
    return train_py("--profile", str(SMALL), "--attempt-dir", str(attempt_dir), *sets, *resume, env=env)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_probe_oom_ends_the_attempt_and_without_it_training_runs(backend, tmp_path, cache_env):
    from contract.attempt import EXIT_FOR_STATUS, OOM
    from contract.oom import read_oom

    env = dict(cache_env, **BACKENDS[backend])
    injected = _attempt(tmp_path / "injected", dict(env, GRPO_INJECT_OOM="cpu-tiny-4gen@probe"), *QUICK)
    assert injected.returncode == EXIT_FOR_STATUS[OOM], injected.stdout[-2000:] + injected.stderr[-2000:]
    out = json.loads((tmp_path / "injected" / "outcome.json").read_text())
    assert out["status"] == OOM and out["steps"] == 0 and out["probe"] is None
    assert "run_probe" in out["traceback"] and "OutOfMemoryError" in out["traceback"]
    report = read_oom(out["traceback"])
    assert report.in_probe and "during the worst-case probe" in report.summary()

    plain = _attempt(tmp_path / "plain", env, *QUICK)
    assert plain.returncode == 0, plain.stdout[-2000:] + plain.stderr[-2000:]
    out = json.loads((tmp_path / "plain" / "outcome.json").read_text())
    assert out["status"] == "ok" and out["steps"] == 1
    probe = out["probe"]
    assert PROBE_KEYS <= set(probe) and probe["peak_gib"] > 0 and probe["seconds"] > 0
    assert (probe["batch"], probe["completion_tokens"]) == (4, 32)  # the profile's batch, max_completion_length
    assert 0 < probe["prompt_tokens"] <= 160  # the longest prompt kept under max_prompt_length
    assert json.loads((tmp_path / "plain" / "summary.json").read_text())["probe"] == probe
    assert "worst-case probe: 4 x (" in (tmp_path / "plain" / "report.md").read_text()

    # a resumed attempt probes before its resumed training as well (the trainer's order, whichever backend:
    # shown once)
    if backend != "unsloth-cpu":
        return
    resumed = _attempt(
        tmp_path / "resumed",
        dict(env, GRPO_INJECT_OOM="cpu-tiny-4gen@probe"),
        *QUICK,
        "max_steps=2",
        resume_from=tmp_path / "plain" / "checkpoint-1",
    )
    assert resumed.returncode == EXIT_FOR_STATUS[OOM], resumed.stdout[-2000:] + resumed.stderr[-2000:]
    out = json.loads((tmp_path / "resumed" / "outcome.json").read_text())
    assert out["status"] == OOM and out["steps"] == 1 and "run_probe" in out["traceback"]


# Two attempts in one child process, probe on and off (the profile key `probe`), same seed.
_TWO_ATTEMPTS = """
import sys
from pathlib import Path
from profiles.load import load_profile
from commands.attempt import model_to_load
from trainer.run import run_attempt

out, profile_path, sets = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
for probe in (True, False):
    profile = load_profile(profile_path, sets)
    profile.probe = probe
    code = run_attempt(profile, out / ("with" if probe else "without"), resolve_model=model_to_load)
    assert code == 0, code
"""


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_probe_leaves_learning_unchanged(backend, tmp_path, cache_env):
    """Same seed, three steps, with and without the probe: every trainable weight is identical. LoRA
    dropout is on so that the probe's forward draws from the random generators it must put back."""
    import torch
    from safetensors.torch import load_file

    env = dict(cache_env, **BACKENDS[backend])
    sets = ["max_steps=3", "save_steps=3", "eval_samples=0", "train_samples=48", "lora_dropout=0.1"]
    result = run_to_end(
        [sys.executable, "-c", _TWO_ATTEMPTS, str(tmp_path), str(SMALL), *sets],
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    outcomes = {run: json.loads((tmp_path / run / "outcome.json").read_text()) for run in ("with", "without")}
    assert outcomes["with"]["probe"] is not None and outcomes["without"]["probe"] is None
    assert outcomes["with"]["steps"] == outcomes["without"]["steps"] == 3
    weights = {
        run: load_file(str(tmp_path / run / "adapter" / "adapter_model.safetensors")) for run in ("with", "without")
    }
    assert weights["with"].keys() == weights["without"].keys() and weights["with"]
    for name, tensor in weights["with"].items():
        assert torch.equal(tensor, weights["without"][name]), name
    # what was logged (rewards, loss, entropy, grad norm, ...) is the same too: the probe's own loss metrics
    # were taken back; only timings and memory differ
    logged = {
        run: [
            {k: v for k, v in row.items() if k not in ("step_time", "time", "memory")}
            for row in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
        ]
        for run in ("with", "without")
    }
    assert len(logged["with"]) == 3 and logged["with"] == logged["without"]


def test_the_throwaway_paged_optimizer_state_is_released():
    from types import SimpleNamespace

    # bitsandbytes' paged optimizers append each paged state buffer (CUDA managed memory: stood in for by
    # tensors here) to a process-wide page manager's list, which outlives the optimizer
    import torch

    from trainer.probe import release_paged_state

    manager = SimpleNamespace(paged_tensors=[])
    kept = torch.zeros(4)  # the real optimizer's, registered earlier
    manager.paged_tensors.append(kept)
    param = torch.nn.Parameter(torch.zeros(4))
    state1, state2 = torch.zeros(4), torch.zeros(4)
    manager.paged_tensors += [state1, state2]
    throwaway = SimpleNamespace(
        page_mng=manager, is_paged=True, state={param: {"state1": state1, "state2": state2, "step": 1}}
    )
    assert release_paged_state(throwaway) == 2
    assert manager.paged_tensors == [kept]
    # an optimizer that pages nothing is left alone
    assert release_paged_state(SimpleNamespace(state={})) == 0


class _UnslothLikeModel:
    """Unsloth's mode switches as its trainer leaves them: the constructor ends in for_inference (checkpointing
    off, the cache on), and only train() calls for_training with the mode recorded at load."""

    def __init__(self):
        import torch

        self.layers = [torch.nn.Linear(2, 2) for _ in range(3)]
        self._unsloth_gradient_checkpointing = "unsloth"
        self.calls = []
        self.for_inference()

    def modules(self):
        return self.layers

    def for_training(self, use_gradient_checkpointing=None):
        self.calls.append(("for_training", use_gradient_checkpointing))
        self.training = True
        for layer in self.layers:
            layer.gradient_checkpointing = bool(use_gradient_checkpointing)

    def for_inference(self):
        self.calls.append(("for_inference", None))
        self.training = False
        for layer in self.layers:
            layer.gradient_checkpointing = False


def test_the_probe_steps_in_unsloths_training_mode_and_leaves_the_model_as_it_found_it():
    from types import SimpleNamespace

    from trainer.probe import checkpointing_state, training_mode

    model = _UnslothLikeModel()
    trainer = SimpleNamespace(model=model, args=SimpleNamespace(gradient_checkpointing=True))
    assert checkpointing_state(model)["modules_checkpointing"] == 0  # as Unsloth's trainer leaves it
    with training_mode(trainer):
        inside = checkpointing_state(model)
    assert inside == {"modules_checkpointing": 3, "modules_that_can": 3, "use_cache": None, "training": True}
    assert model.calls == [("for_inference", None), ("for_training", "unsloth"), ("for_inference", None)]
    assert checkpointing_state(model)["modules_checkpointing"] == 0 and not model.training


def test_a_model_without_unsloths_switches_is_put_in_train_mode():
    from types import SimpleNamespace

    import torch

    from trainer.probe import training_mode

    model = torch.nn.Linear(2, 2).eval()
    with training_mode(SimpleNamespace(model=model, args=SimpleNamespace())):
        assert model.training
