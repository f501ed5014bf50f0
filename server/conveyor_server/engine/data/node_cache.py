"""A server's disk cache of whole objects, shared by its pipelines: bounded in bytes, the
least recently used out first.

An entry is one object's bytes, keyed by its store (scheme and bucket: ``s3://bucket``),
key, ETag and version id, so a changed object is never served from the cache (its new ETag
is another key; the old entry ages out). Entries are files named by the SHA-256 of the
key, written to a temporary name and renamed, so a reader never sees a partial one; a hit
whose size is not the listed one is a miss (and the file is dropped). The index of entries
and their sizes is in memory, rebuilt from the folder at start (oldest access first). An
object without an ETag is not cached. The cache is a cache: a failure to write one is
logged and the bytes are used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path

log = logging.getLogger("conveyor.engine")


def entry_name(store: str, key: str, etag: str, version: str) -> str:
    """The entry of an object of ``store`` (``s3://bucket``, ``gs://bucket``, ``az://container``)."""
    return hashlib.sha256("\0".join((store, key, etag, version)).encode()).hexdigest()


class NodeCache:
    def __init__(self, directory: str | Path, max_bytes: int) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, int] = OrderedDict()
        self.bytes = 0
        found = []
        for path in self.directory.glob("*/*"):
            if path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)  # a write cut short by a crash
                continue
            st = path.stat()
            found.append((st.st_atime_ns, path.name, st.st_size))
        for _, name, size in sorted(found):
            self._entries[name] = size
            self.bytes += size
        self._evict()

    def _path(self, name: str) -> Path:
        return self.directory / name[:2] / name

    def holds(self, name: str, size: int) -> bool:
        """Whether the entry is held with ``size`` bytes (its file is not read)."""
        with self._lock:
            return self._entries.get(name) == size

    def get(self, name: str, size: int) -> bytes | None:
        """The entry's bytes if it is held with ``size`` bytes, else None."""
        with self._lock:
            if self._entries.get(name) != size:
                return None
            self._entries.move_to_end(name)
        try:
            data = self._path(name).read_bytes()
        except OSError:
            data = b""
        if len(data) != size:
            self._drop(name)
            return None
        return data

    def put(self, name: str, data: bytes) -> None:
        if len(data) > self.max_bytes:
            return
        path = self._path(name)
        temporary = path.with_name(f"{name}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(exist_ok=True)
            temporary.write_bytes(data)
            os.replace(temporary, path)
        except OSError as exc:
            log.warning("node cache: could not write an entry in %s: %s", self.directory, exc)
            temporary.unlink(missing_ok=True)
            return
        with self._lock:
            previous = self._entries.pop(name, None)
            if previous is not None:
                self.bytes -= previous
            self._entries[name] = len(data)
            self.bytes += len(data)
        self._evict()

    def _drop(self, name: str) -> None:
        with self._lock:
            size = self._entries.pop(name, None)
            if size is not None:
                self.bytes -= size
        self._path(name).unlink(missing_ok=True)

    def _evict(self) -> None:
        while True:
            with self._lock:
                if self.bytes <= self.max_bytes or not self._entries:
                    return
                name, size = self._entries.popitem(last=False)
                self.bytes -= size
            self._path(name).unlink(missing_ok=True)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._entries)
