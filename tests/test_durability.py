"""Durability with real redis-servers: with ``redis.min_replicas`` a take-over or a
checkpoint is confirmed only once a replica has it (WAIT), and fails clearly when none
acknowledges in time; the embedded Redis writes every change to disk before answering."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from conveyor.errors import Unavailable
from conveyor_server.store.redis_process import RedisProcess, find_redis_server
from conveyor_server.store.store import Store
from tests.redis_modes import free_port


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

