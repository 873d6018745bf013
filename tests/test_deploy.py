"""deploy/: every entrypoint of prefect.yaml imports (by path, as ``prefect deploy`` loads
it), is the packaged flow of :mod:`muflow.flows.pipeline` and takes its parameters; the
docker-compose file validates where a docker CLI with compose is installed."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"


def _deployments():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((DEPLOY / "prefect.yaml").read_text())["deployments"]


def _load_entrypoint(entrypoint: str):
    """The object an entrypoint ``path.py:name`` names, its file executed as a module."""
    path, name = entrypoint.split(":")
    assert (REPO / path).is_file(), f"entrypoint {entrypoint}: no file {path} in the repository"
    spec = importlib.util.spec_from_file_location(f"_entry_{Path(path).stem}_{name}", REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, name), f"entrypoint {entrypoint}: {path} defines no {name!r}"
    return getattr(module, name)


def test_every_entrypoint_imports_and_accepts_its_parameters():
    from prefect import Flow

    from muflow.config import resolve
    from muflow.flows import pipeline as packaged

    deployments = _deployments()
    assert {d["name"] for d in deployments} >= {"nightly-retrain", "on-demand-sweep"}
    for dep in deployments:
        flow = _load_entrypoint(dep["entrypoint"])
        assert isinstance(flow, Flow), dep["entrypoint"]
        # the entrypoint re-exports the flow shipped in the package, not a copy of it
        assert flow is getattr(packaged, dep["entrypoint"].split(":")[1]), dep["entrypoint"]
        flow.validate_parameters(dep.get("parameters") or {})
        resolve(dep["parameters"]["config"])  # the configuration itself is valid
        assert dep["work_pool"]["name"] == "muflow-process"


def test_the_on_demand_sweep_is_described_by_the_size_of_its_grid():
    """prefect.yaml's description and deploy/README.md count the grid the deployment runs
    (they said 6 kernel settings of its 8)."""
    import re

    from muflow.config import resolve

    sweep = next(d for d in _deployments() if d["name"] == "on-demand-sweep")
    cfg = resolve(sweep["parameters"]["config"])
    size = f"{len(cfg.grid.C)} C values x {len(cfg.grid.kernel_settings())} kernel settings, " \
           f"{cfg.sweep.folds} folds"
    readme = next(line for line in (DEPLOY / "README.md").read_text().splitlines()
                  if line.startswith("| `sweep/on-demand-sweep`"))
    for text in (sweep["description"], readme):
        assert re.findall(r"\d+ C values x \d+ kernel settings, \d+ folds", text) == [size], text


def test_the_nightly_retrain_is_scheduled_with_cron():
    nightly = next(d for d in _deployments() if d["name"] == "nightly-retrain")
    from prefect.client.schemas.schedules import CronSchedule

    cron = nightly["schedules"][0]["cron"]
    CronSchedule(cron=cron, timezone=nightly["schedules"][0]["timezone"])
    assert nightly["entrypoint"] == "flows/pipeline.py:pipeline"


def _compose_available() -> str | None:
    if shutil.which("docker") is None:
        return "no docker CLI on this machine"
    res = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
    return None if res.returncode == 0 else f"`docker compose version` fails: {res.stderr.strip()[:200]}"


def test_docker_compose_file_validates():
    reason = _compose_available()
    if reason:
        pytest.skip(reason)
    res = subprocess.run(["docker", "compose", "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"],
                         capture_output=True, text=True, cwd=DEPLOY, timeout=60)
    assert res.returncode == 0, res.stderr


def test_the_parquet_on_s3_example_is_one_configuration_with_no_credential():
    """deploy/parquet-s3.toml and the parquet-s3-retrain deployment hold the same run
    configuration; its storage options name environment variables only."""
    from muflow.config import from_dict, load_config

    cfg = load_config(DEPLOY / "parquet-s3.toml")
    deployed = next(d for d in _deployments() if d["name"] == "parquet-s3-retrain")
    assert from_dict(deployed["parameters"]["config"]) == cfg
    assert cfg.data.path == "s3://my-bucket/churn/train/" and cfg.sweep.on_cluster
    assert cfg.data.storage_options == {"endpoint_url": "${MUFLOW_S3_ENDPOINT}"}
    # the Gram cache on the same S3-compatible store is reached through the same endpoint
    assert cfg.gram.cache_dir.startswith("s3://") and cfg.gram.storage_options == cfg.data.storage_options
