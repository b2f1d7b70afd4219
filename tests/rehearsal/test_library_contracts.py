"""The keywords the trainer passes to Unsloth and TRL, checked against the installed packages.

A renamed or removed argument fails here, on a machine without a GPU, before it fails on a user's card.
The GPU-path keywords are built for real GPU profiles (4-bit, vLLM, standby) without a GPU.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import inspect
import textwrap
from pathlib import Path

import pytest

from contract import attempt as contract
from contract.environment import ENV_NO_UNSLOTH
from profiles.load import VLLM_LORA_RANKS, load_profile, load_profiles, profile_from_dict
from trainer import backends
from trainer.config import grpo_config_kwargs

REPO = Path(__file__).resolve().parents[2]

GPU_PROFILE = {
    "name": "gpu-contract",
    "model": "unsloth/Qwen2.5-1.5B-Instruct",
    "device": "cuda",
    "load_in_4bit": True,
    "fast_inference": True,
    "vllm_standby": True,
    "gpu_memory_utilization": 0.6,
    "lora_rank": 32,
    "lora_alpha": 64,
    "num_generations": 6,
    "per_device_train_batch_size": 6,
    "gradient_accumulation_steps": 1,
    "optim": "paged_adamw_8bit",
    "gradient_checkpointing": "unsloth",
    "max_seq_length": 1024,
    "max_prompt_length": 256,
    "max_completion_length": 768,
    "max_steps": 250,
    "save_steps": 50,
    "rewards": {"xml_count": 0.5, "accuracy": 2.0},
    "report_to": "tensorboard",
}


@pytest.fixture(scope="module")
def unsloth_first():
    """Unsloth patches TRL and transformers on import: import it first, as the trainer does."""
    module, note = backends.import_unsloth()
    return module


@pytest.fixture(scope="module")
def gpu_profile():
    return profile_from_dict(dict(GPU_PROFILE), "<gpu contract>")


@pytest.fixture(scope="module")
def cpu_profiles():
    return [p for p in load_profiles(REPO / "profiles") if p.device == "cpu"]


# ------------------------------------------------------------------------------------------------
# Reading Unsloth's GPU entry points from source: they cannot be imported without a GPU.


def _unsloth_source(relative: str) -> Path:
    spec = importlib.util.find_spec("unsloth")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("unsloth is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / relative


def _function_node(path: Path, class_name: str, method: str) -> ast.FunctionDef:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    return item
    raise AssertionError(f"{path.name}: {class_name}.{method} not found (renamed upstream?)")


def _named_parameters(node: ast.FunctionDef) -> set[str]:
    args = node.args
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def _strings_read_from_kwargs(function) -> set[str]:
    """Names a **kwargs function reads itself: string constants in its body (kwargs.pop("x"), loops over
    tuples of names). An over-approximation, but a name it never mentions is certainly ignored."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def accepted_keywords(function) -> tuple[set[str], bool]:
    """Named parameters of a callable and whether it also takes **kwargs."""
    parameters = inspect.signature(function).parameters.values()
    names = {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return names, any(p.kind is p.VAR_KEYWORD for p in parameters)


def unknown_keywords(passed: dict, named: set[str], read_from_kwargs: set[str] = frozenset()) -> set[str]:
    return set(passed) - named - set(read_from_kwargs)


# ------------------------------------------------------------------------------------------------
# GRPOConfig


def test_grpo_config_keywords_are_fields_for_the_gpu_path(unsloth_first, gpu_profile):
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    for bf16 in (True, False):
        kwargs = grpo_config_kwargs(gpu_profile, "out", device="cuda", bf16=bf16, use_vllm=True)
        assert set(kwargs) - fields == set()
        assert kwargs["bf16"] is bf16 and kwargs["fp16"] is (not bf16)
    kwargs = grpo_config_kwargs(gpu_profile, "out", device="cuda", bf16=True, use_vllm=True)
    assert kwargs["use_vllm"] is True
    assert kwargs["vllm_gpu_memory_utilization"] == 0.6
    assert kwargs["use_cpu"] is False
    assert kwargs["optim"] == "paged_adamw_8bit"
    assert kwargs["num_generations"] == 6
    assert kwargs["max_completion_length"] == 768
    assert kwargs["per_device_train_batch_size"] == 6
    assert kwargs["gradient_accumulation_steps"] == 1
    assert kwargs["reward_weights"] == [0.5, 2.0]
    assert kwargs["logging_steps"] == 1
    assert kwargs["save_steps"] == 50
    assert kwargs["report_to"] == "tensorboard"
    assert kwargs["warmup_steps"] == 0.1
    assert kwargs["gradient_checkpointing"] is True
    assert "max_prompt_length" not in kwargs  # TRL 1.15 refuses it; prompts are filtered instead


def test_grpo_config_builds_for_every_cpu_profile(unsloth_first, cpu_profiles, tmp_path):
    from trl import GRPOConfig

    assert len(cpu_profiles) >= 2
    for profile in cpu_profiles:
        kwargs = grpo_config_kwargs(profile, str(tmp_path), device="cpu", bf16=False, use_vllm=False)
        config = GRPOConfig(**kwargs)
        assert config.use_cpu is True
        assert config.bf16 is False and config.fp16 is False
        assert config.use_vllm is False
        assert config.num_generations == profile.num_generations
        assert config.generation_batch_size % profile.num_generations == 0
        assert config.reward_weights == list(profile.rewards.values())
        assert "vllm_gpu_memory_utilization" not in kwargs


def test_a_misspelled_config_keyword_is_caught(unsloth_first, gpu_profile):
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    kwargs = grpo_config_kwargs(gpu_profile, "out", device="cuda", bf16=True, use_vllm=True)
    kwargs["max_prompt_length"] = 256  # removed from GRPOConfig in TRL 1.x
    assert set(kwargs) - fields == {"max_prompt_length"}
    with pytest.raises(TypeError):
        GRPOConfig(**{k: v for k, v in kwargs.items() if k not in ("bf16", "fp16", "use_vllm")})


def test_grpo_config_keywords_for_a_vllm_server_profile(unsloth_first, monkeypatch):
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    server = load_profile(REPO / "profiles" / "multi-4x80gb-qwen2.5-14b.yaml")
    assert server.uses_vllm_server and server.num_gpus == 3
    monkeypatch.setenv("GRPO_VLLM_HOST", "10.0.0.7")
    monkeypatch.setenv("GRPO_VLLM_PORT", "8123")
    kwargs = grpo_config_kwargs(server, "out", device="cuda", bf16=True, use_vllm=True)
    assert set(kwargs) - fields == set()
    assert (kwargs["use_vllm"], kwargs["vllm_mode"]) == (True, "server")
    assert (kwargs["vllm_server_host"], kwargs["vllm_server_port"], kwargs["vllm_server_timeout"]) == (
        "10.0.0.7",
        8123,
        900,
    )
    assert kwargs["ddp_find_unused_parameters"] is False
    assert "vllm_tensor_parallel_size" not in kwargs  # the server's own flag (launcher.run.distributed)
    monkeypatch.delenv("GRPO_VLLM_HOST")
    monkeypatch.delenv("GRPO_VLLM_PORT")
    kwargs = grpo_config_kwargs(server.replace(num_gpus=1), "out", device="cuda", bf16=True, use_vllm=True)
    assert (kwargs["vllm_server_host"], kwargs["vllm_server_port"]) == ("127.0.0.1", 8000)
    assert "ddp_find_unused_parameters" not in kwargs  # one training process: no DDP


def test_grpo_config_keywords_for_a_colocated_multi_gpu_profile(unsloth_first):
    from trl import GRPOConfig

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    colocate = profile_from_dict(
        dict(
            GPU_PROFILE,
            vllm_standby=False,
            gradient_checkpointing="true",
            num_gpus=4,
            vllm_mode="colocate",
            vllm_tensor_parallel=2,
        ),
        "<colocate contract>",
    )
    assert colocate.distributed and not colocate.uses_vllm_server
    kwargs = grpo_config_kwargs(colocate, "out", device="cuda", bf16=True, use_vllm=True)
    assert set(kwargs) - fields == set()
    assert (kwargs["vllm_mode"], kwargs["vllm_tensor_parallel_size"]) == ("colocate", 2)
    assert kwargs["vllm_gpu_memory_utilization"] == 0.6
    assert kwargs["ddp_find_unused_parameters"] is False
    assert not any(k.startswith("vllm_server") for k in kwargs)


def test_single_gpu_keywords_leave_the_vllm_mode_to_unsloth(unsloth_first, gpu_profile):
    kwargs = grpo_config_kwargs(gpu_profile, "out", device="cuda", bf16=True, use_vllm=True)
    assert not {"vllm_mode", "vllm_tensor_parallel_size", "ddp_find_unused_parameters"} & set(kwargs)


@pytest.mark.parametrize("world_size, overrides", [("2", {}), ("1", {"num_gpus": 2})])
def test_distributed_attempts_train_without_unsloth(unsloth_first, monkeypatch, cpu_profiles, world_size, overrides):
    monkeypatch.delenv(ENV_NO_UNSLOTH, raising=False)
    monkeypatch.setenv("WORLD_SIZE", world_size)
    profile = cpu_profiles[0].replace(**overrides)
    backend = backends.open_backend(profile)
    assert (backend.name, backend.device, backend.unsloth) == ("transformers", "cpu", None)
    assert backend.note == "GRPO_TRAIN_NO_UNSLOTH is set: training through transformers + peft"


# ------------------------------------------------------------------------------------------------
# FastLanguageModel.from_pretrained / get_peft_model


def test_gpu_from_pretrained_keywords(gpu_profile):
    import torch

    node = _function_node(_unsloth_source("models/loader.py"), "FastLanguageModel", "from_pretrained")
    assert node.args.kwarg is not None  # it takes **kwargs: so check against the named parameters only
    named = _named_parameters(node)
    kwargs = backends.from_pretrained_kwargs(gpu_profile, "unsloth/Qwen2.5-1.5B-Instruct", torch.bfloat16)
    assert unknown_keywords(kwargs, named) == set()
    assert kwargs["fast_inference"] is True
    assert kwargs["load_in_4bit"] is True
    assert kwargs["gpu_memory_utilization"] == 0.6
    assert kwargs["max_lora_rank"] == 32
    assert kwargs["max_seq_length"] == 1024
    assert kwargs["dtype"] is torch.bfloat16
    assert kwargs["full_finetuning"] is False
    assert kwargs["trust_remote_code"] is False
    assert kwargs["use_gradient_checkpointing"] == "unsloth"


def test_gpu_get_peft_model_keywords(gpu_profile):
    node = _function_node(_unsloth_source("models/llama.py"), "FastLlamaModel", "get_peft_model")
    named = _named_parameters(node)
    kwargs = backends.get_peft_model_kwargs(gpu_profile)
    assert unknown_keywords(kwargs, named) == set()
    assert kwargs["r"] == 32 and kwargs["lora_alpha"] == 64
    assert kwargs["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert kwargs["use_gradient_checkpointing"] == "unsloth"


def test_the_facade_delegates_get_peft_model_to_the_checked_signature():
    node = _function_node(_unsloth_source("models/loader.py"), "FastLanguageModel", "get_peft_model")
    calls = [ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)]
    assert "FastLlamaModel.get_peft_model" in calls


def test_cpu_fallback_keywords(unsloth_first, cpu_profiles):
    if unsloth_first is None:
        pytest.skip("unsloth cannot be imported here")
    import torch
    from unsloth import FastLanguageModel

    named, has_kwargs = accepted_keywords(FastLanguageModel.from_pretrained)
    read = _strings_read_from_kwargs(FastLanguageModel.from_pretrained) if has_kwargs else set()
    peft_named, _ = accepted_keywords(FastLanguageModel.get_peft_model)
    for profile in cpu_profiles:
        kwargs = backends.from_pretrained_kwargs(profile, "/models/tiny", torch.float32)
        assert unknown_keywords(kwargs, named, read) == set()
        assert kwargs["fast_inference"] is False
        assert "gpu_memory_utilization" not in kwargs and "max_lora_rank" not in kwargs
        assert unknown_keywords(backends.get_peft_model_kwargs(profile), peft_named) == set()
    # vLLM's keywords on a GPU profile: accepted by name or read from **kwargs by the CPU loader too
    gpu_kwargs = backends.from_pretrained_kwargs(profile_from_dict(dict(GPU_PROFILE), "<gpu>"), "m", torch.bfloat16)
    assert unknown_keywords(gpu_kwargs, named, read) == set()


def test_a_renamed_loader_keyword_is_caught(gpu_profile):
    import torch

    node = _function_node(_unsloth_source("models/loader.py"), "FastLanguageModel", "from_pretrained")
    kwargs = backends.from_pretrained_kwargs(gpu_profile, "m", torch.bfloat16)
    kwargs["gpu_memory_util"] = kwargs.pop("gpu_memory_utilization")
    assert unknown_keywords(kwargs, _named_parameters(node)) == {"gpu_memory_util"}


def test_full_finetuning_at_rank_zero():
    import torch

    profile = profile_from_dict(
        {"name": "full", "device": "cuda", "load_in_4bit": False, "lora_rank": 0, "fast_inference": False}, "<full>"
    )
    kwargs = backends.from_pretrained_kwargs(profile, "m", torch.float16)
    assert kwargs["full_finetuning"] is True
    assert "max_lora_rank" not in kwargs


@pytest.mark.parametrize("rank, slot", [(1, 8), (8, 8), (9, 16), (32, 32), (33, 64), (320, 320), (512, 512)])
def test_vllm_lora_rank(rank, slot):
    assert backends.vllm_lora_rank(rank) == slot
    assert slot in VLLM_LORA_RANKS


@pytest.mark.parametrize(
    "capability, dtype_name", [((8, 0), "bfloat16"), ((9, 0), "bfloat16"), ((7, 5), "float16"), ((6, 1), "float16")]
)
def test_dtype_follows_compute_capability(capability, dtype_name):
    import torch

    backend = backends.Backend(
        name="unsloth", device="cuda", bf16=contract.bf16_capable(capability), compute_capability=capability
    )
    assert backends.model_dtype(backend) is getattr(torch, dtype_name)
    assert backends.model_dtype(backends.Backend(name="unsloth-cpu", device="cpu")) is torch.float32


def test_open_backend_sets_the_attempt_environment_before_anything_loads(unsloth_first, monkeypatch, gpu_profile):
    """The allocator and standby settings are read by Unsloth at import: open_backend sets them first (here
    it then stops, as there is no GPU), the same way the supervisor sets them for its child."""
    import os

    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.delenv("UNSLOTH_VLLM_STANDBY", raising=False)
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    for profile, standby, alloc in [
        (gpu_profile, "1", None),
        (gpu_profile.replace(vllm_standby=False), None, "expandable_segments:True"),
    ]:
        with pytest.raises(RuntimeError, match="torch sees no GPU"):
            backends.open_backend(profile)
        assert os.environ.get("UNSLOTH_VLLM_STANDBY") == standby  # standby manages the allocator itself
        assert os.environ.get("PYTORCH_CUDA_ALLOC_CONF") == alloc
        wanted = contract.attempt_environment(profile)
        assert (wanted.get("UNSLOTH_VLLM_STANDBY"), wanted.get("PYTORCH_CUDA_ALLOC_CONF")) == (standby, alloc)


def test_token_comes_from_the_environment_only(monkeypatch, gpu_profile):
    import torch

    monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
    assert backends.from_pretrained_kwargs(gpu_profile, "m", torch.bfloat16)["token"] == "hf_secret_value"
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    assert backends.from_pretrained_kwargs(gpu_profile, "m", torch.bfloat16)["token"] is None


# ------------------------------------------------------------------------------------------------
# TRL's fused LM head: the names the CPU fallback replaces must still be there.


def test_trl_fused_head_hook_exists(unsloth_first):
    from trl.trainer import utils as trl_utils

    assert hasattr(trl_utils, "_ChunkedLogProbFunction")
    assert "_ChunkedLogProbFunction.apply" in inspect.getsource(trl_utils.add_fused_lm_head)


def test_reward_names_are_what_trl_logs():
    from rewards import get_reward_funcs

    funcs, weights = get_reward_funcs({"xml_count": 1.0, "accuracy": 2.0})
    assert [f.__name__ for f in funcs] == ["xml_count", "accuracy"]
    assert weights == [1.0, 2.0]
