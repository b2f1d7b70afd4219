#!/usr/bin/env bash
# One call of the measurement kit on a GPU machine without network (docs/gpu.md). Two calls, on the same
# machine, one after the other:
#   bash scripts/gpu-kit.sh 1     install wheels/kit-carry-1 by name, then measure within the call
#   bash scripts/gpu-kit.sh 2     install wheels/kit-carry-2 beside it, then continue the same report
# Both install into wheels/kit-site (git-ignored), which the second call finds where the first left it.
# Options after the call number go to benchmarks/gpu_check.py (e.g. --out-dir DIR). KIT_CALL_S (default 600)
# is the call's length: the kit's budget is what is left of it once the install is done, less 30 s. PYTHON
# names the interpreter (default python3). The carries come from `python3 scripts/fetch_gpu_kit.py`, run
# anywhere with network.
set -euo pipefail
cd "$(dirname "$0")/.."
call="${1:-}"
case "$call" in
    1|2) shift ;;
    *) echo "usage: bash scripts/gpu-kit.sh 1|2 [benchmarks/gpu_check.py options]" >&2; exit 2 ;;
esac
python="${PYTHON:-python3}"
carry="wheels/kit-carry-$call"
site="wheels/kit-site"
started=$SECONDS
if [ ! -f "$carry/requirements.txt" ]; then
    echo "error: $carry/requirements.txt is not here (fix: run \`python3 scripts/fetch_gpu_kit.py\` on a machine" \
         "with network and bring $carry with the repository)" >&2
    exit 2
fi
if ! "$python" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check --upgrade \
        --target "$site" --find-links "$carry" -r "$carry/requirements.txt"; then
    echo "error: the wheels of $carry do not install into $("$python" -V 2>&1) (fix: fetch them for this Python:" \
         "\`python3 scripts/fetch_gpu_kit.py --python-version X.Y\`)" >&2
    exit 2
fi
echo "installed $(grep -c '==' "$carry/requirements.txt") package(s) of $carry into $site in $((SECONDS - started)) s"
export PYTHONPATH="$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"
if ! "$python" -c "import trl, datasets, pydantic" 2>/dev/null; then
    echo "error: TRL, datasets or pydantic does not import: carry 1 is not installed on this machine (fix: run" \
         "\`bash scripts/gpu-kit.sh 1\` here first; the two calls share wheels/kit-site)" >&2
    exit 2
fi
budget=$(( ${KIT_CALL_S:-600} - 30 - (SECONDS - started) ))
exec "$python" benchmarks/gpu_check.py --budget-s "$budget" "$@"
