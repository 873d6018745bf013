#!/usr/bin/env bash
# The GPU check of issue 41 in one run, within 8 minutes on an H100 machine (16 cores, no
# network, CUDA 13 and CuPy 14 installed):
#   1. a Python that imports muflow's dependencies: $PYTHON (default python3) when it does,
#      else a venv made from it with --system-site-packages, the missing packages installed
#      with --no-index from the wheels in $MUFLOW_WHEELS (default benchmarks/device/wheels,
#      carried there); muflow itself from this checkout, on PYTHONPATH (nothing to build);
#   2. the device tests (tests/device): the GPU ones skip cleanly where no GPU is usable;
#   3. benchmarks/device/bench_gpu.py: a8a, the 100,000 rows and the a8a sweep on the GPU
#      against the CPU path of the same machine, with accuracy and objective.
# Output goes to the terminal and to $OUT/gpu_check.log (default benchmarks/out).
#
# usage: bash benchmarks/device/gpu.sh [--cpu-only] [bench_gpu.py options, e.g. --rows 5000]
#   --cpu-only  no GPU needed: the tests and the benchmark's CPU side (this script's check
#               on a machine without a GPU)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CPU_ONLY=0
if [[ "${1:-}" == "--cpu-only" ]]; then
    CPU_ONLY=1
    shift
fi
PY=${PYTHON:-python3}
WHEELS=${MUFLOW_WHEELS:-$ROOT/benchmarks/device/wheels}
OUT_DIR=${OUT:-$ROOT/benchmarks/out}
LOG="$OUT_DIR/gpu_check.log"
mkdir -p "$OUT_DIR"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PREFECT_SERVER_ANALYTICS_ENABLED=false
export PYTHONUNBUFFERED=1

# module:package pairs the device tests and the benchmark import
NEEDS="numpy:numpy scipy:scipy sklearn:scikit-learn numba:numba threadpoolctl:threadpoolctl
matplotlib:matplotlib pandas:pandas pyarrow:pyarrow rich:rich pytest:pytest"

missing() {  # the packages of NEEDS that "$1" cannot import
    local pair
    for pair in $NEEDS; do
        "$1" -c "import ${pair%%:*}" 2>/dev/null || printf '%s ' "${pair##*:}"
    done
}

LACK=$(missing "$PY")
if [[ -n "$LACK" ]]; then
    VENV=${MUFLOW_GPU_VENV:-${TMPDIR:-/tmp}/muflow-gpu-venv}
    echo "== $PY lacks: $LACK; a venv over it in $VENV, wheels from $WHEELS"
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv --system-site-packages "$VENV"
    PY="$VENV/bin/python"
    # shellcheck disable=SC2086  # one word per package
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" $LACK || true
    LACK=$(missing "$PY")
    if [[ -n "$LACK" ]]; then
        echo "still missing: $LACK; on a machine with the package index, for the GPU machine's" \
             "Python (here $("$PY" -c 'import sys; print(sys.version.split()[0])')):" \
             "pip download --only-binary=:all: --python-version X.Y --platform manylinux2014_x86_64" \
             "-d benchmarks/device/wheels $LACK, and carry that folder" >&2
        exit 2
    fi
fi
"$PY" -c "import muflow, muflow.selection, muflow.device.home" \
    || { echo "muflow does not import from $ROOT with $PY" >&2; exit 2; }

STATUS="$OUT_DIR/.gpu_check_status"
{
    echo "== $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')  $("$PY" --version)"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    "$PY" -c "from muflow.device.arrays import _cupy_or_reason as c; x, why = c(); print('CuPy', x.__version__ if x else why)"
    tests=0 bench=0

    echo "== the device tests"
    timeout 180 "$PY" -m pytest -q -p no:cacheprovider -rs tests/device || tests=$?

    echo "== GPU against CPU: a8a, 100,000 rows, the a8a sweep"
    if [[ $CPU_ONLY == 1 ]]; then
        timeout 420 "$PY" benchmarks/device/bench_gpu.py --cpu-only --json "$OUT_DIR/gpu_check.json" "$@" || bench=$?
    else
        timeout 280 "$PY" benchmarks/device/bench_gpu.py --json "$OUT_DIR/gpu_check.json" "$@" || bench=$?
    fi
    echo "== exit status: tests $tests, benchmark $bench (124: timed out)"
    echo "$tests $bench" > "$STATUS"
} 2>&1 | tee "$LOG"
read -r tests bench < "$STATUS"
rm -f "$STATUS"
[[ $tests == 0 && $bench == 0 ]]
