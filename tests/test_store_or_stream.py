"""The store-or-stream rule of a kernel setting (:func:`muflow.routing.plan_kernel`, issue 30
item 3): it weighs the solver, the size, the reuse, the memory and the disk, and says why."""

from __future__ import annotations

import pytest

from muflow import routing
from muflow.exceptions import MuflowError, MuflowInputError
from muflow.memory import gram_bytes
from muflow.routing import plan_kernel

GIB = 2**30
PLENTY = 1024 * GIB  # memory and disk that hold any K of these tests


def test_above_the_sweep_size_a_row_solver_streams_and_a_product_solver_keeps_k():
    n = 48_000
    rows = plan_kernel(n, solver="auto", solves=4, available=PLENTY)
    assert (rows.path, rows.store) == ("rows", False)
    assert rows.reason.startswith("48,000 samples > 32,768: K of 48,000 samples (")
    assert "would be read by 4 solves" in rows.reason and "working sets touch" in rows.reason
    # a product solver reads all of K every pass: rows on demand would compute K each pass
    kept = plan_kernel(n, solver="m3", solves=4, available=PLENTY)
    assert (kept.path, kept.store) == ("stored", False)
    assert kept.reason.startswith("m3 reads all of K every pass; ")
    assert plan_kernel(n, solver="working_set", solves=4, available=PLENTY).path == "rows"


def test_the_size_threshold_is_the_one_gram_mode_reads(monkeypatch):
    n = routing.SWEEP_ROWS_MIN_SAMPLES
    assert plan_kernel(n, solves=4, available=PLENTY).path == "stored"
    assert plan_kernel(n + 1, solves=4, available=PLENTY).path == "rows"
    monkeypatch.setattr(routing, "SWEEP_ROWS_MIN_SAMPLES", 100)
    assert plan_kernel(101, solves=4, available=PLENTY).path == "rows"
    assert routing.gram_mode("auto", 101, "auto", sweep=True) == "rows"


def test_reuse_is_counted_one_solve_streams_sooner_than_a_sweep():
    """One solve (SVC.fit) stores K up to ROWS_MIN_SAMPLES samples; several solves sharing K
    (a sweep's folds x C and its refit) up to SWEEP_ROWS_MIN_SAMPLES."""
    n = routing.ROWS_MIN_SAMPLES + 1
    one = plan_kernel(n, solves=1, available=PLENTY)
    many = plan_kernel(n, solves=16, available=PLENTY)
    assert one.path == "rows" and "read by 1 solve," in one.reason
    assert one.path == routing.gram_mode("auto", n, "auto")  # SVC's rule, unchanged
    assert many.path == "stored" and many.reason.endswith("is reused by 16 solves")
    small = plan_kernel(455, solves=15, available=PLENTY)
    assert small.reason == "K of 455 samples (1.6 MiB float64) fits in memory and is reused by 15 solves"


def test_a_k_that_does_not_fit_in_half_the_memory_streams():
    n = 5000
    need = gram_bytes(n, "float32")  # above 4096 samples K in memory is float32
    fits = plan_kernel(n, solves=4, available=2 * need)
    assert fits.path == "stored"
    short = plan_kernel(n, solves=4, available=2 * need - 1)
    assert short.path == "rows" and "does not fit in half the available memory" in short.reason
    products = plan_kernel(n, solver="munk", solves=4, available=2 * need - 1)
    assert products.path == "rows" and "each pass computes K again" in products.reason
    asked = plan_kernel(50, gram="rows", solves=4, available=PLENTY)
    assert asked.path == "rows" and "as asked" in asked.reason


def test_a_store_that_does_not_fit_on_the_disk_is_not_written(tmp_path):
    n = 2000
    need = gram_bytes(n, "float64")  # the store read into this process is float64
    store = plan_kernel(n, solves=4, store_dir=str(tmp_path), available=PLENTY, free_disk=need)
    assert (store.path, store.store) == ("stored", True)
    no_room = plan_kernel(n, solves=4, store_dir=str(tmp_path), available=PLENTY, free_disk=need - 1)
    assert (no_room.path, no_room.store) == ("stored", False)
    assert f"its store would not fit in the {(need - 1) / 2**20:.1f} MiB free at {tmp_path}" in no_room.reason
    assert "K is built in memory, no store written" in no_room.reason
    # a store that is there already takes no more disk
    built = plan_kernel(n, solves=4, store_dir=str(tmp_path), available=PLENTY, free_disk=0,
                        store_built=True)
    assert (built.path, built.store) == ("stored", True)
    # rows on demand never write a store, whatever the disk
    assert not plan_kernel(40_000, solves=4, store_dir=str(tmp_path), available=PLENTY).store


def test_a_precomputed_kernel_is_held_as_given():
    plan = plan_kernel(100_000, kernel_name="precomputed", solves=4, available=1)
    assert (plan.path, plan.store) == ("stored", False) and "K is given" in plan.reason


def test_on_a_cluster_x_is_partitioned_or_the_store_built_or_refused_for_want_of_disk():
    from tests.dask_cluster import local_client

    with local_client(n_workers=1, memory_limit="256MiB") as client:
        ws = plan_kernel(60_000, solver="auto", solves=4, client=client, free_disk=0)
        assert (ws.path, ws.store) == ("partitioned", False) and "working-set" in ws.reason
        panels = plan_kernel(300, solver="m3", solves=4, client=client, free_disk=0)
        assert (panels.path, panels.store) == ("partitioned", False) and "kernel panels" in panels.reason
        # 20,000 samples on a worker of 256 MiB: not even a panel of 128 rows can be streamed
        need = gram_bytes(20_000, "float32")
        with pytest.raises(MuflowError, match="too little memory for this fit: the Gram store of "
                                              "20,000 samples"):
            plan_kernel(20_000, solver="m3", solves=4, client=client, store_dir="/s", free_disk=need)
    with local_client(n_workers=1, memory_limit="2GiB") as client:
        # 1.5 GiB of float32 panels, more than half of the worker's 2 GiB: the store is built
        store = plan_kernel(20_000, solver="m3", solves=4, client=client, store_dir="/s", free_disk=need)
        assert (store.path, store.store) == ("cluster-store", True)
        with pytest.raises(MuflowInputError, match=r"needs the Gram store of K of 20,000 samples "
                                                   r"\(1\.5 GiB float32\) in /s, and 1\.5 GiB is free"):
            plan_kernel(20_000, solver="m3", solves=4, client=client, store_dir="/s", free_disk=need - 1)
