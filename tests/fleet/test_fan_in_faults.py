"""Fan-in when workers fail, with real servers: a worker killed (-9), stopped (SIGSTOP) or
drained mid-stream loses nothing and repeats nothing (the one-server reference), Redis
restarted mid-stream stops nothing, and a server that joins a ``workers="auto"`` stream
computes within seconds."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from conveyor_server.store.redis_process import RedisProcess
from tests.fleet.support import fleet, read_on, rotating, trainer
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start

COUNT = 40
#: The longest a trainer may wait for one batch across a fault (the hedge and the
#: keepalive act well within it).
STALL_S = 5.0


@pytest.mark.parametrize("fault", ["kill -9", "SIGSTOP", "drain"])
def test_a_worker_failing_mid_stream_loses_and_repeats_nothing(
        start_server: Start, image_root: Path, fault: str) -> None:
    holder, victim, other = fleet(start_server, 3)
    spec = rotating(image_root)
    expected = reference(spec, COUNT)
    assert victim.proc is not None
    with trainer(holder, victim, other) as c:
        pipe = c.open("faulty", spec, workers=3)
        got = [batch_bytes(pipe.run()) for _ in range(6)]
        assert victim.address in pipe.workers
        if fault == "kill -9":
            victim.kill()
        elif fault == "SIGSTOP":
            victim.proc.send_signal(signal.SIGSTOP)
        else:
            victim.proc.send_signal(signal.SIGTERM)
        try:
            stall = read_on(pipe, got, COUNT)
            assert victim.address not in pipe.workers
        finally:
            if fault == "SIGSTOP":
                victim.proc.send_signal(signal.SIGCONT)
        fan = pipe.fan_in
        assert fan is not None and fan.mismatches == 0
        assert stall < STALL_S, f"the trainer waited {stall:.1f} s for a batch"
        assert pipe.checkpoint().batches == COUNT
    assert got == expected, "a batch was lost or repeated"


def test_a_server_joining_an_auto_stream_computes_within_seconds(
        start_server: Start, image_root: Path) -> None:
    (first,) = fleet(start_server, 1)
    spec = rotating(image_root)
    with trainer(first) as c:
        pipe = c.open("growing", spec, workers="auto")
        got = [batch_bytes(pipe.run()) for _ in range(4)]
        (joined,) = fleet(start_server, 1)
        started = time.monotonic()
        fan = pipe.fan_in
        assert fan is not None

        def delivered() -> int:
            with fan.cond:
                return sum(w.delivered for w in fan.workers if w.address == joined.address)
        while not delivered():
            assert time.monotonic() - started < 8.0, "the new server computed nothing"
            got.append(batch_bytes(pipe.run()))
        assert sorted(pipe.workers) == sorted([first.address, joined.address])
        got += [batch_bytes(pipe.run()) for _ in range(10)]
    assert got == reference(spec, len(got))


def test_redis_restarted_mid_stream_stops_nothing(start_server: Start, image_root: Path,
                                                  redis_proc: RedisProcess) -> None:
    servers = fleet(start_server, 2)
    spec = rotating(image_root)
    with trainer(*servers) as c:
        pipe = c.open("outage", spec, workers=2)
        got = [batch_bytes(pipe.run()) for _ in range(5)]
        redis_proc.stop()
        got += [batch_bytes(pipe.run()) for _ in range(10)]  # the workers go on
        redis_proc.start()
        got += [batch_bytes(pipe.run()) for _ in range(5)]
        assert pipe.checkpoint().batches == 20
        assert pipe.fan_in is not None and pipe.fan_in.mismatches == 0
    assert got == reference(spec, 20)
