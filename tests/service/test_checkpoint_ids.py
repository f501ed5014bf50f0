"""Checkpoint ids name one checkpoint for all time: '<pipeline>:<seq>-<nonce>', and a
sequence number that comes back (delete and re-create, a lost write) never makes an old id
restore another checkpoint."""

from __future__ import annotations

import re

import pytest
import redis

from conveyor.errors import InvalidArgument, NotFound
from conveyor_server.store.ids import checkpoint_id, parse_checkpoint_id
from conveyor_server.store.redis_process import RedisProcess
from conveyor_server.store.store import Store

ID = re.compile(r"p:([0-9]+)-[0-9a-f]{16}")
STALE = "no longer exists"


def test_ids_carry_a_nonce_and_round_trip(redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=0)
    written = [store.write_checkpoint("p", "i", gen, f"b{n}".encode(), n, "a:1")
               for n in range(3)]
    matches = [ID.fullmatch(w.id) for w in written]
    assert [int(m.group(1)) if m else None for m in matches] == [1, 2, 3]
    assert len({w.id.split("-")[-1] for w in written}) == 3  # a nonce per write
    listed = store.list_checkpoints("p")
    assert [c.id for c in listed] == [w.id for w in written]
    for c, w in zip(listed, written, strict=True):
        got = store.read_checkpoint(c.id)
        assert got.id == c.id and got.blob == w.blob and got.batches == w.batches
        assert store.read_checkpoint(c.id, with_blob=False).blob is None
    owner = store.owner("p")
    assert owner is not None and owner.latest == 3 and owner.latest_id == written[-1].id
    # A restore keeps the latest id.
    store.take_over("p", "b:2", "j", "ff", keep=0)
    owner = store.owner("p")
    assert owner is not None and owner.latest_id == written[-1].id


def test_a_re_created_name_never_answers_an_old_id(redis_proc: RedisProcess,
                                                   redis_client: redis.Redis) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=3)
    old = store.write_checkpoint("p", "i", gen, b"first life", 1, "a:1")
    store.release("p", "i", keep_checkpoints=False)
    assert redis_client.get("conveyor:{p}:seq") == b"1"  # the counter survives a delete
    gen = store.create("p", "a:1", "i", "ff", keep=3)
    new = store.write_checkpoint("p", "i", gen, b"second life", 1, "a:1")
    assert new.id != old.id
    with pytest.raises(NotFound):
        store.read_checkpoint(old.id)
    assert store.read_checkpoint(new.id).blob == b"second life"
    # Even when the sequence number comes back (the counter deleted, as servers before
    # this change did), the old id answers NotFound, not the new checkpoint.
    store.release("p", "i", keep_checkpoints=False)
    redis_client.delete("conveyor:{p}:seq")
    gen = store.create("p", "a:1", "i", "ff", keep=3)
    again = store.write_checkpoint("p", "i", gen, b"third life", 1, "a:1")
    assert again.id.split("-")[0] == old.id.split("-")[0] and again.id != old.id
    with pytest.raises(NotFound, match=STALE):
        store.read_checkpoint(old.id)
    assert store.read_checkpoint(again.id).blob == b"third life"


def test_a_lost_write_never_makes_an_old_id_restore_the_next_checkpoint(
    redis_proc: RedisProcess, redis_client: redis.Redis,
) -> None:
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=5)
    kept = store.write_checkpoint("p", "i", gen, b"kept", 1, "a:1")
    lost = store.write_checkpoint("p", "i", gen, b"lost", 2, "a:1")
    # A failover loses the last write: counter, hash and index entry together.
    redis_client.set("conveyor:{p}:seq", 1)
    redis_client.delete("conveyor:{p}:ckpt:2")
    redis_client.zrem("conveyor:{p}:ckpts", 2)
    with pytest.raises(NotFound, match="never written"):
        store.read_checkpoint(lost.id)
    rewritten = store.write_checkpoint("p", "i", gen, b"rewritten", 2, "a:1")
    assert parse_checkpoint_id(rewritten.id)[1] == parse_checkpoint_id(lost.id)[1] == 2
    assert rewritten.id != lost.id
    with pytest.raises(NotFound, match=STALE):
        store.read_checkpoint(lost.id)
    assert store.read_checkpoint(rewritten.id).blob == b"rewritten"
    assert [c.id for c in store.list_checkpoints("p")] == [kept.id, rewritten.id]


@pytest.mark.parametrize("cid", [
    "", "p", "p:", ":1-0123456789abcdef", "p:x-0123456789abcdef", "p:0-0123456789abcdef",
    "p:01-0123456789abcdef", "p:-1", "p:1-", "p:1-0123456789abcde", "p:1-0123456789abcdef0",
    "p:1-0123456789ABCDEF", "p:1-0123456789abcdeg", "p:1-0123456789abcdef\n", "p:1\n",
    "p:²", "p:1:2", "p:12345678901234567890-0123456789abcdef",
])
def test_malformed_ids_are_invalid_and_name_the_form(cid: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape("'<pipeline>:<number>-<16 hex>'")):
        parse_checkpoint_id(cid)


@pytest.mark.parametrize("cid", ["bad name:1-0123456789abcdef", "-p:1-0123456789abcdef",
                                 "p\n:1-0123456789abcdef", "p\n:1"])
def test_ids_with_a_bad_pipeline_name_are_invalid(cid: str) -> None:
    with pytest.raises(InvalidArgument, match="pipeline name"):
        parse_checkpoint_id(cid)


def test_malformed_ids_are_invalid_before_redis_is_asked(redis_proc: RedisProcess) -> None:
    store = Store(redis_proc.url)
    with pytest.raises(InvalidArgument, match="<16 hex>"):
        store.read_checkpoint("p:1-XYZ")


def test_ids_are_built_and_parsed_alike() -> None:
    assert checkpoint_id("p.q_r-s", 42, "00ff00ff00ff00ff") == "p.q_r-s:42-00ff00ff00ff00ff"
    assert parse_checkpoint_id("p.q_r-s:42-00ff00ff00ff00ff") == ("p.q_r-s", 42,
                                                                 "00ff00ff00ff00ff")
    assert checkpoint_id("p", 7, "") == "p:7"
    assert parse_checkpoint_id("p:7") == ("p", 7, "")


def test_legacy_ids_read_only_a_checkpoint_without_a_nonce(
    redis_proc: RedisProcess, redis_client: redis.Redis,
) -> None:
    """'<pipeline>:<number>' from a server before nonces: read while the checkpoint at that
    sequence has no nonce (an older server wrote it); NotFound once one with a nonce took
    the number. Describe shows an older server's newest checkpoint in the older form."""
    store = Store(redis_proc.url)
    gen = store.create("p", "a:1", "i", "ff", keep=0)
    new = store.write_checkpoint("p", "i", gen, b"with nonce", 1, "a:1")
    with pytest.raises(NotFound, match=STALE):
        store.read_checkpoint("p:1")
    # An older server's write: no nonce in the hash, the owner's 'latest' only.
    older = store.write_checkpoint("p", "i", gen, b"older", 2, "a:1")
    redis_client.hdel("conveyor:{p}:ckpt:2", "nonce")
    redis_client.hset("conveyor:{p}:owner", "latest_id", new.id)
    assert store.read_checkpoint("p:2").blob == b"older"
    with pytest.raises(NotFound, match=STALE):
        store.read_checkpoint(older.id)
    assert [c.id for c in store.list_checkpoints("p")] == [new.id, "p:2"]
    owner = store.owner("p")
    assert owner is not None and owner.latest_id == "p:2"
    redis_client.hdel("conveyor:{p}:owner", "latest_id")
    owner = store.owner("p")
    assert owner is not None and owner.latest_id == "p:2"
