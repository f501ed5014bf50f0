"""The GPU planners of ``resize`` and ``random_resized_crop``: each sample's output size
(``ResizeArgs``, memoised per input and requested size) or keyed window
(``random_windows`` over the batch's draws), and the two passes of the batch
(``resize_batch.ResizeBatcher``, which keeps the operator's filters).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor.errors import ConveyorError, SpecError
from conveyor_server.engine.ops.args import Targs, check_image
from conveyor_server.engine.ops.cuda import plans, sources
from conveyor_server.engine.ops.cuda.batch_checks import (
    check_types,
    one_dtype,
    outputs_allowed,
    refuse,
    shapes_of,
)
from conveyor_server.engine.ops.cuda.ops import Planner, gpu_planner
from conveyor_server.engine.ops.cuda.resize_batch import ResizeBatcher
from conveyor_server.engine.ops.geometry import random_resized_crop, resize
from conveyor_server.engine.ops.geometry.random_window import (
    random_windows,
    window_draws_batch,
)
from conveyor_server.engine.ops.geometry.resize_filters import FILTERED_INTERP
from conveyor_server.engine.ops.registry import SAMPLE_INDEX, OpContext


def check_interp(op: str, interp_type: str) -> None:
    if interp_type not in FILTERED_INTERP:
        raise SpecError(op, "interp_type", f"got {interp_type!r}: on device='gpu' "
                                           f"{op} interpolates with 'nn' or 'linear'")


@gpu_planner("resize")
def resize_planner(ctx: OpContext) -> Planner:
    params = resize.resize_args(ctx)
    op = ctx.op_type
    check_interp(op, params.interp_type)
    batcher = ResizeBatcher(params.interp_type, params.antialias)
    # The output size of an input size and a requested size, for the sizes met last.
    output_size = functools.lru_cache(maxsize=4096)(params.request.output_size)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = one_dtype(op, images)
        check_types(op, dtype, sources.RESIZE_TYPES)
        work = params.work_dtype(dtype)

        def check(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            out_hw = params.output_size((h, w), targs[i])
            ctx.limits.check_output((*out_hw, c), work)

        shapes = shapes_of(images)
        if shapes is None:
            refuse(images, check)
        try:
            outs = np.array([output_size((h, w), params.requested(t))
                             for (h, w), t in zip(shapes[:, :2].tolist(), targs, strict=True)],
                            dtype=np.int64).reshape(len(shapes), 2)
        except ConveyorError:  # a size fed per sample that is refused
            refuse(images, check)
        if not outputs_allowed(ctx, np.concatenate([outs, shapes[:, 2:]], axis=1), work):
            refuse(images, check)
        windows = np.zeros((len(shapes), 4), dtype=np.int64)
        windows[:, 2:] = shapes[:, :2]
        return batcher.plan(shapes, windows, outs, dtype, work)

    return plan


@gpu_planner("random_resized_crop", keyed=True)
def random_resized_crop_planner(ctx: OpContext) -> Planner:
    op, args = ctx.op_type, ctx.args
    window_params = random_resized_crop.params_of(ctx)
    out_hw = random_resized_crop.output_size(ctx)
    interp_type, antialias = args["interp_type"], bool(args["antialias"])
    check_interp(op, interp_type)
    batcher = ResizeBatcher(interp_type, antialias)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = one_dtype(op, images)
        check_types(op, dtype, sources.RESIZE_TYPES)

        def check(i: int, image: Any) -> None:
            check_image(op, image)
            ctx.limits.check_output((*out_hw, image.shape[2]), dtype)

        shapes = shapes_of(images)
        if shapes is None:
            refuse(images, check)
        outs = np.empty((len(shapes), 2), dtype=np.int64)
        outs[:] = out_hw
        if not outputs_allowed(ctx, np.concatenate([outs, shapes[:, 2:]], axis=1), dtype):
            refuse(images, check)
        # Each sample's keyed draws, by its global index (``random_resized_crop.sample_index``).
        indices = np.array([t[SAMPLE_INDEX] for t in targs], dtype=np.uint64).reshape(len(targs))
        draws = window_draws_batch(ctx.seed, ctx.index, indices, window_params)
        windows = np.stack(random_windows(shapes[:, 0], shapes[:, 1], window_params, draws),
                           axis=1)
        return batcher.plan(shapes, windows, outs, dtype, dtype)

    return plan
