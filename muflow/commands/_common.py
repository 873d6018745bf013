"""Options shared by several subcommands: data input and kernel parameters."""

from __future__ import annotations

import math

from muflow.exceptions import MuflowInputError


def add_data_options(parser, *, required=True, run=False):
    """``--data URL --format --label-column --storage-options JSON`` (and ``--n-features``):
    the source of :class:`muflow.data.DataSource`, as ``run``'s ``[data]`` table takes it."""
    from muflow.data.source import FORMATS

    parser.add_argument(
        "--data", required=required, metavar="URL",
        help="data: a file, directory, glob or fsspec URL (s3://, gs://, abfs://, file://) of "
             "Parquet, zarr (a group with arrays X and y), CSV (label in the last column unless "
             "--label-column), LIBSVM/svmlight (.svm, .svmlight, .libsvm) or .npz (arrays X and y)"
             + ("; overrides data.path" if run else ""),
    )
    parser.add_argument("--label-column", metavar="NAME",
                        help="the column holding the labels (name or 0-based index; default: the "
                             "last); CSV and Parquet only: npz, zarr and svmlight data have no "
                             "column names (their labels are y, or each line's first number)")
    parser.add_argument("--format", dest="data_format", choices=FORMATS,
                        help="data format when the suffix does not tell")
    parser.add_argument("--storage-options", dest="storage_options", metavar="JSON",
                        help="options of the file system as a JSON object, e.g. "
                             "'{\"client_kwargs\": {\"endpoint_url\": \"http://host:9000\"}}'; "
                             "a value \"${NAME}\" is the environment variable NAME (credentials: "
                             "leave them in the environment)")
    if not run:
        parser.add_argument("--n-features", type=int, metavar="N",
                            help="svmlight only: number of features (e.g. 123 for a8a)")


def add_store_options(parser) -> None:
    """``--store-options JSON``: the file system options of a Gram store URL (``--out`` or
    ``--cache-dir``), as ``[gram] storage_options`` in a run configuration."""
    parser.add_argument("--store-options", dest="store_options", metavar="JSON",
                        help="options of the file system of a Gram store URL (--out or "
                             "--cache-dir s3://...), as a JSON object, e.g. "
                             "'{\"endpoint_url\": \"${S3_ENDPOINT}\"}' (\"${NAME}\": the "
                             "environment variable NAME; credentials: leave them in the "
                             "environment); --storage-options are the data's")


def store_options_from_args(args, location) -> dict | None:
    """``--store-options`` checked as ``[gram] storage_options`` (no literal credential, a
    URL to take them: :func:`muflow.config.takes_storage_options`) and their ``"${NAME}"``
    values read from the environment; None when not given."""
    from muflow.config import takes_storage_options
    from muflow.data.source import expand_env, parse_storage_options

    options = parse_storage_options(getattr(args, "store_options", None), "--store-options")
    if not options:
        return None
    if location is None or not takes_storage_options(str(location)):
        raise MuflowInputError(
            f"--store-options are given, but the Gram store's place ({location or 'none'}) is "
            "a local path, whose stores take no file system options; give --out or "
            "--cache-dir as the URL they are for (s3://bucket/gram), or leave them out")
    return expand_env(options, "--store-options")


def data_overrides(args) -> dict:
    """The ``[data]`` keys the command line sets (``run``): a local path made absolute."""
    from muflow.data.source import absolute_location, parse_storage_options

    out = {}
    if getattr(args, "data", None):
        out["path"] = absolute_location(args.data)
    if getattr(args, "data_format", None):
        out["format"] = args.data_format
    if getattr(args, "label_column", None) is not None:
        out["label_column"] = args.label_column
    if getattr(args, "storage_options", None):
        out["storage_options"] = parse_storage_options(args.storage_options)
    return out


def source_from_args(args, *, path=None, feature_columns=None, zero_based="auto"):
    """The :class:`muflow.data.DataSource` of ``--data`` (or ``path``) and its options."""
    from muflow.data.source import DataSource, parse_storage_options

    return DataSource(path=path or args.data, format=args.data_format,
                      label_column=args.label_column, n_features=getattr(args, "n_features", None),
                      feature_columns=feature_columns, zero_based=zero_based,
                      storage_options=parse_storage_options(getattr(args, "storage_options", None)))


def load_from_args(args, *, path=None, classes=False):
    """``(X, y)`` of ``--data`` (or ``path``) read whole into this process
    (:func:`read_from_args`)."""
    X, y, _ = read_from_args(args, path=path, classes=classes)
    return X, y


def read_from_args(args, *, path=None, classes=False, feature_columns=None, zero_based="auto"):
    """``(X, y, layout)`` of ``--data`` (or ``path``) read whole into this process, with the
    :class:`muflow.data.tabular.Layout` it was read by (its columns' names, an svmlight
    file's indexing); ``classes``: labels to train a classifier on, refused in words when
    they are continuous numbers (a feature column taken for the labels);
    ``feature_columns``: the columns of X, by name; ``zero_based``: svmlight indexing."""
    from muflow.data.local import load_source

    X, y, layout = load_source(source_from_args(args, path=path, feature_columns=feature_columns,
                                                zero_based=zero_based))
    if classes and y is not None:
        from muflow.data.files import check_labels_are_classes

        column = (f"column {args.label_column}" if args.label_column is not None
                  else "the last column")
        check_labels_are_classes(y, labels=f"{column} of {path or args.data}",
                                 choose="--label-column")
    return X, y, layout


def read_as_trained(args, *, names=None, zero_based=None, path=None, trained_on="the model"):
    """``(X, y, layout)`` of ``--data`` (or ``path``) read as the training data were read:
    where ``names`` (the training columns' names) are given and the file names its columns
    too, those columns picked by name, in any order among other columns (one missing, or
    the label column among them, refused in words), X a DataFrame of them; else every
    feature column by position (the caller checks their number). An svmlight file is
    read with the training file's indexing ``zero_based`` (None: guessed from the file).
    ``trained_on`` names the training side in messages ("the model", "--data")."""
    if names is not None:
        from muflow.data.tabular import inspect

        layout = inspect(source_from_args(args, path=path))
        if layout.feature_names is not None:
            _check_named_columns(args, layout, list(names), path=path or args.data,
                                 trained_on=trained_on)
            X, y, layout = read_from_args(args, path=path, feature_columns=tuple(names))
            return with_names(X, names), y, layout
    return read_from_args(args, path=path, zero_based="auto" if zero_based is None else zero_based)


def _check_named_columns(args, layout, names, *, path, trained_on):
    """Refuse a file that lacks some of the training data's named features, or whose
    label column (``--label-column``, default the last) is one of them
    (:func:`muflow.data.columns.matched_names`, the rule every test set follows)."""
    from muflow.data.columns import matched_names, names_text

    if layout.label in names:
        chosen = ("the last column" if args.label_column is None
                  else f"--label-column {args.label_column}")
        no_labels = " (for a file without a label column, --no-labels)" if (
            args.label_column is None and hasattr(args, "no_labels")) else ""
        raise MuflowInputError(
            f"{path}: the label column {layout.label!r} ({chosen}) is one of {trained_on}'s "
            f"features ({names_text(names)}); name the labels' column with --label-column"
            + no_labels)
    matched_names(names, layout.columns, lacking=str(path),
                  columns=f"{trained_on}'s feature columns",
                  after=f" ({trained_on} has {names_text(names)})",
                  fix="give data with those columns", error=MuflowInputError)


def with_names(X, names):
    """X as a pandas DataFrame whose columns are ``names`` (no copy), for an estimator to
    keep them at fit (``feature_names_in_``) and check them at predict, as scikit-learn
    does; X itself where ``names`` is None (columns known by position) or X is sparse."""
    import scipy.sparse as sp

    if names is None or sp.issparse(X):
        return X
    import pandas as pd

    return pd.DataFrame(X, columns=list(names), copy=False)


def add_kernel_options(parser):
    parser.add_argument("--kernel", default="rbf",
                        choices=("rbf", "linear", "poly", "sigmoid", "laplacian"),
                        help="kernel function (default: rbf)")
    parser.add_argument("--gamma", default="scale",
                        help="kernel scale for rbf/poly/sigmoid/laplacian: a positive number, "
                             "'scale' (1 / (n_features * X.var()), the default) or 'auto' (1 / n_features)")
    parser.add_argument("--degree", type=int, default=3, help="degree of the poly kernel (default: 3)")
    parser.add_argument("--coef0", type=float, default=0.0,
                        help="independent term of the poly and sigmoid kernels (default: 0)")


def _positive(text, option, *, words=(), spelled=""):
    """A positive number from the command line, or one of ``words`` as written."""
    if text in words:
        return text
    try:
        value = float(text)
    except ValueError:
        raise MuflowInputError(f"{option} must be a positive number{spelled}, got {text!r}") from None
    if not value > 0:
        raise MuflowInputError(f"{option} must be positive{spelled}, got {text}")
    return value


def parse_gamma(text):
    """``--gamma``: a positive number, 'scale' or 'auto'."""
    return _positive(text, "--gamma", words=("scale", "auto"), spelled=", 'scale' or 'auto'")


def parse_C(text, *, finite=False):
    """``--C``: a positive number, or 'inf' for the hard margin; ``finite`` (a sweep's C
    values, :class:`muflow.selection.SweepGrid`): a positive finite number."""
    if not finite:
        return _positive(text, "--C", spelled=" (or 'inf' for the hard margin)")
    value = _positive(text, "--C")
    if not math.isfinite(value):
        raise MuflowInputError(f"--C must be finite in a sweep (C=inf, the hard margin, is "
                               f"`fit --C inf`), got {text}")
    return value
