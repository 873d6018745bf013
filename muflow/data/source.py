"""Where a data set lives: a :class:`DataSource` (path or URL, format, columns, storage
options), the files it names, and their fingerprint.

A path is a local file, a directory, a glob (``data/part-*.parquet``), a list of those, or
an fsspec URL of any of them (``s3://bucket/train/``, ``gs://...``, ``abfs://...``,
``file:///...``). ``storage_options`` go to the file system as they go to
``dask.dataframe.read_parquet``; a string value ``"${NAME}"`` is the environment variable
NAME, read when the data are read, so that the files a run writes (``config.json``) name
the variable and never hold the credential. A literal credential under a key that holds
one (``key``, ``secret``, ``token``, ...) is refused.

The fingerprint of a source (:meth:`DataSource.fingerprint`) lists its files with their
sizes and modification times or ETags, read from the file system's listing (no data are
read): a run directory records it and a resumed run compares it, so that a run is never
resumed on changed data. Listing a URL is bounded by ``timeout`` seconds: an endpoint
that does not answer is an error, not a hang.

This module imports fsspec only when a source is listed; no Dask here.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from muflow.exceptions import DataFileError, MuflowInputError

#: The formats a source can hold.
FORMATS = ("parquet", "zarr", "csv", "svmlight", "npz")
#: Suffix -> format (a suffix not listed is read as CSV, as a single local file always was).
SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".zarr": "zarr", ".csv": "csv",
            ".txt": "csv", ".svm": "svmlight", ".svmlight": "svmlight", ".libsvm": "svmlight",
            ".npz": "npz"}
#: Storage option keys whose value is a credential: it must name an environment variable.
SECRET_KEYS = frozenset({
    "key", "secret", "token", "password", "access_key_id", "secret_access_key",
    "aws_access_key_id", "aws_secret_access_key", "aws_session_token", "session_token",
    "account_key", "sas_token", "client_secret", "connection_string"})
#: Seconds a listing of a URL may take before the endpoint is called unreachable.
DEFAULT_TIMEOUT = 10.0

_ENV = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class DataSource:
    """A labelled data set where it lives.

    Parameters
    ----------
    path : str or tuple of str
        A file, a directory, a glob or an fsspec URL, or several of them (one format).
    format : {"parquet", "zarr", "csv", "svmlight", "npz"}, optional
        Default: from the suffix of the path (or of the files in a directory).
    label_column : str, int or False, optional
        Column of the labels (name, or 0-based index); default: the last column. False:
        the data have no labels (CSV, Parquet, npz without y; features to predict from),
        and y is None.
    feature_columns : tuple of str, optional
        Columns of X; default: every numeric column but the label.
    storage_options : dict, optional
        Options of the file system (``endpoint_url``, ``anon``, ``client_kwargs``...);
        ``"${NAME}"`` values are environment variables.
    n_features : int, optional
        svmlight only: the number of features.
    zero_based : bool or "auto", default="auto"
        svmlight only: whether the feature indices start at 0; "auto" guesses from the
        file (:func:`muflow.data.files.read_svmlight`). A test file is read as its
        training file was (the layout :func:`muflow.data.local.load_source` returns says).
    timeout : float, default=10
        Seconds a listing may take.
    """

    path: str | tuple = ""
    format: str | None = None
    label_column: str | int | bool | None = None
    feature_columns: tuple | None = None
    storage_options: dict = field(default_factory=dict)
    n_features: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    zero_based: bool | str = "auto"

    def paths(self) -> list[str]:
        return [self.path] if isinstance(self.path, str) else list(self.path)

    @property
    def label(self) -> str:
        """The source as a person reads it: its path, or the first of its paths and a count."""
        paths = self.paths()
        return paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"

    @property
    def is_url(self) -> bool:
        return any("://" in p for p in self.paths())

    def options(self) -> dict:
        """``storage_options`` with every ``"${NAME}"`` replaced by the environment's value."""
        return expand_env(self.storage_options, "storage_options")

    def kind(self, files: list[str] | None = None) -> str:
        """The format: given, or from the suffix of the path or of its files."""
        if self.format is not None:
            return check_format(self.format)
        for text in self.paths():
            found = SUFFIXES.get(_suffix(text))
            if found:
                return found
        for name in files or ():
            found = SUFFIXES.get(_suffix(name))
            if found:
                return found
        if files and len(files) > 1 or any(_GLOB.search(p) or p.endswith("/") for p in self.paths()):
            raise DataFileError(f"data path {self.label!r}: cannot tell the format from the file "
                                f"names; give format = one of {', '.join(FORMATS)}")
        if len(self.paths()) == 1 and not self.is_url:  # one local file: its first line tells
            from muflow.data.files import detect_format

            return detect_format(Path(self.paths()[0]))
        return "csv"

    def filesystem(self):
        """``(fs, [path without protocol, ...])`` of every path (one file system)."""
        from fsspec.core import url_to_fs

        options = self.options()
        found = None
        stripped = []
        for text in self.paths():
            try:
                fs, root = url_to_fs(text, **options)
            except (ImportError, ValueError) as exc:
                raise MuflowInputError(f"data path {text!r}: {exc}") from None
            except TypeError as exc:
                raise MuflowInputError(f"data path {text!r}: storage_options not accepted by its "
                                       f"file system ({exc})") from None
            if found is not None and type(fs) is not type(found):
                raise MuflowInputError(f"data paths {self.label!r} are on different file systems; "
                                       "give paths of one kind")
            found = found or fs
            stripped.append(root)
        return found, stripped

    def files(self) -> list[dict]:
        """Every file of the source, sorted: ``{"path", "size", "modified"}`` (the listing's
        modification time or ETag). A zarr store lists the files inside it. Bounded by
        :attr:`timeout`; a path that names nothing raises :class:`DataFileError`."""
        return _within(self.timeout, self._list, f"data path {self.label!r}")

    def fingerprint(self) -> dict:
        """What a resumed run compares: the files (path, size, modification time or ETag)
        and how they are read (format, columns)."""
        files = self.files()
        return {"files": files, "format": self.kind([f["path"] for f in files]),
                "label_column": self.label_column,
                "feature_columns": None if self.feature_columns is None else list(self.feature_columns)}

    def _list(self) -> list[dict]:
        fs, roots = self.filesystem()
        kind = self.format and check_format(self.format)
        out = []
        for text, root in zip(self.paths(), roots):
            if _GLOB.search(root):
                names = sorted(fs.glob(root))
                if not names:
                    raise DataFileError(f"data path {text!r} matches no file; check the pattern")
            elif not fs.exists(root):
                hint = " (and storage_options)" if "://" in text else ""
                raise DataFileError(f"data path {text!r} does not exist; check the path{hint}")
            elif fs.isdir(root):
                if (kind or SUFFIXES.get(_suffix(root))) == "zarr":
                    names = [root]
                else:
                    names = [n for n in sorted(fs.find(root)) if _data_file(n)]
                    if not names:
                        raise DataFileError(f"data path {text!r} is a directory with no data files")
            else:
                names = [root]
            for name in names:
                if fs.isdir(name):  # a zarr store: its files say when it changed
                    inner = sorted(fs.find(name, detail=True).items())
                    out += [_entry(fs, n, info) for n, info in inner]
                else:
                    out.append(_entry(fs, name, fs.info(name)))
        return out


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise MuflowInputError(f"unknown data format {fmt!r}; choose one of {', '.join(FORMATS)}")
    return fmt


def _suffix(text: str) -> str:
    return PurePosixPath(str(text).rstrip("/")).suffix.lower()


def _data_file(name: str) -> bool:
    """Not a hidden or bookkeeping file (``_SUCCESS``, ``_metadata``, ``.crc``)."""
    base = PurePosixPath(name).name
    return not base.startswith(("_", "."))


def _entry(fs, name: str, info: dict) -> dict:
    modified = None
    for key in ("ETag", "etag", "md5Hash", "mtime", "LastModified", "last_modified", "updated",
                "created"):
        if info.get(key) is not None:
            modified = str(info[key])
            break
    return {"path": fs.unstrip_protocol(name), "size": int(info.get("size") or 0),
            "modified": modified}


def _within(seconds: float, call, what: str):
    """``call()`` in a daemon thread, at most ``seconds``: a file system that does not answer
    (an unreachable endpoint) is a one-line error and leaves nothing that keeps the
    process from exiting."""
    result = {}

    def target():
        try:
            result["value"] = call()
        except BaseException as exc:  # handed to the caller
            result["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="muflow-list-data")
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise DataFileError(f"{what} did not answer within {seconds:g} s; check the URL, the "
                            "endpoint (storage_options) and the network")
    if "error" in result:
        exc = result["error"]
        if isinstance(exc, MuflowInputError):
            raise exc
        if isinstance(exc, FileNotFoundError):
            raise DataFileError(f"{what} does not exist; check the path") from None
        if isinstance(exc, PermissionError):
            raise DataFileError(f"{what}: access denied ({exc}); check the credentials in the "
                                "environment") from None
        raise DataFileError(f"{what} cannot be listed ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())}); check the URL and storage_options") from None
    return result["value"]


def expand_env(value, where: str):
    """``value`` with every string ``"${NAME}"`` (at any depth) replaced by the environment
    variable NAME; a variable that is not set is an error naming it."""
    if isinstance(value, dict):
        return {k: expand_env(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [expand_env(v, where) for v in value]
    if isinstance(value, str):
        m = _ENV.match(value)
        if m:
            if m.group(1) not in os.environ:
                raise MuflowInputError(f"{where} names the environment variable {m.group(1)}, "
                                       "which is not set; export it before the run")
            return os.environ[m.group(1)]
    return value


def check_storage_options(options, where: str = "storage_options") -> dict:
    """A storage-options table whose credentials are environment references, never values."""
    if not isinstance(options, dict):
        raise MuflowInputError(f"{where} must be a table (a JSON object), got {options!r}")
    for k, v in options.items():
        if isinstance(v, dict):
            check_storage_options(v, f"{where}.{k}")
        elif k.lower() in SECRET_KEYS and isinstance(v, str) and not _ENV.match(v):
            raise MuflowInputError(
                f"{where}.{k} holds a literal credential; name an environment variable instead "
                f"({k} = \"${{MY_VARIABLE}}\"), or leave it out and let the file system read its "
                "usual variables (AWS_ACCESS_KEY_ID, ...)")
    return options


def parse_storage_options(text: str | None, option: str = "--storage-options") -> dict:
    """``--storage-options JSON`` of the command line (or another ``option`` of that form)."""
    if not text:
        return {}
    try:
        options = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MuflowInputError(f"{option} must be a JSON object, e.g. "
                               f"'{{\"anon\": true}}' ({exc.msg})") from None
    return check_storage_options(options, option)


def absolute_location(location) -> str:
    """A local path made absolute, an fsspec URL (``s3://...``) as it is: what a Dask worker
    must be given, since it resolves a relative path against its own working directory (a
    relative ``--out`` or ``--cache-dir`` once made workers fail with "K.zarr does not
    exist"). The one rule for every location handed to the workers: data files, Gram stores
    and their cache directory."""
    location = os.fspath(location)
    return location if "://" in location else os.path.abspath(location)
