"""WHAT this machine has measured: one line per attempt in `$GRPO_TRAIN_CACHE/ledger.jsonl`, read back by the
planner so that a shape measured here is judged by its measured peak instead of the estimate alone.

A successful attempt (or probe) is a measurement of its shape's peak. An out-of-memory failure is a lower
bound: the shape needed at least what it held plus what it asked for. Entries match a candidate when the
machine (device, card name, memory to the nearest GiB) and the fingerprint of every profile key that
changes memory are the same. Nothing here imports torch.

The ledger is evidence, weighed (`weigh`), never a verdict stacked up for good:
- an injected OOM (GRPO_INJECT_OOM) is never written; a run with injection writes nothing unless
  GRPO_TRAIN_LEDGER names a ledger for it; a CPU record holding a CUDA OOM's bound (older versions wrote
  injected ones so) is not a measurement;
- the newest measurement of a shape counts; an OOM counts only until a later success of the same shape;
- a record older than MAX_AGE_DAYS no longer counts;
- a line that is not a sound record (cut short, a wrong type, a negative or infinite figure) is skipped with
  one warning.

- `store`   the file, the record's schema, locking, appending, reading, forgetting
- `weigh`   each record's effect on this machine's plans, and the figures a candidate is judged by
- `record`  what one finished attempt adds
"""
