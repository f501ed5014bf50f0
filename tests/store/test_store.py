"""The Redis store against a real redis-server: claims, fencing, retention, integrity."""

from __future__ import annotations

import time

import pytest
import redis

from conveyor.errors import AlreadyExists, CorruptCheckpoint, Fenced, NotFound, Unavailable
from conveyor_server.store.connect import safe_address
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store


def test_names_are_claimed_once_and_restore_fences_the_previous_holder(
    redis_proc: RedisProcess,
) -> None:
    store = Store(redis_proc.url)
    gen = store.create("rotate", "a:1", "inst-a", "ff", keep=3)
    with pytest.raises(AlreadyExists, match="held by server a:1"):
        store.create("rotate", "b:2", "inst-b", "ff", keep=3)
    first = store.write_checkpoint("rotate", "inst-a", gen, b"blob-a", 3, "a:1")
    new_gen, previous = store.take_over("rotate", "b:2", "inst-b", "ff", keep=3)
    assert new_gen > gen and previous == "a:1"
    with pytest.raises(Fenced, match="held by server b:2"):
        store.write_checkpoint("rotate", "inst-a", gen, b"zombie", 4, "a:1")
    written = store.write_checkpoint("rotate", "inst-b", new_gen, b"blob-b", 4, "b:2")
    assert [c.id for c in store.list_checkpoints("rotate")] == [first.id, written.id]
    owner = store.owner("rotate")
    assert owner is not None and owner.holder == "b:2" and owner.latest == 2
    assert owner.latest_id == written.id
    with pytest.raises(Fenced):
        store.release("rotate", "inst-a", keep_checkpoints=False)
    store.release("rotate", "inst-b", keep_checkpoints=False)
    assert store.owner("rotate") is None and store.names() == []
    with pytest.raises(NotFound):
        store.read_checkpoint(written.id)
    # A re-created name gets a newer generation, so a zombie from before stays fenced.
    assert store.create("rotate", "c:3", "inst-c", "ff", keep=3) > new_gen


def test_a_delete_never_drops_a_newer_claim_of_the_same_server(
        redis_proc: RedisProcess) -> None:
    """A delete and a restore of one name racing on one server: the delete of the older
    incarnation (its generation) is refused; the restore's claim stands."""
    store = Store(redis_proc.url)
    old = store.create("raced", "a:1", "inst-a", "ff", keep=3)
    new, _ = store.take_over("raced", "a:1", "inst-a", "ff", keep=3)
    with pytest.raises(Fenced):
        store.release("raced", "inst-a", keep_checkpoints=False, generation=old)
    owner = store.owner("raced")
    assert owner is not None and owner.generation == new
    store.release("raced", "inst-a", keep_checkpoints=False, generation=new)
    assert store.owner("raced") is None


def test_retention_keeps_the_last_n(redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=2)
    ids = [store.write_checkpoint("p", "i", gen, f"b{i}".encode(), i, "a:1").id
           for i in range(5)]
    assert [c.id for c in store.list_checkpoints("p")] == ids[-2:]
    assert store.read_checkpoint(ids[-1]).blob == b"b4"
    with pytest.raises(NotFound, match="retention"):
        store.read_checkpoint(ids[0])


def test_integrity_is_checked_on_read(redis_proc: RedisProcess, redis_client: redis.Redis) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=0)
    cid = store.write_checkpoint("p", "i", gen, b"the blob", 1, "a:1").id
    redis_client.hset("conveyor:{p}:ckpt:1", "blob", b"the blub")
    with pytest.raises(CorruptCheckpoint, match="integrity"):
        store.read_checkpoint(cid)


def test_unreachable_redis_is_unavailable_fast_and_names_the_address(
    redis_proc: RedisProcess,
) -> None:
    store = Store(redis_proc.url, timeout=0.5)
    store.ping()
    redis_proc.stop()
    started = time.monotonic()
    with pytest.raises(Unavailable, match=str(redis_proc.socket)):
        store.create("p", "a:1", "i", "ff", keep=1)
    assert time.monotonic() - started < 1.5
    redis_proc.start()
    assert store.create("p", "a:1", "i", "ff", keep=1) >= 1


def test_addresses_never_show_credentials() -> None:
    assert safe_address("redis://user:s3cret@db.example:6380/2") == "redis://db.example:6380/2"
    assert "s3cret" not in safe_address("rediss://:s3cret@h/0")
