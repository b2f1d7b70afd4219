"""Evaluation sends what training sends: the chat template's token ids (one BOS), and stops where training's
generation stops (every EOS id of the generation config, Gemma's <end_of_turn> among them)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainer.evaluate import prompt_ids, stop_ids

TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture()
def tokenizer_with_bos():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<bos>": 0, "<eos>": 1, "<pad>": 2, "<end_of_turn>": 3, **{chr(c): 4 + i for i, c in
                                                                          enumerate(range(32, 127))}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="?"))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>",
                                        pad_token="<pad>", additional_special_tokens=["<end_of_turn>"])
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
