"""The plan's completion lengths: the chat template's switches (Qwen3 thinks unless enable_thinking is false), the
thinking cap, a thinking template against the rewards' layout, the lengths this machine measured (the ledger)
over the estimate, and characters per token from a tokenizer found in the local cache."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from launcher.memory.ledger.record import lengths_record
from launcher.memory.ledger.store import Entry
from launcher.plan.completion_lengths import MEASURED, THINKING_CAP, completion_plan, lengths_notes, planned_switches
from profiles.catalog import resolve
from profiles.load import load_profile
from support.cli import train_py

REPO = Path(__file__).resolve().parents[3]
RUNG = REPO / "profiles" / "gpu-24gb-llama3.1-8b.yaml"
THINK_PROMPT = "Think, then answer as <think>\n...\n</think>\n<answer>\n...\n</answer>"


def rung(*overrides):
    return load_profile(RUNG, list(overrides))


def test_qwen3_plans_with_thinking_off_by_default():
    profile = rung("model=Qwen/Qwen3-4B")
    plan = completion_plan(profile, resolve(profile.model))
    assert plan.switches == {"enable_thinking": False} and not plan.thinking
    assert (plan.cap, plan.expected, plan.source) == (768, 217, "estimated")
    assert lengths_notes(profile) == [
        f"lengths of Qwen/Qwen3-4B on gsm8k: cap {profile.max_completion_length} (the answers need 768), expected "
        "217 tokens (estimated; 3.2 characters a token, qwen tokenizer, an estimate); template switches: "
        "enable_thinking false"
    ]


def test_a_model_without_the_switch_plans_without_one():
    profile = rung()
    assert planned_switches(profile, resolve(profile.model)) == ({}, "")
    assert completion_plan(profile, resolve(profile.model)).switches == {}


def test_thinking_turned_on_sizes_the_cap_for_it_and_says_the_rewards_cannot_score_it():
    profile = rung("model=Qwen/Qwen3-4B", "chat_template_kwargs={enable_thinking: true}")
    plan = completion_plan(profile, resolve(profile.model))
    assert plan.thinking and plan.switches == {"enable_thinking": True}
    assert plan.cap >= THINKING_CAP and plan.expected == plan.cap // 2
    assert "a <think> block comes before the answer" in plan.basis
    notes = lengths_notes(profile)
    assert notes[0].endswith("template switches: enable_thinking true; the template thinks before answering")
    assert "xml_count, xml_soft, xml_strict expect the <reasoning>/<answer> layout, so they score 0" in notes[1]
    assert "fix: chat_template_kwargs: {enable_thinking: false}" in notes[1]
    # a <think>/<answer> prompt scored by the rewards for those tags agrees with a thinking template
    agreed = rung(
        "model=Qwen/Qwen3-4B",
        "chat_template_kwargs={enable_thinking: true}",
        f"system_prompt={json.dumps(THINK_PROMPT)}",
        "rewards={think_format: 1.0, think_count: 1.0, accuracy: 2.0}",
    )
    assert len(lengths_notes(agreed)) == 1


def measured_entry(profile, switches, lengths, cut=None, days_ago=0, cap=768):
    figures = {
        "samples": len(lengths),
        "mean": sum(lengths) / len(lengths),
        "p95": sorted(lengths)[int(0.95 * len(lengths)) - 1],
        "longest": max(lengths),
        "cut_share": sum(cut or [False]) / len(lengths),
        "cap": cap,
        "source": "probe",
        "switches": switches,
    }
    return Entry(
        profile=profile.name,
        fingerprint="0" * 16,
        machine={"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "total_gib": 80},
        status="replanned",
        lengths=lengths_record(profile, figures),
        date=(datetime.now() - timedelta(days=days_ago)).isoformat(timespec="seconds"),
    )


def test_lengths_measured_on_this_machine_replace_the_estimate():
    profile = rung("model=Qwen/Qwen3-4B")
    arch = resolve(profile.model)
    entry = measured_entry(profile, {"enable_thinking": False}, [360] * 19 + [420])
    plan = completion_plan(profile, arch, measurements=[entry])
    assert (plan.cap, plan.expected, plan.source) == (512, 363, MEASURED)
    assert plan.basis.startswith(f"{MEASURED} ({datetime.now().date().isoformat()}): 20 answers (probe) of 363")
    assert "expected 363 tokens (measured on this machine)" in lengths_notes(profile, [entry])[0]
    # measured under other switches, of another model, or too long ago: not these answers
    other = measured_entry(profile, {"enable_thinking": True}, [360] * 20)
    old = measured_entry(profile, {"enable_thinking": False}, [360] * 20, days_ago=60)
    llama = measured_entry(rung(), {}, [360] * 20)
    assert completion_plan(profile, arch, measurements=[other, old, llama]).source == "estimated"
    # a pinned cap still wins over the measurement
    assert completion_plan(profile, arch, {"max_completion_length"}, [entry]).cap == profile.max_completion_length


def test_cut_measurements_double_the_cap_until_measured_whole():
    profile = rung("model=Qwen/Qwen3-4B")
    entry = measured_entry(profile, {"enable_thinking": False}, [768] * 20, cut=[True] * 20)
    plan = completion_plan(profile, resolve(profile.model), measurements=[entry])
    assert plan.cap == 1536 and "the cap doubles until they are measured whole" in plan.basis


def test_answers_cut_at_a_small_cap_are_a_lower_bound_and_never_lower_the_plan():
    """A smoke run (`--set max_completion_length=8`) measured every answer cut at 8 tokens: the next plan of that
    model and task keeps the estimate (a step planned for 8 tokens a completion would run four times longer)."""
    profile = rung("model=meta-llama/Llama-3.2-3B-Instruct")
    arch = resolve(profile.model)
    estimated = completion_plan(profile, arch)
    for cap in (2, 8):
        smoke = measured_entry(profile, {}, [cap] * 24, cut=[True] * 24, cap=cap)
        plan = completion_plan(profile, arch, measurements=[smoke])
        assert (plan.cap, plan.expected) == (estimated.cap, estimated.expected), cap
        assert smoke.lengths["censored"] is True  # stored as what it is: a lower bound
        assert plan.source == MEASURED and "they run longer than measured" in plan.basis
        note = lengths_notes(profile, [smoke])[0]
        assert f"expected {min(estimated.expected, profile.max_completion_length)} tokens" in note
    # a newer cut measurement does not outweigh an older one of whole answers
    whole = measured_entry(profile, {}, [150] * 19 + [200], days_ago=2)
    smoke = measured_entry(profile, {}, [8] * 24, cut=[True] * 24, cap=8)
    plan = completion_plan(profile, arch, measurements=[whole, smoke])
    assert (plan.cap, plan.expected) == (256, 152)


def test_the_notes_name_the_ledger_record_read():
    profile = rung("model=Qwen/Qwen3-4B")
    entry = measured_entry(profile, {"enable_thinking": False}, [360] * 19 + [420])
    note = lengths_notes(profile, [entry])[0]
    day = datetime.now().date().isoformat()
    assert f"measured by {profile.name} on {day} (ledger record {'0' * 16}" in note
    assert f"`python train.py ledger --forget {'0' * 16}` forgets it" in note
    assert (
        completion_plan(profile, resolve(profile.model), measurements=[entry])
        .to_json()["record"]
        .startswith(f"measured by {profile.name}")
    )


def test_lengths_are_kept_apart_by_tools_and_sampling():
    """A tools run's answers (calls, replies) or a hotter temperature's are not the plain run's answers."""
    profile = rung("model=Qwen/Qwen3-4B")
    arch = resolve(profile.model)
    hot = rung("model=Qwen/Qwen3-4B", "temperature=1.8")
    tools = rung("model=Qwen/Qwen3-4B", "tools=[calculate]")
    for other in (hot, tools):
        entry = measured_entry(other, {"enable_thinking": False}, [8] * 19 + [9])
        assert completion_plan(profile, arch, measurements=[entry]).source == "estimated"
        assert completion_plan(other, arch, measurements=[entry]).source == MEASURED
    # the tools offered and how many calls: part of the key
    more_calls = rung("model=Qwen/Qwen3-4B", "tools=[calculate]", "max_tool_calls=5")
    entry = measured_entry(tools, {"enable_thinking": False}, [40] * 20)
    assert completion_plan(more_calls, arch, measurements=[entry]).source == "estimated"
    # another spelling of the same settings is the same key: min_p unset or 0, the same float written otherwise
    same = rung("model=Qwen/Qwen3-4B", "min_p=0", f"temperature={profile.temperature:.3f}")
    entry = measured_entry(profile, {"enable_thinking": False}, [40] * 20)
    assert completion_plan(same, arch, measurements=[entry]).source == MEASURED
    # a record written before the key held tools and sampling: measured under settings no longer known
    old = measured_entry(profile, {"enable_thinking": False}, [8] * 20)
    old.lengths = {k: v for k, v in old.lengths.items() if k not in ("tools", "sampling")}
    assert completion_plan(profile, arch, measurements=[old]).source == "estimated"


def test_the_fit_solver_derives_from_the_measured_cap(tmp_path, monkeypatch):
    """`plan --set model=M` reads the ledger: the derived configurations hold the measured answers."""
    profile = rung("model=Qwen/Qwen3-4B")
    ledger = tmp_path / "ledger.jsonl"
    ledger.write_text(measured_entry(profile, {"enable_thinking": False}, [360] * 19 + [420]).to_json())
    args = [
        "plan",
        "--json",
        "--set",
        "model=Qwen/Qwen3-4B",
        "--gpu-memory",
        "80",
        "--gpu-name",
        "NVIDIA H100 80GB HBM3",
    ]
    done = train_py(*args, GRPO_TRAIN_LEDGER=str(ledger))
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    chosen = next(c for c in plan["candidates"] if c["profile"] == plan["chosen"])
    assert chosen["settings"]["max_completion_length"] == 512
    assert any("expected 363 tokens (measured on this machine)" in note for note in plan["notes"])
    thinking = train_py(*args, "--set", "chat_template_kwargs={enable_thinking: true}", GRPO_TRAIN_LEDGER=str(ledger))
    notes = json.loads(thinking.stdout)["notes"]
    assert any("chat template thinks (enable_thinking is true)" in note for note in notes)


@pytest.fixture
def cached_model(tmp_path, monkeypatch):
    """A model of the Hugging Face cache, held nowhere else: its config, tokenizer and a chat template that
    reads the thinking switch."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from tasks.reference_lengths import WORKED_SAMPLE

    hub = tmp_path / "hub"
    snapshot = hub / "models--someone--maths-7b" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (hub / "models--someone--maths-7b" / "refs").mkdir()
    (hub / "models--someone--maths-7b" / "refs" / "main").write_text("abc")
    config = json.loads(json.dumps({"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 4}))
    config.update(num_attention_heads=8, intermediate_size=1024, vocab_size=300)
    (snapshot / "config.json").write_text(json.dumps(config))
    core = Tokenizer(models.BPE(unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.train_from_iterator([WORKED_SAMPLE] * 3, trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    core.save(str(snapshot / "tokenizer.json"))
    (snapshot / "chat_template.jinja").write_text("{% if enable_thinking %}<think>{% endif %}{{ messages }}")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("GRPO_TRAIN_CACHE", str(tmp_path / "cache"))
    from profiles import tokenizer

    tokenizer.measured_chars_per_token.cache_clear()
    tokenizer.template_thinking.cache_clear()
    yield "someone/maths-7b", len(WORKED_SAMPLE) / len(core.encode(WORKED_SAMPLE, add_special_tokens=False).ids)
    tokenizer.measured_chars_per_token.cache_clear()
    tokenizer.template_thinking.cache_clear()


def test_a_cached_tokenizer_gives_the_characters_per_token_and_its_template_the_switch(cached_model, tmp_path):
    model, rate = cached_model
    profile = rung(f"model={model}")
    arch = resolve(model)
    assert arch.family == "llama" and not arch.thinking_switch  # the catalogue would not know
    plan = completion_plan(profile, arch)
    assert f"at {round(rate, 3):g} characters a token (its tokenizer, measured:" in plan.basis
    assert plan.switches == {"enable_thinking": False}  # its own template reads the switch
    rates = json.loads((tmp_path / "cache" / "tokenizer-rates.json").read_text())
    assert list(rates.values()) == [round(rate, 3)]  # kept: the next plan does not read the tokenizer again


def _hub_model(hub: Path, model: str, config: dict, template: str | None = None) -> None:
    """`model` in a Hugging Face cache: its config.json, and its chat template when given."""
    repo = hub / ("models--" + model.replace("/", "--"))
    snapshot = repo / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc")
    (snapshot / "config.json").write_text(json.dumps(config))
    if template is not None:
        (snapshot / "chat_template.jinja").write_text(template)


QWEN2_1_5B = {"model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12}
QWEN2_1_5B.update(num_key_value_heads=2, intermediate_size=8960, vocab_size=151936, tie_word_embeddings=False)
GPT_OSS_20B = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64}
GPT_OSS_20B.update(num_key_value_heads=8, head_dim=64, intermediate_size=2880, vocab_size=201088)
GPT_OSS_20B.update(num_local_experts=32, num_experts_per_tok=4, tie_word_embeddings=False)
R1_GENERATION = "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
HARMONY = "{%- if reasoning_effort is not defined %}{%- set reasoning_effort = 'medium' %}{%- endif %}"


@pytest.fixture
def thinking_hub(tmp_path, monkeypatch):
    """A Hugging Face cache of models that think: by name alone, by family alone, and by their template alone."""
    from profiles import tokenizer

    hub = tmp_path / "hub"
    _hub_model(hub, "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", QWEN2_1_5B)
    _hub_model(hub, "openai/gpt-oss-20b", GPT_OSS_20B)
    _hub_model(hub, "someone/r1-style-1.5b", QWEN2_1_5B, R1_GENERATION)  # neither name nor family says it
    _hub_model(hub, "someone/plain-1.5b", QWEN2_1_5B, "{{ messages }}")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("GRPO_TRAIN_CACHE", str(tmp_path / "cache"))
    for cached in (tokenizer.template_thinking, tokenizer.measured_chars_per_token):
        cached.cache_clear()
    yield hub
    for cached in (tokenizer.template_thinking, tokenizer.measured_chars_per_token):
        cached.cache_clear()


def test_a_template_that_always_thinks_plans_for_it_and_says_so(thinking_hub):
    from launcher.plan.completion_lengths import ALWAYS_THINKING_CAP

    for model in ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "someone/r1-style-1.5b"):
        profile = rung(f"model={model}")
        plan = completion_plan(profile, resolve(model))
        assert plan.thinking and plan.kind == "always" and plan.switches == {}
        assert (plan.cap, plan.expected) == (ALWAYS_THINKING_CAP, ALWAYS_THINKING_CAP // 2), model
        assert "the chat template always thinks" in plan.basis and "no switch turns it off" in plan.basis
        notes = lengths_notes(profile)
        assert notes[0].endswith("; the template always thinks before answering (no switch turns it off)")
        # the rewards' layout cannot follow the thinking, and no switch is offered as the fix
        assert "thinks always, and no switch turns it off" in notes[1] and "enable_thinking" not in notes[1]
    plain = completion_plan(rung("model=someone/plain-1.5b"), resolve("someone/plain-1.5b"))
    assert not plain.thinking and plain.cap < ALWAYS_THINKING_CAP


def test_reasoning_effort_sets_the_thinking_cap_and_the_note_names_the_switch(thinking_hub):
    from launcher.plan.completion_lengths import EFFORT_CAPS

    model = "openai/gpt-oss-20b"
    plan = completion_plan(rung(f"model={model}"), resolve(model))
    assert plan.thinking and plan.kind == "reasoning_effort" and plan.switches == {}  # the template's medium
    assert (plan.cap, plan.expected) == (EFFORT_CAPS["medium"], EFFORT_CAPS["medium"] // 2)
    assert "at reasoning_effort medium (the template's default)" in plan.basis
    assert "chat_template_kwargs: {reasoning_effort: low} shortens it" in lengths_notes(rung(f"model={model}"))[0]
    for level in ("low", "high"):
        profile = rung(f"model={model}", f"chat_template_kwargs={{reasoning_effort: {level}}}")
        plan = completion_plan(profile, resolve(model))
        assert plan.switches == {"reasoning_effort": level} and plan.cap == EFFORT_CAPS[level]
    assert EFFORT_CAPS["low"] < EFFORT_CAPS["medium"] < EFFORT_CAPS["high"]
    # a pinned cap is the user's: kept, and the thinking still said
    pinned = rung(f"model={model}", "max_completion_length=512")
    plan = completion_plan(pinned, resolve(model), {"max_completion_length"})
    assert plan.cap == 512 and plan.thinking and "the cap pinned at 512" in plan.basis
