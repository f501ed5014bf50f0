"""Where a batch's host time goes: every thread of the process sampled while a pipeline runs.

A sampler thread reads every other thread's Python stack (``sys._current_frames``) every
``--interval`` ms while ``Pipeline.run`` computes ``--batches`` batches of the ResNet-50
training pipeline (``bench.gpu``'s, on "mixed" and "gpu", or with ``--device cpu``
on the CPU). A sample of a thread waiting (a lock, a condition, a queue, a future) counts
as idle. It reports, per batch, the milliseconds of busy samples:

- inclusive, for each engine function met on a busy stack (``conveyor_server``), so the
  stages show: reading files, preparing and calling the decoder, planning, launching,
  copying out;
- by leaf, the frame the thread was in (time inside a C call such as nvImageCodec's decode
  shows under the Python function that made it).

Threads run in parallel, so the busy milliseconds of a batch can exceed its wall time: the
busy total over the wall time is the host cores the engine keeps busy. Sampling costs a
little: compare the images/s it prints with ``bench.gpu``'s.

Run: python -m bench.gpu_profile --data DIR [--batch 256] [--batches 20] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench.gpu import resnet50
from conveyor_server import Pipeline

#: Leaf functions in which a thread is waiting, not working.
IDLE = frozenset({"wait", "acquire", "_wait_for_tstate_lock", "get", "select", "poll",
                  "result", "sleep", "_worker", "join", "epoll", "recv_into", "accept"})
ENGINE = "conveyor_server"


def _name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    where = path[path.rfind(ENGINE):] if ENGINE in path else path.rsplit("/", 1)[-1]
    return f"{where}:{code.co_qualname}"


class Sampler:
    """Samples every thread but its own until stopped."""

    def __init__(self, interval_s: float) -> None:
        self._interval = interval_s
        self._stop = threading.Event()
        self.inclusive: collections.Counter[str] = collections.Counter()
        self.leaf: collections.Counter[str] = collections.Counter()
        self.busy = 0
        self.idle = 0
        self.ticks = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self._interval):
            self.ticks += 1
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                if frame.f_code.co_name in IDLE:
                    self.idle += 1
                    continue
                self.busy += 1
                self.leaf[_name(frame)] += 1
                seen = set()
                f: FrameType | None = frame
                while f is not None:
                    if ENGINE in f.f_code.co_filename:
                        name = _name(f)
                        if name not in seen:
                            seen.add(name)
                            self.inclusive[name] += 1
                    f = f.f_back


def profile(root: str, batch: int, batches: int, device: str, interval_s: float,
            top: int) -> dict[str, Any]:
    spec = resnet50(root, batch, device)
    pipe = Pipeline(spec)
    try:
        for _ in range(3):  # warm up: compile kernels, make handles, fill caches
            pipe.run()
        with Sampler(interval_s) as sampler:
            start = time.perf_counter()
            for _ in range(batches):
                pipe.run()
            wall = time.perf_counter() - start
    finally:
        pipe.close()
    per_batch = interval_s * 1000 / batches

    def rows(counter: collections.Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(n * per_batch, 2)) for name, n in counter.most_common(top)]

    return {"device": device, "batch": batch, "batches": batches,
            "images_per_s": round(batches * batch / wall),
            "wall_ms_per_batch": round(wall * 1000 / batches, 2),
            "busy_ms_per_batch": round(sampler.busy * per_batch, 2),
            "idle_ms_per_batch": round(sampler.idle * per_batch, 2),
            "host_cores_busy": round(sampler.busy * interval_s / wall, 2),
            "inclusive_ms_per_batch": rows(sampler.inclusive),
            "leaf_ms_per_batch": rows(sampler.leaf)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--data", type=Path, required=True, help="a folder of class folders of JPEGs")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    p.add_argument("--interval", type=float, default=1.0, help="ms between samples")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    found = profile(str(args.data), args.batch, args.batches, args.device,
                    args.interval / 1000, args.top)
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    print(f"ResNet-50 on {found['device']}, batches of {found['batch']}: "
          f"{found['images_per_s']:,} images/s, {found['wall_ms_per_batch']} ms a batch, "
          f"host busy {found['busy_ms_per_batch']} ms a batch "
          f"({found['host_cores_busy']} cores)")
    for title in ("inclusive_ms_per_batch", "leaf_ms_per_batch"):
        print(f"\n{title.replace('_', ' ')}:")
        for name, ms in found[title][:args.top]:
            print(f"  {ms:9.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
