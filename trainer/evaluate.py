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


def prompt_texts(tokenizer, rows: list[dict]) -> list[str]:
    return [tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
            for row in rows]


def generate_vllm(model, tokenizer, texts: list[str], max_new_tokens: int, lora_path: str | None) -> list[str]:
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens)
    lora_request = model.load_lora(str(lora_path)) if lora_path else None
    outputs = model.fast_generate(texts, sampling_params=params, lora_request=lora_request, use_tqdm=False)
    return [out.outputs[0].text for out in outputs]


def generate_hf(model, tokenizer, texts: list[str], max_new_tokens: int, batch_size: int = 16) -> list[str]:
    import torch

    was_training = model.training
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    model.eval()
    use_cache = getattr(model.config, "use_cache", True)
    model.config.use_cache = True
    device = next(model.parameters()).device
    out: list[str] = []
    try:
        with torch.no_grad():
            for start in range(0, len(texts), batch_size):
                batch = tokenizer(texts[start:start + batch_size], return_tensors="pt", padding=True,
                                  add_special_tokens=False).to(device)
                generated = model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                           pad_token_id=tokenizer.pad_token_id,
                                           eos_token_id=tokenizer.eos_token_id)
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
    texts = prompt_texts(tokenizer, rows)
    if use_vllm:
        completions = generate_vllm(model, tokenizer, texts, max_new_tokens, lora_path)
    else:
        completions = generate_hf(model, tokenizer, texts, max_new_tokens)
    return score(completions, [row["answer"] for row in rows])
