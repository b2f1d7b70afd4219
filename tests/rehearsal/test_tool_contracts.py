"""Tools on the GPU path, read against the installed Unsloth and TRL: the trainer Unsloth generates from TRL's
GRPOTrainer keeps its `tools` and `environment_factory` arguments, Unsloth's GRPO loss multiplies TRL's tool
mask into its loss mask (unsloth_zoo's accumulated loss takes it), Unsloth maps its own chat templates to the
ones TRL knows for tool calls, and the private TRL method evaluation borrows is where evaluation.turns expects
it. Read from source: Unsloth's GPU modules cannot be imported without a GPU."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path

import pytest


def _source(package: str, relative: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed")
    return (Path(list(spec.submodule_search_locations)[0]) / relative).read_text(encoding="utf-8")


def _function(source: str, name: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not found (renamed upstream?)")


def test_unsloths_generated_trainer_keeps_tools_and_environment_factory():
    from trl import GRPOTrainer

    parameters = inspect.signature(GRPOTrainer.__init__).parameters
    for name in ("tools", "environment_factory"):
        assert parameters[name].default is None
    # Unsloth writes its trainer's __init__ from TRL's signature, keeping the arguments whose defaults are of
    # these types (None among them) and passing each on by name
    body = _function(_source("unsloth", "models/rl.py"), "_patch_trl_rl_trainers_impl")
    kept = [
        node.value
        for node in ast.walk(body)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "types" for t in node.targets)
    ]
    assert kept and "type(None)" in ast.unparse(kept[0])
    assert "call_args.append(f'{k} = {k}')" in ast.unparse(body)


def test_unsloths_grpo_loss_keeps_tool_tokens_out():
    replacements = _source("unsloth", "models/rl_replacements.py")
    loss = ast.unparse(_function(replacements, "grpo_trainer_compute_loss"))
    assert "inputs.get('tool_mask', None)" in loss
    assert "completion_mask * tool_mask" in loss
    zoo = _function(_source("unsloth_zoo", "rl_replacements.py"), "grpo_accumulated_loss")
    assert "tool_mask" in [a.arg for a in zoo.args.args + zoo.args.kwonlyargs]


def test_unsloth_maps_its_chat_templates_to_trls_for_tool_calls():
    source = _source("unsloth", "models/_trl_tool_templates.py")
    names = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
    assert {"patch_trl_tool_chat_templates", "with_trl_known_chat_template", "with_response_parser"} <= names
    assert "patch_trl_tool_chat_templates()" in _source("unsloth", "models/rl.py")


def test_trls_reply_suffix_is_where_evaluation_borrows_it():
    from trl import GRPOTrainer

    method = GRPOTrainer._get_tool_suffix_ids
    assert list(inspect.signature(method).parameters) == ["self", "tool_messages"]
    read = {n.attr for n in ast.walk(ast.parse(inspect.getsource(method).strip().replace("\n    ", "\n"))) if
            isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"}  # fmt: skip
    # what evaluation.turns.tool_suffix_ids gives it
    assert read <= {"processing_class", "_tokenizer", "chat_template", "chat_template_kwargs", "_is_vlm"}


def test_a_rung_with_tools_reaches_vllm_with_the_engine_it_implies(tmp_path_factory):
    """The GPU load path is the same with tools (they reach TRL only when the trainer is built): rehearsed to
    the CUDA boundary as every rung is, where the vLLM side folder is (`make vllm-side`)."""
    from test_gpu_rehearsal import CASES, RUNG_CARDS, SIDE, expected_engine, rehearsed

    from profiles.load import load_profile

    if not (SIDE / "vllm" / "__init__.py").is_file() or not (SIDE / "vllm_bnb_plugin" / "__init__.py").is_file():
        pytest.skip(f"no vLLM side folder with vllm-bnb-plugin at {SIDE} (run `make vllm-side`)")
    rung, _, overrides, _ = CASES["tools"]
    profile = load_profile(Path(__file__).resolve().parents[2] / "profiles" / f"{rung}.yaml", list(overrides))
    result = rehearsed(tmp_path_factory, "tools")
    assert result["reached"], result.get("error", "") + "\n" + result.get("traceback", "")
    want = expected_engine(profile, RUNG_CARDS[rung])
    assert result["engine"]["gpu_memory_utilization"] == pytest.approx(want.pop("gpu_memory_utilization"), abs=1e-6)
    assert {key: result["engine"][key] for key in want} == want
