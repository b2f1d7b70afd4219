"""The vLLM glue checked against the pinned vLLM's own code, on CPU.

vLLM is never installed into the project's environment (its wheel pins a CUDA torch). `make vllm-side` puts its
Python code, and the small pure-Python packages it imports, into a side folder without dependencies
(requirements/vllm-side.txt). These tests run probes in a fresh interpreter with that folder on PYTHONPATH and
skip, saying so, where the folder is absent.

Why a fresh interpreter per probe: on a machine without libcuda, `import unsloth` finds vLLM's compiled
extension unloadable, calls vLLM broken, removes it from sys.modules and blocks any later `import vllm` in that
process. So vLLM is inspected in processes that never import Unsloth, and Unsloth's side in one that does.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from support.waiting import run_to_end

REPO = Path(__file__).resolve().parents[2]


def side_folder() -> Path:
    """GRPO_VLLM_SIDE, else `make vllm-side`'s .vllm-side/, else a PYTHONPATH entry that holds vLLM."""
    if os.environ.get("GRPO_VLLM_SIDE"):
        return Path(os.environ["GRPO_VLLM_SIDE"])
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and (Path(entry) / "vllm" / "__init__.py").is_file() and not (REPO / ".vllm-side").is_dir():
            return Path(entry)
    return REPO / ".vllm-side"


SIDE = side_folder()

pytestmark = pytest.mark.skipif(
    not (SIDE / "vllm" / "__init__.py").is_file(),
    reason=f"no vLLM side folder at {SIDE} (run `make vllm-side`, or point GRPO_VLLM_SIDE or PYTHONPATH at one)",
)


def probe(code: str) -> dict:
    """Run `code` in a fresh interpreter with the side folder importable; it prints one JSON object last."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SIDE), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    with tempfile.TemporaryDirectory() as scratch:  # Unsloth writes its compiled cache into the working folder
        done = run_to_end([sys.executable, "-c", code], env=env, cwd=scratch)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and lines, (
        f"probe failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return json.loads(lines[-1])


def package_file(package: str, relative: str) -> Path:
    """A file of an installed package, found without importing it (importing unsloth_zoo needs unsloth)."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    return Path(list(spec.submodule_search_locations)[0]) / relative


def call_keywords(path: Path, callee: str, inside: str | None = None) -> set[str]:
    """Keyword names of every call to `callee` (a name or an attribute) in `path`, optionally only inside the
    function `inside`. Read from the source, so a renamed keyword in our code is checked automatically."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = [tree]
    if inside:
        roots = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == inside]
        assert roots, f"{path}: no function {inside}"
    names: set[str] = set()
    for root in roots:
        for node in ast.walk(root):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name == callee:
                names |= {k.arg for k in node.keywords if k.arg}
    return names


def dict_keys_assigned(path: Path, variable: str, inside: str) -> set[str]:
    """Keys of `variable = dict(k=...)` / `variable = {"k": ...}` and of `variable["k"] = ...` in a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == inside)
    keys: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == variable:
                    value = node.value
                    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "dict":
                        keys |= {k.arg for k in value.keywords if k.arg}
                    elif isinstance(value, ast.Dict):
                        keys |= {k.value for k in value.keys if isinstance(k, ast.Constant)}
                if (
                    isinstance(target, ast.Subscript)
                    and getattr(target.value, "id", "") == variable
                    and isinstance(target.slice, ast.Constant)
                ):
                    keys.add(target.slice.value)
    return keys


VLLM_FACTS = r"""
import dataclasses, inspect, json, typing
import vllm
from vllm import LLM, SamplingParams
from vllm.engine.arg_utils import EngineArgs
from vllm.inputs import TokensPrompt
from vllm.lora.request import LoRARequest
from vllm.config.lora import MaxLoRARanks
from vllm.config import model as model_config
import torch
try:
    model_config._check_valid_dtype("gemma3_text", torch.float16)
    refusal = None
except ValueError as exc:
    refusal = str(exc)
SamplingParams(temperature=0.0, max_tokens=8)  # what evaluation builds: must construct on CPU
print(json.dumps({
    "version": vllm.__version__,
    "sampling_fields": sorted(SamplingParams.__struct_fields__),
    "engine_fields": sorted(f.name for f in dataclasses.fields(EngineArgs)),
    "generate_params": sorted(inspect.signature(LLM.generate).parameters),
    "tokens_prompt_keys": sorted(typing.get_type_hints(TokensPrompt)),
    "lora_request_fields": sorted(LoRARequest.__struct_fields__),
    "lora_ranks": sorted(typing.get_args(MaxLoRARanks)),
    "float16_refused": sorted(model_config._FLOAT16_NOT_SUPPORTED_MODELS),
    "float16_refusal": refusal,
}))
"""


@pytest.fixture(scope="module")
def vllm_facts(tmp_path_factory) -> dict:
    from support.once import once_per_run

    # once for the whole run (vLLM's import is seconds), whichever pytest-xdist workers get the module's tests
    return once_per_run(tmp_path_factory, "vllm-facts", lambda folder: probe(VLLM_FACTS))[1]


def test_the_side_folder_holds_the_pinned_vllm(vllm_facts):
    lock = (REPO / "requirements" / "gpu.lock").read_text(encoding="utf-8")
    pinned = next(line.split()[0].split("==")[1] for line in lock.splitlines() if line.startswith("vllm=="))
    assert vllm_facts["version"] == pinned


def test_the_image_builds_import_check_passes():
    # what `docker build` runs after installing the lock (scripts/check_imports.py): TRL's vLLM glue, the
    # bitsandbytes plugin, then Unsloth and unsloth_zoo's vLLM loader imported after TRL's vLLM client
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SIDE), str(REPO)])
    done = run_to_end(
        [sys.executable, str(REPO / "scripts" / "check_imports.py")],
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.count("ok: ") == 3


def test_evaluation_calls_vllm_with_its_own_keywords(vllm_facts):
    evaluate = REPO / "evaluation" / "generate.py"
    sampling = call_keywords(evaluate, "SamplingParams")
    generate = call_keywords(evaluate, "fast_generate")  # Unsloth's fast_generate is the engine's LLM.generate
    assert sampling and generate, "evaluation/generate.py no longer builds SamplingParams / calls fast_generate"
    assert sampling <= set(vllm_facts["sampling_fields"]), sampling - set(vllm_facts["sampling_fields"])
    assert generate <= set(vllm_facts["generate_params"]), generate - set(vllm_facts["generate_params"])


def test_token_id_prompts_are_a_vllm_prompt_form(vllm_facts):
    # evaluation sends the ids the tokenizer's chat template gives, as training does (no second BOS)
    assert "prompt_token_ids" in vllm_facts["tokens_prompt_keys"]
    assert "prompts" in vllm_facts["generate_params"]


def test_trl_sampling_and_engine_keywords_are_vllms(vllm_facts):
    source = package_file("trl", "generation/vllm_generation.py")
    sampling = dict_keys_assigned(source, "generation_kwargs", "generate")
    engine = call_keywords(source, "LLM")
    assert sampling and engine
    assert sampling <= set(vllm_facts["sampling_fields"]), sampling - set(vllm_facts["sampling_fields"])
    assert engine <= set(vllm_facts["engine_fields"]), engine - set(vllm_facts["engine_fields"])


# What the project relies on Unsloth to hand vLLM. Unsloth drops every key EngineArgs does not name, printing
# "not supported in vLLM. Skipping." (unsloth_zoo.vllm_utils.load_vllm): standby, the LoRA rank or the memory
# share would then be lost without an error.
UNSLOTH_ENGINE_KEYS_NEEDED = {
    "model",
    "gpu_memory_utilization",
    "max_model_len",
    "dtype",
    "quantization",
    "load_format",
    "enable_lora",
    "max_lora_rank",
    "max_loras",
    "enable_sleep_mode",
    "max_num_seqs",
    "max_num_batched_tokens",
    "logprobs_mode",
    "seed",
    "enable_prefix_caching",
    "enforce_eager",
}


def test_unsloth_engine_arguments_reach_vllm(vllm_facts):
    source = package_file("unsloth_zoo", "vllm_utils.py")
    passed = dict_keys_assigned(source, "engine_args", "load_vllm")
    assert UNSLOTH_ENGINE_KEYS_NEEDED <= passed, UNSLOTH_ENGINE_KEYS_NEEDED - passed
    missing = UNSLOTH_ENGINE_KEYS_NEEDED - set(vllm_facts["engine_fields"])
    assert not missing, f"vLLM's EngineArgs lacks {sorted(missing)}: Unsloth would drop them silently"


def test_unsloth_forwards_our_vllm_keywords():
    from profiles.load import load_profile
    from trainer.backends import from_pretrained_kwargs

    profile = load_profile(REPO / "profiles" / "gpu-16gb-gemma3-1b.yaml")
    ours = from_pretrained_kwargs(profile, profile.model, None, fast_inference=True)
    facts = probe(r"""
import inspect, json
import unsloth
import unsloth_zoo.vllm_utils as zoo
print(json.dumps({"load_vllm": sorted(inspect.signature(zoo.load_vllm).parameters),
                  "load_lora": sorted(inspect.signature(zoo.load_lora).parameters)}))
""")
    for key in ("gpu_memory_utilization", "max_lora_rank", "max_seq_length"):
        assert key in ours and key in facts["load_vllm"], key
    # evaluation asks for the trained adapter as `model.load_lora(path)`
    assert {"model", "save_directory"} <= set(facts["load_lora"])


def test_our_lora_ranks_are_vllms(vllm_facts):
    from profiles.load import VLLM_LORA_RANKS

    assert set(VLLM_LORA_RANKS) == set(vllm_facts["lora_ranks"]) - {1}


def test_float16_refusals_are_vllms_and_read_as_unsupported(vllm_facts):
    from contract.failure import read_unsupported
    from profiles.catalog import VLLM_FLOAT16_REFUSED

    assert set(VLLM_FLOAT16_REFUSED) == set(vllm_facts["float16_refused"])
    message = vllm_facts["float16_refusal"]
    assert message and "does not support float16" in message
    assert read_unsupported(message), message


def test_our_server_command_parses_as_trl_vllm_serve():
    from launcher.run.vllm_server import server_command
    from profiles.load import load_profile

    profile = load_profile(REPO / "profiles" / "multi-4x80gb-qwen2.5-14b.yaml")
    argv = server_command(profile, 8123)
    flags = argv[argv.index("vllm-serve") + 1 :]
    script = r"""
import json, sys
from trl.scripts.vllm_serve import build_command, make_parser
args, extra = make_parser().parse_args_and_config(args=FLAGS, return_remaining_strings=True)
print(json.dumps({"command": build_command(args, extra), "extra": extra}))
"""
    facts = probe(script.replace("FLAGS", repr(flags)))
    assert facts["extra"] == []
    command = facts["command"]
    assert command[command.index("serve") + 1] == profile.model
    assert command[command.index("--max-model-len") + 1] == str(profile.max_seq_length)
