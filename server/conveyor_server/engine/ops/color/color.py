"""The colour operators: ``brightness_contrast``, ``brightness``, ``contrast``, ``hsv``,
``hue``, ``color_twist``, ``saturation`` and ``equalize``.

Semantics follow NVIDIA DALI's operators of the same names (their parameters are in
``color_params.py``). Images are HWC; ``hsv``, ``color_twist`` and ``saturation`` take 3
channels (RGB); ``equalize`` takes uint8 images of any number of channels.
Values are computed in float32 and converted to the output type with ``saturate_cast``
(round to nearest, clamp). Every output is a new, C-contiguous array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import cv2
import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops.args import ArgGetter, Targs, check_image, scalar_arg
from conveyor_server.engine.ops.color import color_params
from conveyor_server.engine.ops.normalize.normalize import saturate_cast
from conveyor_server.engine.ops.probes.inputs import image, images
from conveyor_server.engine.ops.probes.probe_set import Case, f32, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

#: Input types the colour operators take.
COLOR_INPUTS = frozenset(np.dtype(t) for t in ("uint8", "int16", "uint16", "float16",
                                               "float32"))


def _getters(ctx: OpContext, *names: str) -> list[ArgGetter]:
    return [scalar_arg(ctx, name) for name in names]


def out_dtype(ctx: OpContext, in_dtype: np.dtype) -> np.dtype:
    dtype = ctx.args["dtype"]
    return in_dtype if dtype == "" else np.dtype(dtype)


def check_color_input(ctx: OpContext, image: Any, rgb: bool) -> None:
    """``InvalidArgument`` unless ``image`` (an array on any device) is an HWC image of a
    type the colour operators take, with 3 channels where ``rgb``."""
    check_image(ctx.op_type, image, COLOR_INPUTS)
    if rgb and image.shape[2] != 3:
        raise InvalidArgument(f"{ctx.op_type}: expects RGB images (3 channels), got "
                              f"{image.shape[2]}")


#: A colour operator's parameters for one sample: (``targs``, input type, output type) to
#: the float32 coefficients its pixels are computed with. The CPU operators and the GPU
#: ones (``engine/ops/cuda``) both call these.
ColorParams = Callable[[Targs, np.dtype, np.dtype], np.ndarray]


def _one(targs: Targs) -> float:
    return 1.0


def _zero(targs: Targs) -> float:
    return 0.0


def brightness_contrast_params(ctx: OpContext) -> ColorParams:
    """(mul, add), float32: ``out = in * mul + add``; ``brightness`` and ``contrast`` are
    this with the other's arguments at their neutral values."""
    args = ctx.args
    brightness, shift, contrast = (scalar_arg(ctx, name) if name in args else neutral
                                   for name, neutral in (("brightness", _one),
                                                         ("brightness_shift", _zero),
                                                         ("contrast", _one)))
    center_given = args.get("contrast_center") is not None or "contrast_center" in ctx.tensor_args
    center = scalar_arg(ctx, "contrast_center") if center_given else None

    def params(targs: Targs, in_dtype: np.dtype, out_dtype: np.dtype) -> np.ndarray:
        mid = center(targs) if center is not None else color_params.half_range(in_dtype)
        mul, add = color_params.brightness_contrast(
            brightness(targs), shift(targs), contrast(targs), mid,
            color_params.output_range(out_dtype))
        return np.array([mul, add], dtype=np.float32)

    return params


def hsv_params(ctx: OpContext) -> ColorParams:
    """The 3x4 affine map of RGB pixels, float32."""
    hue, saturation, value = _getters(ctx, "hue", "saturation", "value")
    return lambda targs, in_dtype, out_dtype: _affine(
        color_params.hsv_matrix(hue(targs), saturation(targs), value(targs)), 0.0)


def hue_params(ctx: OpContext) -> ColorParams:
    """The 3x4 affine map of RGB pixels, float32, as DALI computes ``hue``."""
    hue = scalar_arg(ctx, "hue")
    return lambda targs, in_dtype, out_dtype: _affine(color_params.hue_matrix(hue(targs)), 0.0)


def color_twist_params(ctx: OpContext) -> ColorParams:
    """The 3x4 affine map of RGB pixels, float32."""
    hue, saturation, value, brightness, contrast = _getters(
        ctx, "hue", "saturation", "value", "brightness", "contrast")
    return lambda targs, in_dtype, out_dtype: _affine(*color_params.color_twist(
        hue(targs), saturation(targs), value(targs), brightness(targs), contrast(targs),
        color_params.half_range(in_dtype)))


def saturation_params(ctx: OpContext) -> ColorParams:
    """The 3x4 affine map of RGB pixels, float32, as DALI computes ``saturation``."""
    saturation = scalar_arg(ctx, "saturation", lo=0)
    return lambda targs, in_dtype, out_dtype: _affine(
        color_params.saturation_matrix(saturation(targs)), 0.0)


def _affine(matrix: np.ndarray, offset: float) -> np.ndarray:
    return np.hstack([matrix, np.full((3, 1), offset)]).astype(np.float32)


@register("brightness_contrast")
@register("brightness")
@register("contrast")
def build_brightness_contrast(ctx: OpContext) -> SampleOp:
    params = brightness_contrast_params(ctx)

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_color_input(ctx, image, rgb=False)
        dtype = out_dtype(ctx, image.dtype)
        mul, add = params(targs, image.dtype, dtype)
        work = image.astype(np.float32)
        np.multiply(work, mul, out=work)
        np.add(work, add, out=work)
        return (work if dtype == np.float32 else saturate_cast(work, dtype),)

    return SampleOp(fn=run, layouts=("HWC",))


def _matrix_op(ctx: OpContext, params: ColorParams) -> SampleOp:
    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_color_input(ctx, image, rgb=True)
        dtype = out_dtype(ctx, image.dtype)
        work = cv2.transform(image.astype(np.float32), params(targs, image.dtype, dtype))
        return (work if dtype == np.float32 else saturate_cast(work, dtype),)

    return SampleOp(fn=run, layouts=("HWC",))


@register("hsv")
def build_hsv(ctx: OpContext) -> SampleOp:
    return _matrix_op(ctx, hsv_params(ctx))


@register("hue")
def build_hue(ctx: OpContext) -> SampleOp:
    return _matrix_op(ctx, hue_params(ctx))


@register("color_twist")
def build_color_twist(ctx: OpContext) -> SampleOp:
    return _matrix_op(ctx, color_twist_params(ctx))


@register("saturation")
def build_saturation(ctx: OpContext) -> SampleOp:
    return _matrix_op(ctx, saturation_params(ctx))


_UINT8 = frozenset((np.dtype(np.uint8),))


def equalize_channel(channel: np.ndarray) -> np.ndarray:
    """One channel (H, W, uint8) equalized: the lookup table of its cumulative histogram,
    ``round(255 * (cdf(v) - n0) / (total - n0))`` with ``n0`` the count of the lowest
    value present (OpenCV's ``equalizeHist``, which gives DALI's bytes)."""
    return cv2.equalizeHist(np.ascontiguousarray(channel))


@register("equalize")
def build_equalize(ctx: OpContext) -> SampleOp:
    op = ctx.op_type

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, _UINT8)
        out = np.empty_like(image, order="C")
        for c in range(image.shape[2]):
            out[:, :, c] = equalize_channel(image[:, :, c])
        return (out,)

    return SampleOp(fn=run, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


def _color_samples(extra: ProbeTargs) -> list[tuple[Sequence[np.ndarray], ProbeTargs]]:
    pictures = [p for p in images(("uint8", "float32")) if p.shape[2] == 3]
    pictures.append(image(6, 7, 3, "int16"))
    return [((p,), extra) for p in pictures]


@op_probe("brightness_contrast")
def _brightness_contrast(variant: str) -> list[Case]:
    fed = {"brightness": f32(1.3), "contrast": f32(0.6)}
    return [
        Case({}, _color_samples(fed)),
        Case({"brightness_shift": 0.1, "contrast_center": 100.0, "dtype": "float32"},
             _color_samples(fed)),
        Case({"brightness": 2.5, "contrast": 1.7, "dtype": "uint8"}, _color_samples({})),
    ]


@op_probe("brightness")
def _brightness(variant: str) -> list[Case]:
    return [Case({}, _color_samples({"brightness": f32(1.3)})),
            Case({"brightness": 0.7, "brightness_shift": 0.2}, _color_samples({})),
            Case({"dtype": "float32"}, _color_samples({"brightness_shift": f32(-0.1)})),
            Case({"brightness": 2.5, "dtype": "uint8"}, _color_samples({}))]


@op_probe("contrast")
def _contrast(variant: str) -> list[Case]:
    return [Case({}, _color_samples({"contrast": f32(0.6)})),
            Case({"contrast": 1.7, "contrast_center": 100.0}, _color_samples({})),
            Case({"dtype": "float32"}, _color_samples({"contrast_center": f32(0.25)})),
            Case({"contrast": 0.0, "dtype": "int16"}, _color_samples({}))]


@op_probe("hue")
def _hue(variant: str) -> list[Case]:
    return [Case({}, _color_samples({"hue": f32(-47.5)})),
            Case({"hue": 200.0, "dtype": "float32"}, _color_samples({})),
            Case({"hue": 90.0, "dtype": "uint8"}, _color_samples({}))]


@op_probe("hsv")
def _hsv(variant: str) -> list[Case]:
    fed = {"hue": f32(-47.5), "saturation": f32(1.4)}
    return [Case({"value": 0.9}, _color_samples(fed)),
            Case({"hue": 200.0, "dtype": "float32"}, _color_samples({}))]


@op_probe("color_twist")
def _color_twist(variant: str) -> list[Case]:
    fed = {"hue": f32(33.0), "contrast": f32(1.3)}
    return [Case({"saturation": 0.5, "brightness": 1.1}, _color_samples(fed)),
            Case({"value": 1.2, "dtype": "float16"}, _color_samples({}))]


@op_probe("saturation")
def _saturation(variant: str) -> list[Case]:
    return [Case({}, _color_samples({"saturation": f32(0.35)})),
            Case({"saturation": 1.8}, _color_samples({})),
            Case({"saturation": 0.0, "dtype": "float32"}, _color_samples({})),
            Case({"dtype": "uint8"}, _color_samples({"saturation": f32(2.5)}))]


@op_probe("equalize")
def _equalize(variant: str) -> list[Case]:
    flat = np.full((5, 6, 3), 77, dtype=np.uint8)  # one value per channel: left as it is
    few = (image(9, 8, 2) // 64 * 60).astype(np.uint8)  # four values per channel
    return [Case({}, [((p,), {}) for p in [*images(("uint8",), (3, 1, 4)), flat, few]])]
