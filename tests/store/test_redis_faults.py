"""Redis killed and restarted under a running pipeline, with real processes: the stream
goes on while Redis is gone, Checkpoint answers UNAVAILABLE once ``redis.failover_s`` ran
out, and once the (append-only, fsync always) Redis is back nothing acknowledged is lost:
the checkpoints written before the crash restore exactly, and checkpoints work again. A
Redis back within ``redis.failover_s`` is ridden through: the Checkpoint waiting on it
answers, exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conveyor import Checkpoint, errors
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.support.resume import batch_bytes, reference
from tests.support.servers import DEADLINE, ServerProcess, client, wait_for


def test_redis_killed_and_restarted_mid_run(tmp_path: Path, image_root: Path) -> None:
    store = RedisProcess(tmp_path / "redis", appendonly=True).start()
    server = ServerProcess(store.url, [image_root], tmp_path,
                           env={"CONVEYOR_REDIS_FAILOVER_S": "2"}).start()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 12)
    try:
        with client(server, failover=False) as c:
            pipe = c.create("survivor", spec)
            got = [batch_bytes(pipe.run()) for _ in range(3)]
            saved = pipe.checkpoint()
            store.kill()  # kill -9: everything confirmed before is on disk
            got += [batch_bytes(pipe.run()) for _ in range(3)]  # streams go on
            started = time.monotonic()
            with pytest.raises(errors.Unavailable, match="unreachable.*redis.failover_s"):
                pipe.checkpoint()
            assert time.monotonic() - started < 5
            store.start()
            wait_for(lambda: _checkpoints(pipe), "checkpoints to work again")
            got += [batch_bytes(pipe.run()) for _ in range(2)]
            assert got == expected[:len(got)]
            assert saved.id in {k.id for k in c.checkpoints("survivor")}
            copy = c.restore("survivor-copy", checkpoint=saved.id)
            assert batch_bytes(copy.run()) == expected[3]
    finally:
        server.stop()
        store.stop()


def test_a_checkpoint_rides_through_a_redis_restart(tmp_path: Path, image_root: Path) -> None:
    """The private Redis killed with -9 under a Checkpoint and started again on its files
    while the server still tries: the Checkpoint answers (the trainer sees nothing), once,
    and the checkpoint confirmed before the kill and the one after both restore."""
    store = RedisProcess(tmp_path / "redis", appendonly=True).start()
    server = ServerProcess(store.url, [image_root], tmp_path,
                           env={"CONVEYOR_REDIS_FAILOVER_S": "60"}).start()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    expected = reference(spec, 6)
    try:
        with client(server, failover=False) as c:
            pipe = c.create("rider", spec)
            got = [batch_bytes(pipe.run()) for _ in range(2)]
            before = pipe.checkpoint()
            store.kill()
            answer: list[object] = []
            waiting = threading.Thread(target=lambda: answer.append(_outcome(pipe)))
            waiting.start()
            wait_for(lambda: "failed checkpoint (" in server.log_path.read_text(),
                     "the server to try the checkpoint again")
            store.start()
            waiting.join(DEADLINE)
            assert not waiting.is_alive()
            after = answer[0]
            assert isinstance(after, Checkpoint), after
            assert after.batches == 2 and after.id != before.id
            assert [k.id for k in c.checkpoints("rider")][-2:] == [before.id, after.id]
            got += [batch_bytes(pipe.run()) for _ in range(2)]
            assert got == expected[:4]
            for i, saved in enumerate((before, after)):
                copy = c.restore(f"copy-{i}", checkpoint=saved.id)
                assert batch_bytes(copy.run()) == expected[2]
    finally:
        server.stop()
        store.stop()


def _outcome(pipe: Any) -> object:
    try:
        return pipe.checkpoint()
    except errors.ConveyorError as exc:
        return exc


def _checkpoints(pipe: object) -> bool:
    try:
        pipe.checkpoint()  # type: ignore[attr-defined]
        return True
    except errors.Unavailable:
        return False
