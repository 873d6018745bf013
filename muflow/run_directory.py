"""The run directory of the main job: its configuration, its records and its stage log.

A stage of :mod:`muflow.pipeline` is a function ``compute(cfg, run_dir, ...) -> dict``
made a stage by :func:`stage`: its output is one JSON record in the run directory, written
atomically (:func:`write_record`), so a stage whose record exists is finished and is not
computed again, and every call appends ``<stage> computed`` or ``<stage> reused`` to
``stages.log`` (:func:`log_stage`, read back by :func:`stage_log`). :func:`start_run`
opens the directory for one configuration only (:func:`config_matches`): the run
configuration, and for the ``train`` flow the SVC parameters it fits (``train_params``
in ``config.json``), since its refit stage, like every stage, is reused as it is. Where
the work runs (:data:`WHERE_IT_RUNS`: the Dask scheduler, the LocalCluster's size, the
timeouts, how the Gram cache is reached) is no part of it: a run resumes on another cluster.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import numpy as np

from muflow.atomic import write_json
from muflow.config import RunConfig
from muflow.exceptions import MuflowInputError


def write_record(path: Path, obj) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically (NumPy scalars and arrays, paths as JSON)."""
    return write_json(path, obj, default=_json_default)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    return str(o)


def read_record(path: Path):
    """The JSON record at ``path``."""
    return json.loads(Path(path).read_text())


def stage(name: str, output: str):
    """Make ``compute(cfg, run_dir, ...) -> dict`` a stage: its output ``run_dir/output``
    (JSON, written atomically) is returned as is when it exists (logged ``reused``), else
    computed, written and logged ``computed`` with its seconds."""
    def wrap(compute):
        @functools.wraps(compute)
        def run(cfg, run_dir, *args, **kwargs):
            run_dir = Path(run_dir)
            done = run_dir / output
            if done.exists():
                log_stage(run_dir, name, "reused")
                return read_record(done)
            t0 = time.perf_counter()
            info = compute(cfg, run_dir, *args, **kwargs)
            write_record(done, info)
            log_stage(run_dir, name, "computed", time.perf_counter() - t0)
            return info
        return run
    return wrap


def log_stage(run_dir, stage: str, state: str, seconds: float = 0.0):
    """Append ``<stage> <state> <seconds>`` to the run directory's ``stages.log``."""
    with open(Path(run_dir) / "stages.log", "a") as fh:
        fh.write(f"{stage} {state} {seconds:.2f}\n")


def stage_log(run_dir) -> list[tuple[str, str]]:
    """``[(stage, "computed" | "reused"), ...]`` in the order they ran."""
    path = Path(run_dir) / "stages.log"
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines() if line.strip()]


def run_record(cfg: RunConfig, params: dict | None = None) -> dict:
    """What ``config.json`` holds: the configuration, and the ``train`` flow's SVC
    parameters as ``train_params`` (a run that sweeps has none)."""
    record = cfg.to_dict()
    if params is not None:
        record["train_params"] = dict(params)
    return json.loads(json.dumps(record, default=_json_default))


#: The keys of a run configuration that say where and how patiently the work runs, not what
#: it computes: a run resumed (or a flow run retried) with other values is the same run.
#: ``gram.storage_options`` say how the Gram cache is reached (an endpoint that moved, a
#: credential's variable renamed); its stores are checked against the data and kernel
#: they were built for whatever reaches them, and a config.json from before the key resumes.
WHERE_IT_RUNS = (("cluster", "scheduler"), ("cluster", "workers"), ("cluster", "timeout"),
                 ("data", "timeout"), ("gram", "storage_options"))


def _what_it_computes(record: dict) -> dict:
    """``record`` (a :func:`run_record`) without :data:`WHERE_IT_RUNS`."""
    record = json.loads(json.dumps(record))
    for table, key in WHERE_IT_RUNS:
        record.get(table, {}).pop(key, None)
    return record


def config_difference(recorded: dict, mine: dict, prefix: str = "") -> str | None:
    """The first key whose value differs between two records, in words (``grid.C is [1.0]
    here, [0.1, 1.0] in its config.json``); None when they are equal."""
    for key in sorted(set(recorded) | set(mine), key=str):
        name = f"{prefix}{key}"
        old, new = recorded.get(key), mine.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            found = config_difference(old, new, f"{name}.")
            if found:
                return found
        elif old != new:
            def text(value):
                return "not set" if value is None else json.dumps(value)
            return f"{name} is {text(new)} here, {text(old)} in its config.json"
    return None


def _recorded(run_dir) -> dict:
    path = Path(run_dir) / "config.json"
    try:
        return read_record(path)
    except ValueError:
        raise MuflowInputError(f"{path} is damaged (not JSON); delete the run directory "
                               f"{run_dir} or choose another") from None


def config_matches(run_dir, cfg: RunConfig, params: dict | None = None) -> bool:
    """Whether ``run_dir/config.json`` records ``cfg`` and ``params`` (a run directory
    holds one run: :func:`run_record`), where the work runs aside (:data:`WHERE_IT_RUNS`)."""
    return _what_it_computes(_recorded(run_dir)) == _what_it_computes(run_record(cfg, params))


def other_configuration(run_dir, cfg: RunConfig, params: dict | None = None) -> str:
    """What differs between ``run_dir``'s configuration and ``cfg`` (see
    :func:`config_difference`), for a refusal's message."""
    return config_difference(_what_it_computes(_recorded(run_dir)),
                             _what_it_computes(run_record(cfg, params))) or "its config.json"


def start_run(cfg: RunConfig, run_dir, params: dict | None = None) -> Path:
    """Create the run directory (or reopen it) and record the configuration (and the
    ``train`` flow's ``params``).

    A run directory that holds another configuration, or a model fitted with other
    parameters, is refused: resuming it would mix the outputs of two runs, and its
    finished stages (the refit among them) would be returned as this run's. One where no
    stage finished (a run refused by its data stage) holds nothing of its configuration
    but the record, which is replaced.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "config.json"
    if path.exists() and not any(state == "computed" for _, state in stage_log(run_dir)):
        write_record(path, run_record(cfg, params))
    elif path.exists():
        if not config_matches(run_dir, cfg, params):
            if _refuse_other_params(run_dir, _recorded(run_dir), run_record(cfg, params)):
                write_record(path, run_record(cfg, params))  # the other params fitted nothing
                return run_dir
            raise MuflowInputError(
                f"run directory {str(run_dir)!r} holds a run of another configuration "
                f"({other_configuration(run_dir, cfg, params)}); resume it with its own "
                "configuration or choose a new directory")
        if _recorded(run_dir) != run_record(cfg, params):  # on another cluster: where it ran last
            write_record(path, run_record(cfg, params))
    else:
        write_record(path, run_record(cfg, params))
    return run_dir


def _refuse_other_params(run_dir, recorded: dict, mine: dict) -> bool:
    """Refuse, naming them, a run directory of this configuration whose ``train_params``
    differ from this run's (a model trained with other params, or a sweep's). True where
    both are ``train`` runs and the other params' refit never finished (it failed: their
    directory holds the data stage alone, which does not depend on them), so that this
    run's params replace them; False for another configuration (the caller's message)."""
    held, given = recorded.pop("train_params", None), mine.pop("train_params", None)
    if _what_it_computes(recorded) != _what_it_computes(mine):
        return False
    if held is not None and given is not None and not (Path(run_dir) / "refit.json").exists():
        return True

    def what(params):
        return "a sweep of the grid" if params is None else f"a model trained with params {params}"

    raise MuflowInputError(
        f"run directory {str(run_dir)!r} holds {what(held)}, not {what(given)}; its finished "
        "stages would be returned as this run's: choose a new directory (out_dir)")


def gram_dir(cfg: RunConfig, run_dir) -> str:
    """Where the Gram stores live: ``gram.cache_dir`` or ``<run dir>/gram``; a local path
    made absolute here, since the Dask workers that write and read the stores may run in
    another working directory (a URL as it is, opened with ``cfg.gram.options()``)."""
    from muflow.data.source import absolute_location

    return absolute_location(cfg.gram.cache_dir or Path(run_dir) / "gram")
