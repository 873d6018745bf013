"""A LocalCluster's worker processes log where the process that started it logs
(:mod:`muflow.dask.worker_logs`): into the command's log file once the command moved its
records there, on stderr otherwise. Real clusters, their workers' stderr the test's."""

from __future__ import annotations

import contextlib
import logging
import sys

import pytest
from distributed import Client

from muflow.dask.cluster import local_cluster
from muflow.dask.worker_logs import move_stderr_records, process_log_file

CLUSTER = dict(n_workers=1, threads_per_worker=1, memory_limit="1GiB", dashboard_address=None)


def _worker_error(text):
    """On a worker: an ERROR record of distributed's worker logger, as a heartbeat to a
    scheduler that is gone logs one."""
    logging.getLogger("distributed.worker").error(text)


@contextlib.contextmanager
def _records_in(log_file):
    """This process's stderr records moved into ``log_file``, as a command's
    ``log_to_file`` moves them, and put back afterwards. distributed's handler on stderr is
    made again first, as its import makes it in a command's process: pytest's capture
    replaced the stderr it was made on."""
    distributed_logger = logging.getLogger("distributed")
    on_stderr = logging.StreamHandler(sys.stderr)
    distributed_logger.addHandler(on_stderr)
    to_file, moved = move_stderr_records(log_file)
    try:
        yield
    finally:
        for logger, handler in moved:
            logger.removeHandler(to_file)
            logger.addHandler(handler)
        distributed_logger.removeHandler(on_stderr)
        to_file.close()


@pytest.mark.slow
def test_the_workers_errors_go_to_the_commands_log_file_not_the_console(tmp_path, capfd):
    log = tmp_path / "run.log"
    with _records_in(log):
        assert process_log_file() == str(log)
        with local_cluster(**CLUSTER) as cluster, Client(cluster) as client:
            client.run(_worker_error, "first worker's record")
            client.restart()  # a worker the nanny starts again follows the file too
            client.run(_worker_error, "restarted worker's record")
    assert process_log_file() is None
    captured = capfd.readouterr()
    assert "worker's record" not in captured.out + captured.err
    text = log.read_text()
    assert "distributed.worker ERROR first worker's record" in text
    assert "distributed.worker ERROR restarted worker's record" in text


@pytest.mark.slow
def test_without_a_log_file_the_workers_errors_stay_on_stderr(capfd):
    assert process_log_file() is None
    with local_cluster(**CLUSTER) as cluster, Client(cluster) as client:
        client.run(_worker_error, "a worker's record on stderr")
    assert "a worker's record on stderr" in capfd.readouterr().err
