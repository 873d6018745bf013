"""Run configuration: a TOML file (or a dict) -> validated, frozen dataclasses.

A run configuration says which data to use, which grid to sweep, how to cross-validate and
where the Dask work runs. Every table and key is optional; what is left out takes the value
of the embedded default (:data:`DEFAULT_TOML`), which is what ``python -m muflow run`` runs
with no arguments::

    [data]
    path = "bundled:breast_cancer"   # or a CSV / svmlight / .npz file
    label_column = "class"           # CSV only
    test_size = 0.2                  # held-out fraction for the final evaluation
    seed = 0                         # seed of the stratified train/test split

    [grid]
    C = [0.1, 1.0, 10.0]
    kernels = [
      { kernel = "rbf", gamma = [0.01, 0.1] },
      { kernel = "poly", degree = [2], gamma = [0.01], coef0 = [1.0] },
    ]

    [sweep]
    folds = 3
    solver = "auto"
    tol = 1e-3
    max_iter = 2000
    seed = 0
    on_cluster = false  # true: solve on the Dask workers (multiplicative solvers, K never
                        # in this process); false: Grams built on the cluster, solved here (SMO)

    [cluster]
    scheduler = ""      # tcp://host:8786 of a running scheduler; "" = a LocalCluster here
    workers = 2         # LocalCluster only: worker processes (0 = one per core)
    timeout = 10.0      # seconds to wait for the scheduler

    [gram]
    cache_dir = ""      # Gram stores (zarr, float32); "" = <run dir>/gram

An unknown table or key, or a value of the wrong type or range, raises
:class:`muflow.exceptions.MuflowInputError` whose message names the key (``sweep.folds``),
the value it got and what is allowed. Plain data only: this module never touches Prefect,
Dask or the file system beyond reading the TOML file.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from muflow.exceptions import MuflowInputError
from muflow.kernels import KERNEL_PARAMETERS

#: ``data.path`` value that names the bundled breast-cancer set.
BUNDLED_PREFIX = "bundled:"
BUNDLED = ("breast_cancer", "sonar")
#: Kernels a grid may name (a precomputed Gram has no place in a sweep) and the keys each
#: takes besides ``kernel``: the kernels' own parameter lists.
KERNELS = tuple(k for k in KERNEL_PARAMETERS if k != "precomputed")
KERNEL_KEYS = KERNEL_PARAMETERS

DEFAULT_TOML = """\
[data]
path = "bundled:breast_cancer"
test_size = 0.2
seed = 0

[grid]
C = [0.1, 1.0, 10.0]
kernels = [
  { kernel = "rbf", gamma = [0.01, 0.1] },
  { kernel = "poly", degree = [2], gamma = [0.01], coef0 = [1.0] },
]

[sweep]
folds = 3
solver = "auto"
tol = 1e-3
max_iter = 2000
seed = 0
on_cluster = false

[cluster]
scheduler = ""
workers = 2
timeout = 10.0

[gram]
cache_dir = ""
"""


@dataclass(frozen=True)
class DataConfig:
    path: str = "bundled:breast_cancer"
    label_column: str | None = None
    format: str | None = None
    n_features: int | None = None
    test_size: float = 0.2
    seed: int = 0

    @property
    def bundled(self) -> str | None:
        """Name of the bundled set, or None for a file."""
        return self.path[len(BUNDLED_PREFIX):] if self.path.startswith(BUNDLED_PREFIX) else None


@dataclass(frozen=True)
class GridConfig:
    C: tuple = (0.1, 1.0, 10.0)
    #: One dict per kernel family: ``{"kernel": "rbf", "gamma": [...]}``; lists of values.
    kernels: tuple = ()

    def as_sweep_grid(self) -> dict:
        """Keyword arguments of :class:`muflow.sweep.SweepGrid`."""
        return {"kernels": [dict(k) for k in self.kernels], "C": list(self.C)}


@dataclass(frozen=True)
class SweepConfig:
    folds: int = 3
    solver: str = "auto"
    tol: float = 1e-3
    max_iter: int = 2000
    seed: int = 0
    on_cluster: bool = False


@dataclass(frozen=True)
class ClusterConfig:
    scheduler: str = ""
    workers: int = 2
    timeout: float = 10.0


@dataclass(frozen=True)
class GramConfig:
    cache_dir: str = ""


@dataclass(frozen=True)
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    gram: GramConfig = field(default_factory=GramConfig)

    def to_dict(self) -> dict:
        """Plain, JSON- and TOML-friendly dict (tuples as lists); ``from_dict`` reads it back."""
        d = asdict(self)
        d["grid"] = {"C": list(self.grid.C), "kernels": [dict(k) for k in self.grid.kernels]}
        for table in d.values():
            for key in [k for k, v in table.items() if v is None]:
                del table[key]  # TOML has no null; absent means the default
        return d

    def with_overrides(self, **tables) -> "RunConfig":
        """A copy with some tables' keys replaced, validated like a file:
        ``cfg.with_overrides(cluster={"scheduler": "tcp://h:8786"})``."""
        merged = self.to_dict()
        for name, values in tables.items():
            merged.setdefault(name, {}).update(values)
        return from_dict(merged)


class _Checker:
    """Validation with messages that name the key, the value and what is allowed."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, value: Any, allowed: str):
        where = f"{self.source}: " if self.source else ""
        raise MuflowInputError(f"{where}config key '{key}' = {value!r} is not allowed; expected {allowed}")

    def table(self, d: Any, key: str, known) -> dict:
        if not isinstance(d, dict):
            self.fail(key, d, "a table")
        for k in d:
            if k not in known:
                name = f"{key}.{k}" if key else k
                where = f"{self.source}: " if self.source else ""
                raise MuflowInputError(f"{where}unknown config key '{name}' (value {d[k]!r}); "
                                       f"allowed keys here: {', '.join(known)}")
        return d

    def boolean(self, key, v):
        if not isinstance(v, bool):
            self.fail(key, v, "true or false")
        return v

    def integer(self, key, v, lo=None):
        if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo):
            self.fail(key, v, "an integer" + (f" >= {lo}" if lo is not None else ""))
        return v

    def number(self, key, v, *, positive=False, open_unit=False, allow_inf=False):
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ok and math.isnan(v):
            ok = False
        if ok and math.isinf(v) and not allow_inf:
            ok = False
        if ok and positive and not v > 0:
            ok = False
        if ok and open_unit and not 0 < v < 1:
            ok = False
        if not ok:
            what = ("a number strictly between 0 and 1" if open_unit else
                    "a positive number" + (" (or inf)" if allow_inf else "") if positive else "a number")
            self.fail(key, v, what)
        return float(v)

    def string(self, key, v, choices=None, *, optional=False):
        if optional and v is None:
            return None
        if not isinstance(v, str) or (choices is not None and v not in choices):
            self.fail(key, v, f"one of {', '.join(map(repr, choices))}" if choices else "a string")
        return v

    def values(self, key, v, check):
        """A non-empty list of values, each checked by ``check(key[i], item)``."""
        if not isinstance(v, list) or not v:
            self.fail(key, v, "a non-empty list")
        return tuple(check(f"{key}[{i}]", item) for i, item in enumerate(v))


def from_dict(d: dict | None, *, source: str = "") -> RunConfig:
    """Validate a configuration dict (a parsed TOML file) into a :class:`RunConfig`.

    Tables and keys left out take the embedded default's values (:data:`DEFAULT_TOML`).
    """
    c = _Checker(source)
    merged = tomllib.loads(DEFAULT_TOML)
    d = {} if d is None else d
    c.table(d, "", tuple(merged))
    for name, table in d.items():
        c.table(table, name, _KNOWN[name])
        merged[name].update(table)

    data = merged["data"]
    path = c.string("data.path", data["path"])
    if path.startswith(BUNDLED_PREFIX) and path[len(BUNDLED_PREFIX):] not in BUNDLED:
        c.fail("data.path", path, "a file path or one of " + ", ".join(BUNDLED_PREFIX + b for b in BUNDLED))
    label = data.get("label_column")
    if label is not None and not isinstance(label, (str, int)):
        c.fail("data.label_column", label, "a column name or 0-based index")
    data_cfg = DataConfig(
        path=path,
        label_column=label,
        format=c.string("data.format", data.get("format"), ("csv", "svmlight", "npz"), optional=True),
        n_features=None if data.get("n_features") is None else c.integer("data.n_features", data["n_features"], 1),
        test_size=c.number("data.test_size", data["test_size"], open_unit=True),
        seed=c.integer("data.seed", data["seed"], 0),
    )

    grid = merged["grid"]
    C = c.values("grid.C", grid["C"], lambda k, v: c.number(k, v, positive=True, allow_inf=True))
    if not isinstance(grid["kernels"], list) or not grid["kernels"]:
        c.fail("grid.kernels", grid["kernels"], "a non-empty list of tables such as "
               "{ kernel = \"rbf\", gamma = [0.1] }")
    kernels = []
    for i, fam in enumerate(grid["kernels"]):
        key = f"grid.kernels[{i}]"
        if not isinstance(fam, dict) or "kernel" not in fam:
            c.fail(key, fam, "a table with a 'kernel' key, e.g. { kernel = \"rbf\", gamma = [0.1] }")
        name = c.string(f"{key}.kernel", fam["kernel"], KERNELS)
        c.table(fam, key, ("kernel",) + KERNEL_KEYS[name])
        family = {"kernel": name}
        for p in KERNEL_KEYS[name]:
            if p not in fam:
                continue
            if p == "gamma":
                check = (lambda k, v: v if v in ("scale", "auto") else c.number(k, v, positive=True))
            elif p == "degree":
                check = (lambda k, v: c.integer(k, v, 1))
            else:
                check = (lambda k, v: c.number(k, v))
            family[p] = list(c.values(f"{key}.{p}", fam[p], check))
        kernels.append(family)
    grid_cfg = GridConfig(C=C, kernels=tuple(kernels))

    sw = merged["sweep"]
    sweep_cfg = SweepConfig(
        folds=c.integer("sweep.folds", sw["folds"], 2),
        solver=c.string("sweep.solver", sw["solver"]),
        tol=c.number("sweep.tol", sw["tol"], positive=True),
        max_iter=c.integer("sweep.max_iter", sw["max_iter"], 1),
        seed=c.integer("sweep.seed", sw["seed"], 0),
        on_cluster=c.boolean("sweep.on_cluster", sw["on_cluster"]),
    )
    cl = merged["cluster"]
    scheduler = c.string("cluster.scheduler", cl["scheduler"])
    if scheduler and "://" not in scheduler:
        c.fail("cluster.scheduler", scheduler, "an address such as tcp://host:8786, or \"\" for a local cluster")
    cluster_cfg = ClusterConfig(
        scheduler=scheduler,
        workers=c.integer("cluster.workers", cl["workers"], 0),
        timeout=c.number("cluster.timeout", cl["timeout"], positive=True),
    )
    gr = merged["gram"]
    gram_cfg = GramConfig(cache_dir=c.string("gram.cache_dir", gr["cache_dir"]))
    return RunConfig(data=data_cfg, grid=grid_cfg, sweep=sweep_cfg, cluster=cluster_cfg, gram=gram_cfg)


_KNOWN = {
    "data": ("path", "label_column", "format", "n_features", "test_size", "seed"),
    "grid": ("C", "kernels"),
    "sweep": ("folds", "solver", "tol", "max_iter", "seed", "on_cluster"),
    "cluster": ("scheduler", "workers", "timeout"),
    "gram": ("cache_dir",),
}


def default_config() -> RunConfig:
    """The embedded default (:data:`DEFAULT_TOML`)."""
    return from_dict(None)


def load_config(path) -> RunConfig:
    """Read and validate a run configuration TOML file.

    A relative ``data.path`` is taken relative to the file's directory.
    """
    path = Path(path)
    if not path.is_file():
        raise MuflowInputError(f"config file {str(path)!r} does not exist; check the path")
    try:
        d = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise MuflowInputError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise MuflowInputError(f"{path}: not a text file") from None
    cfg = from_dict(d, source=str(path))
    data_path = cfg.data.path
    if cfg.data.bundled is None and not Path(data_path).is_absolute():
        cfg = cfg.with_overrides(data={"path": str((path.parent / data_path).resolve())})
    return cfg


def resolve(config) -> RunConfig:
    """A :class:`RunConfig` from what a flow parameter or the command line holds: None (the
    default), a path to a TOML file, a dict (a parsed TOML file) or a RunConfig."""
    if config is None:
        return default_config()
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, (str, Path)):
        return load_config(config)
    if isinstance(config, dict):
        return from_dict(config)
    raise MuflowInputError(f"a run configuration is a TOML path, a dict or None, got {type(config).__name__}")


def check_data_exists(cfg: RunConfig):
    """Refuse a data file that does not exist before anything is started or written."""
    if cfg.data.bundled is None and not Path(cfg.data.path).exists():
        raise MuflowInputError(
            f"config key 'data.path' = {cfg.data.path!r}: no such file; give an existing CSV, "
            f"svmlight or .npz file, or one of {', '.join(BUNDLED_PREFIX + b for b in BUNDLED)}")
