"""The reference of a kernel that would fuse resize's second pass with
crop_mirror_normalize (no such kernel yet): each output pixel of crop_mirror_normalize
computes the one resized pixel it reads, by the second pass's taps over the first pass's
output, rounds it to the resize's type as storing it would, and normalises it. The resized
image is never stored, and only the pixels of the crop window are computed.

It takes the two plans the operators make (the resize's, and crop_mirror_normalize's for
images of the resize's output shapes) and gives what the two kernels give in turn, value
for value (``tests/engine/test_cuda_fused_reference.py``): the same float32 sums in the
same order, the same rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.reference.geometry import resize_pass
from conveyor_server.engine.ops.cuda.reference.store import as_type, load_f, store_f

_F32 = np.float32


def resize_crop_mirror_normalize(resize: plans.ResizeBatchPlan, normalize: plans.NormalizePlan,
                                 images: Sequence[np.ndarray]) -> list[np.ndarray]:
    """crop_mirror_normalize's outputs (``normalize``) of the resize of ``images``
    (``resize``), computed as one fused kernel would."""
    mids = resize_pass(resize.first, images, np.dtype(_F32), resize.in_dtype)
    second = resize.second
    outs = []
    for s, mid in enumerate(mids):
        (_, _, _, _, c, dst_h, dst_w, axis, start_at, weight_at, taps, _) = \
            (int(v) for v in second.geom[s])
        in_h, in_w, channels, y0, x0, out_h, out_w, mirror, channels_out = \
            (int(v) for v in normalize.geom[s])
        assert (in_h, in_w, channels) == (dst_h, dst_w, c), "the plans are of other images"
        rows = y0 + np.arange(out_h)  # the resized pixels the window reads
        cols = x0 + (np.arange(out_w)[::-1] if mirror else np.arange(out_w))
        filtered = rows if axis == 0 else cols  # the axis the second pass filters
        count = dst_h if axis == 0 else dst_w
        start = second.starts[start_at:start_at + count].astype(np.int64)[filtered]
        weights = second.weights[weight_at:weight_at + count * taps].reshape(count, taps)
        n = mid.shape[axis]
        acc = np.zeros((out_h, out_w, c), dtype=_F32)
        for k in range(taps):
            j = np.clip(start + k, 0, n - 1)
            w = weights[filtered, k]
            if axis == 0:
                term = w[:, None, None] * load_f(mid[j][:, cols])
            else:
                term = w[None, :, None] * load_f(mid[rows][:, j])
            acc = term if k == 0 else acc + term
        pixels = as_type(acc, resize.dtype)  # stored as the resize's output, loaded back
        values = np.zeros((out_h, out_w, channels_out), dtype=_F32)
        values[..., :c] = pixels * normalize.mul[s, :c] + normalize.add[s, :c]
        out = store_f(values, normalize.dtype)
        outs.append(np.ascontiguousarray(out.transpose(2, 0, 1)) if normalize.chw else out)
    return outs
