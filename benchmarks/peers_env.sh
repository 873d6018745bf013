#!/usr/bin/env bash
# The benchmarks' own environment: muflow plus the peers it is measured against, which are
# not muflow's dependencies (scikit-learn-intelex: oneDAL's SVC, the fastest CPU SVC).
#
#   bash benchmarks/peers_env.sh            # creates benchmarks/.venv-peers once
#   . benchmarks/.venv-peers/bin/activate
#   python benchmarks/bench_single_fit.py
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x benchmarks/.venv-peers/bin/python ]; then
  python3 -m venv benchmarks/.venv-peers
fi
. benchmarks/.venv-peers/bin/activate
pip install --quiet -e . scikit-learn-intelex psutil
python -c "from importlib.metadata import version as v; print('scikit-learn-intelex', v('scikit-learn-intelex'), '| daal', v('daal'), '| scikit-learn', v('scikit-learn'))"
