"""The built wheel: one top-level package, ``muflow`` (its Prefect flows inside it, the
repository's ``flows/`` deployment entrypoints left out), with the bundled data sets.

The wheel is built from a copy of the sources in a temporary directory, so the shared
checkout gets no ``build/`` folder. pip builds it without isolation when the build backend
that pyproject.toml asks for is installed, and otherwise in an isolated environment (which
needs the package index or pip's cache; the test is skipped, saying so, when neither
answers).
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

#: pip's messages when an isolated build cannot fetch its backend (no index, no cache).
_OFFLINE = re.compile(r"No matching distribution found|Could not find a version|NewConnectionError|"
                      r"Temporary failure in name resolution|Network is unreachable")


def _backend_installed() -> bool:
    """Whether every ``build-system.requires`` entry is satisfied in this interpreter."""
    from packaging.requirements import Requirement

    for text in PYPROJECT["build-system"]["requires"]:
        req = Requirement(text)
        try:
            version = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            return False
        if not req.specifier.contains(version, prereleases=True):
            return False
    return True


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A copy of what the wheel is built from (a snapshot: the checkout may change meanwhile)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in ("muflow", "flows"):  # flows/ is copied so that leaving it out is tested
        shutil.copytree(REPO / folder, src / folder, ignore=ignore)
    return src


@pytest.fixture(scope="module")
def wheel(sources, tmp_path_factory) -> zipfile.ZipFile:
    """The wheel built from :func:`sources`."""
    dist = tmp_path_factory.mktemp("dist")
    cmd = [sys.executable, "-m", "pip", "wheel", str(sources), "--no-deps", "--quiet", "-w", str(dist)]
    if _backend_installed():
        cmd.append("--no-build-isolation")
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=sources, timeout=300)
    if res.returncode != 0 and _OFFLINE.search(res.stdout + res.stderr):
        pytest.skip(f"cannot fetch the build backend for an isolated build: {res.stderr.strip()[-300:]}")
    assert res.returncode == 0, f"pip wheel failed:\n{res.stdout}\n{res.stderr}"
    (path,) = dist.glob("muflow-*.whl")
    with zipfile.ZipFile(path) as zf:
        yield zf


def test_the_wheel_installs_one_top_level_package(wheel):
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"muflow"}, f"top-level entries besides muflow/: {sorted(tops - {'muflow'})}"
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
    assert wheel.read(top_level).decode().split() == ["muflow"]
    assert not any(n.startswith("flows/") for n in names)


def test_the_wheel_holds_the_packaged_flows_and_data(wheel, sources):
    names = set(wheel.namelist())
    assert {"muflow/flows/__init__.py", "muflow/flows/pipeline.py", "muflow/flows/tasks.py"} <= names
    shipped = {n for n in names if n.startswith("muflow/datasets/data/")}
    bundled = {f"muflow/datasets/data/{p.name}" for p in (sources / "muflow" / "datasets" / "data").glob("*.csv")}
    assert bundled and shipped == bundled
    # every module of the source tree is in the wheel (nothing left behind by `find`)
    modules = {p.relative_to(sources).as_posix() for p in (sources / "muflow").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


def test_pyproject_finds_only_muflow():
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["muflow*"]
    assert not (REPO / "flows" / "__init__.py").exists(), "flows/ holds entrypoints, not a package"
