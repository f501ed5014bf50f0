"""``normalize``, as DALI's: ``scale * (x - mean) / stddev + shift`` per sample, the
statistics given (``mean``, ``stddev``: numbers or per-sample arrays that broadcast) or
computed over ``axes`` as ``fn.reductions.mean`` and ``std_dev`` compute them (DALI's
summation order, ``reductions/tree.py``, so the float bits do not depend on the CPU).

The arithmetic is DALI's, in float32: the factor ``scale / stddev`` is ``scale * (1 /
sqrt(variance + epsilon))`` (0 where that variance is 0, as DALI keeps zero), and each value
is ``(x - mean) * factor + shift``, converted to ``dtype`` (integers: rounded and clamped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.normalize.normalize import saturate_cast
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, f32, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.reductions.reductions import (
    named_axes,
    reduce_sample,
    sample_axes,
)
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

F32 = np.dtype(np.float32)
#: The input types it takes (those DALI's CPU reductions take, as the statistics need).
NORMALIZE_INPUTS = frozenset(np.dtype(t) for t in (
    "uint8", "int8", "uint16", "int16", "int32", "float32"))
_SUPPORTED = ", ".join(sorted(t.name for t in NORMALIZE_INPUTS))


def _statistic(op: str, name: str, targs: Targs, fed: bool, constant: float | None,
               shape: tuple[int, ...]) -> np.ndarray | None:
    """A given ``mean`` or ``stddev`` as float32, shaped to broadcast against the sample;
    None where it is computed."""
    if not fed:
        return None if constant is None else np.asarray(constant, dtype=F32)
    value = np.asarray(targs[name], dtype=F32)
    if value.ndim not in (0, len(shape)) or (value.ndim and any(
            v not in (1, n) for v, n in zip(value.shape, shape, strict=True))):
        raise InvalidArgument(f"{op}: argument '{name}' has shape {value.shape}, which does "
                              f"not broadcast against the sample's {shape}: give a number "
                              "or an array of the sample's rank with extents 1 or the "
                              "sample's")
    if not np.all(np.isfinite(value)):
        raise InvalidArgument(f"{op}: argument '{name}' is not finite for this sample")
    return value


def inverse_stddev(variance: np.ndarray, epsilon: float, scale: float) -> np.ndarray:
    """``scale / sqrt(variance + epsilon)`` as DALI computes it in float32, 0 where
    ``variance + epsilon`` is 0."""
    total = (variance.astype(F32) + np.float32(epsilon)).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = (np.float32(1.0) / np.sqrt(total)).astype(F32) * np.float32(scale)
    return np.where(total == 0, np.float32(0), inv).astype(F32)


@register("normalize")
def build_normalize(ctx: OpContext) -> SampleOp:
    op, args = ctx.op_type, ctx.args
    if args["batch"]:
        raise SpecError(op, "batch", "True is not supported: each sample is normalized with "
                        "its own statistics; leave 'batch' False, or give 'mean' and "
                        "'stddev' computed over the data set")
    axes = named_axes(ctx)
    dtype = np.dtype(args["dtype"])
    mean_fed, std_fed = "mean" in ctx.tensor_args, "stddev" in ctx.tensor_args
    epsilon, scale, shift = args["epsilon"], args["scale"], np.float32(args["shift"])

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        x = inputs[0]
        if x.dtype not in NORMALIZE_INPUTS:
            raise InvalidArgument(f"{op}: inputs of type {x.dtype} are not supported "
                                  f"(supported: {_SUPPORTED})")
        mean = _statistic(op, "mean", targs, mean_fed, args["mean"], x.shape)
        stddev = _statistic(op, "stddev", targs, std_fed, args["stddev"], x.shape)
        reduced = sample_axes(op, x.ndim, axes)
        if mean is None:
            mean = reduce_sample(op, "mean", x, reduced, keep_dims=True, dtype="float32")
        if stddev is None:
            kept = tuple(1 if i in reduced else n for i, n in enumerate(x.shape))
            try:
                centre = np.ascontiguousarray(np.broadcast_to(mean, kept), dtype=F32)
            except ValueError:
                raise InvalidArgument(f"{op}: 'mean' has shape {mean.shape}; to compute the "
                                      f"standard deviation over axes {list(reduced)} it must "
                                      f"broadcast to {kept}") from None
            if math.prod(x.shape[a] for a in reduced) > args["ddof"]:
                variance = reduce_sample(op, "variance", x, reduced, keep_dims=True,
                                         mean=centre, ddof=args["ddof"])
            else:  # as DALI: no degrees of freedom left, a variance of 0 (then epsilon)
                variance = np.zeros(kept, F32)
            factor = inverse_stddev(variance, epsilon, scale)
        else:
            factor = inverse_stddev(stddev * stddev, epsilon, scale)
        with np.errstate(over="ignore", invalid="ignore"):
            out = ((x.astype(F32) - mean) * factor + shift).astype(F32)
        return (out if dtype == F32 else saturate_cast(out, dtype),)

    return SampleOp(fn=run, layouts=(ctx.input_layouts[0] if ctx.input_layouts else "",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------


@op_probe("normalize")
def _normalize(variant: str) -> list[Case]:
    pictures: list[tuple[Sequence[np.ndarray], ProbeTargs]] = [
        ((image(5, 7, 3),), {}), ((image(4, 6, 3, "float32"),), {}),
        ((image(3, 9, 1, "int16"),), {})]
    fed = [((image(5, 7, 3),), {"mean": f32(100.0), "stddev": f32(40.0)}),
           ((image(4, 6, 3),), {"mean": np.array([[[90, 110, 130]]], np.float32),
                                "stddev": np.array([[[30, 50, 70]]], np.float32)})]
    return [Case({}, pictures), Case({"axes": [0, 1], "ddof": 1}, pictures),
            Case({"axis_names": "HW", "epsilon": 0.5, "scale": 64.0, "shift": 128.0,
                  "dtype": "uint8"}, pictures),
            Case({"mean": 127.5, "stddev": 60.0, "dtype": "int16", "scale": 100.0}, pictures),
            Case({"axes": [2]}, pictures[:1]), Case({"shift": 0.25}, fed)]
