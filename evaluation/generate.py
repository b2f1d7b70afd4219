"""Completions for a list of chat prompts: through vLLM where Unsloth started it (the LoRA as a request),
through transformers' `generate` otherwise, with the prompt ids (the chat template and its switches) and stop
tokens training uses. Greedy for evaluation; sampled with training's settings for the length probe, with the
tokens each completion took."""

from __future__ import annotations

from dataclasses import dataclass


class EvaluationStopped(Exception):
    """The evaluation was asked to stop (a signal) between two batches of generation."""


def prompt_ids(tokenizer, rows: list[dict], switches: dict | None = None) -> list[list[int]]:
    """Each test prompt as the token ids training sends (TRL tokenises the chat template itself, with the
    template's `switches`, GRPOConfig.chat_template_kwargs): the template already holds the BOS token, so
    rendering text and tokenising it again would add a second one."""
    return [
        list(
            tokenizer.apply_chat_template(
                row["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False, **(switches or {})
            )
        )
        for row in rows
    ]


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
) -> list[str]:
    """`live_lora`: the adapter as it is in the training model now (Unsloth reads its tensors, as its GRPO
    trainer does for each generation), named `lora_path`, which need not exist; else the adapter saved there."""
    outputs = _vllm_outputs(model, prompts, max_new_tokens, lora_path, stop_token_ids, live_lora)
    return [out.outputs[0].text for out in outputs]


def generate_vllm_ids(
    model, prompts: list[list[int]], max_new_tokens: int, lora_path, stop_token_ids=None, live_lora: bool = False
) -> list[list[int]]:
    """As generate_vllm, the completions as token ids (with the stop token that ended each)."""
    outputs = _vllm_outputs(model, prompts, max_new_tokens, lora_path, stop_token_ids, live_lora)
    return [list(out.outputs[0].token_ids) for out in outputs]


def _vllm_outputs(model, prompts, max_new_tokens, lora_path, stop_token_ids, live_lora):
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
    with _awake(getattr(model, "vllm_engine", None)):
        outputs = model.fast_generate(
            [{"prompt_token_ids": ids} for ids in prompts],
            sampling_params=params,
            lora_request=lora_request,
            use_tqdm=False,
        )
    return outputs


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

    was_training = model.training
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    model.eval()
    use_cache = getattr(model.config, "use_cache", True)
    model.config.use_cache = True
    device = next(model.parameters()).device
    eos = stop_ids(model, tokenizer)
    out: list[list[int]] = []
    try:
        with torch.no_grad():
            for start in range(0, len(prompts), batch_size):
                if stop is not None and stop():
                    raise EvaluationStopped(f"stopped after {start} of {len(prompts)} answers")
                chunk = [{"input_ids": ids} for ids in prompts[start : start + batch_size]]
                batch = tokenizer.pad(chunk, return_tensors="pt").to(device)
                generated = model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=eos,
                )
                for row in generated[:, batch["input_ids"].shape[1] :].tolist():
                    ends = [i for i, token in enumerate(row) if token in eos]
                    out.append(row[: ends[0] + 1] if ends else row)
    finally:
        tokenizer.padding_side = side
        model.config.use_cache = use_cache
        if was_training:
            model.train()
    return out


def generate(
    model,
    tokenizer,
    rows: list[dict],
    *,
    max_new_tokens: int,
    use_vllm: bool,
    lora_path: str | None = None,
    stop=None,
    live_lora: bool = False,
    switches: dict | None = None,
) -> list[str]:
    """Greedy completions for rows of {prompt}, as text, the prompts rendered with the template's `switches`.
    `stop()` true between two batches raises EvaluationStopped (vLLM generates them all in one call, after which
    a stop is checked once)."""
    prompts = prompt_ids(tokenizer, rows, switches)
    if use_vllm:
        if stop is not None and stop():
            raise EvaluationStopped("stopped before generating")
        return generate_vllm(model, prompts, max_new_tokens, lora_path, stop_ids(model, tokenizer), live_lora)
    return generate_hf(model, tokenizer, prompts, max_new_tokens, stop=stop)


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
    with _awake(getattr(model, "vllm_engine", None)):
        outputs = model.fast_generate(
            [{"prompt_token_ids": ids} for ids in prompts],
            sampling_params=params,
            lora_request=lora_request,
            use_tqdm=False,
        )
    found = []
    for out in outputs:
        first = out.outputs[0]
        found.append(Sampled(first.text, len(first.token_ids), first.finish_reason == "length"))
    return found


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

    was_training = model.training
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    model.eval()
    device = next(model.parameters()).device
    eos = stop_ids(model, tokenizer)
    out: list[Sampled] = []
    devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=devices):
            torch.manual_seed(sampling.seed)
            for start in range(0, len(prompts), batch_size):
                chunk = [{"input_ids": ids} for ids in prompts[start : start + batch_size]]
                batch = tokenizer.pad(chunk, return_tensors="pt").to(device)
                generated = model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    do_sample=True,
                    temperature=sampling.temperature,
                    top_p=sampling.top_p,
                    top_k=sampling.top_k,
                    min_p=sampling.min_p,
                    repetition_penalty=sampling.repetition_penalty,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=eos,
                )
                new_tokens = generated[:, batch["input_ids"].shape[1] :].tolist()
                texts = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
                for row, text in zip(new_tokens, texts):
                    tokens, cut = sampled_length(row, set(eos), max_new_tokens)
                    out.append(Sampled(text, tokens, cut))
    finally:
        tokenizer.padding_side = side
        if was_training:
            model.train()
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
