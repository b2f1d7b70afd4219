"""Accuracy on the task's test split, greedy: through vLLM (with the LoRA as a request) where Unsloth
started it, through `generate` otherwise. An answer is judged by the accuracy reward's own rule
(rewards.is_correct), so the accuracy reported and the reward trained on never disagree."""

from __future__ import annotations

from rewards import is_correct

EXAMPLES_KEPT = 3


def score(completions: list[str], golds: list[str]) -> dict:
    correct = sum(is_correct(c, g) for c, g in zip(completions, golds))
    total = len(golds)
    return {
        "accuracy": round(correct / total, 4) if total else None,
        "correct": correct,
        "total": total,
        "examples": [{"completion": c[:500], "answer": str(g)} for c, g in zip(completions[:EXAMPLES_KEPT],
                                                                             golds[:EXAMPLES_KEPT])],
    }


def prompt_ids(tokenizer, rows: list[dict]) -> list[list[int]]:
    """Each test prompt as the token ids training sends (TRL tokenises the chat template itself): the
    template already holds the BOS token, so rendering text and tokenising it again would add a second one."""
    return [list(tokenizer.apply_chat_template(row["prompt"], tokenize=True, add_generation_prompt=True,
                                               return_dict=False))
            for row in rows]


def stop_ids(model, tokenizer) -> list[int]:
    """Every token that ends a completion: the generation config's list (Gemma's <end_of_turn> besides <eos>)
    and the tokenizer's own, as TRL's GRPOTrainer collects them."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [] if configured is None else [configured] if isinstance(configured, int) else list(configured)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.insert(0, tokenizer.eos_token_id)
    return ids


def generate_vllm(model, prompts: list[list[int]], max_new_tokens: int, lora_path: str | None) -> list[str]:
    from vllm import SamplingParams

    # vLLM stops at the model's own generation-config EOS ids; it takes token-id prompts as they are
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    lora_request = model.load_lora(str(lora_path)) if lora_path else None
    outputs = model.fast_generate([{"prompt_token_ids": ids} for ids in prompts], sampling_params=params,
                                  lora_request=lora_request, use_tqdm=False)
    return [out.outputs[0].text for out in outputs]


def generate_hf(model, tokenizer, prompts: list[list[int]], max_new_tokens: int,
                batch_size: int = 16) -> list[str]:
    import torch

    was_training = model.training
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    model.eval()
    use_cache = getattr(model.config, "use_cache", True)
    model.config.use_cache = True
    device = next(model.parameters()).device
    eos = stop_ids(model, tokenizer)
    out: list[str] = []
    try:
        with torch.no_grad():
            for start in range(0, len(prompts), batch_size):
                chunk = [{"input_ids": ids} for ids in prompts[start:start + batch_size]]
                batch = tokenizer.pad(chunk, return_tensors="pt").to(device)
                generated = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                           pad_token_id=tokenizer.pad_token_id, eos_token_id=eos)
                new_tokens = generated[:, batch["input_ids"].shape[1]:]
                out.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = side
        model.config.use_cache = use_cache
        if was_training:
            model.train()
    return out


def evaluate(model, tokenizer, rows: list[dict], *, max_new_tokens: int, use_vllm: bool,
             lora_path: str | None = None) -> dict:
    """{"accuracy", "correct", "total", "examples"} over rows of {prompt, answer}."""
    if not rows:
        return {"accuracy": None, "correct": 0, "total": 0, "examples": []}
    prompts = prompt_ids(tokenizer, rows)
    if use_vllm:
        completions = generate_vllm(model, prompts, max_new_tokens, lora_path)
    else:
        completions = generate_hf(model, tokenizer, prompts, max_new_tokens)
    return score(completions, [row["answer"] for row in rows])
