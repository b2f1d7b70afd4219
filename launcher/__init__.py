"""WHAT runs WHERE: read the card, load the profiles, estimate memory, choose, run attempts, read an OOM.

Imports neither torch nor unsloth nor trl, so that planning (`python train.py plan`) is instant on any machine.
One sub-package per question:

- `card/`     which card(s) this machine has: NVML, a card named with --gpu-memory, topology of a run
- `profile/`  what a profile may say: its schema and rules, reading YAML and --set, the model catalogue
- `memory/`   how much memory an attempt needs: the estimate and its parts, what this machine measured
              (the ledger, `calibrate`), vLLM's own start-up figures
- `plan/`     which configuration runs: the choice over the ladder, and how it is shown
- `run/`      how a run is kept alive: supervise, fallback, child processes, attempts, resume, the run
              folder, scale-out launch and the vLLM server
- `oom/`      what an out-of-memory failure says: reading it, where it happened, what to change
"""
