"""The fleet's records in Redis: listed while fresh, gone when they expire or are removed."""

from __future__ import annotations

import dataclasses
import time

import redis

from conveyor_server.store.fleet import SERVERS_KEY, Fleet, ServerRecord
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store
from tests.support.servers import wait_for


def _record(address: str, instance: str) -> ServerRecord:
    return ServerRecord(address=address, instance=instance, worker_threads=4,
                        max_pipelines=8, max_streams=8, pipelines=1, streams=0, busy=0.25,
                        draining=False, behaviour_digest="ab" * 16,
                        published_ms=int(time.time() * 1000))


def test_records_are_listed_until_they_expire_or_are_removed(
        redis_proc: RedisProcess, redis_client: redis.Redis) -> None:
    store = Store(redis_proc.url)
    try:
        fleet = Fleet(store)
        lasting, brief = _record("10.0.0.1:50051", "one"), _record("10.0.0.2:50051", "two")
        fleet.publish(lasting, ttl_s=60)
        fleet.publish(brief, ttl_s=0.3)
        assert fleet.servers() == [lasting, brief]
        # Refreshed: the newer record replaces the older.
        fuller = dataclasses.replace(lasting, pipelines=8, draining=True)
        fleet.publish(fuller, ttl_s=60)
        wait_for(lambda: fleet.servers() == [fuller], "the brief record to expire", 10)
        fleet.remove("one")
        assert fleet.servers() == []
        assert redis_client.zcard(SERVERS_KEY) == 1  # "two" expired: pruned a minute later
        # A record this version cannot read is left out, not an error.
        redis_client.set("conveyor:{fleet}:server:odd", b"{not json")
        redis_client.zadd(SERVERS_KEY, {"odd": 0})
        assert fleet.servers() == []
    finally:
        store.close()
