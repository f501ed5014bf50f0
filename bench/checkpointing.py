"""Checkpoint and restore: Checkpoint RPC latency (Redis included), checkpoint size, and
restore-to-first-batch time at batch 0 vs. batch 10^6.

The pipeline is the seed notebook's (``conveyor_server.demo.run.rotate_pipeline``: batch 8,
2 threads, prefetch 2) on the benchmark data set, served by a real conveyor-server with
a private redis-server (append-only, as the server's own default) on a unix socket.

- Checkpoint RPC: ``Client.checkpoint(name, consumed)`` round trips, on an idle pipeline
  (with Redis fsyncing every write, the server's default, and with fsync every second)
  and on one whose stream is being consumed by another thread (the server's 2 cores busy
  decoding); its p99 against its floor, a gRPC round trip plus a Redis round trip (PING);
  references: a gRPC health check to the same server (the floor of any unary
  RPC here), a DescribePipeline through ``conveyor.Client`` (a Conveyor RPC with its
  client, interceptors and parsing, and no Redis call), sealing the same checkpoint in
  process (no gRPC, no Redis) and a bare Redis SET of a blob of its size. Each run makes
  ``--calls`` calls; p50 and p99 are per run, shown as the median (and spread) over the
  interleaved runs.
- Restore to first batch: ``Pipeline(spec, checkpoint=blob).run()`` in process, and the
  Restore RPC (blob sent inline) plus the first ``run()`` over gRPC, from checkpoints at
  batch 0 and at batch 10^6 (made as tests/engine/test_engine.py's ``_blob_at`` does, from the
  engine's pure state function). The time should not depend on the position. Each run's
  figure is the median of ``RESTORES_PER_RUN`` restores.

Run: python -m bench.checkpointing [--quick] [--runs N] [--calls N]
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
import redis
from grpc_health.v1 import health_pb2, health_pb2_grpc

import conveyor
from bench._shared import (
    Server,
    interleaved,
    machine,
    make_dataset,
    median,
    parse_args,
    percentile,
    ratio,
    spread,
    table,
)
from conveyor_server import Pipeline
from conveyor_server.demo.run import rotate_pipeline
from conveyor_server.engine.identity import checkpoint as ckpt

FAR = 10**6
#: Restores per run for one figure (their median): a restore is ~0.1 s, mostly listing the
#: data set, and one scheduling stall would otherwise decide the run's ratio.
RESTORES_PER_RUN = 5
Latency = tuple[float, float]  # p50, p99 in ms


def latencies(call: Callable[[], Any], count: int) -> Latency:
    out = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1e3)
    return percentile(out, 50), percentile(out, 99)


def blob_at(spec: Any, batches: int) -> bytes:
    """A checkpoint at ``batches`` from the engine's pure state function (no replay)."""
    with Pipeline(spec) as pipe:
        body = pipe.checkpoint_body(0)
        del body.op_states[:]
        body.op_states.extend(pipe.states_at(batches))
        body.batches = batches
        return ckpt.seal(body)


class Consumer:
    """Consumes a remote pipeline on a thread while started."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.batches = 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.pipe.run()
            self.batches += 1

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def extra(p: argparse.ArgumentParser) -> None:
    p.add_argument("--calls", type=int, default=None,
                   help="Checkpoint RPCs per run (default 1000, so that p99 is not one outlier; "
                        "100 with --quick)")


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra)
    data = make_dataset(args.data, args.images)
    spec = rotate_pipeline(str(data))
    calls = args.calls or (100 if args.quick else 1000)
    runs = max(args.runs, 5)
    print(f"# Checkpoint and restore ({machine()})\n# Redis: private redis-server, unix "
          f"socket, append-only; median of {runs} interleaved runs (min-max)\n")
    with Server(args.data) as server, conveyor.Client(server.address, timeout=30) as client:
        idle_pipe = client.create("ckpt-idle", spec)
        for _ in range(3):
            idle_pipe.run()
        idle_pipe.close()
        stored = client.checkpoint("ckpt-idle", consumed=3)
        blob_size = len(stored.data)
        busy = Consumer(client.create("ckpt-busy", spec))
        local = Pipeline(spec)
        local.run()
        bare_redis = redis.Redis.from_url(server.redis.url)
        payload = bytes(blob_size)
        channel = grpc.insecure_channel(server.address)
        health = health_pb2_grpc.HealthStub(channel)
        health_request = health_pb2.HealthCheckRequest(service="")

        def streaming() -> Latency:
            busy.start()
            time.sleep(0.3)  # the stream is running and the server busy
            try:
                return latencies(lambda: client.checkpoint("ckpt-busy",
                                                            consumed=busy.pipe.consumed), calls)
            finally:
                busy.stop()

        def without_fsync() -> Latency:
            bare_redis.config_set("appendfsync", "everysec")
            try:
                return latencies(lambda: client.checkpoint("ckpt-idle", consumed=3), calls)
            finally:
                bare_redis.config_set("appendfsync", "always")

        lat = interleaved({
            "Checkpoint RPC, idle pipeline": lambda: latencies(
                lambda: client.checkpoint("ckpt-idle", consumed=3), calls),
            "Checkpoint RPC, idle, fsync every second": without_fsync,
            "Checkpoint RPC, while streaming": streaming,
            "ref: gRPC health check, same server": lambda: latencies(
                lambda: health.Check(health_request, timeout=30), calls),
            "ref: DescribePipeline, conveyor.Client": lambda: latencies(
                lambda: client.pipeline("ckpt-idle"), calls),
            "ref: in-process seal, no Redis": lambda: latencies(local.checkpoint, calls),
            "ref: bare Redis SET of that size": lambda: latencies(
                lambda: bare_redis.set("bench-blob", payload), calls),
            "ref: Redis PING": lambda: latencies(bare_redis.ping, calls),
        }, runs)
        busy.pipe.close()
        local.close()
        bare_redis.close()
        channel.close()
        table([(name, f"{median([p for p, _ in v]):.2f}", spread([p for p, _ in v], "{:.2f}"),
                f"{median([q for _, q in v]):.2f}", spread([q for _, q in v], "{:.2f}"))
               for name, v in lat.items()],
              ("latency (ms)", "p50", "spread", "p99", "spread"))
        print(f"{calls} calls per run; the streamed pipeline moved {busy.batches} batches "
              "while measured")
        # The floor of a Checkpoint: one gRPC round trip plus one Redis round trip; with
        # every write fsynced, a Redis round trip that writes includes the fsync, so the
        # durable mode is also shown against a fsynced SET of the blob's size.
        def floor(redis_ref: str) -> list[float]:
            return [h[1] + r[1] for h, r in zip(lat["ref: gRPC health check, same server"],
                                                lat[redis_ref], strict=True)]

        def p99s(name: str) -> list[float]:
            return [q for _, q in lat[name]]

        table([("fsync always, floor with PING",
                ratio(p99s("Checkpoint RPC, idle pipeline"), floor("ref: Redis PING"))),
               ("fsync always, floor with a fsynced SET",
                ratio(p99s("Checkpoint RPC, idle pipeline"),
                      floor("ref: bare Redis SET of that size"))),
               ("fsync every second, floor with PING",
                ratio(p99s("Checkpoint RPC, idle, fsync every second"),
                      floor("ref: Redis PING"))),
               # The same with the round trip of a Conveyor RPC that needs no Redis (the
               # client, the interceptors and the request parsing included).
               ("fsync every second, Describe + PING",
                ratio(p99s("Checkpoint RPC, idle, fsync every second"),
                      [d[1] + r[1] for d, r in zip(
                          lat["ref: DescribePipeline, conveyor.Client"],
                          lat["ref: Redis PING"], strict=True)]))],
              ("Checkpoint p99 / (gRPC p99 + Redis p99), target <= 1.1", "ratio (spread)"))
        print(f"seed pipeline checkpoint: {blob_size} bytes (sealed blob, spec included)\n")

        blobs = {0: blob_at(spec, 0), FAR: blob_at(spec, FAR)}
        construct: dict[int, list[float]] = {0: [], FAR: []}

        def in_process(at: int) -> Callable[[], float]:
            def once() -> float:
                start = time.perf_counter()
                with Pipeline(spec, checkpoint=blobs[at]) as restored:
                    construct[at].append((time.perf_counter() - start) * 1e3)
                    restored.run()
                    return (time.perf_counter() - start) * 1e3
            return lambda: median([once() for _ in range(RESTORES_PER_RUN)])

        counter = itertools.count()

        def remote(at: int) -> Callable[[], float]:
            def once() -> float:
                name = f"restore-{at}-{next(counter)}"
                start = time.perf_counter()
                restored = client.restore(name, checkpoint=blobs[at])
                restored.run()
                elapsed = (time.perf_counter() - start) * 1e3
                restored.close()
                client.delete(name)
                return elapsed
            return lambda: median([once() for _ in range(RESTORES_PER_RUN)])

        results = interleaved({"in-process, batch 0": in_process(0),
                               "in-process, batch 10^6": in_process(FAR),
                               "Restore RPC + run(), batch 0": remote(0),
                               "Restore RPC + run(), batch 10^6": remote(FAR)}, runs)
        table([(k, f"{median(v):.1f}", spread(v, "{:.1f}")) for k, v in results.items()],
              ("restore to first batch", "ms", "spread"))
        print(f"each run's figure: the median of {RESTORES_PER_RUN} restores")
        print(f"of which Pipeline(spec, checkpoint=blob) itself (plan, file list, checks): "
              f"{median(construct[0]):.1f} ms at 0, {median(construct[FAR]):.1f} ms at 10^6\n")
        table([("in-process", ratio(results["in-process, batch 10^6"],
                                    results["in-process, batch 0"])),
               ("Restore RPC + run()", ratio(results["Restore RPC + run(), batch 10^6"],
                                             results["Restore RPC + run(), batch 0"]))],
              ("restore at 10^6 / at 0", "ratio"))


if __name__ == "__main__":
    main()
