"""muflow.config: the run configuration, its defaults and its messages."""

from __future__ import annotations

import re

import pytest

from muflow.config import DEFAULT_TOML, default_config, from_dict, load_config, resolve
from muflow.exceptions import MuflowInputError


def test_the_default_is_the_embedded_toml_and_round_trips():
    import tomllib

    cfg = default_config()
    assert cfg == from_dict(tomllib.loads(DEFAULT_TOML)) == from_dict(cfg.to_dict())
    assert cfg.data.bundled == "breast_cancer" and cfg.cluster.scheduler == ""
    assert {k["kernel"] for k in cfg.grid.kernels} == {"rbf", "poly"}


def test_keys_left_out_take_the_default():
    cfg = from_dict({"sweep": {"folds": 5}})
    assert cfg.sweep.folds == 5 and cfg.grid == default_config().grid


@pytest.mark.parametrize("d, key, allowed", [
    ({"sweep": {"folds": 1}}, "sweep.folds", "an integer >= 2"),
    ({"sweep": {"folds": True}}, "sweep.folds", "an integer >= 2"),
    ({"sweep": {"path": "zigzag"}}, "sweep.path", "one of 'auto', 'batched'"),
    ({"data": {"test_size": 1.0}}, "data.test_size", "a number > 0 and < 1"),
    ({"grid": {"C": []}}, "grid.C", "a non-empty list"),
    ({"grid": {"C": [0.0]}}, "grid.C[0]", "a positive number"),
    ({"grid": {"kernels": [{"kernel": "cosine"}]}}, "grid.kernels[0].kernel", "'rbf'"),
    ({"grid": {"kernels": [{"kernel": "rbf", "gamma": ["huge"]}]}}, "grid.kernels[0].gamma[0]", "positive"),
    ({"cluster": {"scheduler": "host:8786"}}, "cluster.scheduler", "tcp://host:8786"),
    ({"sweep": {"on_cluster": "yes"}}, "sweep.on_cluster", "True or False"),
    ({"data": {"path": "bundled:iris"}}, "data.path", "bundled:breast_cancer"),
])
def test_a_bad_value_names_the_key_the_value_and_what_is_allowed(d, key, allowed):
    with pytest.raises(MuflowInputError) as err:
        from_dict(d)
    message = str(err.value)
    assert message.startswith(f"{key} must be ") and allowed in message


@pytest.mark.parametrize("d, key", [
    ({"sweeep": {}}, "sweeep"),
    ({"sweep": {"fold": 3}}, "sweep.fold"),
])
def test_an_unknown_key_is_refused_with_the_known_ones(d, key):
    with pytest.raises(MuflowInputError, match=rf"unknown config key '{re.escape(key)}'.*allowed keys here"):
        from_dict(d)


def test_the_sweep_table_takes_every_option_of_run_sweep():
    import inspect

    from muflow.selection import run_sweep

    cfg = from_dict({"sweep": {"path": "batched", "intercept": "none", "halving": 3, "n_jobs": 2}})
    options = cfg.sweep.sweep_options()
    assert options["halving"] == 3 and options["path"] == "batched" and options["intercept"] == "none"
    # the defaults a file leaves out are run_sweep's own, except folds and max_iter (DEFAULT_TOML)
    defaults = {k: p.default for k, p in inspect.signature(run_sweep).parameters.items()}
    for key, value in default_config().sweep.sweep_options().items():
        if key not in ("folds", "max_iter"):
            assert value == defaults[key], key


def test_the_sweep_row_cache_is_a_key_that_a_run_directory_of_before_does_not_miss():
    """``sweep.cache_size`` reaches run_sweep when given; left out it takes run_sweep's
    default and is absent from config.json, so a run directory written before the key
    existed still resumes (its config.json compares equal)."""
    assert from_dict({"sweep": {"cache_size": 2000}}).sweep.sweep_options()["cache_size"] == 2000.0
    assert "cache_size" not in default_config().sweep.sweep_options()
    assert "cache_size" not in default_config().to_dict()["sweep"]
    with pytest.raises(MuflowInputError, match=r"sweep\.cache_size must be a positive number, got 0"):
        from_dict({"sweep": {"cache_size": 0}})


def test_a_file_names_itself_and_relative_data_paths_follow_it(tmp_path):
    (tmp_path / "d.csv").write_text("a,label\n1,0\n")
    path = tmp_path / "run.toml"
    path.write_text('[data]\npath = "d.csv"\n')
    assert load_config(path).data.path == str(tmp_path / "d.csv")
    path.write_text("[data\n")
    with pytest.raises(MuflowInputError, match="not valid TOML"):
        load_config(path)
    path.write_text("[sweep]\nfolds = 0\n")
    with pytest.raises(MuflowInputError, match=rf"{path}: sweep.folds must be"):
        load_config(path)
    with pytest.raises(MuflowInputError, match="does not exist"):
        resolve(str(tmp_path / "nope.toml"))


def test_with_overrides_validates_like_a_file():
    cfg = default_config().with_overrides(cluster={"scheduler": "tcp://h:8786"})
    assert cfg.cluster.scheduler == "tcp://h:8786"
    with pytest.raises(MuflowInputError, match="cluster.scheduler"):
        default_config().with_overrides(cluster={"scheduler": "h"})


SIGMOID_NEG = {"kernel": "sigmoid", "gamma": 0.1, "coef0": -1.0}


@pytest.mark.parametrize("sweep, kernels, message", [
    ({"solver": "nope"}, None,
     "sweep.solver = 'nope': unknown solver 'nope'; choose 'auto' or one of m3, "),
    ({"solver": "munk"}, [{"kernel": "rbf"}, SIGMOID_NEG],
     "sweep.solver = 'munk' cannot solve the grid's kernel setting sigmoid(gamma=0.1, coef0=-1): "
     "solver 'munk' needs a kernel that is non-negative"),
    ({"solver": "munk"}, [{"kernel": "poly", "degree": [2, 3], "coef0": -0.5}],
     "kernel setting poly(gamma=scale, degree=3, coef0=-0.5)"),
    ({"solver": "cd", "intercept": "exact"}, None,
     "solver 'cd' does not support intercept='exact'"),
])
def test_a_solver_that_cannot_solve_the_grid_is_refused_when_the_config_is_read(sweep, kernels, message):
    """Before any data are read (the sweep stage found it, after the data and Gram stages
    had written a run directory that the fixed configuration could not reuse)."""
    d = {"sweep": sweep, **({"grid": {"C": [1.0], "kernels": kernels}} if kernels else {})}
    with pytest.raises(MuflowInputError) as err:
        from_dict(d, source="run.toml")
    assert str(err.value).startswith("run.toml: sweep.solver = ") and message in str(err.value)


@pytest.mark.parametrize("kernels", [
    [{"kernel": "linear"}],  # non-negative data decide: checked when the sweep has them
    [{"kernel": "sigmoid", "coef0": 0.5}],
    [{"kernel": "rbf"}, {"kernel": "poly", "degree": 2, "coef0": -1.0}],  # an even power
])
def test_munk_is_accepted_where_the_data_may_make_the_kernel_non_negative(kernels):
    assert from_dict({"sweep": {"solver": "munk"}, "grid": {"C": [1.0], "kernels": kernels}}).sweep.solver == "munk"


def test_halving_min_iter_without_halving_is_refused_in_one_line(tmp_path):
    """``halving_min_iter`` sets the first rung of successive halving: without ``halving``
    it had no effect and was accepted without a word (the sweep command's flag alone is
    refused). The default it takes when left out (a round trip of any configuration
    carries it) is no reason to refuse."""
    path = tmp_path / "run.toml"
    path.write_text("[sweep]\nhalving_min_iter = 5\n")
    with pytest.raises(MuflowInputError) as refused:
        load_config(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: sweep.halving_min_iter = 5 ") and "\n" not in message
    assert "set sweep.halving too" in message
    assert from_dict({"sweep": {"halving": 3, "halving_min_iter": 5}}).sweep.halving_min_iter == 5
    cfg = default_config()
    assert from_dict(cfg.to_dict()) == cfg  # the default 10 travels in every to_dict
    assert cfg.with_overrides(sweep={"folds": 4}).sweep.folds == 4


def test_gram_storage_options_name_environment_variables_read_when_a_store_is_opened(monkeypatch):
    """``[gram] storage_options`` follow ``[data]``'s rules: a ``"${NAME}"`` value is the
    environment variable, read when the options are used (``GramConfig.options``), never
    before, so ``to_dict`` (config.json) keeps the reference; none by default."""
    assert default_config().gram.storage_options == {} and default_config().gram.options() is None
    table = {"cache_dir": "s3://bucket/gram",
             "storage_options": {"endpoint_url": "${GRAM_ENDPOINT}", "key": "${GRAM_KEY}",
                                 "client_kwargs": {"region_name": "eu-west-1"}}}
    cfg = from_dict({"gram": table})  # read without the variables: they are not used yet
    assert cfg.to_dict()["gram"] == table and from_dict(cfg.to_dict()) == cfg
    monkeypatch.setenv("GRAM_ENDPOINT", "http://minio:9000")
    with pytest.raises(MuflowInputError, match=r"^gram\.storage_options\.key names the environment "
                                               r"variable GRAM_KEY, which is not set; export it"):
        cfg.gram.options()
    monkeypatch.setenv("GRAM_KEY", "AKIA-TEST")
    assert cfg.gram.options() == {"endpoint_url": "http://minio:9000", "key": "AKIA-TEST",
                                  "client_kwargs": {"region_name": "eu-west-1"}}
    assert "AKIA-TEST" not in str(cfg.to_dict())


@pytest.mark.parametrize("gram, message", [
    ({"cache_dir": "s3://b/gram", "storage_options": {"secret": "hunter2"}},
     r"f\.toml: gram\.storage_options\.secret holds a literal credential; name an environment "
     r"variable instead"),
    ({"cache_dir": "s3://b/gram", "storage_options": {"client_kwargs": {"aws_secret_access_key": "x"}}},
     r"gram\.storage_options\.client_kwargs\.aws_secret_access_key holds a literal credential"),
    ({"cache_dir": "s3://b/gram", "storage_options": "anon"},
     r"gram\.storage_options must be a table"),
    ({"storage_options": {"anon": True}},
     r"gram\.storage_options are given, but gram\.cache_dir = '' \(<run dir>/gram\) is a local "
     r"directory, whose Gram stores take no file system options; set gram\.cache_dir to the URL"),
    ({"cache_dir": "file:///srv/gram", "storage_options": {"anon": True}},
     r"gram\.cache_dir = 'file:///srv/gram' is a local directory"),
])
def test_gram_storage_options_that_cannot_serve_are_refused_naming_the_key(gram, message):
    with pytest.raises(MuflowInputError, match=message):
        from_dict({"gram": gram}, source="f.toml")


def test_a_sweep_config_gives_run_sweep_its_gram_storage_options(tmp_path, monkeypatch):
    """``sweep --config``: the file's ``[gram]`` cache at a URL comes with its options,
    read from the environment when the file is read for the sweep."""
    from muflow.config import load_grid_toml

    path = tmp_path / "sweep.toml"
    path.write_text('[grid]\nC = [1.0]\nkernels = [{ kernel = "rbf", gamma = [0.1] }]\n'
                    '[gram]\ncache_dir = "s3://b/gram"\n'
                    'storage_options = { endpoint_url = "${GRAM_ENDPOINT}" }\n')
    monkeypatch.setenv("GRAM_ENDPOINT", "http://minio:9000")
    _, options = load_grid_toml(path)
    assert options == {"cache_dir": "s3://b/gram",
                       "storage_options": {"endpoint_url": "http://minio:9000"}}
