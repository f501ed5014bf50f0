"""``crop_mirror_normalize`` per batch: the whole batch into one preallocated output.

The arguments are read by the same ``CmnParams`` and the pixels computed by the same
``normalize_into`` as the per-sample form, so both give the same bytes: each sample is
cropped and mirrored as a view and its multiply-add per channel writes straight into its
slot of one array of shape (N, C, H, W) or (N, H, W, C), taken once per batch from the
pool of ``batch_buffers.py`` (no per-sample output, no float32 scratch, and no fresh
mapping to fault in for a batch past glibc's mmap threshold). The samples the
engine hands on are views of it, so ``TensorList.as_array()`` needs no copy. A batch whose
views differ in shape (no crop, and images of several sizes) is normalized sample by sample
as the per-sample form does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from conveyor.errors import ConveyorError
from conveyor_server.engine.ops.normalize import batch_buffers
from conveyor_server.engine.ops.normalize.normalize import (
    CmnParams,
    cmn_params,
    normalize,
    normalize_into,
    output_shape,
)
from conveyor_server.engine.ops.registry import (
    BATCH,
    BatchOp,
    OpContext,
    SampleBatch,
    SampleFailed,
    register,
)


def normalize_batch(views: Sequence[np.ndarray], mul: np.ndarray, add: np.ndarray,
                    dtype: np.dtype, *, chw: bool, channels_out: int) -> np.ndarray:
    """Every view (all HWC, of one shape) normalized into one new array of ``dtype`` whose
    first axis is the sample: (N, C, H, W) when ``chw``, else (N, H, W, C)."""
    shape = output_shape(views[0].shape, chw=chw, channels_out=channels_out)
    out = batch_buffers.POOL.take((len(views), *shape), dtype)
    for i, view in enumerate(views):  # sample by sample: each one's pixels stay in cache
        normalize_into(out[i], view, mul, add, chw=chw)
    return out


@register("crop_mirror_normalize", per=BATCH)
def build_crop_mirror_normalize_batch(ctx: OpContext) -> BatchOp:
    p = cmn_params(ctx)

    def crop_mirror_normalize(inputs: Sequence[SampleBatch],
                              targs: Mapping[str, SampleBatch]) -> tuple[SampleBatch, ...]:
        views = []
        for i, image in enumerate(inputs[0]):
            try:
                views.append(p.view(image, {k: v[i] for k, v in targs.items()}))
            except ConveyorError as exc:
                raise SampleFailed(i, exc) from None
        shapes = [(*v.shape[:2], p.channels_out(v.shape[2])) for v in views]
        for i, shape in enumerate(shapes):
            try:
                ctx.limits.check_output(shape, p.dtype)
            except ConveyorError as exc:
                raise SampleFailed(i, exc) from None
        ctx.limits.check_bytes(sum(math.prod(s) for s in shapes) * p.dtype.itemsize,
                               f"its output would be {len(shapes)} samples of {p.dtype}")
        return (_normalize_views(p, views),)

    return BatchOp(fn=crop_mirror_normalize, layouts=(p.layout,))


def _normalize_views(p: CmnParams, views: list[np.ndarray]) -> SampleBatch:
    if not views:
        return []
    shape = views[0].shape
    if any(v.shape != shape for v in views):
        out = []
        for view in views:
            mul, add = p.coefficients(view.shape[2])
            out.append(normalize(view, mul, add, p.dtype, chw=p.chw,
                                 channels_out=p.channels_out(view.shape[2])))
        return out
    mul, add = p.coefficients(shape[2])
    return normalize_batch(views, mul, add, p.dtype, chw=p.chw,
                           channels_out=p.channels_out(shape[2]))
