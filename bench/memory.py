"""Server memory: RSS of a conveyor-server with 1, 8 and 32 pipelines, idle and active.

Each run starts a fresh server (with its private Redis, whose memory is not counted) and
reads the server process's VmRSS (``/proc/PID/status``) one second after each step:
empty; then with 1, 8 and 32 idle pipelines (created, never streamed); then with 1, 8
and 32 of them active (each streamed by its own client stream, which consumed one batch
and stays open, so the engine's prefetch, the pump's encoded batch and gRPC's buffers are
resident). The per-pipeline increment is the slope of a least-squares line through those
points; the fixed overhead is the empty server. The active increment is compared with
(prefetch depth + 2) x batch bytes. The pipeline is the seed notebook's
(``conveyor_server.demo.rotate_pipeline``: batch 8, prefetch 2, rotated images unresized).

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
from conveyor_server.demo import rotate_pipeline

MiB = 1 << 20
COUNTS = (1, 8, 32)


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
    spec = rotate_pipeline(str(data))
    depth = spec.prefetch_queue_depth
    print(f"# Server memory ({machine()})\n# VmRSS of the server process in MiB, median of "
          f"{args.runs} runs (min-max), a fresh server each run\n")
    runs = [one_run(data, spec) for _ in range(args.runs)]

    def col(values: list[float]) -> tuple[str, str]:
        return f"{median(values) / MiB:.1f}", spread([v / MiB for v in values], "{:.1f}")

    rows = [("empty server", *col([r["empty"] for r in runs]))]
    for state in ("idle", "active"):
        for count in COUNTS:
            label = f"{count} idle" if state == "idle" else f"{count} of {COUNTS[-1]} active"
            rows.append((label, *col([r[state][count] for r in runs])))
    table(rows, ("pipelines", "RSS MiB", "spread"))

    idle_slopes, active_slopes = [], []
    for r in runs:
        xs = [0, *COUNTS]
        idle_slopes.append(linear_fit(xs, [r["idle"][x] for x in xs])[0])
        active_slopes.append(linear_fit(xs, [r["active"][x] for x in xs])[0])
    batch_bytes = max(r["batch_bytes"] for r in runs)
    bound = (depth + 2) * batch_bytes
    table([("fixed overhead (empty server)", *col([r["empty"] for r in runs])),
           ("per idle pipeline", *col(idle_slopes)),
           ("per active pipeline, over idle", *col(active_slopes)),
           (f"(prefetch {depth} + 2) x batch bytes", f"{bound / MiB:.1f}", "")],
          ("memory", "MiB", "spread"))
    print(f"batch bytes: {batch_bytes / MiB:.2f} MiB (largest batch consumed); per active "
          f"pipeline = {median(active_slopes) / bound:.2f} x (prefetch + 2) x batch bytes")


if __name__ == "__main__":
    main()
