"""Several engine processes on one GPU: the lever after the host path is batched.

A server's host work for a batch runs under one interpreter lock, so one process can keep a
GPU only as busy as its Python lets it. Every batch is a pure function of its index, so k
servers on the same machine, each its own process, can each compute every k-th batch of
one pipeline and a trainer reads them in order, the same bytes (the fan-in,
``Client.open(..., workers=k)``). This measures that: the ResNet-50 training pipeline of
``bench.gpu`` on "mixed" and "gpu", read by one trainer from 1, 2 and 4 servers on this
machine sharing its GPU (each server with its default worker threads), images/s over the
stream, with the first batches' bytes compared with 1 server's.

On a machine without a GPU it says so and exits with 2; ``--device cpu`` runs the same on
the CPU (each server then decodes and resizes on the CPU).

Run: python -m bench.gpu_processes [--quick] [--runs N] [--batch N] [--servers 1,2,4]
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench._shared import interleaved, machine, make_dataset, median, parse_args, spread, table
from bench.fleet import client, rate
from bench.gpu import resnet50
from conveyor.transport.channel import wait_serving
from conveyor_server.demo.launch import spawn_server, stop_server
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.store.redis_process import RedisProcess


def _digest(addresses: list[str], spec: Any, workers: int, batches: int) -> str:
    """The SHA-256 of the first ``batches`` batches a trainer reads through ``workers``."""
    digest = hashlib.sha256()
    with client(*addresses) as c:
        pipe = c.open(f"digest-{workers}", spec, workers=workers)
        for _ in range(batches):
            for output in pipe.run():
                for sample in output:
                    digest.update(sample.tobytes())
        pipe.close()
        c.delete(pipe.name)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    def extra(p: argparse.ArgumentParser) -> None:
        p.add_argument("--batch", type=int, default=256, help="batch size (default 256)")
        p.add_argument("--servers", default="1,2,4", help="server counts (default 1,2,4)")
        p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")

    args = parse_args(__doc__ or "", extra, argv)
    if args.device == "gpu" and cuda_device_count() == 0:
        print("bench.gpu_processes: this machine has no CUDA GPU: nothing was measured",
              file=sys.stderr)
        return 2
    counts = [int(k) for k in args.servers.split(",")]
    print(machine())
    data = make_dataset(args.data, args.images)
    spec = resnet50(str(data), args.batch, args.device)
    # Each server holds its prefetched batches when the clock starts (k x prefetch depth):
    # enough batches timed keep that share small.
    batches = 32 if args.quick else 96
    redis = RedisProcess(appendonly=False).start()
    servers = []
    try:
        with tempfile.TemporaryDirectory() as logs:
            for n in range(max(counts)):
                log = (Path(logs) / f"server-{n}.log").open("w")
                proc, address = spawn_server(
                    ["--host", "127.0.0.1", "--port", "0", "--redis-url", redis.url,
                     "--data-root", str(args.data), "--log-level", "WARNING"], stderr=log)
                wait_serving(address)
                servers.append((proc, address))
            addresses = [a for _, a in servers]
            digests = {k: _digest(addresses[:k], spec, k, 3) for k in counts}
            def through(k: int) -> Callable[[], float]:
                return lambda: rate(addresses[:k], spec, k, batches, args.batch)[0]

            runs = interleaved({f"{k} server{'s' * (k > 1)}": through(k) for k in counts},
                               args.runs)
    finally:
        for proc, _ in servers:
            stop_server(proc, 10)
        redis.cleanup()
    one = median(runs[next(iter(runs))])
    rows = [(name, f"{median(r):,.0f}", spread(r, "{:,.0f}"), f"{median(r) / one:.2f}")
            for name, r in runs.items()]
    table(rows, (f"ResNet-50 on {args.device}, one trainer", "images/s", "spread",
                 "x 1 server"))
    same = len(set(digests.values())) == 1
    print(f"first 3 batches: {'the same bytes' if same else 'DIFFERENT bytes'} through "
          f"{', '.join(str(k) for k in counts)} servers")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
