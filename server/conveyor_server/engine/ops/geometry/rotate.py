"""The ``rotate`` operator.

Semantics follow NVIDIA DALI's operator of the same name. Images are HWC numpy arrays; the
warp runs in OpenCV, which releases the GIL while it works. Every output is a new,
writable, C-contiguous array.

Coordinates: DALI puts pixel centres at half-integers (the image spans ``[0, w] x [0, h]``);
OpenCV puts them at integers. A DALI point ``p`` is OpenCV's ``p - 0.5``, so both agree on
where the centre of an image is: ``(w / 2, h / 2)`` for DALI, ``((w - 1) / 2, (h - 1) / 2)``
for OpenCV.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.args import (
    INTERP,
    WARP_DTYPES,
    ArgGetter,
    Targs,
    check_image,
    per_channel,
    round_half_away,
    scalar_arg,
    with_channels,
)
from conveyor_server.engine.ops.probes.inputs import images
from conveyor_server.engine.ops.probes.probe_set import Case, f32, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register


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
    if channels == 3 and interp in _VIA_FOUR_INTERP and image.dtype in _VIA_FOUR_DTYPES:
        # OpenCV's nearest and linear warps are 1.4-2.6x faster on 4 channels than on 3
        # (uint8 linear: 0.63 vs 1.51 ms on the benchmark images), more than the two
        # channel conversions cost; every channel is warped alone, so the bytes are the
        # same (tests/engine/test_ops_rotate.py compares them).
        four = cv2.cvtColor(image, cv2.COLOR_RGB2RGBA)
        fill4 = None if fill is None else np.append(fill, 0)
        return cv2.cvtColor(warp_affine(four, inverse, out_hw, interp, fill4),
                            cv2.COLOR_RGBA2RGB)
    if fill is None:
        border: dict[str, Any] = {"borderMode": cv2.BORDER_REPLICATE}
    else:
        border = {"borderMode": cv2.BORDER_CONSTANT, "borderValue": tuple(fill.tolist())}
    out = cv2.warpAffine(image, inverse, (out_hw[1], out_hw[0]),
                         flags=interp | cv2.WARP_INVERSE_MAP, **border)
    return with_channels(out, channels)


#: OpenCV's Lanczos warp (a remap) takes images below this many pixels per side.
LANCZOS_MAX_EXTENT = 32767
_VIA_FOUR_INTERP = frozenset((cv2.INTER_NEAREST, cv2.INTER_LINEAR))
#: The dtypes OpenCV's RGB <-> RGBA conversion takes.
_VIA_FOUR_DTYPES = frozenset(np.dtype(t) for t in ("uint8", "uint16", "float32"))


@dataclass(frozen=True)
class RotateArgs:
    """``rotate``'s arguments, read once: the per-sample geometry and fill both the CPU
    operator and the GPU one (``engine/ops/cuda``) compute from."""

    op: str
    #: (height, width) given by ``size``, else None.
    out_size: tuple[int, int] | None
    keep_size: bool
    angle: ArgGetter
    interp_type: str
    #: None replicates the border (DALI's default).
    fill_value: Sequence[float] | None

    def geometry(self, in_hw: tuple[int, int], targs: Targs) -> tuple[tuple[int, int], np.ndarray]:
        """The output (height, width) and the output-to-input matrix for one sample."""
        degrees = self.angle(targs)
        if self.out_size is not None:
            out_hw = self.out_size
        elif self.keep_size:
            out_hw = in_hw
        else:
            out_hw = rotated_canvas(in_hw[0], in_hw[1], degrees)
        return out_hw, rotation_matrix(in_hw, out_hw, degrees)

    def fill(self, channels: int) -> np.ndarray | None:
        """One fill value per channel, or None to replicate the border."""
        if self.fill_value is None:
            return None
        return per_channel(self.op, "fill_value", self.fill_value, channels)


def rotate_args(ctx: OpContext) -> RotateArgs:
    op, args = ctx.op_type, ctx.args
    size = args["size"]
    if size is not None and args["keep_size"]:
        raise SpecError(op, "size", "cannot be combined with keep_size=True")
    # DALI reads `size` in tensor-shape order: (height, width) for HWC images.
    out_size = None if size is None else (max(1, round_half_away(size[0])),
                                          max(1, round_half_away(size[1])))
    # DALI's warps interpolate with nn or linear only; cubic and lanczos3 are extras here.
    return RotateArgs(op, out_size, bool(args["keep_size"]), scalar_arg(ctx, "angle"),
                      args["interp_type"], args["fill_value"] or None)


@register("rotate")
def build_rotate(ctx: OpContext) -> SampleOp:
    op = ctx.op_type
    params = rotate_args(ctx)
    interp = INTERP[params.interp_type]

    def rotate(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, WARP_DTYPES)
        in_hw = (image.shape[0], image.shape[1])
        out_hw, matrix = params.geometry(in_hw, targs)
        ctx.limits.check_output((*out_hw, image.shape[2]), image.dtype)
        if interp == cv2.INTER_LANCZOS4 and max(*in_hw, *out_hw) >= LANCZOS_MAX_EXTENT:
            raise InvalidArgument(f"{op}: interp_type='lanczos3' takes images up to "
                                  f"{LANCZOS_MAX_EXTENT - 1} pixels high or wide (OpenCV's "
                                  f"limit), got {in_hw[0]}x{in_hw[1]} -> {out_hw[0]}x{out_hw[1]}")
        return (warp_affine(image, matrix, out_hw, interp, params.fill(image.shape[2])),)

    return SampleOp(fn=rotate, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("rotate", variant_arg="interp_type")
def _rotate(interp: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    angles = (17.3, -92.0, 45.0, 180.0, 0.5)
    samples = [((p,), {"angle": f32(angles[i % len(angles)])})
               for i, p in enumerate(pictures)]
    return [
        Case({"interp_type": interp}, samples),
        Case({"interp_type": interp, "keep_size": True}, samples[:3]),
        Case({"interp_type": interp, "fill_value": [10.0, 200.0, 31.0], "size": [20.0, 30.0]},
             [s for s in samples if s[0][0].shape[2] == 3]),
    ]
