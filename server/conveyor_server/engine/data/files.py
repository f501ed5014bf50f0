"""Reading one sample's data file: beneath its data root, bounded, checked against the
listing.

A read opens the file beneath its root without following symlinks (``data_roots.py``),
refuses a file above ``limits.max_file_bytes`` from its ``fstat`` before reading a byte,
and reads at most the listed size + 1 bytes (and never more than the limit + 1), so a file
that grows while it is read is still bounded; a size other than the listed one is
DATA_LOSS (the data set changed under the pipeline). Errors name the file relative to its
root (``<root 0>/cats/a.jpg``); the absolute path goes to the server's log only.

An object (``s3://``, ``gs://``, ``az://``) is read whole, only if its ETag (and version)
is still the listed one and its size within the limit; it is fetched ahead of the read
when its batch starts (``fetch_ahead.py``), and a failure is a ``DataFileError`` naming its
bucket and key. The
pipeline's one ``FetchAhead`` is held here (``ahead``): the other readers' objects and
byte ranges are fetched ahead through it too (``readers/data_paths.py``), under one bound.
"""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np

from conveyor.errors import ConveyorError, DataFileError, ResourceExhausted
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.data.batch_read import read_into
from conveyor_server.engine.data.entries import FileEntry
from conveyor_server.engine.data.fetch_ahead import FetchAhead, Wanted
from conveyor_server.engine.data.object_errors import ObjectStoreFailure, read_error
from conveyor_server.engine.data.object_store import ObjectInfo, ObjectStores
from conveyor_server.engine.data.object_urls import ObjectUrl, is_object_url, parse_object_url
from conveyor_server.engine.data.root_handles import RootHandles
from conveyor_server.engine.data.roots import (
    DataRoots,
    open_below,
    regular_file,
    root_label,
    swapped_link,
)

log = logging.getLogger("conveyor.engine")

OP = "readers.file"


def read_at_most(fd: int, count: int) -> np.ndarray:
    """Up to ``count`` bytes from ``fd``: fewer only at its end."""
    buffer = np.empty(count, dtype=np.uint8)
    return buffer[:read_into(fd, memoryview(buffer.data))]


class DataFiles:
    """How a pipeline's readers open and read their files (``roots=None``: any path, as
    listed, for a pipeline in a trainer's own process)."""

    def __init__(self, roots: DataRoots | None, limits: EngineLimits = NO_LIMITS,
                 objects: ObjectStores | None = None) -> None:
        self.roots = roots
        self.limits = limits
        #: The roots' open directories, which files are opened beneath (None without roots).
        self.handles = RootHandles(roots) if roots is not None else None
        self._objects = objects
        self._own_objects: ObjectStores | None = None
        self._ahead: FetchAhead | None = None

    @property
    def objects(self) -> ObjectStores:
        """The clients of object storage (by default configured by the environment, made
        on first use and closed with these files)."""
        if self._objects is None:
            self._objects = self._own_objects = ObjectStores()
        return self._objects

    def close(self) -> None:
        """Drop what was fetched ahead; close the roots' directories and the clients made
        here (a server's are its)."""
        self.forget_ahead()
        if self.handles is not None:
            self.handles.close()
        if self._own_objects is not None:
            self._own_objects.close()

    @property
    def ahead(self) -> FetchAhead:
        """What the pipeline's readers fetch ahead of their reads (one per pipeline, made on
        first use)."""
        if self._ahead is None:
            s = self.objects.settings
            self._ahead = FetchAhead(self.objects, s.fetch_ahead_objects, s.fetch_ahead_bytes)
        return self._ahead

    def object_of(self, entry: FileEntry) -> ObjectUrl | None:
        """The entry's object URL, None for a file."""
        if not entry.etag and not is_object_url(entry.path):
            return None
        root = self.roots.object_root(entry.root) if self.roots is not None else None
        return root.below(entry.relative) if root is not None else parse_object_url(entry.path)

    def fetch_ahead(self, entries: list[FileEntry]) -> None:
        """Start fetching the objects among ``entries`` (the order they will be read in)."""
        wanted: list[Wanted] = []
        for entry in entries:
            url = self.object_of(entry)
            if url is not None:
                wanted.append((url, ObjectInfo(entry.relative, entry.size, entry.etag,
                                               entry.version), None))
        if wanted:
            self.ahead.want(wanted)

    def forget_ahead(self) -> None:
        """Drop what was fetched ahead, for every reader of the pipeline (it reads
        elsewhere now)."""
        if self._ahead is not None:
            self._ahead.clear()

    def _read_object(self, entry: FileEntry, url: ObjectUrl, ahead: bool = True) -> np.ndarray:
        """``ahead``: a sample's read, taken from what was fetched ahead; else (a data
        set's hash when the pipeline is built) fetched now."""
        name = self.name(entry)
        self.limits.check_file(entry.size, name)
        info = ObjectInfo(entry.relative, entry.size, entry.etag, entry.version)
        try:
            data = self.ahead.take(url, info) if ahead else self.objects.get(url, info)
        except ObjectStoreFailure as failure:
            raise read_error(failure, OP, name) from None
        if len(data) != entry.size:
            raise DataFileError(f"{OP}: {name!r} (bucket {url.bucket!r}, key {url.key!r}) has "
                                f"{len(data)} bytes, but {entry.size} when the pipeline listed "
                                "it: the data set changed under the pipeline",
                                bucket=url.bucket, key=url.key)
        return np.frombuffer(data, dtype=np.uint8)

    def name(self, entry: FileEntry) -> str:
        """The file as messages name it."""
        if self.roots is None or entry.root < 0:
            return entry.path
        return f"{root_label(entry.root)}/{entry.relative}".rstrip("/")

    def name_path(self, path: str) -> str:
        """A listed path as messages name it."""
        return path if self.roots is None else self.roots.name(path)

    def open(self, entry: FileEntry) -> int:
        """A descriptor of the entry's regular file; DataFileError naming it if it cannot
        be opened, or a symlink now stands where the listing had none."""
        try:
            if self.handles is not None and entry.root >= 0:
                with self.handles.held((entry.root,)) as roots:
                    root = roots[entry.root]
                    if isinstance(root, OSError):
                        raise OSError(root.errno, root.strerror)
                    assert root is not None, "an object root holds no files"
                    return open_below(root, entry.relative)
            return regular_file(os.open(entry.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK))
        except DataFileError as exc:
            raise self.unreadable(entry, exc.message) from None
        except OSError as exc:
            raise self.not_opened(entry, exc) from None

    def read(self, entry: FileEntry) -> np.ndarray:
        """The entry's bytes (a 1-D uint8 array)."""
        if (url := self.object_of(entry)) is not None:
            return self._read_object(entry, url)
        fd = self.open(entry)
        limit = self.limits.max_file_bytes
        try:
            size = os.fstat(fd).st_size
            self.limits.check_file(size, self.name(entry))
            want = entry.size if limit is None else min(entry.size, limit)
            data = read_at_most(fd, want + 1)
        except OSError as exc:
            raise self.unreadable(entry, exc.strerror or str(exc)) from None
        finally:
            os.close(fd)
        if data.size != entry.size or (limit is not None and data.size > limit):
            raise self.changed(entry, data.size, size)
        return data

    # -- errors (of a read of one file, and of a batch's: ``file_batch.py``) ---------------

    def unreadable(self, entry: FileEntry, why: str) -> DataFileError:
        return DataFileError(f"{OP}: cannot read {self.name(entry)!r}: {why}")

    def not_opened(self, entry: FileEntry, exc: OSError) -> DataFileError:
        """Why the entry's file could not be opened: a symlink (or a non-folder) met on its
        path beneath the root is said so, and logged with the absolute path."""
        if self.roots is not None and swapped_link(exc):
            name = self.name(entry)
            log.warning("%s: refused to read %s (%s): a symlink or a non-folder is on its "
                        "path beneath %s", OP, entry.path, name, self.roots.real[entry.root])
            return DataFileError(
                f"{OP}: cannot read {name!r}: a symbolic link (or something that is not a "
                "folder) now stands on its path beneath the data root, where the listing "
                "had none; symlinks are not followed after the pipeline is built")
        return self.unreadable(entry, exc.strerror or str(exc))

    def changed(self, entry: FileEntry, got: int, size: int) -> ConveyorError:
        """The refusal of a file of which ``got`` bytes were read (at most its listed size
        + 1, the limit + 1 where the listed size is above it) and whose fstat said ``size``:
        it grew above the limit, or its size is not the listed one."""
        limit = self.limits.max_file_bytes
        if limit is not None and got > limit:
            return ResourceExhausted(
                f"{OP}: {self.name(entry)!r} grew above the server's limit "
                f"limits.max_file_bytes = {limit:,} while it was read; it was not used")
        shown = max(size, got) if got > entry.size else got
        return DataFileError(f"{OP}: {self.name(entry)!r} has {shown} bytes, but "
                             f"{entry.size} when the pipeline listed it: the data set "
                             "changed under the pipeline")

    def sha256(self, entry: FileEntry) -> str:
        """The SHA-256 of the entry's contents (a data set's identity), opened as a read
        opens it."""
        if (url := self.object_of(entry)) is not None:
            return hashlib.sha256(self._read_object(entry, url, ahead=False).data).hexdigest()
        return sha256_of(self.open(entry), OP, self.name(entry))


def sha256_of(fd: int, op: str, shown: str) -> str:
    """The SHA-256 of what the open file ``fd`` holds (closed after); a read error is a
    ``DataFileError`` of ``op`` naming the file as ``shown``."""
    h = hashlib.sha256()
    try:
        while chunk := os.read(fd, 1 << 20):
            h.update(chunk)
    except OSError as exc:
        raise DataFileError(f"{op}: cannot read {shown!r}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return h.hexdigest()
