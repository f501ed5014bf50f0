"""The colour operators: ``brightness_contrast``, ``hsv`` and ``color_twist``.

Semantics follow NVIDIA DALI's operators of the same names (their parameters are in
``color_params.py``). Images are HWC; ``hsv`` and ``color_twist`` take 3 channels (RGB).
Values are computed in float32 and converted to the output type with ``saturate_cast``
(round to nearest, clamp). Every output is a new, C-contiguous array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import cv2
import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops import color_params
from conveyor_server.engine.ops.args import ArgGetter, Targs, check_image, scalar_arg
from conveyor_server.engine.ops.normalize import saturate_cast
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

#: Input types the colour operators take.
COLOR_INPUTS = frozenset(np.dtype(t) for t in ("uint8", "int16", "uint16", "float16",
                                               "float32"))


def _getters(ctx: OpContext, *names: str) -> list[ArgGetter]:
    return [scalar_arg(ctx, name) for name in names]


def _out_dtype(ctx: OpContext, image: np.ndarray) -> np.dtype:
    dtype = ctx.args["dtype"]
    return image.dtype if dtype == "" else np.dtype(dtype)


def _check(ctx: OpContext, image: np.ndarray, rgb: bool) -> None:
    check_image(ctx.op_type, image, COLOR_INPUTS)
    if rgb and image.shape[2] != 3:
        raise InvalidArgument(f"{ctx.op_type}: expects RGB images (3 channels), got "
                              f"{image.shape[2]}")


@register("brightness_contrast")
def build_brightness_contrast(ctx: OpContext) -> SampleOp:
    brightness, shift, contrast = _getters(ctx, "brightness", "brightness_shift", "contrast")
    center_given = ctx.args["contrast_center"] is not None or "contrast_center" in ctx.tensor_args
    center = scalar_arg(ctx, "contrast_center") if center_given else None

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        _check(ctx, image, rgb=False)
        dtype = _out_dtype(ctx, image)
        mid = center(targs) if center is not None else color_params.half_range(image.dtype)
        mul, add = color_params.brightness_contrast(
            brightness(targs), shift(targs), contrast(targs), mid,
            color_params.output_range(dtype))
        work = image.astype(np.float32)
        np.multiply(work, np.float32(mul), out=work)
        np.add(work, np.float32(add), out=work)
        return (work if dtype == np.float32 else saturate_cast(work, dtype),)

    return SampleOp(fn=run, layouts=("HWC",))


def _matrix_op(ctx: OpContext,
               matrix_of: Callable[[Targs, np.dtype], tuple[np.ndarray, float]]) -> SampleOp:
    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        _check(ctx, image, rgb=True)
        dtype = _out_dtype(ctx, image)
        matrix, offset = matrix_of(targs, image.dtype)
        affine = np.hstack([matrix, np.full((3, 1), offset)]).astype(np.float32)
        work = cv2.transform(image.astype(np.float32), affine)
        return (work if dtype == np.float32 else saturate_cast(work, dtype),)

    return SampleOp(fn=run, layouts=("HWC",))


@register("hsv")
def build_hsv(ctx: OpContext) -> SampleOp:
    hue, saturation, value = _getters(ctx, "hue", "saturation", "value")
    return _matrix_op(ctx, lambda targs, _: (
        color_params.hsv_matrix(hue(targs), saturation(targs), value(targs)), 0.0))


@register("color_twist")
def build_color_twist(ctx: OpContext) -> SampleOp:
    hue, saturation, value, brightness, contrast = _getters(
        ctx, "hue", "saturation", "value", "brightness", "contrast")
    return _matrix_op(ctx, lambda targs, dtype: color_params.color_twist(
        hue(targs), saturation(targs), value(targs), brightness(targs), contrast(targs),
        color_params.half_range(dtype)))
