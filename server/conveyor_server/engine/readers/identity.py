"""The identity of a reader's data set, so that a restore over changed data is refused.

As ``engine/data/identity.py`` does for ``readers.file``: one line per file (a ``.npy``
file, a tar shard) holds its path as the spec spells it, its size, by ``verify`` its
modification time (``metadata``) or the SHA-256 of its contents (``content``), and what
the reader derived from it when the pipeline was built (a shard's member index: names,
offsets and sizes). The digest of the lines goes into every checkpoint; the lines,
compressed (a *listing*), are kept apart by digest so that a refused restore names the
first file that changed (named without the data roots).
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator, Sequence

from conveyor_server.engine.data.files import sha256_of
from conveyor_server.engine.data.identity import stamp_change
from conveyor_server.engine.readers.data_paths import Located, ReaderPaths

VERIFY_CONTENT = "content"


def _content_sha256(paths: ReaderPaths, item: Located) -> str:
    if item.etag:  # an object: read whole
        return hashlib.sha256(paths.read_range(item, 0, item.size, ahead=False)).hexdigest()
    return sha256_of(paths.open(item), paths.op, paths.name_of(item))


class ReaderIdentity:
    """A reader's files under one ``verify`` mode: their digest, and their listing on
    demand (contents are hashed once, when the identity is made). ``derived``: what the
    reader made of each file (""s by default), named ``derived_name`` in messages; ``kind``
    names a file in messages."""

    def __init__(self, paths: ReaderPaths, items: Sequence[Located], verify: str, *,
                 derived: Sequence[str] | None = None, kind: str = "file",
                 derived_name: str = "member index") -> None:
        self.verify = verify
        self.kind = kind
        self.derived_name = derived_name
        self.count = len(items)
        self._paths = paths
        self._items = items
        self._derived = derived if derived is not None else [""] * len(items)
        self._stamps = [_content_sha256(paths, item) for item in items] \
            if verify == VERIFY_CONTENT else None
        h = hashlib.sha256(f"verify={verify}\n".encode())
        for line in self._lines():
            h.update(line.encode())
        self.digest = h.digest()

    def _lines(self) -> Iterator[str]:
        for i, item in enumerate(self._items):
            stamp = self._stamps[i] if self._stamps is not None else item.stamp
            yield f"{item.path}\0{item.size}\0{stamp}\0{self._derived[i]}\n"

    def listing(self) -> bytes:
        """The identity lines, compressed: what ``first_change`` compares against."""
        return zlib.compress("".join(self._lines()).encode(), 6)

    def first_change(self, listing: bytes) -> str:
        """The first difference between an earlier ``listing`` and these files, in words."""
        try:
            then = zlib.decompress(listing).decode().splitlines()
        except (zlib.error, UnicodeDecodeError):
            return "the earlier listing is unreadable"
        for i, line in enumerate(self._lines()):
            now = line.rstrip("\n")
            if i >= len(then):
                return f"{self.kind} {i} {self._name(now)!r} was added"
            if then[i] != now:
                return self._describe(i, then[i], now)
        if len(then) > self.count:
            return f"{self.kind} {self.count} {self._name(then[self.count])!r} was removed"
        return f"no {self.kind} differs from the earlier listing"

    def _name(self, line: str) -> str:
        return self._paths.name(line.split("\0", 1)[0])

    def _describe(self, index: int, then: str, now: str) -> str:
        a, b = then.split("\0"), now.split("\0")
        if len(a) != 4 or len(b) != 4:
            return f"{self.kind} {index} {self._name(now)!r} differs"
        if a[0] != b[0]:
            return (f"{self.kind} {index} is now {self._name(now)!r}, was "
                    f"{self._name(then)!r} (a {self.kind} was added or removed)")
        what = [f"size {a[1]} -> {b[1]}"] if a[1] != b[1] else []
        if a[2] != b[2]:
            what.append(stamp_change(a[2]))
        if a[3] != b[3]:
            what.append(self.derived_name)
        return f"{self.kind} {index} {self._name(now)!r} changed ({', '.join(what)})"
