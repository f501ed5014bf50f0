"""Decoders that output a window of the image: ``decoders.image_random_crop`` (the random
window of ``random_resized_crop``), ``decoders.image_crop`` (``crop``'s window) and
``decoders.image_slice`` (a window given per sample by its ``anchor`` and ``shape`` inputs).

Each is defined as decoding the whole image (``decode.decode_image``) and cropping it, and
gives exactly those bytes. All three go through ``decode_window``: where a JPEG's window
can be decoded alone with the same bytes (``jpeg_region.py``: nvImageCodec's CPU backend,
when installed, for the JPEG kinds it is exact on, and a window under half the image),
only the window is decoded; otherwise the whole image is decoded and the window is cut
from it. The window is drawn from the decoded image's size, which is the header's
(``image_header.py``) after EXIF orientation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.args import (
    Targs,
    crop_image,
    crop_window,
    cut_window,
    round_half_away,
    window_region,
)
from conveyor_server.engine.ops.decode import jpeg_region
from conveyor_server.engine.ops.decode.decode import check_file, decode_image
from conveyor_server.engine.ops.geometry.random_resized_crop import params_of, sample_index
from conveyor_server.engine.ops.geometry.random_window import Window, WindowDraws, random_window
from conveyor_server.engine.ops.probes.inputs import probe_files
from conveyor_server.engine.ops.probes.probe_set import Case, f32, indexed, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

#: (image height, image width) -> the window inside the image that is the output, or None
#: where the operator needs the whole image (a window to pad, or one that does not fit).
WindowOf = Callable[[int, int], Window | None]


def decode_window(data: np.ndarray, output_type: str, limits: EngineLimits,
                  window_of: WindowOf) -> tuple[np.ndarray, bool]:
    """Decode the file, or only the window ``window_of`` names from the image's size:
    ``(window, True)``, the window's pixels as a new C-contiguous array, exactly the whole
    decode's; or ``(image, False)``, the whole decoded image, where ``window_of`` returns
    None. Errors about the file are the whole decode's (``decode.decode_image``)."""
    size = None
    if jpeg_region.available() and check_file(data, limits) == "JPEG":
        size = jpeg_region.frame_size(data)
    if size is not None:  # a JPEG checked, upright (frame_size): not checked again
        win = window_of(*size)
        if win is None:
            return decode_image(data, output_type, limits, upright_jpeg=True), False
        if jpeg_region.worth_it(win, size):
            region = jpeg_region.decode(data, output_type, win)
            if region is not None:
                return region, True
        image = decode_image(data, output_type, limits, upright_jpeg=True)
    else:
        image = decode_image(data, output_type, limits)
        win = window_of(image.shape[0], image.shape[1])
        if win is None:
            return image, False
    return np.ascontiguousarray(image[win.y:win.y + win.h, win.x:win.x + win.w]), True


@register("decoders.image_random_crop")
def build_image_random_crop(ctx: OpContext) -> SampleOp:
    output_type, limits = ctx.args["output_type"], ctx.limits
    params = params_of(ctx)
    draws_of = WindowDraws(ctx.seed, ctx.index, params)

    def image_random_crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        draws = draws_of(sample_index(targs))
        image, _ = decode_window(inputs[0], output_type, limits,
                                 lambda h, w: random_window(h, w, params, draws))
        return (image,)

    return SampleOp(fn=image_random_crop, layouts=("HWC",), keyed=True)


@register("decoders.image_crop")
def build_image_crop(ctx: OpContext) -> SampleOp:
    output_type, limits = ctx.args["output_type"], ctx.limits
    window = crop_window(ctx, required=True)
    assert window is not None

    def image_crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        def inside(h: int, w: int) -> Window | None:
            region = window_region(window.anchor((h, w), targs), window.size, (h, w), "error")
            return None if region is None else Window(*region)

        image, cut = decode_window(inputs[0], output_type, limits, inside)
        if cut:
            return (image,)
        # DALI's decoders.image_crop refuses a window that does not fit ("error").
        return (np.ascontiguousarray(crop_image(window, image, targs, "error", (0.0,))),)

    return SampleOp(fn=image_crop, layouts=("HWC",))


#: Axis names of the slice's anchor and shape: index 0 is the image's height, 1 its width.
_AXIS_INDEX = {"H": 0, "W": 1}


def slice_axes(args: Mapping[str, Any]) -> tuple[int, ...]:
    """The image axes (0: height, 1: width) the anchor and shape give, in their order:
    ``axis_names`` when given, else ``axes`` (DALI's default ``"WH"``, that is (1, 0))."""
    names = args["axis_names"]
    axes = tuple(_AXIS_INDEX[n] for n in names) if names else tuple(args["axes"])
    if len(set(axes)) != len(axes):
        raise InvalidArgument(f"decoders.image_slice: argument "
                              f"'{'axis_names' if names else 'axes'}' names an axis twice")
    return axes


def slice_window(hw: tuple[int, int], anchor: np.ndarray, shape: np.ndarray,
                 axes: tuple[int, ...], normalized_anchor: bool,
                 normalized_shape: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """((y, x), (h, w)) of one sample's slice. Per axis, with the anchor ``a`` and shape
    ``s`` in pixels (times the extent where normalized), the slice runs from ``round(a)``
    to ``round(a + s)``, halves away from zero; axes not given are whole."""
    start, size = [0, 0], [hw[0], hw[1]]
    given = {"anchor": np.asarray(anchor, dtype=np.float64).reshape(-1),
             "shape": np.asarray(shape, dtype=np.float64).reshape(-1)}
    for name, values in given.items():
        if values.size != len(axes) or not all(math.isfinite(v) for v in values):
            raise InvalidArgument(f"decoders.image_slice: input '{name}' must hold "
                                  f"{len(axes)} finite numbers (one per axis), got "
                                  f"{values.tolist()}")
    for k, axis in enumerate(axes):
        a, s = float(given["anchor"][k]), float(given["shape"][k])
        a = a * hw[axis] if normalized_anchor else a
        s = s * hw[axis] if normalized_shape else s
        start[axis] = round_half_away(a)
        size[axis] = round_half_away(a + s) - start[axis]
        if size[axis] < 1:
            raise InvalidArgument(f"decoders.image_slice: the slice is {size[axis]} pixels "
                                  f"along axis {'HW'[axis]} (shape {s:g} from anchor {a:g}): "
                                  "each extent must be at least 1")
    return (start[0], start[1]), (size[0], size[1])


@register("decoders.image_slice")
def build_image_slice(ctx: OpContext) -> SampleOp:
    args, op, limits = ctx.args, ctx.op_type, ctx.limits
    output_type, policy = args["output_type"], args["out_of_bounds_policy"]
    fill_values = args["fill_values"] or (0.0,)
    axes = slice_axes(args)

    def image_slice(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        def inside(h: int, w: int) -> Window | None:
            anchor, size = slice_window((h, w), inputs[1], inputs[2], axes,
                                        args["normalized_anchor"], args["normalized_shape"])
            region = window_region(anchor, size, (h, w), "error")  # the slice, if inside
            if region is None:
                return None
            if policy == "pad":
                limits.check_output((*size, 1 if output_type == "GRAY" else 3),
                                    np.dtype(np.uint8))
            return Window(*region)

        image, cut = decode_window(inputs[0], output_type, limits, inside)
        if cut:
            return (image,)
        h, w = image.shape[:2]
        anchor, size = slice_window((h, w), inputs[1], inputs[2], axes,
                                    args["normalized_anchor"], args["normalized_shape"])
        if policy == "pad":
            limits.check_output((*size, image.shape[2]), image.dtype)
        out = cut_window(op, image, anchor, size, policy, fill_values)
        if out is None:
            raise InvalidArgument(
                f"{op}: the {size[0]}x{size[1]} slice at (y={anchor[0]}, x={anchor[1]}) does "
                f"not fit in the {h}x{w} image (out_of_bounds_policy='error'; 'pad' or "
                "'trim_to_shape' allow it)")
        if 0 in out.shape:
            raise InvalidArgument(f"{op}: the slice at (y={anchor[0]}, x={anchor[1]}) is "
                                  f"outside the {h}x{w} image: nothing is left to trim to")
        # A view into the decoded image is copied; a padded window is a new array already.
        return (np.array(out, order="C", copy=True) if out.base is not None else out,)

    return SampleOp(fn=image_slice, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("decoders.image_random_crop")
def _image_random_crop(variant: str) -> list[Case]:
    files = indexed([((np.frombuffer(data, dtype=np.uint8).copy(),), {})
                      for _, data in probe_files()], first=7)
    return [Case({"output_type": kind, "random_area": [0.1, 0.6]}, files, input_layouts=("",))
            for kind in ("RGB", "GRAY")]


@op_probe("decoders.image_crop")
def _image_crop(variant: str) -> list[Case]:
    pos = {"crop_pos_x": f32(0.25), "crop_pos_y": f32(0.8)}
    files = [((np.frombuffer(data, dtype=np.uint8).copy(),), pos) for _, data in probe_files()]
    return [Case({"output_type": "BGR", "crop": [3.0, 4.0]}, files, input_layouts=("",))]


@op_probe("decoders.image_slice")
def _image_slice(variant: str) -> list[Case]:
    files = [np.frombuffer(data, dtype=np.uint8).copy() for _, data in probe_files()]

    def fed(anchor: list[float],
            shape: list[float]) -> list[tuple[Sequence[np.ndarray], ProbeTargs]]:
        return [((f, np.array(anchor, dtype=np.float32), np.array(shape, dtype=np.float32)), {})
                for f in files]

    layouts = ("", "", "")
    return [
        Case({"output_type": "RGB"}, fed([0.25, 0.1], [0.5, 0.6]), layouts),
        Case({"output_type": "GRAY", "normalized_anchor": False, "normalized_shape": False,
              "axis_names": "HW"}, fed([1.0, 2.5], [3.0, 2.0]), layouts),
        Case({"output_type": "BGR", "out_of_bounds_policy": "pad", "fill_values": [7.0]},
             fed([-0.25, 0.5], [1.0, 0.75]), layouts),
        Case({"out_of_bounds_policy": "trim_to_shape", "axes": [0]}, fed([0.5], [0.9]), layouts),
    ]
