"""The host work of planning a GPU batch: the batched planners of resize,
crop_mirror_normalize and random_resized_crop against the per-sample planners they replace
(``tests/support/reference_planners.py``), which give the same plans (checked here on every
batch timed, and in ``tests/engine/test_cuda_planners.py``).

Batches of 256 images (the planners read only shapes and types: no pixels, no GPU), a new
batch each time, their sizes from 200-800 pixels a side in two ways: "64 sizes", each
sample one of 64 sizes drawn once (a data set of few distinct sizes: the filters the
planners keep are found), and "every size", each sample's drawn anew (the filters of a
resize to 256 pixels on the shorter side are mostly computed afresh). Two pipelines' GPU
operators, as ResNet-50 evaluation and training plan them:

- evaluation: resize (resize_shorter=256, linear, antialiased) planned, then
  crop_mirror_normalize (224x224 crop, a mirror per sample, float16 CHW) on its outputs;
- training: random_resized_crop (224x224, DALI's window arguments), fresh sample indices.

Each run plans its batches once with each contender, alternating, in thread CPU time;
figures are microseconds of host CPU per sample. The filters are kept as a running
pipeline keeps them (the batched planners per operator, the per-sample ones in
``resize_filters``' caches, shared by both); with "every size", those caches are emptied
before each run, which would otherwise find the filters the other contender has just
computed for the same batches.

Run: python -m bench.gpu_planning [--quick] [--runs N]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from bench._shared import interleaved, machine, median, parse_args, ratio, spread, table
from conveyor_server.engine import catalog
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.cuda.ops import PLANNERS, Planner
from conveyor_server.engine.ops.geometry import resize
from conveyor_server.engine.ops.geometry.resize_filters import (
    area_filter,
    linear_filter,
    nearest_filter,
)
from conveyor_server.engine.ops.registry import SAMPLE_INDEX, OpContext
from tests.support.op_helpers import op_context
from tests.support.reference_planners import REFERENCE

BATCH = 256
MEAN, STD = [124.0, 117.0, 104.0], [58.0, 57.0, 57.0]


def image(shape: tuple[int, ...]) -> np.ndarray:
    """An array of this shape (uint8): all a planner reads."""
    return np.broadcast_to(np.zeros((1, 1, shape[2]), dtype=np.uint8), shape)


def contexts() -> dict[str, OpContext]:
    catalog.load()
    return {
        "resize": op_context("resize", resize_shorter=256.0, interp_type="linear"),
        "crop_mirror_normalize": op_context(
            "crop_mirror_normalize", tensor_args=("mirror",), crop=(224, 224), mean=MEAN,
            std=STD, dtype="float16"),
        "random_resized_crop": replace(op_context("random_resized_crop", size=(224, 224)),
                                       seed=42),
    }


Batch = tuple[list[np.ndarray], list[Targs]]


def batches(rng: np.random.Generator, count: int, pool: np.ndarray | None,
            first: int) -> list[Batch]:
    """``count`` batches, sample indices from ``first``, their sizes drawn from ``pool``
    ((k, 2) sizes; None: each drawn anew)."""
    out = []
    for b in range(count):
        sizes = rng.integers(200, 801, (BATCH, 2)) if pool is None else \
            pool[rng.integers(0, len(pool), BATCH)]
        images = [image((int(h), int(w), 3)) for h, w in sizes]
        targs: list[Targs] = [{"mirror": np.array(i % 2, dtype=np.int32),
                               SAMPLE_INDEX: np.array(first + b * BATCH + i, dtype=np.uint64)}
                              for i in range(BATCH)]
        out.append((images, targs))
    return out


def same(a: Any, b: Any) -> bool:
    return a.out_shapes == b.out_shapes and all(
        x.dtype == y.dtype and np.array_equal(x, y)
        for x, y in zip(a.packed.arrays, b.packed.arrays, strict=True))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    count = 8 if args.quick else 32
    print(f"# GPU planning on the host ({machine()})\n# {count} batches of {BATCH} per run, "
          f"new ones each run; median of {args.runs} interleaved runs (min-max), us of CPU "
          "per sample\n")
    rows: list[tuple[str, ...]] = []
    rng = np.random.default_rng(0)
    for sizes, pool in (("64 sizes", rng.integers(200, 801, (64, 2))), ("every size", None)):
        # One set of batches per run (and one to warm up on): no run plans a batch twice.
        work = [batches(rng, count, pool, r * count * BATCH) for r in range(args.runs + 1)]
        rows += measure(args, sizes, work, pool is None)
    table(rows, ("operators", "sizes", "per sample", "spread", "batched", "spread",
                 "batched / per sample"))


def turns(run: Callable[[int], float], fresh: bool) -> Callable[[], float]:
    """``run`` of run 1's batches, then run 2's, ...; ``fresh``: with ``resize_filters``'
    caches emptied first (the other contender has just computed the same filters)."""
    done = [0]

    def one() -> float:
        done[0] += 1
        if fresh:
            for cached in (nearest_filter, linear_filter, area_filter):
                cached.cache_clear()
        return run(done[0])
    return one


def measure(args: Any, sizes: str, work: list[list[Batch]],
            pool_free: bool) -> list[tuple[str, ...]]:
    ctxs = contexts()
    made: dict[str, dict[str, Planner]] = {
        "per sample": {op: REFERENCE[op](ctx) for op, ctx in ctxs.items()},
        "batched": {op: PLANNERS[op].make(ctx) for op, ctx in ctxs.items()},
    }
    # crop_mirror_normalize plans resize's outputs: their shapes (resize's own sizes).
    sized = resize.resize_args(ctxs["resize"])
    resized = [[[image((*sized.output_size(im.shape[:2], t), 3))
                 for im, t in zip(images, targs, strict=True)] for images, targs in run]
               for run in work]
    for (images, targs), outs in zip(work[0][:2], resized[0], strict=False):
        for op in ctxs:  # the same plans, or the comparison means nothing
            batch = outs if op == "crop_mirror_normalize" else images
            assert same(made["per sample"][op](batch, targs), made["batched"][op](batch, targs))

    def evaluation(planners: dict[str, Planner]) -> Callable[[int], float]:
        def run(r: int) -> float:
            start = time.thread_time()
            for (images, targs), outs in zip(work[r], resized[r], strict=True):
                planners["resize"](images, targs)
                planners["crop_mirror_normalize"](outs, targs)
            return (time.thread_time() - start) / (len(work[r]) * BATCH) * 1e6
        return run

    def training(planners: dict[str, Planner]) -> Callable[[int], float]:
        def run(r: int) -> float:
            start = time.thread_time()
            for images, targs in work[r]:
                planners["random_resized_crop"](images, targs)
            return (time.thread_time() - start) / (len(work[r]) * BATCH) * 1e6
        return run

    rows: list[tuple[str, ...]] = []
    for name, pipeline in (("resize + crop_mirror_normalize", evaluation),
                           ("random_resized_crop", training)):
        for planners in made.values():  # warm, on batches of their own
            pipeline(planners)(0)
        results = interleaved({k: turns(pipeline(v), fresh=pool_free)
                               for k, v in made.items()}, args.runs)
        before, after = results["per sample"], results["batched"]
        rows.append((name, sizes, f"{median(before):.1f}", spread(before, "{:.1f}"),
                     f"{median(after):.1f}", spread(after, "{:.1f}"), ratio(after, before)))
    return rows


if __name__ == "__main__":
    main()
