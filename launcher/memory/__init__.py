"""HOW MUCH memory an attempt needs.

- `estimate`   the total and its named components for a profile on a card
- `parts`      the bytes of each piece of one GRPO step (Unsloth's path), the estimator's formulas
- `trl_step`   the same for a plain TRL + PEFT step
- `ledger`     what this machine measured per shape, weighed for the planner (`ledger`, `--forget`)
- `vllm_log`   vLLM's own start-up memory breakdown, read from an attempt's log
"""
