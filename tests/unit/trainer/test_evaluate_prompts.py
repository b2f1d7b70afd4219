"""Evaluation sends what training sends: the chat template's token ids (one BOS), and stops where training's
generation stops (every EOS id of the generation config, Gemma's <end_of_turn> among them)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from evaluation.generate import prompt_ids, stop_ids

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture()
def tokenizer_with_bos():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {
        "<bos>": 0,
        "<eos>": 1,
        "<pad>": 2,
        "<end_of_turn>": 3,
        **{chr(c): 4 + i for i, c in enumerate(range(32, 127))},
    }
    core = Tokenizer(models.WordLevel(vocab, unk_token="?"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        additional_special_tokens=["<end_of_turn>"],
    )
    tokenizer.add_bos_token = True  # as Gemma's and Llama's tokenizers: a text encode adds BOS again
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def test_prompts_carry_one_bos(tokenizer_with_bos):
    rows = [{"prompt": [{"role": "user", "content": "1+1?"}]}]
    ids = prompt_ids(tokenizer_with_bos, rows)[0]
    assert ids.count(tokenizer_with_bos.bos_token_id) == 1 and ids[0] == tokenizer_with_bos.bos_token_id
    # what a text prompt became: vLLM encodes text with the tokenizer's special tokens, BOS a second time
    text = tokenizer_with_bos.apply_chat_template(rows[0]["prompt"], tokenize=False, add_generation_prompt=True)
    assert tokenizer_with_bos(text)["input_ids"].count(tokenizer_with_bos.bos_token_id) == 2


def test_stop_ids_are_the_generation_configs_and_the_tokenizers(tokenizer_with_bos):
    from transformers import GenerationConfig

    model = SimpleNamespace(generation_config=GenerationConfig(eos_token_id=[1, 3]))
    assert stop_ids(model, tokenizer_with_bos) == [1, 3]
    single = SimpleNamespace(generation_config=GenerationConfig(eos_token_id=3))
    assert stop_ids(single, tokenizer_with_bos) == [1, 3]


def test_both_generation_paths_send_the_ids_training_sends(tokenizer_with_bos, monkeypatch):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from evaluation.generate import Greedy
    from evaluation.score import evaluate

    tok = tokenizer_with_bos
    rows = [
        {"prompt": [{"role": "user", "content": "1+1?"}], "answer": "2"},
        {"prompt": [{"role": "user", "content": "What is 12+30?"}], "answer": "42"},
    ]
    # what TRL's GRPOTrainer tokenises for training: the chat template's ids, once
    training = [
        tok.apply_chat_template(r["prompt"], tokenize=True, add_generation_prompt=True, return_dict=False) for r in rows
    ]

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tok),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            pad_token_id=tok.pad_token_id,
            bos_token_id=tok.bos_token_id,
        )
    )
    model.generation_config = GenerationConfig(eos_token_id=[1, 3], pad_token_id=tok.pad_token_id)
    seen_hf = {}
    real_generate = model.generate

    def recording_generate(**kwargs):
        seen_hf.update(kwargs)
        return real_generate(**kwargs)

    model.generate = recording_generate
    evaluate(model, tok, rows, Greedy(2))
    sent_hf = [ids[mask.bool()].tolist() for ids, mask in zip(seen_hf["input_ids"], seen_hf["attention_mask"])]
    assert sent_hf == training
    assert seen_hf["eos_token_id"] == [1, 3]  # Gemma's <end_of_turn> stops too

    seen_vllm = []

    def fast_generate(prompts, sampling_params=None, lora_request=None, use_tqdm=True):  # vLLM's LLM.generate
        seen_vllm.extend(prompts)
        return [SimpleNamespace(outputs=[SimpleNamespace(text="<answer>2</answer>")]) for _ in prompts]

    # vLLM is not in this environment (tests/rehearsal/test_vllm_glue.py checks its signatures): its sampling
    # parameters are taken as given here
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kwargs: kwargs))
    engine = SimpleNamespace(fast_generate=fast_generate, load_lora=None)
    evaluate(engine, tok, rows, Greedy(2, use_vllm=True))
    assert seen_vllm == [{"prompt_token_ids": ids} for ids in training]
