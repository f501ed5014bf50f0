"""An object read as a seekable file, one ranged GET per buffer it fills: for a reader
that walks a large object's structure (a tar shard's headers) without fetching it whole.
Wrapped in ``io.BufferedReader`` (``open_object``), a read of a few bytes fetches a buffer
(1 MiB) and a seek past it fetches nothing. Only the listed object is read (its ETag)."""

from __future__ import annotations

import io
import os

from conveyor_server.engine.data.object_store import ObjectInfo, ObjectStores
from conveyor_server.engine.data.object_urls import ObjectUrl

BUFFER_BYTES = 1 << 20


class ObjectFile(io.RawIOBase):
    def __init__(self, objects: ObjectStores, url: ObjectUrl, info: ObjectInfo) -> None:
        self._objects, self._url, self._info = objects, url, info
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._position, os.SEEK_END: self._info.size}
        self._position = max(0, base[whence] + offset)
        return self._position

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = min(len(buffer), self._info.size - self._position)
        if count <= 0:
            return 0
        data = self._objects.get(self._url, self._info,
                                 (self._position, self._position + count))
        buffer[:len(data)] = data
        self._position += len(data)
        return len(data)


def open_object(objects: ObjectStores, url: ObjectUrl, info: ObjectInfo) -> io.BufferedReader:
    return io.BufferedReader(ObjectFile(objects, url, info), BUFFER_BYTES)
