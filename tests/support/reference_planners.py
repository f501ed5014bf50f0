"""The GPU planners of resize, random_resized_crop and crop_mirror_normalize as they were
written first, sample by sample in Python: the reference that the batched planners
(``engine/ops/cuda/planners.py``, numpy over the batch) are tested against, array for
array (``tests/engine/test_cuda_planners.py``). Each takes the operator's context and
gives the same kind of planner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from conveyor.errors import ConveyorError
from conveyor_server.engine.ops.args import Targs, check_image
from conveyor_server.engine.ops.cuda import plans, sources
from conveyor_server.engine.ops.cuda.batch_checks import check_types as _types
from conveyor_server.engine.ops.cuda.batch_checks import one_dtype as _one_dtype
from conveyor_server.engine.ops.cuda.ops import Planner
from conveyor_server.engine.ops.cuda.resize_planners import check_interp as _check_interp
from conveyor_server.engine.ops.geometry import random_resized_crop, resize
from conveyor_server.engine.ops.geometry.resize_filters import resize_plan
from conveyor_server.engine.ops.normalize import normalize
from conveyor_server.engine.ops.registry import OpContext, SampleFailed

_FLOAT = np.dtype(np.float32)


def _each(images: Sequence[Any], fn: Callable[[int, Any], None]) -> None:
    for i, image in enumerate(images):
        try:
            fn(i, image)
        except ConveyorError as exc:
            raise SampleFailed(i, exc) from None


def resize_planner(ctx: OpContext) -> Planner:
    params = resize.resize_args(ctx)
    op = ctx.op_type
    _check_interp(op, params.interp_type)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        _types(op, dtype, sources.RESIZE_TYPES)
        work = params.work_dtype(dtype)
        jobs: list[tuple[tuple[int, ...], tuple[int, int, int, int], tuple[int, int]]] = []

        def one(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            out_hw = params.output_size((h, w), targs[i])
            ctx.limits.check_output((*out_hw, c), work)
            jobs.append((image.shape, (0, 0, h, w), out_hw))

        _each(images, one)
        return resize_batch(jobs, params.interp_type, params.antialias, dtype, work)

    return plan


def random_resized_crop_planner(ctx: OpContext) -> Planner:
    op, args = ctx.op_type, ctx.args
    window_params = random_resized_crop.params_of(ctx)
    out_hw = random_resized_crop.output_size(ctx)
    interp_type, antialias = args["interp_type"], bool(args["antialias"])
    _check_interp(op, interp_type)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        _types(op, dtype, sources.RESIZE_TYPES)
        jobs: list[tuple[tuple[int, ...], tuple[int, int, int, int], tuple[int, int]]] = []

        def one(i: int, image: Any) -> None:
            check_image(op, image)
            ctx.limits.check_output((*out_hw, image.shape[2]), dtype)
            win = random_resized_crop.sample_window(ctx, window_params, image.shape[:2],
                                                    targs[i])
            jobs.append((image.shape, (win.y, win.x, win.h, win.w), out_hw))

        _each(images, one)
        return resize_batch(jobs, interp_type, antialias, dtype, dtype)

    return plan


def resize_batch(jobs: Sequence[tuple[tuple[int, ...], tuple[int, int, int, int],
                                      tuple[int, int]]],
                 interp_type: str, antialias: bool, in_dtype: np.dtype,
                 work: np.dtype) -> plans.ResizeBatchPlan:
    """The two passes resizing each (image shape, window (y, x, h, w), output size)."""
    first: list[list[int]] = []
    second: list[list[int]] = []
    starts: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    weights: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
    offsets = [[0, 0], [0, 0]]  # per pass: start offset, weight offset
    mids: list[tuple[int, ...]] = []
    outs: list[tuple[int, ...]] = []
    round_first = int(work.kind != "f")
    for (_, full_w, c), (y0, x0, h, w), (out_h, out_w) in jobs:
        rp = resize_plan((h, w), (out_h, out_w), interp_type, antialias)
        cols_first = rp.first == "cols"
        mid_h, mid_w = (h, out_w) if cols_first else (out_h, w)
        order = ((rp.cols, 1), (rp.rows, 0)) if cols_first else ((rp.rows, 0), (rp.cols, 1))
        for n, (flt, axis) in enumerate(order):
            starts[n].append(flt.start)
            weights[n].append(flt.weights.reshape(-1))
            if n == 0:
                first.append([h, w, full_w * c, (y0 * full_w + x0) * c, c, mid_h, mid_w, axis,
                              *offsets[0], flt.taps, int(rp.round_between) * round_first])
            else:
                second.append([mid_h, mid_w, mid_w * c, 0, c, out_h, out_w, axis,
                               *offsets[1], flt.taps, 0])
            offsets[n][0] += flt.start.size
            offsets[n][1] += flt.weights.size
        mids.append((mid_h, mid_w, c))
        outs.append((out_h, out_w, c))

    def concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(1, dtype)

    packed = plans.pack(plans.rows(first, 12), concat(starts[0], np.int32),
                        concat(weights[0], np.float32), plans.rows(second, 12),
                        concat(starts[1], np.int32), concat(weights[1], np.float32))
    return plans.ResizeBatchPlan(packed, mids, outs, in_dtype, work)


def crop_mirror_normalize_planner(ctx: OpContext) -> Planner:
    p = normalize.cmn_params(ctx)
    _types(p.op, p.dtype, sources.CMN_OUTPUTS, "outputs")

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(p.op, images)
        _types(p.op, dtype, sources.CMN_INPUTS)
        geom: list[list[int]] = []
        muls: list[np.ndarray] = []
        adds: list[np.ndarray] = []

        def one(i: int, image: Any) -> None:
            check_image(p.op, image)
            y, x, h, w, mirror = p.region(image.shape, targs[i])
            c = image.shape[2]
            ctx.limits.check_output((h, w, p.channels_out(c)), p.dtype)
            mul, add = p.coefficients(c)
            geom.append([image.shape[0], image.shape[1], c, y, x, h, w, int(mirror),
                         p.channels_out(c)])
            muls.append(mul)
            adds.append(add)

        _each(images, one)
        shapes = [normalize.output_shape((g[5], g[6]), chw=p.chw, channels_out=g[8])
                  for g in geom]
        packed = plans.pack(plans.rows(geom, 9), plans.padded(muls, _FLOAT),
                            plans.padded(adds, _FLOAT))
        return plans.NormalizePlan(packed, p.chw, list(shapes), dtype, p.dtype)

    return plan


#: The reference planner of each operator the batched planners cover.
REFERENCE: dict[str, Callable[[OpContext], Planner]] = {
    "resize": resize_planner,
    "random_resized_crop": random_resized_crop_planner,
    "crop_mirror_normalize": crop_mirror_normalize_planner,
}
