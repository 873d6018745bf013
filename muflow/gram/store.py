"""The Gram store: K(X, X) in a zarr v3 array with its provenance in plain JSON attributes.

A store is an ``n x n`` zarr v3 array, chunked in square tiles (:mod:`muflow.gram.tiling`),
uncompressed, no shards (one writer per chunk: zarr loses data when two tasks write parts
of one shard). Every chunk carries a CRC-32C checksum (zarr v3's ``crc32c`` codec), which
zarr verifies on every read: a chunk overwritten, truncated or zeroed on disk fails to
decode instead of reading as wrong numbers, and a deleted one reads as the NaN fill value.
:meth:`GramStore.read_block` turns either into a :class:`StoreCorruptError` that names the
store, the tile and the repair. It opens with plain ``zarr.open_array(path)``; its
attributes are plain JSON:

``muflow_version``  version that wrote it
``kernel``          the kernel and its parameters (:meth:`muflow.kernels.Kernel.to_dict`)
``fingerprint``     of X: ``sha256`` of its bytes, ``shape``, ``dtype``, ``format``
``dtype``           of the stored entries ("float32" by default)
``tile``            tile side; ``n`` the number of samples
``tiles_complete``  upper-triangle tiles [I, J] (I <= J) whose two chunks are written

Only the process that drives a build writes the attributes (workers write chunks only), so
the attribute document has one writer too. A tile enters ``tiles_complete`` after its
chunks are written, so an interrupted build leaves a store whose recorded tiles are
trustworthy; the rest are rebuilt. The fill value is NaN: a chunk that is recorded but
missing or unreadable reads as NaN or fails to decode, and :meth:`GramStore.missing_tiles`
finds it (``deep=True`` reads every tile).

A cache directory maps (fingerprint of X, kernel, dtype) to a store: ``<key>.zarr`` in the
directory, where ``key`` is a hash of the three (:func:`cache_key`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np
import scipy.sparse as sp
import zarr
from zarr.core.sync import sync

from muflow.atomic import unwritable_error, write_json
from muflow.exceptions import MuflowInputError
from muflow.gram.tiling import n_tiles, tile_bounds, tile_pairs
from muflow.kernels import Kernel

#: 2: chunks carry CRC-32C checksums. Stores of format 1 (none) are refused with the repair.
FORMAT = 2
DTYPES = ("float32", "float64")


class StoreMismatchError(MuflowInputError):
    """A Gram store was built for other data, another kernel or another dtype."""


class StoreCorruptError(MuflowInputError):
    """A path holds something that is not a muflow Gram store."""


def fingerprint(X) -> dict:
    """Content address of the data: sha256 of the bytes, with shape, dtype and format.

    Sparse matrices are hashed in canonical CSR form (sorted indices, no duplicates), so
    the same matrix loaded twice hashes the same.
    """
    h = hashlib.sha256()
    if sp.issparse(X):
        A = sp.csr_matrix(X, copy=True)
        A.sum_duplicates()
        A.sort_indices()
        fmt = "csr"
        dtype = A.dtype
        shape = A.shape
        for part in (A.data, A.indices.astype(np.int64), A.indptr.astype(np.int64)):
            h.update(np.ascontiguousarray(part).view(np.uint8).data)
    else:
        A = np.ascontiguousarray(np.asarray(X))
        fmt = "dense"
        dtype = A.dtype
        shape = A.shape
        h.update(A.view(np.uint8).data if A.size else b"")
    h.update(json.dumps([fmt, list(shape), str(dtype)]).encode())
    return {"sha256": h.hexdigest(), "shape": [int(s) for s in shape], "dtype": str(dtype),
            "format": fmt}


def cache_key(fp: dict, kernel: Kernel, dtype: str) -> str:
    """Hash of (fingerprint, kernel, dtype): the store's name in a cache directory."""
    doc = json.dumps({"fingerprint": fp["sha256"], "kernel": kernel.to_dict(), "dtype": dtype,
                      "format": FORMAT}, sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:24]


def cache_path(cache_dir: str, fp: dict, kernel: Kernel, dtype: str) -> str:
    """Where the cache directory keeps the store for (fingerprint, kernel, dtype)."""
    return _join(str(cache_dir), f"gram-{cache_key(fp, kernel, dtype)}.zarr")


def default_cache_dir() -> str:
    """``$MUFLOW_CACHE_DIR`` or ``~/.cache/muflow/gram``: where stores go by default.

    With a remote cluster this must be a path (or URL) that the workers can reach too.
    """
    return os.environ.get("MUFLOW_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "muflow", "gram")


def lookup_cache(cache_dir: str, fp: dict, kernel: Kernel, dtype: str) -> str:
    """The store the cache directory holds for (fingerprint, kernel, dtype): its own
    ``gram-<key>.zarr``, or the store a ``gram-<key>.json`` pointer names (a store written
    elsewhere with ``--out``) when that one exists and its attributes still say it was
    built for these data, this kernel and dtype. A pointer to a store since deleted or
    rebuilt for something else is ignored: the cache's own store serves instead."""
    own = cache_path(cache_dir, fp, kernel, dtype)
    pointer = _join(str(cache_dir), f"gram-{cache_key(fp, kernel, dtype)}.json")
    if "://" not in str(cache_dir) and not store_exists(own) and os.path.exists(pointer):
        try:
            with open(pointer) as fh:
                target = json.load(fh)["store"]
            GramStore.open(target, mode="r").check_matches(fp, kernel, dtype)
            return target
        except (OSError, ValueError, KeyError, TypeError):  # MuflowInputError is a ValueError
            pass
    return own


def record_in_cache(cache_dir: str, fp: dict, kernel: Kernel, dtype: str, url: str):
    """Point the cache directory at a store written elsewhere (atomic JSON write)."""
    if "://" in str(cache_dir):
        return
    try:
        os.makedirs(cache_dir, exist_ok=True)
    except PermissionError as exc:
        raise unwritable_error(cache_dir, exc, "--cache-dir", f"the pointer to {url}") from None
    if "://" not in url:
        url = os.path.abspath(url)
    if url == os.path.abspath(cache_path(cache_dir, fp, kernel, dtype)):
        return
    path = os.path.join(cache_dir, f"gram-{cache_key(fp, kernel, dtype)}.json")
    try:
        write_json(path, {"store": url, "kernel": kernel.to_dict(), "fingerprint": fp,
                          "dtype": dtype})
    except PermissionError as exc:
        raise unwritable_error(cache_dir, exc, "--cache-dir", f"the pointer to {url}") from None


def check_directory(path, option: str, *, shown=None):
    """Refuse a local directory path with a file in the way, at ``path`` or above it (the
    ``makedirs`` that follows raised ``FileExistsError`` or ``NotADirectoryError``), in one
    line naming ``option`` and ``shown`` (default ``path``), the path as the user gave it."""
    path = os.fspath(path)
    shown = path if shown is None else shown
    if "://" in path:
        return
    probe = os.path.abspath(path)
    while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    if os.path.isdir(probe):
        return
    where = f"{shown} is" if probe == os.path.abspath(shown) else f"{shown}: {probe} is"
    raise MuflowInputError(f"{option} {where} a file, not a directory; choose another {option}")


def check_store_target(url, storage_options=None, option="--out"):
    """Refuse to write a new Gram store at ``url`` where something other than a Gram store
    is: a file, a zarr group (a data set), a directory of other files. Nothing, an empty
    directory and a zarr array pass (an array is then opened and validated as a store:
    :meth:`GramStore.check_matches`), so that a store is only ever created where it would
    replace nothing (``zarr.create_array(overwrite=True)`` deletes what is there)."""
    url = normalize_url(url)
    if "://" not in url:
        check_directory(os.path.dirname(os.path.abspath(url)), option, shown=url)
    if store_exists(url, storage_options):
        return
    what = _held_at(url, storage_options)
    if what == _DAMAGED:
        raise MuflowInputError(
            f"{option} {url} is a zarr store whose metadata (zarr.json) cannot be read: it is "
            f"damaged; delete it (rm -r {url}) to build the store there again, or choose "
            f"another {option}")
    if what is not None:
        raise MuflowInputError(
            f"{option} {url} {what}, not a Gram store, and writing the store there would "
            f"replace it; choose another {option} (a new path or an empty directory)")


def _held_at(url: str, storage_options=None) -> str | None:
    """What a path that is not a zarr array holds, in words, or None for nothing at all
    (or an empty directory)."""
    if "://" in url:
        import fsspec

        try:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
            if not fs.exists(path):
                return None
            if not fs.isdir(path):
                return "is a file"
            names = sorted(os.path.basename(str(p).rstrip("/")) for p in fs.ls(path, detail=False))
        except (OSError, ValueError):  # unreachable here: zarr says what is wrong when it writes
            return None
        return _directory_text(names, _zarr_node_type(fs.cat_file, path + "/zarr.json"))
    if not os.path.lexists(url):
        return None
    if os.path.islink(url) and not os.path.exists(url):
        return "is a broken link"
    if not os.path.isdir(url):
        return "is a file"
    return _directory_text(sorted(os.listdir(url)), _zarr_node_type(
        lambda p: open(p, "rb").read(), os.path.join(url, "zarr.json")))


_DAMAGED = "damaged"  # a zarr.json that is there but does not read as zarr's metadata


def _zarr_node_type(read, path) -> str | None:
    """``zarr.json``'s node type ("array", "group"), None where there is none, or
    :data:`_DAMAGED`."""
    try:
        content = read(path)
    except OSError:
        return None
    try:
        return json.loads(content).get("node_type") or _DAMAGED
    except (ValueError, AttributeError):
        return _DAMAGED


def _directory_text(names: list, node_type: str | None) -> str | None:
    if not names:
        return None
    if node_type == _DAMAGED:
        return _DAMAGED
    shown = [n for n in names if n != "zarr.json"] if node_type == "group" else names
    shown = ", ".join(shown[:5]) + (", ..." if len(shown) > 5 else "")
    if node_type == "group":
        return f"is a zarr group ({shown})"
    return f"is a directory that holds other things ({shown})"


def normalize_url(url) -> str:
    """A store location as zarr and the workers open it: ``file://`` URLs become paths
    (fsspec's local filesystem does not create the chunk directories)."""
    url = os.fspath(url) if not isinstance(url, str) else url
    if url.startswith("file://"):
        url = url[len("file://"):]
    return url


def absolute_location(url) -> str:
    """A store location as the Dask workers must be given it
    (:func:`muflow.data.source.absolute_location`, after :func:`normalize_url`)."""
    from muflow.data.source import absolute_location as absolute

    return absolute(normalize_url(url))


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if "://" in base else os.path.join(base, name)


def check_dtype(dtype) -> str:
    dtype = np.dtype(dtype).name if dtype is not None else "float32"
    if dtype not in DTYPES:
        raise MuflowInputError(f"Gram dtype must be float32 or float64, got {dtype!r}")
    return dtype


def _kernel_text(d: dict) -> str:
    k = Kernel.from_dict(d)
    return ", ".join(f"{key}={value}" for key, value in k.params().items())


class GramStore:
    """A muflow Gram store opened from a path or fsspec URL.

    Attributes
    ----------
    url : str
    array : zarr.Array of shape (n, n)
    n, tile : int
    dtype : str
    kernel : Kernel
    fingerprint : dict
    storage_options : dict or None
        Of the file system at ``url`` (an fsspec URL): every open of the store, here and by
        the workers that write its tiles or serve its panels, is given them.
    """

    def __init__(self, url: str, array, storage_options=None):
        self.url = absolute_location(url)  # what the workers open: see absolute_location
        self.array, self.storage_options = array, storage_options or None
        attrs = dict(array.attrs)
        try:
            self.n = int(attrs["n"])
            self.tile = int(attrs["tile"])
            self.dtype = str(attrs["dtype"])
            self.kernel = Kernel.from_dict(attrs["kernel"])
            self.fingerprint = dict(attrs["fingerprint"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreCorruptError(
                f"{url} is a zarr array but not a muflow Gram store (attribute {exc} is "
                "missing or invalid); delete it or choose another --out"
            ) from None
        if int(attrs.get("muflow_format", 1)) < FORMAT:
            raise StoreCorruptError(
                f"{url} is a Gram store written by an older muflow, without tile checksums "
                f"(format {attrs.get('muflow_format', 1)}); delete it (rm -r {url}) and build it "
                "again: stores are caches of K(X, X), nothing is lost"
            )
        if array.shape != (self.n, self.n) or array.chunks != (self.tile, self.tile):
            raise StoreCorruptError(
                f"{url}: array shape {array.shape} / chunks {array.chunks} disagree with its "
                f"attributes (n={self.n}, tile={self.tile}); delete it to rebuild"
            )

    # -- creation / opening -----------------------------------------------------------
    @classmethod
    def create(cls, url, *, n: int, tile: int, dtype: str, kernel: Kernel, fp: dict,
               storage_options=None) -> "GramStore":
        from muflow import __version__

        attrs = {
            "muflow_format": FORMAT,
            "muflow_version": __version__,
            "kernel": kernel.to_dict(),
            "kernel_params": kernel.params(),
            "fingerprint": fp,
            "dtype": dtype,
            "n": int(n),
            "tile": int(tile),
            "n_tile_pairs": len(tile_pairs(n, tile)),
            "tiles_complete": [],
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        url = normalize_url(url)
        from zarr.codecs import Crc32cCodec

        array = zarr.create_array(
            store=url, shape=(n, n), chunks=(tile, tile), dtype=dtype,
            compressors=[Crc32cCodec()], fill_value=np.nan, zarr_format=3, attributes=attrs,
            overwrite=True, storage_options=storage_options,
        )
        return cls(url, array, storage_options)

    @classmethod
    def open(cls, url, mode="r+", storage_options=None) -> "GramStore":
        url = normalize_url(url)
        try:
            array = zarr.open_array(url, mode=mode, storage_options=storage_options)
        except FileNotFoundError:
            raise MuflowInputError(f"no Gram store at {url}") from None
        except Exception as exc:  # zarr raises several types for a non-array path
            raise StoreCorruptError(f"{url} is not a readable zarr array ({exc})") from None
        return cls(url, array, storage_options)

    # -- provenance -------------------------------------------------------------------
    def check_matches(self, fp: dict, kernel: Kernel, dtype: str | None = None):
        """Refuse a store built for other data, another kernel or dtype; say which."""
        problems = []
        if fp["sha256"] != self.fingerprint.get("sha256"):
            problems.append(
                f"the data differ (store: shape {self.fingerprint.get('shape')}, "
                f"sha256 {str(self.fingerprint.get('sha256'))[:12]}...; given: shape "
                f"{fp['shape']}, sha256 {fp['sha256'][:12]}...)")
        if kernel.to_dict() != self.kernel.to_dict():
            problems.append(
                f"the kernel differs (store: {_kernel_text(self.kernel.to_dict())}; given: "
                f"{_kernel_text(kernel.to_dict())})")
        if dtype is not None and dtype != self.dtype:
            problems.append(f"the dtype differs (store: {self.dtype}; given: {dtype})")
        if problems:
            raise StoreMismatchError(
                f"Gram store {self.url} does not match: " + "; ".join(problems)
                + ". Use another --out, or delete the store to rebuild it")

    # -- completeness -----------------------------------------------------------------
    def recorded_tiles(self) -> set[tuple[int, int]]:
        attrs = dict(self.array.attrs)
        return {(int(i), int(j)) for i, j in attrs.get("tiles_complete", [])}

    def record_tiles(self, done: set[tuple[int, int]]):
        """Write the set of complete tiles (only the build driver calls this)."""
        self.array = self.array.update_attributes(
            {"tiles_complete": sorted([int(i), int(j)] for i, j in done)})

    def chunk_exists(self, i: int, j: int) -> bool:
        sp_ = self.array.store_path
        key = self.array.metadata.encode_chunk_key((i, j))
        path = f"{sp_.path}/{key}" if sp_.path else key
        return bool(sync(sp_.store.exists(path)))

    def missing_tiles(self, deep: bool = False) -> list[tuple[int, int]]:
        """Upper-triangle tiles still to compute: unrecorded, or recorded but damaged.

        A recorded tile is damaged when one of its chunks is absent; with ``deep=True``
        also when it fails to decode or holds NaN (the fill value) or non-finite values.
        """
        recorded = self.recorded_tiles()
        missing = []
        for i, j in tile_pairs(self.n, self.tile):
            ok = (i, j) in recorded and self.chunk_exists(i, j) and self.chunk_exists(j, i)
            if ok and deep:
                ok = self._tile_is_sound(i, j)
            if not ok:
                missing.append((i, j))
        return missing

    def _tile_is_sound(self, i, j) -> bool:
        """Both chunks of tile (i, j) decode (their checksums hold) and are finite."""
        return self.chunk_problem(i, j) is None and self.chunk_problem(j, i) is None

    def chunk_problem(self, i: int, j: int) -> str | None:
        """What is wrong with chunk (i, j), or None: it fails to decode (checksum,
        truncation) or holds non-finite values (NaN: the fill value of a missing chunk)."""
        r0, r1 = tile_bounds(i, self.n, self.tile)
        c0, c1 = tile_bounds(j, self.n, self.tile)
        try:
            block = self.array[r0:r1, c0:c1]
        except Exception as exc:  # zarr's checksum and size errors are ValueErrors, others vary
            return f"it fails to decode ({type(exc).__name__}: {str(exc)[:120]})"
        if not np.all(np.isfinite(block)):
            return "it is missing or holds non-finite values"
        return None

    def read_block(self, r0: int, r1: int, c0: int = 0, c1: int | None = None) -> np.ndarray:
        """``K[r0:r1, c0:c1]`` read and verified: every chunk's checksum is checked by zarr,
        and the values must be finite. A damaged chunk raises :class:`StoreCorruptError`
        naming the store, the tile and the repair (:func:`damaged_error`)."""
        c1 = self.n if c1 is None else c1
        try:
            block = np.asarray(self.array[r0:r1, c0:c1])
            if np.all(np.isfinite(block)):
                return block
        except Exception:
            pass
        raise self.damaged_error(r0, r1, c0, c1)

    def damaged_error(self, r0, r1, c0, c1) -> "StoreCorruptError":
        """The error for a damaged region: the first damaged chunk in it, and the repair."""
        t = self.tile
        for i in range(r0 // t, (max(r1, r0 + 1) - 1) // t + 1):
            for j in range(c0 // t, (max(c1, c0 + 1) - 1) // t + 1):
                problem = self.chunk_problem(i, j)
                if problem is not None:
                    return damaged_store_error(self.url, (i, j), problem)
        return damaged_store_error(self.url, None, "it changed while being read")

    @property
    def complete(self) -> bool:
        return not self.missing_tiles()

    @property
    def n_tiles(self) -> int:
        return n_tiles(self.n, self.tile)

    @property
    def nbytes(self) -> int:
        return self.n * self.n * np.dtype(self.dtype).itemsize

    def read(self) -> np.ndarray:
        """The whole matrix in memory (small stores, tests), verified (:meth:`read_block`)."""
        return self.read_block(0, self.n)

    def __repr__(self):
        return (f"GramStore({self.url!r}, n={self.n}, tile={self.tile}, dtype={self.dtype}, "
                f"{_kernel_text(self.kernel.to_dict())})")


def damaged_store_error(url: str, tile, problem: str) -> StoreCorruptError:
    """A damaged Gram store, named with its tile and the command that repairs it."""
    where = f"tile {tuple(int(v) for v in tile)}" if tile is not None else "a tile"
    return StoreCorruptError(
        f"Gram store {url}: {where} is damaged ({problem}). Repair it with `python -m muflow "
        f"gram --data <the same data> --out {url} --deep-check` (recomputes the damaged "
        "tiles only), or delete the store; a fit or sweep given the data and --cache-dir "
        "recomputes it by itself"
    )


def open_store(url, *, mode="r+", storage_options=None) -> GramStore:
    """Open an existing Gram store (no validation against data)."""
    return GramStore.open(url, mode=mode, storage_options=storage_options)


def store_exists(url, storage_options=None) -> bool:
    try:
        zarr.open_array(normalize_url(url), mode="r", storage_options=storage_options)
    except Exception:
        return False
    return True
