"""HOW a run is kept alive: every attempt in a fresh child process, an OOM survived by shrinking or
falling back, nothing lost on a stop.

- `supervise`    a run from its folder's lock to its exit status: `supervise`, the entry `train` calls
- `request`      what `train` asks of a run: its folder, the run it continues, what the user changed
- `supervisor`   the loop over attempts: each one run, recorded, and what runs next decided
- `preflight`    what must hold before the first attempt: the machines' run name, the server node, the caches
- `environment`  an attempt's environment, the same on every machine
- `calibrate`    `calibrate`: the ladder's worst-case probes here, each in a child attempt, into the ledger
- `fallback`     what to run after a failed attempt (pure policy)
- `child`        one attempt's process: command line, process group, output teed to its log
- `attempts`     what an attempt ended as, and its line in attempts.jsonl
- `resume`       `--resume`: the run's last attempt taken up again
- `folder`       the output and run folders, the run's lock
- `inputs`       what a run needs beyond valid profiles, checked before its folder exists
- `narrate`      what the terminal is told
- `distributed`  accelerate / DeepSpeed launch of a multi-GPU attempt
- `vllm_server`  the vLLM server of server mode
"""
