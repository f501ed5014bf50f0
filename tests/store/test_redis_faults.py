"""Redis killed and restarted under a running pipeline, with real processes: the stream
goes on while Redis is gone, Checkpoint answers UNAVAILABLE within its deadline, and once
the (append-only, fsync always) Redis is back nothing acknowledged is lost: the
checkpoints written before the crash restore exactly, and checkpoints work again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.support.resume import batch_bytes, reference
from tests.support.servers import ServerProcess, client, wait_for


def test_redis_killed_and_restarted_mid_run(tmp_path: Path, image_root: Path) -> None:
    store = RedisProcess(tmp_path / "redis", appendonly=True).start()
    server = ServerProcess(store.url, [image_root], tmp_path).start()
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
            with pytest.raises(errors.Unavailable, match="unreachable"):
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


def _checkpoints(pipe: object) -> bool:
    try:
        pipe.checkpoint()  # type: ignore[attr-defined]
        return True
    except errors.Unavailable:
        return False
