"""WHAT is kept of the best held-out evaluation during training (what Hugging Face's load_best_model_at_end
keeps, but beside the final model instead of in its place): the model as it was at the best evaluation so far,
in the attempt's best-adapter/ folder, whole or not at all; the best so far that a resumed attempt takes over
from the attempt whose checkpoint it continues; and best-adapter/ removed once the final model scores as well.

Nothing here imports torch: the caller hands in the function that saves the model."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from contract import attempt as contract
from contract.safe_write import publish_folder, remove_folder, staged_leftovers, write_atomic

# What the marker records of the evaluation that chose the model (and `files`: each file's size)
POINT_KEYS = ("step", "accuracy", "well_formed", "correct", "total")


def beats(point: dict, best: dict | None) -> bool:
    """Whether an evaluation beats the best so far: a higher accuracy (a tie keeps the earlier one, as
    load_best_model_at_end does)."""
    accuracy = point.get("accuracy")
    return accuracy is not None and (best is None or accuracy > best["accuracy"])


def read_kept(folder: Path) -> dict | None:
    """The marker of a kept model folder (the evaluation that chose it), or None where the folder is not
    whole: no marker (a write cut short), or a file it lists missing or of another size."""
    try:
        record = json.loads((Path(folder) / contract.BEST_MARKER).read_text(encoding="utf-8"))
        for name, size in record["files"].items():
            if (Path(folder) / name).stat().st_size != size:
                return None
        float(record["accuracy"])
        int(record["step"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return record


def kept_best(attempt_dir: Path) -> tuple[Path, dict] | None:
    """(folder, marker) of the attempt's kept best model: best-adapter/ when whole, else a whole one a kill
    left under its hidden name between the two renames that put it in place; None when there is none."""
    folder = Path(attempt_dir) / contract.BEST_ADAPTER_DIR
    for candidate in [folder, *staged_leftovers(folder)]:
        record = read_kept(candidate)
        if record is not None:
            return candidate, record
    return None


def keep(folder: Path, write: Callable[[Path], None], record: dict) -> dict:
    """Put a model in `folder` whole or not at all (contract.safe_write.publish_folder): `write(staged)` fills a
    hidden folder beside it, and the marker (`record` and each file's size) is written last, once every file
    is on disk; never a folder without its marker under the real name. The marker written."""
    marker = dict(record)

    def seal(staged: Path, sizes: dict[str, int]) -> None:
        marker["files"] = sizes
        write_atomic(staged / contract.BEST_MARKER, json.dumps(marker, indent=1) + "\n")

    publish_folder(folder, write, seal)
    return marker


def _copy_files(source: Path, staged: Path) -> None:
    """The files of a kept folder (its marker aside): hard links where the file system allows (a kept model is
    never changed in place, only replaced), else copies."""
    for path in sorted(p for p in source.rglob("*") if p.is_file() and p.name != contract.BEST_MARKER):
        target = staged / path.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


class BestKeeper:
    """The best held-out evaluation so far and the folder that holds its model. `save(folder)` writes the model
    as it is now into a folder, as the finish stage writes adapter/ (the LoRA adapter, or the whole model at
    lora_rank 0, and the tokenizer)."""

    def __init__(self, attempt_dir: Path, save: Callable[[Path], None], say=None):
        self.folder = Path(attempt_dir) / contract.BEST_ADAPTER_DIR
        self.save = save
        self.say = say or (lambda text: None)
        self.best: dict | None = None  # {step, accuracy, ...}; step 0: the evaluation before training
        self.kept: dict | None = None  # best-adapter/'s marker, while it holds `best`

    def start(self, before: dict | None, resume_from: str | None = None) -> None:
        """The best before this attempt's first evaluation during training: the evaluation before training,
        and, resuming another attempt's checkpoint, the model that attempt kept when it beats that (copied into
        this attempt's folder, so that each attempt folder holds its own best)."""
        if before and before.get("accuracy") is not None:
            self.best = {"step": 0, "accuracy": before["accuracy"], "well_formed": before.get("well_formed")}
        found = kept_best(Path(resume_from).parent) if resume_from else None
        if found is None or not beats(found[1], self.best):
            return
        source, record = found
        point = {key: record.get(key) for key in POINT_KEYS}
        if source.resolve() == self.folder.resolve():  # restarted within the attempt (torch elastic): already in place
            self.best, self.kept = point, record
            return
        chosen_by = record.get("chosen_by") or source.parent.name  # the attempt whose evaluation it was
        self.kept = keep(self.folder, lambda staged: _copy_files(source, staged), {**point, "chosen_by": chosen_by})
        self.best = point
        self.say(
            f"best model so far: step {point['step']}, accuracy {point['accuracy']} ({chosen_by}'s evaluation), "
            f"carried over into {self.folder.name}/"
        )

    def offer(self, point: dict) -> bool:
        """Keep the model as it is now when `point`, an evaluation during training, beats the best so far;
        whether it did."""
        if not beats(point, self.best):
            return False
        record = {key: point.get(key) for key in POINT_KEYS}
        self.kept = keep(self.folder, self.save, record)
        self.best = record
        return True

    def settle(self, best: dict | None) -> None:
        """After the report's choice of the run's best (trainer.report.evaluation_figures): where the final
        model is it, adapter/ holds the best and best-adapter/ goes (one answer to "which is best", and no
        second copy of a whole model on disk)."""
        if not best or best.get("saved_in") != contract.ADAPTER_DIR or not self.folder.exists():
            return
        remove_folder(self.folder)
        self.kept = None
        self.say(
            f"the final model scores at least as well as every evaluation before it: {contract.ADAPTER_DIR}/ is "
            f"the best; {self.folder.name}/ removed"
        )
