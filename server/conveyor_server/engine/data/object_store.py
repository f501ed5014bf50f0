"""Reading object storage: one client per bucket, listings, whole objects and byte ranges,
retried, with failures as ``conveyor.errors`` naming the bucket or key.

The requests are made by obstore (Rust's ``object_store``), to S3 (``s3://``), Google Cloud
Storage (``gs://``) or Azure Blob Storage (``az://``): the client of a bucket is made for
its URL's scheme, and everything else (listing, reads, retries, errors, the node cache,
fetching ahead) is the same code for all three. obstore signs the requests and takes its
credentials from each store's standard environment: the AWS tools' (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, web identity for a Kubernetes service
account, the instance's role; ``AWS_REGION`` and ``AWS_ENDPOINT_URL``; a profile of the
shared files is read here, ``aws_profile.py``); Google's (``GOOGLE_APPLICATION_CREDENTIALS``
or ``GOOGLE_SERVICE_ACCOUNT``: a service account's key file; else application default
credentials, the metadata server of GKE's workload identity); Azure's
(``AZURE_STORAGE_ACCOUNT_NAME``, read here, with ``AZURE_STORAGE_ACCOUNT_KEY``, a SAS in
``AZURE_STORAGE_SAS_TOKEN``, a service principal, workload identity's
``AZURE_FEDERATED_TOKEN_FILE``, a managed identity; ``AZURE_STORAGE_USE_EMULATOR`` for
Azurite). The server's configuration adds, for S3, an endpoint, a region, path-style or
virtual-hosted requests and plain http, for every bucket and per bucket; for GCS and Azure
an endpoint and plain http (``ObjectStoreSettings``). Credentials are never held here, so
they reach no message, log line or metric.

Every request runs on one event loop thread shared by the server's pipelines (requests in
flight wait on the network, not on a thread each). A request that fails on a server error
(5xx, ``SlowDown``), a dropped or refused connection or a timeout is made again after a
backoff with jitter, up to ``max_retries`` times; then, or on any other failure, it raises
``ObjectStoreFailure`` with the kind of failure, which callers turn into the error their
argument calls for (``object_errors.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import obstore
from obstore.exceptions import BaseError
from obstore.store import AzureStore, GCSStore, S3Store

from conveyor.errors import InvalidArgument, PermissionDenied
from conveyor_server.engine.data.aws_profile import profile_from_files
from conveyor_server.engine.data.node_cache import NodeCache, entry_name
from conveyor_server.engine.data.object_errors import ObjectStoreFailure, blank_secrets, classify
from conveyor_server.engine.data.object_urls import ObjectUrl

log = logging.getLogger("conveyor.engine")
T = TypeVar("T")
C = TypeVar("C", GCSStore, AzureStore)
Store = S3Store | GCSStore | AzureStore


@dataclass(frozen=True)
class BucketSettings:
    """How to reach a bucket ("" or None: obstore's default, from the environment)."""

    endpoint: str = ""
    region: str = ""
    #: True: https://BUCKET.endpoint/KEY; False: https://endpoint/BUCKET/KEY (path style,
    #: what most on-premises stores want).
    virtual_hosted_style: bool | None = None
    #: Plain http to the endpoint (an on-premises store without TLS).
    allow_http: bool = False


@dataclass(frozen=True)
class StoreSettings:
    """How to reach Google Cloud Storage or Azure Blob Storage ("": the environment's)."""

    #: GCS's base URL (a private endpoint, an emulator); Azure's blob service URL
    #: (``https://ACCOUNT.blob.core.windows.net`` by default).
    endpoint: str = ""
    #: Plain http to the endpoint (an emulator on a trusted network).
    allow_http: bool = False


@dataclass(frozen=True)
class ObjectStoreSettings:
    #: S3's buckets (``s3://``).
    default: BucketSettings = field(default_factory=BucketSettings)
    #: Per S3 bucket: replaces ``default`` for that bucket.
    buckets: Mapping[str, BucketSettings] = field(default_factory=dict)
    #: Google Cloud Storage's buckets (``gs://``) and Azure's containers (``az://``).
    gcs: StoreSettings = field(default_factory=StoreSettings)
    azure: StoreSettings = field(default_factory=StoreSettings)
    max_retries: int = 6
    #: The first backoff, doubled at each retry up to ``max_backoff_s`` (with jitter).
    backoff_s: float = 0.1
    max_backoff_s: float = 5.0
    #: Seconds one request may take (connecting included) before it is retried.
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 5.0
    #: Objects one listing may hold (a bound on what a spec can make the server allocate).
    max_listed_objects: int = 10_000_000
    #: Objects (and byte ranges of objects) each pipeline fetches ahead of its reads, at
    #: most (count and bytes).
    fetch_ahead_objects: int = 256
    fetch_ahead_bytes: int = 256 << 20
    #: The node cache's folder ("" for none) and its bound in bytes (``node_cache.py``).
    cache_dir: str = ""
    cache_max_bytes: int = 0

    def for_bucket(self, bucket: str) -> BucketSettings:
        return self.buckets.get(bucket, self.default)


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


def endpoint_of(settings: BucketSettings) -> str:
    """The endpoint an S3 bucket's requests go to: configured, else the environment's."""
    return (settings.endpoint or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or "")


def _truthy(name: str) -> bool:
    """Whether the environment variable ``name`` says yes, as obstore reads one."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "on", "yes", "y")


def _refuse_plain_http(url: ObjectUrl, endpoint: str, allow_http: bool, where: str) -> None:
    if endpoint.lower().startswith("http://") and not allow_http:
        raise InvalidArgument(
            f"{url.holder} {url.bucket!r}: its endpoint {endpoint!r} is plain http, which this "
            f"server does not use unless told to: set allow_http: true in {where} (an "
            "on-premises store on a trusted network), or use an https:// endpoint",
            bucket=url.bucket)


def _client(make: Callable[..., C], url: ObjectUrl, config: dict[str, Any],
            options: dict[str, Any], check: str) -> C:
    """The client ``make`` (``GCSStore``, ``AzureStore``) makes of the URL's bucket, with no
    retries inside obstore (they are made here, counted and bounded as configured); one
    obstore cannot make from the credentials it found is refused, naming what to ``check``,
    and logged with obstore's words."""
    try:
        return make(url.bucket, config=config, client_options=options,
                    retry_config={"max_retries": 0})
    except BaseError as exc:
        log.warning("the client of %s cannot be made: %s", url.store,
                    blank_secrets(str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
        raise PermissionDenied(
            f"{url.holder} {url.bucket!r}: the server's credentials for {url.store} cannot be "
            f"used (the server's log says why): check {check}", bucket=url.bucket) from None


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
                store = self._stores[url.store] = self._make(url)
            return store

    def _make(self, url: ObjectUrl) -> Store:
        s = self.settings
        options: dict[str, Any] = {"timeout": f"{s.request_timeout_s}s",
                                   "connect_timeout": f"{s.connect_timeout_s}s"}
        if url.scheme == "gs":
            return self._gcs(url, options)
        if url.scheme == "az":
            return self._azure(url, options)
        return self._s3(url, options)

    def _s3(self, url: ObjectUrl, options: dict[str, Any]) -> S3Store:
        bucket = url.bucket
        conf = self.settings.for_bucket(bucket)
        profile = profile_from_files()  # the shared AWS files, where the environment has no keys
        endpoint = endpoint_of(conf) or (profile.endpoint_url if profile else "")
        allow_http = conf.allow_http or _truthy("AWS_ALLOW_HTTP")
        _refuse_plain_http(url, endpoint, allow_http, "object_storage.buckets"
                           if bucket in self.settings.buckets else "object_storage")
        options["allow_http"] = allow_http
        config: dict[str, Any] = {}
        if endpoint:
            config["endpoint"] = endpoint
        if conf.region:
            config["region"] = conf.region
        elif profile is not None and profile.region and not (
                os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")):
            config["region"] = profile.region
        if profile is not None:
            config["access_key_id"] = profile.access_key_id
            config["secret_access_key"] = profile.secret_access_key
            if profile.session_token:
                config["session_token"] = profile.session_token
        if conf.virtual_hosted_style is not None:
            config["virtual_hosted_style_request"] = conf.virtual_hosted_style
        # Retries are made here (counted and bounded as configured), not inside obstore.
        return S3Store(bucket, config=config,  # type: ignore[arg-type]
                       client_options=options,  # type: ignore[arg-type]
                       retry_config={"max_retries": 0})

    def _gcs(self, url: ObjectUrl, options: dict[str, Any]) -> GCSStore:
        """A GCS bucket's client: credentials as obstore finds them (a service account's key
        file named by ``GOOGLE_SERVICE_ACCOUNT`` or ``GOOGLE_APPLICATION_CREDENTIALS``, else
        application default credentials: gcloud's file, the metadata server)."""
        conf = self.settings.gcs
        endpoint = conf.endpoint or os.environ.get("GOOGLE_BASE_URL", "")
        options["allow_http"] = conf.allow_http or _truthy("GOOGLE_ALLOW_HTTP")
        _refuse_plain_http(url, endpoint, options["allow_http"], "object_storage.gcs")
        config = {"base_url": conf.endpoint} if conf.endpoint else {}
        return _client(GCSStore, url, config, options, "the service account key file that "
                       "GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT) names in the "
                       "server's environment")

    def _azure(self, url: ObjectUrl, options: dict[str, Any]) -> AzureStore:
        """An Azure container's client, in the storage account the environment names
        (``AZURE_STORAGE_ACCOUNT_NAME``; Azurite's with ``AZURE_STORAGE_USE_EMULATOR``),
        with the credentials obstore finds there."""
        conf = self.settings.azure
        account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME", "")
        config: dict[str, Any] = {"account_name": account} if account else {}
        # Azurite: its account at AZURITE_BLOB_STORAGE_URL, over http (obstore's settings).
        emulator = _truthy("AZURE_STORAGE_USE_EMULATOR")
        if not account and not emulator:
            raise InvalidArgument(
                f"container {url.bucket!r}: the server has no Azure storage account: set "
                "AZURE_STORAGE_ACCOUNT_NAME in its environment (an az:// URL names a "
                "container of that account)", bucket=url.bucket)
        if not emulator:
            endpoint = conf.endpoint or os.environ.get("AZURE_STORAGE_ENDPOINT") \
                or os.environ.get("AZURE_ENDPOINT") or ""
            options["allow_http"] = conf.allow_http or _truthy("AZURE_ALLOW_HTTP")
            _refuse_plain_http(url, endpoint, options["allow_http"], "object_storage.azure")
            if conf.endpoint:
                config["endpoint"] = conf.endpoint
        return _client(AzureStore, url, config, options, "the Azure credentials in the "
                       "server's environment (AZURE_STORAGE_ACCOUNT_KEY must be base64, "
                       "AZURE_STORAGE_SAS_TOKEN a SAS)")

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
                await asyncio.sleep(delay * (0.5 + random.random() / 2))
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
