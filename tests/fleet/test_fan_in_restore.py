"""A fan-in's checkpoint is the pipeline's own: taken with 2 workers it restores with 3,
with 1 (the holder's stream), and with no fan-in at all, each going on with the same
bytes; and closing a fan-in never hangs, a stopped worker included."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conveyor import errors
from conveyor_server.store.redis_process import RedisProcess
from tests.fleet.support import fleet, rotating, source_env, trainer
from tests.support.resume import batch_bytes, reference
from tests.support.servers import ServerProcess, Start


def test_a_checkpoint_taken_with_two_workers_restores_with_three_and_with_one(
        start_server: Start, image_root: Path) -> None:
    servers = fleet(start_server, 3)
    spec = rotating(image_root)
    expected = reference(spec, 30)
    with trainer(*servers) as c:
        pipe = c.open("moving", spec, run_id="run", workers=2)
        got = [batch_bytes(pipe.run()) for _ in range(10)]
        saved = pipe.checkpoint()
        assert saved.batches == 10
        pipe.run()  # read past the checkpoint, then dropped
        pipe.close()
        three = c.restore("moving", checkpoint=saved, workers=3)
        assert [batch_bytes(three.run()) for _ in range(10)] == expected[10:20]
        assert len(three.workers) == 3
        again = three.checkpoint()
        three.close()
        one = c.restore("moving", checkpoint=again, workers=1)
        assert one.workers == [one.via]
        assert [batch_bytes(one.run()) for _ in range(5)] == expected[20:25]
        one.close()
        # open with the run's id goes on from the newest checkpoint, fanned in again.
        reopened = c.open("moving", spec, run_id="run", workers=2)
        assert reopened.consumed == 20
        assert [batch_bytes(reopened.run()) for _ in range(5)] == expected[20:25]
    assert got == expected[:10]


def test_close_ends_a_blocked_run_at_once_with_a_stopped_worker(
        start_server: Start, image_root: Path) -> None:
    holder, stopped = fleet(start_server, 2)
    assert stopped.proc is not None
    spec = rotating(image_root)
    c = trainer(holder, stopped, keepalive_s=30, keepalive_timeout_s=30)
    pipe = c.open("closing", spec, workers=2)
    pipe.run()
    stopped.proc.send_signal(signal.SIGSTOP)
    holder.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    outcome: list[BaseException] = []

    def trainer_loop() -> None:
        try:
            while True:
                pipe.run()
        except BaseException as exc:
            outcome.append(exc)

    loop = threading.Thread(target=trainer_loop, daemon=True)
    loop.start()
    try:
        time.sleep(0.5)  # the trainer is blocked: both servers are stopped
        assert loop.is_alive()
        started = time.monotonic()
        c.close()
        loop.join(2.0)
        assert time.monotonic() - started < 2.0
        assert not loop.is_alive()
        assert isinstance(outcome[0], errors.FailedPrecondition)
        deadline = time.monotonic() + 2.0
        while any(t.name.startswith("conveyor-fan-in") for t in threading.enumerate()):
            assert time.monotonic() < deadline, "a fan-in thread outlived close()"
            time.sleep(0.01)
    finally:
        for server in (stopped, holder):
            server.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def refusing(image_root: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[ServerProcess]:
    """One server (and its Redis) for the refusals below: each creates nothing on it, and
    checks so."""
    redis = RedisProcess(appendonly=True)
    redis.start()
    server = ServerProcess(redis.url, [image_root], tmp_path_factory.mktemp("refusing"),
                           env=source_env())
    try:
        yield server.start()
    finally:
        server.stop()
        redis.cleanup()


@pytest.mark.parametrize("workers", [0, -1, "all", 2.5, True])
def test_a_wrong_workers_value_is_refused_naming_it(refusing: ServerProcess,
                                                     image_root: Path, workers: object) -> None:
    server = refusing
    with trainer(server) as c, pytest.raises(errors.InvalidArgument, match="workers: got"):
        c.open("wrong", rotating(image_root), workers=workers)  # type: ignore[arg-type]
    with trainer(server) as c:
        assert c.pipelines() == []  # nothing was created
