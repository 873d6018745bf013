"""deploy/: every entrypoint of prefect.yaml imports and takes its parameters; the
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


def test_every_entrypoint_imports_and_accepts_its_parameters():
    from prefect import Flow

    from muflow.config import resolve

    deployments = _deployments()
    assert {d["name"] for d in deployments} >= {"nightly-retrain", "on-demand-sweep"}
    for dep in deployments:
        path, name = dep["entrypoint"].split(":")
        spec = importlib.util.spec_from_file_location(f"_entry_{dep['name'].replace('-', '_')}", REPO / path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        flow = getattr(module, name)
        assert isinstance(flow, Flow), dep["entrypoint"]
        flow.validate_parameters(dep.get("parameters") or {})
        resolve(dep["parameters"]["config"])  # the configuration itself is valid
        assert dep["work_pool"]["name"] == "muflow-process"


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
