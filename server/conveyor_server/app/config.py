"""The server's configuration: a YAML file, ``CONVEYOR_*`` environment variables, flags.

Each key of the file has an environment variable named after its path (``redis.url`` is
``CONVEYOR_REDIS_URL``, ``limits.max_pipelines`` is ``CONVEYOR_LIMITS_MAX_PIPELINES``;
lists are comma-separated, an empty value means null). Later sources win: defaults, then
the file, then the environment, then command-line flags. Unknown keys and bad values are
refused at start-up with the key's path and where the value came from. Environment
variables that name no key are left alone (Kubernetes sets ``<SERVICE>_PORT`` variables of
its own). ``pipelines`` (a list of mappings) is set in the file only.

This module declares the configuration (its keys, types and defaults); ``config_loading.py``
reads it from those sources.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from conveyor.errors import InvalidArgument
from conveyor_server.store.connect import RedisConfig

ENV_PREFIX = "CONVEYOR_"
#: Older names still accepted: environment variable -> key path.
ENV_ALIASES = {"CONVEYOR_TOKEN": "auth.token"}


class ConfigError(InvalidArgument):
    """The configuration cannot be used; the message names the key and its source."""


@dataclass(frozen=True)
class CheckpointsConfig:
    keep: int = field(default=10, metadata={"min": 1})


@dataclass(frozen=True)
class LimitsConfig:
    max_pipelines: int = field(default=64, metadata={"min": 1})
    #: Seconds a hosted pipeline may go without a consumer stream before this server
    #: releases it (checkpointed at its consumer's position first; its checkpoints stay, so
    #: a later open resumes it); 0: never.
    idle_release_s: float = field(default=3600.0, metadata={"min": 0.0})
    #: Consumer streams served at once (each holds an RPC thread); beyond: RESOURCE_EXHAUSTED.
    max_streams: int = field(default=64, metadata={"min": 1, "max": 4096})
    #: Seconds a new stream may take to name its pipeline before it is cancelled.
    first_message_s: float = field(default=10.0, metadata={"min": 0.1})
    #: Threads computing batches for all pipelines together; 0: one per CPU available.
    worker_threads: int = field(default=0, metadata={"min": 0, "max": 1024})
    max_batch_bytes: int = field(default=1 << 30, metadata={"min": 1})
    max_image_pixels: int = field(default=100_000_000, metadata={"min": 1})
    #: Bytes of one data file; a larger one is refused before it is read.
    max_file_bytes: int = field(default=256 << 20, metadata={"min": 1})
    #: Bounds on each spec a client sends (engine/admission/spec_bounds.py), checked before anything
    #: is built from it; the height or width of any image an operator makes or is asked for.
    max_batch_size: int = field(default=4096, metadata={"min": 1})
    max_threads: int = field(default=64, metadata={"min": 1, "max": 1024})
    max_prefetch_depth: int = field(default=16, metadata={"min": 1})
    max_ops: int = field(default=256, metadata={"min": 1})
    #: At most 31 MiB: a Restore carries a checkpoint and a spec in one 64 MiB message.
    max_spec_bytes: int = field(default=16 << 20, metadata={"min": 1024, "max": 31 << 20})
    max_extent: int = field(default=32766, metadata={"min": 1})


@dataclass(frozen=True)
class DrainConfig:
    grace_s: float = field(default=10.0, metadata={"min": 0.0})


@dataclass(frozen=True)
class KeepaliveConfig:
    #: Ping each client this often; drop it if it does not answer within ``timeout_s``.
    time_s: float = field(default=10.0, metadata={"min": 1.0})
    timeout_s: float = field(default=10.0, metadata={"min": 1.0})


@dataclass(frozen=True)
class AuthConfig:
    #: Turn authentication off: every client is ``anonymous`` and may do everything.
    disabled: bool = False
    #: A YAML file of ``name: token`` entries, one identity each; re-read when it changes.
    tokens_file: str | None = None
    #: Identities (token names, client-certificate SANs) that may act on every pipeline.
    operators: tuple[str, ...] = ()
    #: One token (identity ``default``), kept for older configurations: use tokens_file.
    token: str | None = None
    token_file: str | None = None


@dataclass(frozen=True)
class ServerTlsConfig:
    """The server's own TLS (not Redis's, which is ``redis.tls``): its certificate chain
    and key, and the CA that client certificates must chain to (mTLS) when set. The files
    are read again when they change (a rotated Kubernetes Secret)."""
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None


@dataclass(frozen=True)
class HealthConfig:
    #: A second, plaintext port serving only grpc.health.v1 (for probes that cannot speak
    #: TLS, such as Kubernetes' gRPC probes); off when null.
    listen: str | None = None


@dataclass(frozen=True)
class DataChannelConfig:
    """The data port, where streams and fan-in calls receive batch bytes outside gRPC's
    messages (TLS and mTLS as the gRPC port, with the same files)."""
    #: Offer data channels; false: batch bytes go in gRPC frames only.
    enabled: bool = True
    #: The data port, on the host of ``listen``; 0: a free one (offers name it). Pin it
    #: where a firewall or a NetworkPolicy must let it through.
    port: int = field(default=0, metadata={"min": 0, "max": 65535})
    #: Tickets offered and not yet used, at most (beyond: data in gRPC frames).
    max_pending: int = field(default=256, metadata={"min": 1, "max": 65536})
    #: Connections in their TLS handshake and hello at once, at most (beyond: closed).
    max_handshakes: int = field(default=64, metadata={"min": 1, "max": 4096})
    #: Seconds a ticket is valid, and a connection has for its TLS handshake and hello.
    handshake_s: float = field(default=5.0, metadata={"min": 0.5, "max": 60.0})


@dataclass(frozen=True)
class MetricsConfig:
    listen: str | None = None


@dataclass(frozen=True)
class AllocatorConfig:
    #: Tune glibc malloc so that megabyte buffers are reused instead of mapped afresh for
    #: every batch (see allocator.py); false leaves the C library's defaults.
    tune: bool = True
    mmap_threshold_bytes: int = field(default=32 << 20, metadata={"min": 0, "max": 32 << 20})
    trim_threshold_bytes: int = field(default=64 << 20, metadata={"min": 0, "max": 2**31 - 1})


@dataclass(frozen=True)
class FaultsConfig:
    #: Points where this server kills itself as kill -9 would, for fault testing only
    #: (``service/kill_points.py`` lists them). Empty in production.
    kill_at: tuple[str, ...] = ()


@dataclass(frozen=True)
class LogConfig:
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "text"


@dataclass(frozen=True)
class BucketConfig:
    """How to reach one bucket (``object_storage.buckets.NAME``): replaces the defaults."""

    endpoint: str | None = None
    region: str | None = None
    virtual_hosted_style: bool | None = None
    allow_http: bool = False


@dataclass(frozen=True)
class StoreConfig:
    """How to reach Google Cloud Storage (``object_storage.gcs``) or Azure Blob Storage
    (``object_storage.azure``)."""

    #: GCS: the base URL (a private endpoint, an emulator), by default the service account
    #: file's or Google's. Azure: the blob service URL, by default
    #: ``AZURE_STORAGE_ENDPOINT`` or ``https://ACCOUNT.blob.core.windows.net``.
    endpoint: str | None = None
    #: Plain http to the endpoint (an emulator on a trusted network).
    allow_http: bool = False


@dataclass(frozen=True)
class ObjectStorageConfig:
    """Data roots in object storage (``s3://``, ``gs://``, ``az://``). Credentials come
    from each store's standard environment (``AWS_ACCESS_KEY_ID``, ...,
    ``GOOGLE_APPLICATION_CREDENTIALS``, ``AZURE_STORAGE_ACCOUNT_KEY``, ..., workload
    identity, the instance's role), never from here."""

    #: The S3 endpoint (an on-premises store: ``https://minio.example:9000``); by default
    #: ``AWS_ENDPOINT_URL`` or AWS's.
    endpoint: str | None = None
    #: By default ``AWS_REGION``.
    region: str | None = None
    #: true: https://BUCKET.endpoint/KEY; false: https://endpoint/BUCKET/KEY (path style).
    virtual_hosted_style: bool | None = None
    #: Plain http to the endpoint (an on-premises store on a trusted network).
    allow_http: bool = False
    #: Retries of a request that failed on a 5xx, SlowDown, a reset or refused connection
    #: or a timeout, with backoff; then the read fails naming the key.
    max_retries: int = field(default=6, metadata={"min": 0, "max": 100})
    #: Seconds one request may take before it is retried.
    request_timeout_s: float = field(default=30.0, metadata={"min": 0.1})
    #: Objects and byte ranges of objects (and their bytes) each pipeline fetches ahead of
    #: its reads, at most.
    fetch_ahead_objects: int = field(default=256, metadata={"min": 0, "max": 1 << 20})
    fetch_ahead_bytes: int = field(default=256 << 20, metadata={"min": 0})
    #: Objects one reader's listing may hold.
    max_listed_objects: int = field(default=10_000_000, metadata={"min": 1})
    #: The node cache: a folder where whole objects are kept for every pipeline of this
    #: server (none by default), and its bound in bytes.
    cache_dir: str | None = None
    cache_max_bytes: int = field(default=10 << 30, metadata={"min": 1})
    #: Per S3 bucket, a mapping of ``endpoint``, ``region``, ``virtual_hosted_style`` and
    #: ``allow_http`` replacing the settings above for that bucket.
    buckets: Mapping[str, Any] | None = None
    #: Google Cloud Storage (``gs://``) and Azure Blob Storage (``az://``).
    gcs: StoreConfig = field(default_factory=StoreConfig)
    azure: StoreConfig = field(default_factory=StoreConfig)


@dataclass(frozen=True)
class PipelineEntry:
    name: str
    #: A PipelineSpec file: protobuf JSON (.json), text format (.textproto, .txtpb,
    #: .pbtxt) or binary (.pb, .binpb); relative paths are read from the config's folder.
    spec_file: str | None = None
    #: Or the spec itself, as the mapping protobuf JSON would hold.
    spec: Mapping[str, Any] | None = None
    keep_checkpoints: int | None = field(default=None, metadata={"min": 1, "max": 2**32 - 1})
    #: When the name is already claimed: leave it ("skip"), take it over from its latest
    #: checkpoint ("restore"), or refuse to start ("fail").
    if_exists: Literal["skip", "restore", "fail"] = "skip"
    #: The identity recorded as its creator (who may stream it besides the operators);
    #: required when clients authenticate.
    owner: str | None = None


@dataclass(frozen=True)
class ServerConfig:
    listen: str = "0.0.0.0:50051"
    advertise: str | None = None
    data_roots: tuple[str, ...] = ()
    #: The callables pipelines may feed from (``fn.external_source(source="pkg.mod:fn")``),
    #: as ``module:function`` names, imported at start; a spec naming another is refused.
    external_sources: tuple[str, ...] = ()
    #: Where the private redis-server keeps its append-only file (no redis.url given).
    state_dir: str = ".conveyor"
    redis: RedisConfig = field(default_factory=RedisConfig)
    checkpoints: CheckpointsConfig = field(default_factory=CheckpointsConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    drain: DrainConfig = field(default_factory=DrainConfig)
    keepalive: KeepaliveConfig = field(default_factory=KeepaliveConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    tls: ServerTlsConfig = field(default_factory=ServerTlsConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    data_channel: DataChannelConfig = field(default_factory=DataChannelConfig)
    #: Serve gRPC server reflection (describes the API to anyone who reaches the port).
    reflection: bool = False
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    object_storage: ObjectStorageConfig = field(default_factory=ObjectStorageConfig)
    pipelines: tuple[PipelineEntry, ...] = ()


def leaf_paths(cls: type = ServerConfig, prefix: str = "") -> dict[str, Any]:
    """Every settable scalar or list key: its dotted path -> its type."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name == "pipelines":
            continue
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            out.update(leaf_paths(hint, f"{prefix}{f.name}."))  # type: ignore[arg-type]
        else:
            out[f"{prefix}{f.name}"] = hint
    return out


def env_name(path: str) -> str:
    return ENV_PREFIX + path.upper().replace(".", "_")


def union_args(hint: Any) -> tuple[Any, ...]:
    """The members of ``X | None`` (or just ``(X,)``)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)
