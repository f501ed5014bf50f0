"""Geometric per-sample operators: ``rotate``, ``resize``, ``crop`` and ``flip``.

Semantics follow NVIDIA DALI's operators of the same names. Images are HWC numpy arrays;
warps and resizes run in OpenCV, which releases the GIL while it works. Every output is a
new, writable, C-contiguous array.

Coordinates: DALI puts pixel centres at half-integers (the image spans ``[0, w] x [0, h]``);
OpenCV puts them at integers. A DALI point ``p`` is OpenCV's ``p - 0.5``, so both agree on
where the centre of an image is: ``(w / 2, h / 2)`` for DALI, ``((w - 1) / 2, (h - 1) / 2)``
for OpenCV.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.ops.registry import BuiltOp, OpContext, register

INTERP = {
    "nn": cv2.INTER_NEAREST,
    "linear": cv2.INTER_LINEAR,
    "cubic": cv2.INTER_CUBIC,
    "lanczos3": cv2.INTER_LANCZOS4,  # OpenCV has no Lanczos-3; Lanczos-4 is the closest
}

#: Sample types OpenCV warps and resizes with every interpolation.
WARP_DTYPES = frozenset(np.dtype(t) for t in ("uint8", "uint16", "int16", "float32", "float64"))

Targs = Mapping[str, np.ndarray]
#: Reads one scalar argument for one sample: the constant, or the sample's own value.
ArgGetter = Callable[[Targs], float]


# -- shared helpers (also used by conveyor_server.ops.normalize) -------------------------


def scalar_arg(ctx: OpContext, name: str, lo: float | None = None,
               hi: float | None = None) -> ArgGetter:
    """A getter for a scalar argument given as a constant or fed per sample.

    Constants were range-checked against the schema already; per-sample values are checked
    here, against ``lo``/``hi``, when the sample runs.
    """
    if name not in ctx.tensor_args:
        constant = float(ctx.args[name])
        return lambda targs: constant
    op = ctx.op_type

    def per_sample(targs: Targs) -> float:
        value = np.asarray(targs[name])
        if value.size != 1:
            raise InvalidArgument(f"{op}: argument '{name}' must be one number per sample, "
                                  f"got an array of shape {value.shape}")
        number = float(value.reshape(()))
        too_low = lo is not None and number < lo
        too_high = hi is not None and number > hi
        if not math.isfinite(number) or too_low or too_high:
            raise InvalidArgument(f"{op}: argument '{name}' got {number!r} for this sample"
                                  f"{_limits(lo, hi)}")
        return number

    return per_sample


def _limits(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" (allowed: {lo:g} to {hi:g})"
    if lo is not None:
        return f" (must be >= {lo:g})"
    return "" if hi is None else f" (must be <= {hi:g})"


def check_image(op: str, image: np.ndarray, dtypes: frozenset[np.dtype] | None = None) -> None:
    """Raise ``InvalidArgument`` unless ``image`` is HWC (with a sample type in ``dtypes``)."""
    if image.ndim != 3:
        raise InvalidArgument(f"{op}: expected an HWC image, got an array of shape {image.shape}")
    if dtypes is not None and image.dtype not in dtypes:
        names = ", ".join(sorted(str(t) for t in dtypes))
        raise InvalidArgument(f"{op}: images of type {image.dtype} are not supported "
                              f"(supported: {names})")


def per_channel(op: str, name: str, values: Sequence[float], channels: int) -> np.ndarray:
    """One value per channel from an argument holding one value or one per channel."""
    if len(values) == 1:
        return np.full(channels, values[0], dtype=np.float64)
    if len(values) != channels:
        raise InvalidArgument(f"{op}: argument '{name}' has {len(values)} values, but the image "
                              f"has {channels} channels (give one value, or one per channel)")
    return np.asarray(values, dtype=np.float64)


def round_half_away(x: float) -> int:
    """Round to nearest, halves away from zero (C's ``round``, which DALI uses)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _with_channels(result: np.ndarray, channels: int) -> np.ndarray:
    # OpenCV returns an (H, W) array for a one-channel (H, W, 1) input.
    return result.reshape(result.shape[0], result.shape[1], channels)


# -- rotate ------------------------------------------------------------------------------


def rotated_canvas(h: int, w: int, degrees: float) -> tuple[int, int]:
    """The (height, width) of the smallest canvas holding an ``h`` x ``w`` image rotated.

    As DALI: the bounding box is rounded up (with a 0.01 px tolerance, so that 90 degrees
    gives exactly the swapped extents), then each output extent gets one more pixel if its
    parity differs from that of the input extent it mostly comes from (the width for
    rotations within 45 degrees of upright, else the height). Equal parity keeps the
    rotation centre on the pixel grid, which avoids blurring the whole image.
    """
    rad = math.radians(degrees)
    c, s = abs(math.cos(rad)), abs(math.sin(rad))
    out_w = math.ceil(c * w + s * h - 0.01)
    out_h = math.ceil(c * h + s * w - 0.01)
    parity_w, parity_h = (w % 2, h % 2) if s <= c else (h % 2, w % 2)
    out_w += int(out_w % 2 != parity_w)
    out_h += int(out_h % 2 != parity_h)
    return out_h, out_w


def rotation_matrix(in_hw: tuple[int, int], out_hw: tuple[int, int],
                    degrees: float) -> np.ndarray:
    """The 2x3 output-to-input map, in OpenCV pixel coordinates, for ``cv2.WARP_INVERSE_MAP``.

    A positive angle turns the content counter-clockwise as displayed (DALI: "counter-
    clockwise, assuming the top-left corner is at (0, 0)"). The input centre lands on the
    output centre.
    """
    rad = math.radians(degrees)
    # Snap values within rounding error of 0 or +-1, so that multiples of 90 degrees are
    # exact permutations of pixels (no interpolation blur).
    cos, sin = (round(v) if abs(v - round(v)) < 1e-12 else v
                for v in (math.cos(rad), math.sin(rad)))
    in_cy, in_cx = (in_hw[0] - 1) / 2, (in_hw[1] - 1) / 2
    out_cy, out_cx = (out_hw[0] - 1) / 2, (out_hw[1] - 1) / 2
    # Source = R(angle) (dest - out_centre) + in_centre, y pointing down.
    return np.array([
        [cos, -sin, in_cx - cos * out_cx + sin * out_cy],
        [sin, cos, in_cy - sin * out_cx - cos * out_cy],
    ], dtype=np.float64)


def warp_affine(image: np.ndarray, inverse: np.ndarray, out_hw: tuple[int, int], interp: int,
                fill: np.ndarray | None) -> np.ndarray:
    """``cv2.warpAffine`` of an HWC image; ``fill`` None replicates the border pixels."""
    channels = image.shape[2]
    if channels > 4:  # OpenCV's cubic and Lanczos warps take at most 4 channels
        groups = [warp_affine(np.ascontiguousarray(image[:, :, i:i + 4]), inverse, out_hw,
                              interp, None if fill is None else fill[i:i + 4])
                  for i in range(0, channels, 4)]
        return np.concatenate(groups, axis=2)
    if fill is None:
        border: dict[str, Any] = {"borderMode": cv2.BORDER_REPLICATE}
    else:
        border = {"borderMode": cv2.BORDER_CONSTANT, "borderValue": tuple(fill.tolist())}
    out = cv2.warpAffine(image, inverse, (out_hw[1], out_hw[0]),
                         flags=interp | cv2.WARP_INVERSE_MAP, **border)
    return _with_channels(out, channels)


@register("rotate")
def build_rotate(ctx: OpContext) -> BuiltOp:
    op, args = ctx.op_type, ctx.args
    size = args["size"]
    if size is not None and args["keep_size"]:
        raise SpecError(op, "size", "cannot be combined with keep_size=True")
    # DALI reads `size` in tensor-shape order: (height, width) for HWC images.
    out_size = None if size is None else (max(1, round_half_away(size[0])),
                                          max(1, round_half_away(size[1])))
    keep_size = bool(args["keep_size"])
    angle = scalar_arg(ctx, "angle")
    interp = INTERP[args["interp_type"]]
    # DALI's warps interpolate with nn or linear only; cubic and lanczos3 are extras here.
    fill_value = args["fill_value"] or None  # unset or empty: replicate the border (DALI)

    def rotate(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, WARP_DTYPES)
        degrees = angle(targs)
        in_hw = (image.shape[0], image.shape[1])
        if out_size is not None:
            out_hw = out_size
        elif keep_size:
            out_hw = in_hw
        else:
            out_hw = rotated_canvas(in_hw[0], in_hw[1], degrees)
        fill = None if fill_value is None else \
            per_channel(op, "fill_value", fill_value, image.shape[2])
        matrix = rotation_matrix(in_hw, out_hw, degrees)
        return (warp_affine(image, matrix, out_hw, interp, fill),)

    return BuiltOp(fn=rotate, layouts=("HWC",))


# -- resize ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResizeRequest:
    """How the output size of ``resize`` is chosen (DALI's ``ResizeAttr``)."""

    #: "default", "stretch", "not_smaller" or "not_larger".
    mode: str
    #: (height, width) limits; 0 means no limit.
    max_hw: tuple[float, float]

    def output_size(self, in_hw: tuple[int, int], req_hw: tuple[float, float]) -> tuple[int, int]:
        """The output (height, width) for an input of ``in_hw`` asked to be ``req_hw``.

        A requested extent of 0 is unspecified. ``default`` scales unspecified extents by
        the geometric mean of the specified extents' scales (keeping the aspect ratio when
        one extent is given); ``stretch`` leaves them as they are; ``not_smaller`` and
        ``not_larger`` scale every extent by the largest / smallest specified scale.
        ``max_size`` clamps each extent, except in the last two modes, where it lowers the
        common scale so the aspect ratio is kept.
        """
        given = [r > 0 and n > 0 for r, n in zip(req_hw, in_hw, strict=True)]
        if not any(given):
            return in_hw
        scales = [r / n if g else 0.0 for r, n, g in zip(req_hw, in_hw, given, strict=True)]
        if self.mode in ("default", "stretch"):
            known = [s for s, g in zip(scales, given, strict=True) if g]
            fallback = math.prod(known) ** (1 / len(known)) if self.mode == "default" else 1.0
            out = [n * (s if g else fallback) for n, s, g in zip(in_hw, scales, given, strict=True)]
            out = [min(o, m) if m > 0 else o for o, m in zip(out, self.max_hw, strict=True)]
        else:
            known = [s for s, g in zip(scales, given, strict=True) if g]
            scale = max(known) if self.mode == "not_smaller" else min(known)
            for n, m in zip(in_hw, self.max_hw, strict=True):
                if m > 0:
                    scale = min(scale, m / n)
            out = [n * scale for n in in_hw]
        return max(1, round_half_away(out[0])), max(1, round_half_away(out[1]))


def _resize_request(ctx: OpContext) -> ResizeRequest:
    """Validate how the size is given (exactly one way, as DALI) and the mode."""
    op, args = ctx.op_type, ctx.args
    separate = any(args[n] or n in ctx.tensor_args for n in ("resize_x", "resize_y"))
    ways = {
        "resize_x": separate,
        "size": args["size"] is not None,
        "resize_shorter": args["resize_shorter"] > 0,
        "resize_longer": args["resize_longer"] > 0,
    }
    given = [name for name, used in ways.items() if used]
    if not given:
        raise SpecError(op, "size", "nothing to resize to: give resize_x and/or resize_y, "
                                    "size, resize_shorter or resize_longer")
    if len(given) > 1:
        first = "resize_x/resize_y" if given[0] == "resize_x" else given[0]
        raise SpecError(op, given[1], f"cannot be combined with {first}: give the output size "
                                      "one way only")
    mode = args["mode"]
    if given[0] in ("resize_shorter", "resize_longer"):
        if mode != "default":
            raise SpecError(op, "mode", f"cannot be combined with {given[0]}")
        # DALI: resize_shorter is size (s, s) with mode not_smaller; resize_longer not_larger.
        mode = "not_smaller" if given[0] == "resize_shorter" else "not_larger"
    max_size = args["max_size"] or (0.0,)
    # Like `size`, a per-axis max_size is in tensor-shape order: (height, width).
    max_hw = (max_size[0], max_size[-1])
    return ResizeRequest(mode=mode, max_hw=max_hw)


def _requested_size(ctx: OpContext) -> Callable[[Targs], tuple[float, float]]:
    """The (height, width) asked for, per sample; 0 leaves an extent unspecified."""
    args = ctx.args
    if args["size"] is not None:
        # DALI's `size` has one entry per spatial dimension in layout order: (H, W) for HWC.
        size = (float(args["size"][0]), float(args["size"][1]))
        return lambda targs: size
    for name in ("resize_shorter", "resize_longer"):
        if args[name] > 0:
            both = (float(args[name]), float(args[name]))
            return lambda targs: both
    get_y, get_x = scalar_arg(ctx, "resize_y", lo=0), scalar_arg(ctx, "resize_x", lo=0)
    return lambda targs: (get_y(targs), get_x(targs))


def _cv_resize(image: np.ndarray, out_hw: tuple[int, int], interp: int) -> np.ndarray:
    out = cv2.resize(image, (out_hw[1], out_hw[0]), interpolation=interp)
    return _with_channels(out, image.shape[2])


def resize_image(image: np.ndarray, out_hw: tuple[int, int], interp_type: str,
                 antialias: bool) -> np.ndarray:
    """Resize an HWC image to ``out_hw``.

    DALI antialiases downscaling by widening its filter. OpenCV's ``INTER_AREA`` does the
    same for the linear filter, so linear + antialias uses it along each shrinking axis;
    cubic and lanczos3 are not antialiased here (a simplification).
    """
    (h, w), (out_h, out_w) = image.shape[:2], out_hw
    if out_hw == (h, w):
        return image.copy()
    if not (antialias and interp_type == "linear") or (out_h >= h and out_w >= w):
        return _cv_resize(image, out_hw, INTERP[interp_type])
    if out_h <= h and out_w <= w:
        return _cv_resize(image, out_hw, cv2.INTER_AREA)
    # One axis shrinks and the other grows: area-average along the shrinking one first.
    if out_w < w:
        narrow = _cv_resize(image, (h, out_w), cv2.INTER_AREA)
    else:
        narrow = _cv_resize(image, (out_h, w), cv2.INTER_AREA)
    return _cv_resize(narrow, out_hw, cv2.INTER_LINEAR)


@register("resize")
def build_resize(ctx: OpContext) -> BuiltOp:
    op, args = ctx.op_type, ctx.args
    request = _resize_request(ctx)
    requested = _requested_size(ctx)
    interp_type, antialias = args["interp_type"], bool(args["antialias"])
    out_dtype = args["dtype"]  # "" keeps the input type (DALI); "float32" or "uint8"

    def resize(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, WARP_DTYPES)
        if out_dtype == "float32" and image.dtype != np.float32:
            image = image.astype(np.float32)  # resample in float: no rounding to the input type
        elif out_dtype == "uint8" and image.dtype != np.uint8:
            # DALI: the output type must be the input type or float.
            raise InvalidArgument(f"{op}: dtype='uint8' needs uint8 images, got {image.dtype}")
        out_hw = request.output_size((image.shape[0], image.shape[1]), requested(targs))
        return (resize_image(image, out_hw, interp_type, antialias),)

    return BuiltOp(fn=resize, layouts=("HWC",))


# -- crop --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CropWindow:
    """The crop arguments shared by ``crop`` and ``crop_mirror_normalize``."""

    op: str
    #: (height, width) of the window, in pixels.
    size: tuple[int, int]
    pos_x: ArgGetter
    pos_y: ArgGetter

    def anchor(self, in_hw: tuple[int, int], targs: Targs) -> tuple[int, int]:
        """Top-left corner (y, x): ``round((in - crop) * pos)`` per axis, as DALI.

        Negative, or past the far edge, when the window is larger than the image.
        """
        (h, w), (ch, cw) = in_hw, self.size
        return (round_half_away((h - ch) * self.pos_y(targs)),
                round_half_away((w - cw) * self.pos_x(targs)))

    def out_of_bounds(self, in_hw: tuple[int, int], anchor: tuple[int, int]) -> InvalidArgument:
        (h, w), (ch, cw), (y, x) = in_hw, self.size, anchor
        return InvalidArgument(
            f"{self.op}: the {ch}x{cw} crop window at (y={y}, x={x}) does not fit in the "
            f"{h}x{w} image (out_of_bounds_policy='error'; 'pad' or 'trim_to_shape' allow it)")


def crop_window(ctx: OpContext, *, required: bool) -> CropWindow | None:
    """The crop window from ``crop`` or ``crop_h``/``crop_w``; None when neither is given."""
    op, args = ctx.op_type, ctx.args
    crop, crop_h, crop_w = args["crop"], args["crop_h"], args["crop_w"]
    if crop is not None and (crop_h or crop_w):
        name = "crop_h" if crop_h else "crop_w"
        raise SpecError(op, name, "cannot be combined with 'crop' (give crop=(h, w), or "
                                  "crop_h and crop_w)")
    if bool(crop_h) != bool(crop_w):
        raise SpecError(op, "crop_w" if crop_h else "crop_h",
                        "crop_h and crop_w must be given together")
    hw = crop if crop is not None else ((crop_h, crop_w) if crop_h else None)
    if hw is None:
        if required:
            raise SpecError(op, "crop", "missing crop size: give crop=(h, w), or crop_h and "
                                        "crop_w")
        return None
    # DALI truncates fractional window sizes to whole pixels.
    size = (int(hw[0]), int(hw[1]))
    if min(size) < 1:
        raise SpecError(op, "crop_h" if crop is None else "crop",
                        f"got a window of {hw[0]:g}x{hw[1]:g}; each extent must be >= 1")
    return CropWindow(op, size, pos_x=scalar_arg(ctx, "crop_pos_x", 0, 1),
                      pos_y=scalar_arg(ctx, "crop_pos_y", 0, 1))


def crop_image(window: CropWindow, image: np.ndarray, targs: Targs, policy: str,
               fill_values: Sequence[float]) -> np.ndarray:
    """Crop ``image`` under ``policy``; a view for "error" and "trim_to_shape", else a copy."""
    h, w, channels = image.shape
    y, x = window.anchor((h, w), targs)
    ch, cw = window.size
    inside = y >= 0 and x >= 0 and y + ch <= h and x + cw <= w
    if inside:
        return image[y:y + ch, x:x + cw]
    if policy == "error":
        raise window.out_of_bounds((h, w), (y, x))
    y0, y1, x0, x1 = max(y, 0), min(y + ch, h), max(x, 0), min(x + cw, w)
    if policy == "trim_to_shape":
        return image[y0:max(y0, y1), x0:max(x0, x1)]
    fill = per_channel(window.op, "fill_values", fill_values, channels)
    out = np.empty((ch, cw, channels), dtype=image.dtype)
    out[...] = _saturated(fill, image.dtype)  # pad: fill, then copy the part that overlaps
    if y1 > y0 and x1 > x0:
        out[y0 - y:y1 - y, x0 - x:x1 - x] = image[y0:y1, x0:x1]
    return out


def _saturated(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Fill values converted to ``dtype``, rounded and clamped to its range for integers."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)


@register("crop")
def build_crop(ctx: OpContext) -> BuiltOp:
    op, args = ctx.op_type, ctx.args
    window = crop_window(ctx, required=True)
    assert window is not None
    policy = args["out_of_bounds_policy"]
    fill_values = args["fill_values"] or (0.0,)  # DALI's default fill is 0

    def crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image)
        out = crop_image(window, image, targs, policy, fill_values)
        # A view into the input is copied; a padded window is already a new array.
        return (np.array(out, order="C", copy=True) if out.base is not None else out,)

    return BuiltOp(fn=crop, layouts=("HWC",))


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
        return _with_channels(cv2.flip(image, code), image.shape[2])
    rows = slice(None, None, -1 if vertical else 1)
    cols = slice(None, None, -1 if horizontal else 1)
    return np.array(image[rows, cols], order="C", copy=True)


@register("flip")
def build_flip(ctx: OpContext) -> BuiltOp:
    op = ctx.op_type
    horizontal = scalar_arg(ctx, "horizontal", 0, 1)
    vertical = scalar_arg(ctx, "vertical", 0, 1)

    def flip(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image)
        return (flip_image(image, bool(horizontal(targs)), bool(vertical(targs))),)

    return BuiltOp(fn=flip, layouts=("HWC",))
