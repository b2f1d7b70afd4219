#!/usr/bin/env bash
# The product call: the commands a user runs, on a GPU machine without network, in one call (docs/gpu.md):
#   bash scripts/gpu-product.sh OUT_DIR
# With the kit's carry (wheels/kit-carry/, laid out by `python3 scripts/fetch_gpu_kit.py`), in this order, each
# phase bounded so that the most important figures come back first (OUT_DIR is rewritten after every phase):
#   1. `train.py plan --json` on the card (NVML)                                  -> plan.json
#   2. `train.py train` of the CPU demo's task with the tiny model, its levers derived for the card, for
#      PRODUCT_ARM_S seconds (--hours): the planner's arm of the comparison, seed 3407     -> train-run.tar.gz
#   3. the same minutes with Unsloth's GRPO notebook settings (`train --profile`)          -> compare-runs.tar.gz
#   4. a real CUDA out-of-memory: a rung of random weights sized by the estimator to 1.25x the card, planned for a
#      card that large (--gpu-memory); the supervisor reads it, falls back in a fresh process; the run is
#      stopped (SIGTERM, as `docker stop`) after its first checkpoint, `train --resume` continues it;
#      `explain-oom` reads the saved error; then `plan` again reads the ledger          -> oom-run.tar.gz
#   5. more seeds of the comparison while the time lasts                                -> compare-runs.tar.gz
# summary.json and summary.md (the figures the closing note needs) and product.log (every command's output) are
# rewritten after each phase; env.txt as the kit writes it. 8 files at most.
# PYTHON: the interpreter (python3). KIT_CARRY: the carry's folder (wheels/kit-carry; `none`: use what is
# installed). PRODUCT_CALL_S: the call's limit (540). PRODUCT_ARM_S: each arm's wall time (90). PRODUCT_SEEDS:
# the comparison's seeds (3407 2; 3407 first, the planner's arm of it is phase 2). PRODUCT_PHASES: the phases
# to run (plan train notebook oom seeds). PRODUCT_CPU=1: the rehearsal on a machine without a card (CUDA
# hidden, the CPU demo's rung, an out-of-memory injected with GRPO_INJECT_OOM: no CUDA allocator to exhaust).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
repo="$(pwd)"
started=$SECONDS
out="${1:-}"
if [ -z "$out" ] || [ "${out#-}" != "$out" ] || [ $# -gt 1 ]; then
    echo "usage: bash scripts/gpu-product.sh OUT_DIR" >&2
    exit 2
fi
if ! mkdir -p "$out" 2>/dev/null || [ ! -w "$out" ]; then
    echo "error: OUT_DIR $out cannot be written (fix: give a folder this user can write)" >&2
    exit 2
fi
out="$(cd "$out" && pwd)"
python="${PYTHON:-python3}"
carry="${KIT_CARRY:-wheels/kit-carry}"
call_s="${PRODUCT_CALL_S:-540}"
arm_s="${PRODUCT_ARM_S:-90}"
seeds="${PRODUCT_SEEDS:-3407 2}"
phases=" ${PRODUCT_PHASES:-plan train notebook oom seeds} "
cpu="${PRODUCT_CPU:-}"
for pair in "PRODUCT_CALL_S=$call_s" "PRODUCT_ARM_S=$arm_s"; do
    case "${pair#*=}" in
        '' | *[!0-9]* | 0*[0-9]* | ???????*)
            echo "error: $pair is not a whole number of seconds under 1000000 (fix: e.g. ${pair%%=*}=540)" >&2
            exit 2
            ;;
    esac
done
log="$out/product.log"
: >"$log"
say() { echo "$*" | tee -a "$log" >&2; }
left() { echo $((call_s - (SECONDS - started))); }
# each phase's own limit, in seconds of a 540 s call (scaled to PRODUCT_CALL_S)
cap() { echo $(($1 * call_s / 540)); }

work="$(mktemp -d "${TMPDIR:-/tmp}/grpo-product.XXXXXX")" || exit 2
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/runs" "$work/logs"
: >"$work/walls.txt"
: >"$work/left-out.txt"
echo "arm_s $arm_s" >>"$work/walls.txt"

if [ "$carry" != none ]; then
    if [ ! -f "$carry/requirements.txt" ]; then
        say "error: $carry/requirements.txt is not here (fix: run \`python3 scripts/fetch_gpu_kit.py\` on a machine" \
            "with network, and carry $carry with the repository)"
        exit 2
    fi
    if ! "$python" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
            --target "$work/site" "$carry"/*.whl >>"$log" 2>&1; then
        say "error: the wheels of $carry do not install into $("$python" -V 2>&1) (fix: lay them out for this" \
            "Python: \`python3 scripts/fetch_gpu_kit.py --python-version X.Y --other-python\`)"
        exit 2
    fi
    export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
    say "installed $(ls "$carry"/*.whl | wc -l) wheel(s) of $carry in $((SECONDS - started)) s"
else
    say "KIT_CARRY=none: the libraries installed for $python"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
# the call's own ledger: the second plan reads what this call measured, and it comes back with the runs
export GRPO_TRAIN_LEDGER="$work/ledger.jsonl"
unset GRPO_INJECT_OOM GRPO_RANDOM_WEIGHTS GRPO_TRAIN_NO_UNSLOTH GRPO_ATTEMPT_ESTIMATE_GIB
prepare_flags=()
if [ -n "$cpu" ]; then
    export CUDA_VISIBLE_DEVICES=""
    prepare_flags=(--cpu)
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "python: $("$python" -V 2>&1) at $(command -v "$python")"
    "$python" -c 'import torch; print("torch:", torch.__version__, "CUDA", torch.version.cuda, "available",
torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1 | tail -1
    if command -v nvidia-smi >/dev/null; then
        echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
    else
        echo "nvidia-smi: not on this machine"
    fi
    echo "carry: $carry"
    echo "rehearsal: ${cpu:-no}"
    echo "pip list:"
    "$python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null
} >"$out/env.txt"

# `step NAME BOUND_S COMMAND...`: the command with its output in product.log and logs/NAME.log, stopped with
# SIGTERM (as `docker stop`: a checkpoint, the adapter and the report) at BOUND_S, killed 30 s later. With
# STDOUT=FILE set, its standard output (a JSON document) goes to FILE instead, and only its errors to the logs.
step() {
    local name="$1" bound="$2" begun=$SECONDS code
    shift 2
    say "## $name (at most $bound s, $(left) s of the call left): ${*#"$python" }"
    if [ -n "${STDOUT:-}" ]; then
        timeout -s TERM -k 30 "$bound" "$@" >"$STDOUT" 2>"$work/logs/$name.log"
    else
        timeout -s TERM -k 30 "$bound" "$@" >"$work/logs/$name.log" 2>&1
    fi
    code=$?
    cat "$work/logs/$name.log" >>"$log"
    echo "$name $((SECONDS - begun))" >>"$work/walls.txt"
    say "## $name: exit $code in $((SECONDS - begun)) s"
    return "$code"
}
# `room NAME NEED_S`: whether NEED_S seconds are left (and the final summary's 10); else noted as left out
room() {
    if [ "$(left)" -ge $(($2 + 10)) ]; then
        return 0
    fi
    echo "$1: left out, $(left) s of the call left and it needs $2 s (fix: a second call with PRODUCT_PHASES)" \
        >>"$work/left-out.txt"
    say "$1: left out ($(left) s left, needs $2 s)"
    return 1
}
wanted() { [[ "$phases" == *" $1 "* ]]; }
# `pack NAME PATTERN...`: OUT/NAME.tar.gz of what the patterns name under WORK (expanded there), without weights,
# optimizer states and models (the 8 files that come back hold at most 16 MiB each)
pack() {
    local name="$1"
    shift
    (
        cd "$work" || exit 1
        shopt -s nullglob
        # shellcheck disable=SC2068 # the patterns expand here, under WORK
        tar -czf "$name.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.pth' --exclude='*.bin' \
            --exclude='*.gguf' $@
    ) 2>>"$log" && mv -f "$work/$name.tar.gz" "$out/$name.tar.gz"
}
summarize() {
    echo "call_s $((SECONDS - started))" >>"$work/walls.txt"
    "$python" scripts/gpu_product.py summarize "$out" "$work" >>"$log" 2>&1 || say "warning: the summary failed"
}
hours() { "$python" -c "import sys; print(f'{int(sys.argv[1]) / 3600:.6f}')" "$1"; }
arm_hours="$(hours "$arm_s")"
arm_bound=$((arm_s + $(cap 50)))

if ! "$python" scripts/gpu_product.py prepare "$work" "${prepare_flags[@]}" >"$work/prepare.out" 2>>"$log"; then
    say "error: the profiles of the call could not be written (see $log)"
    exit 1
fi
ladder="$work/ladder"
oom_ladder="$work/oom-ladder"
what_if="$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["oom_what_if_gib"] or "")' "$work/prepare.json")"
inject="$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["inject"] or "")' "$work/prepare.json")"
say "profiles written: $(tr -d '\n' <"$work/prepare.out" | tr -s ' ' | cut -c1-600)"

# the tiny model of every seed, built before the arms (neither pays for it inside its minutes)
step models "$(cap 60)" "$python" scripts/gpu_product.py models $seeds

# 1. the plan on this machine, as a user asks for it; and for the tiny model's rung
if wanted plan; then
    STDOUT="$out/plan.json" step plan "$(cap 20)" "$python" train.py plan --json
fi
STDOUT="$work/plan-tiny.json" step plan-tiny "$(cap 20)" "$python" train.py plan --profiles-dir "$ladder" \
    --hours "$arm_hours" --json
"$python" scripts/gpu_product.py notebook "$work" "$work/plan-tiny.json" "${prepare_flags[@]}" >>"$log" 2>&1
summarize

# 2. the product run: the planner's choice for the tiny model, the planner's arm at the first seed
first_seed="${seeds%% *}"
echo "first_seed $first_seed" >>"$work/walls.txt"
if wanted train && room train "$arm_bound"; then
    step "planner-$first_seed" "$arm_bound" "$python" train.py train --profiles-dir "$ladder" \
        --output-dir "$work/runs/planner-$first_seed" --hours "$arm_hours" --set "seed=$first_seed"
    pack train-run ladder prepare.json plan-tiny.json "runs/planner-$first_seed" logs
    summarize
fi

# 3. the notebook's settings for the same minutes
if wanted notebook && room notebook "$arm_bound"; then
    step "notebook-$first_seed" "$arm_bound" "$python" train.py train --profile "$work/notebook.yaml" \
        --output-dir "$work/runs/notebook-$first_seed" --hours "$arm_hours" --set "seed=$first_seed"
    pack compare-runs notebook.yaml 'runs/notebook-*' logs
    summarize
fi

# 4. a real out-of-memory (injected on the CPU), the fallback in a fresh process, a stop, the resume
if wanted oom && room oom "$(cap 200)"; then
    oom_dir="$work/runs/oom"
    gpu_args=()
    oom_env=()
    if [ -n "$what_if" ]; then
        gpu_args=(--gpu-memory "$what_if")
        oom_env=(GRPO_RANDOM_WEIGHTS=1)
    fi
    if [ -n "$inject" ]; then
        oom_env+=(GRPO_INJECT_OOM="$inject")
    fi
    say "## oom (at most $(cap 140) s): env ${oom_env[*]} train.py train --profiles-dir $oom_ladder ${gpu_args[*]}"
    begun=$SECONDS
    env "${oom_env[@]}" timeout -s TERM -k 30 "$(cap 140)" "$python" train.py train --profiles-dir "$oom_ladder" \
        --output-dir "$oom_dir" "${gpu_args[@]}" >"$work/logs/oom.log" 2>&1 &
    pid=$!
    # the user's stop once the fallback has saved a checkpoint: SIGTERM, as `docker stop` sends it
    while kill -0 "$pid" 2>/dev/null; do
        if compgen -G "$oom_dir/run-*/attempt-*/checkpoint-*/checkpoint-complete.json" >/dev/null; then
            sleep 1
            say "oom: a checkpoint after the fallback; stopping the run (SIGTERM) to resume it"
            kill -TERM "$pid" 2>/dev/null
            break
        fi
        sleep 0.5
    done
    wait "$pid"
    code=$?
    cat "$work/logs/oom.log" >>"$log"
    echo "oom $((SECONDS - begun))" >>"$work/walls.txt"
    say "## oom: exit $code in $((SECONDS - begun)) s"
    # the error as the first out-of-memory attempt saved it
    "$python" - "$oom_dir" >"$work/oom-error.txt" 2>>"$log" <<'EOF'
import json, sys
from pathlib import Path
for attempt in sorted(Path(sys.argv[1]).glob("run-*/attempt-*/outcome.json")):
    outcome = json.loads(attempt.read_text(encoding="utf-8"))
    if outcome.get("status") == "oom":
        print(outcome.get("traceback") or "")
        print(outcome.get("error_text") or outcome.get("error") or "")
        break
EOF
    if [ -s "$work/oom-error.txt" ]; then
        step explain-oom "$(cap 20)" "$python" train.py explain-oom "$work/oom-error.txt"
        cp "$work/logs/explain-oom.log" "$work/explain-oom.txt"
    fi
    last="$(ls -d "$oom_dir"/run-*/attempt-*/checkpoint-* 2>/dev/null | sed 's/.*checkpoint-//' | sort -n | tail -1)"
    if [ -n "$last" ] && room resume "$(cap 60)"; then
        step resume "$(cap 60)" env "${oom_env[@]}" "$python" train.py train --resume --profiles-dir "$oom_ladder" \
            --output-dir "$oom_dir" "${gpu_args[@]}" --set "max_steps=$((last + 2))"
    elif [ -z "$last" ]; then
        echo "resume: left out, the run saved no checkpoint after its fallback" >>"$work/left-out.txt"
    fi
    STDOUT="$work/plan-after.json" step plan-after "$(cap 20)" "$python" train.py plan --profiles-dir "$ladder" \
        --hours "$arm_hours" --json
    pack oom-run oom-ladder runs/oom oom-error.txt explain-oom.txt plan-after.json ledger.jsonl logs
    summarize
fi

# 5. the comparison's other seeds, a pair at a time, while the time lasts
if wanted seeds; then
    for seed in $seeds; do
        [ "$seed" = "$first_seed" ] && continue
        room "seed $seed" $((2 * arm_bound)) || break
        step "planner-$seed" "$arm_bound" "$python" train.py train --profiles-dir "$ladder" \
            --output-dir "$work/runs/planner-$seed" --hours "$arm_hours" --set "seed=$seed"
        step "notebook-$seed" "$arm_bound" "$python" train.py train --profile "$work/notebook.yaml" \
            --output-dir "$work/runs/notebook-$seed" --hours "$arm_hours" --set "seed=$seed"
        pack compare-runs notebook.yaml 'runs/notebook-*' "$(cd "$work" && ls -d runs/planner-* | grep -v "planner-$first_seed$")" logs
        summarize
    done
fi
summarize
say "done in $((SECONDS - started)) s: $(ls "$out" | tr '\n' ' ')"
