"""``python -m muflow predict``: predict with a saved model."""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

from muflow.commands._common import add_data_options


def add_parser(subparsers):
    p = subparsers.add_parser(
        "predict", help="predict labels for a data file with a saved model",
        description="Predict labels with a model saved by `python -m muflow fit`. Prints one "
                    "label per line (or writes --out CSV) and, when the file has labels, the "
                    "accuracy. A model fitted on named columns (a CSV header, Parquet) takes "
                    "them by name from a file that names its columns, in any order; else by "
                    "position.",
    )
    p.add_argument("--model", required=True, metavar="MODEL_DIR", help="model directory written by fit")
    add_data_options(p)
    p.add_argument("--no-labels", action="store_true",
                   help="the data have no label column: every column is a feature (CSV, "
                        "Parquet; an .npz needs only X)")
    p.add_argument("--out", metavar="CSV", help="write predictions (and decision values) to this CSV file")
    return p


def run(args) -> int:
    import numpy as np

    import muflow

    _check_model_dir(args.model)
    model = muflow.load(args.model)
    if args.out:  # refused before the data are read and predicted, not after
        from muflow.atomic import check_writable
        from muflow.exceptions import MuflowInputError

        if Path(args.out).is_dir():
            raise MuflowInputError(f"--out {args.out} is a directory; give the CSV file to write")
        check_writable(args.out, "--out", f"the predictions {args.out}")
    if args.no_labels:
        if args.label_column is not None:
            from muflow.exceptions import MuflowInputError

            raise MuflowInputError("--no-labels and --label-column contradict each other; give one")
        args.label_column = False
    X, y = _read_for(model, args)
    pred = model.predict(X)
    if args.out:

        from muflow.atomic import write_text

        scores = np.asarray(model.decision_function(X))
        scores = scores[:, None] if scores.ndim == 1 else scores
        out = Path(args.out)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")  # a label with a comma is quoted
        writer.writerow(["prediction"] + [f"decision_{j}" for j in range(scores.shape[1])])
        writer.writerows([p] + [f"{s:.10g}" for s in row] for p, row in zip(pred, scores))
        write_text(out, buffer.getvalue())
        print(f"predictions written to {out}")
    else:
        sys.stdout.write("\n".join(str(p) for p in pred) + "\n")
    if y is not None and len(y) == len(pred):
        try:
            truth, known, pred = _as_label_text(y), _as_label_text(model.classes_), _as_label_text(pred)
            accuracy = float(np.mean(pred == truth))
            print(f"accuracy {accuracy:.4f} on {len(y)} samples", file=sys.stderr)
            unknown = sorted(set(truth) - set(known))
            if unknown:
                shown = ", ".join(unknown[:5]) + (", ..." if len(unknown) > 5 else "")
                print(f"muflow predict: warning: the file's labels {shown} are none of the "
                      f"model's classes ({', '.join(known[:5])}{', ...' if len(known) > 5 else ''})"
                      "; the accuracy counts them as errors", file=sys.stderr)
        except (TypeError, ValueError):
            pass
    return 0


#: Where a sweep and a run keep their model, inside the directory --out named.
_MODEL_INSIDE = {"best_model": "a sweep's directory", "model": "a run's directory"}


def _check_model_dir(text) -> None:
    """Refuse, naming the fix, a --model that does not exist, or a sweep's or a run's
    directory (their model is its best_model/ or model/), which the model loader calls no
    model directory in words that say neither."""
    import os

    from muflow.exceptions import MuflowInputError

    path = Path(text)
    if not os.path.lexists(path):
        raise MuflowInputError(f"--model {text} does not exist; give the directory that "
                               "`fit --out` wrote (or a sweep's best_model/, a run's model/)")
    if (path / "model.json").exists():
        return
    for inner, what in _MODEL_INSIDE.items():
        if (path / inner / "model.json").is_file():
            raise MuflowInputError(f"--model {text} is {what}, not a model; its model is "
                                   f"{path / inner}: give --model {path / inner}")


def _read_for(model, args):
    """``(X, y)`` of ``--data`` for ``model``: the model's features picked by name where the
    model and the file both name their columns (in any order, among others), else the
    file's features by position, their number checked; an svmlight file indexed as the
    training file was (recorded by fit), else guessed."""
    from muflow.commands._common import read_as_trained

    X, y, layout = read_as_trained(args, names=getattr(model, "feature_names_in_", None),
                                   zero_based=getattr(model, "_svmlight_zero_based", None))
    _check_width(args, model, X.shape[1], layout.format)
    return X, y


def _check_width(args, model, width, data_format):
    """Refuse data whose width is not the model's, saying what the model takes: its
    features, or for a precomputed kernel the kernel values K(test, train). An svmlight
    file is as wide as its highest index: --n-features widens a narrower one, never a
    wider one."""
    expected = getattr(model, "n_features_in_", None)
    if expected is None or width == expected:
        return
    from muflow.exceptions import MuflowInputError

    if getattr(model, "kernel", None) == "precomputed":
        raise MuflowInputError(
            f"{args.data} has {width} columns of values, the model in {args.model} has a "
            "precomputed kernel: give the kernel values K(test, train), one column per "
            f"training sample ({expected})")
    if data_format == "svmlight" and width > expected:
        raise MuflowInputError(
            f"{args.data} uses feature indices beyond the model's {expected} features (it "
            f"holds {width}); give data with the model's features")
    raise MuflowInputError(
        f"{args.data} has {width} features, the model in {args.model} was fitted on "
        f"{expected}; give data with the model's features (for svmlight, --n-features "
        f"{expected}"
        + ("; for a file without a label column, --no-labels" if width == expected - 1
           and not args.no_labels and _has_label_column(args) else "") + ")")


def _as_label_text(labels):
    """Labels as text to compare a file's with a model's, read as the data readers read
    them (:func:`muflow.data.files._labels`: a label 1.0 is the label 1 of a CSV file)."""
    import numpy as np

    from muflow.data.files import _labels

    labels = np.asarray(labels)
    return (_labels(labels) if labels.dtype.kind in "fiuUS" else labels).astype(str)


def _has_label_column(args) -> bool:
    """Whether the data file's format has a label column to leave out (an svmlight file
    always holds its labels)."""
    from muflow.data.files import detect_format

    return detect_format(Path(args.data), getattr(args, "format", None)) != "svmlight"
