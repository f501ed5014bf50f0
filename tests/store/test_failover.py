"""Riding through a Redis failover, with real redis-servers and Sentinels (a primary, two
replicas, three Sentinels): a write whose reply was lost is tried again and applied once;
a trainer checkpointing through a failover (the primary killed with -9) sees nothing, gets
the same batches as an uninterrupted run, and every checkpoint it was given restores
exactly; a take-over made as the primary dies is applied once, on the new primary. The
same trainer rides through a standalone URL whose endpoint moves to the promoted replica
(as a managed Redis's primary endpoint does)."""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import yaml

from conveyor.errors import Fenced, Unavailable
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.connect import connect
from conveyor_server.store.failover import Failover
from conveyor_server.store.records import StoredCheckpoint
from conveyor_server.store.redis_process import RedisProcess, find_redis_server
from conveyor_server.store.store import Store
from tests.support.fault_proxy import FaultProxy
from tests.support.redis_modes import ReplicatedRedis, free_port, start_replicated
from tests.support.resume import batch_bytes, reference
from tests.support.servers import ServerProcess, client

T = TypeVar("T")


class LostReply(Failover):
    """Runs each operation once more before answering, as when a write reached Redis but
    its reply was lost to a failover and the store tried it again."""

    def run(self, what: str, fn: Callable[[], T]) -> T:
        fn()
        return super().run(what, fn)


@pytest.fixture
def lossy(redis_proc: RedisProcess) -> Iterator[Store]:
    store = Store(redis_proc.url)
    store.failover = LostReply(0.0, 1.0, store.address)
    yield store
    store.close()


def test_a_write_tried_again_is_applied_once(lossy: Store) -> None:
    gen = lossy.create("p", "a:1", "inst-a", "f" * 64, keep=5)  # not AlreadyExists
    assert gen == 1
    first = lossy.write_checkpoint("p", "inst-a", gen, b"blob", 3, "a:1")
    assert [c.id for c in lossy.list_checkpoints("p")] == [first.id]  # stored once
    assert lossy.read_checkpoint(first.id).blob == b"blob"
    gen_b, previous = lossy.take_over("p", "b:1", "inst-b", "f" * 64, keep=5)
    assert (gen_b, previous) == (2, "a:1")  # raised once, from the holder it had
    owner = lossy.owner("p")
    assert owner is not None and owner.generation == 2 and owner.latest_id == first.id
    second = lossy.write_checkpoint("p", "inst-b", gen_b, b"later", 4, "b:1")
    assert [c.id for c in lossy.list_checkpoints("p")] == [first.id, second.id]
    assert lossy.release("p", "inst-b", keep_checkpoints=True) == "b:1"  # not NotFound
    assert lossy.owner("p") is None


def test_a_replica_is_tried_for_the_window_and_other_refusals_are_not(
        tmp_path: Path, redis_proc: RedisProcess) -> None:
    """A write to a replica (``READONLY``: a demoted primary the name still points at) is
    tried until ``failover`` ends, and then says so; a refusal a failover does not explain
    (a key of the wrong type) is answered at once."""
    port = free_port()
    replica = subprocess.Popen(
        [find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--replicaof", "127.0.0.1", str(free_port()), "--dir", str(tmp_path),
         "--logfile", str(tmp_path / "replica.log")], stdin=subprocess.DEVNULL)
    try:
        store = Store(f"redis://127.0.0.1:{port}/0", failover=0.5)
        wait_answering(store)
        started = time.monotonic()
        with pytest.raises(Unavailable) as caught:
            store.create("p", "a:1", "inst-a", "f" * 64, keep=5)
        assert 0.5 <= time.monotonic() - started < 3
        assert re.fullmatch(r"Redis at redis://127\.0\.0\.1:\d+/0 refused create: it is a "
                            r"read-only replica, not the primary; tried for 0\.[56] s "
                            r"\(redis\.failover_s: 0\.5 s\) and no primary answered: .*",
                            caught.value.message), caught.value.message
        store.close()
    finally:
        replica.kill()
        replica.wait(10)
    store = Store(redis_proc.url, failover=30)
    store._redis.set("conveyor:{q}:owner", "not a hash")
    started = time.monotonic()
    with pytest.raises(Unavailable, match="refused create: .*WRONGTYPE") as caught:
        store.create("q", "a:1", "inst-a", "f" * 64, keep=5)
    assert time.monotonic() - started < 1 and "tried for" not in caught.value.message
    store.close()


def wait_answering(store: Store) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            store.ping()
            return
        except Unavailable:
            assert time.monotonic() < deadline, "the replica did not answer"
            time.sleep(0.05)


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[ReplicatedRedis]:
    started = start_replicated(tmp_path / "redis")
    try:
        yield started
    finally:
        started.stop()


def _server(image_root: Path, tmp_path: Path, redis: dict[str, Any]) -> ServerProcess:
    doc = {"listen": "127.0.0.1:0", "data_roots": [str(image_root)], "redis": redis}
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(doc))
    return ServerProcess(None, [], tmp_path, "--config", str(path)).start()


def _sentinel_server(replicated: ReplicatedRedis, image_root: Path, tmp_path: Path,
                     **redis_options: Any) -> ServerProcess:
    cfg = replicated.config()
    return _server(image_root, tmp_path, {"mode": "sentinel", "sentinels": list(cfg.sentinels),
                                          "master_name": cfg.master_name, **redis_options})


def _ride(server: ServerProcess, image_root: Path, fail: Callable[[], None]) -> None:
    """A trainer checkpointing every 3 batches, ``fail`` called right after its third
    checkpoint: its loop raises nothing, its batches are an uninterrupted run's, the
    checkpoint after the failure was tried until it held (the server's log), and every
    checkpoint it was given restores exactly."""
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 25)  # one more: what the last checkpoint resumes at
    with client(server, failover=False) as c:
        pipe = c.create("rider", spec)
        got, confirmed = [], []
        for step in range(24):
            got.append(batch_bytes(pipe.run()))
            if step % 3 == 2:
                confirmed.append(pipe.checkpoint())
                if len(confirmed) == 3:
                    fail()
        assert got == expected[:24]
        log = server.log_path.read_text()
        assert "failed checkpoint (" in log and "answered checkpoint again" in log
        kept = [k.id for k in c.checkpoints("rider")]
        assert [k.id for k in confirmed] == kept[-len(confirmed):]
        for i, saved in enumerate(confirmed):
            copy = c.restore(f"copy-{i}", checkpoint=saved.id)
            assert batch_bytes(copy.run()) == expected[saved.batches], saved.id
            c.delete(f"copy-{i}")


def test_a_trainer_rides_through_a_sentinel_failover(
        replicated: ReplicatedRedis, image_root: Path, tmp_path: Path) -> None:
    server = _sentinel_server(replicated, image_root, tmp_path, min_replicas=1)
    killed: list[int] = []
    try:
        _ride(server, image_root, lambda: killed.append(replicated.kill_primary()))
        assert killed and replicated.wait_promoted(killed[0]) != killed[0]
    finally:
        server.stop()


def _promote_most_advanced(replicated: ReplicatedRedis, proxy: FaultProxy) -> None:
    """What a managed Redis does once its primary died: the replica furthest along becomes
    the primary, the other follows it, and the primary endpoint (the proxy) moves to it."""
    replicas: dict[int, Any] = {port: redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
                                for port in replicated.ports[1:]}
    try:
        offsets = {port: int(r.info("replication")["slave_repl_offset"])
                   for port, r in replicas.items()}
        new = max(offsets, key=lambda port: offsets[port])
        replicas[new].execute_command("REPLICAOF", "NO", "ONE")
        for port, r in replicas.items():
            if port != new:
                r.execute_command("REPLICAOF", "127.0.0.1", str(new))
        proxy.target = new
    finally:
        for r in replicas.values():
            r.close()


def test_a_trainer_rides_through_a_primary_endpoint_that_moves(
        image_root: Path, tmp_path: Path) -> None:
    """A standalone URL naming a primary endpoint that moves to the promoted replica a
    second after the primary is killed (-9)."""
    moved = start_replicated(tmp_path / "redis", replicas=2, sentinels=0)
    proxy = FaultProxy(moved.ports[0])
    server = _server(image_root, tmp_path, {"url": f"redis://127.0.0.1:{proxy.port}",
                                            "min_replicas": 1})
    promotion = threading.Timer(1.0, _promote_most_advanced, (moved, proxy))

    def kill_primary() -> None:
        moved.procs[moved.ports[0]].kill()
        moved.procs[moved.ports[0]].wait(10)
        promotion.start()
    try:
        _ride(server, image_root, kill_primary)
        assert proxy.target != moved.ports[0]  # the checkpoint waited for the promotion
    finally:
        promotion.cancel()
        promotion.join()
        server.stop()
        proxy.close()
        moved.stop()


def test_a_take_over_rides_through_a_sentinel_failover(
        replicated: ReplicatedRedis, caplog: pytest.LogCaptureFixture) -> None:
    """The first call after the primary is killed is a take-over (a Restore's claim): it
    waits out the failover, raises the generation once, and is on a replica of the new
    primary when it returns, as are the checkpoints confirmed before."""
    store = Store(connect(replicated.config(timeout_s=1.0)), min_replicas=1, failover=15)
    try:
        gen = store.create("p", "a:1", "inst-a", "f" * 64, keep=5)
        saved = store.write_checkpoint("p", "inst-a", gen, b"confirmed", 3, "a:1")
        killed = replicated.kill_primary()
        with caplog.at_level(logging.WARNING, "conveyor.server"):
            gen_b, previous = store.take_over("p", "b:1", "inst-b", "f" * 64, keep=5)
        assert "failed restore (" in caplog.text
        assert "answered restore again" in caplog.text
        assert (gen_b, previous) == (gen + 1, "a:1")
        new = replicated.wait_promoted(killed)
        assert new != killed
        with pytest.raises(Fenced, match="b:1"):
            store.write_checkpoint("p", "inst-a", gen, b"zombie", 4, "a:1")
        assert store.read_checkpoint(saved.id).blob == b"confirmed"
        later = store.write_checkpoint("p", "inst-b", gen_b, b"later", 5, "b:1")
        assert [c.id for c in store.list_checkpoints("p")] == [saved.id, later.id]
        assert store.release("p", "inst-b", keep_checkpoints=False) == "b:1"
    finally:
        store.close()


def test_checkpoints_ride_through_a_switch_over(replicated: ReplicatedRedis) -> None:
    """A failover an operator asks for (the primary stays up until the Sentinels demote it,
    some 10 s later, and drop its clients), with every replica required (``min_replicas``
    2 of 2): checkpoints written one after another all through it each succeed, once, and
    every one reads back. The writes wait while the old primary is up, so the window is
    longer than the default. (With fewer replicas required, those the unpromoted replica
    alone acknowledged while the old primary still took writes are lost: WAIT is not
    consensus; their ids answer NOT_FOUND.)"""
    cfg = replicated.config(timeout_s=1.0, min_replicas=2, replica_timeout_s=0.5)
    store = Store(connect(cfg), timeout=1.0, min_replicas=2, replica_timeout=0.5,
                  failover=45)
    try:
        gen = store.create("p", "a:1", "inst-a", "f" * 64, keep=10_000)
        old = replicated.switch_over()
        written: list[StoredCheckpoint] = []
        after = 0
        deadline = time.monotonic() + 60
        while after < 5:  # until 5 were written once every Sentinel names the new primary
            assert time.monotonic() < deadline, "the Sentinels did not switch over"
            written.append(store.write_checkpoint("p", "inst-a", gen, b"%d" % len(written),
                                                  len(written), "a:1"))
            after += replicated.promoted(old)
        assert replicated.wait_promoted(old) != old
        assert [c.id for c in store.list_checkpoints("p")] == [c.id for c in written]
        assert [store.read_checkpoint(c.id).blob for c in written] == [
            b"%d" % i for i in range(len(written))]
    finally:
        store.close()
