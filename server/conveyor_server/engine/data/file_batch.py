"""A batch's data files read in one call (``batch_read.read_files``): each sample's bytes,
or the error a read of its file alone raises (``DataFiles.read``), and its label.

The files are read in sample order into one buffer, each sample's bytes a view of its slot
(its listed size; the slot holds one byte more, to see a file that grew). A sample's error
is built when the sample takes its bytes, in its sample's turn, so a batch reports the same
errors in the same order as reads one file at a time, names (``<root N>/...``) are made only
for files that failed, and a file the "symlink swapped in" rule refused is logged once, as a
read of it alone logs it.

Memory: one buffer holds at most ``MAX_BYTES``: the files that fit, in sample order; the
rest of the batch's files are read one at a time when their samples take them (a batch of
files near ``limits.max_file_bytes`` is never read into memory at once). The buffer lives
until the last sample's bytes are dropped (once decoded, in a decoding pipeline); a sample
keeps no other reference to it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

import numpy as np

from conveyor.errors import ConveyorError
from conveyor_server.engine.data.batch_read import (
    STATUS_CHANGED,
    STATUS_DOTS,
    STATUS_NOT_FILE,
    STATUS_OK,
    STATUS_OPEN,
    STATUS_READ,
    STATUS_SKIPPED,
    STATUS_TOO_BIG,
    read_files,
)
from conveyor_server.engine.data.entries import FileEntry
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.roots import DOTS, not_regular

#: The most bytes one batch read holds (listed sizes + 1 each).
MAX_BYTES = 64 << 20


class FileBatch:
    """The files of ``entries`` (one per sample, none an object), read now."""

    def __init__(self, files: DataFiles, entries: Sequence[FileEntry]) -> None:
        self._files = files
        self._entries = entries
        limit = files.limits.max_file_bytes
        sizes = np.fromiter((e.size for e in entries), np.int64, len(entries))
        wants = (sizes if limit is None else np.minimum(sizes, limit)) + 1
        ends = np.cumsum(wants)
        #: The samples read here (the first ones, in order); the others read alone.
        self._count = count = int(np.searchsorted(ends, MAX_BYTES, side="right"))
        offsets = ends[:count] - wants[:count]
        self._buffer = np.empty(int(ends[count - 1]) if count else 0, dtype=np.uint8)
        results = np.empty((count, 3), dtype=np.int64)
        #: Why each root's directory could not be opened (for STATUS_SKIPPED).
        self._roots_failed: dict[int, OSError] = {}
        if count:
            self._read(entries[:count], sizes[:count], offsets, -1 if limit is None else limit,
                       results)
        self._offsets: list[int] = offsets.tolist()
        self._results = results
        self._ok: list[bool] = (results[:, 0] == STATUS_OK).tolist()
        try:  # out of int32's range: each sample's own label raises, in its turn
            self._labels: np.ndarray | None = np.fromiter(
                (e.label for e in entries), np.int32, len(entries))
        except OverflowError:
            self._labels = None

    def _read(self, entries: Sequence[FileEntry], sizes: np.ndarray, offsets: np.ndarray,
              limit: int, results: np.ndarray) -> None:
        files = self._files
        if files.handles is None:
            read_files(np.full(len(entries), -1, dtype=np.int32), [e.path for e in entries],
                       sizes, offsets, limit, self._buffer, results)
            return
        roots = np.fromiter((e.root for e in entries), np.int32, len(entries))
        with files.handles.held(np.unique(roots).tolist()) as handles:
            # By root index; the last, for root -1 (outside every root): opened as spelled.
            # -2: the root could not be opened.
            table = np.array([h if isinstance(h, int) else -2 for h in handles] + [-1],
                             dtype=np.int32)
            paths = [e.relative if e.root >= 0 else e.path for e in entries]
            read_files(table[roots], paths, sizes, offsets, limit, self._buffer, results)
            self._roots_failed = {i: h for i, h in enumerate(handles) if isinstance(h, OSError)}

    def take(self, slot: int) -> np.ndarray:
        """The bytes of sample ``slot`` (a 1-D uint8 array); the error a read of its file
        alone raises if it could not be read."""
        if slot >= self._count:
            return self._files.read(self._entries[slot])
        if self._ok[slot]:
            start = self._offsets[slot]
            return self._buffer[start:start + self._entries[slot].size]
        raise self._error(slot)

    def label(self, slot: int) -> np.ndarray:
        """Sample ``slot``'s label: an int32 array of one element."""
        if self._labels is None:
            return np.array([self._entries[slot].label], dtype=np.int32)
        return self._labels[slot:slot + 1]

    def _error(self, slot: int) -> ConveyorError:
        files, entry = self._files, self._entries[slot]
        status, a, b = (int(v) for v in self._results[slot])
        if status == STATUS_OPEN:
            return files.not_opened(entry, OSError(a, os.strerror(a)))
        if status == STATUS_SKIPPED:
            failed = self._roots_failed[entry.root]
            return files.not_opened(entry, OSError(failed.errno, failed.strerror))
        if status == STATUS_DOTS:
            return files.not_opened(entry, OSError(errno.EINVAL, DOTS))
        if status == STATUS_NOT_FILE:
            return files.unreadable(entry, not_regular(a))
        if status == STATUS_TOO_BIG:
            return files.limits.file_too_big(a, files.name(entry))
        if status == STATUS_READ:
            return files.unreadable(entry, os.strerror(a))
        if status == STATUS_CHANGED:
            return files.changed(entry, a, b)
        raise AssertionError(f"batch read: status {status} of {files.name(entry)!r}")
