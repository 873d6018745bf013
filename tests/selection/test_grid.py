"""muflow.selection.grid: the one grid schema (Python, the run configuration's [grid] table
and `sweep --config`), its validation and the sweep options' checks."""

from __future__ import annotations

import pytest

from muflow.config import from_dict, load_grid_toml
from muflow.exceptions import MuflowInputError
from muflow.selection import SweepGrid, check_options


def test_grid_expands_kernel_settings_and_C_in_ascending_order():
    grid = SweepGrid([{"kernel": "rbf", "gamma": [0.1, 1]},
                      {"kernel": "poly", "degree": [2, 3], "coef0": 1.0}], C=[10, 0.1])
    settings = grid.validate().kernel_settings()
    assert settings == [{"kernel": "rbf", "gamma": 0.1}, {"kernel": "rbf", "gamma": 1.0},
                        {"kernel": "poly", "gamma": "scale", "degree": 2, "coef0": 1.0},
                        {"kernel": "poly", "gamma": "scale", "degree": 3, "coef0": 1.0}]
    configs = grid.configurations()
    assert len(configs) == 8
    assert [c["C"] for c in configs[:2]] == [0.1, 10.0]


@pytest.mark.parametrize("grid, message", [
    (SweepGrid([], C=[1.0]), "kernels must be a non-empty list"),
    (SweepGrid([{"kernel": "rbf"}], C=[]), "C must be a non-empty list"),
    (SweepGrid([{"kernel": "rbf"}], C=[1.0, 0.0]), r"C\[1\] must be a positive number, got 0.0"),
    (SweepGrid([{"kernel": "rbf"}], C=[-1.0]), r"C\[0\] must be a positive number"),
    (SweepGrid([{"kernel": "rbf"}], C=[float("nan")]), r"C\[0\] must be a positive number"),
    (SweepGrid([{"kernel": "rbf"}], C=[float("inf")]), r"C\[0\] must be a positive number"),
    (SweepGrid([{"kernel": "rbf", "degree": [2]}], C=[1.0]), "no parameter 'degree'"),
    (SweepGrid([{"kernel": "linear", "gamma": [1.0]}], C=[1.0]), "takes no parameters"),
    (SweepGrid([{"kernel": "rbf", "gamma": []}], C=[1.0]), r"kernels\[0\].gamma is an empty list"),
    (SweepGrid([{"kernel": "rbf", "gamma": [-1.0]}], C=[1.0]), "positive number"),
    (SweepGrid([{"kernel": "rbf", "gamma": ["huge"]}], C=[1.0]), "'scale' or 'auto', got 'huge'"),
    (SweepGrid([{"kernel": "poly", "degree": [2.5]}], C=[1.0]), r"degree\[0\] must be an integer >= 1"),
    (SweepGrid([{"kernel": "tanh"}], C=[1.0]), "kernel must be one of 'linear'"),
])
def test_bad_grid_names_the_entry_and_what_is_allowed(grid, message):
    with pytest.raises(MuflowInputError, match=message):
        grid.validate()


@pytest.mark.parametrize("options, message", [
    ({"folds": 1}, "folds must be an integer >= 2"),
    ({"tol": 0}, "tol must be a positive number"),
    ({"max_iter": 0}, "max_iter must be an integer >= 1"),
    ({"n_jobs": True}, "n_jobs must be a positive integer"),
    ({"n_jobs": 0}, r"n_jobs must be a positive integer .*-1 or None"),
    ({"halving": 1}, "halving must be an integer >= 2"),
    ({"path": "zigzag"}, "path must be one of 'auto'"),
    ({"intercept": "bias"}, "intercept must be one of 'exact'"),
    ({"halving": 2, "path": "continuation"}, "batched path"),
    ({"solver": 3}, "solver must be a solver name"),
])
def test_bad_options_are_refused(options, message):
    with pytest.raises(MuflowInputError, match=message):
        check_options(options)


def test_the_run_configuration_checks_the_grid_with_the_same_rules():
    """One validator: [grid] in a run configuration names the key as written there."""
    bad = {"grid": {"C": [1.0], "kernels": [{"kernel": "rbf", "degree": [2]}]}}
    with pytest.raises(MuflowInputError, match=r"run.toml: grid.kernels\[0\].degree: kernel 'rbf' "
                                               r"has no parameter 'degree'"):
        from_dict(bad, source="run.toml")
    cfg = from_dict({"grid": {"C": 1, "kernels": [{"kernel": "rbf", "gamma": 0.5}]}})
    assert cfg.grid == SweepGrid(kernels=[{"kernel": "rbf", "gamma": [0.5]}], C=[1.0])
    assert cfg.grid.kernel_settings() == SweepGrid([{"kernel": "rbf", "gamma": 0.5}], C=1).kernel_settings()


def test_grid_from_a_run_configuration_file(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[grid]\nC = [0.1, 1]\n\n'
                    '[[grid.kernels]]\nkernel = "rbf"\ngamma = [0.5]\n\n'
                    '[[grid.kernels]]\nkernel = "poly"\ndegree = [2]\ncoef0 = [1.0]\n\n'
                    '[sweep]\nfolds = 3\nsolver = "smo"\non_cluster = false\n\n'
                    '[gram]\ncache_dir = "cache"\n\n[data]\npath = "elsewhere.csv"\n')
    grid, options = load_grid_toml(path)
    # only what the file sets: the rest takes run_sweep's defaults
    assert options == {"folds": 3, "solver": "smo", "cache_dir": "cache"}
    assert len(grid.configurations()) == 4
    path.write_text('[grid]\nC = [1]\nkernels = [{ kernel = "rbf" }]\n[sweep]\nfold = 3\n')
    with pytest.raises(MuflowInputError, match="unknown config key 'sweep.fold'"):
        load_grid_toml(path)
    path.write_text('[grid]\nC = [1]\n[[grid.kernels]]\nkernel = "rbf"\ncoef0 = [1]\n')
    with pytest.raises(MuflowInputError, match="no parameter 'coef0'"):
        load_grid_toml(path)


def test_the_old_sweep_table_grid_is_refused_with_the_new_place(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('[sweep]\nC = [0.1, 1]\n[[sweep.kernels]]\nkernel = "rbf"\n')
    with pytest.raises(MuflowInputError, match=r"no \[grid\] table"):
        load_grid_toml(path)
    path.write_text('[grid]\nC = [1]\n[sweep]\nC = [0.1, 1]\n')
    with pytest.raises(MuflowInputError, match=r"unknown config key 'sweep.C'.*\[grid\] with C"):
        load_grid_toml(path)


@pytest.mark.parametrize("grid, message", [
    (SweepGrid([{"kernel": "rbf", "gamma": [0.01, 0.01]}], C=[1.0]),
     r"kernels\[0\].gamma lists 0.01 more than once; give each once"),
    (SweepGrid([{"kernel": "rbf"}], C=[1, 1.0, 10]), "C lists 1.0 more than once"),
    (SweepGrid([{"kernel": "rbf", "gamma": [0.1]}, {"kernel": "rbf", "gamma": 0.1}], C=[1.0]),
     r"kernels lists the setting rbf\(gamma=0.1\) more than once"),
])
def test_a_value_listed_twice_is_refused(grid, message):
    """Duplicates were solved twice and written as two rows of results.csv (the Gram built
    twice)."""
    with pytest.raises(MuflowInputError, match=message):
        grid.validate()
