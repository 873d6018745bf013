#!/usr/bin/env bash
# Issue 37's table on a 16-core machine without network: muflow against
# scikit-learn-intelex, a8a at 2, 8 and 16 cores (taskset), the 100,000-row fit, the a8a
# sweep against GridSearchCV and 120,000 rows on Dask workers at 16 (benchmarks/device/cores16.py
# says what each row is). Within 8 minutes (--budget 450 s by default; rows that would not
# fit are printed as skipped).
#
# What to carry to the machine (the device run's `carry`), all ignored by git:
#   benchmarks/device/wheels  the wheels this script installs with
#                             `pip install --no-index --no-deps --ignore-installed
#                             --prefix $PREFIX` (a copy the Python already holds, such as
#                             an older tbb, would otherwise keep its libraries out of
#                             $PREFIX/lib, where daal looks for libtbb.so.12):
#                             scikit-learn-intelex, daal, tbb and tcmlib (for the machine's
#                             Python: cp311 and cp312 are both there, pip takes the one that
#                             fits), plus what muflow needs and the machine lacks (dask,
#                             distributed, partd, locket, tblib, zict, tornado). Fetch them
#                             here with benchmarks/device/fetch_wheels.sh.
#   benchmarks/device/data    a copy of ../shared/data's a8a and a8a.t (that folder does not
#                             travel): mkdir -p benchmarks/device/data &&
#                             cp ../shared/data/a8a* benchmarks/device/data/
#   a venv (optional)         PYTHON=/path/to/venv/bin/python, a Python that holds muflow's
#                             dependencies; default `python3` (the machine's, with NumPy,
#                             SciPy, scikit-learn, numba, joblib, threadpoolctl, psutil,
#                             pandas, matplotlib and rich). The repository itself is on
#                             PYTHONPATH: muflow is imported from the working tree.
#
# Usage:
#   bash benchmarks/device/cores16.sh                          # the whole table
#   bash benchmarks/device/cores16.sh --cores 2 --cases a8a --rows 4000   # a smoke run
# Environment: PYTHON (default python3), PREFIX (default /tmp/muflow-peers), WHEELS.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
PREFIX=${PREFIX:-/tmp/muflow-peers}
WHEELS=${WHEELS:-benchmarks/device/wheels}
command -v taskset >/dev/null || { echo "taskset (util-linux) is needed to pin the cores" >&2; exit 2; }
[ -d "$WHEELS" ] || { echo "no $WHEELS: carry the wheels folder (see this script's header)" >&2; exit 2; }

# one version of each distribution, the one pip finds fits this Python
names=$(ls "$WHEELS"/*.whl | sed 's#.*/##; s/-.*//' | tr '_' '-' | sort -u | tr '\n' ' ')
"$PY" -m pip install --quiet --no-index --no-deps --no-compile --disable-pip-version-check --ignore-installed \
  --prefix "$PREFIX" --find-links "$WHEELS" $names
site=$("$PY" -c "import sysconfig; print(sysconfig.get_path('purelib', vars={'base': '$PREFIX', 'platbase': '$PREFIX'}))")
export PYTHONPATH="$PWD:$site${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1 PREFECT_SERVER_ANALYTICS_ENABLED=false
# every measurement takes the cores taskset gives it, none capped from outside
unset OMP_NUM_THREADS MKL_NUM_THREADS OPENBLAS_NUM_THREADS MUFLOW_NUM_THREADS
"$PY" -c "import muflow, sklearnex, daal4py; print('muflow from', muflow.__file__)"
exec "$PY" benchmarks/device/cores16.py "$@"
