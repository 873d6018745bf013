"""The sweep's run directory: every file appears whole (:mod:`muflow.atomic`).

Layout::

    sweep.json              the sweep's data digest, grid and options (checked on resume)
    kernels/<i>-<kernel>/   one finished kernel setting: kernel.json and arrays.npz
    results.csv             one row per configuration
    best.json               the best configuration
    best_model/             the best configuration fitted on all samples (muflow.save)
    test_metrics.json       the best model on the test set (with a test set)
    heatmap_<kernel>.png, convergence.png   (muflow.selection.plots)

A kernel setting's directory is written as soon as it is done, so an interrupted sweep
resumed with the same data and options (``resume=True``) reads finished settings back
instead of building their Grams and solving them again.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from muflow.atomic import atomic_directory, write_json, write_text
from muflow.exceptions import MuflowInputError
from muflow.selection.grid import SweepGrid
from muflow.selection.records import KernelRecord

FORMAT_VERSION = 4  # 2: one-vs-one pairs; 3: rows say converged; 4: max_iter in SVC's unit
CSV_COLUMNS = ("kernel", "gamma", "degree", "coef0", "C", "mean_cv_accuracy", "std_cv_accuracy",
               "n_iter", "n_support", "time_s", "stopped_early", "solver", "path", "finished",
               "converged", "kkt_violation")


def data_digest(X, y) -> str:
    """A short hash of the data (shape, values, labels): a resumed sweep must see the same."""
    h = hashlib.sha256()
    h.update(repr(X.shape).encode())
    if hasattr(X, "to_delayed"):  # a dask array: each block hashed where it lives
        import dask

        blocks = X.to_delayed().ravel()
        for digest in dask.compute(*[dask.delayed(_block_digest)(b) for b in blocks]):
            h.update(digest)
    elif hasattr(X, "indptr"):
        for a in (X.data, X.indices, X.indptr):
            h.update(np.ascontiguousarray(a).tobytes())
    else:
        h.update(np.ascontiguousarray(X).tobytes())
    h.update(np.asarray(y).astype(str).tobytes())
    return h.hexdigest()[:32]


def _block_digest(block) -> bytes:
    return hashlib.sha256(np.ascontiguousarray(block).tobytes()).digest()


def _plain(obj):
    """``obj`` as JSON reads it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(obj))


def open_run_dir(out_dir, X, y, grid: dict, options: dict, resume: bool):
    """``(out_dir, meta)``: the sweep's run directory, created, and what it records of the
    sweep (the data's digest, the grid and the options of
    :func:`muflow.selection.run_sweep` that change its results), checked against the record
    of the sweep it resumes (:func:`check_or_write_meta`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    o = options
    meta = {"format_version": FORMAT_VERSION, "data": data_digest(X, y), "grid": _grid_in_order(grid),
            "folds": int(o["folds"]), "seed": int(o["seed"]), "solver": o["solver"],
            "path": o["path"], "intercept": o["intercept"], "tol": float(o["tol"]),
            "max_iter": int(o["max_iter"]), "halving": o["halving"],
            "halving_min_iter": int(o["halving_min_iter"])}
    check_or_write_meta(out_dir, meta, resume)
    return out_dir, meta


def _grid_in_order(grid):
    """A sweep's grid with its C values ascending, the order the sweep runs them in: a grid
    given as C = [10, 1] is the sweep of C = [1, 10] (records written before the grid was
    kept in this order held C as given; :func:`_as_run` compares either)."""
    if isinstance(grid, dict) and isinstance(grid.get("C"), list):
        grid = dict(grid, C=sorted(grid["C"]))
    return grid


def _as_run(meta: dict) -> dict:
    """A sweep's record (``sweep.json``, or a kernel setting's copy) as the sweep runs it,
    for comparing two: its grid as the kernel settings in order and the C values ascending
    (:meth:`SweepGrid.kernel_settings`), so that ``gamma = 0.5`` and ``gamma = [0.5]``, or a
    parameter left out and given as its default (``gamma = "scale"``), are one sweep. A
    grid that does not read as one is compared as written."""
    meta = _plain(meta)
    grid = meta.get("grid") if isinstance(meta, dict) else None
    if isinstance(grid, dict) and set(grid) == {"kernels", "C"}:
        try:
            read = SweepGrid(kernels=grid["kernels"], C=grid["C"]).validate()
            meta["grid"] = {"settings": read.kernel_settings(), "C": read.sorted_C()}
        except (MuflowInputError, KeyError, TypeError, ValueError):
            pass
    return meta


def check_or_write_meta(out_dir: Path, meta: dict, resume: bool):
    """Record the sweep's settings, or on resume refuse a directory of another sweep
    (:func:`_as_run`: the same kernel settings and C values however the grid wrote them).

    A fresh (not resumed) sweep drops the kernel records of an earlier one."""
    meta_file = out_dir / "sweep.json"
    if resume and meta_file.exists():
        old, new = _as_run(json.loads(meta_file.read_text())), _as_run(meta)
        if old != new:
            diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            raise MuflowInputError(
                f"{out_dir} holds a sweep with other settings ({', '.join(diff)} "
                f"{'differs' if len(diff) == 1 else 'differ'}); "
                "resume with the same data and options, or use a new --out directory")
        return
    if not resume:
        clear_earlier_sweep(out_dir)
    else:  # nothing to resume: what is there must not be another's either
        _refuse_outputs_of_no_sweep(out_dir)
    write_json(meta_file, meta)


#: What a sweep writes in its directory (module notes), besides ``sweep.json``.
SWEEP_OUTPUTS = ("kernels", "best_model", "results.csv", "best.json", "test_metrics.json",
                 "convergence.png")


def clear_earlier_sweep(out_dir: Path) -> None:
    """Before a fresh sweep: remove an earlier sweep's outputs (:data:`SWEEP_OUTPUTS` and its
    heatmaps), so that none of them is left beside the new ones (a test_metrics.json or a
    kernel's heatmap the new sweep does not write). Refuses a ``muflow run`` directory,
    whose files a sweep would mix with its own, and what :func:`_refuse_outputs_of_no_sweep`
    refuses."""
    if (out_dir / "stages.log").exists() or (out_dir / "config.json").exists():
        raise MuflowInputError(
            f"{out_dir} is a `muflow run` directory; give the sweep a directory of its own "
            "(--out)")
    _refuse_outputs_of_no_sweep(out_dir)
    for name in SWEEP_OUTPUTS:
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for heatmap in out_dir.glob("heatmap_*.png"):
        heatmap.unlink()


def _refuse_outputs_of_no_sweep(out_dir: Path) -> None:
    """Refuse a directory without ``sweep.json`` that holds files of a sweep's output names
    (a results.csv, a kernels/ folder of one's own): no sweep wrote them, since a sweep
    records itself first, and the sweep would delete or replace them."""
    if os.path.lexists(out_dir / "sweep.json"):
        return
    held = [name for name in SWEEP_OUTPUTS if os.path.lexists(out_dir / name)]
    held += sorted(p.name for p in out_dir.glob("heatmap_*.png"))
    if held:
        raise MuflowInputError(
            f"{out_dir} holds {', '.join(held)}, which no sweep wrote there (it has no "
            "sweep.json) and a sweep would replace; give the sweep a new or empty directory "
            "(--out), or move them away")


def kernel_dir(out_dir: Path, i: int, setting: dict) -> Path:
    return Path(out_dir) / "kernels" / f"{i:03d}-{setting['kernel']}"


def save_kernel(kdir: Path, record: KernelRecord, meta: dict):
    """Write a finished kernel setting (``kernel.json`` and ``arrays.npz``) in one rename."""
    def write(tmp: Path):
        np.savez(tmp / "arrays.npz", **record.arrays())
        info = record.info()
        info["meta"] = meta
        (tmp / "kernel.json").write_text(json.dumps(info, indent=2) + "\n")

    atomic_directory(kdir, write)


def load_kernel(kdir: Path, setting: dict, meta: dict) -> KernelRecord | None:
    """A finished kernel setting's record, or None when it is absent, unreadable (a file
    cut short: the setting is solved again) or from another sweep."""
    try:
        info = json.loads((kdir / "kernel.json").read_text())
        with np.load(kdir / "arrays.npz", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None
    if info.get("setting") != _plain(setting) or _as_run(info.get("meta")) != _as_run(meta):
        return None
    check_finite_record(kdir, arrays, info)
    return KernelRecord.from_saved(info, arrays)


def check_finite_record(kdir: Path, arrays: dict, info: dict):
    """Refuse a kernel setting's record whose refit state or accuracies are not finite: a
    resumed sweep would pick and save a model from it."""
    bad = [name for name in ("alpha_full", "bias_full") if name in arrays
           and not np.all(np.isfinite(arrays[name]))]
    bad += [f"the accuracy of C={r.get('C')}" for r in info.get("rows", [])
            if not np.isfinite(float(r.get("mean_cv_accuracy", 0.0)))]
    if bad:
        raise MuflowInputError(
            f"sweep record {kdir} is damaged ({', '.join(bad)} NaN or inf); delete {kdir} and "
            "resume: that kernel setting is solved again")


def csv_text(table, folds) -> str:
    """``results.csv``: :data:`CSV_COLUMNS` then ``split<f>_accuracy`` per fold."""
    buf = io.StringIO()
    columns = list(CSV_COLUMNS) + [f"split{f}_accuracy" for f in range(folds)]
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in table:
        d = row.to_dict()
        writer.writerow({k: d.get(k, "") for k in columns})
    return buf.getvalue()


def write_outputs(out_dir: Path, table, folds, best: dict, model, test_metrics, *,
                  svmlight_zero_based=None) -> dict:
    """``best_model/``, ``results.csv``, ``best.json`` and ``test_metrics.json``; their paths.

    The model is saved once, with what ``predict`` reads a file by: its ``feature_names_in_``
    and the training svmlight file's indexing ``svmlight_zero_based`` (:func:`muflow.save`),
    so that ``best_model/`` never holds a model without them.

    The model comes first, and a failure (a full disk) removes the files this call wrote
    before it: ``best.json`` never names a ``best_model/`` that is not there, and the
    command's "nothing half-written was kept" holds for the set, not only each file. A
    ``test_metrics.json`` this call does not rewrite (no test set: a resumed sweep given
    none) is removed first, in one unlink: it described an earlier call's best model; so is
    an earlier call's ``best.json``, which would otherwise name a ``best_model/`` that a
    failure after the new one's save removed."""
    from muflow.persistence import save

    (out_dir / "best.json").unlink(missing_ok=True)
    if test_metrics is None:
        (out_dir / "test_metrics.json").unlink(missing_ok=True)
    paths = {}
    try:
        paths["best_model"] = save(model, out_dir / "best_model",
                                   svmlight_zero_based=svmlight_zero_based)
        paths["results"] = write_text(out_dir / "results.csv", csv_text(table, folds))
        paths["best"] = write_json(out_dir / "best.json", best)
        if test_metrics is not None:
            paths["test_metrics"] = write_json(out_dir / "test_metrics.json", test_metrics)
    except BaseException:
        for written in paths.values():
            if Path(written).is_dir():
                shutil.rmtree(written, ignore_errors=True)
            else:
                Path(written).unlink(missing_ok=True)
        raise
    return {k: paths[k] for k in ("results", "best", "best_model", "test_metrics") if k in paths}
