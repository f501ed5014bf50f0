"""The fleet in Redis: each live server's short-lived record of its capacity and load.

Every server publishes one record and refreshes it every few seconds; the record expires
unless refreshed (a server that died drops out within its time to live), and a server that
stops cleanly deletes it. Keys share the hash tag ``{fleet}``, so on a Redis Cluster they
sit on one slot and are read together:

    conveyor:{fleet}:servers            sorted set: instance -> when its record expires
                                        (ms, the publisher's clock; an index only)
    conveyor:{fleet}:server:<instance>  the record, JSON, expiring after its time to live

The expiry of the record's key is what counts (Redis's clock): the sorted set only lists
the instances to read, and is pruned of those long gone, so servers' clocks need not agree.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from conveyor_server.store.store import Store

SERVERS_KEY = "conveyor:{fleet}:servers"
#: Index entries whose record expired this long ago (ms) are pruned when a server publishes.
PRUNE_AFTER_MS = 60_000


def _record_key(instance: str) -> str:
    return f"conveyor:{{fleet}}:server:{instance}"


@dataclass(frozen=True)
class ServerRecord:
    """What one server publishes of itself."""

    address: str
    instance: str
    worker_threads: int
    max_pipelines: int
    max_streams: int
    pipelines: int
    streams: int
    #: The fraction of its worker threads' time spent computing lately (0 to 1).
    busy: float
    draining: bool
    #: Hex digest of its engine's behaviour.
    behaviour_digest: str
    published_ms: int


def _record_of(raw: bytes) -> ServerRecord | None:
    """The record from its JSON (None for one this version cannot read)."""
    try:
        fields: dict[str, Any] = json.loads(raw)
        return ServerRecord(**fields)
    except (ValueError, TypeError):
        return None


class Fleet:
    """The records of the servers sharing one Redis."""

    def __init__(self, store: Store) -> None:
        self._store = store
        redis: Any = store._redis
        self._redis = redis

    def publish(self, record: ServerRecord, ttl_s: float) -> None:
        """Write ``record``, expiring after ``ttl_s`` unless published again."""
        ttl_ms = max(1, int(ttl_s * 1000))
        expires = record.published_ms + ttl_ms

        def write() -> None:
            pipe = self._redis.pipeline(transaction=False)
            pipe.set(_record_key(record.instance), json.dumps(asdict(record)), px=ttl_ms)
            pipe.zadd(SERVERS_KEY, {record.instance: expires})
            pipe.zremrangebyscore(SERVERS_KEY, "-inf", record.published_ms - PRUNE_AFTER_MS)
            pipe.execute()
        self._store._call("publish this server", write)

    def remove(self, instance: str) -> None:
        """Delete ``instance``'s record (a clean stop)."""
        def delete() -> None:
            pipe = self._redis.pipeline(transaction=False)
            pipe.delete(_record_key(instance))
            pipe.zrem(SERVERS_KEY, instance)
            pipe.execute()
        self._store._call("remove this server", delete)

    def servers(self) -> list[ServerRecord]:
        """The live records, by address."""
        instances = [i.decode() for i in self._store._call(
            "list servers", lambda: self._redis.zrange(SERVERS_KEY, 0, -1))]
        if not instances:
            return []
        raw = self._store._call("read servers", lambda: self._redis.mget(
            [_record_key(i) for i in instances]))
        records = [r for value in raw if value is not None
                   if (r := _record_of(value)) is not None]
        return sorted(records, key=lambda r: (r.address, r.instance))
