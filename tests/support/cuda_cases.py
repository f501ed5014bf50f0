"""Batches and operator configurations shared by the GPU operator tests: the numpy
reference checked against the CPU operators here, the kernels against the reference on a
GPU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from conveyor_server.engine import catalog
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.ops import PLANNERS
from conveyor_server.engine.ops.registry import SAMPLE_INDEX
from tests.support.images import make_image
from tests.support.op_helpers import op_context


def jpeg_image(seed: int, h: int, w: int) -> np.ndarray:
    """A real decoded JPEG (smooth areas, a sharp disc, compression noise), RGB."""
    ok, data = cv2.imencode(".jpg", make_image(seed, h, w), [cv2.IMWRITE_JPEG_QUALITY, 80])
    assert ok
    return cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def mixed_batch(seed: int = 0, count: int = 5) -> list[np.ndarray]:
    """Images of different sizes: JPEGs, and noise (every edge sharp)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        h, w = (int(v) for v in rng.integers(26, 70, 2))
        out.append(jpeg_image(seed * 100 + i, h, w) if i % 2 == 0 else
                   rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    return out


@dataclass(frozen=True)
class Case:
    op_type: str
    args: dict[str, Any]
    #: Per-sample argument values (one per sample of the batch: a number, or a matrix's
    #: values), by name.
    fed: dict[str, Sequence[Any]] = field(default_factory=dict)
    #: Largest difference allowed between the reference and the CPU operator, in units of
    #: the output type (LSB for integers); 0: byte-identical.
    tolerance: float = 0.0
    keyed: bool = False
    #: With a tolerance, the least share of values that must be equal (integer outputs).
    min_equal: float = 0.97

    @property
    def label(self) -> str:
        return f"{self.op_type}{self.args}{sorted(self.fed)}"

    def context(self) -> Any:
        return op_context(self.op_type, tensor_args=tuple(self.fed), **self.args)

    def targs(self, count: int, first_index: int = 1000) -> list[Targs]:
        out: list[Targs] = []
        for i in range(count):
            t: dict[str, np.ndarray] = {k: np.array(v[i % len(v)], dtype=np.float32)
                                        for k, v in self.fed.items()}
            if self.keyed:
                t[SAMPLE_INDEX] = np.array(first_index + i, dtype=np.uint64)
            out.append(t)
        return out

    def plan(self, images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        catalog.load()
        return PLANNERS[self.op_type].make(self.context())(images, targs)


ANGLES = (17.5, -33.0, 90.0, 181.25, 4.0)
#: warp_affine's matrices, one per sample (DALI's output-to-input maps).
MATRICES = ((0.93, 0.21, 1.3, -0.17, 1.08, -2.4), (0.71, -0.33, 12.6, 0.29, 0.84, -3.1),
            (1.17, 0.0, -4.35, 0.06, 0.88, 2.2))
CASES = [
    Case("crop", {"crop": (20, 24)}, {"crop_pos_x": (0.0, 0.3, 1.0), "crop_pos_y": (0.5, 1.0)}),
    Case("crop", {"crop": (40, 90), "out_of_bounds_policy": "pad", "fill_values": (7, 8, 9)},
         {"crop_pos_x": (0.2, 0.9)}),
    Case("crop", {"crop": (40, 90), "out_of_bounds_policy": "trim_to_shape"}),
    Case("flip", {"horizontal": 1, "vertical": 1}),
    Case("flip", {}, {"horizontal": (0, 1, 1), "vertical": (1, 0)}),
    Case("rotate", {"interp_type": "nn"}, {"angle": ANGLES}),
    Case("rotate", {"interp_type": "nn", "fill_value": (10, 200, 30)}, {"angle": ANGLES}),
    Case("rotate", {"interp_type": "linear"}, {"angle": ANGLES}, tolerance=1),
    Case("rotate", {"interp_type": "linear", "fill_value": (0,), "keep_size": True},
         {"angle": ANGLES}, tolerance=1),
    Case("warp_affine", {"interp_type": "nn"}, {"matrix": MATRICES}),
    Case("warp_affine", {"interp_type": "nn", "fill_value": (10, 200, 30), "size": (40, 50),
                         "inverse_map": False}, {"matrix": MATRICES}),
    Case("warp_affine", {"interp_type": "nn", "matrix": (1.0, 0.0, 0.5, 0.0, 1.0, -2.0)}),
    Case("warp_affine", {"matrix": MATRICES[1]}, tolerance=1),
    Case("warp_affine", {"fill_value": (0,), "size": (33, 21)}, {"matrix": MATRICES},
         tolerance=1),
    Case("resize", {"size": (31, 45), "interp_type": "nn"}),
    # OpenCV interpolates uint8 linearly in fixed point (with truncating SIMD steps); the
    # kernel in float32: within 1 LSB, most values equal.
    Case("resize", {"size": (50, 17), "interp_type": "linear", "antialias": False}, tolerance=1,
         min_equal=0.8),
    Case("resize", {"size": (23, 29), "interp_type": "linear"}, tolerance=1),
    Case("resize", {"size": (90, 9), "interp_type": "linear"}, tolerance=1, min_equal=0.8),
    Case("resize", {"size": (5, 80), "interp_type": "linear"}, tolerance=1, min_equal=0.9),
    Case("resize", {"resize_shorter": 33, "interp_type": "linear", "dtype": "float32"},
         tolerance=1e-3, min_equal=0.0),
    Case("random_resized_crop", {"size": (24, 24), "interp_type": "linear"}, tolerance=1,
         keyed=True),
    Case("random_resized_crop", {"size": (40, 30), "interp_type": "nn"}, keyed=True),
    Case("crop_mirror_normalize", {"crop": (8, 8), "mean": (120, 110, 100), "std": (60, 55, 50),
                                   "dtype": "float16"}, {"mirror": (0, 1)}),
    Case("crop_mirror_normalize", {"mean": (128,), "std": (64,), "output_layout": "HWC",
                                   "pad_output": True}, {"mirror": (1, 0, 1)}),
    Case("crop_mirror_normalize", {"crop": (6, 5), "mean": (100,), "std": (0.5,),
                                   "dtype": "int8", "scale": 0.25}),
    Case("cast", {"dtype": "float16"}),
    Case("cast", {"dtype": "int8"}),
    Case("brightness_contrast", {"brightness": 1.3, "contrast": 0.7, "brightness_shift": 0.05}),
    Case("brightness_contrast", {"dtype": "float32"}, {"brightness": (0.5, 1.5),
                                                       "contrast": (2.0, 0.25)}),
    Case("hsv", {}, {"hue": (30.0, -120.0), "saturation": (0.5, 1.8), "value": (1.1, 0.9)},
         tolerance=1),
    Case("color_twist", {"dtype": "float32"}, {"hue": (45.0,), "contrast": (1.4, 0.6)},
         tolerance=1e-3, min_equal=0.0),
    Case("saturation", {}, {"saturation": (0.0, 0.4, 1.7)}, tolerance=1),
    Case("brightness", {"brightness_shift": 0.1}, {"brightness": (0.5, 1.37)}),
    Case("contrast", {"dtype": "float32"}, {"contrast": (1.7, 0.4)}),
    Case("contrast", {"contrast": 1.4, "contrast_center": 90.0}),
    Case("hue", {}, {"hue": (37.0, -120.0)}, tolerance=1),
    Case("saturation", {"saturation": 2.5, "dtype": "float32"}, tolerance=1e-3, min_equal=0.0),
]
