"""The start-up behaviour probe: what measuring every operator on the canonical probes
costs a starting server (target: under 1 s), against the same start without it.

Each run starts a fresh Python process (cold caches, as a server starting) that imports
the engine and either measures its behaviour or not; both report their wall time, the
first also the probe's own time. The reference environment (no optional SIMD, no IPP:
the slowest paths) is measured too. Contenders are interleaved.

Run: python -m bench.behaviour_probe [--quick] [--runs N]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench._shared import interleaved, machine, median, parse_args, ratio, spread, table
from conveyor_server.engine.identity.behaviour.reference import reference_environment

_CHILD = """
import json, time
t0 = time.perf_counter()
import conveyor_server.engine.pipeline  # the engine, as the server imports it
from conveyor_server.engine.identity.behaviour.measure import measure
probe = measure().seconds if {probe} else 0.0
print(json.dumps({{"probe": probe, "total": time.perf_counter() - t0}}))
"""


def start(probe: bool, env: dict[str, str] | None = None) -> dict[str, float]:
    began = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD.format(probe=probe)], check=True,
                         capture_output=True, text=True, env={**os.environ, **(env or {})})
    result: dict[str, float] = json.loads(out.stdout)
    result["process"] = time.perf_counter() - began
    return result


def main() -> None:
    args = parse_args(__doc__ or "")
    runs = max(args.runs, 3) * 2
    print(f"machine: {machine()}; {runs} interleaved runs of each\n")
    reference = reference_environment()
    results = interleaved({
        "without": lambda: start(False),
        "with": lambda: start(True),
        "reference": lambda: start(True, reference),
    }, runs)
    rows = []
    for name, label in (("with", "probe, this machine's paths"),
                        ("reference", "probe, reference environment")):
        probe = [r["probe"] * 1000 for r in results[name]]
        rows.append([label, f"{median(probe):.0f}", spread(probe)])
    table(rows, ["measurement", "probe ms (median)", "spread"])
    with_start = [r["process"] for r in results["with"]]
    without = [r["process"] for r in results["without"]]
    table([["engine start with / without the probe", ratio(with_start, without),
            f"{median(with_start) * 1000:.0f} / {median(without) * 1000:.0f} ms"]],
          ["measurement", "ratio (spread)", "median with / without"])


if __name__ == "__main__":
    main()
