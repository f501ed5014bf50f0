"""The identity of a reader's data set, so that a restore over changed data is refused.

Each file's identity line holds its path, size, label and, by the reader's ``verify``
argument, either its modification time (an object's ETag and version id; ``metadata``, the
default: one ``stat`` per file, an object's from its listing, when the pipeline is built)
or the SHA-256 of its contents (``content``: every file read once; for data sets copied
with their times preserved, or copied to each node without them). The digest of the
lines, in reading order, goes into every checkpoint.

The lines themselves, compressed (a *listing*), are kept apart from the checkpoint (the
server keeps them in Redis by digest), so that a refused restore can name the first file
that changed; the checkpoint stays small.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterator, Sequence

from conveyor_server.engine.data.file_list import FileEntry
from conveyor_server.engine.data.files import DataFiles

VERIFY_METADATA = "metadata"
VERIFY_CONTENT = "content"
_ANY_PATH = DataFiles(None)


def _lines(entries: Sequence[FileEntry], verify: str, files: DataFiles) -> Iterator[str]:
    for e in entries:
        stamp = files.sha256(e) if verify == VERIFY_CONTENT else e.stamp
        yield f"{e.path}\0{e.size}\0{stamp}\0{e.label}\n"


class DataIdentity:
    """A reader's files under one ``verify`` mode: their digest, and their listing on
    demand (contents are hashed once, when the identity is made). ``files``: how they are
    opened (beneath their data roots) and named in messages."""

    def __init__(self, entries: Sequence[FileEntry], verify: str,
                 files: DataFiles = _ANY_PATH) -> None:
        self.verify = verify
        self._entries = entries
        self._files = files
        self._content: list[str] | None = None
        if verify == VERIFY_CONTENT:
            self._content = list(_lines(entries, verify, files))
        h = hashlib.sha256(f"verify={verify}\n".encode())
        for line in self._iter_lines():
            h.update(line.encode())
        self.digest = h.digest()

    def _iter_lines(self) -> Iterator[str]:
        return iter(self._content) if self._content is not None else \
            _lines(self._entries, self.verify, self._files)

    def listing(self) -> bytes:
        """The identity lines, compressed: what ``first_change`` compares against."""
        return zlib.compress("".join(self._iter_lines()).encode(), 6)

    def first_change(self, listing: bytes) -> str:
        """The first difference between an earlier ``listing`` and these files, in words
        (files named as messages name them: relative to their roots)."""
        name = self._files.name_path
        try:
            then = zlib.decompress(listing).decode().splitlines()
        except (zlib.error, UnicodeDecodeError):
            return "the earlier file listing is unreadable"
        for i, line in enumerate(self._iter_lines()):
            now = line.rstrip("\n")
            if i >= len(then):
                return f"file {i} {name(_path(now))!r} was added"
            if then[i] != now:
                return _describe(i, then[i], now, name)
        count = len(self._entries)
        if len(then) > count:
            return f"file {count} {name(_path(then[count]))!r} was removed"
        return "no file differs from the earlier listing"


def stamp_change(stamp: str) -> str:
    """What a changed stamp of a listing says changed."""
    if len(stamp) == 64:
        return "contents"
    return "ETag or version" if stamp.startswith("etag ") else "modification time"


def _path(line: str) -> str:
    return line.split("\0", 1)[0]


def _describe(index: int, then: str, now: str, name: Callable[[str], str]) -> str:
    a, b = then.split("\0"), now.split("\0")
    if len(a) != 4 or len(b) != 4:
        return f"file {index} {name(_path(now))!r} differs"
    if a[0] != b[0]:
        return (f"file {index} is now {name(b[0])!r}, was {name(a[0])!r} (a file was added or "
                "removed)")
    what = [f"{name} {x} -> {y}" for name, x, y in
            (("size", a[1], b[1]), ("label", a[3], b[3])) if x != y]
    if a[2] != b[2]:
        what.append(stamp_change(a[2]))
    return f"file {index} {name(b[0])!r} changed ({', '.join(what)})"
