"""`sample --best` and `export --best`: the model of the best held-out evaluation during training (the attempt's
best-adapter/) instead of the final adapter/; the final one, said, where the run's summary names it the best;
exit 2 naming the folder and the fix where no best model was kept. The model never loads here: sample's answers
and export's merge are stand-ins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from commands import main
from commands.sample import find_target
from contract.attempt import BEST_ADAPTER_DIR
from trainer.best_model import BestKeeper

REPO = Path(__file__).resolve().parents[2]
SMALL = REPO / "profiles" / "cpu-tiny-4gen.yaml"


def write_adapter(folder: Path) -> None:
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 64)


@pytest.fixture
def attempt(tmp_path):
    """A finished attempt folder as the supervisor leaves it, in its run folder, with its final adapter."""
    folder = tmp_path / "run-20250101-000000" / "attempt-01-cpu-tiny-4gen"
    (folder / "adapter").mkdir(parents=True)
    write_adapter(folder / "adapter")
    (folder / "profile.yaml").write_text(SMALL.read_text())
    (folder / "outcome.json").write_text(json.dumps({"status": "ok", "steps": 30}))
    return folder


def keep_best(attempt: Path, write=write_adapter) -> Path:
    BestKeeper(attempt, write).offer({"step": 20, "accuracy": 0.6, "well_formed": 1.0})
    return attempt / BEST_ADAPTER_DIR


def summarise(attempt: Path, best: dict, every: int = 10) -> None:
    (attempt / "summary.json").write_text(json.dumps({"evaluation": {"every": every, "best": best}}))


@pytest.fixture
def answered(monkeypatch):
    """The adapter folders sample answered with (trainer.sample.answer and the base model's lookup replaced)."""
    import tiny_model.source
    import trainer.sample

    folders: list[Path] = []

    def answer(profile, adapter_dir, base, rows, **kwargs):
        folders.append(Path(adapter_dir))
        return []

    monkeypatch.setattr(trainer.sample, "answer", answer)
    monkeypatch.setattr(tiny_model.source, "base_model_path", lambda profile, adapter_dir: "tiny-base")
    return folders


def sample(given: Path, *extra: str) -> int:
    return main(["sample", str(given), "--prompt", "What is 2 + 2?", *extra])


@pytest.mark.parametrize("given", ["attempt", "run"])
def test_best_takes_best_adapter_and_the_default_stays_the_final_one(attempt, answered, given):
    best = keep_best(attempt)
    folder = attempt if given == "attempt" else attempt.parent
    assert sample(folder, "--best") == 0 and answered == [best]
    assert sample(folder) == 0 and answered[-1] == attempt / "adapter"


def test_the_best_adapter_folder_given_itself_is_sampled(attempt, answered):
    best = keep_best(attempt)
    assert sample(best) == 0 and answered == [best]


def test_a_whole_model_kept_at_lora_rank_0_is_found_by_its_marker(attempt):
    def whole_model(folder: Path) -> None:  # what save_pretrained writes without LoRA: no adapter_config.json
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"\0" * 64)

    best = keep_best(attempt, whole_model)
    target = find_target(best)
    assert target.adapter_dir == best and target.attempt_dir == attempt


def test_where_the_final_model_is_the_best_best_says_so_and_takes_it(attempt, answered, capsys):
    summarise(attempt, {"step": 30, "accuracy": 0.6, "well_formed": 1.0, "saved_in": "adapter"})
    assert sample(attempt, "--best") == 0 and answered == [attempt / "adapter"]
    assert "the final model is the best of attempt-01-cpu-tiny-4gen" in capsys.readouterr().err


@pytest.mark.parametrize(
    "summary, why",
    [
        (None, "no evaluation during training has beaten the ones before it"),
        ({"step": 0, "accuracy": 0.7, "saved_in": None}, "its best held-out accuracy (0.7) was before training"),
        ({"step": 30, "accuracy": 0.6, "saved_in": None}, "it evaluated nothing during training"),
    ],
)
def test_best_without_a_kept_model_is_bad_input_naming_the_folder_and_the_fix(attempt, answered, capsys, summary, why):
    if summary is not None:
        summarise(attempt, summary, every=0 if summary["step"] else 10)
    assert sample(attempt, "--best") == 2 and answered == []
    error = capsys.readouterr().err
    assert f"--best: {attempt} holds no best-adapter/: {why}" in error
    assert f"(fix: drop --best for the final model in {attempt / 'adapter'}" in error


@pytest.fixture
def merged(monkeypatch):
    """trainer.export.merged_model replaced by a stand-in; the adapter folders it was asked to merge."""
    from trainer import export

    asked: list[Path] = []

    class Saved:
        def save_pretrained(self, folder, **_):
            Path(folder, "config.json").write_text("{}")

    def merged_model(profile, adapter_dir, base, dtype, say):
        asked.append(Path(adapter_dir))
        return export.Merged(Saved(), Saved(), "tiny", "cpu", "float16", 123)

    monkeypatch.setattr(export, "merged_model", merged_model)
    monkeypatch.setattr("tiny_model.source.base_model_path", lambda profile, adapter_dir: "tiny-base")
    return asked


def test_export_best_writes_beside_the_final_models_export(attempt, merged, capsys):
    best = keep_best(attempt)
    assert main(["export", str(attempt), "--best", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert merged == [best] and record["adapter"] == str(best)
    assert record["merged"]["folder"] == str(attempt / "export-best" / "merged")
    assert main(["export", str(attempt), "--json"]) == 0 and merged[-1] == attempt / "adapter"
    assert (attempt / "export" / "merged").is_dir() and (attempt / "export-best" / "merged").is_dir()


def test_export_best_without_a_kept_model_exits_2_before_any_merge(attempt, merged, capsys):
    assert main(["export", str(attempt), "--best"]) == 2 and merged == []
    assert "holds no best-adapter/" in capsys.readouterr().err
    assert not (attempt / "export-best").exists()
