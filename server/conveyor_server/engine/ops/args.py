"""Helpers shared by the per-sample operators (rotate, resize, crop, flip, normalize).

Reading a scalar argument given as a constant or per sample, checking images, per-channel
values, DALI's rounding, OpenCV's interpolation codes, and the crop window shared by
``crop`` and ``crop_mirror_normalize``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.registry import OpContext

INTERP = {
    "nn": cv2.INTER_NEAREST,
    "linear": cv2.INTER_LINEAR,
    "cubic": cv2.INTER_CUBIC,
    "lanczos3": cv2.INTER_LANCZOS4,  # OpenCV has no Lanczos-3; Lanczos-4 is the closest
}

#: The most channels of an image OpenCV resizes (CV_CN_MAX).
CV_MAX_CHANNELS = 512
#: Sample types OpenCV warps and resizes with every interpolation.
WARP_DTYPES = frozenset(np.dtype(t) for t in ("uint8", "uint16", "int16", "float32", "float64"))

Targs = Mapping[str, np.ndarray]
#: Reads one scalar argument for one sample: the constant, or the sample's own value.
ArgGetter = Callable[[Targs], float]


# -- arguments and images ----------------------------------------------------------------


class ScalarArg:
    """A scalar argument given as a constant or fed per sample. Called with one sample's
    ``targs``: its value (per-sample values are checked against ``lo``/``hi`` then);
    ``batch``: a batch's values at once."""

    __slots__ = ("_constant", "_hi", "_lo", "_name", "_op")

    def __init__(self, op: str, name: str, lo: float | None, hi: float | None,
                 constant: float | None) -> None:
        self._op, self._name, self._lo, self._hi = op, name, lo, hi
        self._constant = constant

    def __call__(self, targs: Targs) -> float:
        if self._constant is not None:
            return self._constant
        name, lo, hi = self._name, self._lo, self._hi
        value = np.asarray(targs[name])
        if value.size != 1:
            raise InvalidArgument(f"{self._op}: argument '{name}' must be one number per "
                                  f"sample, got an array of shape {value.shape}")
        number = float(value.reshape(()))
        too_low = lo is not None and number < lo
        too_high = hi is not None and number > hi
        if not math.isfinite(number) or too_low or too_high:
            raise InvalidArgument(f"{self._op}: argument '{name}' got {number!r} for this "
                                  f"sample{_limits(lo, hi)}")
        return number

    def batch(self, targs: Sequence[Targs]) -> np.ndarray | None:
        """Each sample's value (float64, what calling it gives), or None where some
        sample's value would be refused (calling it with that sample's ``targs`` says
        why)."""
        if self._constant is not None:
            return np.full(len(targs), self._constant)
        name, lo, hi = self._name, self._lo, self._hi
        try:
            values = np.array([t[name] for t in targs], dtype=np.float64)
        except (KeyError, TypeError, ValueError):  # missing, not numbers, or ragged
            return None
        if values.size != len(targs):  # some sample's is not one number
            return None
        values = values.reshape(len(targs))
        ok = bool(np.isfinite(values).all()) and (lo is None or bool((values >= lo).all())) \
            and (hi is None or bool((values <= hi).all()))
        return values if ok else None


def scalar_arg(ctx: OpContext, name: str, lo: float | None = None,
               hi: float | None = None) -> ScalarArg:
    """A getter for a scalar argument given as a constant or fed per sample.

    Constants were range-checked against the schema already; per-sample values are checked
    here, against ``lo``/``hi``, when the sample runs.
    """
    constant = None if name in ctx.tensor_args else float(ctx.args[name])
    return ScalarArg(ctx.op_type, name, lo, hi, constant)


def _limits(lo: float | None, hi: float | None) -> str:
    if lo is not None and hi is not None:
        return f" (allowed: {lo:g} to {hi:g})"
    if lo is not None:
        return f" (must be >= {lo:g})"
    return "" if hi is None else f" (must be <= {hi:g})"


def check_image(op: str, image: np.ndarray, dtypes: frozenset[np.dtype] | None = None,
                max_channels: int | None = None) -> None:
    """Raise ``InvalidArgument`` unless ``image`` is HWC with at least one row, column and
    channel (a spec may feed any operator's output to an image operator), with a sample
    type in ``dtypes`` and at most ``max_channels`` channels."""
    if image.ndim != 3 or 0 in image.shape:
        raise InvalidArgument(f"{op}: expected an HWC image with at least one row, column and "
                              f"channel, got an array of shape {image.shape}")
    if max_channels is not None and image.shape[2] > max_channels:
        raise InvalidArgument(f"{op}: images of up to {max_channels} channels are supported, "
                              f"got {image.shape[2]}")
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


def round_half_away_each(x: np.ndarray) -> np.ndarray:
    """``round_half_away`` of each of ``x`` (float64, finite, below 2**63), int64: the same
    correctly rounded float64 steps."""
    return np.copysign(np.floor(np.abs(x) + 0.5), x).astype(np.int64)


def with_channels(result: np.ndarray, channels: int) -> np.ndarray:
    # OpenCV returns an (H, W) array for a one-channel (H, W, 1) input.
    return result.reshape(result.shape[0], result.shape[1], channels)


def cv_resize(image: np.ndarray, out_hw: tuple[int, int], interp: int) -> np.ndarray:
    """OpenCV's resize of an HWC image to ``out_hw`` with ``interp`` (a ``cv2.INTER_*``),
    keeping the channel axis."""
    out = cv2.resize(image, (out_hw[1], out_hw[0]), interpolation=interp)
    return with_channels(out, image.shape[2])


# -- crop window (crop, crop_mirror_normalize) -------------------------------------------


@dataclass(frozen=True)
class CropWindow:
    """The crop arguments shared by ``crop`` and ``crop_mirror_normalize``."""

    op: str
    #: (height, width) of the window, in pixels.
    size: tuple[int, int]
    pos_x: ScalarArg
    pos_y: ScalarArg

    def anchor(self, in_hw: tuple[int, int], targs: Targs) -> tuple[int, int]:
        """Top-left corner (y, x): ``round((in - crop) * pos)`` per axis, as DALI.

        Negative, or past the far edge, when the window is larger than the image.
        """
        (h, w), (ch, cw) = in_hw, self.size
        return (round_half_away((h - ch) * self.pos_y(targs)),
                round_half_away((w - cw) * self.pos_x(targs)))

    def anchors(self, heights: np.ndarray, widths: np.ndarray,
                targs: Sequence[Targs]) -> tuple[np.ndarray, np.ndarray] | None:
        """``anchor`` of each sample of a batch, (y, x) int64 arrays; None where some
        sample's position is refused (``anchor`` of that sample says why)."""
        pos_y, pos_x = self.pos_y.batch(targs), self.pos_x.batch(targs)
        if pos_y is None or pos_x is None:
            return None
        (ch, cw) = self.size
        return (round_half_away_each((heights - ch) * pos_y),
                round_half_away_each((widths - cw) * pos_x))

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


def crop_region(window: CropWindow, in_hw: tuple[int, int], targs: Targs,
                policy: str) -> tuple[int, int, int, int]:
    """The output's (y, x, height, width) in input coordinates under ``policy``: the window
    ("pad": parts may lie outside the image), the part inside it ("trim_to_shape"), or
    ``InvalidArgument`` when it does not fit ("error")."""
    anchor = window.anchor(in_hw, targs)
    region = window_region(anchor, window.size, in_hw, policy)
    if region is None:
        raise window.out_of_bounds(in_hw, anchor)
    return region


def window_region(anchor: tuple[int, int], size: tuple[int, int], in_hw: tuple[int, int],
                  policy: str) -> tuple[int, int, int, int] | None:
    """The (y, x, height, width) that a ``size`` window at ``anchor`` cuts from an ``in_hw``
    image under ``policy``; None where it does not fit and the policy is "error"."""
    (h, w), (y, x), (ch, cw) = in_hw, anchor, size
    if y >= 0 and x >= 0 and y + ch <= h and x + cw <= w:
        return y, x, ch, cw
    if policy == "error":
        return None
    if policy == "trim_to_shape":
        y0, y1, x0, x1 = max(y, 0), min(y + ch, h), max(x, 0), min(x + cw, w)
        return y0, x0, max(y0, y1) - y0, max(x0, x1) - x0
    return y, x, ch, cw


def window_regions(y: np.ndarray, x: np.ndarray, size: tuple[int, int], heights: np.ndarray,
                   widths: np.ndarray, policy: str,
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """``window_region`` of each sample of a batch (anchors ``y``, ``x``, images of
    ``heights`` x ``widths``), (y, x, height, width) int64 arrays; None where some window
    does not fit and the policy is "error"."""
    ch, cw = size
    if policy == "error":
        fits = (y >= 0) & (x >= 0) & (y + ch <= heights) & (x + cw <= widths)
        if not fits.all():
            return None
    if policy == "trim_to_shape":  # a window that fits is its own part inside the image
        y0, y1 = np.maximum(y, 0), np.minimum(y + ch, heights)
        x0, x1 = np.maximum(x, 0), np.minimum(x + cw, widths)
        return y0, x0, np.maximum(y0, y1) - y0, np.maximum(x0, x1) - x0
    return y, x, np.full(len(y), ch, dtype=np.int64), np.full(len(y), cw, dtype=np.int64)


def crop_image(window: CropWindow, image: np.ndarray, targs: Targs, policy: str,
               fill_values: Sequence[float]) -> np.ndarray:
    """Crop ``image`` under ``policy``; a view for "error" and "trim_to_shape", else a copy."""
    h, w, _ = image.shape
    anchor = window.anchor((h, w), targs)
    out = cut_window(window.op, image, anchor, window.size, policy, fill_values)
    if out is None:
        raise window.out_of_bounds((h, w), anchor)
    return out


def cut_window(op: str, image: np.ndarray, anchor: tuple[int, int], size: tuple[int, int],
               policy: str, fill_values: Sequence[float]) -> np.ndarray | None:
    """The ``size`` (h, w) window of ``image`` at ``anchor`` (y, x) under ``policy``: a view
    where it fits or is trimmed ("trim_to_shape"), a filled copy ("pad"); None where it does
    not fit and the policy is "error"."""
    h, w, channels = image.shape
    region = window_region(anchor, size, (h, w), policy)
    if region is None:
        return None
    y, x, ch, cw = region
    if policy != "pad" or (y >= 0 and x >= 0 and y + ch <= h and x + cw <= w):
        return image[y:y + ch, x:x + cw]
    y0, y1, x0, x1 = max(y, 0), min(y + ch, h), max(x, 0), min(x + cw, w)
    out = np.empty((ch, cw, channels), dtype=image.dtype)
    out[...] = crop_fill(op, fill_values, channels, image.dtype)  # pad: fill, then
    if y1 > y0 and x1 > x0:  # copy the part that overlaps
        out[y0 - y:y1 - y, x0 - x:x1 - x] = image[y0:y1, x0:x1]
    return out


def crop_fill(op: str, fill_values: Sequence[float], channels: int,
              dtype: np.dtype) -> np.ndarray:
    """The padding of a crop, one value per channel in ``dtype``."""
    return _saturated(per_channel(op, "fill_values", fill_values, channels), dtype)


def _saturated(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Fill values converted to ``dtype``, rounded and clamped to its range for integers."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return np.clip(np.rint(values), info.min, info.max).astype(dtype)
    return values.astype(dtype)
