"""scikit-learn's own estimator checks, in full, on muflow.SVC and muflow.LinearSVC.

pandas is in the test extra so that the checks with pandas inputs run rather than skip.
"""

import os
import subprocess
import sys

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import muflow

SAMPLE_WEIGHT_REASON = (
    "an iterative solver stops at its KKT tolerance: the weighted problem and the problem "
    "with repeated samples have the same optimum but are different dual problems (the "
    "repeated one splits alpha across the copies), so they agree to tol, not to the "
    "check's rtol=1e-7; scikit-learn marks its own SVC and LinearSVC the same way"
)


def expected_failures(estimator):
    return {
        "check_sample_weight_equivalence_on_dense_data": SAMPLE_WEIGHT_REASON,
        "check_sample_weight_equivalence_on_sparse_data": SAMPLE_WEIGHT_REASON,
    }


@parametrize_with_checks([muflow.SVC(), muflow.LinearSVC()],
                         expected_failed_checks=expected_failures)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


ARRAY_API_CHECK = """
import sys
from sklearn.utils.estimator_checks import check_array_api_input
import muflow
name = sys.argv[1]
check_array_api_input(
    name, getattr(muflow, name)(), array_namespace="numpy", expect_only_array_outputs=False
)
print("check_array_api_input passed")
"""


@pytest.mark.parametrize("name", ["SVC", "LinearSVC"])
def test_array_api_check_runs_with_scipy_array_api_enabled(name):
    """The one check above that skips here: scikit-learn runs check_array_api_input only
    when SCIPY_ARRAY_API is set before SciPy is first imported, which would switch the whole
    test session into SciPy's array-API mode. A child process runs that check with it set."""
    result = subprocess.run(
        [sys.executable, "-c", ARRAY_API_CHECK, name],
        env={**os.environ, "SCIPY_ARRAY_API": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_array_api_input passed" in result.stdout
