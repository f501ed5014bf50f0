"""numpy references of the CUDA kernels: each computes, from the same plan, what its
kernel computes, in the same arithmetic (float32 products and sums in the kernel's order,
no fused multiply-adds, the same rounding and saturation). On a GPU the kernels are checked
against them (``tests/engine/test_cuda_gpu.py``); on any machine they are checked against the CPU
operators (``tests/engine/test_cuda_reference.py``), so the kernels' definition is tested in CI.
``fused.py`` is the reference of a kernel not written yet (resize's second pass fused with
crop_mirror_normalize), checked against the two it would replace.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.reference import geometry, values


def run(plan: plans.Plan, images: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What the plan's kernels compute for ``images`` (HWC numpy arrays)."""
    if isinstance(plan, plans.TransferPlan):
        return [np.array(image, copy=True) for image in images]
    if isinstance(plan, plans.SlicePlan):
        return geometry.slice_flip(plan, images)
    if isinstance(plan, plans.WarpPlan):
        return geometry.warp_affine(plan, images)
    if isinstance(plan, plans.ResizeBatchPlan):
        return geometry.resize(plan, images)
    if isinstance(plan, plans.NormalizePlan):
        return values.crop_mirror_normalize(plan, images)
    if isinstance(plan, plans.CastPlan):
        return values.cast(plan, images)
    return values.color(plan, images)
