"""WHAT a profile may say and how it is read.

- `keys`     the vocabulary every rule shares: choices, defaults, the refusal type
- `schema`   the one model of a profile (pydantic), its single-key ranges and cross-key validators
- `rules`    the longer cross-key rules (scale-out, rewards and data that exist, LoRA targets)
- `load`     YAML files read safely, `--set` overrides, a folder of profiles as the ladder
- `help`     the schema as text: `--help` and profiles/schema.json
- `catalog`  the shape facts of the models the profiles use, known offline
"""
