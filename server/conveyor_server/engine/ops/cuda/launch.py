"""Launching a plan's kernels with CuPy (imported here only, when a GPU operator runs).

Every launch covers the whole batch: ``blockIdx.z`` (``blockIdx.y`` for cast) is the
sample, and the grid spans the largest sample; threads past a sample's extent return. The
samples' device pointers, and the plan's arrays packed in one buffer (``plans.Packed``), are
copied to the device once per launch, one copy each; every output of a batch lives in one
allocation, and the samples are views of it.

Everything here runs on the device's compute stream (``streams.py``): the uploads, the
allocations and the launches, so an operator's kernels follow the work that produced its
inputs, and nothing waits on the host. Each kernel is looked up once per device and kept.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor_server.engine.device import streams
from conveyor_server.engine.ops.cuda import plans, sources

_BLOCK_2D = (32, 8, 1)
_BLOCK_1D = 256


def _cupy() -> Any:
    import cupy

    return cupy


@functools.cache
def _module(name: str, device_id: int) -> Any:
    cp = _cupy()
    with cp.cuda.Device(device_id):
        return cp.RawModule(code=sources.source(name), options=sources.OPTIONS)


@functools.cache
def kernel(name: str, device_id: int) -> Any:
    """Kernel ``name`` of its module on ``device_id``: compiled, loaded and looked up on
    first use, the same object on every later launch."""
    return _module(sources.source_of(name), device_id).get_function(name)


def to_device(batch: Sequence[Any], device_id: int) -> list[Any]:
    """The samples as C-contiguous CuPy arrays on ``device_id`` (host samples copied), on
    its compute stream."""
    cp = _cupy()
    with streams.computing(device_id):
        # A C-contiguous CuPy array (what the decoders and kernels give) is passed as it is.
        return [v if isinstance(v, cp.ndarray) and v.flags.c_contiguous
                else cp.ascontiguousarray(cp.asarray(v)) for v in batch]


def _outputs(shapes: Sequence[tuple[int, ...]], dtype: np.dtype) -> tuple[list[Any], Any]:
    """One allocation holding every sample's output; the samples as views, and their
    device pointers (computed from the allocation's, uploaded in one copy)."""
    cp = _cupy()
    sizes = np.array([math.prod(s) for s in shapes], dtype=np.int64)
    # Each sample starts 16-byte aligned.
    align = max(1, 16 // dtype.itemsize)
    padded = -(-sizes // align) * align
    starts = np.cumsum(padded) - padded  # in elements
    buffer = cp.empty(max(int(padded.sum()), 1), dtype=dtype)
    memory = buffer.data
    offsets = (starts * dtype.itemsize).tolist()
    views = [cp.ndarray(shape, dtype, memory + offset)
             for shape, offset in zip(shapes, offsets, strict=True)]
    pointers = np.uint64(memory.ptr) + (starts * dtype.itemsize).astype(np.uint64)
    return views, cp.asarray(pointers)


def _pointers(arrays: Sequence[Any]) -> Any:
    cp = _cupy()
    return cp.asarray(np.array([a.data.ptr for a in arrays], dtype=np.uint64))


def _upload(packed: plans.Packed) -> list[Any]:
    """A plan's arrays on the device: one copy of their packed buffer, and views of it."""
    return packed.views(_cupy().asarray(packed.buffer))


def _grid2(extents: Sequence[tuple[int, int]], samples: int) -> tuple[int, int, int]:
    """Blocks covering the widest (x) and tallest (y) sample, one z layer per sample."""
    wide = max((e[0] for e in extents), default=1)
    tall = max((e[1] for e in extents), default=1)
    return (max(1, -(-wide // _BLOCK_2D[0])), max(1, -(-tall // _BLOCK_2D[1])), samples)


def run(plan: plans.Plan, images: Sequence[Any], device_id: int) -> list[Any]:
    """The plan's outputs for ``images`` (CuPy arrays on ``device_id``), enqueued on its
    compute stream."""
    if not images:
        return []
    if isinstance(plan, plans.TransferPlan):
        return list(images)  # on the device already (``to_device``)
    with streams.computing(device_id):
        ins = _pointers(images)
        n = len(images)
        if isinstance(plan, plans.ResizeBatchPlan):
            params = _upload(plan.packed)
            mid, mid_ptrs = _outputs(plan.first.out_shapes, np.dtype(np.float32))
            _resize_pass(plan.first, params[:3], f"resize_first_{plan.in_dtype.name}", ins,
                         mid_ptrs, device_id)
            outs, out_ptrs = _outputs(plan.out_shapes, plan.dtype)
            _resize_pass(plan.second, params[3:], f"resize_second_{plan.dtype.name}",
                         _pointers(mid), out_ptrs, device_id)
            return outs
        outs, out_ptrs = _outputs(plan.out_shapes, plan.dtype)
        params = _upload(plan.packed)
        if isinstance(plan, plans.SlicePlan):
            extents = [(int(g[4] * g[2]), int(g[3])) for g in plan.geom]
            kernel(f"slice_flip_{plan.dtype.itemsize}", device_id)(
                _grid2(extents, n), _BLOCK_2D,
                (ins, out_ptrs, *params, np.int32(plan.fill.shape[1])))
        elif isinstance(plan, plans.WarpPlan):
            extents = [(int(g[4]), int(g[3])) for g in plan.geom]
            kernel(f"warp_affine_{plan.dtype.name}", device_id)(
                _grid2(extents, n), _BLOCK_2D,
                (ins, out_ptrs, *params, np.int32(plan.fill.shape[1]), np.int32(plan.linear),
                 np.int32(plan.replicate), np.int32(plan.corner)))
        elif isinstance(plan, plans.NormalizePlan):
            extents = [(int(g[6]), int(g[5])) for g in plan.geom]
            kernel(f"crop_mirror_normalize_{plan.in_dtype.name}_{plan.dtype.name}", device_id)(
                _grid2(extents, n), _BLOCK_2D,
                (ins, out_ptrs, *params, np.int32(plan.mul.shape[1]), np.int32(plan.chw)))
        elif isinstance(plan, plans.CastPlan):
            most = int(plan.counts.max(initial=1))
            kernel(f"cast_{plan.in_dtype.name}_{plan.dtype.name}", device_id)(
                (max(1, -(-most // _BLOCK_1D)), n, 1), (_BLOCK_1D, 1, 1),
                (ins, out_ptrs, *params))
        else:
            items = [int(g[0]) * (int(g[1]) if plan.kind == "brightness_contrast" else 1)
                     for g in plan.geom]
            kernel(f"{plan.kind}_{plan.in_dtype.name}_{plan.dtype.name}", device_id)(
                (max(1, -(-max(items) // _BLOCK_1D)), 1, n), (_BLOCK_1D, 1, 1),
                (ins, out_ptrs, *params))
        return outs


def _resize_pass(step: plans.ResizePass, params: list[Any], name: str, src_ptrs: Any,
                 dst_ptrs: Any, device_id: int) -> None:
    """``params``: the pass's geom, starts and weights on the device."""
    extents = [(int(g[6]), int(g[5])) for g in step.geom]
    kernel(name, device_id)(
        _grid2(extents, len(extents)), _BLOCK_2D, (src_ptrs, dst_ptrs, *params))
