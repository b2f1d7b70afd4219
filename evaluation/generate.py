"""Greedy completions for a list of chat prompts: through vLLM where Unsloth started it (the LoRA as a request),
through transformers' `generate` otherwise, with the prompt ids and stop tokens training uses."""

from __future__ import annotations


class EvaluationStopped(Exception):
    """The evaluation was asked to stop (a signal) between two batches of generation."""


def prompt_ids(tokenizer, rows: list[dict]) -> list[list[int]]:
    """Each test prompt as the token ids training sends (TRL tokenises the chat template itself): the
    template already holds the BOS token, so rendering text and tokenising it again would add a second one."""
    return [
        list(tokenizer.apply_chat_template(row["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False))
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
) -> list[str]:
    """Greedy completions for rows of {prompt}, as text. `stop()` true between two batches raises
    EvaluationStopped (vLLM generates them all in one call, after which a stop is checked once)."""
    prompts = prompt_ids(tokenizer, rows)
    if use_vllm:
        if stop is not None and stop():
            raise EvaluationStopped("stopped before generating")
        return generate_vllm(model, prompts, max_new_tokens, lora_path, stop_ids(model, tokenizer), live_lora)
    return generate_hf(model, tokenizer, prompts, max_new_tokens, stop=stop)


def completion_token_ids(tokenizer, completions: list[str]) -> list[list[int]]:
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in completions]
