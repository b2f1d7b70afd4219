"""HOW a model's answers are produced and scored, for everyone who asks a model questions: the attempt's
evaluation before and after training, `sample`, and the tiny model's warm start. Below both the trainer and the
tiny model, so that neither imports the other.

- `generate`  greedy completions through vLLM (the LoRA as a request) or transformers' `generate`
- `score`     judging completions with a reward as TRL calls it, accuracy and the well-formed share
"""
