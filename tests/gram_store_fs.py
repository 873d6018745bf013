"""An fsspec file system that opens only with its storage options, as an S3-compatible
store behind an ``endpoint_url`` (MinIO) does, for the tests of Gram stores under a URL.

``gramtest:///abs/path`` is the local path ``/abs/path``; building the file system without
``endpoint_url = ENDPOINT`` fails, so a store opened anywhere (this process, a Dask worker)
without the run's ``gram.storage_options`` fails in words instead of reaching the store.
No network: the files are local, the tests look at them on disk.
"""

from __future__ import annotations

import fsspec
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import stringify_path

PROTOCOL = "gramtest"
ENDPOINT = "http://gram-store.test:9000"
OPTIONS = {"endpoint_url": ENDPOINT}


class EndpointFileSystem(LocalFileSystem):
    """Local files behind ``gramtest://`` that open only with ``endpoint_url=ENDPOINT``."""

    protocol = (PROTOCOL,)

    def __init__(self, *args, endpoint_url=None, **kwargs):
        if endpoint_url != ENDPOINT:
            raise ValueError(f"{PROTOCOL}:// opens with endpoint_url={ENDPOINT!r} only, "
                             f"got endpoint_url={endpoint_url!r}")
        kwargs.setdefault("auto_mkdir", True)  # an object store has no directories to make
        super().__init__(*args, **kwargs)

    @classmethod
    def _strip_protocol(cls, path):
        path = stringify_path(path)
        if path.startswith(f"{PROTOCOL}://"):
            path = path[len(f"{PROTOCOL}://"):]
        return super()._strip_protocol(path)


def register():
    """Register the file system in this process (run on the workers too: ``client.run``)."""
    fsspec.register_implementation(PROTOCOL, EndpointFileSystem, clobber=True)


def url(path) -> str:
    """The ``gramtest://`` URL of a local path."""
    return f"{PROTOCOL}://{path}"
