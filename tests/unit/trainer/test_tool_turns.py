"""Tools and environments through the pinned TRL itself: its GRPOTrainer runs the turns (the tiny tool-calling
model, the shipped calculator and game, guarded), and its own masks keep the tools' replies out of the loss.
Nothing of TRL is stood in for; the model is the real tiny one on the CPU."""

from __future__ import annotations


def _trainer(model_path, tmp_path, **trainer_kwargs):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from tasks import load_task
    from trainer.backends import install_cpu_logprob_fallback

    install_cpu_logprob_fallback()  # what an attempt on the CPU installs: TRL's fused head is Triton-only
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        per_device_train_batch_size=32,
        num_generations=4,
        max_completion_length=96,
        max_tool_calling_iterations=4,
        chat_template_kwargs={"enable_thinking": False},  # as every attempt renders the tiny model's prompts
        temperature=1.0,
        seed=3407,
        report_to="none",
        logging_steps=1,
    )
    rows = load_task("arithmetic", "train", limit=8, seed=3407)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=trainer_kwargs.pop("reward_funcs"),
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        **trainer_kwargs,
    )
    inputs = [row for row in rows for _ in range(args.num_generations)]
    return trainer, tokenizer, inputs


def _segments(ids: list[int], mask: list[int]) -> list[tuple[int, list[int]]]:
    """Runs of equal mask value: [(value, ids), ...]."""
    runs: list[tuple[int, list[int]]] = []
    for token, value in zip(ids, mask):
        if runs and runs[-1][0] == value:
            runs[-1][1].append(token)
        else:
            runs.append((value, [token]))
    return runs


def test_calculator_replies_carry_no_loss_on_trls_own_mask(tiny_tools_model, tmp_path):
    from rewards import REWARDS
    from tools import load_tools

    trainer, tokenizer, inputs = _trainer(
        tiny_tools_model, tmp_path, reward_funcs=[REWARDS["accuracy"]], tools=load_tools(["calculate"])
    )
    out = trainer._generate_and_score_completions(inputs)
    completion_ids, completion_mask, tool_mask = out["completion_ids"], out["completion_mask"], out["tool_mask"]
    assert tool_mask.shape == completion_mask.shape
    with_calls = 0
    for ids, keep, mask in zip(completion_ids.tolist(), completion_mask.tolist(), tool_mask.tolist()):
        length = sum(keep)
        runs = _segments(ids[:length], mask[:length])
        masked = [tokenizer.decode(part) for value, part in runs if value == 0]
        trained = tokenizer.decode([t for value, part in runs if value == 1 for t in part])
        for reply in masked:  # each masked run is exactly a tool reply and the next assistant header
            assert reply.startswith("\n<|tool|>\n") and reply.endswith("<|end|>\n<|assistant|>\n"), reply
            assert "<tool_call>" not in reply
        if masked:
            with_calls += 1
            assert "<tool_call><function=calculate>" in trained and "<|tool|>" not in trained
    assert with_calls > 0, "no completion called the calculator: nothing was checked"
    # TRL normalises the loss by the tokens it trains: the model's own, never the replies
    loss_mask = completion_mask * tool_mask
    assert int(out["num_items_in_batch"]) == int(loss_mask.sum()) < int(completion_mask.sum())
    loss = trainer.compute_loss(trainer.model, out)
    assert loss.requires_grad


def test_the_game_environment_runs_in_trl_and_its_reward_reads_its_state(tiny_tools_model, tmp_path):
    from rewards.tool_use import failed
    from tools import load_environment
    from tools.guess import solved

    seen = {}

    def read_state(completions, environments=None, **kwargs):
        seen["environments"] = environments
        seen["completions"] = completions
        return solved(completions, environments=environments)

    trainer, tokenizer, inputs = _trainer(
        tiny_tools_model, tmp_path, reward_funcs=[read_state], environment_factory=load_environment("guess")
    )
    out = trainer._generate_and_score_completions(inputs)
    environments = seen["environments"]
    assert len(environments) == len(inputs) and len({id(e) for e in environments}) == len(inputs)
    for environment, row, completion in zip(environments, inputs, seen["completions"]):
        assert str(environment.answer) == str(row["answer"])  # reset with its own row
        replies = [m["content"] for m in completion if m["role"] == "tool" and not failed(m)]
        # every answer the model heard came from its own game, guess by guess (a reply the cap cut from the
        # completion is not heard)
        assert len(replies) <= len(environment.guesses)
        for reply, value in zip(replies, environment.guesses):
            truth = "correct" if value == environment.answer else "higher" if environment.answer > value else "lower"
            assert reply == truth
    assert sum(len(e.guesses) for e in environments) > 0
    assert out["tool_mask"] is not None and int((out["tool_mask"] == 0).sum()) > 0


def test_evaluation_plays_the_turns_as_trl_lays_them_out(tiny_tools_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluation.generate import generate_hf_ids
    from evaluation.turns import figures, rollouts
    from tasks import load_task
    from tools import load_environment

    tokenizer = AutoTokenizer.from_pretrained(tiny_tools_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_model)
    rows = load_task("arithmetic", "test", limit=8)
    results = rollouts(
        lambda prompts, budget: generate_hf_ids(model, tokenizer, prompts, budget),
        tokenizer,
        rows,
        environment_factory=load_environment("guess"),
        max_new_tokens=128,
        max_tool_calls=4,
        switches={"enable_thinking": False},  # as every attempt renders the tiny model's prompts
    )
    for result, row in zip(results, rows):
        assert len(result.completion_ids) == len(result.tool_mask) <= 128
        assert str(result.environment.answer) == row["answer"]
        runs = _segments(result.completion_ids, result.tool_mask)
        replies = [tokenizer.decode(part) for value, part in runs if value == 0]
        assert len(replies) == result.answered == len([m for m in result.messages if m["role"] == "tool"])
        assert all(r.startswith("\n<|tool|>\n") and r.endswith("<|end|>\n<|assistant|>\n") for r in replies)
        assert result.calls <= 4 + 1 and result.answered <= 4  # the last turn's calls are not answered
    shown = figures(results)
    assert shown["tool_calls"] == sum(r.calls for r in results) > 0
    assert shown["model_turns_per_answer"] == sum(r.answered + 1 for r in results) / len(results)


def test_the_builds_record_is_measured_as_attempts_render_prompts(tiny_tools_model):
    """The record the report quotes ("with the calculator offered: accuracy ...") is measured with the prompts
    rendered as the pass taught them and as every attempt renders them (thinking off), not with the template's
    default (a <think> opened, which the tiny model never saw)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluation.generate import Greedy
    from evaluation.score import evaluate
    from tasks import load_task
    from tiny_model.tool_variant import HELDOUT_TOKENS, MAX_CALLS, build_record, measure_heldout
    from tools import load_tools

    tokenizer = AutoTokenizer.from_pretrained(tiny_tools_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_tools_model)
    model.eval()
    rows = 24
    as_attempts = evaluate(
        model,
        tokenizer,
        load_task("arithmetic", "test", limit=rows),
        Greedy(HELDOUT_TOKENS, switches={"enable_thinking": False}),
        tools=load_tools(["calculate"]),
        max_tool_calls=MAX_CALLS,
    )
    measured = measure_heldout(model, tokenizer, rows=rows)["calculator"]
    assert measured == {key: as_attempts.get(key) for key in measured}
    assert measured["well_formed"] > 0.5  # thinking left on, no answer of the tiny model is well-formed
    record = build_record(tiny_tools_model)
    assert record is not None and record["calculator"]["well_formed"] > 0.5, record
