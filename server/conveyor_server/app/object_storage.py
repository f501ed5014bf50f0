"""The server's object storage settings (``object_storage`` in its configuration) as the
engine's ``ObjectStoreSettings``, each per-bucket entry (S3's) checked at start-up."""

from __future__ import annotations

from conveyor_server.app import config_loading
from conveyor_server.app.config import BucketConfig, ConfigError, ObjectStorageConfig, StoreConfig
from conveyor_server.engine.data.object_clients import (
    BucketSettings,
    ObjectStoreSettings,
    StoreSettings,
)
from conveyor_server.engine.data.object_urls import BUCKET_NAME


def _bucket(conf: BucketConfig | ObjectStorageConfig) -> BucketSettings:
    return BucketSettings(endpoint=conf.endpoint or "", region=conf.region or "",
                          virtual_hosted_style=conf.virtual_hosted_style,
                          allow_http=conf.allow_http)


def _store(conf: StoreConfig) -> StoreSettings:
    return StoreSettings(endpoint=conf.endpoint or "", allow_http=conf.allow_http)


def object_store_settings(conf: ObjectStorageConfig) -> ObjectStoreSettings:
    buckets = {}
    for name, raw in (conf.buckets or {}).items():
        path = f"object_storage.buckets.{name}"
        if not BUCKET_NAME.fullmatch(str(name)):
            raise ConfigError(f"{path}: {name!r} is not a bucket name of S3 (3 to 63 lowercase "
                              "letters, digits, dots and hyphens; object_storage.buckets are S3's, "
                              "object_storage.gcs and object_storage.azure the other stores')")
        entry = config_loading.build(BucketConfig, raw or {}, path + ".", "the configuration",
                                     {})
        buckets[str(name)] = _bucket(entry)
    return ObjectStoreSettings(
        default=_bucket(conf), buckets=buckets, gcs=_store(conf.gcs), azure=_store(conf.azure),
        max_retries=conf.max_retries,
        request_timeout_s=conf.request_timeout_s, max_listed_objects=conf.max_listed_objects,
        fetch_ahead_objects=conf.fetch_ahead_objects, fetch_ahead_bytes=conf.fetch_ahead_bytes,
        cache_dir=conf.cache_dir or "", cache_max_bytes=conf.cache_max_bytes)
