"""The project's evaluation (trainer/evaluate.py) through a real vLLM engine, judged against the same
evaluation through transformers' generate: greedy completions must be the same tokens, for the base model
and for a LoRA adapter sent as a LoRA request, stopping at every end-of-sequence id."""

from __future__ import annotations

import pytest

REPLACEMENT = "\ufffd"  # a byte-level token cut mid-character decodes to it


@pytest.fixture(scope="module")
def evaluation(run_scenario):
    return run_scenario("evaluate", "greedy")


def test_prompts_reach_the_engine_as_trainings_token_ids(evaluation):
    result = evaluation.result
    sent, training = result["sent_prompt_ids"], result["training_prompt_ids"]
    assert sent, "no prompt reached the engine"
    # four calls (generate and evaluate, base and LoRA), each with every test prompt, as token ids
    assert sent == training * 4


@pytest.mark.parametrize("label", ["base", "lora"])
def test_vllm_gives_the_tokens_transformers_gives(evaluation, label):
    run = evaluation.result["results"][label]
    assert len(run["vllm_ids"]) == evaluation.result["rows"]
    assert run["vllm_ids"] == run["hf_ids"]
    assert run["total"] == evaluation.result["rows"] and run["accuracy"] is not None


def test_the_lora_request_changes_the_completions(evaluation):
    result = evaluation.result
    adapter = [path for path in result["lora_requests"] if path]
    assert adapter and all(path.endswith("adapter") for path in adapter)
    assert result["lora_requests"].count(None) == 2  # the base model's two calls carry none
    assert result["results"]["lora"]["vllm_ids"] != result["results"]["base"]["vllm_ids"]


def test_every_end_of_sequence_id_stops_the_engine(evaluation):
    result = evaluation.result
    stop, eos = result["stop_token"], result["eos_token"]
    assert all(sorted(ids) == sorted({stop, eos}) for ids in result["sampling_stop_token_ids"])
    base = result["results"]["base"]["vllm_ids"]
    # the second id (the generation config's, as Gemma's <end_of_turn>) ends the first completion early
    assert base[0][-1] == stop and len(base[0]) < result["max_new_tokens"]
    for ids in base + result["results"]["lora"]["vllm_ids"]:
        assert stop not in ids[:-1] and eos not in ids[:-1]


def test_the_text_judged_is_the_engines_tokens(evaluation):
    from transformers import AutoTokenizer

    result = evaluation.result
    tokenizer = AutoTokenizer.from_pretrained(evaluation.result["model_dir"])
    stops = {result["stop_token"], result["eos_token"]}
    for label in ("base", "lora"):
        run = result["results"][label]
        for text, ids in zip(run["vllm_text"], run["vllm_ids"]):
            body = ids[:-1] if ids and ids[-1] in stops else ids
            expected = tokenizer.decode(body, skip_special_tokens=True)
            # vLLM's incremental decoding holds back a last byte that does not complete a character
            assert text.rstrip(REPLACEMENT) == expected.rstrip(REPLACEMENT)
