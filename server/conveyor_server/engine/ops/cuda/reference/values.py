"""References of ``normalize.cu`` (crop_mirror_normalize), ``cast.cu`` and ``color.cu``
(brightness_contrast, hsv, color_twist)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.reference.store import load_f, store_d, store_f


def crop_mirror_normalize(plan: plans.NormalizePlan,
                          images: Sequence[np.ndarray]) -> list[np.ndarray]:
    outs = []
    for s, image in enumerate(images):
        _, _, c, y0, x0, out_h, out_w, mirror, channels_out = (int(v) for v in plan.geom[s])
        view = image[y0:y0 + out_h, x0:x0 + out_w]
        if mirror:
            view = view[:, ::-1]
        values = np.zeros((out_h, out_w, channels_out), dtype=np.float32)
        values[..., :c] = load_f(view) * plan.mul[s, :c] + plan.add[s, :c]
        out = store_f(values, plan.dtype)
        outs.append(np.ascontiguousarray(out.transpose(2, 0, 1)) if plan.chw else out)
    return outs


def cast(plan: plans.CastPlan, images: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [store_d(np.asarray(v).astype(np.float64), plan.dtype).reshape(v.shape)
            for v in images]


def color(plan: plans.ColorPlan, images: Sequence[np.ndarray]) -> list[np.ndarray]:
    outs = []
    for s, image in enumerate(images):
        values = load_f(image)
        if plan.kind == "brightness_contrast":
            mul, add = plan.coef[s]
            outs.append(store_f(values * mul + add, plan.dtype))
            continue
        m = plan.coef[s].reshape(3, 4)
        r, g, b = values[..., 0], values[..., 1], values[..., 2]
        out = np.stack([((m[c, 0] * r + m[c, 1] * g) + m[c, 2] * b) + m[c, 3]
                        for c in range(3)], axis=-1)
        outs.append(store_f(out, plan.dtype))
    return outs
