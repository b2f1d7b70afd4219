"""A ZeRO attempt's accelerate.yaml, read by accelerate's own launcher code, must let GRPOConfig build.

accelerate passes the config file's DeepSpeed keys to each rank in ACCELERATE_CONFIG_DS_FIELDS, and
DeepSpeedPlugin (built by TrainingArguments.__post_init__) refuses a deepspeed_config_file that comes with
mixed_precision, gradient clipping or the like from accelerate's side. The environment here is the one
accelerate's DeepSpeed launcher computes (prepare_deepspeed_cmd_env), on CPU; deepspeed itself is not needed
to reach that check, only to go past it.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from launcher.run.distributed import write_launch_files
from profiles.load import load_profile
from trainer.config import grpo_config_kwargs

REPO = Path(__file__).resolve().parents[3]


def rank_environment(config_file: Path) -> dict[str, str]:
    """What `accelerate launch --config_file F` puts into a DeepSpeed rank's environment."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env

    args = launch_command_parser().parse_args(["--config_file", str(config_file), "train.py"])
    args, defaults, precision_from_file = _validate_launch_command(args)
    assert args.use_deepspeed
    # as accelerate.commands.launch.launch_command does before calling the DeepSpeed launcher
    fields = list(defaults.deepspeed_config) + (["mixed_precision"] if precision_from_file else [])
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)
    before = dict(os.environ)
    _command, env = prepare_deepspeed_cmd_env(args)
    return {k: v for k, v in env.items() if k.startswith("ACCELERATE_") and before.get(k) != v}


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_a_zero_attempt_builds_its_grpo_config(tmp_path, stage):
    from trl import GRPOConfig

    profile = load_profile(REPO / "profiles" / "multi-4x80gb-qwen2.5-14b.yaml").replace(zero_stage=stage)
    gpus = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, range(profile.gpus_needed)))}
    env = rank_environment(write_launch_files(profile, tmp_path, env=gpus))
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true"
    kwargs = grpo_config_kwargs(profile, str(tmp_path / "run"), device="cuda", bf16=True, use_vllm=False)
    kwargs["use_cpu"] = True  # this machine has no GPU; the DeepSpeed checks run the same way
    with mock.patch.dict(os.environ, env):
        try:
            GRPOConfig(**kwargs)
        except ValueError as exc:
            pytest.fail(f"accelerate refused the attempt's DeepSpeed configuration: {exc}")
        except Exception as exc:  # past accelerate's check, transformers asks for the deepspeed package
            if "deepspeed" not in str(exc).lower():
                raise
