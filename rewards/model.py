"""Reward models: what a sequence-classification model says of a completion. A `rewards` entry `model:NAME`
names one (a local folder saved by transformers with its tokenizer, or a hub id read from the local Hugging Face
cache), which scores each prompt + completion as TRL scores a reward model: its own tokenizer, the chat template
over prompt and completion messages for conversational prompts (prompt + completion for text), one logit
(`num_labels=1`), reward = `logits[:, 0]`.

The model is loaded once per process (cached by the resolved name) when the reward is asked for, so that a model
that cannot load fails before training starts; it runs in eval and inference mode, in batches of BATCH_SIZE, on
the GPU where torch has one (bf16 where the card supports it, else float32), else on the CPU in float32. Remote
code is never trusted. Like every reward here, it never raises while scoring: a completion it cannot read scores
0.0.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODEL_PREFIX = "model:"
# Completions scored per forward pass: a step's batch (e.g. 16 prompts x 8 generations) runs in a few passes, so
# the activations held at once stay those of BATCH_SIZE sequences whatever the step's batch.
BATCH_SIZE = 16
# Where neither the tokenizer nor the config gives a usable length
FALLBACK_MAX_LENGTH = 2048
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class RewardModelError(ValueError):
    """A reward model that cannot be loaded: the entry, why, and the fix."""


def is_model_reward(name: object) -> bool:
    """Whether a `rewards` entry names a reward model (`model:NAME`)."""
    return isinstance(name, str) and name.startswith(MODEL_PREFIX) and len(name) > len(MODEL_PREFIX)


def model_name(entry: str) -> str:
    """The folder or hub id an entry `model:NAME` names."""
    return entry[len(MODEL_PREFIX) :] if is_model_reward(entry) else entry


def looks_like_hub_id(name: str) -> bool:
    """Whether `name` reads as a hub id (`org/name`) rather than a path (`./x`, `/x`, `~/x`, `a/b/c`)."""
    return bool(_HUB_ID.match(name)) and not name.startswith((".", "~"))


def reward_name(entry: str) -> str:
    """The name TRL would log the model under (rewards/<name>/mean): the last part of the folder or hub id."""
    return model_name(entry).rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    device: Any
    max_length: int


_cache: dict[str, _Loaded] = {}
_lock = threading.Lock()  # TRL may call rewards from its own threads; one load per name all the same
loads = 0  # models loaded by this process: a test reads it to see that a second ask loads nothing


def _resolved(entry: str) -> tuple[str, bool]:
    """The name to load (an absolute folder, or a hub id) and whether it is a hub id."""
    name = model_name(entry)
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve()), False
    if looks_like_hub_id(name):
        return name, True
    return str(path), False


def _device():
    import torch

    if torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
        # float32 on a card without bf16: float16's range can overflow a score the model was trained to give
        return device, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32
    return torch.device("cpu"), torch.float32


def _max_length(tokenizer, config) -> int:
    limits = [getattr(tokenizer, "model_max_length", None), getattr(config, "max_position_embeddings", None)]
    # tokenizers without a limit report a huge sentinel (about 1e30)
    usable = [int(n) for n in limits if isinstance(n, int) and 0 < n < 10**7]
    return min(usable) if usable else FALLBACK_MAX_LENGTH


def _load(entry: str) -> _Loaded:
    global loads
    name, hub = _resolved(entry)
    with _lock:
        if name in _cache:
            return _cache[name]
        if not hub and not (Path(name) / "config.json").is_file():
            raise RewardModelError(
                f"reward '{entry}': {name} is not a folder holding a saved model (no config.json there) "
                "(fix: give the folder that model.save_pretrained() and tokenizer.save_pretrained() wrote, or a "
                "hub id org/name that is in the local Hugging Face cache)"
            )
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        device, dtype = _device()
        try:
            tokenizer = AutoTokenizer.from_pretrained(name, local_files_only=True, trust_remote_code=False)
            model = AutoModelForSequenceClassification.from_pretrained(
                name, num_labels=1, local_files_only=True, trust_remote_code=False, dtype=dtype
            )
        except Exception as exc:  # noqa: BLE001 - any failure to load says the same fix
            where = "the local Hugging Face cache (nothing is downloaded)" if hub else name
            fix = (
                f"download it first (huggingface-cli download {name}) or give a local folder"
                if hub
                else "save a sequence-classification model and its tokenizer there (save_pretrained)"
            )
            raise RewardModelError(
                f"reward '{entry}': cannot load a sequence-classification model and its tokenizer from {where}: "
                f"{type(exc).__name__}: {exc} (fix: {fix})"
            ) from exc
        if tokenizer.pad_token_id is None:  # TRL's choice: pad with the end-of-sequence token
            tokenizer.pad_token = tokenizer.eos_token
        # the model scores the last token that is not padding: it must know which id pads
        model.config.pad_token_id = tokenizer.pad_token_id
        model.to(device).eval()
        loaded = _Loaded(model, tokenizer, device, _max_length(tokenizer, model.config))
        _cache[name] = loaded
        loads += 1
        return loaded


def _text(tokenizer, prompt, completion) -> str | None:
    """What the model reads for one prompt + completion (None when it cannot be read), as TRL builds it."""
    if isinstance(prompt, str) and isinstance(completion, str):
        return prompt + completion
    if isinstance(prompt, list) and isinstance(completion, list):
        messages = prompt + completion
        if not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            return None
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(messages, tokenize=False)
            return text if isinstance(text, str) else None
        # a reward model without a chat template reads the messages' text one after another
        return "\n".join(m["content"] for m in messages)
    return None


def _score(loaded: _Loaded, texts: list[str]) -> list[float]:
    import torch

    scores: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(texts), BATCH_SIZE):
            inputs = loaded.tokenizer(
                texts[start : start + BATCH_SIZE],
                return_tensors="pt",
                padding=True,
                padding_side="right",
                truncation=True,
                max_length=loaded.max_length,
                add_special_tokens=False,
            ).to(loaded.device)
            # no KV cache: a decoder's config asks for one by default, and it would hold every layer's keys and
            # values of the batch until the pass ends, for nothing (one pass, no next token)
            logits = loaded.model(**inputs, use_cache=False).logits[:, 0]
            scores.extend(float(x) for x in logits.float().cpu())
    return scores


def load(entry: str):
    """The reward for `model:NAME`: the model is loaded now (once per process); RewardModelError naming the
    entry and the fix when it cannot be. The function follows TRL's convention, `fn(prompts, completions,
    **kwargs) -> list[float]`, and is named after the model (TRL logs rewards by name)."""
    loaded = _load(entry)

    def reward(prompts=None, completions=None, **kwargs) -> list[float]:
        completions = list(completions or [])
        prompts = list(prompts) if prompts is not None else [""] * len(completions)
        texts: list[str | None] = []
        for i, completion in enumerate(completions):
            prompt = prompts[i] if i < len(prompts) else None
            if prompt is None:  # scored on its own when no prompt came with it
                prompt = [] if isinstance(completion, list) else ""
            try:
                texts.append(_text(loaded.tokenizer, prompt, completion))
            except Exception:  # noqa: BLE001 - an unreadable completion scores 0.0, it does not stop training
                texts.append(None)
        readable = [i for i, text in enumerate(texts) if text]
        scores = [0.0] * len(completions)
        try:
            for i, score in zip(readable, _score(loaded, [texts[i] or "" for i in readable])):
                scores[i] = score if score == score else 0.0  # NaN scores 0.0
        except Exception as exc:  # noqa: BLE001 - a failed pass scores its completions 0.0, as any unreadable one
            if "OutOfMemory" in type(exc).__name__:
                raise  # the card is full: the attempt's OOM handling re-plans, a 0.0 would hide it
            return [0.0] * len(completions)
        return scores

    reward.__name__ = reward.__qualname__ = reward_name(entry)
    reward.__doc__ = f"The score of the reward model {model_name(entry)} (its logit) for prompt + completion."
    return reward
