"""``fn.readers.numpy``: one NumPy array per sample, from ``.npy`` files, as DALI's reader.

The files come from one of
- ``file_root``: the files directly in it, then those in each of its folders (one level,
  folders in sorted order), whose names match ``file_filter`` (case-sensitive, default
  ``*.npy``), each folder's names sorted: DALI's listing;
- ``file_list``: a text file of paths, one per line, relative to ``file_root`` if given,
  else to the list's folder;
- ``files``: paths relative to ``file_root`` (or as given without it).
They are listed once, when the pipeline is built (one ``stat`` each, checked against the
data roots: ``data_paths.py``), and digested into every checkpoint. A sample is read by
opening its file beneath its root, parsing its header (``npy_format.py``: no pickle) and
reading its data into an array of the file's dtype and shape; a file whose size changed
since the listing, or whose header does not fit its size, is DATA_LOSS naming it
(``<root N>/...``), and a file above ``limits.max_file_bytes`` or an array above
``limits.max_batch_bytes`` is RESOURCE_EXHAUSTED before its data is allocated. A file in
object storage is read whole, fetched ahead as its batch starts (``data/fetch_ahead.py``).
"""

from __future__ import annotations

import fnmatch
import io
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib import format as npy

from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted, SpecError
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.data.file_list import unfit_name
from conveyor_server.engine.data.object_urls import is_object_url
from conveyor_server.engine.ops.probes.probe_set import source_probe
from conveyor_server.engine.readers import npy_format
from conveyor_server.engine.readers.build import (
    Reader,
    ReaderRequest,
    reader_orders,
    reader_stage,
    register_reader,
)
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths
from conveyor_server.engine.readers.identity import ReaderIdentity

OP = "readers.numpy"


def _scan(root: str, pattern: str) -> list[str]:
    """DALI's listing of ``root``: matching files in it, then in each folder below it."""
    def matching(folder: str) -> list[str]:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries
                     if fnmatch.fnmatchcase(e.name, pattern) and e.is_file()]
        return [os.path.join(folder, n) for n in sorted(names)]

    with os.scandir(root) as entries:
        folders = sorted(e.name for e in entries if e.is_dir())
    found = matching(root)
    for folder in folders:
        found += matching(os.path.join(root, folder))
    return found


def list_files(args: Mapping[str, Any], paths: ReaderPaths) -> list[Located]:
    """The reader's files in reading order (before sharding and shuffling)."""
    file_root, file_list, files = args["file_root"], args["file_list"], args["files"]
    if not (file_root or file_list or files):
        raise SpecError(OP, "file_root", "one of file_root, file_list or files is required")
    if file_list and files:
        raise SpecError(OP, "files", "file_list and files cannot be used together")
    for argument, value in (("file_root", file_root), ("file_list", file_list)):
        if why := unfit_name(value):
            raise SpecError(OP, argument, f"{value!r} {why}")
    if file_root:
        paths.real_dir(file_root, "file_root")
    if file_list:
        folder = file_root or os.path.dirname(file_list)
        lines = paths.read_text(file_list, "file_list").splitlines()
        found = [os.path.join(folder, line.strip()) for line in lines if line.strip()]
    elif files:
        found = [os.path.join(file_root, f) for f in files]
    elif is_object_url(file_root):
        return _scan_objects(paths, file_root, args["file_filter"])
    else:
        found = _scan(file_root, args["file_filter"])
    if not found:
        raise _none_found(paths, file_list or file_root, "" if file_list else
                          args["file_filter"])
    return paths.locate_all(found)


def _none_found(paths: ReaderPaths, where: str, pattern: str) -> InvalidArgument:
    return InvalidArgument(f"{OP}: no files found in {paths.name(where)!r}"
                           + (f" matching {pattern!r}" if pattern else ""))


def _scan_objects(paths: ReaderPaths, root: str, pattern: str) -> list[Located]:
    """``_scan`` over an object prefix: the matching objects right below it, then those
    one folder down, folder by folder (each name-sorted)."""
    matching = [(key, item) for key, item in paths.objects_below(root, "file_root")
                if key.count("/") <= 1 and fnmatch.fnmatchcase(key.rpartition("/")[2], pattern)]
    matching.sort(key=lambda pair: ("/" in pair[0], pair[0].partition("/")[0] if "/" in
                                    pair[0] else "", pair[0].rpartition("/")[2]))
    if not matching:
        raise _none_found(paths, root, pattern)
    return [item for _, item in matching]


class NumpySource:
    """Reads one sample (one ``.npy`` file) by its index in the listing."""

    def __init__(self, files: Sequence[Located], paths: ReaderPaths,
                 limits: EngineLimits) -> None:
        self._files = files
        self._paths = paths
        self._limits = limits

    def where(self, index: int) -> str:
        return self._paths.name_of(self._files[index])

    def fetch_ahead(self, indices: Sequence[int]) -> None:
        """Start fetching these samples' files (whole objects) from object storage; a file
        above the limit is not fetched (its read refuses it)."""
        limit = self._limits.max_file_bytes
        self._paths.fetch_ahead((item, None) for item in (self._files[i] for i in indices)
                                if limit is None or item.size <= limit)

    def read(self, index: int) -> list[np.ndarray]:
        item = self._files[index]
        name = self._paths.name_of(item)
        self._check(name, "is", item.size, self._limits.max_file_bytes, "max_file_bytes")
        try:
            with self._paths.open_binary(item) as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(0)
                if size != item.size:
                    raise DataFileError(
                        f"{OP}: {name!r} has {size} bytes, but {item.size} when the pipeline "
                        "listed it: the data set changed under the pipeline")
                header = npy_format.read_header(f)
                npy_format.check_size(header, size)
                self._check(name, f"holds {header.describe()} =", header.nbytes,
                            self._limits.max_batch_bytes, "max_batch_bytes")
                return [npy_format.read_data(f, header)]
        except OSError as exc:
            raise DataFileError(f"{OP}: cannot read {name!r}: {exc.strerror or exc}") from None
        except npy_format.NpyFormatError as exc:
            raise DataFileError(f"{OP}: {name!r} {exc}") from None

    @staticmethod
    def _check(name: str, what: str, size: int, limit: int | None, key: str) -> None:
        """Refuse before reading: the file, or the array it declares, above a limit."""
        if limit is not None and size > limit:
            raise ResourceExhausted(f"{OP}: {name!r} {what} {size:,} bytes, above the "
                                    f"server's limit limits.{key} = {limit:,}; it was not read")


@register_reader(OP)
def build_numpy_reader(request: ReaderRequest) -> Reader:
    paths = ReaderPaths(OP, request.roots, request.files)
    files = list_files(request.args, paths)
    identity = ReaderIdentity(paths, files, request.args["verify"])
    return Reader(reader_stage(request, len(files)),
                  NumpySource(files, paths, request.limits), identity, identity.count,
                  reads_objects=any(paths.is_object(f) for f in files))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


def _npy_bytes(array: np.ndarray, fortran: bool) -> bytes:
    f = io.BytesIO()
    npy.write_array(f, np.asfortranarray(array) if fortran else array, version=(1, 0))
    return f.getvalue()


@source_probe("readers.numpy")
def _numpy() -> list[np.ndarray]:
    out = reader_orders("readers.numpy")
    base = (np.arange(60, dtype=np.int64) * 2654435761 % 1000 - 500).reshape(3, 4, 5)
    for name in npy_format.DTYPES:
        for dtype in (np.dtype(name).newbyteorder("<"), np.dtype(name).newbyteorder(">")):
            for array in (base.astype(dtype), base[0].astype(dtype),
                          np.asarray(7, dtype=dtype), np.zeros((0, 3), dtype=dtype)):
                for fortran in (False, True):
                    f = io.BytesIO(_npy_bytes(array, fortran))
                    out.append(npy_format.read_data(f, npy_format.read_header(f)))
    return out
