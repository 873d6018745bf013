"""``python -m muflow run`` killed with SIGKILL leaves no process behind (issue 22): its
temporary Prefect server and its Dask workers end within 10 s."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.test_run_command import muflow_env


@pytest.mark.slow
def test_a_sigkilled_run_leaves_no_process_behind(tmp_path):
    env = muflow_env(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "muflow", "run", "--out", str(tmp_path / "run")],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    parent = psutil.Process(proc.pid)
    seen: dict[int, psutil.Process] = {}
    server = None
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            for child in parent.children(recursive=True):
                seen.setdefault(child.pid, child)
                try:
                    if server is None and "uvicorn" in " ".join(child.cmdline()):
                        server = child
                except psutil.Error:
                    pass
            # the server is up and the flow has started its Dask workers
            if server is not None and len(seen) >= 3:
                break
            time.sleep(0.2)
        assert server is not None and proc.poll() is None, "the run never started its Prefect server"
        time.sleep(1.0)
        for child in parent.children(recursive=True):
            seen.setdefault(child.pid, child)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = time.monotonic()
    alive = list(seen.values())
    while alive and time.monotonic() - killed_at < 10:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    names = [" ".join(p.cmdline())[:120] for p in alive if p.is_running()]
    for p in alive:  # do not leave them to the rest of the suite
        try:
            p.kill()
        except psutil.Error:
            pass
    assert not alive, f"{len(alive)} processes outlived the run by 10 s: {names}"
