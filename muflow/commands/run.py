"""``python -m muflow run``: the main job on the embedded default or a data file.

With no arguments: the bundled breast-cancer data (683 x 9), a stratified 80/20 split,
an RBF SVC, a summary table, and a run directory under ``./muflow-runs/`` holding the saved
model, the objective curve (PNG) and a Markdown report that links them.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from muflow.commands._common import add_data_options, add_kernel_options, load_from_args, parse_C, parse_gamma


def add_parser(subparsers):
    p = subparsers.add_parser(
        "run", help="run the main job (default: bundled breast-cancer data, fit and report)",
        description="Fit an SVC on a training set, evaluate it on a held-out test set and write a "
                    "report. With no options it runs the embedded default on the bundled "
                    "breast-cancer data set.",
    )
    add_data_options(p, required=False)
    add_kernel_options(p)
    p.add_argument("--C", default="1.0", help="penalty per unit slack (default: 1)")
    p.add_argument("--solver", default="auto", help="solver name (default: auto)")
    p.add_argument("--test-size", type=float, default=0.2, help="held-out fraction (default: 0.2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/test split (default: 0)")
    p.add_argument("--out", metavar="DIR",
                   help="run directory (default: a new folder under ./muflow-runs/)")
    return p


def run(args) -> int:
    import numpy as np
    from rich.console import Console
    from rich.table import Table
    from sklearn.model_selection import train_test_split

    import muflow
    from muflow.exceptions import MuflowInputError
    from muflow.persistence import write_atomically
    from muflow.report import plot_objective_curves

    console = Console()
    if args.data:
        X, y = load_from_args(args)
        source = args.data
    else:
        X, y = muflow.datasets.load_breast_cancer()
        source = "bundled breast cancer (683 x 9)"
    if not 0 < args.test_size < 1:
        raise MuflowInputError(f"--test-size must be between 0 and 1, got {args.test_size}")
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=args.test_size, random_state=args.seed, stratify=y)
    model = muflow.SVC(kernel=args.kernel, C=parse_C(args.C), gamma=parse_gamma(args.gamma),
                       degree=args.degree, coef0=args.coef0, solver=args.solver)
    with console.status(f"fitting on {X_train.shape[0]} samples ..."):
        t0 = time.perf_counter()
        model.fit(X_train, y_train)
        seconds = time.perf_counter() - t0
    accuracy = model.score(X_test, y_test)

    out = Path(args.out) if args.out else Path("muflow-runs") / datetime.now().strftime("run-%Y%m%d-%H%M%S")

    def write(tmp: Path):
        muflow.save(model, tmp / "model")
        plot_objective_curves(model.objective_curve_, tmp / "objective.png",
                              title=f"{model.solver_} on {source}")
        rows = [
            ("data", source), ("kernel", model.kernel), ("C", f"{model.C:g}"),
            ("solver", model.solver_), ("iterations", str(int(model.n_iter_.max()))),
            ("KKT violation", f"{model.kkt_violation_.max():.2e}"),
            ("support vectors", str(len(model.support_))),
            ("fit time (s)", f"{seconds:.2f}"), ("test accuracy", f"{accuracy:.4f}"),
        ]
        table = "\n".join(f"| {k} | {v} |" for k, v in rows)
        (tmp / "report.md").write_text(
            "# muflow run\n\n| item | value |\n|---|---|\n" + table
            + "\n\n![objective](objective.png)\n\nModel: [model/](model/)\n"
        )
        np.savetxt(tmp / "objective_curve.csv", model.objective_curve_, delimiter=",")

    write_atomically(out, write)
    table = Table(title="muflow run")
    table.add_column("item")
    table.add_column("value")
    for k, v in [("data", source), ("solver", model.solver_), ("iterations", str(int(model.n_iter_.max()))),
                 ("support vectors", str(len(model.support_))), ("fit time (s)", f"{seconds:.2f}"),
                 ("test accuracy", f"{accuracy:.4f}")]:
        table.add_row(k, v)
    console.print(table)
    console.print(f"report: {out / 'report.md'}")
    return 0
