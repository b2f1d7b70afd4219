"""Accuracy on the task's test split, greedy: through vLLM (with the LoRA as a request) where Unsloth
started it, through `generate` otherwise. An answer is judged by the profile's `correctness` reward itself
(the accuracy reward unless the profile names another): correct when it scores its full 1.0. The reward
is called as TRL calls it in training, so the accuracy reported and the reward trained on never disagree."""

from __future__ import annotations

from rewards import REWARDS, is_correct

EXAMPLES_KEPT = 3
FULL_SCORE = 1.0


class EvaluationStopped(Exception):
    """The evaluation was asked to stop (a signal) between two batches of generation."""


def _ignore(*args, **kwargs) -> None:
    """Stands in for TRL's log_extra / log_metric, which a reward may call."""


def reward_inputs(rows: list[dict], completions: list[str], completion_ids: list | None = None) -> dict:
    """The keywords TRL gives a reward function for these rows and completions: prompts, completions (as
    messages when the prompts are conversations), completion_ids and every other column of the rows."""
    conversational = bool(rows) and isinstance(rows[0].get("prompt"), list)
    shaped = [[{"role": "assistant", "content": c}] for c in completions] if conversational else list(completions)
    columns = [key for key in rows[0] if key not in ("prompt", "completion", "completion_ids")] if rows else []
    return {"prompts": [row.get("prompt") for row in rows], "completions": shaped,
            "completion_ids": completion_ids, **{key: [row.get(key) for row in rows] for key in columns},
            "trainer_state": None, "log_extra": _ignore, "log_metric": _ignore}


def judge(reward, rows: list[dict], completions: list[str], completion_ids: list | None = None) -> list[bool]:
    """For each completion, whether the correctness reward gives it its full score."""
    scores = reward(**reward_inputs(rows, completions, completion_ids))
    return [score is not None and float(score) >= FULL_SCORE for score in scores]


def score(completions: list[str], golds: list, verdicts: list[bool] | None = None) -> dict:
    """{"accuracy", "correct", "total", "examples"}; without verdicts, the accuracy reward's rule judges."""
    if verdicts is None:
        verdicts = [is_correct(c, g) for c, g in zip(completions, golds)]
    correct = sum(bool(v) for v in verdicts)
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


def generate_vllm(model, prompts: list[list[int]], max_new_tokens: int, lora_path: str | None,
                  stop_token_ids: list[int] | None = None) -> list[str]:
    from vllm import SamplingParams

    # every end-of-sequence id stated, as generate_hf gives them: the engine need not have read the model's
    # generation config for them. Token-id prompts are taken as they are.
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=list(stop_token_ids or []))
    lora_request = model.load_lora(str(lora_path)) if lora_path else None
    outputs = model.fast_generate([{"prompt_token_ids": ids} for ids in prompts], sampling_params=params,
                                  lora_request=lora_request, use_tqdm=False)
    return [out.outputs[0].text for out in outputs]


def generate_hf(model, tokenizer, prompts: list[list[int]], max_new_tokens: int,
                batch_size: int = 16, stop=None) -> list[str]:
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
                if stop is not None and stop():
                    raise EvaluationStopped(f"stopped after {start} of {len(prompts)} answers")
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


def generate(model, tokenizer, rows: list[dict], *, max_new_tokens: int, use_vllm: bool,
             lora_path: str | None = None, stop=None) -> list[str]:
    """Greedy completions for rows of {prompt}, as text. `stop()` true between two batches raises
    EvaluationStopped (vLLM generates them all in one call)."""
    prompts = prompt_ids(tokenizer, rows)
    if use_vllm:
        return generate_vllm(model, prompts, max_new_tokens, lora_path, stop_ids(model, tokenizer))
    return generate_hf(model, tokenizer, prompts, max_new_tokens, stop=stop)


def completion_token_ids(tokenizer, completions: list[str]) -> list[list[int]]:
    return [list(tokenizer(text, add_special_tokens=False)["input_ids"]) for text in completions]


def evaluate(model, tokenizer, rows: list[dict], *, max_new_tokens: int, use_vllm: bool,
             lora_path: str | None = None, reward=None, stop=None) -> dict:
    """{"accuracy", "correct", "total", "examples"} over rows of {prompt, answer, ...}, judged by `reward`
    (the correctness reward; the accuracy reward when none is given)."""
    if not rows:
        return {"accuracy": None, "correct": 0, "total": 0, "examples": []}
    completions = generate(model, tokenizer, rows, max_new_tokens=max_new_tokens, use_vllm=use_vllm,
                           lora_path=lora_path, stop=stop)
    verdicts = judge(reward or REWARDS["accuracy"], rows, completions, completion_token_ids(tokenizer, completions))
    result = score(completions, [row.get("answer") for row in rows], verdicts)
    result["well_formed"] = well_formed_share(completions)
    return result


def well_formed_share(completions: list[str]) -> float | None:
    """The share of completions in the <reasoning>/<answer> layout (the xml_soft reward's full score)."""
    if not completions:
        return None
    return round(sum(s == 1.0 for s in REWARDS["xml_soft"](list(completions))) / len(completions), 4)
