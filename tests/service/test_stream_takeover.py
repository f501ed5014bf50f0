"""One consumer per pipeline, the newest wins: a trainer that reconnects (another process,
or the same one after a network break) takes its pipeline's stream over at its own
position; the stale stream ends ABORTED. A position the server cannot stream from is
refused before the current stream is touched."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from conveyor import errors
from conveyor.client import RemotePipeline
from conveyor_server.demo.run import rotate_pipeline
from tests.support.resume import batch_bytes, reference
from tests.support.servers import Start, client, wait_for


def test_a_newer_consumer_takes_over_and_the_old_stream_ends_aborted(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 8)
    with client(server) as old_trainer, client(server) as new_trainer:
        old = old_trainer.create("taken", spec)
        assert [batch_bytes(old.run()) for _ in range(3)] == expected[:3]
        wait_for(lambda: new_trainer.pipeline("taken").acknowledged == 3, "the acks")
        again = new_trainer.attach("taken")  # at the acknowledged position
        assert again.consumed == 3
        assert [batch_bytes(again.run()) for _ in range(3)] == expected[3:6]
        with pytest.raises(errors.Aborted, match="a newer consumer took over") as caught:
            for _ in range(100):
                old.run()
        assert caught.value.code == "ABORTED"
        assert batch_bytes(again.run()) == expected[6]
        assert new_trainer.pipeline("taken").streaming


def test_an_invalid_position_is_refused_and_the_stream_goes_on(start_server: Start,
                                                                image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=3)
    expected = reference(spec, 4)
    with client(server) as c, client(server) as other:
        pipe = c.create("kept", spec)
        pipe.run()
        # A consumer at a position the server never produced.
        too_far = RemotePipeline(other, other.pipeline("kept"), consumed=10_000)
        with pytest.raises(errors.FailedPrecondition, match="only .* were produced"):
            too_far.run()
        assert [batch_bytes(pipe.run()) for _ in range(3)] == expected[1:4]


def test_a_takeover_while_the_old_stream_is_busy_streams_exact_batches(
        start_server: Start, image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, prefetch_queue_depth=3)
    expected = reference(spec, 40)
    with client(server) as c, client(server) as other:
        old = c.create("busy", spec)
        ended: list[BaseException] = []

        def consume() -> None:
            try:
                while True:
                    old.run()
            except errors.ConveyorError as exc:
                ended.append(exc)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        wait_for(lambda: c.pipeline("busy").acknowledged >= 5, "the old stream to run")
        new = other.attach("busy")  # wherever the old trainer had got to
        start = new.consumed
        assert [batch_bytes(new.run()) for _ in range(4)] == expected[start:start + 4]
        reader.join(20)
        assert not reader.is_alive() and isinstance(ended[0], errors.Aborted)


def test_close_on_another_thread_ends_a_blocked_run_at_once(start_server: Start,
                                                            image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server, failover=False) as c:
        pipe = c.create("blocked-run", spec)
        pipe.run()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)  # the next run() waits for ever
        outcome: list[BaseException] = []

        def consume() -> None:
            try:
                for _ in range(10_000):
                    pipe.run()
            except errors.ConveyorError as exc:
                outcome.append(exc)

        try:
            reader = threading.Thread(target=consume, daemon=True)
            reader.start()
            time.sleep(0.5)
            started = time.monotonic()
            pipe.close()
            reader.join(5)
            assert not reader.is_alive() and time.monotonic() - started < 2
            assert isinstance(outcome[0], errors.FailedPrecondition)
            assert "was closed" in outcome[0].message
        finally:
            server.proc.send_signal(signal.SIGCONT)
