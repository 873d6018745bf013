"""Run configuration: a TOML file (or a dict) -> validated, frozen dataclasses.

A run configuration says which data to use, which grid to sweep, how to cross-validate and
where the Dask work runs. Every table and key is optional; what is left out takes the value
of the embedded default, :data:`DEFAULT_TOML` (each key explained there), which is what
``python -m muflow run`` runs with no arguments. Its tables:

- ``[data]``: the data set and the stratified train/test split;
- ``[grid]``: the sweep grid, ``C`` and ``kernels``: the one grid schema
  (:mod:`muflow.selection.grid`), also read by ``python -m muflow sweep --config``
  (:func:`load_grid_toml`);
- ``[sweep]``: the options of :func:`muflow.selection.run_sweep` (``folds``, ``seed``,
  ``solver``, ``path``, ``intercept``, ``tol``, ``max_iter``, ``halving``,
  ``halving_min_iter``, ``n_jobs``) and ``on_cluster``;
- ``[cluster]``: the Dask scheduler; ``[gram]``: the Gram store cache and, where it is an
  fsspec URL, its file system's ``storage_options`` (none by default).

An unknown table or key, or a value of the wrong type or range, raises
:class:`muflow.exceptions.MuflowInputError` whose message names the key (``sweep.folds``),
the value it got and what is allowed, in the vocabulary of :mod:`muflow.validation`.
``sweep.solver`` is checked against the solver registry and every kernel setting of the
grid here (an unknown solver, MUNK on a sigmoid kernel of coef0 < 0), before any data are
read or a run directory is made.
Plain data only: this module never touches Prefect, Dask or the file system beyond
reading the TOML file.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from muflow.exceptions import MuflowInputError
from muflow.selection.grid import GRID_EXAMPLE, SWEEP_OPTIONS, SweepGrid, check_options
from muflow.validation import check_bool, check_choice, check_number

#: ``data.path`` value that names the bundled breast-cancer set.
BUNDLED_PREFIX = "bundled:"
BUNDLED = ("breast_cancer", "sonar")

DEFAULT_TOML = """\
[data]
path = "bundled:breast_cancer"   # or a file, directory, glob, list or URL (s3://, gs://, ...)
# format = "parquet"             # parquet, zarr, csv, svmlight, npz (default: from the suffix)
# label_column = "class"         # the label column (name or 0-based index; default: the last)
# feature_columns = ["a", "b"]   # default: every numeric column but the label
# storage_options = { endpoint_url = "${S3_ENDPOINT}" }  # "${NAME}": an environment variable
# test_path = "test/"            # a test set instead of the seeded split
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
max_iter = -1        # per solve, in SVC's unit (SMO: pair steps), sweep and refit alike; -1: no limit
seed = 0
on_cluster = false  # true: solve on the Dask workers (multiplicative solvers, K never
                    # in this process); false: Grams built on the cluster, solved here (SMO)

[cluster]
scheduler = ""      # tcp://host:8786 of a running scheduler; "" = a LocalCluster here
workers = 2         # LocalCluster only: worker processes (0 = one per core)
timeout = 10.0      # seconds to wait for the scheduler

[gram]
cache_dir = ""      # Gram stores (zarr; float32 for a sweep on the cluster, float64 in process); "" = <run dir>/gram
# storage_options = { endpoint_url = "${S3_ENDPOINT}" }  # of a URL cache_dir (s3://...), as in
                    # [data], "${NAME}" an environment variable; default none: [data]'s are not reused
"""


@dataclass(frozen=True)
class DataConfig:
    """The ``[data]`` table: where the data set lives (:class:`muflow.data.DataSource`:
    ``path`` a file, directory, glob, list of those or fsspec URL; ``format``, the columns,
    ``storage_options`` whose ``"${NAME}"`` values are environment variables, ``timeout``
    of a listing) and the split (``test_size``, ``seed``), or a test set (``test_path``,
    read like ``path``)."""

    path: str | tuple = "bundled:breast_cancer"
    label_column: str | None = None
    format: str | None = None
    n_features: int | None = None
    test_size: float = 0.2
    seed: int = 0
    feature_columns: tuple | None = None
    storage_options: dict = field(default_factory=dict)
    test_path: str | tuple | None = None
    timeout: float = 10.0

    @property
    def bundled(self) -> str | None:
        """Name of the bundled set, or None for a file."""
        path = self.path
        return path[len(BUNDLED_PREFIX):] if isinstance(path, str) and path.startswith(BUNDLED_PREFIX) else None

    def source(self, test: bool = False):
        """The :class:`muflow.data.DataSource` of ``path`` (``test``: of ``test_path``)."""
        from muflow.data.source import DataSource

        return DataSource(path=self.test_path if test else self.path, format=self.format,
                          label_column=self.label_column, feature_columns=self.feature_columns,
                          storage_options=dict(self.storage_options), n_features=self.n_features,
                          timeout=self.timeout)


@dataclass(frozen=True)
class SweepConfig:
    """The ``[sweep]`` table: options of :func:`muflow.selection.run_sweep` and
    ``on_cluster``. The defaults of ``path``, ``intercept``, ``halving``,
    ``halving_min_iter`` and ``n_jobs`` are ``run_sweep``'s."""

    folds: int = 3
    solver: str = "auto"
    tol: float = 1e-3
    max_iter: int = -1
    seed: int = 0
    on_cluster: bool = False
    path: str = "auto"
    intercept: str = "exact"
    halving: int | None = None
    halving_min_iter: int = 10
    n_jobs: int | None = None  # the sweep's thread budget; None (left out): every core allowed
    time_limit: float | None = None  # seconds; None (left out): no limit
    #: megabytes of kernel rows the row-reading solvers cache (run_sweep's ``cache_size``);
    #: None (left out): run_sweep's default. On rows on demand (a large training set) the
    #: cache decides how often a row is computed again, so a larger cache means fewer rows
    #: computed (docs/benchmarks.md, "Model selection")
    cache_size: float | None = None

    def sweep_options(self) -> dict:
        """Keyword arguments of :func:`muflow.selection.run_sweep` (those left out, None,
        take its defaults)."""
        return {k: getattr(self, k) for k in SWEEP_OPTIONS if getattr(self, k) is not None}


@dataclass(frozen=True)
class ClusterConfig:
    scheduler: str = ""
    workers: int = 2
    timeout: float = 10.0


@dataclass(frozen=True)
class GramConfig:
    """The ``[gram]`` table: where the Gram stores live (``cache_dir``: a directory or an
    fsspec URL; "" is ``<run dir>/gram``) and, for a URL, the options of its file system
    (``storage_options``, the rules of ``data.storage_options``: a ``"${NAME}"`` value is
    the environment variable NAME, read when a store is opened, so ``config.json`` names
    the variable; a literal credential is refused). They default to none: the data's
    options are not taken for the stores', which may live elsewhere."""

    cache_dir: str = ""
    storage_options: dict = field(default_factory=dict)

    def options(self) -> dict | None:
        """``storage_options`` with every ``"${NAME}"`` replaced by the environment's value,
        as every open of a store under ``cache_dir`` is given them (None: none given)."""
        from muflow.data.source import expand_env

        return expand_env(self.storage_options, "gram.storage_options") or None


@dataclass(frozen=True)
class RunConfig:
    data: DataConfig = field(default_factory=DataConfig)
    grid: SweepGrid = field(default_factory=lambda: default_config().grid)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    gram: GramConfig = field(default_factory=GramConfig)

    def to_dict(self) -> dict:
        """Plain, JSON- and TOML-friendly dict (tuples as lists); ``from_dict`` reads it back."""
        d = asdict(self)
        d["grid"] = self.grid.to_dict()
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


#: The keys each table takes.
_KNOWN = {
    "data": tuple(f.name for f in fields(DataConfig)),
    "grid": ("C", "kernels"),
    "sweep": tuple(f.name for f in fields(SweepConfig)),
    "cluster": tuple(f.name for f in fields(ClusterConfig)),
    "gram": tuple(f.name for f in fields(GramConfig)),
}


def _check_keys(d, key: str, known, where: str) -> dict:
    """A table with known keys only; an unknown one is named with the allowed ones."""
    if not isinstance(d, dict):
        raise MuflowInputError(f"{where}{key or 'the configuration'} must be a table, got {d!r}")
    for k in d:
        if k not in known:
            name = f"{key}.{k}" if key else k
            hint = ""
            if key == "sweep" and k in ("C", "kernels"):
                hint = ("; the grid has its own table: [grid] with C = [...] and kernels = "
                        "[...] (or [[grid.kernels]] tables)")
            raise MuflowInputError(f"{where}unknown config key '{name}' (value {d[k]!r}); "
                                   f"allowed keys here: {', '.join(known)}{hint}")
    return d


def _paths(v, key, where):
    """A path (string) or a non-empty list of them (kept as a tuple)."""
    if isinstance(v, (list, tuple)) and v and all(isinstance(p, str) and p for p in v):
        return v[0] if len(v) == 1 else tuple(v)
    if isinstance(v, str) and v:
        return v
    raise MuflowInputError(f"{where}{key} must be a path, a URL or a list of them, got {v!r}")


def _string(v, key, where):
    if not isinstance(v, str):
        raise MuflowInputError(f"{where}{key} must be a string, got {v!r}")
    return v


def from_dict(d: dict | None, *, source: str = "", complete: bool = True) -> RunConfig:
    """Validate a configuration dict (a parsed TOML file) into a :class:`RunConfig`.

    Tables and keys left out take the embedded default's values (:data:`DEFAULT_TOML`).
    ``complete=False``: the file's [sweep] options are completed elsewhere (``sweep
    --config`` with options on the command line), so halving_min_iter may wait there for
    a ``--halving``.
    """
    where = f"{source}: " if source else ""
    merged = tomllib.loads(DEFAULT_TOML)
    d = {} if d is None else d
    _check_keys(d, "", tuple(merged), where)
    for name, table in d.items():
        _check_keys(table, name, _KNOWN[name], where)
        merged[name].update(table)

    data = merged["data"]
    path = _paths(data["path"], "data.path", where)
    if isinstance(path, str) and path.startswith(BUNDLED_PREFIX):
        check_choice(path, "data.path", tuple(BUNDLED_PREFIX + b for b in BUNDLED), where=where,
                     hint="or a file path")
    label = data.get("label_column")
    if label is not None and (isinstance(label, bool) or not isinstance(label, (str, int))):
        raise MuflowInputError(f"{where}data.label_column must be a column name or 0-based "
                               f"index, got {label!r}")
    fmt = data.get("format")
    n_features = data.get("n_features")
    from muflow.data.source import FORMATS, check_storage_options

    features = data.get("feature_columns")
    if features is not None and (not isinstance(features, (list, tuple)) or not features
                                 or not all(isinstance(c, str) for c in features)):
        raise MuflowInputError(f"{where}data.feature_columns must be a list of column names, "
                               f"got {features!r}")
    options = data.get("storage_options", {})
    try:
        check_storage_options(options, "data.storage_options")
    except MuflowInputError as exc:
        raise MuflowInputError(f"{where}{exc}") from None
    test_path = data.get("test_path")
    data_cfg = DataConfig(
        path=path, label_column=label,
        feature_columns=None if features is None else tuple(features),
        storage_options=dict(options),
        test_path=None if test_path is None else _paths(test_path, "data.test_path", where),
        timeout=check_number(data.get("timeout", 10.0), "data.timeout", low=0, closed="neither",
                             where=where),
        format=None if fmt is None else check_choice(fmt, "data.format", FORMATS, where=where),
        n_features=None if n_features is None else check_number(n_features, "data.n_features",
                                                                integer=True, low=1, where=where),
        test_size=check_number(data["test_size"], "data.test_size", low=0, high=1,
                               closed="neither", where=where),
        seed=check_number(data["seed"], "data.seed", integer=True, low=0, where=where),
    )

    grid = SweepGrid(kernels=merged["grid"]["kernels"], C=merged["grid"]["C"])
    grid = grid.validate(where=where, prefix="grid.").normalized()

    sw = check_options({k: v for k, v in merged["sweep"].items() if k != "on_cluster"},
                       where=where, prefix="sweep.")
    if complete:
        check_halving_min_iter(sw, where)
    sweep_cfg = SweepConfig(**sw, on_cluster=check_bool(merged["sweep"]["on_cluster"],
                                                        "sweep.on_cluster", where=where))
    _check_solver(sweep_cfg, grid, where)
    cl = merged["cluster"]
    scheduler = _string(cl["scheduler"], "cluster.scheduler", where)
    if scheduler:
        check_scheduler_address(scheduler, "cluster.scheduler", where=where,
                                hint=", or \"\" for a local cluster")
    cluster_cfg = ClusterConfig(
        scheduler=scheduler,
        workers=check_number(cl["workers"], "cluster.workers", integer=True, low=0, where=where),
        timeout=check_number(cl["timeout"], "cluster.timeout", low=0, closed="neither", where=where),
    )
    gram_cfg = _gram(merged["gram"], where)
    return RunConfig(data=data_cfg, grid=grid, sweep=sweep_cfg, cluster=cluster_cfg, gram=gram_cfg)


def _gram(gram: dict, where: str) -> GramConfig:
    """The ``[gram]`` table; ``storage_options`` are checked as ``data.storage_options`` are
    and refused beside a local ``cache_dir``, whose stores no file system options reach."""
    from muflow.data.source import check_storage_options

    cache_dir = _string(gram["cache_dir"], "gram.cache_dir", where)
    options = gram.get("storage_options", {})
    try:
        check_storage_options(options, "gram.storage_options")
    except MuflowInputError as exc:
        raise MuflowInputError(f"{where}{exc}") from None
    if options and not takes_storage_options(cache_dir):
        shown = repr(cache_dir) + (" (<run dir>/gram)" if not cache_dir else "")
        raise MuflowInputError(
            f"{where}gram.storage_options are given, but gram.cache_dir = {shown} is a local "
            "directory, whose Gram stores take no file system options; set gram.cache_dir to "
            "the URL they are for (s3://bucket/gram), or remove gram.storage_options")
    return GramConfig(cache_dir=cache_dir, storage_options=dict(options))


def takes_storage_options(cache_dir: str) -> bool:
    """Whether a Gram store directory is an fsspec URL, opened with file system options: a
    local path (``file://`` too, opened as a path) takes none."""
    return "://" in cache_dir and not cache_dir.startswith("file://")


def check_halving_min_iter(sweep: dict, where: str):
    """Refuse ``sweep.halving_min_iter`` without ``sweep.halving``: it sets the first rung
    of successive halving, which is then off, so it would do nothing (the ``sweep``
    command refuses ``--halving-min-iter`` alone). Its default passes: every ``to_dict``
    of a configuration carries it, and reading one back must not fail."""
    given = sweep.get("halving_min_iter", SweepConfig.halving_min_iter)
    if sweep.get("halving") is None and given != SweepConfig.halving_min_iter:
        raise MuflowInputError(
            f"{where}sweep.halving_min_iter = {given} sets the first rung of successive "
            "halving, which is off; set sweep.halving too (e.g. halving = 3), or remove "
            "halving_min_iter")


def _check_solver(sweep: SweepConfig, grid: SweepGrid, where: str):
    """Refuse, before any data are read or a run directory is made, a ``sweep.solver``
    that is unknown or cannot solve some kernel setting of the grid: the registry's
    :func:`~muflow.solvers.registry.choose_solver` for each setting, given what the setting
    says of its sign without data (:meth:`muflow.kernels.Kernel.nonnegative_without_data`);
    a sign the data decide is checked by the data stage
    (:func:`muflow.run_data.check_solver_on_data`)."""
    from muflow.kernels import kernel_from_setting
    from muflow.selection.grid import setting_label
    from muflow.solvers.registry import SOLVERS, choose_solver

    for setting in grid.kernel_settings():
        kernel = kernel_from_setting(setting, None, intercept=sweep.intercept)
        try:
            choose_solver(sweep.solver, intercept=sweep.intercept,
                          kernel_nonnegative=kernel.nonnegative_without_data())
        except MuflowInputError as exc:
            if sweep.solver != "auto" and sweep.solver not in SOLVERS:
                raise type(exc)(f"{where}sweep.solver = {sweep.solver!r}: {exc}") from None
            raise type(exc)(f"{where}sweep.solver = {sweep.solver!r} cannot solve the grid's "
                            f"kernel setting {setting_label(setting)}: {exc}") from None


def check_scheduler_address(address: str, name: str, *, where: str = "", hint: str = "") -> str:
    """A Dask scheduler's address with its protocol (``tcp://host:8786``); without one
    it is refused, naming ``name`` (``cluster.scheduler``, or the option or parameter
    that gave it) and the address it should be."""
    if "://" not in address:
        raise MuflowInputError(f"{where}{name} must be an address such as tcp://host:8786{hint}, "
                               f"got {address!r} (tcp://{address}?)")
    return address


def read_toml(path) -> dict:
    """Parse a TOML file; a missing, unreadable or invalid file raises MuflowInputError."""
    path = Path(path)
    if not path.is_file():
        raise MuflowInputError(f"config file {str(path)!r} does not exist; check the path")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise MuflowInputError(f"{path}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise MuflowInputError(f"{path}: not a text file") from None


def load_grid_toml(path) -> tuple[SweepGrid, dict]:
    """Read a sweep grid and its options from a run configuration file.

    The file is a run configuration (:mod:`muflow.config`, the one schema): its ``[grid]``
    table is the grid, the keys its ``[sweep]`` table sets are options of
    :func:`muflow.selection.run_sweep`, and ``[gram] cache_dir`` the Gram store cache (with
    ``storage_options``, their ``"${NAME}"`` values read from the environment here).
    ``[data]``, ``[cluster]`` and ``sweep.on_cluster`` belong to ``python -m muflow run``
    and are checked but not returned. Options the file leaves out are left out of the
    returned dict, so that they take :func:`~muflow.selection.run_sweep`'s defaults.

    Returns
    -------
    (SweepGrid, dict of options)
    """
    data = read_toml(path)
    if "grid" not in data:
        raise MuflowInputError(f"{path}: no [grid] table; a sweep grid needs `C = [...]` and "
                               f"`kernels = [{GRID_EXAMPLE}]` under [grid]")
    cfg = from_dict(data, source=str(path), complete=False)  # the caller's check, after merging
    options = {k: getattr(cfg.sweep, k) for k in data.get("sweep", {}) if k in SWEEP_OPTIONS}
    if cfg.gram.cache_dir:
        options["cache_dir"] = cfg.gram.cache_dir
    if cfg.gram.storage_options:
        options["storage_options"] = cfg.gram.options()
    return cfg.grid, options


def default_config() -> RunConfig:
    """The embedded default (:data:`DEFAULT_TOML`)."""
    return from_dict(None)


def load_config(path) -> RunConfig:
    """Read and validate a run configuration TOML file.

    A relative ``data.path`` is taken relative to the file's directory.
    """
    path = Path(path)
    cfg = from_dict(read_toml(path), source=str(path))
    if cfg.data.bundled is None:
        moved = {key: _beside(path.parent, getattr(cfg.data, key)) for key in ("path", "test_path")
                 if getattr(cfg.data, key) is not None}
        cfg = cfg.with_overrides(data=moved)
    return cfg


def _beside(folder: Path, paths):
    """A relative local path taken relative to ``folder``; a URL or absolute path as is."""
    def one(p):
        return p if "://" in p or Path(p).is_absolute() else str((folder / p).resolve())

    return one(paths) if isinstance(paths, str) else [one(p) for p in paths]


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
    """Refuse a data source that names no file, whose endpoint does not answer within
    ``data.timeout``, or whose layout is wrong (no label column, a non-numeric feature
    column, files of different schemas, an empty file: :func:`muflow.data.tabular.inspect`)
    before anything is started or written: listings and metadata only, no data. The test
    set is checked with the columns the data stage reads it by
    (:func:`muflow.data.tabular.matched_test_source`)."""
    from muflow.data.tabular import inspect, matched_test_source

    if cfg.data.bundled is not None:
        return
    whole_files = not cfg.sweep.on_cluster
    layout = None
    for test in (False, True) if cfg.data.test_path is not None else (False,):
        source = cfg.data.source(test)
        if not source.is_url and len(source.paths()) == 1 and not any(c in source.path for c in "*?["):
            if not Path(source.path).exists():
                raise MuflowInputError(
                    f"data.{'test_path' if test else 'path'} = {source.path!r}: no such file or "
                    f"directory; give an existing data file, directory, glob or URL, or one of "
                    f"{', '.join(BUNDLED_PREFIX + b for b in BUNDLED)}")
        if test:
            source = matched_test_source(source, layout, training=cfg.data.source().label,
                                         whole_files=whole_files)
        layout = inspect(source, whole_files=whole_files)
