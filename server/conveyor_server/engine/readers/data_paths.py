"""Where a reader's files are, how they are opened, and how messages name them.

Built on ``engine/data/roots.py``: when the pipeline is built every path is resolved
(``..`` and symlinks) and checked against the data roots, and each file keeps the root it
lies beneath and its real path relative to that root; at run time it is opened beneath
that root, one component at a time without following symlinks (``DataRoots.open``), so a
symlink swapped in since is refused rather than followed out of the root. Messages name a
file ``<root N>/relative/path``, never the root. Without data roots (a pipeline in the
trainer's own process) files are opened and named as given.

These readers read local files only (an LMDB database is memory-mapped; the others read
files by offset): an object storage URL given to one is refused, naming the argument.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass

from conveyor.errors import DataFileError, InvalidArgument, NotSupported
from conveyor_server.engine.data.file_list import unfit_name
from conveyor_server.engine.data.object_urls import is_object_url
from conveyor_server.engine.data.roots import (
    DataRoots,
    RealPaths,
    not_a_folder,
    outside_roots,
    root_label,
    swapped_link,
)

log = logging.getLogger("conveyor.engine")


@dataclass(frozen=True)
class Located:
    """A file as listed when the pipeline was built."""

    #: Its path as the spec spells it (what the data set's identity records).
    path: str
    size: int
    mtime_ns: int
    #: The data root it lies beneath (-1 without roots) and its real path relative to it.
    root: int = -1
    relative: str = ""


class ReaderPaths:
    """One reader's view of the data roots. Each folder's real path is resolved once, so
    locating a file costs one ``lstat`` (and a full resolution only for a symlink)."""

    def __init__(self, op: str, roots: DataRoots | None) -> None:
        self.op = op
        self.roots = roots
        self._real_paths = RealPaths()

    def name(self, path: str) -> str:
        """A path as messages name it."""
        return path if self.roots is None else self.roots.name(path)

    def name_of(self, item: Located) -> str:
        """A listed file as messages name it."""
        if self.roots is None or item.root < 0:
            return item.path
        return f"{root_label(item.root)}/{item.relative}".rstrip("/")

    def local_only(self, path: str, what: str) -> None:
        """Refuse an object storage URL: this reader reads local files."""
        if is_object_url(path):
            raise NotSupported(
                self.op, None, f"{what} {path!r} is in object storage, which {self.op} does "
                "not read (it reads local files beneath a data root): copy the data to a "
                "folder beneath a data root, or read objects with readers.file; see "
                "docs/guides/object-storage.md")

    def _outside(self, path: str, real: str, what: str) -> tuple[int, str]:
        if self.roots is None:
            return -1, ""
        found = self.roots.locate(real)
        if found is None:
            raise outside_roots(self.op, what, self.name(path))
        return found

    def real_dir(self, path: str, what: str) -> str:
        """The real path of the folder ``path``, checked against the roots."""
        self.local_only(path, what)
        real = os.path.realpath(path)
        self._outside(path, real, what)
        if not os.path.isdir(real):
            raise not_a_folder(self.op, what, self.name(path), real)
        return real

    def locate(self, path: str, what: str = "file") -> Located:
        """The regular file ``path``, listed: PermissionDenied if it lies outside the data
        roots (checked first, also for one that does not exist), DataFileError naming it if
        it cannot be read, InvalidArgument if a listing cannot hold its name."""
        self.local_only(path, what)
        if why := unfit_name(path):
            raise InvalidArgument(f"{self.op}: {what} {self.name(path.replace(chr(0), '?'))!r} "
                                  f"{why}: rename it")
        try:
            st = os.lstat(path)
        except OSError as exc:
            self._outside(path, os.path.realpath(path), what)
            raise DataFileError(f"{self.op}: cannot read {what} {self.name(path)!r}: "
                                f"{exc.strerror}") from None
        link = stat.S_ISLNK(st.st_mode)
        real = self._real_paths.of(path, link)
        root, relative = self._outside(path, real, what)
        if link:
            try:
                st = os.stat(real)
            except OSError as exc:
                raise DataFileError(f"{self.op}: cannot read {what} {self.name(path)!r}: "
                                    f"{exc.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise DataFileError(f"{self.op}: {what} {self.name(path)!r} is not a regular file")
        return Located(path, st.st_size, st.st_mtime_ns, root, relative)

    def open(self, item: Located, what: str = "") -> int:
        """A descriptor of the listed file, opened beneath its root (as given without
        roots); DataFileError naming it if it cannot be opened."""
        name = f"{what} {self.name_of(item)!r}" if what else repr(self.name_of(item))
        try:
            if self.roots is not None and item.root >= 0:
                return self.roots.open(item.root, item.relative)
            # O_NONBLOCK: a FIFO must not wait for a writer (it is refused after the fstat).
            fd = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise DataFileError("it is not a regular file")
            os.set_blocking(fd, True)
            return fd
        except DataFileError as exc:
            raise DataFileError(f"{self.op}: cannot read {name}: {exc.message}") from None
        except OSError as exc:
            if self.roots is not None and swapped_link(exc):
                log.warning("%s: refused to read %s (%s): a symlink or a non-folder is on its "
                            "path beneath its data root", self.op, item.path, name)
                raise DataFileError(
                    f"{self.op}: cannot read {name}: a symbolic link (or something that is "
                    "not a folder) now stands on its path beneath the data root, where the "
                    "listing had none") from None
            raise DataFileError(f"{self.op}: cannot read {name}: "
                                f"{exc.strerror or exc}") from None

    def read_text(self, path: str, what: str) -> str:
        """The UTF-8 text of the file ``path`` (a file list, an index file), opened as a
        data file is; InvalidArgument naming it if it cannot be read."""
        item = self.locate(path, what)
        try:
            with os.fdopen(self.open(item, what), encoding="utf-8") as f:
                return f.read()
        except UnicodeDecodeError:
            raise InvalidArgument(f"{self.op}: {what} {self.name_of(item)!r} is not UTF-8 "
                                  "text") from None
