"""Objects fetched before the pipeline reads them, in the order it will read them.

A pipeline starts each batch (up to ``prefetch_queue_depth`` ahead) in order; when it
does, it hands the batch's objects here (``want``), and their requests start at once on
the request loop, concurrently. A worker that then reads a sample takes its object's
bytes from here (``take``), waiting only for what is still on the way. The objects fetched
and not yet taken are bounded in count and in bytes: past either bound an object is not
fetched ahead but when it is read, so a pipeline holds at most ``max_bytes`` (plus the
objects its workers are reading). ``clear`` drops them all (a pipeline seeking elsewhere).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future

from conveyor_server.engine.data.object_store import ObjectInfo, ObjectStores
from conveyor_server.engine.data.object_urls import ObjectUrl

_Key = tuple[ObjectUrl, str, str]


class FetchAhead:
    def __init__(self, objects: ObjectStores, max_count: int, max_bytes: int) -> None:
        self.objects = objects
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._pending: OrderedDict[_Key, tuple[Future[bytes], int]] = OrderedDict()
        self._bytes = 0

    def want(self, wanted: Sequence[tuple[ObjectUrl, ObjectInfo]]) -> None:
        """Start fetching these objects (in this order), as far as the bounds allow."""
        with self._lock:
            for url, info in wanted:
                key = (url, info.etag, info.version)
                if key in self._pending:
                    continue
                if (len(self._pending) >= self.max_count
                        or self._bytes + info.size > self.max_bytes):
                    return
                future = self.objects.submit(self.objects.get_async(url, info))
                self._pending[key] = (future, info.size)
                self._bytes += info.size

    def take(self, url: ObjectUrl, info: ObjectInfo) -> bytes:
        """The object's bytes: fetched ahead, else fetched now. ObjectStoreFailure if the
        request failed (after its retries)."""
        with self._lock:
            found = self._pending.pop((url, info.etag, info.version), None)
            if found is not None:
                self._bytes -= found[1]
        if found is None:
            return self.objects.get(url, info)
        return found[0].result()

    def clear(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, OrderedDict()
            self._bytes = 0
        for future, _ in pending.values():
            future.cancel()

    @property
    def held(self) -> tuple[int, int]:
        """(objects, bytes) fetched or on the way and not taken yet."""
        with self._lock:
            return len(self._pending), self._bytes
