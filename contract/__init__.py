"""WHAT both sides of the process boundary agree on: the supervisor (launcher) and one attempt (trainer).

- `attempt`     statuses, file names, environment variables, the outcome record, checkpoints, the
                attempt's environment and GRPO_INJECT_OOM's grammar
- `errors`      the error types the command line turns into exit statuses, and those statuses
- `safe_write`  whole-file replacement, whole-line appends, and the line that says a disk is full

Imports nothing of the project: tasks, rewards, launcher and trainer all stand on it.
"""
