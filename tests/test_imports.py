"""Imports that stay light: each scenario runs in a fresh interpreter and reads sys.modules.

``import muflow`` and an in-process fit never import Prefect; predicting from a saved model
needs NumPy and SciPy only (no Dask, distributed, zarr or Prefect).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

HEAVY = ("prefect", "dask", "distributed", "zarr")


def loaded_after(code: str, cwd) -> set:
    """The HEAVY modules that ``code`` leaves in sys.modules of a fresh interpreter."""
    probe = code + textwrap.dedent(f"""
        import json, sys
        print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", probe], cwd=cwd, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


FIT = textwrap.dedent("""
    import numpy as np
    import muflow

    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.where(X[:, 0] > 0, 1, 0)
""")


def test_import_muflow_is_light(tmp_path):
    assert loaded_after("import muflow", tmp_path) == set()


@pytest.mark.parametrize("solver", ["auto", "m3"])
def test_an_in_process_fit_imports_no_prefect(tmp_path, solver):
    loaded = loaded_after(FIT + f"muflow.SVC(solver={solver!r}).fit(X, y)\n", tmp_path)
    assert "prefect" not in loaded


def test_predicting_from_a_saved_model_imports_no_dask_zarr_or_prefect(tmp_path):
    model_dir = tmp_path / "model"
    loaded_after(FIT + f"muflow.save(muflow.SVC().fit(X, y), {str(model_dir)!r})\n", tmp_path)
    loaded = loaded_after(textwrap.dedent(f"""
        import numpy as np
        import muflow

        model = muflow.load({str(model_dir)!r})
        assert model.predict(np.zeros((4, 3))).shape == (4,)
        assert model.decision_function(np.zeros((4, 3))).shape == (4,)
    """), tmp_path)
    assert loaded == set()
