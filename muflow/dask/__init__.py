"""The Dask side of muflow: X partitioned over the workers and the working-set loop's state
there (``partitions``, ``working_set``), kernel panels for the multiplicative solvers
(``panels``), the Gram store served by the workers (``store_operator``), a whole fit on one
worker (``fitting``), prediction on Dask collections (``predict``) and the cluster helpers
(``cluster``). Importing this package imports no Dask."""
