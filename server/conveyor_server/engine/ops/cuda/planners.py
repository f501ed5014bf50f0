"""Plans for the GPU operators, computed on the host by the CPU operators' own parameter
code: rotate's geometry (``RotateArgs``), resize's sizes (``ResizeArgs``) and filters
(``resize_filters``), crop regions (``crop_region``), the crop_mirror_normalize coefficients
(``CmnParams``), the colour coefficients (``color.py``), warp_affine's matrices
(``WarpAffineArgs``) and random_resized_crop's keyed windows (``sample_window``). Nothing
here computes a parameter of its own.

A planner maps a batch (arrays of any device: only shapes and types are read) and each
sample's ``targs`` to a plan (``plans.py``); an error about one sample is ``SampleFailed``.
Each registers itself for its operator (``ops.gpu_planner``), which gives the operator its
GPU form.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from conveyor.errors import ConveyorError, InvalidArgument, SpecError
from conveyor_server.engine.ops.args import (
    Targs,
    check_image,
    crop_fill,
    crop_region,
    crop_window,
    scalar_arg,
)
from conveyor_server.engine.ops.color import color
from conveyor_server.engine.ops.cuda import plans, sources
from conveyor_server.engine.ops.cuda.ops import Planner, gpu_planner
from conveyor_server.engine.ops.geometry import random_resized_crop, resize, rotate, warp_affine
from conveyor_server.engine.ops.geometry.resize_filters import FILTERED_INTERP, resize_plan
from conveyor_server.engine.ops.normalize import normalize
from conveyor_server.engine.ops.registry import OpContext, SampleFailed

_FLOAT = np.dtype(np.float32)


def _types(op: str, dtype: np.dtype, allowed: Sequence[str], what: str = "images") -> None:
    if dtype.name not in allowed:
        raise InvalidArgument(f"{op}: on device='gpu', {what} of type {dtype} are not supported "
                              f"(supported: {', '.join(allowed)})")


def _each(images: Sequence[Any], fn: Callable[[int, Any], None]) -> None:
    for i, image in enumerate(images):
        try:
            fn(i, image)
        except ConveyorError as exc:
            raise SampleFailed(i, exc) from None


def _one_dtype(op: str, images: Sequence[Any]) -> np.dtype:
    dtypes = {np.dtype(im.dtype) for im in images}
    if len(dtypes) > 1:
        raise InvalidArgument(f"{op}: the samples of a batch must share a type, got "
                              f"{sorted(str(t) for t in dtypes)}")
    return dtypes.pop() if dtypes else np.dtype(np.uint8)


# -- crop, flip ---------------------------------------------------------------------------


@gpu_planner("crop")
def crop_planner(ctx: OpContext) -> Planner:
    op, args = ctx.op_type, ctx.args
    window = crop_window(ctx, required=True)
    assert window is not None
    policy = args["out_of_bounds_policy"]
    fill_values = args["fill_values"] or (0.0,)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        geom: list[list[int]] = []
        fills: list[np.ndarray] = []

        def one(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            y, x, ch, cw = crop_region(window, (h, w), targs[i], policy)
            ctx.limits.check_output((ch, cw, c), dtype)
            geom.append([h, w, c, ch, cw, y, x, 0, 0])
            fills.append(crop_fill(op, fill_values, c, dtype))

        _each(images, one)
        return _slice_plan(geom, fills, dtype)

    return plan


@gpu_planner("flip")
def flip_planner(ctx: OpContext) -> Planner:
    op = ctx.op_type
    horizontal = scalar_arg(ctx, "horizontal", 0, 1)
    vertical = scalar_arg(ctx, "vertical", 0, 1)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        geom: list[list[int]] = []

        def one(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            geom.append([h, w, c, h, w, 0, 0, int(bool(horizontal(targs[i]))),
                         int(bool(vertical(targs[i])))])

        _each(images, one)
        return _slice_plan(geom, [np.zeros(g[2], dtype) for g in geom], dtype)

    return plan


def _slice_plan(geom: list[list[int]], fills: list[np.ndarray], dtype: np.dtype) -> plans.Plan:
    if dtype.itemsize not in sources.SLICE_ITEMSIZES:
        raise InvalidArgument(f"on device='gpu', samples of type {dtype} are not supported")
    return plans.SlicePlan(plans.rows(geom, 9), plans.padded(fills, dtype),
                           [(g[3], g[4], g[2]) for g in geom], dtype)


# -- rotate -------------------------------------------------------------------------------


@gpu_planner("rotate")
def rotate_planner(ctx: OpContext) -> Planner:
    params = rotate.rotate_args(ctx)
    op = ctx.op_type
    if params.interp_type not in ("nn", "linear"):
        raise SpecError(op, "interp_type", f"got {params.interp_type!r}: on device='gpu' "
                                           "rotate interpolates with 'nn' or 'linear'")

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        _types(op, dtype, sources.WARP_TYPES)
        return _warp_plan(op, ctx, images, targs, params.geometry, params.fill,
                          params.interp_type == "linear", params.fill_value is None, dtype)

    return plan


@gpu_planner("warp_affine")
def warp_affine_planner(ctx: OpContext) -> Planner:
    params = warp_affine.warp_affine_args(ctx)
    op = ctx.op_type

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        _types(op, dtype, sources.WARP_TYPES)
        if params.dtype is not None and params.dtype != dtype:
            raise InvalidArgument(f"{op}: on device='gpu' the output keeps the input's type "
                                  f"({dtype}), got dtype={params.dtype.name}: leave dtype "
                                  "unset and cast after, or warp on the CPU")
        linear = params.interp_type == "linear"
        # Nearest: DALI's own matrix and rounding (``warp_affine.nearest``); linear:
        # OpenCV's matrix, as the CPU operator's warp takes it.
        geometry = params.geometry if linear else (
            lambda hw, t: (params.output_size(hw), params.matrix(t)))
        return _warp_plan(op, ctx, images, targs, geometry, params.fill, linear,
                          params.fill_value is None, dtype, corner=not linear)

    return plan


def _warp_plan(op: str, ctx: OpContext, images: Sequence[Any], targs: Sequence[Targs],
               geometry: Callable[[tuple[int, int], Targs], tuple[tuple[int, int], np.ndarray]],
               fill_of: Callable[[int], np.ndarray | None], linear: bool, replicate: bool,
               dtype: np.dtype, corner: bool = False) -> plans.WarpPlan:
    """rotate's and warp_affine's plan: per sample, the output size and OpenCV's
    output-to-input matrix from the CPU operator's own ``geometry``."""
    geom: list[list[int]] = []
    matrices: list[np.ndarray] = []
    fills: list[np.ndarray] = []

    def one(i: int, image: Any) -> None:
        check_image(op, image)
        h, w, c = image.shape
        out_hw, matrix = geometry((h, w), targs[i])
        ctx.limits.check_output((*out_hw, c), dtype)
        fill = fill_of(c)
        geom.append([h, w, c, *out_hw])
        matrices.append(matrix.reshape(6).astype(np.float32))
        fills.append(np.zeros(c) if fill is None else fill)

    _each(images, one)
    return plans.WarpPlan(
        plans.rows(geom, 5), np.array(matrices, dtype=np.float32).reshape(-1, 6),
        plans.padded(fills, _FLOAT), linear, replicate, [(g[3], g[4], g[2]) for g in geom],
        dtype, corner)


# -- resize, random_resized_crop ----------------------------------------------------------


def _check_interp(op: str, interp_type: str) -> None:
    if interp_type not in FILTERED_INTERP:
        raise SpecError(op, "interp_type", f"got {interp_type!r}: on device='gpu' "
                                           f"{op} interpolates with 'nn' or 'linear'")


@gpu_planner("resize")
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


@gpu_planner("random_resized_crop", keyed=True)
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

    return plans.ResizeBatchPlan(
        plans.ResizePass(plans.rows(first, 12), concat(starts[0], np.int32),
                         concat(weights[0], np.float32), mids),
        plans.ResizePass(plans.rows(second, 12), concat(starts[1], np.int32),
                         concat(weights[1], np.float32), outs),
        in_dtype, work)


# -- crop_mirror_normalize, cast, colour --------------------------------------------------


def _cmn_layout(ctx: OpContext) -> str:
    return "CHW" if ctx.args["output_layout"] == "CHW" else "HWC"


def _input_layout(ctx: OpContext) -> str:
    """``cast`` keeps its input's layout."""
    return ctx.input_layouts[0] if ctx.input_layouts else ""



@gpu_planner("crop_mirror_normalize", layout=_cmn_layout)
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
        return plans.NormalizePlan(plans.rows(geom, 9), plans.padded(muls, _FLOAT),
                                   plans.padded(adds, _FLOAT), p.chw, list(shapes), dtype,
                                   p.dtype)

    return plan


@gpu_planner("cast", layout=_input_layout)
def cast_planner(ctx: OpContext) -> Planner:
    op, dtype = ctx.op_type, np.dtype(ctx.args["dtype"])
    _types(op, dtype, sources.CAST_TYPES, "outputs")

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        in_dtype = _one_dtype(op, images)
        _types(op, in_dtype, sources.CAST_TYPES, "samples")
        counts = [int(np.prod(v.shape)) for v in images]
        ctx.limits.check_bytes(max(counts, default=0) * dtype.itemsize,
                               f"its output would be {max(counts, default=0):,} values of "
                               f"{dtype}")
        return plans.CastPlan(np.array(counts, dtype=np.int64), [tuple(v.shape) for v in images],
                              in_dtype, dtype)

    return plan


@gpu_planner("brightness_contrast")
@gpu_planner("brightness")
@gpu_planner("contrast")
@gpu_planner("hsv")
@gpu_planner("hue")
@gpu_planner("color_twist")
@gpu_planner("saturation")
def color_planner(ctx: OpContext) -> Planner:
    op = ctx.op_type
    bc = color.brightness_contrast_params
    make = {"brightness_contrast": bc, "brightness": bc, "contrast": bc,
            "hsv": color.hsv_params, "hue": color.hue_params,
            "color_twist": color.color_twist_params, "saturation": color.saturation_params}[op]
    params = make(ctx)
    kind = "brightness_contrast" if make is bc else "color_matrix"

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        in_dtype = _one_dtype(op, images)
        out = color.out_dtype(ctx, in_dtype)
        _types(op, in_dtype, sources.COLOR_TYPES)
        _types(op, out, sources.COLOR_TYPES, "outputs")
        geom: list[list[int]] = []
        coefs: list[np.ndarray] = []

        def one(i: int, image: Any) -> None:
            color.check_color_input(ctx, image, rgb=kind == "color_matrix")
            h, w, c = image.shape
            geom.append([h * w, c])
            coefs.append(params(targs[i], in_dtype, out).reshape(-1))

        _each(images, one)
        width = 2 if kind == "brightness_contrast" else 12
        return plans.ColorPlan(kind, plans.rows(geom, 2),
                               np.array(coefs, dtype=np.float32).reshape(-1, width),
                               [tuple(v.shape) for v in images], in_dtype, out)

    return plan
