"""Completions for a list of chat prompts: through vLLM where Unsloth started it (the LoRA as a request),
through transformers' `generate` otherwise, with the prompt ids (the chat template and its switches) and stop
tokens training uses. Greedy for evaluation; sampled with training's settings for the length probe, with the
tokens each completion took."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass


class EvaluationStopped(Exception):
    """The evaluation was asked to stop (a signal) between two batches of generation."""


def chat_ids(tokenizer, prompt: list[dict] | str, switches: dict | None = None, tools: list | None = None) -> list[int]:
    """A prompt as the token ids training sends (TRL tokenises the chat template itself, with the template's
    `switches`, GRPOConfig.chat_template_kwargs, and the tools offered): the template already holds the BOS
    token, so rendering text and tokenising it again would add a second one. A text prompt (TRL's standard
    format) is tokenised as it is, no template."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    return list(
        tokenizer.apply_chat_template(
            prompt,
            tools=tools or None,
            tokenize=True,
            add_generation_prompt=True,
            return_dict=False,
            **(switches or {}),
        )
    )


def prompt_ids(tokenizer, rows: list[dict], switches: dict | None = None) -> list[list[int]]:
    """Each row's prompt as chat_ids renders it, no tool offered."""
    return [chat_ids(tokenizer, row["prompt"], switches) for row in rows]


def stop_ids(model, tokenizer) -> list[int]:
    """Every token that ends a completion: the generation config's list (Gemma's <end_of_turn> besides <eos>)
    and the tokenizer's own, as TRL's GRPOTrainer collects them."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [] if configured is None else [configured] if isinstance(configured, int) else list(configured)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.insert(0, tokenizer.eos_token_id)
    return ids


def generate_vllm(
    model,
    prompts: list[list[int]],
    max_new_tokens: int,
    lora_path: str | None,
    stop_token_ids: list[int] | None = None,
    live_lora: bool = False,
) -> list:
    """vLLM's greedy output for each prompt: its `.text`, and its `.token_ids` with the stop token that ended
    it. `live_lora`: the adapter as it is in the training model now (Unsloth reads its tensors, as its GRPO
    trainer does for each generation), named `lora_path`, which need not exist; else the adapter saved there."""
    from vllm import SamplingParams

    # every end-of-sequence id stated, as generate_hf gives them: the engine need not have read the model's
    # generation config for them. Token-id prompts are taken as they are.
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=list(stop_token_ids or []))
    lora_request = (
        model.load_lora(str(lora_path), load_tensors=True)
        if lora_path and live_lora
        else model.load_lora(str(lora_path))
        if lora_path
        else None
    )
    return _fast_generate(model, prompts, params, lora_request)


def _fast_generate(model, prompts: list[list[int]], params, lora_request) -> list:
    """The first output for each prompt from Unsloth's engine, woken for it if it sleeps."""
    with _awake(getattr(model, "vllm_engine", None)):
        outputs = model.fast_generate(
            [{"prompt_token_ids": ids} for ids in prompts],
            sampling_params=params,
            lora_request=lora_request,
            use_tqdm=False,
        )
    return [out.outputs[0] for out in outputs]


class _awake:
    """An engine asleep (vLLM sleep mode, Unsloth's standby: its memory lent to training) is woken for this
    generation and put back to sleep after it, at the level Unsloth's trainer uses."""

    def __init__(self, engine):
        self.engine, self.slept = engine, False

    def __enter__(self):
        llm_engine = getattr(self.engine, "llm_engine", None)
        sleeping = getattr(llm_engine, "is_sleeping", None)
        if callable(sleeping) and sleeping():
            self.engine.wake_up()
            self.slept = True
        return self

    def __exit__(self, *exc):
        if self.slept:
            import os

            self.engine.sleep(int(os.environ.get("VLLM_SLEEP_MODE", 1)))
        return False


@contextmanager
def _generating(model, tokenizer, cache: bool = False):
    """The model in eval mode, the tokenizer padding on the left (each prompt ends where its answer starts)
    and, with `cache`, the KV cache on (training may have turned it off); each as it was afterwards."""
    was_training, side, use_cache = model.training, tokenizer.padding_side, getattr(model.config, "use_cache", True)
    tokenizer.padding_side = "left"
    model.eval()
    if cache:
        model.config.use_cache = True
    try:
        yield next(model.parameters()).device
    finally:
        tokenizer.padding_side = side
        if cache:
            model.config.use_cache = use_cache
        if was_training:
            model.train()


def _batches(model, tokenizer, prompts: list[list[int]], batch_size: int, device, stop=None, **settings):
    """The new tokens of each batch of prompts, generated with `settings`; `stop()` true before a batch raises
    EvaluationStopped."""
    for start in range(0, len(prompts), batch_size):
        if stop is not None and stop():
            raise EvaluationStopped(f"stopped after {start} of {len(prompts)} answers")
        chunk = [{"input_ids": ids} for ids in prompts[start : start + batch_size]]
        batch = tokenizer.pad(chunk, return_tensors="pt").to(device)
        generated = model.generate(**batch, pad_token_id=tokenizer.pad_token_id, **settings)
        yield generated[:, batch["input_ids"].shape[1] :].tolist()


def generate_hf(
    model, tokenizer, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 16, stop=None
) -> list[str]:
    generated = generate_hf_ids(model, tokenizer, prompts, max_new_tokens, batch_size, stop)
    return tokenizer.batch_decode(generated, skip_special_tokens=True)


def generate_hf_ids(
    model, tokenizer, prompts: list[list[int]], max_new_tokens: int, batch_size: int = 16, stop=None
) -> list[list[int]]:
    """Greedy completions as token ids, each up to and with its first stop token (what TRL keeps of one)."""
    import torch

    eos = stop_ids(model, tokenizer)
    stops, out = set(eos), []
    with _generating(model, tokenizer, cache=True) as device, torch.no_grad():
        settings = {"max_new_tokens": max_new_tokens, "do_sample": False, "eos_token_id": eos}
        for rows in _batches(model, tokenizer, prompts, batch_size, device, stop, **settings):
            out += [row[: sampled_length(row, stops, max_new_tokens)[0]] for row in rows]
    return out


@dataclass(frozen=True)
class Greedy:
    """How evaluation answers: greedily, at most `max_new_tokens` tokens an answer, the prompts rendered with the
    chat template's `switches`; through Unsloth's vLLM engine (`use_vllm`, the adapter as generate_vllm takes
    `lora_path` and `live_lora`) or transformers' `generate`. `stop()` true between two batches raises
    EvaluationStopped (vLLM generates them all in one call, before which a stop is checked once)."""

    max_new_tokens: int
    use_vllm: bool = False
    lora_path: str | None = None
    stop: Callable[[], bool] | None = None
    live_lora: bool = False
    switches: dict | None = None


def generate(model, tokenizer, rows: list[dict], greedy: Greedy) -> list[str]:
    """Greedy completions for rows of {prompt}, as text."""
    prompts = prompt_ids(tokenizer, rows, greedy.switches)
    if greedy.use_vllm:
        if greedy.stop is not None and greedy.stop():
            raise EvaluationStopped("stopped before generating")
        outputs = generate_vllm(
            model, prompts, greedy.max_new_tokens, greedy.lora_path, stop_ids(model, tokenizer), greedy.live_lora
        )
        return [out.text for out in outputs]
    return generate_hf(model, tokenizer, prompts, greedy.max_new_tokens, stop=greedy.stop)


def completion_token_ids(tokenizer, completions: list[str]) -> list[list[int]]:
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in completions]


# ---------------------------------------------------------------------------------------------------
# Sampled completions, with their lengths (the length probe)


@dataclass(frozen=True)
class Sampling:
    """Training's sampling settings (the profile's), and the seed of this draw."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k
    min_p: float | None = None
    repetition_penalty: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class Sampled:
    text: str
    tokens: int  # completion tokens, its end-of-sequence token counted (as TRL counts a completion)
    cut: bool  # it ran into the cap without ending


def sample_vllm(
    model, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling, stop_token_ids, lora_path=None
) -> list[Sampled]:
    """One sampled completion per prompt through Unsloth's engine (the live adapter when `lora_path` names it)."""
    from vllm import SamplingParams

    params = SamplingParams(
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k if sampling.top_k > 0 else -1,
        min_p=sampling.min_p or 0.0,
        repetition_penalty=sampling.repetition_penalty,
        max_tokens=max_new_tokens,
        seed=sampling.seed,
        stop_token_ids=list(stop_token_ids or []),
    )
    lora_request = model.load_lora(str(lora_path), load_tensors=True) if lora_path else None
    outputs = _fast_generate(model, prompts, params, lora_request)
    return [Sampled(out.text, len(out.token_ids), out.finish_reason == "length") for out in outputs]


def sampled_length(new_tokens: list[int], stop: set[int], max_new_tokens: int) -> tuple[int, bool]:
    """(tokens, cut) of one generated row: up to and with its first stop token; without one it ran to the cap
    (the rows of a batch that ended earlier are padded, with a stop token where pad is end-of-sequence)."""
    for index, token in enumerate(new_tokens):
        if token in stop:
            return index + 1, False
    return len(new_tokens), len(new_tokens) >= max_new_tokens


def sample_hf(
    model, tokenizer, prompts: list[list[int]], max_new_tokens: int, sampling: Sampling, batch_size: int = 16
) -> list[Sampled]:
    """One sampled completion per prompt through transformers' `generate`, seeded, the global random state
    left as it was (training's draws are the same with and without this)."""
    import torch

    eos = stop_ids(model, tokenizer)
    stops, out = set(eos), []
    with _generating(model, tokenizer) as device, torch.no_grad():
        with torch.random.fork_rng(devices=[device.index or 0] if device.type == "cuda" else []):
            torch.manual_seed(sampling.seed)
            settings = {
                "max_new_tokens": max_new_tokens,
                "do_sample": True,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
                "top_k": sampling.top_k,
                "min_p": sampling.min_p,
                "repetition_penalty": sampling.repetition_penalty,
                "eos_token_id": eos,
            }
            for rows in _batches(model, tokenizer, prompts, batch_size, device, **settings):
                texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
                out += [Sampled(text, *sampled_length(row, stops, max_new_tokens)) for row, text in zip(rows, texts)]
    return out


def sample(
    model,
    tokenizer,
    rows: list[dict],
    *,
    max_new_tokens: int,
    sampling: Sampling,
    use_vllm: bool,
    switches: dict | None = None,
    lora_path: str | None = None,
) -> list[Sampled]:
    """One completion per row of {prompt}, sampled as training samples them, with its length."""
    prompts = prompt_ids(tokenizer, rows, switches)
    if use_vllm:
        return sample_vllm(model, prompts, max_new_tokens, sampling, stop_ids(model, tokenizer), lora_path)
    return sample_hf(model, tokenizer, prompts, max_new_tokens, sampling)
