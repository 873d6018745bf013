"""The temporary Prefect server of ``python -m muflow run``, which never outlives it.

Without ``PREFECT_API_URL`` Prefect would start its own temporary server (uvicorn in a
subprocess) and stop it at a normal exit; a ``SIGKILL`` of the run skips every exit path
and left that server running, re-parented to pid 1. Here the run starts the server itself
(Prefect's application factory under uvicorn, on a free loopback port) and

- on Linux, the server is started with ``PR_SET_PDEATHSIG`` = ``SIGKILL`` (``prctl(2)``):
  the kernel kills it when the process that started it dies, however it dies;
- on every exit path that runs Python code (return, exception, ``SIGTERM`` turned into
  an exception by the caller), :func:`temporary_prefect_server` terminates it.

The flow then runs against it as against any server (``PREFECT_API_URL`` set for the
duration of the context).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

#: Seconds to wait for the server's ``/api/health`` (two busy cores need more than Prefect's 20).
STARTUP_TIMEOUT = 120.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover  (runs in the child, before exec)
    """In the server's process before it executes: be killed when the parent dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch_server() -> tuple[subprocess.Popen, str]:
    """Start a Prefect API server on loopback without waiting for it; return its process and
    API URL. :func:`wait_until_healthy` waits. Launched first, the server's own start (its
    imports and database) overlaps the caller's import of Prefect and the flows."""
    port = _free_port()
    env = {**os.environ, "PREFECT_UI_ENABLED": "false", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    command = [sys.executable, "-m", "uvicorn", "--factory", "prefect.server.api.server:create_app",
               "--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"]
    # its own session: a Ctrl-C to the terminal's process group does not reach it, so the
    # run can still report to it on the way out, then stops it (a server stopped first left
    # the run retrying its API for two minutes, then blaming "Connection refused")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                               start_new_session=True)
    return process, f"http://127.0.0.1:{port}/api"


def wait_until_healthy(process: subprocess.Popen, url: str, timeout: float = STARTUP_TIMEOUT) -> None:
    """Return once the server of :func:`launch_server` answers ``/health``; raise
    RuntimeError (with its output) when it exits or does not answer within ``timeout``."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            err = process.stderr.read().decode(errors="replace")[-2000:] if process.stderr else ""
            raise RuntimeError(f"the temporary Prefect server exited with code {process.returncode}: {err}")
        try:
            if httpx.get(url + "/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    stop_server(process)
    raise RuntimeError(f"the temporary Prefect server did not answer on {url} within {timeout:.0f} s")


def start_server(timeout: float = STARTUP_TIMEOUT) -> tuple[subprocess.Popen, str]:
    """Start a Prefect API server on loopback; return its process and API URL once it
    answers ``/health``. Raises RuntimeError (with its output) when it does not."""
    process, url = launch_server()
    wait_until_healthy(process, url, timeout)
    return process, url


#: Seconds the server is given to end after SIGTERM before it is killed: on a normal exit,
#: and when the command stops on SIGINT or SIGTERM (:mod:`muflow.signals`), which must
#: leave within seconds however slowly a loaded machine lets the server shut down
STOP_GRACE_S, STOP_GRACE_ON_SIGNAL_S = 5.0, 1.0


def stop_server(process: subprocess.Popen) -> None:
    """Terminate the server, killing it if it has not gone within :data:`STOP_GRACE_S`
    (:data:`STOP_GRACE_ON_SIGNAL_S` once the command got a stop signal)."""
    from muflow import signals

    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_GRACE_S if signals.received is None
                         else STOP_GRACE_ON_SIGNAL_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stderr:
        process.stderr.close()


@contextlib.contextmanager
def temporary_prefect_server(launched: tuple[subprocess.Popen, str] | None = None):
    """A temporary server for the duration of the context, unless ``PREFECT_API_URL`` names
    one already (then nothing is started, and a server ``launched`` ahead by
    :func:`launch_server` is stopped unused). Yields the API URL the flows use."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    configured = PREFECT_API_URL.value()
    if configured:
        if launched is not None:
            stop_server(launched[0])
        yield configured
        return
    process, url = launched if launched is not None else launch_server()
    try:
        wait_until_healthy(process, url)
        with temporary_settings(updates={PREFECT_API_URL: url}):
            try:
                yield url
            finally:
                _drain_to_server()
    finally:
        stop_server(process)


def _drain_to_server(timeout: float = 10.0) -> None:
    """Send Prefect's queued logs and events while the temporary server still answers:
    left for Prefect's exit hook, they went to a stopped server, and the process waited
    about two minutes after its report, then printed "Error logging to API"."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for service in (APILogWorker, EventsWorker):
        try:
            service.drain_all(timeout=timeout)
        except Exception:  # a drain that fails must not hide the run's result
            pass


__all__ = ["launch_server", "start_server", "stop_server", "temporary_prefect_server",
           "wait_until_healthy"]
