"""Profiles refused on the command line as a user meets them: the file, the key, the fix and exit 2, before anything loads."""

import os
from pathlib import Path

import pytest
from hypothesis import strategies as st

from contract.errors import EXIT_BAD_INPUT, ProfileError
from profiles.load import profile_from_dict
from support.cli import train_py as train

REPO = Path(__file__).resolve().parents[2]


def valid(**keys):
    data = {"dataset": "arithmetic"}
    data.update(keys)
    return data


def refused(data, source="<test>"):
    with pytest.raises(ProfileError) as info:
        profile_from_dict(data, source)
    return info.value


def write(tmp_path, text, name="p.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def _trl_accepts(monkeypatch, per_device, accumulation, processes, generations) -> bool:
    from transformers import TrainingArguments
    from trl import GRPOConfig

    # GRPOConfig reads the number of processes from TrainingArguments.world_size (accelerate's state)
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: processes))
    try:
        GRPOConfig(
            output_dir="unused",
            per_device_train_batch_size=per_device,
            gradient_accumulation_steps=accumulation,
            num_generations=generations,
            use_cpu=True,
            report_to="none",
        )
    except ValueError:
        return False
    return True


def _ours_accepts(per_device, accumulation, processes, generations) -> bool:
    data = valid(
        device="cpu",
        fast_inference=False,
        load_in_4bit=False,
        optim="adamw_torch",
        gradient_checkpointing="false",
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=accumulation,
        num_gpus=processes,
        num_generations=generations,
    )
    try:
        profile_from_dict(data, "<grid>")
    except ProfileError as error:
        assert error.key == "per_device_train_batch_size", error
        return False
    return True


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**500),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def test_an_empty_profile_exits_2_naming_the_file(tmp_path):
    path = write(tmp_path, "")
    result = train("--profile", str(path), "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT
    assert str(path) in result.stderr and "the file is empty" in result.stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_file_is_refused_at_once():
    result = train("--profile", "/dev/zero", "--dry-run")
    assert result.returncode == EXIT_BAD_INPUT and "not a regular file" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs fifos")
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    result = train("--profile", str(fifo), "--dry-run")  # the timeout fails the test if the read blocks
    assert result.returncode == EXIT_BAD_INPUT and "not a regular file" in result.stderr


@pytest.mark.parametrize("flag", ["nan", "inf", "-inf", "1e308", "0", "-4"])
def test_gpu_memory_that_is_not_a_card_exits_2(flag):
    result = train("--auto", "--dry-run", "--gpu-memory", flag)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert "--gpu-memory" in result.stderr and "Traceback" not in result.stderr
