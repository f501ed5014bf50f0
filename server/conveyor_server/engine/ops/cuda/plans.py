"""What one batched kernel launch computes: every sample's shapes, offsets and parameters
as arrays, built on the host by ``planners.py`` from the CPU operators' own parameter code.

A plan is all a launch needs besides the images: ``launch.run`` copies its arrays to the
device and launches its kernels once per batch; ``reference.run`` computes the same outputs
with numpy from the same plan. Shapes are HWC; geometry arrays are int64, one row per
sample, in the order the kernel source documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Shape = tuple[int, ...]


@dataclass(frozen=True)
class SlicePlan:
    """crop and flip (``slice.cu``)."""

    geom: np.ndarray  # (N, 9): in_h, in_w, channels, out_h, out_w, y0, x0, flip_x, flip_y
    fill: np.ndarray  # (N, channels) in the sample type
    out_shapes: list[Shape]
    dtype: np.dtype


@dataclass(frozen=True)
class WarpPlan:
    """rotate and warp_affine (``warp.cu``)."""

    geom: np.ndarray  # (N, 5): in_h, in_w, channels, out_h, out_w
    matrix: np.ndarray  # (N, 6) float32: the output-to-input map
    fill: np.ndarray  # (N, channels) float32
    linear: bool
    replicate: bool
    out_shapes: list[Shape]
    dtype: np.dtype
    #: ``matrix`` maps pixel corners and nearest takes the floor, as DALI's warp_affine
    #: (see ``warp.cu``); False: OpenCV's pixel centres, nearest rounds.
    corner: bool = False


@dataclass(frozen=True)
class ResizePass:
    """One separable pass (``resize.cu``) over every sample."""

    geom: np.ndarray  # (N, 12), see resize.cu
    starts: np.ndarray  # int32, every sample's filter starts, concatenated
    weights: np.ndarray  # float32, every sample's filter weights, concatenated
    out_shapes: list[Shape]


@dataclass(frozen=True)
class ResizeBatchPlan:
    """resize and random_resized_crop: two passes (the sample type to float32, then
    float32 to ``dtype``)."""

    first: ResizePass
    second: ResizePass
    in_dtype: np.dtype
    dtype: np.dtype

    @property
    def out_shapes(self) -> list[Shape]:
        return self.second.out_shapes


@dataclass(frozen=True)
class NormalizePlan:
    """crop_mirror_normalize (``normalize.cu``)."""

    geom: np.ndarray  # (N, 9): in_h, in_w, channels, y0, x0, out_h, out_w, mirror, channels_out
    mul: np.ndarray  # (N, channels) float32
    add: np.ndarray  # (N, channels) float32
    chw: bool
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype


@dataclass(frozen=True)
class CastPlan:
    """cast (``cast.cu``): samples of any shape."""

    counts: np.ndarray  # (N,) values per sample
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype


@dataclass(frozen=True)
class ColorPlan:
    """brightness_contrast (``kind`` "brightness_contrast": coef (N, 2) mul, add) and hsv
    and color_twist ("color_matrix": coef (N, 12), a 3x4 matrix) (``color.cu``)."""

    kind: str
    geom: np.ndarray  # (N, 2): pixels, channels
    coef: np.ndarray  # float32
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype


@dataclass(frozen=True)
class TransferPlan:
    """copy (``DataNode.gpu()``): no kernel, the samples as the transfer to the device left
    them (any shape)."""

    out_shapes: list[Shape]
    dtype: np.dtype


Plan = SlicePlan | WarpPlan | ResizeBatchPlan | NormalizePlan | CastPlan | ColorPlan | \
    TransferPlan


def rows(values: list[list[int]], width: int) -> np.ndarray:
    """Per-sample int64 rows (an empty batch has shape (0, width))."""
    return np.array(values, dtype=np.int64).reshape(len(values), width)


def padded(values: list[np.ndarray], dtype: np.dtype) -> np.ndarray:
    """Per-sample vectors of possibly different lengths as one (N, longest) array, zero
    padded."""
    width = max((len(v) for v in values), default=1) or 1
    out = np.zeros((len(values), width), dtype=dtype)
    for i, v in enumerate(values):
        out[i, :len(v)] = v
    return out
