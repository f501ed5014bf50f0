"""Checkpoint and restore: Checkpoint RPC latency (Redis included), checkpoint size, and
restore-to-first-batch time at batch 0 vs. batch 10^6.

Run: python -m bench.checkpointing [--quick]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import conveyor
from bench._shared import (
    Server,
    interleaved,
    machine,
    make_dataset,
    median,
    parse_args,
    percentile,
    spread,
    table,
)
from conveyor_server import Pipeline
from conveyor_server import checkpoint as ckpt
from conveyor_server.demo import rotate_pipeline

FAR = 10**6


def latencies(call: Callable[[], Any], count: int) -> list[float]:
    out = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def blob_at(spec: Any, batches: int) -> bytes:
    """A checkpoint at ``batches`` from the engine's pure state function (no replay)."""
    with Pipeline(spec) as pipe:
        body = pipe.checkpoint_body(0)
        del body.op_states[:]
        body.op_states.extend(pipe.states_at(batches))
        body.batches = batches
        return ckpt.seal(body)


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    data = make_dataset(args.data, 256 if args.quick else 2000)
    spec = rotate_pipeline(str(data))
    calls = 200 if args.quick else 1000
    print(f"# Checkpoint and restore ({machine()}); Redis on loopback (unix socket)\n")
    with Server(data.parent) as server, conveyor.Client(server.address, timeout=30) as client:
        pipe = client.create("ckpt-bench", spec)
        for _ in range(3):
            pipe.run()
        size = len(pipe.checkpoint().data)
        idle = latencies(lambda: client.checkpoint("ckpt-bench", consumed=3), calls)

        busy_pipe = client.create("ckpt-busy", spec)
        stop = threading.Event()

        def consume() -> None:
            while not stop.is_set():
                busy_pipe.run()
        consumer = threading.Thread(target=consume)
        consumer.start()
        time.sleep(0.5)
        busy = latencies(lambda: client.checkpoint("ckpt-busy", consumed=busy_pipe.consumed),
                         calls // 4)
        stop.set()
        consumer.join()
        busy_pipe.close()

        rows = [("idle pipeline", f"{percentile(idle, 50):.2f}", f"{percentile(idle, 99):.2f}",
                 len(idle)),
                ("while streaming", f"{percentile(busy, 50):.2f}", f"{percentile(busy, 99):.2f}",
                 len(busy))]
        table(rows, ("Checkpoint RPC", "p50 ms", "p99 ms", "calls"))
        print(f"seed pipeline checkpoint: {size} bytes\n")

        blobs = {0: blob_at(spec, 0), FAR: blob_at(spec, FAR)}

        def local(at: int) -> Callable[[], float]:
            def run() -> float:
                start = time.perf_counter()
                with Pipeline(spec, checkpoint=blobs[at]) as restored:
                    restored.run()
                    return (time.perf_counter() - start) * 1e3
            return run

        counter = iter(range(10**9))

        def remote(at: int) -> Callable[[], float]:
            def run() -> float:
                name = f"restore-{at}-{next(counter)}"
                start = time.perf_counter()
                restored = client.restore(name, checkpoint=blobs[at])
                restored.run()
                elapsed = (time.perf_counter() - start) * 1e3
                restored.close()
                client.delete(name)
                return elapsed
            return run

        runs = max(args.runs, 5)
        results = interleaved({"in-process, batch 0": local(0),
                               "in-process, batch 10^6": local(FAR),
                               "Restore RPC, batch 0": remote(0),
                               "Restore RPC, batch 10^6": remote(FAR)}, runs)
        table([(k, f"{median(v):.1f}", spread(v, "{:.1f}")) for k, v in results.items()],
              ("restore to first batch", "ms", "spread"))
        ratio_local = median(results["in-process, batch 10^6"]) / \
            median(results["in-process, batch 0"])
        ratio_remote = median(results["Restore RPC, batch 10^6"]) / \
            median(results["Restore RPC, batch 0"])
        table([("in-process", f"{ratio_local:.2f}"), ("Restore RPC", f"{ratio_remote:.2f}")],
              ("restore at 10^6 / at 0", "ratio"))


if __name__ == "__main__":
    main()
