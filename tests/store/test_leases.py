"""Names are leases, with real servers and a real Redis: a holder that cannot renew (Redis
unreachable) stops streaming when its lease ends, so no zombie streams during a partition;
a name whose holder died may be created anew once its lease ran out; an operator can
force-delete a pipeline held by another server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.store.redis_process import RedisProcess
from tests.support.servers import Start, client, wait_for

SHORT_LEASE = {"CONVEYOR_REDIS_LEASE_S": "2"}


def test_a_holder_that_cannot_renew_stops_streaming_when_its_lease_ends(
        start_server: Start, image_root: Path, redis_proc: RedisProcess) -> None:
    server = start_server(env=SHORT_LEASE)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server, failover=False) as c:
        pipe = c.create("leased", spec)
        pipe.run()
        redis_proc.pause()  # a partition: this server can no longer renew
        try:
            started = time.monotonic()
            with pytest.raises(errors.Unavailable, match="lease on pipeline 'leased' ran out"):
                for _ in range(100_000):
                    pipe.run()
            stopped = time.monotonic() - started
        finally:
            redis_proc.resume()
        assert stopped < 6, f"streamed for {stopped:.1f} s without a lease"
        # Redis is back and nobody took the name: the holder renews and serves again.
        wait_for(lambda: c.pipeline("leased").holder == server.address, "a renewal")
        wait_for(lambda: _streams(pipe), "the stream to come back")


def _streams(pipe: object) -> bool:
    try:
        pipe.run()  # type: ignore[attr-defined]
        return True
    except errors.Unavailable:
        return False


def test_a_dead_holders_name_can_be_created_once_its_lease_ran_out(
        start_server: Start, image_root: Path) -> None:
    a, b = start_server(env=SHORT_LEASE), start_server(env=SHORT_LEASE)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(a) as ca, client(b) as cb:
        ca.create("orphan", spec).run()
        a.kill()
        with pytest.raises(errors.AlreadyExists):
            cb.create("orphan", spec)  # the lease still runs
        time.sleep(2.5)
        fresh = cb.create("orphan", spec)
        assert fresh.info.holder == b.address and fresh.run() is not None


def test_an_operator_force_deletes_a_pipeline_held_elsewhere(start_server: Start,
                                                             image_root: Path) -> None:
    a, b = start_server(), start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(a, failover=False) as ca, client(b) as operator:
        pipe = ca.create("stuck", spec)
        pipe.run()
        with pytest.raises(errors.FailedPrecondition, match="held by server"):
            operator.delete("stuck")
        operator.delete("stuck", force=True)
        with pytest.raises(errors.NotFound):
            operator.pipeline("stuck")
        with pytest.raises(errors.Fenced, match="deleted through another server"):
            for _ in range(1000):  # the holder's stream ends once its watcher sees it
                pipe.run()
        assert operator.create("stuck", spec).run() is not None
