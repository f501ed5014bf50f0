"""The ``crop`` and ``flip`` operators.

Semantics follow NVIDIA DALI's operators of the same names. Images are HWC numpy arrays.
Every output is a new, writable, C-contiguous array.
"""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from conveyor_server.engine.ops.args import (
    WARP_DTYPES,
    Targs,
    check_image,
    crop_image,
    crop_window,
    scalar_arg,
    with_channels,
)
from conveyor_server.engine.ops.probes.inputs import images
from conveyor_server.engine.ops.probes.probe_set import Case, f32, i32, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

# -- crop --------------------------------------------------------------------------------


@register("crop")
def build_crop(ctx: OpContext) -> SampleOp:
    op, args = ctx.op_type, ctx.args
    window = crop_window(ctx, required=True)
    assert window is not None
    policy = args["out_of_bounds_policy"]
    fill_values = args["fill_values"] or (0.0,)  # DALI's default fill is 0

    def crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image)
        if policy == "pad":
            ctx.limits.check_output((*window.size, image.shape[2]), image.dtype)
        out = crop_image(window, image, targs, policy, fill_values)
        # A view into the input is copied; a padded window is already a new array.
        return (np.array(out, order="C", copy=True) if out.base is not None else out,)

    return SampleOp(fn=crop, layouts=("HWC",))


# -- flip --------------------------------------------------------------------------------


#: Sample types ``cv2.flip`` keeps (it turns int64 into int32).
_CV_FLIP_DTYPES = WARP_DTYPES | frozenset(np.dtype(t) for t in ("int8", "int32", "float16"))


def flip_image(image: np.ndarray, horizontal: bool, vertical: bool) -> np.ndarray:
    """A flipped copy of an HWC image."""
    if not (horizontal or vertical):
        return image.copy()
    if image.dtype in _CV_FLIP_DTYPES and image.shape[2] <= 512:
        # Much faster than numpy's copy of a reversed view for a horizontal flip.
        code = -1 if horizontal and vertical else int(horizontal)
        return with_channels(cv2.flip(image, code), image.shape[2])
    rows = slice(None, None, -1 if vertical else 1)
    cols = slice(None, None, -1 if horizontal else 1)
    return np.array(image[rows, cols], order="C", copy=True)


@register("flip")
def build_flip(ctx: OpContext) -> SampleOp:
    op = ctx.op_type
    horizontal = scalar_arg(ctx, "horizontal", 0, 1)
    vertical = scalar_arg(ctx, "vertical", 0, 1)

    def flip(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image)
        return (flip_image(image, bool(horizontal(targs)), bool(vertical(targs))),)

    return SampleOp(fn=flip, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("crop")
def _crop(variant: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    pos = [{"crop_pos_x": f32(x), "crop_pos_y": f32(y)}
           for x, y in ((0.0, 0.0), (0.5, 0.5), (1.0, 0.3), (0.77, 1.0))]
    samples = [((p,), pos[i % len(pos)]) for i, p in enumerate(pictures)]
    return [
        Case({"crop": [5.0, 4.0]}, samples),
        Case({"crop": [40.0, 9.0], "out_of_bounds_policy": "pad", "fill_values": [3.0]},
             samples),
        Case({"crop": [40.0, 50.0], "out_of_bounds_policy": "trim_to_shape"}, samples),
    ]


@op_probe("flip")
def _flip(variant: str) -> list[Case]:
    pictures = images(("uint8", "float32", "int16"))
    flags = ((1, 0), (0, 1), (1, 1), (0, 0))
    samples = [((p,), {"horizontal": i32(flags[i % 4][0]), "vertical": i32(flags[i % 4][1])})
               for i, p in enumerate(pictures)]
    return [Case({}, samples)]
