"""WHAT a profile may say and how it is read.

- `keys`     the vocabulary every rule shares: choices, defaults, the refusal type
- `schema`   the one model of a profile (pydantic): its keys, the rules that tie them, the key listings,
             plain data read into it
- `fields`   every key: its type, default, range, help line, section and tags
- `field_types` the value types of the keys, stricter than pydantic's lax mode
- `cross_keys` the short cross-key rules, and the order every cross-key rule is reported in
- `rules`    the longer cross-key rules (scale-out, rewards and data that exist, LoRA targets)
- `load`     YAML files read safely, `--set` overrides, a folder of profiles as the ladder
- `help`     the schema as text: `--help` and profiles/schema.json
- `catalog`  the shape facts of the models the profiles use, known offline
"""
