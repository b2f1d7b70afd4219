"""The trainer's parts without a training run: the tiny model, the OOM injection, the torch fallback of
TRL's fused log-prob head, failure classification, evaluation scoring and the report."""

from __future__ import annotations

import errno
import json
import re
import traceback
from pathlib import Path

import pytest

from trainer import backends  # noqa: F401  (import order: Unsloth before transformers, below)


@pytest.fixture(scope="module", autouse=True)
def unsloth_first():
    backends.import_unsloth()


def _profile(**changes):
    from profiles.load import load_profile

    base = load_profile(Path(__file__).resolve().parents[3] / "profiles" / "cpu-tiny-4gen.yaml")
    return base.replace(**changes) if changes else base


# ------------------------------------------------------------------------------------------------
# tiny model


@pytest.fixture(scope="module")
def tiny_dir(tiny_cache, tiny_seed):
    from tiny_model.build import ensure_tiny

    return ensure_tiny("arithmetic", seed=tiny_seed, root=tiny_cache)  # the session's build, found not rebuilt


def test_tiny_shape_is_the_catalogue_entry(tiny_dir):
    from profiles.catalog import TINY

    config = json.loads((tiny_dir / "config.json").read_text())
    assert (
        config["hidden_size"],
        config["num_hidden_layers"],
        config["num_attention_heads"],
        config["num_key_value_heads"],
        config["head_dim"],
        config["intermediate_size"],
    ) == (TINY.hidden, TINY.layers, TINY.heads, TINY.kv_heads, TINY.head_dim, TINY.intermediate)
    assert config["tie_word_embeddings"] is True
    # the BPE vocabulary (specials included) plus the four XML tags; BPE stops short of its size when the
    # task's text has no pair left to merge (504 at seed 3407), so the catalogue's figure is the ceiling
    assert TINY.vocab - 64 < config["vocab_size"] <= TINY.vocab + 4


def test_tiny_tokenizer_keeps_its_ids_and_tags(tiny_dir):
    from transformers import AutoTokenizer

    from rewards.parse import TAGS

    tokenizer = AutoTokenizer.from_pretrained(tiny_dir)
    text = "<reasoning>\n3 x 4 = 12\n</reasoning>\n<answer>\n12\n</answer>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    for tag in TAGS:
        assert tokens.count(tag) == 1  # one token each, not split by BPE
    # added as ordinary tokens: TRL's skip_special_tokens decoding keeps them
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    config = json.loads((tiny_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert prompt == "<|system|>\nS<|end|>\n<|user|>\nQ<|end|>\n<|assistant|>\n"
    # its thinking switch, read as Qwen3's is: unsaid, the template thinks (the project passes it false)
    thinking = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert thinking == prompt + "<think>\n"
    assert tokenizer.eos_token == "<|end|>"
    assert tokenizer.pad_token == "<|pad|>"


def test_tiny_is_cached(tiny_dir, tiny_seed):
    from tiny_model.build import ensure_tiny

    stamp = (tiny_dir / "model.safetensors").stat().st_mtime_ns
    assert ensure_tiny("arithmetic", seed=tiny_seed, root=tiny_dir.parent) == tiny_dir
    assert (tiny_dir / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt


def test_tiny_is_seeded(tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from tiny_model import warm_start
    from tiny_model.build import ensure_tiny, read_warm_start

    # two builds of the same seed, each with a short warm start and probe (the full build takes minutes)
    monkeypatch.setattr(warm_start, "WARM_START_MIN_STEPS", 3)
    monkeypatch.setattr(warm_start, "WARM_START_MAX_STEPS", 3)
    monkeypatch.setattr(warm_start, "CHECK_ROWS", 4)
    monkeypatch.setattr(warm_start, "HELDOUT_ROWS", 8)
    one, two = (ensure_tiny("arithmetic", seed=5, root=tmp_path / name) for name in ("one", "two"))
    first, second = load_file(one / "model.safetensors"), load_file(two / "model.safetensors")
    assert first.keys() == second.keys()
    assert all((first[k] == second[k]).all() for k in first)
    assert (one / "tokenizer.json").read_text() == (two / "tokenizer.json").read_text()
    assert read_warm_start(one)["steps"] == 3 and read_warm_start(one)["held_out"] == 8
    assert not [p for p in (tmp_path / "one").iterdir() if p != one]  # no staging folder left behind


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    from tiny_model.build import cache_root

    monkeypatch.setenv("GRPO_TRAIN_CACHE", str(tmp_path))
    assert cache_root() == tmp_path
    monkeypatch.delenv("GRPO_TRAIN_CACHE")
    assert cache_root() == Path.home() / ".cache" / "grpo-train"


# ------------------------------------------------------------------------------------------------
# OOM injection


def test_parse_inject():
    from trainer.inject import parse_inject

    assert parse_inject(None) == {}
    assert parse_inject("a") == {"a": 1}
    assert parse_inject("a@3, b ,c@1") == {"a": 3, "b": 1, "c": 1}
    for bad in ("a@x", "@2", "a@0"):
        with pytest.raises(ValueError, match="GRPO_INJECT_OOM"):
            parse_inject(bad)


# torch's own wording, figures in MiB or GiB
TORCH_OOM = re.compile(
    r"^CUDA out of memory\. Tried to allocate (?P<asked>[\d.]+) (?P<au>MiB|GiB)\. GPU 0 has a total capacity of "
    r"(?P<total>[\d.]+) (?P<tu>MiB|GiB) of which (?P<free>[\d.]+) (?P<fu>MiB|GiB) is free\. Including "
    r"non-PyTorch memory, this process has [\d.]+ (?:MiB|GiB) memory in use\. Of the allocated memory "
    r"[\d.]+ (?:MiB|GiB) is allocated by PyTorch, and [\d.]+ (?:MiB|GiB) is reserved by PyTorch but unallocated\. "
    r"If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
)


def _gib(value: str, unit: str) -> float:
    return float(value) / (1024 if unit == "MiB" else 1)


def test_oom_message_has_torch_wording_and_the_logits_size():
    from trainer.inject import oom_message

    profile = _profile().replace(
        device="cuda",
        per_device_train_batch_size=4,
        max_prompt_length=256,
        max_completion_length=768,
        max_seq_length=1024,
        fast_inference=False,
    )
    text = oom_message(profile, vocab_size=151936, estimate_gib=13.0)
    match = TORCH_OOM.match(text)
    assert match, text
    # 4 sequences x 1024 tokens x 151936 vocab x 4 bytes = 2.32 GiB
    assert match["asked"] == "2.32" and match["au"] == "GiB"
    assert _gib(match["total"], match["tu"]) == pytest.approx(16 * 0.985, abs=0.01)  # the card above 13 GiB
    assert _gib(match["free"], match["fu"]) < _gib(match["asked"], match["au"])


def test_oom_message_is_read_by_the_supervisor():
    oom = pytest.importorskip("contract.oom")
    from trainer.inject import oom_message

    profile = _profile().replace(
        device="cuda",
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_prompt_length=256,
        max_completion_length=768,
        max_seq_length=1024,
        fast_inference=False,
    )
    report = oom.read_oom(oom_message(profile, vocab_size=128256, total_gib=24.0))
    assert report is not None
    # 2 sequences x 1024 tokens x 128256 vocab x 4 bytes
    assert report.asked_gib == pytest.approx(0.98, abs=0.005)
    assert report.total_gib == pytest.approx(24 * 0.985, abs=0.005)
    assert report.free_gib < report.asked_gib


def test_injected_error_is_a_real_oom_from_the_logits_path(monkeypatch):
    import torch
    from transformers import TrainerControl, TrainerState

    from trainer.inject import make_injector

    profile = _profile()
    monkeypatch.delenv("GRPO_INJECT_OOM", raising=False)
    assert make_injector(profile) is None
    monkeypatch.setenv("GRPO_INJECT_OOM", f"other,{profile.name}@2")
    injector = make_injector(profile, estimate_gib=0.6)
    state = TrainerState()
    state.global_step = 0
    injector.on_step_begin(None, state, TrainerControl(), model=None)  # step 1: not yet
    state.global_step = 1
    with pytest.raises(torch.OutOfMemoryError) as info:
        injector.on_step_begin(None, state, TrainerControl(), model=None)
    assert isinstance(info.value, RuntimeError)
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "_get_per_token_logps_and_entropies"
    assert TORCH_OOM.match(str(info.value))


# ------------------------------------------------------------------------------------------------
# the estimate an attempt is judged by


def test_an_attempt_reports_the_supervisors_estimate(tmp_path, monkeypatch):
    """The supervisor judged the attempt by an estimate made for the card; the attempt must report that
    figure (outcome.json, summary.json's ratio), not one it makes again without the card."""
    from commands.attempt import attempt_estimate
    from contract.attempt import Outcome
    from contract.environment import ENV_ESTIMATE_GIB
    from contract.errors import EXIT_BAD_INPUT
    from trainer.run import run_attempt

    monkeypatch.setenv(ENV_ESTIMATE_GIB, "7.25")
    monkeypatch.delenv("GRPO_INJECT_OOM", raising=False)
    attempt_dir = tmp_path / "attempt"
    # a data file without answers stops the attempt once the estimate is known, before any model loads
    data = tmp_path / "no-answers.jsonl"
    data.write_text('{"question": "How many?"}\n' * 3, encoding="utf-8")
    profile = _profile(dataset=str(data))
    assert run_attempt(profile, attempt_dir, estimate_gib=attempt_estimate(profile)) == EXIT_BAD_INPUT
    outcome = Outcome.read(attempt_dir / "outcome.json")
    assert (outcome.status, outcome.estimate_gib, outcome.rank, outcome.ranks) == ("error", 7.25, 0, 1)
    assert "no-answers.jsonl" in outcome.error and "no answer column" in outcome.error


@pytest.mark.parametrize("value", [None, "", "zero", "0", "-3", "nan", "inf"])
def test_without_the_supervisors_estimate_the_estimator_is_asked(monkeypatch, value):
    from commands.attempt import attempt_estimate
    from contract.environment import ENV_ESTIMATE_GIB
    from launcher.memory.estimate import estimate

    if value is None:
        monkeypatch.delenv(ENV_ESTIMATE_GIB, raising=False)
    else:
        monkeypatch.setenv(ENV_ESTIMATE_GIB, value)
    profile = _profile()
    assert attempt_estimate(profile) == round(estimate(profile).total_gib, 4)


# ------------------------------------------------------------------------------------------------
# failure classification


@pytest.mark.parametrize(
    "exc, status",
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB."), "oom"),
        (ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization`."), "oom"),
        (ValueError("Model architectures ['FancyForCausalLM'] are not supported for now."), "unsupported"),
        (RuntimeError("vLLM: this model is not supported by the V1 engine"), "unsupported"),
        (AttributeError("'Gemma3ForCausalLM' object has no attribute 'vllm_engine'"), "unsupported"),
        (KeyError("answer"), "error"),
    ],
)
def test_classify(exc, status):
    from trainer.run import classify

    assert classify(exc)[0] == status


def test_classify_real_oom_and_full_disk():
    import torch

    from trainer.run import classify

    assert classify(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB"))[0] == "oom"
    status, line = classify(OSError(errno.ENOSPC, "No space left on device", "/out/adapter"))
    assert status == "error"
    assert line == (
        "cannot write the attempt's files to /out/adapter: No space left on device "
        "(fix: free disk space, or choose a writable --output-dir)"
    )


# ------------------------------------------------------------------------------------------------
# TRL's fused log-prob head on CPU


@pytest.mark.parametrize("softcap, scale, bias", [(None, 1.0, False), (30.0, 0.5, True)])
def test_torch_log_probs_match_the_plain_computation(softcap, scale, bias):
    import torch

    from trainer.backends import _torch_chunked_log_probs

    torch.manual_seed(0)
    hidden = torch.randn(37, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    b = torch.randn(50) if bias else None
    targets = torch.randint(0, 50, (37,))
    outputs = ("log_probs", "entropy", "is_top1")
    got = _torch_chunked_log_probs(hidden, weight, b, targets, 0.7, 4096, softcap, scale, outputs)
    logits = torch.nn.functional.linear(hidden, weight, b) * scale
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    logsm = torch.log_softmax(logits / 0.7, dim=-1)
    want_lp = logsm.gather(-1, targets[:, None]).squeeze(-1)
    want_entropy = -(logsm.exp() * logsm).sum(-1)
    assert torch.allclose(got[0], want_lp, atol=1e-5)
    assert torch.allclose(got[1], want_entropy, atol=1e-5)
    assert got[2] is None and got[3] is None
    assert torch.equal(got[4], logsm.argmax(-1) == targets)
    grad_got = torch.autograd.grad(got[0].sum(), (hidden, weight))
    grad_want = torch.autograd.grad(want_lp.sum(), (hidden, weight))
    assert all(torch.allclose(a, b_, atol=1e-5) for a, b_ in zip(grad_got, grad_want))


def test_fallback_is_installed_in_trl():
    from trl.trainer import utils as trl_utils

    from trainer.backends import install_cpu_logprob_fallback

    assert install_cpu_logprob_fallback() is True
    head = trl_utils._ChunkedLogProbFunction
    assert getattr(head, "grpo_train_fallback", False) or getattr(head, "_unsloth_cpu_dispatch", False)


# ------------------------------------------------------------------------------------------------
# evaluation scoring and the report


def test_score_uses_the_answer_block():
    from evaluation.score import score

    result = score(
        [
            "<reasoning>\nx\n</reasoning>\n<answer>\n72\n</answer>",
            "<answer>$1,000</answer>",
            "72",
            "<answer>71</answer>",
        ],
        ["72", "1000", "72", "72"],
    )
    assert (result["correct"], result["total"], result["accuracy"]) == (2, 4, 0.5)
    assert len(result["examples"]) == 3


def _rows(n):
    return [
        {
            "step": i + 1,
            "rewards": {"xml_count": i / 100, "accuracy": 0.0},
            "reward": i / 50,
            "reward_std": 0.1,
            "completion_length": 30.0 + i,
            "loss": 0.0,
            "kl": None,
            "step_time": 0.1,
            "memory": {"rss_gib": 0.5 + i / 1000},
        }
        for i in range(n)
    ]


def test_reward_figures():
    from trainer.report import reward_figures

    figures = reward_figures(_rows(30), ["xml_count", "accuracy"])
    assert figures["window"] == 10
    assert figures["xml_count"] == {"first": 0.045, "last": 0.245}
    assert figures["total"] == {"first": 0.09, "last": 0.49}
    assert figures["accuracy"] == {"first": 0.0, "last": 0.0}


def test_plots_are_written(tmp_path):
    from trainer.plots import write_plots

    written = write_plots(tmp_path, _rows(25), ["xml_count", "accuracy"], "cpu", 0.6, "test")
    assert written == ["rewards.png", "completion_length.png", "memory.png"]
    for name in written:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "visible, local_rank, expected",
    [
        (None, "0", ("index", 0)),
        (None, "3", ("index", 3)),
        ("2,5", "1", ("index", 5)),
        ("GPU-aaaa,GPU-bbbb", "1", ("uuid", "GPU-bbbb")),
    ],
)
def test_nvml_handle_follows_local_rank_and_visible_devices(monkeypatch, visible, local_rank, expected):
    from trainer.memory_meter import _nvml_handle_of_this_process

    class FakeNvml:
        def nvmlDeviceGetHandleByIndex(self, index):
            return ("index", index)

        def nvmlDeviceGetHandleByUUID(self, uuid):
            return ("uuid", uuid)

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("LOCAL_RANK", local_rank)
    assert _nvml_handle_of_this_process(FakeNvml()) == expected


def test_progress_lines_off_a_terminal_name_step_reward_memory_and_time_left(capsys, monkeypatch):
    from trainer import progress as progress_line

    clock = iter([100.0, 101.0, 102.0, 140.0, 141.0])  # start, step 1, step 2, step 3 (38 s later), step 4
    monkeypatch.setattr(progress_line.time, "time", lambda: next(clock))
    progress = progress_line.Progress("p", 400, "cpu")
    row = {"reward": 0.25, "step_time": 1.0, "memory": {"rss_gib": 0.5}}
    for step in (1, 2, 3, 4):
        progress.update(step, 400, row)
    lines = capsys.readouterr().out.splitlines()
    # step 1 always; step 2 is neither a twentieth of the run nor 30 s after the last line; step 3 is. The time
    # left is the measured pace (1 s a step) times the steps left, whatever else the wall clock saw between them
    assert lines == [
        "[p] step 1/400  reward 0.250  rss 0.50 GiB  (1.00 s/step, ~6 min left)",
        "[p] step 3/400  reward 0.250  rss 0.50 GiB  (1.00 s/step, ~6 min left)",
    ]
