"""Creators in the Redis store, against a real redis-server: the owner record and every
checkpoint name who created the pipeline; a take-over can be conditional on the creator
the caller was authorised against; an expired claim is not another creator's to take."""

from __future__ import annotations

import time

import pytest
import redis

from conveyor.errors import AlreadyExists, FailedPrecondition
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import ANONYMOUS, Store


def test_the_creator_is_kept_by_owner_checkpoints_and_take_overs(
        redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "inst-a", "ff", keep=0, creator="team-a")
    owner = store.owner("p")
    assert owner is not None and owner.creator == "team-a"
    written = store.write_checkpoint("p", "inst-a", gen, b"blob", 2, "a:1")
    assert store.read_checkpoint(written.id).creator == "team-a"
    assert store.read_checkpoint(written.id, with_blob=False).creator == "team-a"
    assert [c.creator for c in store.list_checkpoints("p")] == ["team-a"]
    # An operator's restore keeps the creator it was authorised against.
    store.take_over("p", "b:2", "inst-b", "ff", keep=0, creator="team-a",
                    expect_creator="team-a")
    assert store.owner("p").creator == "team-a"  # type: ignore[union-attr]
    # The checkpoint outlives the name and still says whose it is.
    store.release("p", "inst-b", keep_checkpoints=True)
    assert store.owner("p") is None
    assert store.read_checkpoint(written.id, with_blob=False).creator == "team-a"


def test_a_conditional_take_over_refuses_a_name_that_changed_hands(
        redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    # Authorised against a free name, but team-b created it meanwhile.
    store.create("p", "a:1", "inst-a", "ff", keep=0, creator="team-b")
    with pytest.raises(FailedPrecondition, match="changed hands"):
        store.take_over("p", "c:3", "inst-c", "ff", keep=0, creator="team-a",
                        expect_creator="")
    owner = store.owner("p")
    assert owner is not None and owner.holder == "a:1" and owner.creator == "team-b"
    with pytest.raises(FailedPrecondition):
        store.take_over("p", "c:3", "inst-c", "ff", keep=0, creator="team-a",
                        expect_creator="team-a")
    gen, previous = store.take_over("p", "c:3", "inst-c", "ff", keep=0, creator="team-b",
                                    expect_creator="team-b")
    assert previous == "a:1" and store.owner("p").generation == gen  # type: ignore[union-attr]


def test_records_from_before_creators_belong_to_anonymous(
        redis_proc: RedisProcess, redis_client: redis.Redis) -> None:
    store = Store(redis_proc.url)
    gen = store.create("old", "a:1", "inst-a", "ff", keep=0)
    cid = store.write_checkpoint("old", "inst-a", gen, b"blob", 1, "a:1").id
    redis_client.hdel("conveyor:{old}:owner", "creator")
    redis_client.hdel("conveyor:{old}:ckpt:1", "creator")
    assert store.owner("old").creator == ANONYMOUS  # type: ignore[union-attr]
    assert store.read_checkpoint(cid).creator == ANONYMOUS
    with pytest.raises(FailedPrecondition):
        store.take_over("old", "b:2", "inst-b", "ff", keep=0, expect_creator="")
    store.take_over("old", "b:2", "inst-b", "ff", keep=0, expect_creator=ANONYMOUS)


def test_an_expired_claim_is_not_another_creators_to_take(redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url, lease=0.2)
    store.create("p", "a:1", "inst-a", "ff", keep=0, creator="team-a")
    time.sleep(0.4)  # the holder died: its lease ran out
    with pytest.raises(AlreadyExists, match="held by server a:1"):
        store.create("p", "b:2", "inst-b", "ff", keep=0, creator="team-b")
    assert store.create("p", "b:2", "inst-b", "ff", keep=0, creator="team-a") > 0
    assert store.owner("p").holder == "b:2"  # type: ignore[union-attr]
