"""The clients of object storage and how they are configured: one obstore client per bucket
(container), made for its URL's scheme from the server's settings and the store's standard
environment.

S3 (``s3://``): the AWS tools' environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, web identity, the instance's role; ``AWS_REGION``,
``AWS_ENDPOINT_URL``), else a profile of the shared files (``aws_profile.py``); the server's
configuration adds an endpoint, a region, path-style or virtual-hosted requests and plain
http, for every bucket and per bucket. Google Cloud Storage (``gs://``): a service
account's key file (``GOOGLE_APPLICATION_CREDENTIALS``, ``GOOGLE_SERVICE_ACCOUNT``), else
application default credentials. Azure Blob Storage (``az://``): the account
``AZURE_STORAGE_ACCOUNT_NAME`` names, with its key, a SAS, a service principal, workload
identity or a managed identity (``AZURE_STORAGE_USE_EMULATOR``: Azurite). For GCS and Azure
the configuration adds an endpoint and plain http. Plain http is refused unless allowed.
Credentials are never held here, so they reach no message, log line or metric.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from obstore.exceptions import BaseError
from obstore.store import AzureStore, GCSStore, S3Store

from conveyor.errors import InvalidArgument, PermissionDenied
from conveyor_server.engine.data.aws_profile import profile_from_files
from conveyor_server.engine.data.object_errors import blank_secrets
from conveyor_server.engine.data.object_urls import ObjectUrl

log = logging.getLogger("conveyor.engine")

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


def make_client(url: ObjectUrl, settings: ObjectStoreSettings) -> Store:
    """The client of the URL's bucket (container), for its scheme, as ``settings`` and the
    store's standard environment say; obstore makes no retries of its own (they are made
    by ``ObjectStores``, counted and bounded as configured)."""
    options: dict[str, Any] = {"timeout": f"{settings.request_timeout_s}s",
                               "connect_timeout": f"{settings.connect_timeout_s}s"}
    if url.scheme == "gs":
        return _gcs(url, settings.gcs, options)
    if url.scheme == "az":
        return _azure(url, settings.azure, options)
    return _s3(url, settings, options)


def _s3(url: ObjectUrl, settings: ObjectStoreSettings, options: dict[str, Any]) -> S3Store:
    bucket = url.bucket
    conf = settings.for_bucket(bucket)
    profile = profile_from_files()  # the shared AWS files, where the environment has no keys
    endpoint = endpoint_of(conf) or (profile.endpoint_url if profile else "")
    allow_http = conf.allow_http or _truthy("AWS_ALLOW_HTTP")
    _refuse_plain_http(url, endpoint, allow_http, "object_storage.buckets"
                       if bucket in settings.buckets else "object_storage")
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
    return S3Store(bucket, config=config,  # type: ignore[arg-type]
                   client_options=options,  # type: ignore[arg-type]
                   retry_config={"max_retries": 0})


def _gcs(url: ObjectUrl, conf: StoreSettings, options: dict[str, Any]) -> GCSStore:
    """A GCS bucket's client: credentials as obstore finds them (a service account's key
    file named by ``GOOGLE_SERVICE_ACCOUNT`` or ``GOOGLE_APPLICATION_CREDENTIALS``, else
    application default credentials: gcloud's file, the metadata server)."""
    endpoint = conf.endpoint or os.environ.get("GOOGLE_BASE_URL", "")
    options["allow_http"] = conf.allow_http or _truthy("GOOGLE_ALLOW_HTTP")
    _refuse_plain_http(url, endpoint, options["allow_http"], "object_storage.gcs")
    config = {"base_url": conf.endpoint} if conf.endpoint else {}
    return _client(GCSStore, url, config, options, "the service account key file that "
                   "GOOGLE_APPLICATION_CREDENTIALS (or GOOGLE_SERVICE_ACCOUNT) names in the "
                   "server's environment")


def _azure(url: ObjectUrl, conf: StoreSettings, options: dict[str, Any]) -> AzureStore:
    """An Azure container's client, in the storage account the environment names
    (``AZURE_STORAGE_ACCOUNT_NAME``; Azurite's with ``AZURE_STORAGE_USE_EMULATOR``),
    with the credentials obstore finds there."""
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
