"""The offline tiny reward model: a Llama-shaped sequence-classification model (one label, random weights) of the
tiny policy's shape family, with the tiny policy's tokenizer and chat template, built once (seeded) and cached, so
that a `rewards` entry `model:FOLDER` can be run end to end on the CPU without a download.

Its scores mean nothing (the weights are random); they differ from completion to completion, which is what a test
of the path needs. transformers is imported inside functions only, as in tiny_model.build.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from contract.environment import cache_root
from contract.safe_write import publish_folder

# Bump when the build below changes, so old caches are not reused.
BUILD_VERSION = 1
# Larger than the policy's: random scores then spread over about a unit, not a hundredth
INITIALIZER_RANGE = 0.2
FOLDER_PREFIX = "tiny-rm-"


def build_key(dataset: str, seed: int) -> str:
    from tiny_model import build

    spec = {
        "dataset": dataset,
        "seed": seed,
        "shape": asdict(build.tiny_shape()),
        "policy_build": build.BUILD_VERSION,
        "version": BUILD_VERSION,
        "init": INITIALIZER_RANGE,
        "template": build.CHAT_TEMPLATE,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def ensure_tiny_reward_model(dataset: str = "arithmetic", seed: int = 0, root: Path | None = None) -> Path:
    """The folder of the tiny reward model (built on first use, then reused): config.json, the weights and the
    tokenizer, as AutoModelForSequenceClassification and AutoTokenizer load them."""
    root = Path(root) if root else cache_root()
    target = root / f"{FOLDER_PREFIX}{build_key(dataset, seed)}"
    if (target / "config.json").is_file() and (target / "tokenizer.json").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    model, tokenizer = _build(dataset, seed)

    def write(staged: Path) -> None:
        from tiny_model.build import _pin_tokenizer_class

        model.save_pretrained(staged)
        tokenizer.save_pretrained(staged)
        _pin_tokenizer_class(staged)  # the tokenizer's own class, not the Llama one a llama config would pick

    # built beside the target and renamed: a concurrent or interrupted build never leaves half a model
    publish_folder(target, write, shared=True)
    return target


def _build(dataset: str, seed: int):
    import torch
    from transformers import LlamaForSequenceClassification

    from tiny_model import build

    shape = build.tiny_shape()
    # the policy's tokenizer, trained on the same corpus with the same settings (no warm start needed for it)
    tokenizer = build._build_tokenizer(build._corpus(dataset, seed), shape)
    config = build.llama_config(
        tokenizer,
        shape,
        initializer_range=INITIALIZER_RANGE,
        tie_word_embeddings=False,  # a classifier has a score head, no output embedding to tie
    )
    config.num_labels = 1  # one score per sequence, as TRL loads a reward model
    torch.manual_seed(seed)
    return LlamaForSequenceClassification(config), tokenizer  # float32, torch's default


if __name__ == "__main__":
    print(ensure_tiny_reward_model())
