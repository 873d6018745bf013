"""Data: where a data set lives and how it is read and checked.

- :mod:`muflow.data.files`: the file loaders (CSV, LIBSVM/svmlight, .npz) and
  :func:`check_finite`;
- :mod:`muflow.data.source`: :class:`DataSource`, a path, directory, glob, list or fsspec URL
  with its format, columns and ``storage_options``; its files and their fingerprint;
- :mod:`muflow.data.columns`: the one rule for a CSV header and for the label and feature
  columns, on every path;
- :mod:`muflow.data.tabular`: a source's layout (columns, schemas, rows per file) checked
  from metadata before anything is read;
- :mod:`muflow.data.local`: a source read whole into this process;
- :mod:`muflow.data.workers`: a source read by the Dask workers and split there.

Importing this package imports NumPy and SciPy only (predicting from a saved model checks
its input with :func:`check_finite`).
"""

from muflow.data.files import FORMATS as FILE_FORMATS
from muflow.data.files import SVMLIGHT_SUFFIXES, check_finite, detect_format, load_data
from muflow.data.source import FORMATS, DataSource, parse_storage_options

__all__ = ["DataSource", "FILE_FORMATS", "FORMATS", "SVMLIGHT_SUFFIXES", "check_finite",
           "detect_format", "load_data", "parse_storage_options"]
