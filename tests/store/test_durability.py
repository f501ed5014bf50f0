"""Durability with real redis-servers: with ``redis.min_replicas`` a take-over or a
checkpoint is confirmed only once a replica has it (WAIT), and fails clearly when none
acknowledges in time; the embedded Redis writes every change to disk before answering."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import redis

from conveyor.errors import Fenced, Unavailable
from conveyor_server.store.connect import RedisConfig, connect
from conveyor_server.store.redis_process import RedisProcess, find_redis_server
from conveyor_server.store.store import Store
from tests.support.redis_modes import free_port

T = TypeVar("T")


def test_the_embedded_redis_fsyncs_every_write(tmp_path: Path) -> None:
    embedded = RedisProcess(tmp_path / "redis", appendonly=True).start()
    try:
        client = redis.Redis.from_url(embedded.url)
        assert client.config_get("appendfsync") == {"appendfsync": "always"}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.close()
    finally:
        embedded.stop()


def test_writes_wait_for_a_replica_and_fail_clearly_without_one(tmp_path: Path) -> None:
    primary = RedisProcess(tmp_path / "primary").start()
    port = free_port()
    replica = subprocess.Popen(
        [find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--dir", str(tmp_path), "--logfile", str(tmp_path / "replica.log")],
        stdin=subprocess.DEVNULL)
    try:
        # The replica follows the primary over TCP: give the primary a TCP port too.
        primary_client = redis.Redis.from_url(primary.url)
        primary_port = free_port()
        primary_client.config_set("port", primary_port)
        deadline = time.monotonic() + 10
        follower = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
        while True:
            try:
                follower.replicaof("127.0.0.1", primary_port)
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        while follower.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not connect"
            time.sleep(0.05)
        store = Store(primary.url, min_replicas=1, replica_timeout=0.5)
        store.create("p", "a:1", "i", "f", 3)
        gen, _ = store.take_over("p", "a:1", "i2", "f", 3)
        written = store.write_checkpoint("p", "i2", gen, b"blob", 1, "a:1")
        assert follower.exists("conveyor:{p}:owner")  # the replica has it
        replica.send_signal(signal.SIGSTOP)  # the replica stops acknowledging
        try:
            started = time.monotonic()
            with pytest.raises(Unavailable, match=r"reached 0 of the 1 Redis replicas"):
                store.write_checkpoint("p", "i2", gen, b"blob2", 2, "a:1")
            assert time.monotonic() - started < 3
        finally:
            replica.send_signal(signal.SIGCONT)
        assert store.read_checkpoint(written.id).blob == b"blob"
        follower.close()
        primary_client.close()
        store.close()
    finally:
        replica.kill()
        replica.wait(10)
        primary.stop()



def test_acknowledged_writes_survive_a_sentinel_failover(tmp_path: Path) -> None:
    """A master with two replicas watched by a Sentinel; with ``min_replicas=1`` every
    acknowledged take-over and checkpoint is on a replica, so when the master is killed
    and a replica promoted, none is lost: the checkpoint reads back exactly, the fencing
    generation goes on from where it was (the old holder stays fenced), and writes go on
    against the new master (its other replica follows it)."""
    procs: list[subprocess.Popen[bytes]] = []

    def redis_server(name: str, port: int, *args: str) -> redis.Redis:
        procs.append(subprocess.Popen(
            [find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(tmp_path), "--logfile",
             str(tmp_path / f"{name}.log"), *args], stdin=subprocess.DEVNULL))
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
        until(lambda: ping(client), f"{name} to answer")
        return client

    master_port, sentinel_port = free_port(), free_port()
    try:
        master = redis_server("master", master_port)
        replicas = [redis_server(f"replica{i}", free_port(), "--replicaof", "127.0.0.1",
                                 str(master_port)) for i in range(2)]
        until(lambda: all(r.info("replication")["master_link_status"] == "up"
                          for r in replicas), "the replicas to follow")
        conf = tmp_path / "sentinel.conf"
        conf.write_text(f"port {sentinel_port}\nbind 127.0.0.1\n"
                        f"sentinel monitor durable 127.0.0.1 {master_port} 1\n"
                        "sentinel down-after-milliseconds durable 500\n"
                        "sentinel failover-timeout durable 5000\n")
        procs.append(subprocess.Popen(
            [find_redis_server(), str(conf), "--sentinel", "--dir", str(tmp_path),
             "--logfile", str(tmp_path / "sentinel.log")], stdin=subprocess.DEVNULL))
        sentinel = redis.Redis(host="127.0.0.1", port=sentinel_port, socket_timeout=1)
        until(lambda: len(sentinel.execute_command("SENTINEL", "REPLICAS", "durable")) == 2,
              "the sentinel to see both replicas")
        cfg = RedisConfig(mode="sentinel", sentinels=(f"127.0.0.1:{sentinel_port}",),
                          master_name="durable", timeout_s=1.0)
        store = Store(connect(cfg), min_replicas=1, replica_timeout=1.0)
        store.create("p", "a:1", "old", "f", 5)
        gen, _ = store.take_over("p", "b:1", "new", "f", 5)
        written = store.write_checkpoint("p", "new", gen, b"acknowledged", 7, "b:1")

        procs[0].kill()  # the master, with no warning
        procs[0].wait(10)
        master.close()
        until(lambda: int(sentinel.execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "durable")[1]) != master_port,
            "the sentinel to promote a replica", 30)
        # The store reaches the new master (a call may fail while it switches over).
        until(lambda: readable(store, written.id), "the store on the new master", 30)
        assert store.read_checkpoint(written.id).blob == b"acknowledged"
        with pytest.raises(Fenced):
            store.write_checkpoint("p", "old", gen - 1, b"zombie", 8, "a:1")
        # The other replica follows the new master, so replicated writes go on.
        later = until_value(lambda: store.write_checkpoint("p", "new", gen, b"later", 9,
                                                           "b:1"), "a replicated write", 30)
        assert store.read_checkpoint(later.id).batches == 9
        sentinel.close()
        store.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def ping(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


def readable(store: Store, cid: str) -> bool:
    try:
        store.read_checkpoint(cid)
    except Unavailable:
        return False
    return True


def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def until_value(make: Callable[[], T], what: str, timeout: float) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return make()
        except Unavailable:
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.1)
