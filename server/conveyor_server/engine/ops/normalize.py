"""Per-sample operators that change values and types: ``crop_mirror_normalize`` and ``cast``.

Semantics follow NVIDIA DALI's operators of the same names. Conversions to integer types
round to nearest and saturate, as DALI's ``ConvertSat``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor.errors import SpecError
from conveyor_server.engine.ops.args import (
    Targs,
    check_image,
    crop_image,
    crop_window,
    per_channel,
    scalar_arg,
)
from conveyor_server.engine.ops.registry import BuiltOp, OpContext, register

# -- conversions -------------------------------------------------------------------------


def saturate_cast(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` as a new C-contiguous array of ``dtype``, converted as DALI's ``ConvertSat``.

    Floats to integers round to nearest (ties to even) and clamp to the type's range; NaN
    becomes 0 (DALI leaves it undefined). Integers to narrower integers clamp. Anything to
    bool is ``x != 0``. To floats, values out of range become infinite.
    """
    if dtype == np.bool_:
        return np.ascontiguousarray(np.not_equal(x, 0))
    if dtype.kind in "iu" and x.dtype.kind == "f":
        return _float_to_int(x, dtype)
    if dtype.kind in "iu" and x.dtype.kind in "iu":
        return _int_to_int(x, dtype)
    with np.errstate(over="ignore"):
        return x.astype(dtype, order="C")


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    # float32 holds every 8- and 16-bit integer exactly; wider types need float64.
    wide = dtype.itemsize >= 4 or x.dtype == np.float64
    work = np.dtype(np.float64 if wide else np.float32)
    rounded = np.rint(x, dtype=work)
    np.copyto(rounded, 0, where=np.isnan(rounded))
    info = np.iinfo(dtype)
    lo, hi = work.type(info.min), work.type(info.max)
    if int(hi) <= info.max:
        np.clip(rounded, lo, hi, out=rounded)
        return rounded.astype(dtype, order="C")
    # 64-bit types: the maximum rounds up to 2**63 (2**64) in float64, which does not fit.
    over = rounded >= hi
    np.clip(rounded, lo, np.nextafter(hi, work.type(0)), out=rounded)
    result = rounded.astype(dtype, order="C")
    result[over] = info.max
    return result


def _int_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    src, dst = np.iinfo(x.dtype), np.iinfo(dtype)
    lo, hi = max(src.min, dst.min), min(src.max, dst.max)
    if lo > src.min or hi < src.max:
        x = np.clip(x, x.dtype.type(lo), x.dtype.type(hi))
    return x.astype(dtype, order="C")


# -- crop_mirror_normalize ---------------------------------------------------------------


def _next_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _check_mean_std(op: str, mean: Sequence[float], std: Sequence[float]) -> None:
    if not mean:
        raise SpecError(op, "mean", "must have at least one value")
    if not std:
        raise SpecError(op, "std", "must have at least one value")
    if any(s == 0 for s in std):
        raise SpecError(op, "std", f"got {list(std)}: values must be non-zero")
    if len(mean) > 1 and len(std) > 1 and len(mean) != len(std):
        raise SpecError(op, "std", f"has {len(std)} values but mean has {len(mean)}: give one "
                                   "value, or one per channel, for each")


def normalize(view: np.ndarray, mul: np.ndarray, add: np.ndarray, dtype: np.dtype, *,
              chw: bool, channels_out: int) -> np.ndarray:
    """``view * mul + add`` per channel, in float32, into a new array of ``dtype``.

    The output is CHW (``chw``) or HWC, with ``channels_out`` channels: those past the
    input's are 0.
    """
    h, w, c = view.shape
    if chw:
        src = view.transpose(2, 0, 1)
        mul, add = mul.reshape(c, 1, 1), add.reshape(c, 1, 1)
    else:
        # Rows as runs of W*C values with the coefficients tiled to match: numpy then loops
        # along whole rows rather than over each pixel's C values (several times faster).
        src = np.ascontiguousarray(view).reshape(h, w * c)
        mul, add = np.tile(mul, w), np.tile(add, w)
    work = np.empty(src.shape, dtype=np.float32)
    np.multiply(src, mul, out=work, casting="unsafe")
    np.add(work, add, out=work)
    work = work.reshape((c, h, w) if chw else (h, w, c))
    result = work if dtype == np.float32 else saturate_cast(work, dtype)
    if channels_out == c:
        return result
    padded = np.zeros((channels_out, h, w) if chw else (h, w, channels_out), dtype=dtype)
    if chw:
        padded[:c] = result
    else:
        padded[:, :, :c] = result
    return padded


@register("crop_mirror_normalize")
def build_crop_mirror_normalize(ctx: OpContext) -> BuiltOp:
    op, args = ctx.op_type, ctx.args
    window = crop_window(ctx, required=False)  # no crop arguments: the whole image (DALI)
    mirror = scalar_arg(ctx, "mirror", 0, 1)
    mean, std = args["mean"], args["std"]
    _check_mean_std(op, mean, std)
    scale, shift = float(args["scale"]), float(args["shift"])
    dtype = np.dtype(args["dtype"])
    chw = args["output_layout"] == "CHW"
    pad_output = bool(args["pad_output"])

    def crop_mirror_normalize(inputs: Sequence[np.ndarray],
                              targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image)
        # This schema has no out_of_bounds_policy for this operator: DALI's default, "error".
        view = image if window is None else crop_image(window, image, targs, "error", (0.0,))
        if mirror(targs):
            view = view[:, ::-1]
        c = view.shape[2]
        # out = (in - mean) / std * scale + shift, folded into one multiply-add per channel.
        mul = scale / per_channel(op, "std", std, c)
        add = shift - per_channel(op, "mean", mean, c) * mul
        # DALI pads to the next power of two channels (3 -> 4) with 0.
        channels_out = _next_pow2(c) if pad_output else c
        return (normalize(view, mul.astype(np.float32), add.astype(np.float32), dtype,
                          chw=chw, channels_out=channels_out),)

    return BuiltOp(fn=crop_mirror_normalize, layouts=("CHW" if chw else "HWC",))


# -- cast --------------------------------------------------------------------------------


@register("cast")
def build_cast(ctx: OpContext) -> BuiltOp:
    dtype = np.dtype(ctx.args["dtype"])
    layout = ctx.input_layouts[0] if ctx.input_layouts else ""

    def cast(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        return (saturate_cast(np.asarray(inputs[0]), dtype),)

    return BuiltOp(fn=cast, layouts=(layout,))
