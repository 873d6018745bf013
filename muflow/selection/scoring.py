"""Cross-validation scores from the decision values of a batch of columns.

The decision values come from ONE product, ``f = K @ (y * alpha) + b`` (n x m), on a
stored K, and from each fold's own block of K on rows computed on demand
(:func:`muflow.subproblems.decision_values`); fold f's accuracy is read on its held-out rows: the
sign for two classes, otherwise the one-vs-one vote over the pair columns of that
(C, fold), by the same function as :meth:`muflow.SVC.predict`
(:func:`muflow.multiclass.predict_index`). The CV accuracy of a configuration is the mean over folds (std: population
standard deviation, as scikit-learn's ``std_test_score``).
"""

from __future__ import annotations

import numpy as np

from muflow.kernels import KERNEL_PARAMETERS
from muflow.multiclass import n_problems, predict_index
from muflow.selection.grid import PARAM_ORDER
from muflow.selection.records import ConfigurationRow, KernelSolve

#: Two accuracies closer than this are a tie (the earlier configuration wins).
TIE = 1e-12


def fold_predictions(D_cf, n_classes):
    """Class index per sample from the decision values of one (C, fold): (n, P) -> (n,)."""
    return predict_index(D_cf, n_classes)


def cv_accuracy(operator, ycols, alpha, bias, masks, y_enc):
    """Mean validation accuracy per configuration of a batch (used by successive halving)."""
    D = operator.matmul(ycols * alpha) + bias[None, :]
    F = masks.shape[1]
    n_classes = int(y_enc.max()) + 1
    P = n_problems(n_classes)
    per_c = F * P
    out = []
    for k in range(D.shape[1] // per_c):
        accs = []
        for f in range(F):
            held = ~masks[:, f]
            pred = fold_predictions(D[held, k * per_c + f * P:k * per_c + (f + 1) * P], n_classes)
            accs.append(np.mean(pred == y_enc[held]))
        out.append(float(np.mean(accs)))
    return out


def configuration_rows(setting, Cs, res: KernelSolve, masks, y_enc) -> list[ConfigurationRow]:
    """One row per C of a kernel setting: accuracies per fold (on its held-out samples, where
    its column of ``masks``, the training samples of each fold, is False), support vectors
    (mean over folds, by :func:`muflow.svc_prediction.support_mask`), iterations and seconds,
    and whether every fold solve reached tol."""
    from muflow.svc_prediction import support_mask

    rows = []
    n_classes = int(y_enc.max()) + 1
    for c, C in enumerate(Cs):
        accs, n_sv = [], []
        for f in range(masks.shape[1]):
            test = np.flatnonzero(~masks[:, f])
            cols = res.fold_columns(c, f)
            pred = fold_predictions(res.decision[test, cols], n_classes)
            accs.append(float(np.mean(pred == y_enc[test])))
            n_sv.append(int(support_mask(res.alpha[:, cols]).sum()))
        params = {k: setting.get(k) for k in PARAM_ORDER}
        rows.append(ConfigurationRow(
            kernel=setting["kernel"], **params, C=float(C), mean_cv_accuracy=float(np.mean(accs)),
            std_cv_accuracy=float(np.std(accs)), n_iter=int(res.n_iter[c]),
            n_support=float(np.mean(n_sv)), time_s=float(res.seconds[c]),
            stopped_early=bool(res.stopped[c]), solver=res.solver, path=res.path,
            split_accuracies=tuple(accs), converged=bool(res.converged[c]),
            kkt_violation=float(res.kkt_violation[c])))
    return rows


def best_index(rows_per_kernel) -> tuple[int, int]:
    """(kernel setting, C index) of the best mean CV accuracy among the configurations that
    successive halving let run (:func:`contends`; every one where none is); ties: first in
    sweep order."""
    every = not any(contends(row) for rows in rows_per_kernel for row in rows)
    best, where = -1.0, (0, 0)
    for k, rows in enumerate(rows_per_kernel):
        for c, row in enumerate(rows):
            if (every or contends(row)) and row.mean_cv_accuracy > best + TIE:
                best, where = row.mean_cv_accuracy, (k, c)
    return where


def beats(row: ConfigurationRow, records) -> bool:
    """Whether ``row`` is better than every configuration of the settings done before it
    (the rule of :func:`best_index`); only then is its setting refitted on all data."""
    earlier = [r.mean_cv_accuracy for rec in records for r in rec.rows if contends(r)]
    return not earlier or row.mean_cv_accuracy > max(earlier) + TIE


def contends(row: ConfigurationRow) -> bool:
    """Whether a configuration can be the best: not one successive halving stopped early
    (:mod:`muflow.selection.halving`). Its accuracy is that of a rung's iterates, not of
    its solution, so a configuration halving eliminated could otherwise win on a score it
    never had; the ones that ran on are solved to ``tol``, as a sweep without halving
    solves every configuration (scikit-learn's HalvingGridSearchCV chooses among the last
    rung's alike)."""
    return not row.stopped_early


def best_summary(row: ConfigurationRow) -> dict:
    """The content of ``best.json``: the kernel, its parameters, C and the CV accuracy, and
    ``"finished": false`` when the sweep's time limit cut this configuration (chosen only
    when no configuration finished: its scores are those of the iterates it reached)."""
    best = {"kernel": row.kernel}
    for key in KERNEL_PARAMETERS[row.kernel]:
        best[key] = getattr(row, key)
    best.update(C=row.C, cv_accuracy=row.mean_cv_accuracy, cv_accuracy_std=row.std_cv_accuracy)
    if not row.finished:
        best["finished"] = False
    return best
