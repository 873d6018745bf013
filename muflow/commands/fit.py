"""``python -m muflow fit``: train an SVC on a data file and save it."""

from __future__ import annotations

import contextlib
from pathlib import Path

from muflow.commands._cluster import add_cluster_options
from muflow.commands._common import (add_data_options, add_kernel_options, parse_C, parse_gamma,
                                     read_from_args, with_names)


def add_parser(subparsers):
    p = subparsers.add_parser(
        "fit", help="train an SVC on a data file and save the model",
        description="Train a kernel SVC on a data file and save it as a model directory "
                    "(JSON + .npz, no pickle) that `python -m muflow predict` reads.",
    )
    add_data_options(p)
    add_kernel_options(p)
    p.add_argument("--C", default="1.0", help="penalty per unit slack; 'inf' is the hard margin (default: 1)")
    p.add_argument("--solver", default="auto",
                   help="solver name (see the README's solver table; default: auto picks a valid one)")
    p.add_argument("--intercept", default="exact", choices=("exact", "regularized", "none"),
                   help="exact: libsvm's bias; regularized: bias as a constant added to the kernel; "
                        "none: through the origin (default: exact)")
    p.add_argument("--tol", type=float, default=1e-3, help="KKT violation at which to stop (default: 1e-3)")
    p.add_argument("--max-iter", type=int, default=-1,
                   help="most iterations in the solver's own unit: passes (multiplicative), "
                        "epochs (cd, adatron), pair steps (smo, as libsvm), outer iterations "
                        "(working_set); -1: no limit (default: -1, as scikit-learn)")
    p.add_argument("--gram", default="auto", choices=("auto", "stored", "rows"),
                   help="stored: build the whole n x n kernel matrix once (refused, naming the "
                        "size, when it does not fit); rows: compute kernel rows on demand "
                        "(memory grows with n, not n^2); auto: stored when it takes at most half "
                        "the available memory (default: auto)")
    p.add_argument("--cache-size", type=float, default=200.0, metavar="MB",
                   help="megabytes of kernel rows to cache when rows are computed on demand "
                        "(libsvm's cache_size; default: 200)")
    p.add_argument("--out", required=True, metavar="MODEL_DIR",
                   help="directory to write the model into (replaced atomically if it exists)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress lines (by default a fit that runs over 2 s reports on stderr "
                        "every 2 s: the working-set solver its outer iteration, KKT gap, kernel "
                        "rows computed and row-cache hit rate, the others iteration and objective)")
    p.add_argument("--time-limit", dest="time_limit", type=float, metavar="SECONDS",
                   help="stop the fit after SECONDS with the best iterate so far (saved, with "
                        "a warning naming the KKT violation reached; default: no limit)")
    p.add_argument("--checkpoint-every", type=int, default=100, metavar="N",
                   help="save the solver state every N iterations (the unit of --max-iter) into "
                        "MODEL_DIR.checkpoint/ "
                        "(atomically; removed once the model is saved, or when the fit "
                        "fails in a way a resume would repeat; kept when it is interrupted; "
                        "default: 100)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted fit from MODEL_DIR.checkpoint/ with what is "
                        "left of --max-iter")
    add_cluster_options(p, scheduler_note="the fit runs on its workers, X split over them",
                        default_note="the fit runs in this process",
                        timeout=True)
    p.add_argument("--verbose", action="store_true",
                   help="with --scheduler: Dask's own log messages on stderr (default: into "
                        "MODEL_DIR.checkpoint/distributed.log)")
    return p


def run(args) -> int:
    import shutil

    import muflow
    from muflow.checkpoint import FILENAME
    from muflow.exceptions import MuflowInputError
    from muflow.solvers.registry import svc_iteration_unit
    from muflow.time_limit import check_time_limit
    from muflow.validation import check_number

    X, y, layout = read_from_args(args, classes=True)
    X = with_names(X, layout.feature_names)  # kept by the model, matched by predict
    check_number(args.tol, "--tol", low=0, closed="neither")
    if args.max_iter != -1:
        check_number(args.max_iter, "--max-iter", integer=True, low=1)
    check_number(args.checkpoint_every, "--checkpoint-every", integer=True, low=1)
    model = muflow.SVC(
        kernel=args.kernel, C=parse_C(args.C), gamma=parse_gamma(args.gamma), degree=args.degree,
        coef0=args.coef0, solver=args.solver, intercept=args.intercept, tol=args.tol,
        max_iter=args.max_iter, verbose=not args.quiet, gram=args.gram, cache_size=args.cache_size,
        time_limit=check_time_limit(args.time_limit, "--time-limit"),
    )
    out = _model_path(args.out)
    checkpoint_dir = out.with_name(out.name + ".checkpoint")
    held = (checkpoint_dir / FILENAME).is_file()
    if held and not args.resume:
        raise MuflowInputError(
            f"{checkpoint_dir} holds the checkpoint of an interrupted fit; pass --resume to "
            "continue it, or delete it to start over"
        )
    if args.resume and not held:
        raise MuflowInputError(f"--resume: no checkpoint at {checkpoint_dir}; run without --resume")
    from muflow.persistence import check_replaceable

    check_replaceable(out)  # refused before the fit, not after it
    from muflow.atomic import check_writable

    check_writable(out, "--out", f"the model {args.out} and its checkpoint")
    before = 0  # iterations the resumed checkpoint holds (n_iter_ counts them too)
    if args.resume:
        from muflow.checkpoint import load_checkpoint

        held_checkpoint = load_checkpoint(checkpoint_dir)
        before = int(held_checkpoint.iteration) if held_checkpoint is not None else 0
    from muflow.commands._cluster import hint_when_interrupted

    kept = _checkpoint_kept(checkpoint_dir)
    with _checkpoint_removed_on_failure(checkpoint_dir), hint_when_interrupted(args, kept), \
            _on_cluster(args, model, checkpoint_dir, kept):
        model.fit(X, y, checkpoint_dir=checkpoint_dir, checkpoint_every=args.checkpoint_every)
    path = muflow.save(model, out, svmlight_zero_based=layout.zero_based)
    shutil.rmtree(checkpoint_dir, ignore_errors=True)
    stopped = args.time_limit is not None and model.fit_time_ >= args.time_limit
    converged = ("converged" if model.converged_.all() else
                 f"NOT converged: stopped at --time-limit {args.time_limit:g} s" if stopped else
                 "NOT converged (raise --max-iter)")
    unit = svc_iteration_unit(model.solver_)  # n_iter_'s unit (SMO: pair steps, not sweeps)
    done = int(model.n_iter_.max())  # counted from the fit's beginning, the checkpoint's too
    counted = f"{done} iterations" if not before else \
        f"{done - before} iterations after the checkpoint's {before} ({done} in all)"
    print(f"solver {model.solver_}: {counted} ({unit}), {converged}, "
          f"KKT violation {model.kkt_violation_.max():.2e}, {len(model.support_)} support vectors, "
          f"training accuracy {model.score(X, y):.4f}, {model.fit_time_:.2f} s")
    if model.rows_computed_:
        t = model.timings_
        hits = t.get("cache_hits", 0) / max(t.get("rows_requested", 0), 1)
        print(f"kernel rows computed on demand: {model.rows_computed_:,} "
              f"({model.rows_computed_ / len(y):.2f} n) in {t.get('fetch_seconds', 0.0):.2f} s, "
              f"row-cache hit rate {hits:.1%}")
    print(f"model saved to {path}")
    return 0


def _model_path(text) -> Path:
    """``--out`` made absolute, ``.`` and ``..`` resolved (a link is not followed: saving
    refuses it), so that its name names the checkpoint beside it (``--out .`` has no name).
    The current directory, or one that holds it, is refused: the save would replace it."""
    import os

    from muflow.exceptions import MuflowInputError

    out, here = Path(os.path.abspath(text)), Path(os.getcwd())
    if out == here or out in here.parents:
        raise MuflowInputError(f"--out {text} is the current directory or holds it, which "
                               "saving the model would replace; give a directory of its own, "
                               "e.g. --out model")
    return out


@contextlib.contextmanager
def _checkpoint_removed_on_failure(checkpoint_dir):
    """A fit that fails removes its checkpoint: a resume would meet the same failure (the
    hard margin on classes that overlap), and the checkpoint left behind refused the next
    fit as an interrupted one's. What a resume can get past once its cause is fixed keeps
    it: an interruption (Ctrl-C, SIGTERM: not an ``Exception``), a lost scheduler (whose
    line names the ``--resume`` command), a full disk or memory, and a resume refused for
    its settings (a :class:`MuflowInputError`: the checkpoint of another run). Anything
    else in the directory (``distributed.log``) stays."""
    from muflow.checkpoint import FILENAME
    from muflow.exceptions import MuflowInputError, SchedulerLostError

    try:
        yield
    except (SchedulerLostError, MuflowInputError, OSError, MemoryError):
        raise
    except Exception:
        (checkpoint_dir / FILENAME).unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: its log stays
            checkpoint_dir.rmdir()
        raise


def _checkpoint_kept(checkpoint_dir):
    """What an interrupted fit kept, for its one line: its last checkpoint, or None."""
    from muflow.checkpoint import FILENAME

    def kept():
        held = (checkpoint_dir / FILENAME).is_file()
        return f"its last checkpoint is kept in {checkpoint_dir}" if held else None

    return kept


@contextlib.contextmanager
def _on_cluster(args, model, checkpoint_dir, kept):
    """With ``--scheduler``, the block fits on that cluster (``model.client``); a scheduler
    lost meanwhile ends the command in one line naming the command that continues it, and
    distributed's own log goes to ``checkpoint_dir/distributed.log``."""
    if not args.scheduler:
        yield
        return
    from muflow.dask.cluster import connect, print_dashboard
    from muflow.commands._cluster import log_to_file, one_line_if_scheduler_lost

    log_file = checkpoint_dir / "distributed.log"
    log_to_file(log_file, verbose=args.verbose)
    model.client = client = connect(args.scheduler, timeout=args.timeout)
    print_dashboard(client)
    try:
        with one_line_if_scheduler_lost(client, args, work="the fit", kept=kept,
                                        log_file=log_file):
            yield
    finally:
        model.client = None
        client.close()
