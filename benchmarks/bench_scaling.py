"""How a muflow fit scales with the threads and the Dask workers it is given (issue 37, item 4).

Every measurement is one ``muflow.SVC(...).fit`` in a FRESH process (this script started
again in its ``--worker`` mode), pinned with ``taskset`` to its cores, its compiled loops
warmed by a small fit of the same estimator before the timed one. The configurations run in
rounds, their order rotated each round (slow drift on a shared machine falls on every
configuration alike), ``--repeats`` rounds (default 5); the summary takes medians.

Thread configurations (``--threads``, default ``1,2,4/2``): ``T`` is T threads on T cores
(``taskset -c`` the first T CPUs this script may use), ``T/C`` T threads on C cores: the
default's ``4/2`` runs 4 threads on 2 cores (``MUFLOW_NUM_THREADS=4`` under ``taskset -c
0,1``), the oversubscription a user gets by asking for more threads than cores. Where
``muflow.SVC`` takes ``n_jobs`` (checked with :mod:`inspect` in the worker), it is passed
``n_jobs=T`` too; otherwise the fit runs on what muflow chooses on those cores, and the
summary says so. ``OMP_NUM_THREADS`` and ``MUFLOW_NUM_THREADS`` from the calling shell are
not passed on: the configuration alone sets the threads.

Cases (``--cases``, comma list; default ``a8a,gen100k,multiclass,dask``):

- ``a8a``: ../shared/data/a8a (22,696 x 123, sparse binary), held out a8a.t (9,865 rows);
  RBF gamma=0.05, C=1. ``--n`` trains on its first n rows (a smoke run).
- ``gen100k``: ``make_classification(n_features=50, n_informative=20, flip_y=0.05,
  random_state=0)`` with n / 0.8 samples, a seeded 20 % held out (``train_test_split(...,
  test_size=0.2, random_state=0)``), so that n = 100,000 rows train (``--n`` sets n);
  RBF gamma=0.02, C=1.
- ``multiclass``: the same generator with ``n_classes=4``, 30,000 training rows (``--n``);
  RBF gamma=0.02, C=1 (one-vs-one, muflow's default).
- ``dask``: the generator of ``gen100k`` at 60,000 training rows (``--n``), fitted with
  ``SVC(client=client)`` on a LocalCluster of W worker processes x ``--threads-per-worker``
  threads (default 1) for each W in ``--workers`` (default ``1,2``); every configuration's
  process (client and workers) pinned to the same cores, W_max x threads per worker of
  them (2 here). The cluster is muflow's LocalCluster, the one ``python -m muflow run``
  starts (:func:`muflow.dask.cluster.local_cluster`), or with ``--plain-cluster``
  distributed's with its default settings. It is warmed by a 5,000-row fit first.

``--cache-mb`` (default 2000, as the other fit benchmarks) is every fit's ``cache_size``;
``--gram rows`` forces kernel rows on demand (default ``auto``: muflow's routing).

Printed per run, one JSON line (``"kind": "run"``): case, configuration (threads and cores,
or workers), ``n_jobs`` passed, the thread budget the fit reports (``n_threads_``, where the
estimator has it), wall seconds of the fit, the dual objective (a list for several binary
problems), held-out accuracy, outer iterations, solver, every numeric entry of the fitted
model's ``timings_`` (``phases``: e.g. "fetch_seconds" for the kernel rows, "gradient",
"select", "subproblem", "shrink", "kkt", "total"; on Dask "calls" and "round_trips"; for
one-vs-one, the pairs' seconds summed over their forked "processes", so that they may exceed
the wall time, and "total" the wall time of the pairs; "outside": the fit's wall time less
"total"), and digests of the solution (dual coefficients, intercepts, support) and of the
held-out predictions. Then a table per case: per configuration the median wall seconds, the
speed-up S against the first configuration (medians of each configuration's walls), "S
pair" the same speed-up round by round (the median over rounds of the ratio of the two runs
of one round, which ran one after the other: a slow or fast spell of a shared machine
moves it less; the targets show it beside S, and are decided on S), the Karp-Flatt serial fraction
``e = (1/S - 1/p) / (1 - 1/p)`` (Karp & Flatt, CACM 33(5), 1990; p the cores, or the
workers, relative to the first configuration's), the per-phase medians, and the agreement
with the first configuration's first run: the largest relative difference of the objective,
the smallest share of identical held-out predictions, and whether the solution is bit for
bit the same. Last, the issue's targets marked met / not met: a8a 2 threads >= 1.6x,
100,000 rows 2 threads >= 1.8x, T/C oversubscribed within 5 % of C threads, Dask 2 workers
>= 1.7x one worker (at 60,000 rows), and for a8a, 100,000 rows and 4 classes the objective
within 1e-7 relative and >= 99.99 % of the held-out predictions identical. A target set for
a size that this run did not use (``--n``) is reported against the size that ran, marked so.

``--out FILE`` also writes the JSON lines (runs, one ``"kind": "summary"`` line per case
and a ``"kind": "machine"`` header) to FILE (written as FILE.partial, renamed when the run
completes); the logs go in benchmarks/out/.

Usage::

    python benchmarks/bench_scaling.py                              # the issue's full set
    python benchmarks/bench_scaling.py --cases a8a --out benchmarks/out/scaling_a8a.jsonl
    python benchmarks/bench_scaling.py --cases gen100k --n 10000 --repeats 2    # smoke
    python benchmarks/bench_scaling.py --cases dask --n 5000 --repeats 1        # smoke
    python benchmarks/bench_scaling.py --cases a8a --threads 1,2,8,16           # bigger machine

The older measurement of docs/scaling.md, one Dask working-set fit per n and worker count
with the client's and the workers' seconds and bytes, is ``--mode iteration`` (taken
whenever ``--sizes`` is given)::

    python benchmarks/bench_scaling.py --sizes 20000,50000,100000 --workers 2,4
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = ROOT.parent / "shared" / "data"

#: case -> estimator parameters, default training rows (None: the whole file), classes
CASES = {
    "a8a": {"gamma": 0.05, "C": 1.0, "n": None, "classes": 2},
    "gen100k": {"gamma": 0.02, "C": 1.0, "n": 100_000, "classes": 2},
    "multiclass": {"gamma": 0.02, "C": 1.0, "n": 30_000, "classes": 4},
    "dask": {"gamma": 0.02, "C": 1.0, "n": 60_000, "classes": 2},
}
TEST_SHARE = 0.2
WARM_ROWS = 2000          # in-process warm-up fit
DASK_WARM_ROWS = 5000     # above the one-task size, so the warm-up runs on the partitions

#: phase label -> timings_ key, in the order the summary prints them
#: (those a run's timings_ holds; "updates" is the SMO solver's, on a stored K). "outside" is
#: not a key: the fit's wall seconds less the solver's "total" (kernel values stored before
#: the solve, validation, support vectors).
PHASES = (("rows", "fetch_seconds"), ("gradient", "gradient"), ("select", "select"),
          ("subproblem", "subproblem"), ("shrink", "shrink"), ("kkt", "kkt"), ("merge", "merge"),
          ("updates", "updates"), ("calls", "calls"), ("round_trips", "round_trips"),
          ("processes", "processes"), ("iters", "outer_iterations"), ("total", "total"),
          ("outside", "outside"))

#: the issue's speed-up targets: case -> (configuration label's threads or workers, minimum S,
#: the training rows the target was set for)
SPEEDUP_TARGETS = {"a8a": (2, 1.6, None), "gen100k": (2, 1.8, 100_000), "dask": (2, 1.7, 60_000)}
OVERSUBSCRIBED_SLACK = 0.05      # T/C threads within 5 % of C threads
AGREEMENT_CASES = ("a8a", "gen100k", "multiclass")
OBJECTIVE_RTOL = 1e-7
PREDICTIONS_IDENTICAL = 0.9999


# -- configurations ------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One way to run a case: ``threads`` on ``cores`` CPUs in process, or ``workers``
    Dask worker processes of ``threads`` threads each on ``cores`` CPUs."""

    threads: int
    cores: int
    workers: int | None = None

    @property
    def label(self) -> str:
        if self.workers is not None:
            return (f"{self.workers} worker{'s' * (self.workers > 1)} x {self.threads} "
                    f"thread{'s' * (self.threads > 1)}")
        text = f"{self.threads} thread{'s' * (self.threads > 1)}"
        return text if self.threads == self.cores else f"{text} on {self.cores} cores"

    @property
    def units(self) -> int:
        """What the speed-up is per: the cores busy in process, the workers on Dask."""
        return self.workers if self.workers is not None else min(self.threads, self.cores)


def usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        list(range(os.cpu_count() or 1))


def parse_threads(spec: str, available: int) -> list[Config]:
    """``"1,2,4/2"`` -> 1 thread on 1 core, 2 on 2, 4 on 2."""
    configs = []
    for item in spec.split(","):
        threads, _, cores = item.strip().partition("/")
        try:
            t, c = int(threads), int(cores or threads)
        except ValueError:
            raise SystemExit(f"--threads: {item!r} is not T or T/C (T threads on C cores), "
                             f"e.g. --threads 1,2,4/2") from None
        if t < 1 or c < 1:
            raise SystemExit(f"--threads: {item!r} needs at least one thread and one core")
        if c > available:
            raise SystemExit(f"--threads: {item!r} asks for {c} cores, this process may use "
                             f"{available}; name fewer cores (T/C) or run on a bigger machine")
        configs.append(Config(t, c))
    return configs


def parse_workers(spec: str, threads_per_worker: int, available: int) -> list[Config]:
    workers = [int(w) for w in spec.split(",")]
    if min(workers) < 1:
        raise SystemExit(f"--workers: {spec!r} needs at least one worker in each entry")
    cores = min(max(workers) * threads_per_worker, available)
    return [Config(threads_per_worker, cores, w) for w in workers]


# -- data ----------------------------------------------------------------------------------
def load_case(case: str, n: int | None):
    """(X_train, y_train, X_test, y_test) of a case, n training rows (None: its default)."""
    n = CASES[case]["n"] if n is None else n
    if case == "a8a":
        from sklearn.datasets import load_svmlight_file

        Xtr, ytr = load_svmlight_file(str(DATA / "a8a"), n_features=123)
        Xte, yte = load_svmlight_file(str(DATA / "a8a.t"), n_features=123)
        return (Xtr, ytr, Xte, yte) if n is None else (Xtr[:n], ytr[:n], Xte, yte)
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split

    total = int(round(n / (1 - TEST_SHARE)))
    X, y = make_classification(n_samples=total, n_features=50, n_informative=20, flip_y=0.05,
                               n_classes=CASES[case]["classes"], random_state=0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=TEST_SHARE, random_state=0)
    return Xtr, ytr, Xte, yte


# -- one measurement, in a fresh process ---------------------------------------------------
def estimator_options(case: str, config: Config, cache_mb: float, gram: str) -> tuple[dict, bool]:
    """The ``muflow.SVC`` keyword arguments of a run, and whether ``n_jobs`` is among them."""
    import muflow

    params = {"kernel": "rbf", "gamma": CASES[case]["gamma"], "C": CASES[case]["C"],
              "cache_size": cache_mb}
    if gram != "auto":
        params["gram"] = gram
    takes_n_jobs = "n_jobs" in inspect.signature(muflow.SVC).parameters
    if takes_n_jobs and config.workers is None:
        params["n_jobs"] = config.threads
    return params, takes_n_jobs


def digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = a.toarray() if hasattr(a, "toarray") else np.asarray(a)
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def numeric(timings: dict) -> dict:
    """The numbers of a ``timings_`` dict as JSON numbers (flags and nested values left out)."""
    out = {}
    for key, value in timings.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            continue
        out[key] = int(value) if isinstance(value, (int, np.integer)) else float(value)
    return out


def fit_and_measure(model_factory, Xtr, ytr, Xte, yte) -> tuple[dict, np.ndarray]:
    """Fit, time, predict: the record's measured part and the held-out predictions."""
    model = model_factory()
    t0 = time.perf_counter()
    model.fit(Xtr, ytr)
    wall = time.perf_counter() - t0
    pred = np.asarray(model.predict(Xte))
    objective = [float(v) for v in np.ravel(model.objective_)]
    phases = numeric(getattr(model, "timings_", {}) or {})
    if "total" in phases:
        phases["outside"] = wall - phases["total"]
    record = {
        "wall_s": wall,
        "objective": objective[0] if len(objective) == 1 else objective,
        "accuracy": float(np.mean(pred == yte)),
        "n_iter": int(np.max(model.n_iter_)),
        "solver": getattr(model, "solver_", None),
        "n_threads_used": getattr(model, "n_threads_", None),
        "phases": phases,
        "solution_sha": digest(model.dual_coef_, model.intercept_, model.support_),
        "predictions_sha": digest(pred),
    }
    return record, pred


def worker(args) -> None:
    """``--worker``: one configuration of one case, measured; its record to ``--record`` and
    its held-out predictions beside it (``.npy``)."""
    import muflow

    config = Config(args.config_threads, args.config_cores, args.config_workers)
    Xtr, ytr, Xte, yte = load_case(args.case, args.n)
    params, takes_n_jobs = estimator_options(args.case, config, args.cache_mb, args.gram)
    if config.workers is None:
        # load every compiled loop this fit may take, on the same estimator: its own route on
        # a small slice, and the working set on kernel rows in float32 (the route and the
        # dtype of the large fits; a small slice alone is float64)
        warm = min(WARM_ROWS, Xtr.shape[0])
        muflow.SVC(**params).fit(Xtr[:warm], ytr[:warm]).predict(Xte[:50])
        for dtype in ("float64", "float32"):
            muflow.SVC(**dict(params, gram="rows", solver="working_set", gram_dtype=dtype)).fit(
                Xtr[:warm], ytr[:warm])
        record, pred = fit_and_measure(lambda: muflow.SVC(**params), Xtr, ytr, Xte, yte)
    else:
        from distributed import Client, LocalCluster

        from muflow.dask.cluster import local_cluster

        # the LocalCluster `python -m muflow run` starts (distributed's periodic chores less
        # often, muflow.dask.cluster.housekeeping), or distributed's own with --plain-cluster
        start = LocalCluster if args.plain_cluster else local_cluster
        with start(n_workers=config.workers, threads_per_worker=config.threads,
                   dashboard_address=None, memory_limit="4GiB") as cluster, \
                Client(cluster) as client:
            Xw, yw, _, _ = load_case("gen100k", DASK_WARM_ROWS)
            muflow.SVC(client=client, **params).fit(Xw, yw)
            record, pred = fit_and_measure(lambda: muflow.SVC(client=client, **params),
                                           Xtr, ytr, Xte, yte)
    record = {"kind": "run", "case": args.case, "config": config.label,
              "threads": config.threads, "cores": config.cores, "workers": config.workers,
              "cpus": ",".join(map(str, usable_cpus())),
              "n_jobs": params.get("n_jobs"), "svc_takes_n_jobs": takes_n_jobs,
              "n_train": int(Xtr.shape[0]), "n_test": int(Xte.shape[0]),
              "muflow": str(Path(muflow.__file__).parent), **record}
    out = Path(args.record)
    np.save(out.with_suffix(".npy"), pred)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, out)


def run_fresh(case: str, config: Config, cpus: list[int], args, record: Path) -> dict:
    """The ``--worker`` of one configuration in a fresh process pinned to ``cpus``: its
    record with "predictions" (an array) added, or ``{"failed": why}``."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MUFLOW_NUM_THREADS")}
    # this checkout's muflow, whichever muflow the environment installs
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    if config.workers is None and config.threads > config.cores:
        env["MUFLOW_NUM_THREADS"] = str(config.threads)
    mask = ",".join(map(str, cpus[: config.cores]))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--case", case,
           "--config-threads", str(config.threads), "--config-cores", str(config.cores),
           "--cache-mb", str(args.cache_mb), "--gram", args.gram, "--record", str(record)]
    if config.workers is not None:
        cmd += ["--config-workers", str(config.workers)]
        if args.plain_cluster:
            cmd += ["--plain-cluster"]
    if args.n is not None:
        cmd += ["--n", str(args.n)]
    preexec = None
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", mask] + cmd
    else:  # the same pinning without util-linux, before the interpreter starts
        def preexec():
            os.sched_setaffinity(0, cpus[: config.cores])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout,
                              preexec_fn=preexec)
    except subprocess.TimeoutExpired:
        return {"failed": f"no result within --timeout {args.timeout} s"}
    if proc.returncode != 0 or not record.exists():
        return {"failed": f"exit {proc.returncode}: {proc.stderr.strip()[-600:]}"}
    rec = json.loads(record.read_text())
    rec["predictions"] = np.load(record.with_suffix(".npy"))
    return rec


# -- the summary ---------------------------------------------------------------------------
def karp_flatt(speedup: float, p: float) -> float | None:
    """The experimentally determined serial fraction e = (1/S - 1/p) / (1 - 1/p)."""
    if p <= 1:
        return None
    return (1 / speedup - 1 / p) / (1 - 1 / p)


def agreement(base: dict, runs: list[dict]) -> dict:
    """The largest objective relative difference, the smallest share of identical held-out
    predictions and whether every run's solution is bit for bit ``base``'s."""
    ref = np.atleast_1d(np.asarray(base["objective"], dtype=np.float64))
    rel = max(float(np.max(np.abs(np.atleast_1d(r["objective"]) - ref) / np.abs(ref))) for r in runs)
    same = min(float(np.mean(r["predictions"] == base["predictions"])) for r in runs)
    bitwise = all(r["solution_sha"] == base["solution_sha"] for r in runs)
    return {"objective_rel": rel, "predictions_identical": same, "bit_identical": bitwise}


def summarise(case: str, configs: list[Config], runs: dict[Config, list[dict]]) -> dict:
    """The case's table (printed) and its summary record."""
    ran = [c for c in configs if runs[c]]
    if not ran:
        print(f"\n{case}: no run succeeded")
        return {"kind": "summary", "case": case, "rows": [], "targets": []}
    base = ran[0]
    base_wall = float(np.median([r["wall_s"] for r in runs[base]]))
    reference = runs[base][0]
    shown = [(label, key) for label, key in PHASES
             if any(key in r["phases"] for c in ran for r in runs[c])]
    base_rounds = {r["repeat"]: r["wall_s"] for r in runs[base]}
    rows = []
    for c in ran:
        walls = [r["wall_s"] for r in runs[c]]
        wall = float(np.median(walls))
        S = base_wall / wall
        rounds = {r["repeat"]: r["wall_s"] for r in runs[c]}
        p = c.units / base.units
        used = {r["n_threads_used"] for r in runs[c]}
        rows.append({"config": c.label, "threads": c.threads, "cores": c.cores, "workers": c.workers,
                     "runs": len(walls), "wall_s": wall, "wall_runs": walls, "speedup": S,
                     "wall_by_round": rounds, "speedup_paired": paired_ratio(base_rounds, rounds),
                     "p": p,
                     "karp_flatt": karp_flatt(S, p),
                     "phases": {label: float(np.median([r["phases"].get(key, np.nan) for r in runs[c]]))
                                for label, key in shown},
                     "n_threads_used": sorted(used, key=str),
                     **agreement(reference, runs[c])})
    first = runs[base][0]
    print(f"\n{case}: n_train={first['n_train']}, n_test={first['n_test']}, solver "
          f"{first['solver']}, median of {min(r['runs'] for r in rows)}-{max(r['runs'] for r in rows)} "
          f"fresh processes; speed-up and agreement against {base.label}")
    head = (f"{'configuration':<24}{'wall s':>8}{'S':>6}{'S pair':>7}{'e':>7}"
            + "".join(f"{label:>{max(8, len(label) + 1)}}" for label, _ in shown)
            + f"{'obj rel':>9}{'same pred':>10}{'bitwise':>8}{'budget':>8}")
    print(head)
    print("-" * len(head))
    for row in rows:
        e = "" if row["karp_flatt"] is None else f"{row['karp_flatt']:.2f}"
        pair = "" if row["speedup_paired"] is None else f"{row['speedup_paired']:.2f}"
        budget = ",".join("?" if u is None else str(u) for u in row["n_threads_used"])
        print(f"{row['config']:<24}{row['wall_s']:>8.2f}{row['speedup']:>6.2f}{pair:>7}{e:>7}"
              + "".join(f"{_fmt(row['phases'][label]):>{max(8, len(label) + 1)}}" for label, _ in shown)
              + f"{row['objective_rel']:>9.1e}{100 * row['predictions_identical']:>9.2f}%"
              + f"{'yes' if row['bit_identical'] else 'no':>8}{budget:>8}")
    if not first["svc_takes_n_jobs"] and first["workers"] is None:
        print("note: this muflow.SVC takes no n_jobs and reports no thread budget: each fit ran on "
              "what muflow chose on its cores, and T/C configurations are not T threads")
    targets = check_targets(case, rows, first["n_train"])
    for text, met in targets:
        print(f"  target {text}: {'met' if met else 'NOT met'}")
    return {"kind": "summary", "case": case, "n_train": first["n_train"], "rows": rows,
            "targets": [{"target": t, "met": m} for t, m in targets]}


def _fmt(value: float) -> str:
    if not np.isfinite(value):
        return "-"
    return f"{value:.0f}" if value >= 100 or float(value).is_integer() else f"{value:.2f}"


def paired_ratio(numerator: dict, denominator: dict) -> float | None:
    """The median over the rounds both ran of ``numerator[r] / denominator[r]`` (walls by
    round): each round runs every configuration one after the other (round-robin), so a
    slow or fast spell of the machine moves a round's ratio less than it moves the medians
    of each configuration's runs apart."""
    ratios = [numerator[r] / denominator[r] for r in numerator if r in denominator]
    return float(np.median(ratios)) if ratios else None


def _paired(value: float | None, digits: int = 2) -> str:
    """The paired estimate (:func:`paired_ratio`) beside a target's figure."""
    return "" if value is None else f" (round by round: {value:.{digits}f}x)"


def check_targets(case: str, rows: list[dict], n_train: int) -> list[tuple[str, bool]]:
    """The issue's targets that this case's rows can decide, each with met or not."""
    out = []
    by_units = {}
    for row in rows:
        if row["threads"] == row["cores"] or row["workers"] is not None:
            by_units.setdefault(row["workers"] if row["workers"] is not None else row["threads"], row)
    if case in SPEEDUP_TARGETS:
        units, minimum, size = SPEEDUP_TARGETS[case]
        row = by_units.get(units)
        if row is not None:
            what = "workers" if case == "dask" else "threads"
            note = f" (set for {size:,} rows; this run {n_train:,})" if size and size != n_train else ""
            out.append((f"{units} {what} >= {minimum}x of the first configuration, "
                        f"{row['speedup']:.3f}x{_paired(row['speedup_paired'], 3)}{note}",
                        row["speedup"] >= minimum))
    for row in rows:
        if row["workers"] is None and row["threads"] > row["cores"] and row["cores"] in by_units:
            ref = by_units[row["cores"]]
            ratio = row["wall_s"] / ref["wall_s"]
            paired = paired_ratio(row["wall_by_round"], ref["wall_by_round"])
            out.append((f"{row['config']} within {100 * OVERSUBSCRIBED_SLACK:.0f} % of "
                        f"{ref['config']}, {ratio:.3f}x its time{_paired(paired, 3)}",
                        ratio <= 1 + OVERSUBSCRIBED_SLACK))
    if case in AGREEMENT_CASES and len(rows) > 1:
        rel = max(r["objective_rel"] for r in rows)
        same = min(r["predictions_identical"] for r in rows)
        bitwise = all(r["bit_identical"] for r in rows)
        out.append((f"results independent of the threads: objective within {OBJECTIVE_RTOL:g} "
                    f"relative ({rel:.1e}) and >= {100 * PREDICTIONS_IDENTICAL:.2f} % held-out "
                    f"predictions identical ({100 * same:.3f} %){'; bit for bit' if bitwise else ''}",
                    rel <= OBJECTIVE_RTOL and same >= PREDICTIONS_IDENTICAL))
    return out


# -- the driver ----------------------------------------------------------------------------
class Log:
    """JSON lines to stdout and, with ``--out``, to FILE.partial, renamed FILE at the end."""

    def __init__(self, path: str | None):
        self.path = Path(path) if path else None
        self.partial = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.partial = self.path.with_name(self.path.name + ".partial")
            self.partial.write_text("")

    def write(self, record: dict, echo: bool = True) -> None:
        line = json.dumps(record, default=_json_default)
        if echo:
            print(line, flush=True)
        if self.partial is not None:
            with self.partial.open("a") as f:
                f.write(line + "\n")

    def close(self) -> None:
        if self.partial is not None:
            os.replace(self.partial, self.path)
            print(f"\nJSON lines written to {self.path}")


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def machine(cpus) -> dict:
    """The header line: the CPUs, their model, the load, how much memory bandwidth the
    second and later cores add (:func:`_bandwidth.memory_scaling`: a memory-bound phase's
    speed-up cannot exceed its ``all_gb_s / one_process_gb_s``) and how much they add to the
    computation of kernel rows (:func:`_bandwidth.rows_scaling`: that phase's speed-up
    cannot exceed ``all_m_s / one_process_m_s``)."""
    from _bandwidth import memory_scaling, rows_scaling

    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"kind": "machine", "cpus": len(usable_cpus()), "cpu_model": model or platform.processor(),
            "load_average": list(os.getloadavg()), "python": platform.python_version(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "memory_stream": memory_scaling(cpus), "rows_compute": rows_scaling(cpus)}


def print_ceiling(measured: dict, unit: str, text: str) -> None:
    """One header line of :func:`machine`'s ceilings (``text`` with ``{one}``, ``{all}``,
    ``{cpus}`` and ``{ratio}``), where there were at least two CPUs to measure."""
    one, together = measured[f"one_process_{unit}"], measured[f"all_{unit}"]
    if together is not None:
        print(text.format(one=one, all=together, cpus=measured["cpus"],
                          ratio=f"{together / one:.2f}x"), flush=True)


def scaling(args) -> None:
    cpus = usable_cpus()
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(unknown)}; choose from {', '.join(CASES)}")
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1 (the issue asks for at least 5)")
    thread_configs = parse_threads(args.threads, len(cpus))
    worker_configs = parse_workers(args.workers or "1,2", args.threads_per_worker, len(cpus))
    log = Log(args.out)
    head = machine(cpus)
    log.write(head)
    print_ceiling(head["memory_stream"], "gb_s",
                  "memory bandwidth: the gradient update's pass reads {one} GB/s of rows on one "
                  "core, {all} GB/s on all {cpus} together, each on its own rows ({ratio}: the most "
                  "that pass, or any phase that only streams memory, can gain)")
    print_ceiling(head["rows_compute"], "m_s",
                  "kernel rows: one core alone computes {one} million entries/s, all {cpus} at "
                  "once, each on its own columns, {all} ({ratio}: the most the row computation "
                  "can gain)")
    if head["load_average"][0] > 0.5 * len(cpus):
        print(f"warning: load average {head['load_average'][0]:.1f} on {len(cpus)} CPUs: other "
              f"work shares these cores, and the timings measure it too", flush=True)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
        for case in cases:
            configs = worker_configs if case == "dask" else thread_configs
            runs = {c: [] for c in configs}
            for r in range(args.repeats):
                order = configs[r % len(configs):] + configs[: r % len(configs)]
                for config in order:
                    path = Path(tmp) / f"{case}-{configs.index(config)}-{r}.json"
                    rec = run_fresh(case, config, cpus, args, path)
                    if "failed" in rec:
                        log.write({"kind": "failed", "case": case, "config": config.label,
                                   "repeat": r, "why": rec["failed"]})
                        continue
                    rec["repeat"] = r
                    log.write({k: v for k, v in rec.items() if k != "predictions"})
                    runs[config].append(rec)
            summary = summarise(case, configs, runs)
            log.write(summary, echo=False)
            summaries.append(summary)
    end = os.getloadavg()
    print(f"\nload average at the end: {end[0]:.1f} {end[1]:.1f} {end[2]:.1f} on {len(cpus)} CPUs")
    log.close()


# -- --mode iteration: the measurement of docs/scaling.md ----------------------------------
def iteration_run(n, workers):
    """One fit of the distributed working-set solver on a LocalCluster of ``workers``
    single-threaded worker processes: its outer iterations, wall time, the client's seconds
    (subproblems, selection, waiting), each worker's rows and seconds, bytes sent and
    received. The JSON line docs/scaling.md's model (benchmarks/scaling_model.py) reads."""
    from distributed import Client, LocalCluster
    from sklearn.datasets import make_classification

    from muflow.dask.partitions import DaskRowPartitions
    from muflow.dask.working_set import solve_working_set_dask
    from muflow.kernels import Kernel
    from muflow.solvers import DualProblem

    X, y = make_classification(n_samples=n, n_features=50, n_informative=20, flip_y=0.05,
                               random_state=0)
    y = np.where(y > 0, 1.0, -1.0)
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                      dashboard_address=None, memory_limit="6GiB") as cluster, Client(cluster) as client:
        parts = DaskRowPartitions(X, Kernel("rbf", gamma=0.02), client)
        t = time.perf_counter()
        sol = solve_working_set_dask(DualProblem(parts, y, upper=1.0, equality=True))
        wall = time.perf_counter() - t
        info = parts.call("info")
        parts.close()
    tm = sol.timings
    return {"n": n, "workers": workers, "d": X.shape[1], "q": tm["q"], "iterations": int(sol.n_iter),
            "round_trips": tm["round_trips"], "wall": wall, "subproblem": tm["subproblem"],
            "select": tm["select"], "calls": tm["calls"], "kkt": tm["kkt"],
            "bytes_sent": tm["bytes_sent"], "bytes_received": tm["bytes_received"],
            "worker_rows": [w["rows_computed"] for w in info],
            "worker_seconds": [w["seconds"] for w in info], "objective": float(sol.objective[0])}


def iteration(args) -> None:
    log = Log(args.out)
    for w in [int(v) for v in (args.workers or "2,4").split(",")]:
        for n in [int(v) for v in (args.sizes or "20000,50000,100000").split(",")]:
            log.write(iteration_run(n, w))
    log.close()


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=("threads", "iteration"), default=None,
                   help="threads: the scaling table (default); iteration: docs/scaling.md's "
                        "Dask outer-iteration measurement (the default when --sizes is given)")
    p.add_argument("--cases", default="a8a,gen100k,multiclass,dask",
                   help=f"comma list of {', '.join(CASES)} (default: all)")
    p.add_argument("--threads", default="1,2,4/2",
                   help="thread configurations, T (T threads on T cores) or T/C (T threads on "
                        "C cores); the first is the speed-up's base (default: 1,2,4/2)")
    p.add_argument("--workers", default=None,
                   help="Dask worker counts (default 1,2; in --mode iteration 2,4)")
    p.add_argument("--threads-per-worker", type=int, default=1,
                   help="threads of each Dask worker in the dask case (default: 1)")
    p.add_argument("--plain-cluster", action="store_true",
                   help="dask case: distributed's LocalCluster with its default settings, "
                        "instead of muflow's (muflow.dask.cluster.local_cluster, the one "
                        "`python -m muflow run` starts)")
    p.add_argument("--repeats", type=int, default=5,
                   help="fresh-process runs per configuration, the median reported (default: 5)")
    p.add_argument("--n", type=int, default=None,
                   help="training rows of every case named (a smoke run); default: each case's own")
    p.add_argument("--cache-mb", type=float, default=2000.0, help="SVC cache_size (default: 2000)")
    p.add_argument("--gram", default="auto", choices=("auto", "rows"),
                   help="SVC gram: auto (muflow's routing, default) or rows (kernel rows on demand)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="seconds one run's process may take (default: 3600)")
    p.add_argument("--out", help="also write the JSON lines to this file (benchmarks/out/...)")
    p.add_argument("--sizes", default=None, help="--mode iteration: comma-separated n "
                   "(default 20000,50000,100000)")
    # the fresh process's own options
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--config-threads", type=int, help=argparse.SUPPRESS)
    p.add_argument("--config-cores", type=int, help=argparse.SUPPRESS)
    p.add_argument("--config-workers", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--record", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        worker(args)
    elif args.mode == "iteration" or (args.mode is None and args.sizes is not None):
        iteration(args)
    else:
        scaling(args)


if __name__ == "__main__":
    main()
