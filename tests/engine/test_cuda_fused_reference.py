"""The reference of a kernel fusing resize's second pass with crop_mirror_normalize
(``engine/ops/cuda/reference/fused.py``) against the two kernels' references in turn:
the same values, bit for bit, on batches of mixed sizes (noise and JPEGs; uint8 and float
resizes, nearest and linear, shrinking, growing and both), with every crop_mirror_normalize
setting that changes a pixel (windows at the edges, mirror, output types, layouts,
padding)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor_server.engine import catalog
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.cuda import plans, reference
from conveyor_server.engine.ops.cuda.ops import PLANNERS
from conveyor_server.engine.ops.cuda.reference.fused import resize_crop_mirror_normalize
from tests.support.cuda_cases import mixed_batch
from tests.support.op_helpers import op_context

RESIZES: list[dict[str, Any]] = [
    {"size": (40, 36), "interp_type": "linear"},
    {"size": (80, 20), "interp_type": "linear"},  # one axis grows, one shrinks
    {"size": (90, 100), "interp_type": "nn"},
    {"resize_shorter": 30.0, "dtype": "float32"},
    {"size": (33, 31), "antialias": False, "dtype": "float32"},
]
NORMALIZES: list[dict[str, Any]] = [
    {"crop": (20, 20), "mean": (120.0, 110.0, 100.0), "std": (60.0, 55.0, 50.0)},
    {"crop": (20, 18), "mean": (128.0,), "std": (64.0,), "dtype": "float16",
     "output_layout": "HWC", "pad_output": True},
    {"crop": (7, 9), "mean": (100.0,), "std": (0.5,), "dtype": "int8", "scale": 0.25},
    {"crop": (15, 16), "mean": (3.0,), "std": (0.7,), "dtype": "uint8", "shift": 64.0},
    {"mean": (10.0,), "std": (2.0,)},  # no crop: the whole resized image
]


def _plan(op_type: str, args: dict[str, Any], fed: tuple[str, ...], images: list[Any],
          targs: list[Targs]) -> Any:
    catalog.load()
    return PLANNERS[op_type].make(op_context(op_type, tensor_args=fed, **args))(images, targs)


@pytest.mark.parametrize("resize_args", RESIZES, ids=str)
@pytest.mark.parametrize("normalize_args", NORMALIZES, ids=str)
def test_the_fused_reference_is_the_two_kernels_in_turn(resize_args: dict[str, Any],
                                                       normalize_args: dict[str, Any]) -> None:
    rng = np.random.default_rng(len(str(resize_args)) + len(str(normalize_args)))
    for seed in range(2):
        images = mixed_batch(seed=seed, count=6)
        if seed:
            images = [im.astype(np.float32) * 1.37 - 20.0 for im in images]
        resize = _plan("resize", resize_args, (), images, [{} for _ in images])
        assert isinstance(resize, plans.ResizeBatchPlan)
        resized = reference.run(resize, images)
        targs: list[Targs] = [{"mirror": np.array(i % 2, np.int32),
                               "crop_pos_x": np.array(rng.choice([0.0, 1.0, rng.random()]),
                                                      np.float32),
                               "crop_pos_y": np.array(rng.choice([0.0, 1.0, rng.random()]),
                                                      np.float32)}
                              for i in range(len(images))]
        normalize = _plan("crop_mirror_normalize", normalize_args,
                          ("mirror", "crop_pos_x", "crop_pos_y"), resized, targs)
        assert isinstance(normalize, plans.NormalizePlan)
        expected = reference.run(normalize, resized)
        got = resize_crop_mirror_normalize(resize, normalize, images)
        for g, e in zip(got, expected, strict=True):
            assert g.dtype == e.dtype and g.shape == e.shape
            assert g.tobytes() == e.tobytes()
