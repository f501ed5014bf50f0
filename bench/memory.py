"""Server memory: RSS of a conveyor-server with 1, 4 and 8 pipelines, idle and active,
for the seed notebook's pipeline at two batch sizes.

Each run starts a fresh server (with its private Redis, whose memory is not counted) per
batch size and reads the server process's VmRSS (``/proc/PID/status``) one second after
each step: empty; then with 1, 4 and 8 idle pipelines (created, never streamed); then with
1, 4 and 8 of them active (each streamed by its own client stream, which consumed one
batch and stays open, so the engine's prefetch, the batch being sent, the frame being
encoded and gRPC's buffers are resident). The per-pipeline increment is the slope of a
least-squares line through those points. The active increment at the two batch sizes
splits into a part that grows with the batch (its multiple of batch bytes, compared with
prefetch depth + 2) and a fixed part per active pipeline (threads, buffers, allocator
arenas). The pipeline is the seed notebook's (``conveyor_server.demo.run.rotate_pipeline``:
prefetch 2, rotated images unresized), at batch 8 and 24.

Run: python -m bench.memory [--quick] [--runs N]
"""

from __future__ import annotations

import time
from typing import Any

import conveyor
from bench._shared import (
    Server,
    linear_fit,
    machine,
    make_dataset,
    median,
    parse_args,
    spread,
    table,
)
from conveyor_server.demo.run import rotate_pipeline

MiB = 1 << 20
COUNTS = (1, 4, 8)
BATCHES = (8, 24)


def settle(server: Server) -> int:
    time.sleep(1.0)
    return server.rss_bytes()


def one_run(data: Any, spec: Any) -> dict[str, Any]:
    """RSS by step of one fresh server, and the largest batch's bytes."""
    with Server(data.parent) as server, conveyor.Client(server.address, timeout=60) as client:
        empty = settle(server)
        pipes: list[Any] = []
        idle = {0: empty}
        for count in COUNTS:
            while len(pipes) < count:
                pipes.append(client.create(f"mem-{len(pipes)}", spec))
            idle[count] = settle(server)
        active = {0: idle[COUNTS[-1]]}
        batch_bytes = 0
        streamed = 0
        for count in COUNTS:
            for pipe in pipes[streamed:count]:
                batch = pipe.run()
                batch_bytes = max(batch_bytes, sum(s.nbytes for out in batch for s in out))
            streamed = count
            active[count] = settle(server)
        for pipe in pipes:
            pipe.close()
    return {"empty": empty, "idle": idle, "active": active, "batch_bytes": batch_bytes}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    data = make_dataset(args.data, args.images)
    specs = {b: rotate_pipeline(str(data), batch_size=b) for b in BATCHES}
    depth = specs[BATCHES[0]].prefetch_queue_depth
    print(f"# Server memory ({machine()})\n# VmRSS of the server process in MiB, median of "
          f"{args.runs} runs (min-max), a fresh server each run and batch size\n")
    runs: dict[int, list[dict[str, Any]]] = {b: [] for b in BATCHES}
    for _ in range(args.runs):
        for b in BATCHES:  # interleaved
            runs[b].append(one_run(data, specs[b]))

    def col(values: list[float]) -> tuple[str, str]:
        return f"{median(values) / MiB:.1f}", spread([v / MiB for v in values], "{:.1f}")

    slopes: dict[int, dict[str, list[float]]] = {}
    batch_bytes: dict[int, int] = {}
    for b in BATCHES:
        rows = [("empty server", *col([r["empty"] for r in runs[b]]))]
        for state in ("idle", "active"):
            for count in COUNTS:
                label = f"{count} idle" if state == "idle" else f"{count} of {COUNTS[-1]} active"
                rows.append((label, *col([r[state][count] for r in runs[b]])))
        print(f"batch {b}:")
        table(rows, ("pipelines", "RSS MiB", "spread"))
        xs = [0, *COUNTS]
        slopes[b] = {state: [linear_fit(xs, [r[state][x] for x in xs])[0] for r in runs[b]]
                     for state in ("idle", "active")}
        batch_bytes[b] = max(r["batch_bytes"] for r in runs[b])
    # Per active pipeline = fixed + multiple x batch bytes, from the two batch sizes (per run).
    small, large = BATCHES
    multiples, fixed = [], []
    for s_small, s_large in zip(slopes[small]["active"], slopes[large]["active"], strict=True):
        multiple = (s_large - s_small) / (batch_bytes[large] - batch_bytes[small])
        multiples.append(multiple)
        fixed.append(s_small - multiple * batch_bytes[small])
    rows = [("fixed overhead (empty server)",
             *col([r["empty"] for b in BATCHES for r in runs[b]]))]
    for b in BATCHES:
        rows.append((f"batch {b} ({batch_bytes[b] / MiB:.2f} MiB): per idle pipeline",
                     *col(slopes[b]["idle"])))
        rows.append((f"batch {b}: per active pipeline, over idle", *col(slopes[b]["active"])))
    rows.append(("per active pipeline, fixed part", *col(fixed)))
    table(rows, ("memory", "MiB", "spread"))
    print(f"per active pipeline = fixed part + {median(multiples):.2f} x batch bytes "
          f"(runs: {', '.join(f'{m:.2f}' for m in multiples)}); the bound is (prefetch "
          f"{depth} + 2) = {depth + 2} x batch bytes")


if __name__ == "__main__":
    main()
