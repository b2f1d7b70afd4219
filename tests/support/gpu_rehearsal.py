"""A rehearsal of one GPU attempt's model load, on a machine without a GPU.

Run as a script in a fresh interpreter (tests/rehearsal/test_gpu_rehearsal.py does):

    python tests/support/gpu_rehearsal.py PROFILE.yaml CARD_GIB MAJOR.MINOR [--free-gib F] [--set KEY=VALUE ...]
    python tests/support/gpu_rehearsal.py --cases JSON [--without PACKAGE]   (several cards of one capability)

It loads the profile as an attempt does, then calls the real `FastLanguageModel.from_pretrained` with the
keywords trainer.backends builds for it. Unsloth, unsloth_zoo's `load_vllm`, vLLM's `LLM`, `EngineArgs` and
its configuration (quantization plugins included) all run as they would on the card. Only what a GPU provides
is stood in for:
  - vLLM's compiled extension modules (every `*.so` of the vllm package) and bitsandbytes' native library;
  - torch.cuda's device queries (available, count, capability, name, properties, free memory) and NVML's,
    which vLLM reads to pick its CUDA platform;
  - the first CUDA allocation: vLLM's engine core is where the configuration becomes allocated memory, so
    its creation is where the rehearsal stops, with the finished configuration in hand.
The hub is not reached: a Hugging Face cache in a temporary folder holds, for the profile's model and the
repository Unsloth maps it to, the config.json of the real architecture (profiles.catalog) and a
tokenizer; no weight is read before the stop.

It prints one JSON line: `{"reached": true, "engine": {...}}` with what vLLM would have started, or
`{"reached": false, "error": ...}` with the exception that stopped the load before it got there.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3


class ReachedTheGpu(BaseException):
    """Raised where vLLM would start allocating; a BaseException so that no `except Exception` retry loop on
    the way (unsloth_zoo retries a failed engine start with a lower share) mistakes it for a failure."""

    def __init__(self, vllm_config):
        super().__init__("vLLM's engine core would start here")
        self.vllm_config = vllm_config


# ---------------------------------------------------------------------------------------------------
# Compiled modules


class _CompiledStandIn(types.ModuleType):
    """A compiled extension that was not loaded: any use of it says so (none is expected before the stop)."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args, **kwargs):
            raise RuntimeError(f"{self.__name__}.{name} is compiled GPU code, stood in for by the rehearsal")

        return call


class _CompiledFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname in self.names:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=False)
        return None

    def create_module(self, spec):
        return _CompiledStandIn(spec.name)

    def exec_module(self, module):
        pass


class _OpsStandIn:
    """A torch.ops namespace that vLLM's compiled modules would have filled. vLLM asks a few of its ops what
    the card supports while its modules are imported ("..._supports_..."): they answer no (the portable
    kernels; no configuration read here depends on them). Every other op is absent, as vLLM's own guards
    (`hasattr(torch.ops._C, ...)`) expect of a build without it."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, name):
        if "supports" in name and not name.startswith("__"):
            return lambda *args, **kwargs: False
        raise AttributeError(f"torch.ops.{self._name}.{name}: compiled GPU code, not loaded by the rehearsal")


VLLM_OP_NAMESPACES = (
    "_C",
    "_moe_C",
    "_C_cache_ops",
    "_C_custom_ar",
    "_rocm_C",
    "_vllm_fa2_C",
    "_vllm_fa3_C",
    "_flashmla_C",
    "_flashmla_extension_C",
    "_qutlass_C",
)


def compiled_modules(package: str) -> set[str]:
    """Every compiled extension module of an installed package, by its dotted name (found, not imported)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return set()
    root = Path(list(spec.submodule_search_locations)[0])
    names = set()
    for library in root.rglob("*.so"):
        relative = library.relative_to(root.parent)
        names.add(".".join(relative.parts[:-1] + (relative.name.split(".")[0],)))
    return names


class _NativeLibraryStandIn:
    """bitsandbytes' CUDA library, not loaded: each symbol is a C function pointer (Unsloth checks that it is
    one before it allows 4-bit) that does nothing; none is called before the stop."""

    def __init__(self, path: str):
        self._name = path
        self._symbols = {}

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name not in self._symbols:
            self._symbols[name] = ctypes.CFUNCTYPE(None)(lambda: None)
        return self._symbols[name]


def stand_in_for_native_libraries() -> None:
    """bitsandbytes loads its CUDA build with ctypes at import; hand it the stand-in instead."""
    load = ctypes.cdll.LoadLibrary

    def load_library(path, *args, **kwargs):
        name = os.path.basename(str(path))
        if name.startswith("libbitsandbytes_cuda"):
            return _NativeLibraryStandIn(str(path))
        return load(path, *args, **kwargs)

    ctypes.cdll.LoadLibrary = load_library


def stand_in_for_the_cuda_runtime() -> None:
    """vLLM opens the CUDA runtime library with ctypes (its sleep-mode allocator does, at import): it finds the
    stand-in under the name torch's CUDA build loads."""
    name = "libcudart.so.13"
    os.environ["VLLM_CUDART_SO_PATH"] = name
    from vllm.distributed.device_communicators.cuda_wrapper import CudaRTLibrary

    CudaRTLibrary.path_to_library_cache[name] = _NativeLibraryStandIn(name)


class _Absent(importlib.abc.MetaPathFinder):
    """Makes installed packages unimportable, to rehearse a machine that lacks them (--without)."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named '{fullname}' (left out by the rehearsal)", name=fullname)
        return None


# ---------------------------------------------------------------------------------------------------
# The card


class Card:
    def __init__(self, total_gib: float, capability: tuple[int, int], free_gib: float, name: str):
        self.total = int(total_gib * GIB)
        self.free = int(free_gib * GIB)
        self.capability = capability
        self.name = name


# The card every stand-in answers for. Set once before the imports; a fork that rehearses another card of the
# same compute capability sets it again (use_card), so that whatever Unsloth wrapped around the stand-ins at
# import stays in place and answers for the new card.
_CARD: list[Card] = []
_PROPERTIES = types.SimpleNamespace(
    multi_processor_count=108,
    uuid="GPU-00000000-0000-0000-0000-000000000000",
    L2_cache_size=40 * 2**20,
    warp_size=32,
    gcnArchName="",
    is_integrated=False,
    max_threads_per_multi_processor=2048,
)
_MEMORY = types.SimpleNamespace()


def use_card(card: Card) -> None:
    """Make every stand-in answer as `card` does."""
    _CARD[:] = [card]
    _PROPERTIES.name, _PROPERTIES.total_memory = card.name, card.total
    _PROPERTIES.major, _PROPERTIES.minor = card.capability
    _MEMORY.total, _MEMORY.free, _MEMORY.used = card.total, card.free, card.total - card.free


class _EventStandIn:
    """A CUDA event: nothing to wait for without a device."""

    def __init__(self, *args, **kwargs):
        pass

    def record(self, *args, **kwargs):
        pass

    def wait(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def query(self):
        return True


class _StreamStandIn(_EventStandIn):
    device = "cuda:0"

    def wait_stream(self, *args, **kwargs):
        pass

    def wait_event(self, *args, **kwargs):
        pass


def stand_in_for_the_card(card: Card) -> None:
    """torch.cuda's and NVML's device queries answer as `card` would (and as the card use_card sets later)."""
    import pynvml
    import torch

    use_card(card)
    properties = _PROPERTIES
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.is_initialized = lambda: True
    cuda.device_count = lambda: 1
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda *a, **k: _CARD[0].capability
    cuda.get_device_name = lambda *a, **k: _CARD[0].name
    cuda.get_device_properties = lambda *a, **k: properties
    cuda.mem_get_info = lambda *a, **k: (_CARD[0].free, _CARD[0].total)
    cuda.is_bf16_supported = lambda *a, **k: _CARD[0].capability >= (8, 0)
    for name in ("set_device", "synchronize", "empty_cache", "reset_peak_memory_stats", "init"):
        setattr(cuda, name, lambda *a, **k: None)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(cuda, name, lambda *a, **k: 0)
    cuda.Event = _EventStandIn
    cuda.Stream = _StreamStandIn
    cuda.current_stream = lambda *a, **k: _StreamStandIn()
    cuda.default_stream = lambda *a, **k: _StreamStandIn()
    cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.version.cuda = "13.0"
    # bitsandbytes' CUDA backend reads the current stream's handle when it is imported
    torch._C._cuda_getCurrentRawStream = lambda *a: 0
    # Page-locked host memory is allocated by the CUDA driver: without one, ordinary host memory stands in
    # (Unsloth's offloaded activation checkpoints ask for it when the model loads)
    for name in ("empty", "zeros"):
        make = getattr(torch, name)

        def unpinned(*args, _make=make, **kwargs):
            kwargs.pop("pin_memory", None)
            return _make(*args, **kwargs)

        setattr(torch, name, unpinned)
    torch.Tensor.pin_memory = lambda self, *a, **k: self

    memory = _MEMORY
    answers = {
        "nvmlInit": lambda *a: None,
        "nvmlShutdown": lambda *a: None,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda index: ("card", index),
        "nvmlDeviceGetCudaComputeCapability": lambda handle: _CARD[0].capability,
        "nvmlDeviceGetName": lambda handle: _CARD[0].name,
        "nvmlDeviceGetMemoryInfo": lambda handle: memory,
        "nvmlDeviceGetUUID": lambda handle: properties.uuid,
        "nvmlSystemGetDriverVersion": lambda: "580.95.05",
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlDeviceGetP2PStatus": lambda *a: 0,
    }
    import vllm.third_party.pynvml as vllm_pynvml  # vLLM reads its own copy of the NVML bindings

    for module in (pynvml, vllm_pynvml):
        for name, answer in answers.items():
            setattr(module, name, answer)


def stop_where_vllm_would_allocate() -> None:
    """vLLM's engine core (in this process, or its own) is built from the finished configuration: stop there."""
    from vllm.v1.engine import core_client

    def make_client(*args, **kwargs):
        vllm_config = kwargs.get("vllm_config")
        if vllm_config is None:
            vllm_config = next(a for a in args if type(a).__name__ == "VllmConfig")
        raise ReachedTheGpu(vllm_config)

    core_client.EngineCoreClient.make_client = staticmethod(make_client)


# ---------------------------------------------------------------------------------------------------
# The hub, offline


def config_json(arch, quantized: bool) -> dict:
    """The config.json of a catalogued architecture, as its hub repository has it (the keys vLLM and Unsloth
    read before any weight is loaded)."""
    architectures = {
        "llama": "LlamaForCausalLM",
        "qwen2": "Qwen2ForCausalLM",
        "qwen3": "Qwen3ForCausalLM",
        "gemma3_text": "Gemma3ForCausalLM",
        "mistral": "MistralForCausalLM",
    }
    config = {
        "architectures": [architectures[arch.family]],
        "model_type": arch.family,
        "hidden_size": arch.hidden,
        "num_hidden_layers": arch.layers,
        "num_attention_heads": arch.heads,
        "num_key_value_heads": arch.kv_heads,
        "head_dim": arch.head_dim,
        "intermediate_size": arch.intermediate,
        "vocab_size": arch.vocab,
        "tie_word_embeddings": arch.tied_embeddings,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
        "rope_theta": 1000000.0,
    }
    if arch.family == "llama":
        config.update(
            max_position_embeddings=131072,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 32.0 if arch.layers == 28 else 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        )
    if arch.family == "gemma3_text":
        config.update(
            hidden_act="gelu_pytorch_tanh",
            hidden_activation="gelu_pytorch_tanh",
            query_pre_attn_scalar=256,
            sliding_window=512,
            rope_local_base_freq=10000.0,
            final_logit_softcapping=None,
            attn_logit_softcapping=None,
            sliding_window_pattern=6,
        )
    if quantized:
        config["quantization_config"] = {
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "load_in_8bit": False,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": True,
            "bnb_4bit_compute_dtype": "bfloat16",
            "bnb_4bit_quant_storage": "uint8",
            "llm_int8_skip_modules": ["lm_head"],
        }
    return config


def tokenizer_files(folder: Path, vocab: int) -> None:
    """A small byte-level tokenizer: vLLM builds one at engine start; its size is not the model's business."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(["<pad>", "<s>", "</s>"])
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "model_max_length": 131072,
                "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
            }
        )
    )


def offline_hub(root: Path, repos: dict[str, dict]) -> None:
    """A Hugging Face cache under `root` holding each repository's config.json and tokenizer at one revision."""
    revision = "0" * 40
    for repo, config in repos.items():
        base = root / "hub" / ("models--" + repo.replace("/", "--"))
        snapshot = base / "snapshots" / revision
        snapshot.mkdir(parents=True, exist_ok=True)
        (base / "refs").mkdir(exist_ok=True)
        (base / "refs" / "main").write_text(revision)
        (snapshot / "config.json").write_text(json.dumps(config, indent=1))
        (snapshot / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
        tokenizer_files(snapshot, config["vocab_size"])


# ---------------------------------------------------------------------------------------------------


def engine_facts(vllm_config) -> dict:
    model = vllm_config.model_config
    lora = vllm_config.lora_config
    return {
        "model": model.model,
        "quantization": model.quantization,
        "load_format": str(vllm_config.load_config.load_format),
        "dtype": str(model.dtype).replace("torch.", ""),
        "gpu_memory_utilization": vllm_config.cache_config.gpu_memory_utilization,
        "max_model_len": model.max_model_len,
        "enable_lora": lora is not None,
        "max_lora_rank": lora.max_lora_rank if lora is not None else None,
        "enable_sleep_mode": bool(model.enable_sleep_mode),
        "max_num_seqs": vllm_config.scheduler_config.max_num_seqs,
        "platform": type(__import__("vllm.platforms", fromlist=["current_platform"]).current_platform).__name__,
    }


class Case:
    """One rehearsal: a profile (with --set overrides) on a card."""

    def __init__(self, profile: str, card: Card, overrides: list[str]):
        self.profile, self.card, self.overrides = profile, card, list(overrides)


def prepare(cases: list[Case], without: set[str] = frozenset()):
    """Everything before the load, once for `cases`: the offline hub with every case's repositories, the
    environment, the stand-ins (answering for the first case's card), then Unsloth's import. The cases must be
    ones Unsloth cannot tell apart at import: one compute capability (it caches what it derives from it) and
    one attempt environment (standby or not). Returns (loaded profiles, FastLanguageModel, unsloth)."""
    sys.path.insert(0, str(REPO))
    if without:
        sys.meta_path.insert(0, _Absent(set(without)))
    from contract.attempt import apply_attempt_environment, attempt_environment
    from profiles.catalog import resolve
    from profiles.load import load_profile

    profiles = [load_profile(Path(case.profile), case.overrides) for case in cases]
    if len({case.card.capability for case in cases}) > 1:
        raise ValueError(
            "the cases of one import must share a compute capability: "
            + str(sorted({case.card.capability for case in cases}))
        )
    if len({json.dumps(attempt_environment(p, {}), sort_keys=True) for p in profiles}) > 1:
        raise ValueError("the cases of one import must share the attempt environment (standby, or not)")

    hub = Path(tempfile.mkdtemp(prefix="rehearsal-hub-"))
    atexit.register(shutil.rmtree, hub, True)
    repos = {}
    for profile in profiles:
        arch = resolve(profile.model)
        repos[profile.model] = config_json(arch, quantized=False)
        if profile.load_in_4bit:
            # Unsloth loads its pre-quantized repository for a 4-bit run (unsloth.models.loader_utils mappers)
            repos[profile.model + "-unsloth-bnb-4bit"] = config_json(arch, quantized=True)
            repos[profile.model + "-bnb-4bit"] = config_json(arch, quantized=True)
    offline_hub(hub, repos)
    os.environ.update(
        HF_HOME=str(hub),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_LOGGING_LEVEL="WARNING",
        UNSLOTH_DISABLE_STATISTICS="1",
    )
    apply_attempt_environment(profiles[0])  # standby and the allocator, before Unsloth is imported

    from trainer.backends import collector_paused, import_training_libraries

    with collector_paused():  # as an attempt imports the libraries (trainer.backends.open_backend)
        stand_in_for_the_card(cases[0].card)
        stand_in_for_native_libraries()
        names = compiled_modules("vllm") | {"vllm._C", "vllm._moe_C", "vllm._rocm_C"}
        sys.meta_path.insert(0, _CompiledFinder(names))
        import torch

        for namespace in VLLM_OP_NAMESPACES:
            setattr(torch.ops, namespace, _OpsStandIn(namespace))
        stand_in_for_the_cuda_runtime()

        import unsloth  # noqa: F401
        from unsloth import FastLanguageModel

        import_training_libraries()
    stop_where_vllm_would_allocate()
    return profiles, FastLanguageModel, unsloth


def load(profile, card: Card, fast_language_model, unsloth) -> dict:
    """The profile's model load on `card`, as an attempt starts it, up to where vLLM would allocate."""
    from contract.attempt import bf16_capable
    from trainer.backends import Backend, from_pretrained_kwargs, model_dtype

    use_card(card)
    backend = Backend(
        name="unsloth",
        device="cuda",
        unsloth=unsloth,
        bf16=bf16_capable(card.capability),
        compute_capability=card.capability,
        gpu_name=card.name,
    )
    kwargs = from_pretrained_kwargs(profile, profile.model, model_dtype(backend), fast_inference=True)
    try:
        fast_language_model.from_pretrained(**kwargs)
    except ReachedTheGpu as reached:
        return {"reached": True, "engine": engine_facts(reached.vllm_config)}
    except Exception as exc:  # noqa: BLE001 - what stopped the load is the finding
        return {"reached": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    return {"reached": False, "error": "from_pretrained returned without starting vLLM"}


def rehearse(cases: list[Case], without: set[str] = frozenset()) -> list[dict]:
    """Each case's result. One case loads in this process, as a fresh attempt does. Several load each in a fork
    of this process taken after the one import (Unsloth's takes about 15 s of the 18 s a rehearsal costs): a
    fork starts from the state the import left, as the fresh process of that card would have it."""
    profiles, fast_language_model, unsloth = prepare(cases, without)
    if len(cases) == 1:
        return [load(profiles[0], cases[0].card, fast_language_model, unsloth)]
    results = []
    for profile, case in zip(profiles, cases):
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # the child: one load, its result down the pipe, and out without running atexit hooks
            os.close(read)
            try:
                result = load(profile, case.card, fast_language_model, unsloth)
            except BaseException as exc:  # noqa: BLE001 - anything that escaped the load is this case's finding
                result = {"reached": False, "error": f"{type(exc).__name__}: {exc}"}
            with os.fdopen(write, "w") as pipe:
                pipe.write(json.dumps(result))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            text = pipe.read()
        _, status = os.waitpid(child, 0)
        results.append(json.loads(text) if text else {"reached": False, "error": f"the fork ended ({status})"})
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", nargs="?")
    parser.add_argument("total_gib", type=float, nargs="?")
    parser.add_argument("capability", nargs="?")
    parser.add_argument("--free-gib", type=float, default=None)
    parser.add_argument("--name", default="NVIDIA rehearsal card")
    parser.add_argument("--set", action="append", default=[], dest="overrides")
    parser.add_argument("--without", action="append", default=[], help="a package to rehearse without")
    parser.add_argument(
        "--cases",
        help="a JSON list of cases instead of the one above, each {profile, total_gib, capability, free_gib, "
        "name, overrides}: one import, a fork per case; one JSON line each, in order",
    )
    args = parser.parse_args(argv)

    def card(total_gib: float, capability: str, free_gib: float | None, name: str) -> Card:
        major_minor = tuple(int(x) for x in capability.split("."))
        return Card(total_gib, major_minor, total_gib if free_gib is None else free_gib, name)  # type: ignore[arg-type]

    if args.cases:
        cases = [
            Case(c["profile"], card(c["total_gib"], c["capability"], c.get("free_gib"), c["name"]), c["overrides"])
            for c in json.loads(args.cases)
        ]
    elif args.profile and args.total_gib and args.capability:
        cases = [Case(args.profile, card(args.total_gib, args.capability, args.free_gib, args.name), args.overrides)]
    else:
        parser.error("give PROFILE CARD_GIB MAJOR.MINOR, or --cases")
    for result in rehearse(cases, set(args.without)):
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
