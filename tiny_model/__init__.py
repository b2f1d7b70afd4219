"""The offline `tiny` model for CPU runs and tests: a byte-level BPE tokenizer trained on the task's own
text and a small Llama-shaped model (`build`), warm-started by a short supervised pass on worked solutions
(`warm_start`). Built once, seeded, and cached: nothing is downloaded. Beside it, any catalogue
architecture with random weights (`random_weights`), to measure memory without the real model.

The trainer reaches it only through trainer.model_source, which gives a path to load for any profile's
`model` (a hub id, a local folder, or `tiny`), so the main path reads the same for all three.
"""
