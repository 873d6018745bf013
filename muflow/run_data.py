"""The run's data: where the pipeline's data stage (:func:`muflow.pipeline.prepare_data`)
leaves the split, and how the later stages get it back.

A run reads its data in one of two homes (:func:`data_home`): in this process, which writes
the split to ``data.npz`` in the run directory, or on the workers of a Dask cluster, which
keep it: the data stage publishes it on the scheduler (:func:`publish`) so that every later
stage's client finds it there, and a stage that runs on a new cluster (a resumed run)
reads the source and splits it again, by the same seed. Either way ``data.json`` records the
source's fingerprint (its files, sizes, modification times or ETags, and the split's seed:
:func:`source_fingerprint`), which a resumed run compares before it reuses anything
(:func:`check_source_unchanged`).
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from muflow.atomic import atomic_path
from muflow.config import RunConfig
from muflow.data.files import label_text
from muflow.exceptions import MuflowInputError


def _read_json(path):
    return json.loads(Path(path).read_text())


def load_split(run_dir):
    """``(X_train, X_test, y_train, y_test)`` written by :func:`prepare_data`."""
    import scipy.sparse as sp

    run_dir = Path(run_dir)
    try:
        with np.load(run_dir / "data.npz", allow_pickle=False) as d:
            out = {k: d[k] for k in d.files}
    except (ValueError, EOFError, zipfile.BadZipFile) as exc:  # a file cut short or overwritten
        raise MuflowInputError(
            f"{run_dir / 'data.npz'} is damaged ({type(exc).__name__}: {exc}); delete it and "
            "data.json, then resume: the data stage runs again") from None
    for part in ("X_train", "X_test"):
        if f"{part}_data" in out:  # CSR
            out[part] = sp.csr_matrix((out[f"{part}_data"], out[f"{part}_indices"], out[f"{part}_indptr"]),
                                      shape=tuple(out[f"{part}_shape"]))
        values = out[part].data if sp.issparse(out[part]) else out[part]
        if not np.all(np.isfinite(values)):  # the data stage refused non-finite input
            raise MuflowInputError(
                f"{run_dir / 'data.npz'} is damaged ({part} holds NaN or inf); delete it and "
                f"data.json, then resume: the data stage runs again")
    return out["X_train"], out["X_test"], out["y_train"], out["y_test"]


def data_home(cfg: RunConfig, client=None) -> str:
    """Where the data stage reads the source: ``"workers"`` when the sweep runs on the
    cluster (``sweep.on_cluster``) and a client is given (X is used there only, so it is
    read there and never enters this process), ``"process"`` otherwise (the embedded
    default, the bundled sets, every run without a cluster)."""
    return "workers" if cfg.sweep.on_cluster and client is not None and not cfg.data.bundled else "process"


def source_fingerprint(cfg: RunConfig) -> dict:
    """What the run directory records of its data (:meth:`muflow.data.DataSource.fingerprint`
    of ``data.path`` and ``data.test_path``, and the split's seed): a listing, no data read."""
    if cfg.data.bundled:
        fp = {"bundled": cfg.data.bundled}
    else:
        fp = {"source": cfg.data.source().fingerprint()}
        if cfg.data.test_path is not None:
            fp["test_source"] = cfg.data.source(test=True).fingerprint()
    return {**fp, "split": None if cfg.data.test_path is not None else
            {"seed": cfg.data.seed, "test_size": cfg.data.test_size}}


def check_source_unchanged(cfg: RunConfig, run_dir) -> None:
    """Refuse to resume on changed data: the source's fingerprint now against the one the
    data stage recorded in ``data.json`` (nothing to compare before that stage ran)."""
    done = Path(run_dir) / "data.json"
    if not done.exists():
        return
    recorded = _read_json(done).get("fingerprint")
    now = json.loads(json.dumps(source_fingerprint(cfg), default=str))
    if recorded is not None and recorded != now:
        raise MuflowInputError(
            f"the data changed since {run_dir} was started ({_what_changed(recorded, now)}); "
            "resuming would mix results of two data sets: start a new run (a new --out)")


def _what_changed(old: dict, new: dict) -> str:
    for key in ("source", "test_source"):
        a, b = (old.get(key) or {}).get("files", []), (new.get(key) or {}).get("files", [])
        paths_a, paths_b = {f["path"]: f for f in a}, {f["path"]: f for f in b}
        for path in sorted(set(paths_a) | set(paths_b)):
            if path not in paths_b:
                return f"{path} is gone"
            if path not in paths_a:
                return f"{path} is new"
            if paths_a[path] != paths_b[path]:
                return f"{path} was modified"
    return "its description differs"


def check_classes(cfg: RunConfig, y):
    """The classes of the labels ``y``, refused in words when they are continuous numbers
    (:func:`muflow.data.files.check_labels_are_classes`, as ``fit`` refuses them), fewer
    than two, or one too small for the stratified folds."""
    from muflow.data.files import check_labels_are_classes

    where = _where(cfg)
    column = (f"column {cfg.data.label_column}" if cfg.data.label_column is not None
              else "the last column")
    check_labels_are_classes(y, labels=f"{column} of {where}",
                             choose="--label-column or data.label_column")
    classes, counts = np.unique(y, return_counts=True)
    if len(classes) < 2:
        raise MuflowInputError(f"{where}: needs at least two classes, found {len(classes)}")
    if counts.min() < max(2, cfg.sweep.folds):
        raise MuflowInputError(
            f"{where}: class {label_text(classes[counts.argmin()])} has {counts.min()} samples; "
            f"stratified {cfg.sweep.folds}-fold cross-validation needs at least {cfg.sweep.folds}")
    return classes


def check_training_split(cfg: RunConfig, y, y_train) -> None:
    """Refuse a seeded split that leaves a class fewer training samples than the folds
    (:func:`check_classes` counted all of ``y``; the test split takes its share of every
    class), naming the class and what to change, before the sweep meets it."""
    folds = cfg.sweep.folds
    classes, counts = np.unique(y, return_counts=True)
    left = np.array([np.count_nonzero(np.asarray(y_train) == c) for c in classes])
    if left.min() < folds:
        short = left.argmin()
        name = label_text(classes[short])
        raise MuflowInputError(
            f"{_where(cfg)}: class {name} has {counts[short]} samples, {left[short]} of them left "
            f"for training by the test split (data.test_size = {cfg.data.test_size:g}); "
            f"stratified {folds}-fold cross-validation needs at least {folds}: use fewer folds "
            f"(sweep.folds), a smaller data.test_size, or more samples of class {name}")


def _where(cfg: RunConfig) -> str:
    return f"data path {cfg.data.source().label!r}" if not cfg.data.bundled else "the data"


def check_solver_on_data(cfg: RunConfig, X_train):
    """Refuse, before the data stage finishes, a ``sweep.solver`` that cannot solve a kernel
    setting on these data (MUNK on a linear kernel over signed data): the part of the
    configuration's check (:func:`muflow.config.from_dict`) that the data decide, by the
    registry's :func:`~muflow.solvers.registry.choose_solver` with the sign the sweep weighs
    (:meth:`muflow.kernels.Kernel.is_nonnegative` on the training split). Only a solver
    that needs a non-negative kernel and a setting whose sign the data decide are looked at."""
    from muflow.kernels import kernel_from_setting
    from muflow.selection.grid import setting_label
    from muflow.solvers.registry import choose_solver, get_solver

    solver, intercept = cfg.sweep.solver, cfg.sweep.intercept
    if solver == "auto" or not get_solver(solver).needs_nonnegative_kernel:
        return
    for setting in cfg.grid.kernel_settings():
        if kernel_from_setting(setting, None, intercept=intercept).nonnegative_without_data() is not None:
            continue  # decided, and checked, when the configuration was read
        kernel = kernel_from_setting(setting, X_train, intercept=intercept)
        try:
            choose_solver(solver, intercept=intercept, kernel_nonnegative=kernel.is_nonnegative(X_train))
        except MuflowInputError as exc:
            raise type(exc)(f"sweep.solver = {solver!r} cannot solve the grid's kernel setting "
                            f"{setting_label(setting)} on these data: {exc}") from None


def test_source(cfg: RunConfig, layout, *, whole_files: bool = True):
    """The :class:`muflow.data.DataSource` of ``data.test_path``, its columns matched to the
    training set's (``layout``, of ``data.path``): :func:`muflow.data.tabular.matched_test_source`."""
    from muflow.data.tabular import matched_test_source

    return matched_test_source(cfg.data.source(test=True), layout,
                               training=cfg.data.source().label, whole_files=whole_files)


def check_test(X_train, X_test, *layouts):
    """Refuse a test set of another number of features than the training set, with the fix
    its format calls for (``layouts``: the two sources' :class:`~muflow.data.tabular.Layout`,
    None for a bundled set): an svmlight file has as many features as its largest index, so
    two files of one feature set differ unless ``data.n_features`` says how many."""
    n_test, n_train = X_test.shape[1], X_train.shape[1]
    if n_test == n_train:
        return
    if any(layout is not None and layout.format == "svmlight" for layout in layouts):
        fix = (f" (an svmlight file has as many as its largest index); set data.n_features = "
               f"{max(n_test, n_train)} to read both with the same columns")
    else:
        fix = "; give a test set of the same columns"
    raise MuflowInputError(f"data.test_path has {n_test} features and data.path {n_train}{fix}")


def check_test_labels(y, y_test) -> None:
    """Refuse test labels of another kind than the training labels (text against numbers)
    before the sweep runs, not when the test set is scored after it
    (:func:`muflow.data.test_labels.unseen_classes`)."""
    from muflow.data.test_labels import unseen_classes

    unseen_classes(np.asarray(y_test), np.unique(np.asarray(y)), test="data.test_path",
                   training="data.path")


def read_split_on_workers(cfg: RunConfig, client):
    """``(X_train, X_test, y_train, y_test, layout)``: X read by the workers
    (:func:`muflow.data.workers.read_on_workers`) and split there, persisted."""
    from muflow.data.workers import even_blocks, persisted, read_on_workers, split_on_workers

    X, y, layout = read_on_workers(cfg.data.source(), client)
    if cfg.data.test_path is not None:
        X_test, y_test, test_layout = read_on_workers(test_source(cfg, layout, whole_files=False),
                                                      client)
        check_test(X, X_test, layout, test_layout)
        check_test_labels(y, y_test)
        with client.as_current():
            X, X_test = persisted(client, even_blocks(X, client), even_blocks(X_test, client))
        return X, X_test, y, y_test, layout
    check_classes(cfg, y)
    X_train, X_test, y_train, y_test = split_on_workers(X, y, cfg.data.test_size, cfg.data.seed,
                                                        client)
    check_training_split(cfg, y, y_train)
    return X_train, X_test, y_train, y_test, layout


_PARTS = ("X_train", "X_test", "y_train", "y_test")


def _dataset_names(run_dir) -> dict:
    """The names the split is published under on the scheduler: one set per run directory."""
    import hashlib

    key = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:16]
    return {part: f"muflow-{key}-{part}" for part in _PARTS}


def publish(client, run_dir, *parts):
    """Publish the split on the scheduler, so that the later stages' clients (each Prefect
    task opens its own) find it where it is, not read again."""
    names = _dataset_names(run_dir)
    for part, value in zip(_PARTS, parts):
        if part.startswith("y"):
            value = client.scatter(np.asarray(value))
        if names[part] in client.list_datasets():
            client.unpublish_dataset(names[part])
        client.publish_dataset(**{names[part]: value})


def split_on_cluster(cfg: RunConfig, run_dir, client):
    """``(X_train, X_test, y_train, y_test)`` of a run whose data the workers read: the
    split published by the data stage, or, on a new cluster (a resumed run), the source
    read and split again (its fingerprint was checked against ``data.json`` first)."""
    names = _dataset_names(run_dir)
    if not all(n in client.list_datasets() for n in names.values()):
        check_source_unchanged(cfg, run_dir)
        X_train, X_test, y_train, y_test, _ = read_split_on_workers(cfg, client)
        publish(client, run_dir, X_train, X_test, y_train, y_test)
    out = [client.get_dataset(names[p]) for p in _PARTS]
    return out[0], out[1], np.asarray(out[2].result()), np.asarray(out[3].result())


def release_data(run_dir, client) -> None:
    """Unpublish the split of ``run_dir`` (the workers free it); nothing when none is."""
    published = set(client.list_datasets())
    for name in _dataset_names(run_dir).values():
        if name in published:
            client.unpublish_dataset(name)


def reads_on_workers(run_dir) -> bool:
    """Whether the data stage of ``run_dir`` left the split on the workers."""
    done = Path(run_dir) / "data.json"
    return done.exists() and _read_json(done).get("home") == "workers"


def _split(cfg: RunConfig, run_dir, client=None):
    """``(X_train, X_test, y_train, y_test)`` where the data stage left them: ``data.npz``
    in this process, or the workers' (dask arrays; needs ``client``)."""
    if reads_on_workers(run_dir):
        if client is None:
            raise MuflowInputError(f"{run_dir}: the data were read by the workers of a cluster; "
                                   "this stage needs one (sweep.on_cluster with a cluster)")
        return split_on_cluster(cfg, run_dir, client)
    return load_split(run_dir)


def training_split(cfg: RunConfig, run_dir, client=None):
    """``(X_train, y_train)`` where the data stage left them: ``data.npz`` in this
    process, or the workers' (a dask array; needs ``client``)."""
    X_train, _, y_train, _ = _split(cfg, run_dir, client)
    return X_train, y_train


def test_split(cfg: RunConfig, run_dir, client=None):
    """``(X_test, y_test)``, as :func:`training_split`."""
    _, X_test, _, y_test = _split(cfg, run_dir, client)
    return X_test, y_test


def split_in_process(cfg: RunConfig, run_dir, fingerprint) -> dict:
    """The data stage in this process: the data read here, split by scikit-learn's
    ``train_test_split`` (stratified, ``data.seed``) and written to ``data.npz``; returns
    the stage's ``data.json``."""
    import scipy.sparse as sp
    from sklearn.model_selection import train_test_split

    layout = None
    if cfg.data.bundled:
        import muflow.datasets as ds

        X, y = getattr(ds, f"load_{cfg.data.bundled}")()
        source = f"bundled {cfg.data.bundled.replace('_', ' ')}"
    else:
        from muflow.data.local import load_source

        X, y, layout = load_source(cfg.data.source())
        source = cfg.data.source().label
    classes = check_classes(cfg, y)
    if cfg.data.test_path is not None:
        from muflow.data.local import load_source

        X_test, y_test, test_layout = load_source(test_source(cfg, layout))
        check_test(X, X_test, layout, test_layout)
        check_test_labels(y, y_test)
        X_train, y_train = X, y
    else:
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=cfg.data.test_size, random_state=cfg.data.seed, stratify=y)
        check_training_split(cfg, y, y_train)
    check_solver_on_data(cfg, X_train)
    arrays = {"y_train": np.asarray(y_train), "y_test": np.asarray(y_test)}
    for name, part in (("X_train", X_train), ("X_test", X_test)):
        if sp.issparse(part):
            part = sp.csr_matrix(part)
            arrays.update({f"{name}_data": part.data, f"{name}_indices": part.indices,
                           f"{name}_indptr": part.indptr, f"{name}_shape": np.asarray(part.shape)})
        else:
            arrays[name] = np.asarray(part)
    with atomic_path(run_dir / "data.npz", suffix=".npz") as tmp:
        np.savez(tmp, **arrays)
    info = {"source": source, "home": "process",
            "n_samples": int(X_train.shape[0] + X_test.shape[0]), "n_features": int(X.shape[1]),
            "n_train": int(X_train.shape[0]), "n_test": int(X_test.shape[0]),
            "classes": [c.item() if hasattr(c, "item") else c for c in classes],
            "fingerprint": fingerprint}
    if layout is not None:
        info.update(layout_record(layout))
    return info


def layout_record(layout) -> dict:
    """What ``data.json`` records of how ``data.path`` was read (its
    :class:`~muflow.data.tabular.Layout`): the format, the feature and label columns, the
    features' names where the file names its columns (None where they are known by
    position) and an svmlight file's indexing; the saved model keeps the last two
    (:func:`muflow.pipeline.refit_best`), so that ``predict`` reads a file as this one was."""
    return {"format": layout.format, "features": list(layout.features), "label": layout.label,
            "feature_names": None if layout.feature_names is None else list(layout.feature_names),
            "svmlight_zero_based": layout.zero_based}
