"""WHAT a profile may say and how it is read.

- `keys`         the vocabulary every rule shares: choices, defaults, the refusal type
- `field_types`  the value types of the keys, stricter than pydantic's lax mode
- `fields`       every key: its type, default, range, help line, section and tags
- `cross_keys`   the short cross-key rules, and the order every cross-key rule is reported in
- `rules`        the longer cross-key rules (scale-out, rewards and data that exist, LoRA targets)
- `schema`       the one model of a profile (pydantic): the keys and their rules, the key listings, plain data
                 read into it
- `load`         YAML files read safely, `--set` overrides, a folder of profiles as the ladder
- `help`         the schema as text: `--help` and profiles/schema.json
- `catalog`      which architecture a model name means: the models the profiles use, known offline, else a
                 config.json found in a folder, the Hugging Face cache or the hub
- `architecture` what a model is made of: its shape facts and the sizes the estimator counts from them
- `config_json`  a model's facts read from its config.json, every size checked
"""
