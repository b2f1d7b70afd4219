"""Models built offline, so that CPU runs, tests and card measurements need no download.

- `build`          the `tiny` CPU model: a byte-level BPE tokenizer trained on the task's own text and a small
                   Llama-shaped model, built once (seeded) and cached
- `warm_start`     its short supervised pass on worked solutions, stopped on a measured criterion
- `random_weights` any catalogue architecture built from its facts with random weights (memory does not
                   depend on the weights' values): `calibrate --random-weights`, `gpu-check` (measure/)

The trainer reaches this package only through trainer.model_source, which gives a path to load for any
profile's `model` (a hub id, a local folder, or `tiny`), so the main path reads the same for all of them.
"""
