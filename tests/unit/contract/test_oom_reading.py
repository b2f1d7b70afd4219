"""Reading OOM messages: recognition, figures, site, and the diagnosis `--explain-oom` prints.

The texts in tests/data/oom are shaped on real reports (PyTorch's allocator message in GiB and MiB, vLLM's
start-up refusals, cuBLAS, the CPU allocator, an unsupported architecture) with tracebacks through the
libraries this project runs.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from commands.explain_oom import explain_file
from contract import failure
from contract import oom as oom
from contract import oom_site as oom_site
from contract.failure import classify_failure, read_unsupported
from contract.oom import read_oom
from contract.oom_site import parse_frames
from launcher.oom.explain import explain

DATA = Path(__file__).resolve().parents[3] / "tests" / "data" / "oom"


def text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def test_pytorch_gib_message_figures_and_site():
    r = read_oom(text("torch_logits_gib.txt"))
    assert r.kind == oom.KIND_CUDA
    assert r.site == oom_site.SITE_LOGITS
    assert r.gpu_index == 0
    assert r.asked_gib == pytest.approx(6.01)
    assert r.total_gib == pytest.approx(22.03)
    assert r.free_gib == pytest.approx(2.72)
    assert r.in_use_gib == pytest.approx(19.29)
    assert r.allocated_gib == pytest.approx(11.82)
    assert r.reserved_unallocated_gib == pytest.approx(2.41)
    assert r.shortfall_gib == pytest.approx(3.29)
    assert not r.fragmented  # 2.41 GiB of cache cannot cover a 3.29 GiB shortfall


def test_pytorch_mib_message_converts_units_and_sees_fragmentation():
    r = read_oom(text("torch_backward_mib.txt"))
    assert r.site == oom_site.SITE_BACKWARD
    assert r.asked_gib == pytest.approx(384 / 1024)
    assert r.free_gib == pytest.approx(201.56 / 1024)
    assert r.total_gib == pytest.approx(14.58)
    assert r.reserved_unallocated_gib == pytest.approx(508.23 / 1024)
    assert r.shortfall_gib == pytest.approx((384 - 201.56) / 1024)
    assert r.fragmented  # 508 MiB cached but unused > 182 MiB missing


def test_pytorch_message_naming_another_process():
    r = read_oom(text("torch_generation_mib.txt"))
    assert r.site == oom_site.SITE_GENERATION
    assert r.in_use_gib == pytest.approx(7.02)  # the one process listed is this one
    assert r.free_gib == pytest.approx(612.44 / 1024)
    assert r.shortfall_gib == pytest.approx(1.16 - 612.44 / 1024)


def test_pre_2_1_pytorch_wording():
    r = read_oom(text("torch_old_format.txt"))
    assert r.kind == oom.KIND_CUDA
    assert r.asked_gib == pytest.approx(2 / 1024)
    assert r.total_gib == pytest.approx(15.78)
    assert r.allocated_gib == pytest.approx(14.56)
    assert r.free_gib == pytest.approx(3.44 / 1024)
    assert r.reserved_unallocated_gib == pytest.approx(14.71 - 14.56)
    assert r.shortfall_gib == 0.0
    assert r.site == oom_site.SITE_UNKNOWN


@pytest.mark.parametrize(
    "name, site",
    [
        ("torch_logits_gib.txt", oom_site.SITE_LOGITS),
        ("torch_backward_mib.txt", oom_site.SITE_BACKWARD),
        ("torch_generation_mib.txt", oom_site.SITE_GENERATION),
        ("torch_optimizer.txt", oom_site.SITE_OPTIMIZER),
        ("torch_model_load.txt", oom_site.SITE_MODEL_LOAD),
        ("vllm_free_memory.txt", oom_site.SITE_VLLM_START),
        ("vllm_cache_blocks.txt", oom_site.SITE_VLLM_START),
        ("vllm_kv_cache.txt", oom_site.SITE_VLLM_START),
        ("cublas_alloc.txt", oom_site.SITE_FORWARD),
        ("host_cpu_alloc.txt", oom_site.SITE_HOST),
    ],
)
def test_site_of_each_real_text(name, site):
    assert read_oom(text(name)).site == site


def test_site_from_frames_innermost_phase_wins():
    # log-probs computed inside the generation step are logits, not generation
    frames = [
        ("trl/trainer/grpo_trainer.py", "_generate_and_score_completions", ""),
        ("trl/trainer/grpo_trainer.py", "_get_per_token_logps_and_entropies", ""),
        ("torch/nn/functional.py", "linear", ""),
    ]
    assert oom_site.classify_site(frames) == oom_site.SITE_LOGITS
    # a forward through the decoder layers inside the log-prob pass is activations, the LM head is logits
    frames_fwd = frames[:2] + [
        ("transformers/models/qwen2/modeling_qwen2.py", "forward", "attn_output = self.o_proj(attn_output)")
    ]
    assert oom_site.classify_site(frames_fwd) == oom_site.SITE_FORWARD
    frames_head = frames[:2] + [
        (
            "transformers/models/qwen2/modeling_qwen2.py",
            "forward",
            "logits = self.lm_head(hidden_states[:, slice_indices, :])",
        )
    ]
    assert oom_site.classify_site(frames_head) == oom_site.SITE_LOGITS
    assert oom_site.classify_site([]) == oom_site.SITE_UNKNOWN


def test_vllm_start_frames_beat_its_dummy_generation():
    frames = [
        ("unsloth_zoo/vllm_utils.py", "load_vllm", "llm = LLM(**engine_args)"),
        ("vllm/v1/worker/gpu_model_runner.py", "profile_run", ""),
        ("vllm/v1/worker/gpu_model_runner.py", "execute_model", ""),
    ]
    assert oom_site.classify_site(frames) == oom_site.SITE_VLLM_START


def test_frames_read_through_vllm_log_prefixes():
    frames = parse_frames(text("vllm_free_memory.txt"))
    assert frames[-1] == (
        "/usr/local/lib/python3.11/dist-packages/vllm/v1/worker/gpu_worker.py",
        "init_device",
        "raise ValueError(",
    )
    assert len(frames) == 6


def test_vllm_free_memory_below_share():
    r = read_oom(text("vllm_free_memory.txt"))
    assert r.kind == oom.KIND_VLLM
    assert r.vllm_problem == oom.VLLM_SHARE_TOO_LARGE
    assert (r.free_gib, r.total_gib, r.utilization, r.asked_gib) == (5.21, 23.55, 0.7, 16.49)
    assert r.shortfall_gib == pytest.approx(16.49 - 5.21)
    assert r.message.startswith("ValueError: Free memory on device (5.21/23.55 GiB)")  # log prefix removed


def test_vllm_kv_cache_too_small_for_one_sequence():
    r = read_oom(text("vllm_kv_cache.txt"))
    assert r.vllm_problem == oom.VLLM_SHARE_TOO_SMALL
    assert (r.max_model_len, r.asked_gib, r.free_gib) == (8192, 1.0, 0.43)
    assert r.shortfall_gib == pytest.approx(0.57)


def test_vllm_no_cache_blocks_reads_its_memory_profile():
    r = read_oom(text("vllm_cache_blocks.txt"))
    assert r.vllm_problem == oom.VLLM_SHARE_TOO_SMALL
    assert (r.total_gib, r.utilization) == (14.74, 0.25)
    assert r.free_gib == 0.0  # "the rest of the memory reserved for KV Cache is -0.08GiB"
    assert r.message == (
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )


def test_vllm_old_kv_token_message():
    msg = (
        "ValueError: The model's max seq len (29000) is larger than the maximum number of tokens that can "
        "be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine."
    )
    r = read_oom(msg)
    assert (r.kind, r.max_model_len, r.kv_tokens) == (oom.KIND_VLLM, 29000, 23648)


def test_cublas_and_host_ram():
    assert read_oom(text("cublas_alloc.txt")).kind == oom.KIND_CUBLAS
    host = read_oom(text("host_cpu_alloc.txt"))
    assert host.kind == oom.KIND_HOST
    assert host.asked_gib == 16.0


def test_sigkill_is_host_ram_not_gpu():
    r = read_oom("loading shards: 40%|████      | 2/5", returncode=-9)
    assert (r.kind, r.site) == (oom.KIND_HOST, oom_site.SITE_HOST)
    assert read_oom("loading shards", returncode=137).kind == oom.KIND_HOST
    assert read_oom("loading shards", returncode=1) is None
    assert "not a GPU OOM" in explain("", returncode=-9)


def test_unsupported_and_plain_errors_are_not_oom():
    assert read_oom(text("vllm_unsupported.txt")) is None
    assert read_unsupported(text("vllm_unsupported.txt")).startswith(
        "ValueError: Model architectures ['MambaByteForCausalLM'] are not supported"
    )
    assert classify_failure(text("vllm_unsupported.txt")) == "unsupported"
    assert classify_failure(text("not_oom.txt")) == "error"
    assert classify_failure(text("torch_logits_gib.txt")) == "oom"
    assert read_oom(text("not_oom.txt")) is None


def test_exception_objects():
    class OutOfMemoryError(RuntimeError):  # the name torch gives it; no torch import in the launcher
        pass

    assert failure.is_oom_exception(OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB"))
    assert failure.is_oom_exception(
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    )
    assert failure.is_oom_exception(MemoryError())
    assert not failure.is_oom_exception(KeyError("question"))


def test_report_to_dict_rounds_and_has_shortfall():
    d = read_oom(text("torch_logits_gib.txt")).to_dict()
    assert d["shortfall_gib"] == 3.29
    assert d["site"] == "logits/log-probs"
    assert "frames" not in d


def test_explain_logits_diagnosis_text():
    out = explain(text("torch_logits_gib.txt"))
    lines = out.splitlines()
    assert lines[0] == "CUDA out of memory in logits/log-probs (PyTorch's CUDA allocator, GPU 0)."
    assert "  asked     6.01 GiB" in lines
    assert "  free      2.72 GiB of 22.03 GiB" in lines
    assert "  shortfall 3.29 GiB (asked - free)" in lines
    assert "  in use    19.29 GiB by this process" in lines
    assert any(line.startswith("Consumer: the logits") for line in lines)
    assert any(
        line.startswith("Fix: halve per_device_train_batch_size and double gradient_accumulation_steps")
        for line in lines
    )
    assert any(line.startswith("Trade: more micro-steps") for line in lines)


def test_explain_mib_units_and_fragmentation_note():
    out = explain(text("torch_backward_mib.txt"))
    assert "  asked     384 MiB" in out
    assert "  free      202 MiB of 14.58 GiB" in out
    assert "  shortfall 182 MiB (asked - free)" in out
    assert "this is fragmentation" in out


def test_explain_vllm_start_names_the_lever():
    out = explain(text("vllm_free_memory.txt"))
    assert "  asked     16.49 GiB (gpu_memory_utilization 0.7 of 23.55 GiB)" in out
    assert "  free      5.21 GiB when vLLM started" in out
    assert "  shortfall 11.28 GiB" in out
    # (5.21 free - 0.5 headroom) / 23.55 = 0.20
    assert "Fix: lower gpu_memory_utilization to 0.20 or less" in out
    kv = explain(text("vllm_kv_cache.txt"))
    assert "Fix: raise gpu_memory_utilization" in kv


def test_explain_optimizer_and_generation_levers():
    assert "Fix: use an 8-bit optimizer" in explain(text("torch_optimizer.txt"))
    gen = explain(text("torch_generation_mib.txt"))
    assert "Halving the per-device batch does not help here" in gen


def test_explain_not_an_oom():
    assert explain(text("not_oom.txt")).startswith("Not an out-of-memory error")
    assert "architecture is not supported" in explain(text("vllm_unsupported.txt"))


def test_explain_file_exit_codes(tmp_path, capsys, monkeypatch):
    assert explain_file(str(DATA / "torch_logits_gib.txt")) == 0
    assert "shortfall 3.29 GiB" in capsys.readouterr().out
    assert explain_file(str(DATA / "not_oom.txt")) == 0
    assert capsys.readouterr().out.startswith("Not an out-of-memory error")
    assert explain_file(str(tmp_path / "missing.txt")) == 2
    assert "file not found" in capsys.readouterr().err
    assert explain_file(str(tmp_path)) == 2  # a folder cannot be read as text
    monkeypatch.setattr(sys, "stdin", io.StringIO(text("vllm_kv_cache.txt")))
    assert explain_file("-") == 0
    assert "KV cache needed     1.00 GiB for one sequence of 8192 tokens" in capsys.readouterr().out


def test_injected_message_reads_like_a_real_one():
    from profiles.load import profile_from_dict
    from trainer.inject import oom_message

    profile = profile_from_dict(
        {
            "name": "cpu-x",
            "device": "cpu",
            "fast_inference": False,
            "load_in_4bit": False,
            "optim": "adamw_torch",
            "per_device_train_batch_size": 4,
            "max_prompt_length": 128,
            "max_completion_length": 128,
            "max_seq_length": 256,
            "dataset": "arithmetic",
        },
        "<test>",
    )
    r = read_oom(oom_message(profile, vocab_size=151936, total_gib=24.0))
    assert r.kind == oom.KIND_CUDA
    assert r.asked_gib == pytest.approx(4 * 256 * 151936 * 4 / 2**30, abs=0.01)
    assert r.shortfall_gib > 0


# The spellings of an out-of-memory failure that the pinned vLLM 0.32 and unsloth_zoo raise besides PyTorch's,
# each in its upstream wording (vLLM's strings as its sources and its cumem_allocator library format them).


def test_standby_wake_up_out_of_memory_is_an_oom():
    # vLLM's cumem allocator ("CUDA Error: %s at %s:%d", the driver's error string) re-maps the sleeping KV cache
    r = read_oom(text("vllm_cumem_wake.txt"))
    assert r is not None and r.kind == oom.KIND_DRIVER
    assert r.message == "RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62"
    assert failure.is_oom_exception(RuntimeError("CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:7"))
    assert "the CUDA driver" in explain(text("vllm_cumem_wake.txt"))


def test_the_drivers_error_name_is_an_oom():
    # cuda-python's CUresult, as vLLM formats a failed driver call: f"... failed: {err}"
    message = "RuntimeError: cuMemCreate failed: CUresult.CUDA_ERROR_OUT_OF_MEMORY"
    r = read_oom(message)
    assert r is not None and r.kind == oom.KIND_DRIVER
    assert read_oom("RuntimeError: CUDA Error: invalid argument at /workspace/csrc/cumem_allocator.cpp:62") is None


def test_unsloths_standby_start_failure_is_vllm_not_host_ram():
    # unsloth_zoo raises a MemoryError when vLLM cannot start under standby: a GPU failure, not host RAM
    r = read_oom(text("unsloth_standby_start.txt"))
    assert r.kind == oom.KIND_VLLM and r.site == oom_site.SITE_VLLM_START
    assert r.vllm_problem == oom.VLLM_SHARE_TOO_LARGE
    only_unsloth = (
        "MemoryError: Unsloth: Your GPU ran out of memory loading vLLM with standby mode enabled.\n"
        "Your GPU has 22.0 GB VRAM with gpu_memory_utilization=0.784.\n"
    )
    r = read_oom(only_unsloth)
    assert (r.kind, r.total_gib, r.utilization) == (oom.KIND_VLLM, 22.0, 0.784)


def test_vllm_032_start_up_refusals_in_their_own_words():
    free = (
        "ValueError: Free memory on device cuda:0 (5.21/23.55 GiB) on startup is less than desired GPU memory "
        "utilization (0.7, 16.49 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
        "processes."
    )
    r = read_oom(free)
    assert (r.kind, r.vllm_problem, r.free_gib, r.total_gib, r.utilization, r.asked_gib) == (
        oom.KIND_VLLM,
        oom.VLLM_SHARE_TOO_LARGE,
        5.21,
        23.55,
        0.7,
        16.49,
    )
    kv = (
        "ValueError: To serve at least one request with the model's max seq len (1792), (0.22 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (0.1 GiB). Based on the available memory, "
        "the estimated maximum model length is 816. Try increasing `gpu_memory_utilization` (which also "
        "controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    r = read_oom(kv)
    assert (r.vllm_problem, r.max_model_len, r.asked_gib, r.free_gib) == (oom.VLLM_SHARE_TOO_SMALL, 1792, 0.22, 0.1)
    blocks = (
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
        "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
        "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more "
        "details."
    )
    assert read_oom(blocks).vllm_problem == oom.VLLM_SHARE_TOO_SMALL
    sampler = (
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please "
        "try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
    )
    r = read_oom(sampler)
    assert (r.kind, r.site, r.vllm_problem) == (oom.KIND_VLLM, oom_site.SITE_VLLM_START, oom.VLLM_SHARE_TOO_LARGE)
