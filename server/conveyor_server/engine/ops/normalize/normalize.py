"""Operators that change values and types: ``crop_mirror_normalize`` (its per-sample form,
and the parameters and pixel code its per-batch form in ``normalize_batch.py`` shares) and
``cast``.

Semantics follow NVIDIA DALI's operators of the same names. Conversions to integer types
round to nearest and saturate, as DALI's ``ConvertSat``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from conveyor.definition.normalization import folded_coefficients, next_pow2
from conveyor.definition.schemas.registry import DTYPES
from conveyor.errors import SpecError
from conveyor_server.engine.ops.args import (
    CropWindow,
    ScalarArg,
    Targs,
    check_image,
    crop_region,
    crop_window,
    per_channel,
    scalar_arg,
    window_regions,
)
from conveyor_server.engine.ops.normalize import normalize_table
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, i32, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

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
    rounded = np.asarray(np.rint(x, dtype=work))  # an array also for one 0-d sample
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


def output_shape(view_shape: tuple[int, ...], *, chw: bool,
                 channels_out: int) -> tuple[int, int, int]:
    h, w = view_shape[0], view_shape[1]
    return (channels_out, h, w) if chw else (h, w, channels_out)


def normalize_into(out: np.ndarray, view: np.ndarray, mul: np.ndarray, add: np.ndarray, *,
                   chw: bool) -> None:
    """Write ``view * mul + add`` per channel, computed in float32, into ``out``.

    ``view`` is HWC; ``out`` holds the output type and is shaped by ``output_shape``: CHW
    (``chw``) or HWC, with at least the view's channels; those past them are set to 0.
    uint8 pixels are looked up in a table of this arithmetic's results for the 256 values
    (``normalize_table.py``): the same bytes, several times faster.
    """
    if normalize_table.applies(out, view, chw=chw):
        c = view.shape[2]
        if out.shape[0 if chw else 2] > c:
            (out[c:] if chw else out[..., c:]).fill(0)
        table = _table(mul.tobytes(), add.tobytes(), out.dtype.str, c)
        normalize_table.lookup_into(out, view, table, chw=chw)
        return
    _compute_into(out, view, mul, add, chw=chw)


@functools.lru_cache(maxsize=64)
def _table(mul: bytes, add: bytes, dtype: str, channels: int) -> np.ndarray:
    """The output of each of the 256 uint8 values per channel, (256, 1, C) of ``dtype``,
    computed by ``_compute_into`` itself."""
    table = np.empty((256, 1, channels), dtype=np.dtype(dtype))
    _compute_into(table, normalize_table.ramp(channels), np.frombuffer(mul, np.float32),
                  np.frombuffer(add, np.float32), chw=False)
    table.flags.writeable = False
    return table


def _compute_into(out: np.ndarray, view: np.ndarray, mul: np.ndarray, add: np.ndarray, *,
                  chw: bool) -> None:
    """``normalize_into`` by arithmetic: the definition of the bytes."""
    h, w, c = view.shape
    if chw:
        src = view.transpose(2, 0, 1)
        mul, add = mul.reshape(c, 1, 1), add.reshape(c, 1, 1)
        target = out[:c]
    else:
        # Rows as runs of W*C values with the coefficients tiled to match: numpy then loops
        # along whole rows rather than over each pixel's C values (several times faster).
        src = np.ascontiguousarray(view).reshape(h, w * c)
        mul, add = np.tile(mul, w), np.tile(add, w)
        target = out[..., :c]
    if out.shape[0 if chw else 2] > c:
        (out[c:] if chw else out[..., c:]).fill(0)
    # float32 out: computed in place (HWC rows need every channel of out to be the view's).
    direct = out.dtype == np.float32 and (chw or out.shape[2] == c)
    work: np.ndarray
    if direct and not chw:
        assert out.flags.c_contiguous, "an HWC output is written in place as rows"
        work = out.reshape(h, w * c)  # a view of out
    else:
        work = target if direct else np.empty(src.shape, dtype=np.float32)
    np.multiply(src, mul, out=work, casting="unsafe")
    np.add(work, add, out=work)
    if not direct:
        work = work.reshape(target.shape)
        target[...] = work if out.dtype == np.float32 else saturate_cast(work, out.dtype)


def normalize(view: np.ndarray, mul: np.ndarray, add: np.ndarray, dtype: np.dtype, *,
              chw: bool, channels_out: int) -> np.ndarray:
    """``normalize_into`` a new array of ``dtype``."""
    out = np.empty(output_shape(view.shape, chw=chw, channels_out=channels_out), dtype=dtype)
    normalize_into(out, view, mul, add, chw=chw)
    return out


#: A batch's crop windows and mirrors: y, x, height, width (int64) and mirror (bool).
Regions = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class CmnParams:
    """What ``crop_mirror_normalize`` does to each sample, read once from its arguments:
    the per-sample and the batched forms share it, so they compute the same bytes."""

    op: str
    window: CropWindow | None
    mirror: ScalarArg
    mean: Sequence[float]
    std: Sequence[float]
    scale: float
    shift: float
    dtype: np.dtype
    chw: bool
    pad_output: bool

    @property
    def layout(self) -> str:
        return "CHW" if self.chw else "HWC"

    def region(self, image_shape: tuple[int, ...], targs: Targs) -> tuple[int, int, int, int, bool]:
        """The sample's crop window (y, x, height, width) and whether it is mirrored."""
        h, w = image_shape[0], image_shape[1]
        # This schema has no out_of_bounds_policy for this operator: DALI's default, "error".
        y, x, ch, cw = (0, 0, h, w) if self.window is None else \
            crop_region(self.window, (h, w), targs, "error")
        return y, x, ch, cw, bool(self.mirror(targs))

    def regions(self, shapes: np.ndarray, targs: Sequence[Targs]) -> Regions | None:
        """``region`` of each sample of a batch (``shapes``: (N, 3) int64, HWC) as arrays:
        y, x, height, width (int64) and mirror (bool); None where some sample's is refused
        (its ``region`` says why)."""
        heights, widths = shapes[:, 0], shapes[:, 1]
        mirror = self.mirror.batch(targs)
        if mirror is None:
            return None
        if self.window is None:
            return (np.zeros(len(shapes), dtype=np.int64), np.zeros(len(shapes), dtype=np.int64),
                    heights.copy(), widths.copy(), mirror != 0)
        anchors = self.window.anchors(heights, widths, targs)
        if anchors is None:
            return None
        # This schema has no out_of_bounds_policy for this operator: DALI's default, "error".
        region = window_regions(*anchors, self.window.size, heights, widths, "error")
        return None if region is None else (*region, mirror != 0)

    def view(self, image: np.ndarray, targs: Targs) -> np.ndarray:
        """The sample's cropped, mirrored pixels (a view where possible), HWC."""
        check_image(self.op, image)
        y, x, h, w, mirror = self.region(image.shape, targs)
        view = image[y:y + h, x:x + w]
        return view[:, ::-1] if mirror else view

    def coefficients(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """(mul, add) per channel, float32: out = (in - mean) / std * scale + shift folded
        into one multiply-add."""
        return folded_coefficients(per_channel(self.op, "mean", self.mean, channels),
                                   per_channel(self.op, "std", self.std, channels),
                                   self.scale, self.shift)

    def channels_out(self, channels: int) -> int:
        # DALI pads to the next power of two channels (3 -> 4) with 0.
        return next_pow2(channels) if self.pad_output else channels


def cmn_params(ctx: OpContext) -> CmnParams:
    args = ctx.args
    window = crop_window(ctx, required=False)  # no crop arguments: the whole image (DALI)
    mirror = scalar_arg(ctx, "mirror", 0, 1)
    mean, std = args["mean"], args["std"]
    _check_mean_std(ctx.op_type, mean, std)
    return CmnParams(
        op=ctx.op_type, window=window, mirror=mirror, mean=mean, std=std,
        scale=float(args["scale"]), shift=float(args["shift"]), dtype=np.dtype(args["dtype"]),
        chw=args["output_layout"] == "CHW", pad_output=bool(args["pad_output"]))


@register("crop_mirror_normalize")
def build_crop_mirror_normalize(ctx: OpContext) -> SampleOp:
    p = cmn_params(ctx)

    def crop_mirror_normalize(inputs: Sequence[np.ndarray],
                              targs: Targs) -> tuple[np.ndarray, ...]:
        view = p.view(inputs[0], targs)
        c = view.shape[2]
        ctx.limits.check_output((*view.shape[:2], p.channels_out(c)), p.dtype)
        mul, add = p.coefficients(c)
        return (normalize(view, mul, add, p.dtype, chw=p.chw,
                          channels_out=p.channels_out(c)),)

    return SampleOp(fn=crop_mirror_normalize, layouts=(p.layout,))


# -- cast --------------------------------------------------------------------------------


@register("cast")
def build_cast(ctx: OpContext) -> SampleOp:
    dtype = np.dtype(ctx.args["dtype"])
    layout = ctx.input_layouts[0] if ctx.input_layouts else ""

    def cast(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        value = np.asarray(inputs[0])
        ctx.limits.check_bytes(value.size * dtype.itemsize,
                               f"its output would be {value.size:,} values of {dtype}")
        return (saturate_cast(value, dtype),)

    return SampleOp(fn=cast, layouts=(layout,))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("crop_mirror_normalize")
def _crop_mirror_normalize(variant: str) -> list[Case]:
    same_size = [image(29, 37, 3, salt=s) for s in range(3)]
    mixed = [image(h, w, 3, salt=s) for s, (h, w) in enumerate(((29, 37), (16, 21)))]
    mirror = [{"mirror": i32(i % 2)} for i in range(3)]
    norm = {"mean": [120.5, 115.25, 100.0], "std": [60.1, 58.7, 57.3]}
    cases = []
    for group in (same_size, mixed):
        samples = [((p,), mirror[i]) for i, p in enumerate(group)]
        cases += [
            Case({**norm, "crop": [13.0, 11.0]}, samples),
            Case({**norm, "dtype": "float16", "output_layout": "HWC", "pad_output": True},
                 samples),
            Case({"mean": [3.0], "std": [0.7], "dtype": "uint8", "scale": 0.5, "shift": 64.0},
                 samples),
            Case({"mean": [128.0], "std": [1.0], "dtype": "int8", "crop": [15.0, 20.0]},
                 samples),
        ]
    return cases


@op_probe("cast")
def _cast(variant: str) -> list[Case]:
    edge: np.ndarray = np.array([[[-1e9, -129.5, -128.5, -0.5, 0.5, 1.5, 2.5, 254.5, 255.5, 65535.5,
                       3.4e38, np.nan, np.inf, -np.inf]]], dtype=np.float32).reshape(1, 14, 1)
    sources = [edge, image(7, 5, 3, "float32"), image(7, 5, 3, "uint8"), image(7, 5, 1, "int16")]
    return [Case({"dtype": dtype}, [((s,), {}) for s in sources]) for dtype in DTYPES]
