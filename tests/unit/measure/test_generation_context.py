"""The kit times a generation wave in the context the trainer itself generates in: the
`unwrap_model_for_generation` its own module binds (Unsloth rebinds it), else TRL's, else the plain model."""

from __future__ import annotations

import sys
import types
from contextlib import contextmanager

import pytest

from measure.child import generation_unwrap


class _Accelerator:
    def unwrap_model(self, model):
        return ("plain", model)


def _trainer_in(module_name: str):
    cls = type("Trainer", (), {"__module__": module_name})
    trainer = cls()
    trainer.model, trainer.model_wrapped, trainer.accelerator = "model", "wrapped", _Accelerator()
    return trainer


@pytest.fixture
def trainer_module(monkeypatch):
    module = types.ModuleType("compiled_trainer_module")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_the_trainers_own_binding_is_the_one_timed(trainer_module):
    seen = []

    @contextmanager
    def unwrap_model_for_generation(model, accelerator):
        seen.append(("enter", model, accelerator))
        yield ("rebound", model)
        seen.append(("exit", model))

    unwrap_model_for_generation.__module__ = "some_library.rl"
    trainer_module.unwrap_model_for_generation = unwrap_model_for_generation
    trainer = _trainer_in(trainer_module.__name__)
    context, through = generation_unwrap(trainer)
    assert (
        through == "some_library.rl.test_the_trainers_own_binding_is_the_one_timed.<locals>.unwrap_model_for_generation"
    )
    with context(trainer) as generator:
        assert generator == ("rebound", "wrapped")  # the wrapped model, as TRL passes it
    assert seen == [("enter", "wrapped", trainer.accelerator), ("exit", "wrapped")]


def test_a_trainer_whose_module_binds_none_uses_trls_and_else_the_plain_model(trainer_module):
    trainer = _trainer_in(trainer_module.__name__)
    trl_module = sys.modules.get("trl.trainer.grpo_trainer")
    context, through = generation_unwrap(trainer)
    if trl_module is not None and callable(getattr(trl_module, "unwrap_model_for_generation", None)):
        assert through.endswith("unwrap_model_for_generation")
    else:
        assert through == "accelerator.unwrap_model"
        with context(trainer) as generator:
            assert generator == ("plain", "model")


def test_trls_grpo_trainer_generates_through_trls_unwrap():
    grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    trainer = _trainer_in(grpo.__name__)
    _, through = generation_unwrap(trainer)
    bound = grpo.unwrap_model_for_generation
    assert through == f"{bound.__module__}.{bound.__qualname__}"


def test_the_generating_methods_own_globals_come_first(trainer_module):
    """A subclass compiled elsewhere (Unsloth's) may bind another name in its module than the one the inherited
    generating method sees: the method's is the one that runs."""

    @contextmanager
    def seen_by_the_method(model, accelerator):
        yield ("method's", model)

    @contextmanager
    def bound_in_the_module(model, accelerator):
        yield ("module's", model)

    space = {"unwrap_model_for_generation": seen_by_the_method}
    exec("def _generate_single_turn(self):\n    return None\n", space)
    trainer_module.unwrap_model_for_generation = bound_in_the_module
    trainer = _trainer_in(trainer_module.__name__)
    type(trainer)._generate_single_turn = space["_generate_single_turn"]
    context, through = generation_unwrap(trainer)
    assert through.endswith("seen_by_the_method")
    with context(trainer) as generator:
        assert generator == ("method's", "wrapped")
