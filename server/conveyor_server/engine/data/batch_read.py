"""Reading many data files in one call, into one buffer: ``read_files``.

Each file is read as ``DataFiles.read`` reads one (``files.py``): opened beneath its data
root's open directory (``root_handles.py``) without following a symlink, refused if it is
not a regular file or is above the size limit (from its ``fstat``, before a byte is read),
read up to its listed size + 1 bytes (the limit + 1 where the listed size is above it), so
that a file that grew is seen, and closed. What each file came to is reported as a status
and two numbers, from which ``file_batch.py`` builds the error a read of that file alone
raises, only for the files that failed.

It runs in the server's compiled reader (``batch_read.c``), with the GIL released for the
whole batch and ``openat2`` (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``:
the kernel refuses a symlink anywhere below the root in one call; where the kernel lacks
``openat2``, the walk of ``roots.walk_below``, one folder at a time with ``O_NOFOLLOW``).
Where the server was installed without a C compiler, the loop below does the same, one
file at a time under the GIL (``READER`` says which runs); tests/engine/test_batch_read.py
holds their results equal.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

import numpy as np

from conveyor_server.engine.data.roots import below_parts, walk_below

#: A file's (status, a, b): read whole (a: its bytes, its listed size).
STATUS_OK = 0
#: Not opened (a: the errno of the open, of its fstat or of taking O_NONBLOCK off).
STATUS_OPEN = 1
#: Not opened: its path has a ``.`` or ``..`` part (never listed so).
STATUS_DOTS = 2
#: Not a regular file (a: its ``st_mode``).
STATUS_NOT_FILE = 3
#: Above the limit (a: its size, from its fstat); not read.
STATUS_TOO_BIG = 4
#: A read failed (a: its errno).
STATUS_READ = 5
#: Read, but its size is not the listed one or grew above the limit (a: the bytes read, up
#: to the listed size + 1; b: its size from its fstat).
STATUS_CHANGED = 6
#: Its root's directory could not be opened (a negative descriptor other than -1).
STATUS_SKIPPED = 7

#: How a file of a pipeline without data roots is opened: as its path is spelled.
_AS_SPELLED = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK

#: read_files(dirfds, paths, sizes, offsets, limit, out, results): see ``batch_read.c``.
ReadFiles = Callable[[np.ndarray, list[str], np.ndarray, np.ndarray, int, np.ndarray,
                      np.ndarray], None]


def read_into(fd: int, view: memoryview) -> int:
    """Fill ``view`` from ``fd``; the bytes read (fewer only at its end)."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            break
        got += n
    return got


def _read_one(root: int, path: str, listed: int, limit: int,
              slot: memoryview) -> tuple[int, int, int]:
    """(status, a, b) of one file, read into ``slot`` (its listed size + 1 bytes, or the
    limit + 1)."""
    if "\0" in path:
        return STATUS_OPEN, errno.EINVAL, 0
    if root < -1:
        return STATUS_SKIPPED, 0, 0
    try:
        if root == -1:
            fd = os.open(path, _AS_SPELLED)
        else:
            parts = below_parts(path)
            if parts is None:
                return STATUS_DOTS, 0, 0
            fd = walk_below(root, parts)
    except OSError as exc:
        return STATUS_OPEN, exc.errno or 0, 0
    try:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return STATUS_NOT_FILE, st.st_mode, 0
            os.set_blocking(fd, True)
        except OSError as exc:
            return STATUS_OPEN, exc.errno or 0, 0
        if limit >= 0 and st.st_size > limit:
            return STATUS_TOO_BIG, st.st_size, 0
        try:
            got = read_into(fd, slot)
        except OSError as exc:
            return STATUS_READ, exc.errno or 0, 0
    finally:
        os.close(fd)
    if got != listed or (limit >= 0 and got > limit):
        return STATUS_CHANGED, got, st.st_size
    return STATUS_OK, got, 0


def read_files_python(dirfds: np.ndarray, paths: list[str], sizes: np.ndarray,
                      offsets: np.ndarray, limit: int, out: np.ndarray,
                      results: np.ndarray) -> None:
    """The compiled ``read_files``, one file at a time in Python: the same statuses and
    bytes."""
    if not (len(dirfds) == len(sizes) == len(offsets) == len(paths)
            and results.shape == (len(paths), 3)):
        raise ValueError("read_files: dirfds, sizes, offsets and results (3 per file) must "
                         "hold one entry per path")
    view = memoryview(out.data).cast("B")
    slots = []
    for i, (listed, start) in enumerate(zip(sizes.tolist(), offsets.tolist(), strict=True)):
        want = (listed if limit < 0 else min(listed, limit)) + 1
        if listed < 0 or start < 0 or start + want > len(view):
            raise ValueError(f"read_files: file {i}'s slot (offset {start}, {want} bytes) is "
                             f"not inside the buffer of {len(view)} bytes")
        slots.append(view[start:start + want])
    for i, (root, path, listed, slot) in enumerate(zip(dirfds.tolist(), paths, sizes.tolist(),
                                                       slots, strict=True)):
        results[i] = _read_one(root, path, listed, limit, slot)


def _compiled() -> ReadFiles | None:
    """The compiled reader, or None where the server was installed without a C compiler."""
    try:
        from conveyor_server.engine.data._batch_read import read_files
    except ImportError:
        return None
    return read_files


_COMPILED = _compiled()

#: What reads a batch's files here: "compiled" or "Python".
READER = "Python" if _COMPILED is None else "compiled"

#: read_files(dirfds, paths, sizes, offsets, limit, out, results) -> None: each file read
#: into its slot of ``out``, its (status, a, b) into ``results``.
read_files: ReadFiles = _COMPILED or read_files_python
