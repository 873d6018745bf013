"""The cost model of docs/scaling.md, against the measurements of bench_scaling.py.

Reads the JSON lines of ``benchmarks/bench_scaling.py`` (default
``benchmarks/out/scaling_s9.jsonl``), prints the model's time next to each measured run,
extrapolates to n = 10^6 on 8 and 64 workers, and plots predicted fit time against n
(``docs/scaling.png``).

The model, per outer iteration on W workers (n samples, d features, working set q):

- worker: r rows of K over n/W columns (r ~ q/2 new rows: half of a working set is kept
  from the previous one), the gradient update over the q moved rows, the candidate scan:
  ``r (n/W) c_row + q (n/W) c_grad + (n/W) c_cand``;
- network: a latency per round trip plus the bytes (X_B to every worker, the candidates'
  rows back): ``t_rt + W (r d + 3 q) 8 / B + W 3 k (d + 7) 8 / B`` with k = q / (2 W);
- client: the q x q subproblem and the selection, ``t_sub (q / 1024)^1.7``;
- iterations: ``I(n, q) = I_0 (n / 10^5)^b (1024 / q)``, independent of W (measured: 372
  on 2 workers and 358 on 4 at n = 10^5; 176 at n = 20,000 with q = 512);
- W workers on fewer cores share them: the worker term is multiplied by W / cores.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from muflow.solvers.working_set import default_q

#: Constants fitted to the session-9 runs on the 2-core machine (one core per worker).
C_ROW = 2.9e-9       # s per kernel entry of a row (float32 sgemm at d = 50 + fused exp)
C_GRAD = 0.23e-9     # s per entry of the gradient update (float32 rows, float64 sums)
C_CAND = 90e-9       # s per sample of the candidate scan
T_RT = 6e-3          # s of latency per round trip (actor calls, one event-loop wait)
BANDWIDTH = 400e6    # bytes/s of serialisation and loopback transfer
T_SUB = 16e-3        # s of subproblem and selection on the client at q = 1024
I_0, B_EXP = 372.0, 0.86   # outer iterations at n = 10^5 (q = 1024), growth exponent
CORES = 2            # of the machine the measurements ran on


def iterations(n, q=None):
    q = default_q(n) if q is None else q
    return I_0 * (n / 1e5) ** B_EXP * (1024 / q)


def per_iteration(n, W, d=50, q=None, cores=None):
    q = default_q(n) if q is None else q
    r, k, cols = q / 2, q / (2 * W), n / W
    shared = max(1.0, W / cores) if cores else 1.0
    worker = (r * cols * C_ROW + q * cols * C_GRAD + cols * C_CAND) * shared
    network = T_RT + (W * (r * d + 3 * q) * 8 + W * 3 * k * (d + 7) * 8) / BANDWIDTH
    client = T_SUB * (q / 1024) ** 1.7
    return worker + network + client, {"worker": worker, "network": network, "client": client}


def fit_time(n, W, q=None, cores=None):
    t, _ = per_iteration(n, W, q=q, cores=cores)
    return iterations(n, q) * t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", default=str(Path(__file__).parent / "out" / "scaling_s9.jsonl"))
    p.add_argument("--plot", default=str(Path(__file__).parents[1] / "docs" / "scaling.png"))
    args = p.parse_args()
    runs = [json.loads(line) for line in open(args.log) if line.startswith("{")]
    print("n        W  iterations (model)  per iteration measured / model    fit time measured / model")
    for r in runs:
        n, W = r["n"], r["workers"]
        t_it, _ = per_iteration(n, W, q=r["q"], cores=CORES)
        model = fit_time(n, W, q=r["q"], cores=CORES)
        measured_it = r["wall"] / r["round_trips"]
        print(f"{n:<8} {W}  {r['iterations']:>5} ({iterations(n, r['q']):6.0f})      {measured_it * 1e3:6.1f} / "
              f"{t_it * 1e3:6.1f} ms              {r['wall']:7.1f} / {model:7.1f} s "
              f"({r['wall'] / model - 1:+.0%})")
    for W in (8, 64):
        t, parts = per_iteration(1e6, W)
        print(f"n = 10^6 on {W} workers: {iterations(1e6):.0f} iterations x {t * 1e3:.0f} ms "
              f"(workers {parts['worker'] * 1e3:.0f}, network {parts['network'] * 1e3:.0f}, client "
              f"{parts['client'] * 1e3:.0f}) = {fit_time(1e6, W) / 60:.1f} min; X per worker "
              f"{1e6 / W * 50 * 8 / 1e6:.0f} MB, row cache for a working set {default_q(1e6) * 1e6 / W * 4 / 1e6:.0f} MB")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = np.logspace(4, 6, 40)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.plot(ns, [fit_time(n, 4, cores=CORES) for n in ns], "--", label="model, 4 workers on 2 cores")
    for W in (2, 8, 64):
        ax.plot(ns, [fit_time(n, W) for n in ns], label=f"model, {W} workers, a core each")
    for W, marker in ((2, "o"), (4, "s")):
        pts = [(r["n"], r["wall"]) for r in runs if r["workers"] == W]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, color="k", zorder=3,
                       label=f"measured, {W} workers (2 cores)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("samples n (d = 50, RBF)")
    ax.set_ylabel("fit time (s)")
    ax.set_title("Working-set solver on Dask workers: model and measurements")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=120)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
