"""HOW one attempt trains, in the attempt's own process: load the model (Unsloth with vLLM on a GPU, its CPU
fallback or transformers + PEFT without one), build TRL's GRPOTrainer from the profile, probe the worst case,
train with telemetry and checkpoints, evaluate, and write the outcome and the report.

The only package that imports torch, transformers, unsloth or trl; it imports Unsloth before TRL
(trainer.backends states the order).
"""
