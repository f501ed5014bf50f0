"""The ``warp_affine`` operator.

Semantics follow NVIDIA DALI's operator of the same name: ``matrix`` maps output positions
to input positions (``inverse_map=True``, the default) or input to output ones (inverted
first, in float32 as DALI), with ``[0, 0]`` the corner of the first pixel. The warp itself
is rotate's (``rotate.warp_affine``, OpenCV): DALI's matrix becomes OpenCV's, whose pixel
centres are at integers, by ``warp_matrix``. The GPU form (``engine/ops/cuda``) takes the
same per-sample matrix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops.args import (
    INTERP,
    Targs,
    check_image,
    per_channel,
    round_half_away,
    with_channels,
)
from conveyor_server.engine.ops.geometry.rotate import warp_affine
from conveyor_server.engine.ops.normalize.normalize import saturate_cast
from conveyor_server.engine.ops.probes.inputs import images
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

#: Input types (OpenCV warps them with nearest and linear interpolation alike).
WARP_INPUTS = frozenset(np.dtype(t) for t in ("uint8", "uint16", "int16", "float32"))
_F32 = np.float32


def warp_matrix(dali: np.ndarray) -> np.ndarray:
    """DALI's output-to-input map (2x3, pixel corners at integers) as OpenCV's (pixel
    centres at integers): ``src - 0.5 = A (dst + 0.5) + t``, so the offset becomes
    ``A (0.5, 0.5) + t - 0.5``."""
    m = dali.astype(np.float64)
    offset = m[:, :2] @ np.array([0.5, 0.5]) + m[:, 2] - 0.5
    return np.hstack([m[:, :2], offset[:, None]])


def inverted(op: str, m: np.ndarray) -> np.ndarray:
    """The inverse of the affine map ``m`` (2x3, float32), in float32 as DALI inverts it."""
    a, b, c, d = (_F32(v) for v in (m[0, 0], m[0, 1], m[1, 0], m[1, 1]))
    det = a * d - b * c
    if det == 0 or not np.isfinite(det):
        raise InvalidArgument(f"{op}: argument 'matrix' {m.reshape(6).tolist()} cannot be "
                              "inverted (inverse_map=False needs an invertible map; give a "
                              "matrix whose 2x2 part has a nonzero determinant)")
    inv = np.array([[d, -b], [-c, a]], dtype=_F32) / det
    shift = -(inv @ m[:, 2].astype(_F32))
    return np.hstack([inv, shift[:, None]]).astype(_F32)


def dali_positions(m: np.ndarray, row: int, out_hw: tuple[int, int]) -> np.ndarray:
    """Coordinate ``row`` (0: x, 1: y) of the input position of every output pixel, float32,
    as DALI's CPU warp computes it: each output row starts at ``M (0.5, y + 0.5)``, and each
    next pixel adds ``M``'s first column (one float32 sum after another)."""
    h, w = out_hw
    ys = np.arange(h, dtype=_F32) + _F32(0.5)
    # Column by column (x major), so that each sum adds one step to a whole column at once.
    steps = np.empty((w, h), dtype=_F32)
    steps[0] = (m[row, 0] * _F32(0.5) + m[row, 1] * ys) + m[row, 2]
    steps[1:] = m[row, 0]
    return np.cumsum(steps, axis=0, dtype=_F32).T


def nearest(image: np.ndarray, m: np.ndarray, out_hw: tuple[int, int],
            fill: np.ndarray | None) -> np.ndarray:
    """The nearest-neighbour warp as DALI computes it: at each output pixel's input
    position (``dali_positions``, DALI's matrix ``m``, float32), the input pixel whose square
    holds it (``floor``); outside the input, the nearest border pixel or ``fill``. (OpenCV's
    warp rounds positions to 1/1024 of a pixel first, and so takes a neighbour of DALI's
    pixel where a position lies that close to a pixel edge.)"""
    h, w, channels = image.shape
    sx = np.floor(dali_positions(m, 0, out_hw))
    sy = np.floor(dali_positions(m, 1, out_hw))
    fill_values = None if fill is None else saturate_cast(fill, image.dtype)
    if channels <= 4 and max(h, w) < _REMAP_MAX_EXTENT:
        # OpenCV's remap takes the pixel at each (whole, so exactly rounded) position: the
        # same pixels, 3x faster than numpy's gather; -1 and the extent stand for outside.
        map_x = np.ascontiguousarray(np.clip(sx, -1, w))
        map_y = np.ascontiguousarray(np.clip(sy, -1, h))
        if fill_values is None:
            border: dict[str, Any] = {"borderMode": cv2.BORDER_REPLICATE}
        else:
            border = {"borderMode": cv2.BORDER_CONSTANT,
                      "borderValue": tuple(fill_values.tolist())}
        out = cv2.remap(image, map_x, map_y, cv2.INTER_NEAREST, **border)
        return with_channels(out, channels)
    ix = np.clip(sx, 0, w - 1).astype(np.intp)
    iy = np.clip(sy, 0, h - 1).astype(np.intp)
    out = image[iy, ix]
    if fill_values is not None:
        out[(sx < 0) | (sx >= w) | (sy < 0) | (sy >= h)] = fill_values
    return out


#: OpenCV's remap holds positions as 16-bit integers.
_REMAP_MAX_EXTENT = 32767


@dataclass(frozen=True)
class WarpAffineArgs:
    """``warp_affine``'s arguments, read once: per sample, the output size and the OpenCV
    output-to-input matrix that the CPU operator and the GPU one both warp with."""

    op: str
    #: The constant matrix, None where it is fed per sample.
    constant: np.ndarray | None
    inverse_map: bool
    #: (height, width) given by ``size``, else None (the input's size).
    out_size: tuple[int, int] | None
    interp_type: str
    #: None replicates the border (DALI's default).
    fill_value: Sequence[float] | None
    #: The output type, None for the input's.
    dtype: np.dtype | None

    def matrix(self, targs: Targs) -> np.ndarray:
        """DALI's 2x3 output-to-input matrix for one sample, float32."""
        if self.constant is not None:
            m = self.constant
        else:
            fed = np.asarray(targs["matrix"])
            if fed.size != 6 or fed.dtype.kind != "f":
                raise InvalidArgument(
                    f"{self.op}: argument 'matrix' must be a float tensor of shape (2, 3) per "
                    f"sample, got an array of shape {fed.shape} and type {fed.dtype}")
            m = fed.reshape(2, 3).astype(_F32)
        if not np.all(np.isfinite(m)):
            raise InvalidArgument(f"{self.op}: argument 'matrix' got {m.reshape(6).tolist()} "
                                  "for this sample: only finite numbers are allowed")
        return m if self.inverse_map else inverted(self.op, m)

    def output_size(self, in_hw: tuple[int, int]) -> tuple[int, int]:
        return self.out_size if self.out_size is not None else in_hw

    def geometry(self, in_hw: tuple[int, int], targs: Targs) -> tuple[tuple[int, int], np.ndarray]:
        """The output (height, width) and OpenCV's output-to-input matrix for one sample."""
        return self.output_size(in_hw), warp_matrix(self.matrix(targs))

    def fill(self, channels: int) -> np.ndarray | None:
        """One fill value per channel, or None to replicate the border."""
        if self.fill_value is None:
            return None
        return per_channel(self.op, "fill_value", self.fill_value, channels)


def warp_affine_args(ctx: OpContext) -> WarpAffineArgs:
    op, args = ctx.op_type, ctx.args
    fed = "matrix" in ctx.tensor_args
    if not fed and args["matrix"] is None:
        raise InvalidArgument(f"{op}: argument 'matrix' is required: give 6 numbers "
                              "(M11, M12, M13, M21, M22, M23), or a (2, 3) float tensor per "
                              "sample as the second input")
    constant = None if fed else np.asarray(args["matrix"], dtype=_F32).reshape(2, 3)
    size = args["size"]
    # DALI reads `size` in tensor-shape order, (height, width), rounding to nearest.
    out_size = None if size is None else (max(1, round_half_away(size[0])),
                                          max(1, round_half_away(size[1])))
    return WarpAffineArgs(op, constant, bool(args["inverse_map"]), out_size,
                          args["interp_type"], args["fill_value"] or None,
                          np.dtype(args["dtype"]) if args["dtype"] else None)


@register("warp_affine")
def build_warp_affine(ctx: OpContext) -> SampleOp:
    op = ctx.op_type
    params = warp_affine_args(ctx)
    interp = INTERP[params.interp_type]

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, WARP_INPUTS)
        out_dtype = params.dtype or image.dtype
        out_hw = params.output_size((image.shape[0], image.shape[1]))
        ctx.limits.check_output((*out_hw, image.shape[2]), out_dtype)
        fill = params.fill(image.shape[2])
        if params.interp_type == "nn":
            near = nearest(image, params.matrix(targs), out_hw, fill)
            return (near if out_dtype == image.dtype else saturate_cast(near, out_dtype),)
        matrix = warp_matrix(params.matrix(targs))
        if out_dtype == image.dtype:
            return (warp_affine(image, matrix, out_hw, interp, fill),)
        # Another output type: warped in float32, then rounded and clamped to it (DALI
        # interpolates in float and converts the result).
        work = warp_affine(image.astype(_F32), matrix, out_hw, interp, fill)
        return (work if out_dtype == _F32 else saturate_cast(work, out_dtype),)

    return SampleOp(fn=run, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------

#: Matrices away from exact pixel edges (a shear with a turn, a zoom, a shift).
_MATRICES = ((0.93, 0.21, 1.3, -0.17, 1.08, -2.4),
             (0.6, 0.0, 2.25, 0.05, 0.7, 0.8),
             (1.0, 0.0, -3.5, 0.0, 1.0, 4.75))


def _fed(i: int) -> dict[str, np.ndarray]:
    return {"matrix": np.asarray(_MATRICES[i % len(_MATRICES)], dtype=_F32).reshape(2, 3)}


@op_probe("warp_affine", variant_arg="interp_type")
def _warp_affine(interp: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    fed = [((p,), _fed(i)) for i, p in enumerate(pictures)]
    plain: list[tuple[Sequence[np.ndarray], dict[str, np.ndarray]]] = [
        ((p,), {}) for p in pictures]
    three = [s for s in fed if s[0][0].shape[2] == 3]
    return [
        Case({"interp_type": interp, "matrix": list(_MATRICES[0])}, plain),
        Case({"interp_type": interp}, fed),
        Case({"interp_type": interp, "inverse_map": False}, fed[:4]),
        Case({"interp_type": interp, "fill_value": [10.0, 200.0, 31.0], "size": [20.0, 30.0]},
             three),
        Case({"interp_type": interp, "fill_value": [7.0], "dtype": "float32"}, fed[:3]),
        Case({"interp_type": interp, "dtype": "uint8", "matrix": list(_MATRICES[1])},
             [s for s in plain if s[0][0].dtype == np.float32]),
        Case({"interp_type": interp, "matrix": list(_MATRICES[2]), "size": [9.0, 11.0]},
             plain[:2]),
    ]
