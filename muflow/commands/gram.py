"""``python -m muflow gram``: build (or reuse) the blocked Gram store of a data file."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from muflow.commands._cluster import add_cluster_options
from muflow.commands._common import (add_data_options, add_kernel_options, add_store_options,
                                     load_from_args, parse_gamma, store_options_from_args)
from muflow.exceptions import MuflowInputError


def add_parser(subparsers):
    p = subparsers.add_parser(
        "gram",
        help="build or reuse the Gram matrix K(X, X) as a zarr store, computed on a Dask cluster",
        description=(
            "Compute the Gram matrix K(X, X) of a data file tile by tile on Dask workers and "
            "write it to a zarr v3 store (plain zarr.open_array opens it; its attributes, plain "
            "JSON, hold the kernel, a fingerprint of the data, dtype, tile size and the "
            "complete tiles). A store that already matches the data and kernel is reused "
            "without computing anything; a partial one (an interrupted build, missing chunks) "
            "gets only its missing tiles. A store built for other data or another kernel is "
            "refused. Without --scheduler a local cluster of worker processes sized to this "
            "machine is started."),
    )
    add_data_options(p)
    add_kernel_options(p)
    p.add_argument("--offset", type=float, default=0.0,
                   help="constant added to every kernel value (1 for the 'regularized' "
                        "intercept of fit; default: 0)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="stored precision: float32 (default, half the memory and disk) or float64")
    p.add_argument("--tile", type=int, metavar="N",
                   help="side of the square tiles (chunks) of the store; default: chosen from the "
                        "number of samples and the workers' memory")
    p.add_argument("--out", metavar="PATH",
                   help="where to write the store: a directory path such as K.zarr or an fsspec "
                        "URL (s3://bucket/K.zarr); default: a store named after the data and "
                        "kernel inside --cache-dir")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="cache directory mapping (data fingerprint, kernel, dtype) to a store; "
                        "with --out, a pointer to the store is recorded there too")
    add_store_options(p)
    add_cluster_options(p, scheduler_note="start one with `dask scheduler` and workers with "
                                          "`dask worker ADDRESS`", timeout=True, workers=True)
    p.add_argument("--deep-check", action="store_true",
                   help="read every recorded tile of an existing store to find damaged chunks "
                        "(default: only check that they exist)")
    p.add_argument("--verbose", action="store_true",
                   help="Dask's own log messages on stderr (default: into PATH.distributed.log "
                        "beside the --out store, or DIR/distributed.log in --cache-dir)")
    return p


def run(args) -> int:
    from muflow.dask.cluster import client_for
    from muflow.gram.build import ensure_gram
    from muflow.commands._cluster import hint_when_interrupted, log_to_file
    from muflow.gram.store import (GramStore, check_directory, check_dtype, check_store_target,
                                   fingerprint, lookup_cache)
    from muflow.gram.tiling import tile_pairs
    from muflow.kernels import kernel_from_setting

    if args.out is None and args.cache_dir is None:
        raise MuflowInputError("give --out PATH (the store to write) or --cache-dir DIR")
    if args.workers is not None and args.workers < 1:
        raise MuflowInputError(f"--workers must be a positive integer, got {args.workers}; "
                               "leave it out for one worker per core")
    if args.tile is not None and args.tile < 1:
        raise MuflowInputError(f"--tile must be a positive integer, got {args.tile}")
    options = store_options_from_args(args, args.out or args.cache_dir)
    if args.out is not None:  # refused before the data are read or a cluster starts
        check_store_target(args.out, options)
    if args.cache_dir is not None:
        check_directory(args.cache_dir, "--cache-dir")
    X, _ = load_from_args(args)
    setting = {"kernel": args.kernel, "gamma": parse_gamma(args.gamma), "degree": args.degree,
               "coef0": args.coef0}
    kernel = kernel_from_setting(setting, X).with_offset(args.offset)
    dtype = check_dtype(args.dtype)
    cluster = {} if args.workers is None else {"n_workers": args.workers}
    log_file = _log_file(args)
    if log_file is not None:
        log_to_file(log_file, verbose=args.verbose)

    def kept():  # an interrupted build keeps its recorded tiles; the same command continues
        url = args.out or lookup_cache(args.cache_dir, fingerprint(X), kernel, dtype)
        try:
            gram = GramStore.open(url, mode="r", storage_options=options)
        except MuflowInputError:
            return None
        done, total = len(gram.recorded_tiles()), len(tile_pairs(gram.n, gram.tile))
        return f"its finished tiles ({done} of {total}) are kept in {url}" if done else None

    with hint_when_interrupted(args, kept, resume=False), \
            client_for(args.scheduler, timeout=args.timeout, **cluster) as client, \
            _one_line_if_lost(client, args, kept, log_file):
        gram, report = ensure_gram(X, kernel, client=client, store=args.out,
                                   cache_dir=args.cache_dir, dtype=dtype, tile=args.tile,
                                   deep_check=args.deep_check, storage_options=options)
    state = ("reused (complete, nothing computed)" if report.reused else
             f"built: computed {len(report.computed)} of {report.total} tiles in {report.seconds:.1f} s")
    print(f"Gram store: {gram.url}")
    print(f"  {state}")
    print(f"  n={gram.n}  tile={gram.tile}  dtype={gram.dtype}  "
          f"{', '.join(f'{k}={v}' for k, v in kernel.params().items())}  "
          f"size={gram.nbytes / 2**20:.1f} MiB")
    sys.stdout.flush()
    return 0


def _one_line_if_lost(client, args, kept, log_file):
    """With ``--scheduler``, a scheduler lost during the build ends the command in one line
    naming what was kept and the same command, which continues the partial store; a local
    cluster is the command's own and is not lost that way."""
    if not args.scheduler:
        return contextlib.nullcontext()
    from muflow.commands._cluster import one_line_if_scheduler_lost

    return one_line_if_scheduler_lost(client, args, work="the Gram build", kept=kept,
                                      log_file=log_file, resume=False)


def _log_file(args) -> Path | None:
    """Where distributed's own log records go (:func:`muflow.commands._cluster.log_to_file`):
    ``PATH.distributed.log`` beside a local ``--out`` store, else ``DIR/distributed.log`` in
    a local ``--cache-dir``; None (left on stderr) where neither can be written, such as a
    read-only cache that only serves complete stores."""
    from muflow.gram.store import normalize_url

    if args.out is not None and "://" not in normalize_url(args.out):
        store = Path(normalize_url(args.out))
        log = store.with_name(store.name + ".distributed.log")
    elif args.cache_dir is not None and "://" not in args.cache_dir:
        log = Path(args.cache_dir) / "distributed.log"
    else:
        return None
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.open("a").close()
    except OSError:
        return None
    return log
