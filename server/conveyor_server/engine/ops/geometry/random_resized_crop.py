"""The ``random_resized_crop`` operator: a random window (``random_window.py``) of the
image, resized to ``size``.

Semantics follow NVIDIA DALI's operator of the same name; the window is keyed by the
sample's global index (see ``registry.SAMPLE_INDEX``). The resize is ``resize``'s: the same
interpolations and antialiasing, so ``random_resized_crop(size=s)`` gives the bytes of
``resize(crop(image, window), size=s)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor_server.engine.ops.args import (
    CV_MAX_CHANNELS,
    WARP_DTYPES,
    Targs,
    check_image,
    round_half_away,
)
from conveyor_server.engine.ops.geometry.random_window import (
    Window,
    WindowDraws,
    WindowParams,
    random_window,
    window_draws,
    window_params,
)
from conveyor_server.engine.ops.geometry.resize import resize_image
from conveyor_server.engine.ops.probes.inputs import images
from conveyor_server.engine.ops.probes.probe_set import Case, indexed, op_probe
from conveyor_server.engine.ops.registry import SAMPLE_INDEX, OpContext, SampleOp, register


def params_of(ctx: OpContext) -> WindowParams:
    args = ctx.args
    return window_params(ctx.op_type, args["random_area"], args["random_aspect_ratio"],
                         args["num_attempts"])


def sample_index(targs: Targs) -> int:
    return int(np.asarray(targs[SAMPLE_INDEX]).reshape(()))


def output_size(ctx: OpContext) -> tuple[int, int]:
    size = ctx.args["size"]
    return max(1, round_half_away(size[0])), max(1, round_half_away(size[-1]))


def sample_window(ctx: OpContext, params: WindowParams, in_hw: tuple[int, int],
                  targs: Targs) -> Window:
    """The sample's crop window, drawn by its global index: the window the operators draw
    (the CPU operator's draws a block of samples at a time, the GPU planner's a batch's
    windows at once, ``random_windows``), one sample alone."""
    draws = window_draws(ctx.seed, ctx.index, sample_index(targs), params)
    return random_window(in_hw[0], in_hw[1], params, draws)


@register("random_resized_crop")
def build_random_resized_crop(ctx: OpContext) -> SampleOp:
    op, args = ctx.op_type, ctx.args
    params = params_of(ctx)
    out_hw = output_size(ctx)
    interp_type, antialias = args["interp_type"], bool(args["antialias"])
    draws_of = WindowDraws(ctx.seed, ctx.index, params)  # sample_window's draws, per block

    def random_resized_crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, WARP_DTYPES, CV_MAX_CHANNELS)
        ctx.limits.check_output((*out_hw, image.shape[2]), image.dtype)
        win = random_window(image.shape[0], image.shape[1], params,
                            draws_of(sample_index(targs)))
        view = np.ascontiguousarray(image[win.y:win.y + win.h, win.x:win.x + win.w])
        return (resize_image(view, out_hw, interp_type, antialias),)

    return SampleOp(fn=random_resized_crop, layouts=("HWC",), keyed=True)


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("random_resized_crop", variant_arg="interp_type")
def _random_resized_crop(interp: str) -> list[Case]:
    samples = indexed([((p,), {}) for p in images(("uint8", "float32"))], first=2**40)
    return [
        Case({"interp_type": interp, "size": [24.0, 20.0]}, samples),
        Case({"interp_type": interp, "size": [9.0], "antialias": False,
              "random_area": [0.5, 0.9], "random_aspect_ratio": [0.5, 2.0]}, samples),
        # Windows that never fit: the centred fallback.
        Case({"interp_type": interp, "size": [16.0, 16.0], "random_area": [1.0],
              "random_aspect_ratio": [3.0, 4.0], "num_attempts": 2}, samples),
    ]
