"""Where a reader's files are, how they are opened, and how messages name them.

Built on ``engine/data/roots.py``: when the pipeline is built every path is resolved
(``..`` and symlinks) and checked against the data roots, and each file keeps the root it
lies beneath and its real path relative to that root; at run time it is opened beneath
that root, one component at a time without following symlinks (``DataRoots.open``), so a
symlink swapped in since is refused rather than followed out of the root. Messages name a
file ``<root N>/relative/path``, never the root. Without data roots (a pipeline in the
trainer's own process) files are opened and named as given.

A reader given the pipeline's ``DataFiles`` (``files``: its object storage clients and
what it fetches ahead) reads objects (``s3://``, ``gs://``, ``az://``) as well: each is
looked up (``HEAD``: size, ETag, version) when the pipeline is built, checked against the
object roots, and read whole or by byte range, only while its ETag is the listed one. A
sample's reads are fetched ahead: as its batch starts, the reader names the objects and
ranges the batch will read (``fetch_ahead``), their requests start at once, and the
worker's read takes the bytes (``data/fetch_ahead.py``: one per pipeline, shared with
``readers.file``, bounded once). A reader without them (an LMDB database is memory-mapped)
refuses an object storage URL, naming the argument.
"""

from __future__ import annotations

import io
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from conveyor.errors import DataFileError, InvalidArgument, NotSupported
from conveyor_server.engine.data.fetch_ahead import ByteRange, Wanted
from conveyor_server.engine.data.file_list import unfit_name
from conveyor_server.engine.data.files import DataFiles
from conveyor_server.engine.data.object_errors import ObjectStoreFailure, read_error
from conveyor_server.engine.data.object_file import open_object
from conveyor_server.engine.data.object_list import ObjectPlaces
from conveyor_server.engine.data.object_store import ObjectInfo
from conveyor_server.engine.data.object_urls import ObjectUrl, is_object_url, parse_object_url
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
    #: An object's ETag and version id, as listed ("" for a file).
    etag: str = ""
    version: str = ""

    @property
    def stamp(self) -> str:
        """What changes with the file's contents, as listed (see ``FileEntry.stamp``)."""
        if not self.etag:
            return str(self.mtime_ns)
        return f"etag {self.etag}" + (f" version {self.version}" if self.version else "")


def _info(item: Located) -> ObjectInfo:
    """An object as listed."""
    return ObjectInfo(item.relative, item.size, item.etag, item.version)


class ReaderPaths:
    """One reader's view of the data roots. Each folder's real path is resolved once, so
    locating a file costs one ``lstat`` (and a full resolution only for a symlink)."""

    def __init__(self, op: str, roots: DataRoots | None,
                 files: DataFiles | None = None) -> None:
        self.op = op
        self.roots = roots
        self._real_paths = RealPaths()
        #: The pipeline's files, for a reader that reads objects (None: local only): its
        #: object storage clients and what it fetches ahead.
        self._files = files
        self._places = ObjectPlaces(op, roots, files.objects) if files is not None else None

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
        if is_object_url(path) and self._places is None:
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
        """The real path of the folder ``path``, checked against the roots (an object
        prefix: its URL, checked against the object roots)."""
        self.local_only(path, what)
        if self._places is not None and is_object_url(path):
            return str(self._places.url(path, what)[0])
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
        if self._places is not None and is_object_url(path):
            return self._locate_object(path, what)
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

    def _locate_object(self, path: str, what: str) -> Located:
        assert self._places is not None
        url, root, relative = self._places.url(path, what)
        if why := unfit_name(str(url)):
            raise InvalidArgument(f"{self.op}: {what} {self.name(str(url))!r} {why}: rename it")
        [info] = self._places.heads([url])
        return Located(str(url), info.size, 0, root, relative, info.etag, info.version)

    def locate_all(self, paths: Sequence[str], what: str = "file") -> list[Located]:
        """``locate`` of each path; objects looked up concurrently."""
        if self._places is None or not any(is_object_url(p) for p in paths):
            return [self.locate(p, what) for p in paths]
        places = self._places
        urls = {i: places.url(p, what) for i, p in enumerate(paths) if is_object_url(p)}
        infos = dict(zip(urls, places.heads([u for u, _, _ in urls.values()]), strict=True))
        out = []
        for i, path in enumerate(paths):
            if i not in urls:
                out.append(self.locate(path, what))
                continue
            url, root, relative = urls[i]
            if why := unfit_name(str(url)):
                raise InvalidArgument(f"{self.op}: {what} {self.name(str(url))!r} {why}: "
                                      "rename it")
            info = infos[i]
            out.append(Located(str(url), info.size, 0, root, relative, info.etag,
                               info.version))
        return out

    def objects_below(self, path: str, what: str) -> list[tuple[str, Located]]:
        """Every object below the prefix ``path`` (keys in order): its key relative to
        ``path`` and its listing."""
        assert self._places is not None
        url = self._places.url(path, what)[0]
        start = len(url.key) + 1 if url.key else 0
        out = []
        for info in self._places.listing(url, what):
            below = url.below(info.key[start:])
            found = self.roots.locate_object(below) if self.roots is not None else None
            root, relative = found if found is not None else (-1, "")
            out.append((info.key[start:], Located(str(below), info.size, 0, root, relative,
                                                  info.etag, info.version)))
        return out

    def fetch_ahead(self, wanted: Iterable[tuple[Located, ByteRange]]) -> None:
        """Start fetching these listed files' bytes (whole: None; else [start, end)), in the
        order the workers will read them; local files are left to be read."""
        requests: list[Wanted] = []
        for item, byte_range in wanted:
            url = self._object(item)
            if url is not None:
                requests.append((url, _info(item), byte_range))
        if requests:
            assert self._files is not None
            self._files.ahead.want(requests)

    def _object_bytes(self, item: Located, url: ObjectUrl, byte_range: ByteRange,
                      ahead: bool) -> bytes:
        """An object's bytes (only while it is the listed one): a sample's read takes them
        from what was fetched ahead (``ahead``), a read when the pipeline is built fetches
        them now; DataFileError naming it if they cannot be read."""
        assert self._files is not None
        info = _info(item)
        try:
            if ahead:
                return self._files.ahead.take(url, info, byte_range)
            return self._files.objects.get(url, info, byte_range)
        except ObjectStoreFailure as failure:
            raise read_error(failure, self.op, self.name_of(item)) from None

    def open_binary(self, item: Located, what: str = "", *,
                    ahead: bool = True) -> io.BufferedIOBase:
        """The listed file to read from its start: a local file opened beneath its root, an
        object fetched whole (only while it is the listed one; from the node cache where
        it holds it). ``ahead``: a sample's read, which takes an object fetched ahead;
        False for a read when the pipeline is built (an annotations file)."""
        url = self._object(item)
        if url is not None:  # whole: through the node cache where the server has one
            return io.BytesIO(self._object_bytes(item, url, None, ahead))
        return os.fdopen(self.open(item, what), "rb")

    def open_ranges(self, item: Located, what: str = "") -> io.BufferedIOBase:
        """The listed file to seek in and read parts of: a local file opened beneath its
        root, an object read by ranged GETs as it is read (``object_file.py``)."""
        url = self._object(item)
        if url is not None:
            assert self._places is not None
            return open_object(self._places.objects, url, _info(item))
        return os.fdopen(self.open(item, what), "rb")

    def is_object(self, item: Located) -> bool:
        return self._object(item) is not None

    def _object(self, item: Located) -> ObjectUrl | None:
        if not item.etag and not is_object_url(item.path):
            return None
        root = self.roots.object_root(item.root) if self.roots is not None else None
        return root.below(item.relative) if root is not None else parse_object_url(item.path)

    def read_range(self, item: Located, offset: int, length: int, what: str = "", *,
                   ahead: bool = True) -> bytes:
        """Up to ``length`` bytes of the listed file from ``offset`` (fewer only at its
        end); DataFileError naming it if it cannot be read (an object: also if it is no
        longer the listed one). ``ahead``: a sample's read, which takes the range fetched
        ahead (``fetch_ahead`` with the same [offset, offset + length)); False for a read
        when the pipeline is built (a data set's hash)."""
        url = self._object(item)
        if url is not None:
            return self._object_bytes(item, url, (offset, offset + length), ahead)
        fd = self.open(item, what)
        try:
            return os.pread(fd, length, offset)
        except OSError as exc:
            raise DataFileError(f"{self.op}: cannot read {self.name_of(item)!r}: "
                                f"{exc.strerror or exc}") from None
        finally:
            os.close(fd)

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
        if self._places is not None and is_object_url(path):
            return self._places.read_text(self._places.url(path, what)[0], what)
        item = self.locate(path, what)
        try:
            with os.fdopen(self.open(item, what), encoding="utf-8") as f:
                return f.read()
        except UnicodeDecodeError:
            raise InvalidArgument(f"{self.op}: {what} {self.name_of(item)!r} is not UTF-8 "
                                  "text") from None
