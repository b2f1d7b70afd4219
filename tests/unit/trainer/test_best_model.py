"""The best model is kept: an evaluation during training that beats every earlier one (the one before training
included; a tie keeps the earlier) saves the model into best-adapter/, whole or not at all; a resumed attempt
takes over the best of the attempt it continues; the final model, when it scores as well, is the best and
best-adapter/ goes; summary.json and report.md say which folder holds the final model and which the best. The
save is a stand-in that writes files: no model trains here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from contract.attempt import BEST_ADAPTER_DIR, BEST_MARKER
from trainer.best_model import BestKeeper, kept_best, read_kept
from trainer.report import _evaluation_lines, _final_and_best_lines, evaluation_figures


class FakeSave:
    """Writes what save_pretrained writes (a config, then the weights), and notes each folder it wrote."""

    def __init__(self):
        self.calls: list[Path] = []
        self.fail_after_config = False

    def __call__(self, folder: Path) -> None:
        self.calls.append(folder)
        (folder / "adapter_config.json").write_text(json.dumps({"call": len(self.calls)}))
        if self.fail_after_config:  # a kill (SIGKILL aside: that leaves the staged folder) mid-write
            raise KeyboardInterrupt("stopped while saving")
        (folder / "adapter_model.safetensors").write_bytes(b"\0" * (100 + len(self.calls)))


def evaluate_during(tmp_path: Path, accuracies: list[float], before: float | None, every: int = 10):
    """The callback run over steps every, 2 every, ... with these accuracies; (callback, keeper, save)."""
    from trainer.callbacks import EvaluateDuringTraining

    save = FakeSave()
    keeper = BestKeeper(tmp_path, save)
    keeper.start({"accuracy": before, "well_formed": 1.0} if before is not None else None)
    results = iter(accuracies)

    def evaluate():
        accuracy = next(results)
        return {"accuracy": accuracy, "well_formed": 1.0, "correct": int(accuracy * 100), "total": 100}

    signals = SimpleNamespace(stopped=False, phase="training")
    callback = EvaluateDuringTraining(every, evaluate, signals, best=keeper)
    state = SimpleNamespace(global_step=0, max_steps=every * (len(accuracies) + 1))
    for step in range(1, state.max_steps + 1):
        state.global_step = step
        callback.on_step_end(None, state, SimpleNamespace(should_save=False, should_training_stop=False))
    return callback, keeper, save


def test_an_evaluation_that_beats_every_earlier_one_keeps_the_model(tmp_path):
    # 0.5 ties the evaluation before training, 0.6 beats it, 0.55 does not, 0.6 ties (the earlier stays), 0.7 beats
    callback, keeper, save = evaluate_during(tmp_path, [0.5, 0.6, 0.55, 0.6, 0.7], before=0.5)
    assert len(save.calls) == 2 and all(folder.name.startswith(".best-adapter.partial-") for folder in save.calls)
    assert [p["step"] for p in callback.points if p.get("kept_best")] == [20, 50]  # metrics.jsonl says which
    marker = read_kept(tmp_path / BEST_ADAPTER_DIR)
    assert marker is not None and (marker["step"], marker["accuracy"]) == (50, 0.7)
    assert json.loads((tmp_path / BEST_ADAPTER_DIR / "adapter_config.json").read_text()) == {"call": 2}
    assert keeper.best["step"] == 50 and keeper.kept == marker
    assert [p.name for p in tmp_path.iterdir()] == [BEST_ADAPTER_DIR]  # nothing staged is left beside it


def test_nothing_is_kept_where_no_evaluation_beats_the_one_before_training(tmp_path):
    _, keeper, save = evaluate_during(tmp_path, [0.4, 0.5], before=0.5)
    assert save.calls == [] and not (tmp_path / BEST_ADAPTER_DIR).exists()
    assert keeper.best == {"step": 0, "accuracy": 0.5, "well_formed": 1.0}


def test_without_an_evaluation_before_training_the_first_one_is_kept(tmp_path):
    _, keeper, save = evaluate_during(tmp_path, [0.3, 0.2], before=None)
    assert len(save.calls) == 1 and keeper.best["step"] == 10


def test_a_save_cut_short_leaves_the_earlier_best_whole(tmp_path):
    keeper = BestKeeper(tmp_path, FakeSave())
    keeper.start({"accuracy": 0.1})
    assert keeper.offer({"step": 10, "accuracy": 0.5, "well_formed": 1.0, "correct": 5, "total": 10})
    keeper.save.fail_after_config = True
    with pytest.raises(KeyboardInterrupt):
        keeper.offer({"step": 20, "accuracy": 0.6, "well_formed": 1.0, "correct": 6, "total": 10})
    assert read_kept(tmp_path / BEST_ADAPTER_DIR)["step"] == 10
    assert [p.name for p in tmp_path.iterdir()] == [BEST_ADAPTER_DIR]
    # a SIGKILL leaves the staged folder, without its marker: it is never taken for a kept model
    staged = tmp_path / ".best-adapter.partial-99999"
    staged.mkdir()
    (staged / "adapter_config.json").write_text("{}")
    assert kept_best(tmp_path)[0] == tmp_path / BEST_ADAPTER_DIR
    # a folder whose marker lists a file of another size (cut short, or changed since) is not whole
    (tmp_path / BEST_ADAPTER_DIR / "adapter_model.safetensors").write_bytes(b"\0")
    assert read_kept(tmp_path / BEST_ADAPTER_DIR) is None


def test_a_kill_between_the_two_renames_loses_neither(tmp_path):
    """The earlier best moved aside, the new one not yet in its place: the new one, whole, is found."""
    keeper = BestKeeper(tmp_path / "attempt-01", FakeSave())
    keeper.offer({"step": 10, "accuracy": 0.5})
    (tmp_path / "attempt-01" / BEST_ADAPTER_DIR).rename(tmp_path / "attempt-01" / ".best-adapter.partial-4242")
    folder, marker = kept_best(tmp_path / "attempt-01")
    assert folder.name == ".best-adapter.partial-4242" and marker["step"] == 10
    resumed = BestKeeper(tmp_path / "attempt-02", FakeSave())
    resumed.start({"accuracy": 0.2}, str(tmp_path / "attempt-01" / "checkpoint-10"))
    assert read_kept(tmp_path / "attempt-02" / BEST_ADAPTER_DIR)["step"] == 10


def test_a_resumed_attempt_takes_over_the_best_of_the_attempt_it_continues(tmp_path):
    first = BestKeeper(tmp_path / "attempt-01", FakeSave())
    first.start({"accuracy": 0.5})
    first.offer({"step": 20, "accuracy": 0.6, "well_formed": 1.0, "correct": 6, "total": 10})
    said: list[str] = []
    second = BestKeeper(tmp_path / "attempt-02", FakeSave(), said.append)
    second.start({"accuracy": 0.5}, str(tmp_path / "attempt-01" / "checkpoint-30"))
    carried = read_kept(tmp_path / "attempt-02" / BEST_ADAPTER_DIR)
    assert carried["step"] == 20 and carried["accuracy"] == 0.6 and carried["chosen_by"] == "attempt-01"
    assert (tmp_path / "attempt-02" / BEST_ADAPTER_DIR / "adapter_model.safetensors").read_bytes() == b"\0" * 101
    assert second.save.calls == [] and "carried over into best-adapter/" in said[0]
    assert not second.offer({"step": 40, "accuracy": 0.6})  # a tie with the carried best keeps it
    assert second.offer({"step": 50, "accuracy": 0.65}) and second.kept["step"] == 50
    # carried on again: the attempt whose evaluation chose it stays named
    third = BestKeeper(tmp_path / "attempt-03", FakeSave())
    third.start({"accuracy": 0.5}, str(tmp_path / "attempt-02" / "checkpoint-50"))
    assert third.best["step"] == 50 and third.kept["chosen_by"] == "attempt-02"


def test_an_evaluation_before_training_as_good_as_the_carried_best_wins(tmp_path):
    first = BestKeeper(tmp_path / "attempt-01", FakeSave())
    first.offer({"step": 20, "accuracy": 0.6})
    second = BestKeeper(tmp_path / "attempt-02", FakeSave())
    second.start({"accuracy": 0.6}, str(tmp_path / "attempt-01" / "checkpoint-30"))
    assert second.best["step"] == 0 and not (tmp_path / "attempt-02" / BEST_ADAPTER_DIR).exists()


def test_the_final_model_as_good_as_the_best_is_the_best_and_best_adapter_goes(tmp_path):
    keeper = BestKeeper(tmp_path, FakeSave())
    keeper.start({"accuracy": 0.2, "well_formed": 0.5})
    keeper.offer({"step": 20, "accuracy": 0.6, "well_formed": 1.0})
    points = [{"step": 10, "accuracy": 0.4, "well_formed": 0.9}, {"step": 20, "accuracy": 0.6, "well_formed": 1.0}]
    figures = evaluation_figures(
        {"accuracy": 0.2}, points, {"accuracy": 0.6, "well_formed": 1.0}, 30, 10, "", 1, 10, tmp_path, keeper.kept
    )
    assert figures["best"] == {"step": 30, "accuracy": 0.6, "well_formed": 1.0, "saved_in": "adapter"}
    assert figures["final"] == figures["best"]
    keeper.settle(figures["best"])
    assert not (tmp_path / BEST_ADAPTER_DIR).exists() and keeper.kept is None


def test_summary_names_the_folder_of_the_final_model_and_of_the_best(tmp_path):
    keeper = BestKeeper(tmp_path, FakeSave())
    keeper.start({"accuracy": 0.5})
    keeper.offer({"step": 80, "accuracy": 0.655, "well_formed": 1.0})
    points = [{"step": 40, "accuracy": 0.655, "well_formed": 0.9}, {"step": 80, "accuracy": 0.655, "well_formed": 1.0}]
    after = {"accuracy": 0.645, "well_formed": 1.0}
    figures = evaluation_figures({"accuracy": 0.5}, points, after, 100, 40, "", 1, 10, tmp_path, keeper.kept)
    assert figures["best"] == {"step": 80, "accuracy": 0.655, "well_formed": 1.0, "saved_in": "best-adapter"}
    assert figures["final"] == {"step": 100, "accuracy": 0.645, "well_formed": 1.0, "saved_in": "adapter"}
    keeper.settle(figures["best"])
    assert (tmp_path / BEST_ADAPTER_DIR / BEST_MARKER).is_file()  # the final is worse: best-adapter/ stays
    assert _final_and_best_lines(figures["final"], figures["best"])[-1] == (
        "Final: step 100, accuracy 0.645, in `adapter/`. Best: step 80, accuracy 0.655, in `best-adapter/` "
        "(`python train.py sample RUN --best`)."
    )
    # without best-adapter/ (a run evaluated by hand), the first of two equal points is the best, not the later
    plain = evaluation_figures({"accuracy": 0.5}, points, after, 100, 40, "", 1, 10, tmp_path / "none")
    assert plain["best"]["step"] == 40 and plain["best"]["saved_in"] is None


@pytest.mark.parametrize(
    "before, after, line",
    [
        (
            0.7,
            0.6,
            "Final: step 30, accuracy 0.600, in `adapter/`. Best: step 0, accuracy 0.700 (before training): "
            "no trained model scored higher, so none is kept.",
        ),
        (0.2, 0.9, "Final: step 30, accuracy 0.900, in `adapter/`; it is also the best of the run."),
    ],
)
def test_the_report_says_which_model_is_final_and_which_is_best(tmp_path, before, after, line):
    figures = evaluation_figures(
        {"accuracy": before},
        [{"step": 10, "accuracy": 0.5}],
        {"accuracy": after},
        30,
        10,
        "every 10 steps",
        1,
        10,
        tmp_path,
    )
    assert _evaluation_lines(figures)[-1] == line


def test_a_carried_best_names_the_attempt_whose_evaluation_chose_it(tmp_path):
    kept = {"step": 20, "accuracy": 0.6, "well_formed": 1.0, "chosen_by": "attempt-01-cpu-tiny-4gen", "files": {}}
    figures = evaluation_figures({"accuracy": 0.5}, [], {"accuracy": 0.55}, 40, 10, "", 1, 10, tmp_path, kept)
    assert figures["best"]["saved_in"] == "best-adapter" and figures["best"]["chosen_by"] == kept["chosen_by"]
    assert "chosen by attempt-01-cpu-tiny-4gen's evaluation" in _evaluation_lines(figures)[-1]
