"""Prefect flows and tasks over muflow: thin wrappers, each a few lines calling
:mod:`muflow.pipeline`.

- :mod:`muflow.flows.tasks`: one task per stage of :mod:`muflow.pipeline`, plus the artifacts;
- :mod:`muflow.flows.pipeline`: the flows ``pipeline``, ``gram``, ``sweep`` and ``train``.

Only the ``run`` command (:mod:`muflow.commands.run`, when it runs) and the deployment
entrypoints import this package: ``import muflow``, a fit, a sweep and predict never import
Prefect, and this ``__init__`` imports nothing, so that importing ``muflow.flows`` alone
does not load Prefect either. The deployments (``deploy/prefect.yaml``) name the
repository's ``flows/pipeline.py``, which re-exports these flows.
"""
