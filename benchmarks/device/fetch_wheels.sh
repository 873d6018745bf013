#!/usr/bin/env bash
# Fetch, here (with a package index), the wheels benchmarks/device/cores16.sh installs on a
# machine without network: scikit-learn-intelex, daal, tbb and tcmlib for CPython 3.11 and
# 3.12 on manylinux x86-64, and the Dask packages muflow needs that such a machine may lack.
# They land in benchmarks/device/wheels (ignored by git: carry it, never commit it).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
platforms="--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
for version in 3.11 3.12; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
    --python-version "$version" $platforms -d wheels scikit-learn-intelex daal tbb tcmlib
done
dask_version=$("$PY" -c "from importlib.metadata import version; print(version('distributed'))" 2>/dev/null || true)
pin=${dask_version:+==$dask_version}
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --implementation cp \
  --python-version 3.12 $platforms -d wheels "dask$pin" "distributed$pin" partd locket tblib zict tornado
ls -la wheels
