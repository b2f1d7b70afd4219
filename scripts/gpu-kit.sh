#!/usr/bin/env bash
# The measurement kit in one call of a GPU machine without network (docs/gpu.md):
#   bash scripts/gpu-kit.sh OUT_DIR [gpu-check options]
# Installs wheels/kit-carry/ (laid out by `python3 scripts/fetch_gpu_kit.py` anywhere with network) into a
# folder of its own, sets the offline variables, writes OUT_DIR/env.txt (Python, torch, CUDA, driver, pip list),
# then runs `train.py gpu-check --out-dir OUT_DIR` with what is left of KIT_CALL_S (default 570 s), its output
# also in OUT_DIR/kit.log. The table (OUT_DIR/<card>.md and .json) is rewritten after every probe, so a call
# cut off still returns what ran. PYTHON names the interpreter (default python3); KIT_CARRY the carry's folder.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
started=$SECONDS
out="${1:-}"
if [ -z "$out" ] || [ "${out#-}" != "$out" ]; then
    echo "usage: bash scripts/gpu-kit.sh OUT_DIR [gpu-check options]" >&2
    exit 2
fi
shift
if ! mkdir -p "$out" 2>/dev/null || [ ! -w "$out" ]; then
    echo "error: OUT_DIR $out cannot be written (fix: give a folder this user can write)" >&2
    exit 2
fi
out="$(cd "$out" && pwd)"
python="${PYTHON:-python3}"
carry="${KIT_CARRY:-wheels/kit-carry}"
call_s="${KIT_CALL_S:-570}"
case "$call_s" in
    '' | *[!0-9]* | 0*[0-9]* | ???????*)
        echo "error: KIT_CALL_S=$call_s is not a whole number of seconds under 1000000 (fix: the call's limit, e.g. KIT_CALL_S=570)" >&2
        exit 2
        ;;
esac
log="$out/kit.log"
: >"$log"
say() { echo "$*" | tee -a "$log" >&2; }
if [ ! -f "$carry/requirements.txt" ]; then
    say "error: $carry/requirements.txt is not here (fix: run \`python3 scripts/fetch_gpu_kit.py\` on a machine" \
        "with network, and carry $carry with the repository)"
    exit 2
fi
site="$(mktemp -d "${TMPDIR:-/tmp}/grpo-kit-site.XXXXXX")" || exit 2
trap 'rm -rf "$site"' EXIT
if ! "$python" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check \
        --target "$site" "$carry"/*.whl >>"$log" 2>&1; then
    say "error: the wheels of $carry do not install into $("$python" -V 2>&1) (fix: lay them out for this" \
        "Python: \`python3 scripts/fetch_gpu_kit.py --python-version X.Y --other-python\`)"
    exit 2
fi
say "installed $(ls "$carry"/*.whl | wc -l) wheel(s) of $carry into $site in $((SECONDS - started)) s"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
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
    echo "carry: $carry ($(du -sk "$carry" | cut -f1) KiB)"
    echo "pip list:"
    "$python" -m pip list --format=freeze --disable-pip-version-check 2>/dev/null
} >"$out/env.txt"
budget=$((call_s - (SECONDS - started)))
# measure/kit.py's MIN_BUDGET_S: in less, not one probe could run after the import check
if [ "$budget" -lt 120 ]; then
    say "error: $budget s left of KIT_CALL_S=$call_s after the install (fix: a longer call)"
    exit 2
fi
say "gpu-check: $budget s of the call's $call_s s left for the kit"
"$python" train.py gpu-check --out-dir "$out" --budget-s "$budget" "$@" 2>&1 | tee -a "$log"
exit "${PIPESTATUS[0]}"
