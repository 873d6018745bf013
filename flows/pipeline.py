"""Deployment entrypoints of muflow's Prefect flows, named by ``deploy/prefect.yaml``
(``flows/pipeline.py:pipeline``, ``flows/pipeline.py:sweep``).

The flows themselves ship inside the package, in :mod:`muflow.flows.pipeline`; this file
only re-exports them so that ``prefect deploy``, run from the repository root, finds them
by path. It is not part of the wheel.

Run the main job once, on the embedded default and a LocalCluster::

    python flows/pipeline.py
"""

from muflow.flows.pipeline import gram, pipeline, sweep, train

__all__ = ["gram", "pipeline", "sweep", "train"]

if __name__ == "__main__":
    # The Dask workers of the LocalCluster import this module, hence the guard.
    print(pipeline.with_options(retries=1)())
