"""Options shared by several subcommands: data input and kernel parameters."""

from __future__ import annotations

from muflow.exceptions import MuflowInputError


def add_data_options(parser, *, required=True):
    parser.add_argument(
        "--data", required=required, metavar="PATH",
        help="data file: CSV (label in the last column unless --label-column), LIBSVM/svmlight "
             "text (.svm, .svmlight, .libsvm or --format svmlight) or .npz with arrays X and y",
    )
    parser.add_argument("--label-column", metavar="NAME",
                        help="CSV only: the column holding the labels (header name or 0-based index)")
    parser.add_argument("--format", dest="data_format", choices=("csv", "svmlight", "npz"),
                        help="data format when the file suffix does not tell")
    parser.add_argument("--n-features", type=int, metavar="N",
                        help="svmlight only: number of features (e.g. 123 for a8a)")


def load_from_args(args, *, path=None):
    from muflow.data import load_data

    return load_data(path or args.data, label_column=args.label_column, fmt=args.data_format,
                     n_features=args.n_features)


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


def parse_C(text):
    """``--C``: a positive number, or 'inf' for the hard margin."""
    return _positive(text, "--C", spelled=" (or 'inf' for the hard margin)")
