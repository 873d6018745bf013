"""Prefect flows and tasks over muflow (thin wrappers; the library never imports Prefect).

- :mod:`flows.tasks`: one task per stage of :mod:`muflow.pipeline`, plus the artifacts;
- :mod:`flows.pipeline`: the flows ``pipeline``, ``gram``, ``sweep`` and ``train``.

Deployments of these flows live in ``deploy/prefect.yaml``.
"""
