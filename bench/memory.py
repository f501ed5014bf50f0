"""Server memory: RSS of a conveyor-server with 1, 8 and 32 pipelines, idle and active.

Idle: created, never streamed. Active: each streamed once (one batch consumed, so its
prefetch and the batch being sent are resident). The per-pipeline increment of active
pipelines is compared with (prefetch depth + 2) x batch bytes.

Run: python -m bench.memory [--quick]
"""

from __future__ import annotations

import time

import conveyor
from bench._shared import Server, machine, make_dataset, parse_args, table
from conveyor_server.demo import rotate_pipeline

MiB = 1 << 20


def settle(server: Server) -> int:
    time.sleep(1.0)
    return server.rss_bytes()


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    data = make_dataset(args.data, 256 if args.quick else 2000)
    counts = (1, 4) if args.quick else (1, 8, 32)
    print(f"# Server memory ({machine()})\n")
    rows = []
    batch_bytes = 0
    depth = 0
    base_rss = 0
    per_active: list[float] = []
    for count in counts:
        with Server(data.parent) as server, conveyor.Client(server.address, timeout=60) as c:
            base_rss = settle(server)
            specs = [rotate_pipeline(str(data)) for _ in range(count)]
            pipes = [c.create(f"mem-{i}", spec) for i, spec in enumerate(specs)]
            idle = settle(server)
            for pipe in pipes:
                batch = pipe.run()
                batch_bytes = max(batch_bytes, sum(s.nbytes for out in batch for s in out))
            depth = specs[0].prefetch_queue_depth
            active = settle(server)
            for pipe in pipes:
                pipe.close()
            per_pipe = (active - base_rss) / count
            per_active.append(per_pipe)
            rows.append((count, f"{base_rss / MiB:.0f}", f"{idle / MiB:.0f}",
                         f"{active / MiB:.0f}", f"{(idle - base_rss) / count / MiB:.2f}",
                         f"{per_pipe / MiB:.2f}"))
    table(rows, ("pipelines", "empty MiB", "idle MiB", "active MiB", "per idle MiB",
                 "per active MiB"))
    bound = (depth + 2) * batch_bytes
    print(f"batch bytes (seed pipeline, batch 8): {batch_bytes / MiB:.2f} MiB; "
          f"(prefetch depth {depth} + 2) x batch = {bound / MiB:.2f} MiB per active pipeline")
    print(f"measured per active pipeline (largest count): {per_active[-1] / MiB:.2f} MiB = "
          f"{per_active[-1] / bound:.2f} x the bound, over a fixed overhead of "
          f"{base_rss / MiB:.0f} MiB (the empty server)")


if __name__ == "__main__":
    main()
