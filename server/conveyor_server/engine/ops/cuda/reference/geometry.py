"""References of ``slice.cu`` (crop, flip), ``warp.cu`` (rotate) and ``resize.cu`` (resize,
random_resized_crop)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.reference.store import as_type, load_f, store_f

_F32 = np.float32


def slice_flip(plan: plans.SlicePlan, images: Sequence[np.ndarray]) -> list[np.ndarray]:
    outs = []
    for s, image in enumerate(images):
        in_h, in_w, c, out_h, out_w, y0, x0, flip_x, flip_y = (int(v) for v in plan.geom[s])
        rows = np.arange(out_h)
        cols = np.arange(out_w)
        sy = y0 + (out_h - 1 - rows if flip_y else rows)
        sx = x0 + (out_w - 1 - cols if flip_x else cols)
        inside = ((sy >= 0) & (sy < in_h))[:, None] & ((sx >= 0) & (sx < in_w))[None, :]
        taken = image[np.clip(sy, 0, in_h - 1)][:, np.clip(sx, 0, in_w - 1)]
        fill = plan.fill[s, :c].astype(plan.dtype)
        outs.append(np.where(inside[..., None], taken, fill).astype(plan.dtype))
    return outs


def _to_index(v: np.ndarray, n: int) -> np.ndarray:
    return np.minimum(np.maximum(v, _F32(-2.0)), _F32(n + 1.0)).astype(np.int64)


def _fetch(image: np.ndarray, y: np.ndarray, x: np.ndarray, replicate: bool,
           fill: np.ndarray) -> np.ndarray:
    h, w = image.shape[:2]
    values = load_f(image[np.clip(y, 0, h - 1), np.clip(x, 0, w - 1)])
    if replicate:
        return values
    inside = (y >= 0) & (y < h) & (x >= 0) & (x < w)
    return np.where(inside[..., None], values, fill.astype(_F32))


def warp_affine(plan: plans.WarpPlan, images: Sequence[np.ndarray]) -> list[np.ndarray]:
    outs = []
    for s, image in enumerate(images):
        in_h, in_w, c, out_h, out_w = (int(v) for v in plan.geom[s])
        m = plan.matrix[s].astype(_F32)
        y, x = np.mgrid[0:out_h, 0:out_w].astype(_F32)
        sx = (m[0] * x + m[1] * y) + m[2]
        sy = (m[3] * x + m[4] * y) + m[5]
        fill = plan.fill[s, :c]
        if not plan.linear and plan.corner:
            # Each row's start, then the x step added pixel by pixel, in float32.
            cy = np.arange(out_h, dtype=_F32) + _F32(0.5)
            steps = np.empty((2, out_h, out_w), dtype=_F32)
            for r, k in enumerate((0, 3)):
                steps[r, :, 0] = (m[k] * _F32(0.5) + m[k + 1] * cy) + m[k + 2]
                steps[r, :, 1:] = m[k]
            px, py = np.cumsum(steps, axis=2, dtype=_F32)
            ix, iy = _to_index(np.floor(px), in_w), _to_index(np.floor(py), in_h)
            outs.append(store_f(_fetch(image, iy, ix, plan.replicate, fill), plan.dtype))
            continue
        if not plan.linear:
            ix, iy = _to_index(np.rint(sx), in_w), _to_index(np.rint(sy), in_h)
            outs.append(store_f(_fetch(image, iy, ix, plan.replicate, fill), plan.dtype))
            continue
        x0, y0 = np.floor(sx), np.floor(sy)
        ax, ay = sx - x0, sy - y0
        bx, by = _F32(1.0) - ax, _F32(1.0) - ay
        ix, iy = _to_index(x0, in_w), _to_index(y0, in_h)
        acc = _fetch(image, iy, ix, plan.replicate, fill) * (by * bx)[..., None]
        acc = acc + _fetch(image, iy, ix + 1, plan.replicate, fill) * (by * ax)[..., None]
        acc = acc + _fetch(image, iy + 1, ix, plan.replicate, fill) * (ay * bx)[..., None]
        acc = acc + _fetch(image, iy + 1, ix + 1, plan.replicate, fill) * (ay * ax)[..., None]
        outs.append(store_f(acc, plan.dtype))
    return outs


def resize_pass(step: plans.ResizePass, sources: Sequence[np.ndarray], out_dtype: np.dtype,
                round_dtype: np.dtype) -> list[np.ndarray]:
    """One pass of ``resize.cu``; ``sources`` are the samples' full arrays (the window is
    read through the pass's offset and row stride)."""
    outs = []
    for s, src in enumerate(sources):
        (src_h, src_w, stride, offset, c, dst_h, dst_w, axis, start_at, weight_at, taps,
         round_between) = (int(v) for v in step.geom[s])
        flat = src.reshape(-1)
        rows = axis == 0
        n = src_h if rows else src_w
        count = dst_h if rows else dst_w
        start = step.starts[start_at:start_at + count].astype(np.int64)
        weights = step.weights[weight_at:weight_at + count * taps].reshape(count, taps)
        yy = np.arange(dst_h)[:, None, None]
        xx = np.arange(dst_w)[None, :, None]
        cc = np.arange(c)[None, None, :]
        acc = np.zeros((dst_h, dst_w, c), dtype=_F32)
        for k in range(taps):
            j = np.clip(start + k, 0, n - 1)
            w = weights[:, k]
            if rows:
                at = offset + j[:, None, None] * stride + xx * c + cc
                term = w[:, None, None] * load_f(flat[at])
            else:
                at = offset + yy * stride + j[None, :, None] * c + cc
                term = w[None, :, None] * load_f(flat[at])
            acc = term if k == 0 else acc + term
        if round_between:
            acc = as_type(acc, round_dtype)
        outs.append(store_f(acc, out_dtype))
    return outs


def resize(plan: plans.ResizeBatchPlan, images: Sequence[np.ndarray]) -> list[np.ndarray]:
    mid = resize_pass(plan.first, images, np.dtype(_F32), plan.in_dtype)
    return resize_pass(plan.second, mid, plan.dtype, np.dtype(_F32))
