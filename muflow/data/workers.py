"""A source read by the Dask workers, each reading its own partitions: X never passes
through this process.

:func:`read_on_workers` builds the read (``dask.dataframe.read_parquet`` or ``read_csv``
over the files :func:`muflow.data.tabular.inspect` listed, ``dask.array.from_zarr``, or one
worker loading an npz or svmlight file), persists it once on the workers, checks there
that every partition has rows and finite values, and brings back the labels only (a few
bytes a row: 10^8 int8 labels are 100 MB). :func:`split_on_workers` splits X by the
seeded stratified split (:func:`split_mask`, computed here from y alone, a byte a row):
each side keeps the rows in source order, selected block by block where they live, and is
persisted; the read itself is then released. This follows the convention of
``xgboost.dask`` and Dask's own readers: a URL, columns and ``storage_options``, read where
the data will be used.

Notes
-----
Memory: the workers hold X once as read and, while it is split, once more as the two
sides; the client holds y, the split's indices and the task graph (a few hundred bytes a
partition).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from muflow.dask.scheduler_workers import require_workers, scheduler_workers
from muflow.data.files import _labels
from muflow.data.local import check_labels
from muflow.data.source import DataSource
from muflow.data.tabular import Layout, inspect
from muflow.exceptions import DataFileError


def read_on_workers(source: DataSource, client, *, even: bool = False):
    """``(X, y, layout)``: X a float64 dask array persisted on the workers of ``client``
    (one row block per partition, or ``even`` ones: :func:`even_blocks`), y a NumPy array
    here. A cluster without workers is refused first (it would wait for one forever)."""
    layout = inspect(source, whole_files=False)
    require_workers(client)
    with client.as_current():  # every compute below runs on this client's workers
        return _read(source, layout, client, even)


def _read(source, layout, client, even):
    import dask.array as da

    where = f"data path {source.label!r}"
    options = source.options()
    try:
        if layout.format == "zarr":
            root = source.paths()[0]
            kw = {"storage_options": options} if "://" in root and options else {}
            X = persisted(client, da.from_zarr(root, component="X", **kw).astype(np.float64))
            y = da.from_zarr(root, component="y", **kw).compute()
        elif layout.label is None:  # npz or svmlight: one file, loaded by one worker
            X, y, zero_based = _whole_file_on_a_worker(source, layout, client)
            if zero_based is not None:  # an svmlight file's indexing, as the worker read it
                layout = replace(layout, zero_based=zero_based)
        else:
            X, y = _frame_on_workers(source, layout, options, client, where)
        _check_finite(X, where)
    except DataFileError:
        raise
    except Exception as exc:  # a reader failing on a worker: one line, its own words
        raise DataFileError(f"{where}: the workers could not read it ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:300]})") from None
    if even:
        X = persisted(client, even_blocks(X, client))
    y = np.asarray(y)
    if y.dtype.kind not in "iub":  # integer labels are kept as stored (int8: a byte a row)
        y = _labels(y)
    check_labels(y, where)
    return X, y, layout


def _frame_on_workers(source, layout: Layout, options, client, where):
    import dask.dataframe as dd

    columns = [*layout.features, layout.label]
    if layout.format == "parquet":
        frame = dd.read_parquet(list(layout.urls), columns=columns, storage_options=options,
                                ignore_metadata_file=True, split_row_groups=False)
    else:
        frame = dd.read_csv(list(layout.urls), header=0 if layout.header else None,
                            storage_options=options, skipinitialspace=True)
        frame.columns = [str(c) for c in frame.columns]
        frame = frame[columns]
    frame = persisted(client, frame)  # read once; X and y both come from this copy
    for name in layout.features:
        if frame[name].dtype.kind not in "biuf":
            raise DataFileError(f"{where}: feature column {name!r} is not numeric "
                                f"({frame[name].dtype}); fix its values or leave it out of "
                                "feature_columns")
    lengths = [int(n) for n in frame.map_partitions(len).compute()]
    empty = [i for i, n in enumerate(lengths) if n == 0]
    if empty:
        raise DataFileError(f"{where}: partition {empty[0]} holds no rows (an empty partition"
                            f"{'' if len(empty) == 1 else f', and {len(empty) - 1} more'}); remove "
                            "empty files")
    X = frame[list(layout.features)].to_dask_array(lengths=lengths).astype(np.float64)
    X = persisted(client, X)
    y = frame[layout.label].to_dask_array(lengths=lengths).compute()
    del frame  # X holds its own copy now
    return X, y


def _whole_file_on_a_worker(source, layout, client):
    import dask.array as da

    loaded = client.submit(_load_dense, source, pure=False)
    shape, y, zero_based = client.submit(_shape_and_labels, loaded).result()
    X = persisted(client, da.from_delayed(client.submit(_first, loaded), shape=tuple(shape),
                                           dtype=np.float64))
    return X, y, zero_based


def persisted(client, *collections):
    """The collections persisted on the workers and computed: only then may the caller
    drop the collections they were computed from (their keys would be released under
    tasks still waiting for them)."""
    from distributed import wait

    out = client.persist(list(collections))
    wait(out)
    return out[0] if len(out) == 1 else out


def _load_dense(source):
    """On a worker: the file's (X, y, zero_based), X dense float64 (a kernel row is dense
    anyway), ``zero_based`` how an svmlight file's indices were read (None for npz): the
    model keeps it, so that a test or prediction file is read with the training file's
    indexing instead of a guess of its own."""
    from muflow.data.local import load_source

    X, y, layout = load_source(source)
    X = X.toarray() if hasattr(X, "toarray") else X
    return np.ascontiguousarray(X, dtype=np.float64), y, layout.zero_based


def _shape_and_labels(loaded):
    return loaded[0].shape, loaded[1], loaded[2]


def _first(loaded):
    return loaded[0]


def _check_finite(X, where: str) -> None:
    from muflow.dask.row_blocks import check_finite_blocks

    try:
        check_finite_blocks(X)
    except ValueError as exc:
        raise DataFileError(f"{where}: {exc}") from None


#: Rows of y each stratified draw of the split covers (its own seed: ``[seed, block]``).
SPLIT_ROWS = 1 << 20


def split_mask(y, test_size: float, seed: int) -> np.ndarray:
    """The seeded, stratified split as a boolean mask (True: a test row).

    y is taken in consecutive blocks of :data:`SPLIT_ROWS` rows; in each block, every class
    sends ``rint(test_size * count)`` of its rows, drawn by ``default_rng([seed, block])``,
    to the test side. A split of fewer rows is one stratified draw over all of them; a larger
    one is stratified within each block, and needs a few bytes a row beyond y (scikit-learn's
    ``train_test_split`` permutes and copies every index, several times the labels' bytes).
    """
    y = np.asarray(y)
    mask = np.zeros(len(y), dtype=bool)
    for b, lo in enumerate(range(0, len(y), SPLIT_ROWS)):
        block = y[lo:lo + SPLIT_ROWS]
        rng = np.random.default_rng([int(seed), b])
        for c in np.unique(block):
            members = np.flatnonzero(block == c)
            k = int(np.rint(test_size * members.size))
            if k:
                mask[lo + rng.choice(members, k, replace=False)] = True
    return mask


def _rows(block, keep):
    return block[keep[:, 0]]


def select_rows(X, keep: np.ndarray, client):
    """The rows of X where ``keep`` is True, in order, selected block by block where X's
    blocks are (no shuffle): each block's slice of the mask is scattered to the workers
    once, not embedded in the task graph."""
    import dask.array as da

    bounds = np.cumsum((0,) + tuple(X.chunks[0]))
    pieces = [keep[lo:hi, None] for lo, hi in zip(bounds[:-1], bounds[1:])]
    futures = client.scatter(pieces)
    mask = da.concatenate([da.from_delayed(f, shape=p.shape, dtype=bool)
                           for f, p in zip(futures, pieces)]).rechunk((X.chunks[0], (1,)))
    counts = tuple(int(p.sum()) for p in pieces)
    return X.map_blocks(_rows, mask, chunks=(counts, X.chunks[1]), dtype=X.dtype)


#: Largest row block of a split side (bytes): a worker's partition of the solver holds one.
BLOCK_BYTES = 128 << 20


def even_blocks(X, client):
    """X in row blocks of equal size, as many as the workers (more where a block would pass
    :data:`BLOCK_BYTES`), whatever the files' sizes were: the solver's partitions are these
    blocks, so a run gives the same model from one CSV file as from eight Parquet files."""
    n, d = X.shape
    k = max(len(scheduler_workers(client)), 1,
            -(-n * d * 8 // BLOCK_BYTES))
    return X.rechunk({0: -(-n // k), 1: -1})


def split_on_workers(X, y, test_size: float, seed: int, client):
    """``(X_train, X_test, y_train, y_test)``: X in even blocks (:func:`even_blocks`), its
    two sides selected block by block on the workers by :func:`split_mask` and persisted;
    the labels here."""
    test = split_mask(y, test_size, seed)
    X = even_blocks(X, client)
    with client.as_current():
        X_train, X_test = persisted(client, select_rows(X, ~test, client),
                                    select_rows(X, test, client))
    return X_train, X_test, y[~test], y[test]
