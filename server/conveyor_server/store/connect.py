"""Connect to Redis as configured: standalone (redis://, rediss://, unix://), through
Sentinel, or to a Redis Cluster. Every mode gets the same timeouts and no retries of its
own: a call that fails is reported to the store at once, which tries the whole operation
again only while the primary changes, for ``failover_s`` at most (``failover.py``).

``RedisConfig`` is the ``redis`` section of the server's configuration (the application
reads it from the file, the environment and flags; its field names are the keys).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from conveyor.errors import InvalidArgument, Unavailable
from conveyor.transport.channel import host_port

#: Default of ``failover_s``: a Sentinel failover with ``down-after-milliseconds`` of a
#: few seconds, its election and the clients' switch-over, with time to spare.
FAILOVER_S = 15.0


@dataclass(frozen=True)
class TlsConfig:
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None


@dataclass(frozen=True)
class RedisConfig:
    #: redis://, rediss:// (TLS) or unix://; none: the server starts a private redis-server.
    url: str | None = None
    mode: Literal["standalone", "sentinel", "cluster"] = "standalone"
    #: Sentinel mode: the sentinels' host:port addresses.
    sentinels: tuple[str, ...] = ()
    #: Sentinel mode: the name the sentinels monitor the master under.
    master_name: str | None = None
    tls: TlsConfig = field(default_factory=TlsConfig)
    timeout_s: float = field(default=1.0, metadata={"min": 0.01})
    #: Replicas that must have a take-over or checkpoint before it is confirmed (WAIT).
    min_replicas: int = field(default=0, metadata={"min": 0})
    #: How long a pipeline's name stays held without its server renewing the lease.
    lease_s: float = field(default=30.0, metadata={"min": 1.0})
    replica_timeout_s: float = field(default=1.0, metadata={"min": 0.01})
    #: How long a call that fails as the primary changes (a failover) is tried again
    #: against the new primary, never past the caller's deadline; 0: report it at once.
    failover_s: float = field(default=FAILOVER_S, metadata={"min": 0.0})


@dataclass(frozen=True)
class Connection:
    client: Any
    #: Where it points, without credentials (for messages).
    address: str
    cluster: bool


def safe_address(url: str) -> str:
    """The Redis address of ``url`` without user name or password."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or "localhost"
    return f"{parts.scheme}://{host}:{parts.port or 6379}{parts.path or ''}"


def reply_timeout(cfg: RedisConfig) -> float:
    """How long a reply may take: ``timeout_s``, and ``replica_timeout_s`` more where a
    write waits for replicas (its ``WAIT`` answers within that), so a WAIT that runs its
    course is told apart from a silent Redis."""
    return cfg.timeout_s + (cfg.replica_timeout_s if cfg.min_replicas else 0.0)


def _tls_kwargs(cfg: RedisConfig) -> dict[str, Any]:
    tls = cfg.tls
    for key in ("ca_file", "cert_file", "key_file"):
        value = getattr(tls, key)
        if value is not None and not Path(value).is_file():
            raise InvalidArgument(f"redis.tls.{key}: {value!r} is not a readable file")
    if (tls.cert_file is None) != (tls.key_file is None):
        raise InvalidArgument("redis.tls: cert_file and key_file go together (a client "
                              "certificate needs its key)")
    out: dict[str, Any] = {}
    if tls.ca_file:
        out["ssl_ca_certs"] = tls.ca_file
    if tls.cert_file:
        out["ssl_certfile"] = tls.cert_file
        out["ssl_keyfile"] = tls.key_file
    return out


def connect(cfg: RedisConfig, url: str | None = None) -> Connection:
    """A client for ``cfg`` (``url`` overrides ``cfg.url``, e.g. the private server's).
    A malformed URL is ``InvalidArgument``; a cluster that cannot be reached to read its
    slots is ``Unavailable``."""
    try:
        return _connect(cfg, url or cfg.url)
    except ValueError as exc:
        raise InvalidArgument(f"redis.url: {exc}") from None
    except (redis.RedisError, RedisClusterException, OSError) as exc:
        where = safe_address(url or cfg.url or "")
        raise Unavailable(f"Redis at {where} is unreachable: {type(exc).__name__}: "
                          f"{exc}") from None


def _connect(cfg: RedisConfig, url: str | None) -> Connection:
    common: dict[str, Any] = {
        "socket_timeout": reply_timeout(cfg), "socket_connect_timeout": cfg.timeout_s,
        "retry": Retry(NoBackoff(), 0),
    }
    tls = _tls_kwargs(cfg)
    if cfg.mode == "sentinel":
        return _sentinel(cfg, url, common, tls)
    if not url:
        raise InvalidArgument(f"redis.url: required in {cfg.mode} mode")
    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise InvalidArgument(f"redis.url: scheme {scheme!r} is not redis://, rediss:// or "
                              "unix://")
    if tls and scheme != "rediss":
        raise InvalidArgument("redis.tls is set but redis.url is not rediss://")
    if cfg.mode == "cluster":
        if scheme == "unix":
            raise InvalidArgument("redis.url: a Redis Cluster is reached over TCP, not unix://")
        # The cluster client retries on its own when slots move; keep its timeouts.
        cluster: Any = RedisCluster.from_url(
            url, socket_timeout=cfg.timeout_s, socket_connect_timeout=cfg.timeout_s,
            retry=Retry(NoBackoff(), 1), **tls)
        return Connection(cluster, f"cluster {safe_address(url)}", cluster=True)
    client = redis.Redis.from_url(url, health_check_interval=0, **common, **tls)
    return Connection(client, safe_address(url), cluster=False)


def _sentinel(cfg: RedisConfig, url: str | None, common: dict[str, Any],
              tls: dict[str, Any]) -> Connection:
    if not cfg.sentinels:
        raise InvalidArgument("redis.sentinels: sentinel mode needs at least one host:port")
    if not cfg.master_name:
        raise InvalidArgument("redis.master_name: sentinel mode needs the master's name")
    nodes = [host_port(a, "redis.sentinels") for a in cfg.sentinels]
    # The url (optional here) carries the master's password and database.
    parts = urlsplit(url) if url else None
    db = int(parts.path.strip("/") or 0) if parts and parts.path.strip("/").isdigit() else 0
    if tls or (parts is not None and parts.scheme == "rediss"):
        tls = {"ssl": True, **tls}
    kwargs = {**common, **tls}
    if parts is not None and parts.scheme not in ("redis", "rediss"):
        raise InvalidArgument(f"redis.url: sentinel mode takes redis:// or rediss:// for the "
                              f"master's password and database, got {parts.scheme}://")
    if parts is not None and parts.path.strip("/") and not parts.path.strip("/").isdigit():
        raise InvalidArgument(f"redis.url: database {parts.path.strip('/')!r} is not a number")
    sentinel = Sentinel(nodes, sentinel_kwargs=dict(kwargs), **kwargs)
    client = sentinel.master_for(
        cfg.master_name, db=db,
        password=unquote(parts.password) if parts and parts.password else None,
        username=unquote(parts.username) if parts and parts.username else None)
    where = ",".join(f"{h}:{p}" for h, p in nodes)
    return Connection(client, f"sentinel {where} master {cfg.master_name}", cluster=False)
