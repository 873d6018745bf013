"""Model selection over kernels x kernel parameters x C x folds x classes, sharing K.

- :mod:`~muflow.selection.grid`: the grid, its one schema and the options' checks (a run
  configuration file is read by :func:`muflow.config.load_grid_toml`);
- :mod:`~muflow.selection.kernel_solve`: the solves of one kernel setting, its columns
  and the refit on all samples, by one of the paths:
  :mod:`~muflow.selection.batched` (with :mod:`~muflow.selection.halving`) or
  :mod:`~muflow.selection.continuation` (chains shared by :mod:`~muflow.selection.fork_pool`);
- :mod:`~muflow.selection.scoring`: CV accuracies from one product with K;
- :mod:`~muflow.selection.records`: the typed records passed between them;
- :mod:`~muflow.selection.rundir`: the run directory (resume, results.csv, best.json);
- :mod:`~muflow.selection.plots`: heatmaps, convergence plot and progress bar;
- :mod:`~muflow.selection.sweep`: :func:`run_sweep`, which joins them.
"""

from muflow.selection.grid import PATHS, SUBSET_SOLVERS, SweepGrid, check_options
from muflow.selection.records import ConfigurationRow, KernelRecord, SweepResult
from muflow.selection.sweep import run_sweep

__all__ = ["SweepGrid", "SweepResult", "ConfigurationRow", "KernelRecord", "run_sweep",
           "check_options", "PATHS", "SUBSET_SOLVERS"]
