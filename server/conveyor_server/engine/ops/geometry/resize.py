"""The ``resize`` operator.

Semantics follow NVIDIA DALI's operator of the same name. Images are HWC numpy arrays;
resizes run in OpenCV, which releases the GIL while it works. Every output is a new,
writable, C-contiguous array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.args import (
    CV_MAX_CHANNELS,
    INTERP,
    WARP_DTYPES,
    Targs,
    check_image,
    cv_resize,
    round_half_away,
    scalar_arg,
)
from conveyor_server.engine.ops.geometry.area_resize import area_resize
from conveyor_server.engine.ops.geometry.resize_filters import resize_steps
from conveyor_server.engine.ops.probes.inputs import images
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register


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
        # DALI's `size` has one entry per spatial dimension in layout order: (H, W) for HWC;
        # one number is both extents, as DALI broadcasts it (size=256: (256, 256)).
        size = (float(args["size"][0]), float(args["size"][-1]))
        return lambda targs: size
    for name in ("resize_shorter", "resize_longer"):
        if args[name] > 0:
            both = (float(args[name]), float(args[name]))
            return lambda targs: both
    get_y, get_x = scalar_arg(ctx, "resize_y", lo=0), scalar_arg(ctx, "resize_x", lo=0)
    return lambda targs: (get_y(targs), get_x(targs))


def resize_image(image: np.ndarray, out_hw: tuple[int, int], interp_type: str,
                 antialias: bool) -> np.ndarray:
    """Resize an HWC image to ``out_hw``, in the steps ``resize_steps`` chooses.

    DALI antialiases downscaling by widening its filter. OpenCV's ``INTER_AREA`` does the
    same for the linear filter, so linear + antialias averages areas along each shrinking
    axis (``area_resize``, with OpenCV's bytes); cubic and lanczos3 are not antialiased here
    (a simplification).
    """
    steps = resize_steps((image.shape[0], image.shape[1]), out_hw, interp_type, antialias)
    if not steps:
        return image.copy()
    out = image
    for step_hw, method in steps:
        if method == "area":
            out = area_resize(out, step_hw)
        else:
            out = cv_resize(out, step_hw, INTERP[method])
    return out


@dataclass(frozen=True)
class ResizeArgs:
    """``resize``'s arguments, read once: the output size per sample, shared by the CPU
    operator and the GPU one (``engine/ops/cuda``)."""

    op: str
    request: ResizeRequest
    requested: Callable[[Targs], tuple[float, float]]
    interp_type: str
    antialias: bool
    #: "" keeps the input type (DALI); "float32" or "uint8".
    dtype: str

    def output_size(self, in_hw: tuple[int, int], targs: Targs) -> tuple[int, int]:
        return self.request.output_size(in_hw, self.requested(targs))

    def work_dtype(self, dtype: np.dtype) -> np.dtype:
        """The type the resize computes in (and outputs), or ``InvalidArgument``."""
        if self.dtype == "float32":
            return np.dtype(np.float32)  # resample in float: no rounding to the input type
        if self.dtype == "uint8" and dtype != np.uint8:
            # DALI: the output type must be the input type or float.
            raise InvalidArgument(f"{self.op}: dtype='uint8' needs uint8 images, got {dtype}")
        return dtype


def resize_args(ctx: OpContext) -> ResizeArgs:
    return ResizeArgs(ctx.op_type, _resize_request(ctx), _requested_size(ctx),
                      ctx.args["interp_type"], bool(ctx.args["antialias"]), ctx.args["dtype"])


@register("resize")
def build_resize(ctx: OpContext) -> SampleOp:
    op = ctx.op_type
    params = resize_args(ctx)

    def resize(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = inputs[0]
        check_image(op, image, WARP_DTYPES, CV_MAX_CHANNELS)
        work = params.work_dtype(image.dtype)
        if work != image.dtype:
            image = image.astype(work)
        out_hw = params.output_size((image.shape[0], image.shape[1]), targs)
        ctx.limits.check_output((*out_hw, image.shape[2]), image.dtype)
        return (resize_image(image, out_hw, params.interp_type, params.antialias),)

    return SampleOp(fn=resize, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("resize", variant_arg="interp_type")
def _resize(interp: str) -> list[Case]:
    pictures = images(("uint8", "float32"))
    samples: list[tuple[Sequence[np.ndarray], ProbeTargs]] = [((p,), {}) for p in pictures]
    return [
        Case({"interp_type": interp, "size": [64.0, 80.0]}, samples),   # up
        Case({"interp_type": interp, "size": [12.0, 15.0]}, samples),   # down, antialiased
        Case({"interp_type": interp, "size": [12.0, 15.0], "antialias": False}, samples),
        Case({"interp_type": interp, "size": [40.0, 9.0]}, samples),    # up and down
        Case({"interp_type": interp, "resize_shorter": 11.0, "dtype": "float32"},
             samples[:6]),
    ]
