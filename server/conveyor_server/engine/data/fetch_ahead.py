"""Objects and byte ranges of objects fetched before the pipeline reads them, in the order
it will read them.

A pipeline starts each batch (up to ``prefetch_queue_depth`` ahead) in order; when it
does, its readers hand what the batch's samples will read here (``want``): whole objects
(``readers.file``'s files, numpy arrays, COCO images) and byte ranges of larger ones (a
TFRecord record, a WebDataset sample's members), and their requests start at once on the
request loop, concurrently. A worker that then reads a sample takes its bytes from here
(``take``), waiting only for what is still on the way. What is wanted again before it is
taken (a sample twice in a batch, or in two batches across an epoch's end) is requested
once and kept until each read took it. One pipeline has one of these, shared by its
readers. What is fetched and not yet taken is bounded in count and in bytes
(a range counts its length): past either bound a request is not made ahead but when it
is read, so a pipeline holds at most ``max_bytes`` (plus what its workers are reading).
``clear`` drops it all (a pipeline dropping the batches it computed ahead: a seek, a
restore, a failed batch computed again). A request that failed raises its
``ObjectStoreFailure`` when it is taken, as a request made then would. What the server's
node cache holds is not requested ahead: its read takes it from the cache, on the
reading thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future

from conveyor_server.engine.data.object_store import ObjectInfo, ObjectStores
from conveyor_server.engine.data.object_urls import ObjectUrl

#: [start, end) of an object's bytes; None: the whole object.
ByteRange = tuple[int, int] | None
#: What one read wants: the object (as listed) and its bytes wanted.
Wanted = tuple[ObjectUrl, ObjectInfo, ByteRange]
_Key = tuple[ObjectUrl, str, str, ByteRange]


class _Pending:
    """One request made ahead: its bytes to come, their count, and the reads still to
    take them."""

    __slots__ = ("future", "reads", "size")

    def __init__(self, future: Future[bytes], size: int) -> None:
        self.future = future
        self.size = size
        self.reads = 1


def wanted_bytes(info: ObjectInfo, byte_range: ByteRange) -> int:
    """The bytes a request returns: the object's size, or the part of the range within it."""
    if byte_range is None:
        return info.size
    return max(0, min(byte_range[1], info.size) - byte_range[0])


class FetchAhead:
    def __init__(self, objects: ObjectStores, max_count: int, max_bytes: int) -> None:
        self.objects = objects
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._pending: OrderedDict[_Key, _Pending] = OrderedDict()
        self._bytes = 0

    def want(self, wanted: Sequence[Wanted]) -> None:
        """Start fetching these objects and ranges (in this order), as far as the bounds
        allow."""
        with self._lock:
            for url, info, byte_range in wanted:
                key = (url, info.etag, info.version, byte_range)
                held = self._pending.get(key)
                if held is not None:  # requested already: one more read takes it
                    held.reads += 1
                    continue
                if self.objects.in_cache(url, info, byte_range):
                    continue  # read from the node cache when it is taken
                size = wanted_bytes(info, byte_range)
                if (len(self._pending) >= self.max_count
                        or self._bytes + size > self.max_bytes):
                    return
                future = self.objects.submit(self.objects.get_async(url, info, byte_range))
                self._pending[key] = _Pending(future, size)
                self._bytes += size

    def take(self, url: ObjectUrl, info: ObjectInfo, byte_range: ByteRange = None) -> bytes:
        """The object's bytes (``byte_range``: those of the range): fetched ahead, else
        fetched now. ObjectStoreFailure if the request failed (after its retries)."""
        key = (url, info.etag, info.version, byte_range)
        with self._lock:
            found = self._pending.get(key)
            if found is not None:
                found.reads -= 1
                if not found.reads:
                    del self._pending[key]
                    self._bytes -= found.size
        if found is None:
            held = self.objects.from_cache(url, info, byte_range)
            if held is not None:
                return held
        self.objects.observer.took(found is not None)
        if found is not None:
            try:
                return found.future.result()
            except CancelledError:  # dropped (``clear``) while another read waited on it
                pass
        return self.objects.get(url, info, byte_range)

    def clear(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, OrderedDict()
            self._bytes = 0
        for held in pending.values():
            held.future.cancel()

    @property
    def held(self) -> tuple[int, int]:
        """(requests, bytes) fetched or on the way and not taken yet."""
        with self._lock:
            return len(self._pending), self._bytes
