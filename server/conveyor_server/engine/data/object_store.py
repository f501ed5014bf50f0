"""Reading object storage: listings, whole objects and byte ranges, retried, with failures
as ``conveyor.errors`` naming the bucket or key.

The requests are made by obstore (Rust's ``object_store``), to S3 (``s3://``), Google Cloud
Storage (``gs://``) or Azure Blob Storage (``az://``): the client of a bucket is made for
its URL's scheme (``object_clients.py``: the settings, the credentials of each store's
standard environment), and everything else (listing, reads, retries, errors, the node
cache, fetching ahead) is the same code for all three.

Every request runs on one event loop thread shared by the server's pipelines (requests in
flight wait on the network, not on a thread each). A request that fails on a server error
(5xx, ``SlowDown``), a dropped or refused connection or a timeout is made again after a
backoff with jitter, up to ``max_retries`` times; then, or on any other failure, it raises
``ObjectStoreFailure`` with the kind of failure, which callers turn into the error their
argument calls for (``object_errors.py``).
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
import zlib
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import obstore

from conveyor_server.engine.data.node_cache import NodeCache, entry_name
from conveyor_server.engine.data.object_clients import ObjectStoreSettings, Store, make_client
from conveyor_server.engine.data.object_errors import ObjectStoreFailure, classify
from conveyor_server.engine.data.object_urls import ObjectUrl

T = TypeVar("T")


class ObjectStoreObserver(Protocol):
    def request(self, kind: str, seconds: float, ok: bool) -> None: ...

    def fetched(self, nbytes: int) -> None: ...

    def retried(self, kind: str) -> None: ...

    def cached(self, hit: bool) -> None: ...

    def took(self, ahead: bool) -> None:
        """A pipeline's worker took an object's (or a range's) bytes: requested ahead of
        the read (``fetch_ahead.py``), or when read."""
        ...


class _Unobserved:
    def request(self, kind: str, seconds: float, ok: bool) -> None:
        pass

    def fetched(self, nbytes: int) -> None:
        pass

    def retried(self, kind: str) -> None:
        pass

    def cached(self, hit: bool) -> None:
        pass

    def took(self, ahead: bool) -> None:
        pass


@dataclass(frozen=True)
class ObjectInfo:
    """An object as listed: its key, size, ETag and version id ("" where the bucket keeps
    no versions)."""

    key: str
    size: int
    etag: str
    version: str


def jitter(url: ObjectUrl, attempt: int) -> float:
    """A number in [0, 1) that spreads the retries of different objects apart: a hash of the
    object and the attempt, so no draw is made from a generator shared by the process."""
    return zlib.crc32(f"{url}#{attempt}".encode()) / 2**32


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        for task in asyncio.all_tasks(loop):
            task.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(loop.stop)


class ObjectStores:
    """The server's clients of object storage, one per bucket (of each scheme), made on
    first use."""

    def __init__(self, settings: ObjectStoreSettings | None = None,
                 observer: ObjectStoreObserver | None = None) -> None:
        self.settings = settings or ObjectStoreSettings()
        self.observer = observer or _Unobserved()
        self._stores: dict[str, Store] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        s = self.settings
        #: The node cache every pipeline of this server shares (None: no cache).
        self.cache = NodeCache(s.cache_dir, s.cache_max_bytes) \
            if s.cache_dir and s.cache_max_bytes > 0 else None
        #: The node cache's lookups under way, by entry (used on the request loop only).
        self._flights: dict[str, asyncio.Future[bytes]] = {}

    # -- the clients ---------------------------------------------------------------------

    def _store(self, url: ObjectUrl) -> Store:
        with self._lock:
            store = self._stores.get(url.store)
            if store is None:
                store = self._stores[url.store] = make_client(url, self.settings)
            return store

    # -- the loop the requests run on ----------------------------------------------------

    def _run_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=_serve, args=(loop,), name="conveyor-objects",
                                 daemon=True).start()
                self._loop = loop
                # Stopped (and closed) when these clients are closed or dropped.
                self._finalizer = weakref.finalize(self, _stop, loop)
            return self._loop

    def submit(self, work: Awaitable[T]) -> Future[T]:
        """Run ``work`` (a coroutine of this object's) on the request loop."""
        return asyncio.run_coroutine_threadsafe(work, self._run_loop())  # type: ignore[arg-type]

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            self._finalizer()

    async def _retried(self, kind: str, url: ObjectUrl,
                       call: Callable[[], Awaitable[T]]) -> T:
        s = self.settings
        delay = s.backoff_s
        for attempt in range(s.max_retries + 1):
            start = time.monotonic()
            try:
                result = await call()
            except Exception as exc:
                self.observer.request(kind, time.monotonic() - start, False)
                failure = classify(exc, url, attempt)
                if not failure.transient or attempt == s.max_retries:
                    raise failure from None
                self.observer.retried(kind)
                await asyncio.sleep(delay * (0.5 + jitter(url, attempt) / 2))
                delay = min(delay * 2, s.max_backoff_s)
                continue
            self.observer.request(kind, time.monotonic() - start, True)
            return result
        raise AssertionError("unreachable")

    # -- requests ------------------------------------------------------------------------

    async def list_async(self, url: ObjectUrl, limit: int) -> list[ObjectInfo]:
        """The objects whose keys lie below the prefix ``url`` (a key ``url.key/...``), in
        key order; at most ``limit`` (ObjectStoreFailure "too_many" past it)."""
        store = self._store(url)
        prefix = url.key + "/" if url.key else None

        async def listing() -> list[ObjectInfo]:
            out: list[ObjectInfo] = []
            async for chunk in obstore.list(store, prefix, chunk_size=1000):
                for meta in chunk:
                    out.append(ObjectInfo(meta["path"], meta["size"], meta["e_tag"] or "",
                                          meta["version"] or ""))
                if len(out) > limit:
                    raise ObjectStoreFailure("too_many", url, f"more than {limit:,} objects")
            return out
        return await self._retried("list", url, listing)

    async def head_async(self, url: ObjectUrl) -> ObjectInfo:
        store = self._store(url)

        async def head() -> ObjectInfo:
            meta = await obstore.head_async(store, url.key)
            return ObjectInfo(meta["path"], meta["size"], meta["e_tag"] or "",
                              meta["version"] or "")
        return await self._retried("head", url, head)

    def _entry(self, url: ObjectUrl, info: ObjectInfo | None,
               byte_range: tuple[int, int] | None) -> str | None:
        """The node cache's name for this read, None where it does not go through the
        cache (no cache; a range; an object listed without an ETag)."""
        if self.cache is None or info is None or not info.etag or byte_range is not None:
            return None
        return entry_name(url.store, url.key, info.etag, info.version)

    def in_cache(self, url: ObjectUrl, info: ObjectInfo | None,
                 byte_range: tuple[int, int] | None = None) -> bool:
        """Whether the node cache holds what this read wants (nothing is read)."""
        name = self._entry(url, info, byte_range)
        return name is not None and self.cache is not None and info is not None \
            and self.cache.holds(name, info.size)

    def from_cache(self, url: ObjectUrl, info: ObjectInfo | None,
                   byte_range: tuple[int, int] | None = None) -> bytes | None:
        """What this read wants, read from the node cache on the calling thread, if the
        cache holds it (a hit, counted); None otherwise (nothing counted: a read made then
        counts its lookup). A hit costs a file read here, not a trip through the
        request loop."""
        name = self._entry(url, info, byte_range)
        if name is None or self.cache is None or info is None:
            return None
        data = self.cache.get(name, info.size)
        if data is not None:
            self.observer.cached(True)
        return data

    async def get_async(self, url: ObjectUrl, info: ObjectInfo | None = None,
                        byte_range: tuple[int, int] | None = None) -> bytes:
        """The object's bytes (``byte_range``: [start, end) of them; fewer at its end);
        with ``info`` (as listed), only the same object: another ETag (or version) raises
        ObjectStoreFailure "changed"."""
        store = self._store(url)
        options: dict[str, Any] = {}
        if byte_range is not None:
            if byte_range[0] >= byte_range[1]:
                return b""
            options["range"] = byte_range
        if info is not None:
            if info.etag:
                options["if_match"] = info.etag
            if info.version:
                options["version"] = info.version

        async def get() -> bytes:
            result = await obstore.get_async(store, url.key,
                                             options=options)  # type: ignore[arg-type]
            return bytes(await result.bytes_async())

        async def fetch() -> bytes:
            try:
                return await self._retried("get", url, get)
            except ObjectStoreFailure as failure:
                if failure.kind != "missing" or "version" not in options:
                    raise
                # The version listed is gone (GCS keeps one generation of an object that
                # is written again): the object changed, or was removed, since its listing.
                raise ObjectStoreFailure("changed", url, retries=failure.retries) from None
        name = self._entry(url, info, byte_range)
        if name is None or self.cache is None or info is None:
            data = await fetch()
            self.observer.fetched(len(data))
            return data
        # Through the node cache: one lookup (and fetch) per object at a time, which
        # concurrent reads of it (two pipelines, two batches) wait for.
        flight = self._flights.get(name)
        if flight is not None:
            self.observer.cached(True)
            return await asyncio.shield(flight)
        flight = self._flights[name] = asyncio.get_running_loop().create_future()
        try:
            held = await asyncio.to_thread(self.cache.get, name, info.size)
            self.observer.cached(held is not None)
            if held is not None:
                data = held
            else:
                data = await fetch()
                self.observer.fetched(len(data))
                await asyncio.to_thread(self.cache.put, name, data)
            flight.set_result(data)
            return data
        except BaseException as exc:
            flight.set_exception(exc)
            flight.exception()  # retrieved: no waiter is not an error
            raise
        finally:
            del self._flights[name]

    async def get_range_async(self, url: ObjectUrl, start: int, end: int) -> bytes:
        store = self._store(url)

        async def get() -> bytes:
            return bytes(await obstore.get_range_async(store, url.key, start=start, end=end))
        data = await self._retried("get_range", url, get)
        self.observer.fetched(len(data))
        return data

    def list(self, url: ObjectUrl, limit: int) -> list[ObjectInfo]:
        return self.submit(self.list_async(url, limit)).result()

    def head(self, url: ObjectUrl) -> ObjectInfo:
        return self.submit(self.head_async(url)).result()

    def get(self, url: ObjectUrl, info: ObjectInfo | None = None,
            byte_range: tuple[int, int] | None = None) -> bytes:
        return self.submit(self.get_async(url, info, byte_range)).result()

    def get_range(self, url: ObjectUrl, start: int, end: int) -> bytes:
        return self.submit(self.get_range_async(url, start, end)).result()
