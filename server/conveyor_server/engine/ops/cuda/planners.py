"""Plans for the GPU operators, computed on the host by the CPU operators' own parameter
code: rotate's geometry (``RotateArgs``), crop regions (``crop_region``), the
crop_mirror_normalize coefficients and regions (``CmnParams``), the colour coefficients
(``color.py``) and warp_affine's matrices (``WarpAffineArgs``); resize's and
random_resized_crop's are in ``resize_planners.py``. Nothing here computes a parameter of
its own.

A planner maps a batch (arrays of any device: only shapes and types are read) and each
sample's ``targs`` to a plan (``plans.py``); an error about one sample is ``SampleFailed``.
Each registers itself for its operator (``ops.gpu_planner``), which gives the operator its
GPU form.

resize and random_resized_crop (``resize_planners.py``) and crop_mirror_normalize plan the
whole batch with numpy (the batched forms of the same parameter code: ``random_windows``,
``resize_plans``, ``CmnParams.regions``; the passes in ``resize_batch.py``), with what does
not depend on the sample (filters, normalisation coefficients) kept by the planner; their
checks run over the batch too (``batch_checks.py``).
"""

from __future__ import annotations

import functools
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
from conveyor_server.engine.ops.cuda.batch_checks import (
    check_types,
    each,
    one_dtype,
    outputs_allowed,
    refuse,
    shapes_of,
)
from conveyor_server.engine.ops.cuda.ops import Planner, gpu_planner
from conveyor_server.engine.ops.geometry import rotate, warp_affine
from conveyor_server.engine.ops.normalize import normalize
from conveyor_server.engine.ops.registry import OpContext

_FLOAT = np.dtype(np.float32)


# -- crop, flip ---------------------------------------------------------------------------


@gpu_planner("crop")
def crop_planner(ctx: OpContext) -> Planner:
    op, args = ctx.op_type, ctx.args
    window = crop_window(ctx, required=True)
    assert window is not None
    policy = args["out_of_bounds_policy"]
    fill_values = args["fill_values"] or (0.0,)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = one_dtype(op, images)
        geom: list[list[int]] = []
        fills: list[np.ndarray] = []

        def one(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            y, x, ch, cw = crop_region(window, (h, w), targs[i], policy)
            ctx.limits.check_output((ch, cw, c), dtype)
            geom.append([h, w, c, ch, cw, y, x, 0, 0])
            fills.append(crop_fill(op, fill_values, c, dtype))

        each(images, one)
        return _slice_plan(geom, fills, dtype)

    return plan


@gpu_planner("flip")
def flip_planner(ctx: OpContext) -> Planner:
    op = ctx.op_type
    horizontal = scalar_arg(ctx, "horizontal", 0, 1)
    vertical = scalar_arg(ctx, "vertical", 0, 1)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = one_dtype(op, images)
        geom: list[list[int]] = []

        def one(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            geom.append([h, w, c, h, w, 0, 0, int(bool(horizontal(targs[i]))),
                         int(bool(vertical(targs[i])))])

        each(images, one)
        return _slice_plan(geom, [np.zeros(g[2], dtype) for g in geom], dtype)

    return plan


def _slice_plan(geom: list[list[int]], fills: list[np.ndarray], dtype: np.dtype) -> plans.Plan:
    if dtype.itemsize not in sources.SLICE_ITEMSIZES:
        raise InvalidArgument(f"on device='gpu', samples of type {dtype} are not supported")
    return plans.SlicePlan(plans.pack(plans.rows(geom, 9), plans.padded(fills, dtype)),
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
        dtype = one_dtype(op, images)
        check_types(op, dtype, sources.WARP_TYPES)
        return _warp_plan(op, ctx, images, targs, params.geometry, params.fill,
                          params.interp_type == "linear", params.fill_value is None, dtype)

    return plan


@gpu_planner("warp_affine")
def warp_affine_planner(ctx: OpContext) -> Planner:
    params = warp_affine.warp_affine_args(ctx)
    op = ctx.op_type

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = one_dtype(op, images)
        check_types(op, dtype, sources.WARP_TYPES)
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

    each(images, one)
    return plans.WarpPlan(
        plans.pack(plans.rows(geom, 5), np.array(matrices, dtype=np.float32).reshape(-1, 6),
                   plans.padded(fills, _FLOAT)),
        linear, replicate, [(g[3], g[4], g[2]) for g in geom], dtype, corner)


# -- crop_mirror_normalize, cast, colour --------------------------------------------------


def _cmn_layout(ctx: OpContext) -> str:
    return "CHW" if ctx.args["output_layout"] == "CHW" else "HWC"


def _input_layout(ctx: OpContext) -> str:
    """``cast`` keeps its input's layout."""
    return ctx.input_layouts[0] if ctx.input_layouts else ""



@gpu_planner("crop_mirror_normalize", layout=_cmn_layout)
def crop_mirror_normalize_planner(ctx: OpContext) -> Planner:
    p = normalize.cmn_params(ctx)
    check_types(p.op, p.dtype, sources.CMN_OUTPUTS, "outputs")
    # mean and std are constants: the coefficients depend on the channels alone.
    coefficients = functools.lru_cache(maxsize=16)(p.coefficients)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = one_dtype(p.op, images)
        check_types(p.op, dtype, sources.CMN_INPUTS)

        def check(i: int, image: Any) -> None:
            check_image(p.op, image)
            _, _, h, w, _ = p.region(image.shape, targs[i])
            c = image.shape[2]
            ctx.limits.check_output((h, w, p.channels_out(c)), p.dtype)
            p.coefficients(c)

        shapes = shapes_of(images)
        if shapes is None:
            refuse(images, check)
        regions = p.regions(shapes, targs)
        if regions is None:
            refuse(images, check)
        y, x, h, w, mirror = regions
        c = shapes[:, 2]
        channels = np.unique(c).tolist()
        out_c = np.zeros(len(c), dtype=np.int64)
        for k in channels:
            out_c[c == k] = p.channels_out(k)
        if not outputs_allowed(ctx, np.stack([h, w, out_c], axis=1), p.dtype):
            refuse(images, check)
        try:
            coefs = {k: coefficients(k) for k in channels}
        except ConveyorError:  # mean or std have neither one value nor one per channel
            refuse(images, check)
        packed = plans.packed([((len(c), 9), np.int64),
                               ((len(c), max(channels, default=1)), _FLOAT),
                               ((len(c), max(channels, default=1)), _FLOAT)])
        geom, mul, add = packed.arrays
        for column, values in enumerate((shapes[:, 0], shapes[:, 1], c, y, x, h, w, mirror,
                                         out_c)):
            geom[:, column] = values
        for k, (k_mul, k_add) in coefs.items():
            rows = c == k
            mul[rows, :k], add[rows, :k] = k_mul, k_add
        shape = (out_c, h, w) if p.chw else (h, w, out_c)
        out_shapes = list(zip(*(v.tolist() for v in shape), strict=True))
        return plans.NormalizePlan(packed, p.chw, out_shapes, dtype, p.dtype)

    return plan


@gpu_planner("cast", layout=_input_layout)
def cast_planner(ctx: OpContext) -> Planner:
    op, dtype = ctx.op_type, np.dtype(ctx.args["dtype"])
    check_types(op, dtype, sources.CAST_TYPES, "outputs")

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        in_dtype = one_dtype(op, images)
        check_types(op, in_dtype, sources.CAST_TYPES, "samples")
        counts = [int(np.prod(v.shape)) for v in images]
        ctx.limits.check_bytes(max(counts, default=0) * dtype.itemsize,
                               f"its output would be {max(counts, default=0):,} values of "
                               f"{dtype}")
        return plans.CastPlan(plans.pack(np.array(counts, dtype=np.int64)),
                              [tuple(v.shape) for v in images], in_dtype, dtype)

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
        in_dtype = one_dtype(op, images)
        out = color.out_dtype(ctx, in_dtype)
        check_types(op, in_dtype, sources.COLOR_TYPES)
        check_types(op, out, sources.COLOR_TYPES, "outputs")
        geom: list[list[int]] = []
        coefs: list[np.ndarray] = []

        def one(i: int, image: Any) -> None:
            color.check_color_input(ctx, image, rgb=kind == "color_matrix")
            h, w, c = image.shape
            geom.append([h * w, c])
            coefs.append(params(targs[i], in_dtype, out).reshape(-1))

        each(images, one)
        width = 2 if kind == "brightness_contrast" else 12
        return plans.ColorPlan(kind, plans.pack(plans.rows(geom, 2),
                                                np.array(coefs, dtype=np.float32)
                                                .reshape(-1, width)),
                               [tuple(v.shape) for v in images], in_dtype, out)

    return plan
