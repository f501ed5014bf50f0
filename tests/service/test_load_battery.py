"""Load faults with a real server: connect/cancel cycles leave no file descriptors,
threads or memory behind; many concurrent streams stay within the stated memory and never
starve the health check. ``make test`` runs a reduced battery; the full counts are one
command:

    CONVEYOR_CYCLES=10000 CONVEYOR_STREAMS=64 .venv/bin/python -m pytest \\
        tests/service/test_load_battery.py -s -o timeout=3600
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import grpc

from conveyor import errors
from conveyor.transport.channel import health_status
from conveyor_server.demo.run import rotate_pipeline
from tests.support.servers import ServerProcess, Start, client, wait_for

CYCLES = int(os.environ.get("CONVEYOR_CYCLES", "150"))
STREAMS = int(os.environ.get("CONVEYOR_STREAMS", "12"))
#: The stated bound on what a server's memory grows by while it streams (over its memory
#: with the same pipelines created and idle): this much, plus per stream.
RSS_BASE_MIB = 24
RSS_PER_STREAM_MIB = 0.25


def usage(server: ServerProcess) -> tuple[int, int, float]:
    """(open file descriptors, threads, RSS MiB) of the server process."""
    assert server.proc is not None
    pid = server.proc.pid
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = {line.split(":")[0]: line.split(":")[1].split() for line in status}
    return fds, int(fields["Threads"][0]), int(fields["VmRSS"][0]) / 1024


def test_connect_cancel_cycles_leave_nothing_behind(start_server: Start,
                                                    image_root: Path) -> None:
    server = start_server()
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2)
    with client(server) as c:
        c.create("cycled", spec).close()

        def cycles(count: int) -> None:
            for i in range(count):
                pipe = c.attach("cycled")
                if i % 2 == 0:
                    pipe.run()  # half of them take a batch before they go
                pipe.close()

        cycles(30)  # warm up: the RPC pool's threads, caches, the allocator
        wait_for(lambda: not c.pipeline("cycled").streaming, "the warm-up streams")
        time.sleep(0.5)
        before = usage(server)
        cycles(CYCLES)
        wait_for(lambda: not c.pipeline("cycled").streaming, "the last stream to end")
        time.sleep(0.5)
        after = usage(server)
    print(f"\n{CYCLES} connect/cancel cycles: fds {before[0]} -> {after[0]}, threads "
          f"{before[1]} -> {after[1]}, RSS {before[2]:.0f} -> {after[2]:.0f} MiB")
    assert after[0] <= before[0] + 2 and after[1] <= before[1] + 2
    assert after[2] <= before[2] + 40


def test_concurrent_streams_never_starve_the_health_check(start_server: Start,
                                                          image_root: Path) -> None:
    server = start_server(env={"CONVEYOR_LIMITS_MAX_STREAMS": str(STREAMS),
                               "CONVEYOR_LIMITS_MAX_PIPELINES": str(STREAMS)})
    spec = rotate_pipeline(str(image_root / "imgs"), batch_size=2, num_threads=1,
                           prefetch_queue_depth=1)
    stop = threading.Event()
    failures: list[BaseException] = []
    with client(server) as c:
        pipes = [c.create(f"s{i}", spec) for i in range(STREAMS)]

        def consume(pipe: object) -> None:
            try:
                while not stop.is_set():
                    pipe.run()  # type: ignore[attr-defined]
            except errors.ConveyorError as exc:
                failures.append(exc)

        rss_idle = usage(server)[2]
        threads = [threading.Thread(target=consume, args=(p,), daemon=True) for p in pipes]
        for t in threads:
            t.start()
        wait_for(lambda: all(p.consumed > 0 for p in pipes), "every stream to run", 60)
        rss_streaming = usage(server)[2]
        waits = []
        with grpc.insecure_channel(server.address) as channel:
            for _ in range(100):
                started = time.perf_counter()
                assert health_status(channel, "", 5) == 1
                waits.append((time.perf_counter() - started) * 1000)
                time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join(30)
        for pipe in pipes:
            pipe.close()
    waits.sort()
    p99 = waits[98]
    print(f"\n{STREAMS} concurrent streams: health p50 {waits[49]:.1f} ms, p99 {p99:.1f} ms; "
          f"server RSS {rss_idle:.0f} MiB idle, {rss_streaming:.0f} MiB streaming")
    assert not failures, failures
    assert p99 < 100, f"health p99 {p99:.0f} ms under {STREAMS} streams"
    bound = RSS_BASE_MIB + RSS_PER_STREAM_MIB * STREAMS
    assert rss_streaming - rss_idle < bound, \
        f"RSS grew by {rss_streaming - rss_idle:.0f} MiB, over its bound {bound:.0f} MiB"
