"""Maximizing the margin in the input space (input-space-margin.txt, Akaho).

The ordinary SVM maximizes the margin in the kernel's feature space; this package measures
and maximizes it where the inputs live, in a metric ``||x - x_i||_{G_i}`` that may differ
per sample (section 2).

- :mod:`~muflow.input_margin._discriminant`: the discriminant of eq. (2);
- :mod:`~muflow.input_margin._algorithm`: the maths, with no validation of user input:
  the steps of Algorithm 1 (eq. 8-11, 18) and of the
  simplified algorithm (eq. 22), and why the algorithm's margin estimate is not its margin;
- :mod:`~muflow.input_margin._projection`: the projection on the boundary (eq. 12,
  section 3.4) with its safeguards, and the margin (eq. 3);
- :mod:`~muflow.input_margin.estimator`: :func:`input_space_margin` and
  :class:`InputMarginSVC`, which validate their input and call the maths.
"""

from muflow.input_margin._algorithm import (
    DEFAULT_MAX_BYTES,
    MEASURE_MAX_ITER,
    QPStep,
    StepTrace,
    check_metric,
    full_step_problem,
    project_hyperplane,
    run_steps,
    simplified_g,
    update_parameters,
)
from muflow.input_margin._discriminant import Discriminant
from muflow.input_margin._projection import InputMargin, measure_margin, project_onto_boundary
from muflow.input_margin.estimator import InputMarginSVC, default_qp_solver, input_space_margin

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MEASURE_MAX_ITER",
    "Discriminant",
    "InputMargin",
    "InputMarginSVC",
    "QPStep",
    "StepTrace",
    "check_metric",
    "default_qp_solver",
    "full_step_problem",
    "input_space_margin",
    "measure_margin",
    "project_hyperplane",
    "project_onto_boundary",
    "run_steps",
    "simplified_g",
    "update_parameters",
]
