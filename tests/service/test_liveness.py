"""Liveness with real processes: HTTP/2 keepalive on both sides. A server that stops
answering (SIGSTOP: a dead node without a TCP reset) fails the trainer's stream within the
keepalive instead of blocking it for ever; a trainer that stops answering loses its stream,
so its pipeline is free for a new consumer."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import conveyor
from conveyor import errors
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import Start, client, wait_for

KEEPALIVE = {"CONVEYOR_KEEPALIVE_TIME_S": "1", "CONVEYOR_KEEPALIVE_TIMEOUT_S": "1"}


def test_a_stopped_server_fails_the_stream_within_the_keepalive(start_server: Start,
                                                                 image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    trainer = conveyor.Client(server.address, timeout=10, keepalive_s=1, keepalive_timeout_s=1)
    pipe = trainer.create("stopped", spec)
    pipe.run()
    outcome: list[BaseException] = []

    def consume() -> None:
        try:
            for _ in range(10_000):  # what was already sent arrives first
                pipe.run()
        except BaseException as exc:
            outcome.append(exc)

    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        reader.join(20)
        waited = time.monotonic() - started
        assert not reader.is_alive(), "the trainer is still blocked on a stopped server"
        assert isinstance(outcome[0], errors.Unavailable), outcome
        assert waited < 10, f"noticed after {waited:.1f} s"
    finally:
        server.proc.send_signal(signal.SIGCONT)
        trainer.close()


_TRAINER = """
import sys, time, conveyor
c = conveyor.Client(sys.argv[1], timeout=10)
pipe = c.attach("idle")
for _ in range(2):
    pipe.run()
print("consumed", flush=True)
time.sleep(600)
"""


def test_a_stopped_trainer_frees_its_pipeline(start_server: Start, image_root: Path) -> None:
    server = start_server(env=KEEPALIVE)
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server) as c:
        c.create("idle", spec)
        other = subprocess.Popen([sys.executable, "-c", _TRAINER, server.address],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert other.stdout is not None and other.stdout.readline().strip() == "consumed"
            wait_for(lambda: c.pipeline("idle").acknowledged == 2, "the acknowledgement")
            other.send_signal(signal.SIGSTOP)
            started = time.monotonic()
            wait_for(lambda: not c.pipeline("idle").streaming, "the server to drop the "
                     "stopped trainer's stream", 15)
            assert time.monotonic() - started < 10
            resumed = c.attach("idle")
            assert resumed.consumed == 2 and len(resumed.run()[0]) == 2
            resumed.close()
        finally:
            other.kill()
            other.wait(10)
            if other.stdout is not None:
                other.stdout.close()
