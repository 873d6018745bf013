"""The device machine's scripts (issues 37 and 41) are prepared here, where no GPU and no
16-core machine is at hand: each must at least parse, so that the one short run a device
machine allows is not spent on a syntax error."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "device").glob("*.sh"))


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_the_device_script_parses(script):
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_gpu_and_16_core_scripts_are_there():
    assert {"gpu.sh", "cores16.sh"} <= {s.name for s in SCRIPTS}
