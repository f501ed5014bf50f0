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

resize, random_resized_crop and crop_mirror_normalize plan the whole batch with numpy (the
batched forms of the same parameter code: ``random_windows``, ``resize_plans``,
``CmnParams.regions``; the passes in ``resize_batch.py``), with what does not depend on the
sample (filters, normalisation coefficients) kept by the planner. Their checks run over the
batch too; where one fails, the samples are checked one by one as the operator checks one
sample (``_refuse``), so the error names the first sample refused and why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import numpy as np

from conveyor.errors import ConveyorError, Internal, InvalidArgument, SpecError
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
from conveyor_server.engine.ops.cuda.resize_batch import ResizeBatcher
from conveyor_server.engine.ops.geometry import random_resized_crop, resize, rotate, warp_affine
from conveyor_server.engine.ops.geometry.random_window import (
    random_windows,
    window_draws_batch,
)
from conveyor_server.engine.ops.geometry.resize_filters import FILTERED_INTERP
from conveyor_server.engine.ops.normalize import normalize
from conveyor_server.engine.ops.registry import SAMPLE_INDEX, OpContext, SampleFailed

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


def _refuse(images: Sequence[Any], check: Callable[[int, Any], None]) -> NoReturn:
    """Raise the error of the first sample ``check`` refuses (checking one sample as the
    operator does), where a check over the batch found one."""
    _each(images, check)
    raise Internal("a check over the batch refused a sample that the checks of each sample "
                   "pass: report this as a bug of the GPU planners")


def _shapes(images: Sequence[Any]) -> np.ndarray | None:
    """The images' shapes, (N, 3) int64; None where some sample is not an HWC image with
    a row, a column and a channel (``check_image`` refuses it)."""
    shapes = [image.shape for image in images]
    if any(len(s) != 3 for s in shapes):
        return None
    out = np.array(shapes, dtype=np.int64).reshape(len(shapes), 3)
    return out if out.size == 0 or out.min() >= 1 else None


def _outputs_allowed(ctx: OpContext, shapes: np.ndarray, dtype: np.dtype) -> bool:
    """Whether ``ctx.limits.check_output`` passes every row of ``shapes``. What it bounds
    grows with each extent (the larger of height and width, the pixels, the bytes), so
    where the largest extents of the batch pass, every sample does; else each distinct
    shape is checked."""
    if len(shapes) == 0:
        return True
    try:
        ctx.limits.check_output(tuple(shapes.max(axis=0).tolist()), dtype)
        return True
    except ConveyorError:
        pass
    for shape in set(map(tuple, shapes.tolist())):
        try:
            ctx.limits.check_output(shape, dtype)
        except ConveyorError:
            return False
    return True


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
        plans.pack(plans.rows(geom, 5), np.array(matrices, dtype=np.float32).reshape(-1, 6),
                   plans.padded(fills, _FLOAT)),
        linear, replicate, [(g[3], g[4], g[2]) for g in geom], dtype, corner)


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
    batcher = ResizeBatcher(params.interp_type, params.antialias)
    # The output size of an input size and a requested size, for the sizes met last.
    output_size = functools.lru_cache(maxsize=4096)(params.request.output_size)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        _types(op, dtype, sources.RESIZE_TYPES)
        work = params.work_dtype(dtype)

        def check(i: int, image: Any) -> None:
            check_image(op, image)
            h, w, c = image.shape
            out_hw = params.output_size((h, w), targs[i])
            ctx.limits.check_output((*out_hw, c), work)

        shapes = _shapes(images)
        if shapes is None:
            _refuse(images, check)
        try:
            outs = np.array([output_size((h, w), params.requested(t))
                             for (h, w), t in zip(shapes[:, :2].tolist(), targs, strict=True)],
                            dtype=np.int64).reshape(len(shapes), 2)
        except ConveyorError:  # a size fed per sample that is refused
            _refuse(images, check)
        if not _outputs_allowed(ctx, np.concatenate([outs, shapes[:, 2:]], axis=1), work):
            _refuse(images, check)
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
    _check_interp(op, interp_type)
    batcher = ResizeBatcher(interp_type, antialias)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(op, images)
        _types(op, dtype, sources.RESIZE_TYPES)

        def check(i: int, image: Any) -> None:
            check_image(op, image)
            ctx.limits.check_output((*out_hw, image.shape[2]), dtype)

        shapes = _shapes(images)
        if shapes is None:
            _refuse(images, check)
        outs = np.empty((len(shapes), 2), dtype=np.int64)
        outs[:] = out_hw
        if not _outputs_allowed(ctx, np.concatenate([outs, shapes[:, 2:]], axis=1), dtype):
            _refuse(images, check)
        # Each sample's keyed draws, by its global index (``random_resized_crop.sample_index``).
        indices = np.array([t[SAMPLE_INDEX] for t in targs], dtype=np.uint64).reshape(len(targs))
        draws = window_draws_batch(ctx.seed, ctx.index, indices, window_params)
        windows = np.stack(random_windows(shapes[:, 0], shapes[:, 1], window_params, draws),
                           axis=1)
        return batcher.plan(shapes, windows, outs, dtype, dtype)

    return plan


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
    # mean and std are constants: the coefficients depend on the channels alone.
    coefficients = functools.lru_cache(maxsize=16)(p.coefficients)

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtype = _one_dtype(p.op, images)
        _types(p.op, dtype, sources.CMN_INPUTS)

        def check(i: int, image: Any) -> None:
            check_image(p.op, image)
            _, _, h, w, _ = p.region(image.shape, targs[i])
            c = image.shape[2]
            ctx.limits.check_output((h, w, p.channels_out(c)), p.dtype)
            p.coefficients(c)

        shapes = _shapes(images)
        if shapes is None:
            _refuse(images, check)
        regions = p.regions(shapes, targs)
        if regions is None:
            _refuse(images, check)
        y, x, h, w, mirror = regions
        c = shapes[:, 2]
        channels = np.unique(c).tolist()
        out_c = np.zeros(len(c), dtype=np.int64)
        for k in channels:
            out_c[c == k] = p.channels_out(k)
        if not _outputs_allowed(ctx, np.stack([h, w, out_c], axis=1), p.dtype):
            _refuse(images, check)
        try:
            coefs = {k: coefficients(k) for k in channels}
        except ConveyorError:  # mean or std have neither one value nor one per channel
            _refuse(images, check)
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
    _types(op, dtype, sources.CAST_TYPES, "outputs")

    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        in_dtype = _one_dtype(op, images)
        _types(op, in_dtype, sources.CAST_TYPES, "samples")
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
        return plans.ColorPlan(kind, plans.pack(plans.rows(geom, 2),
                                                np.array(coefs, dtype=np.float32)
                                                .reshape(-1, width)),
                               [tuple(v.shape) for v in images], in_dtype, out)

    return plan
