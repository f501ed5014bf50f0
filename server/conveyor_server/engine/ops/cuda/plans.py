"""What one batched kernel launch computes: every sample's shapes, offsets and parameters
as arrays, built on the host by ``planners.py`` from the CPU operators' own parameter code.

A plan is all a launch needs besides the images: ``launch.run`` copies its arrays to the
device (packed in one buffer, ``Packed``: one copy per plan) and launches its kernels once
per batch; ``reference.run`` computes the same outputs with numpy from the same plan.
Shapes are HWC; geometry arrays are int64, one row per sample, in the order the kernel
source documents.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Shape = tuple[int, ...]


#: Each packed array starts on a multiple of this many bytes (any element type's alignment).
ALIGN = 16


@dataclass(frozen=True)
class Packed:
    """A plan's parameter arrays in one host buffer, each starting ``ALIGN``-byte aligned,
    so that a launch copies them to the device in one transfer and hands the kernels views
    of the copy (``views``). ``arrays`` are views of ``buffer``, in the kernel's order."""

    buffer: np.ndarray  # uint8, 1-D
    arrays: tuple[np.ndarray, ...]
    #: Where each array starts in ``buffer``, in bytes.
    offsets: tuple[int, ...]

    def views(self, copy: Any) -> list[Any]:
        """The arrays as views of ``copy``: a copy of ``buffer`` (numpy or CuPy, 1-D
        uint8), laid out as it is."""
        return [copy[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
                for at, a in zip(self.offsets, self.arrays, strict=True)]


def packed(parts: Sequence[tuple[Shape, np.dtype | type]]) -> Packed:
    """Zeroed arrays of these shapes and types, packed in one buffer, to fill in place."""
    offsets = []
    total = 0
    for shape, dtype in parts:
        offsets.append(total)
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        total += -(-nbytes // ALIGN) * ALIGN
    buffer = np.zeros(max(total, ALIGN), dtype=np.uint8)
    arrays = tuple(buffer[at:at + math.prod(shape) * np.dtype(dtype).itemsize]
                   .view(dtype).reshape(shape)
                   for at, (shape, dtype) in zip(offsets, parts, strict=True))
    return Packed(buffer, arrays, tuple(offsets))


def pack(*arrays: np.ndarray) -> Packed:
    """Copies of ``arrays`` (same shapes and types) packed in one buffer."""
    out = packed([(a.shape, a.dtype) for a in arrays])
    for dst, src in zip(out.arrays, arrays, strict=True):
        dst[...] = src
    return out


@dataclass(frozen=True)
class SlicePlan:
    """crop and flip (``slice.cu``)."""

    #: geom (N, 9) int64: in_h, in_w, channels, out_h, out_w, y0, x0, flip_x, flip_y;
    #: fill (N, channels) in the sample type.
    packed: Packed
    out_shapes: list[Shape]
    dtype: np.dtype

    @property
    def geom(self) -> np.ndarray:
        return self.packed.arrays[0]

    @property
    def fill(self) -> np.ndarray:
        return self.packed.arrays[1]


@dataclass(frozen=True)
class WarpPlan:
    """rotate and warp_affine (``warp.cu``)."""

    #: geom (N, 5) int64: in_h, in_w, channels, out_h, out_w; matrix (N, 6) float32: the
    #: output-to-input map; fill (N, channels) float32.
    packed: Packed
    linear: bool
    replicate: bool
    out_shapes: list[Shape]
    dtype: np.dtype
    #: ``matrix`` maps pixel corners and nearest takes the floor, as DALI's warp_affine
    #: (see ``warp.cu``); False: OpenCV's pixel centres, nearest rounds.
    corner: bool = False

    @property
    def geom(self) -> np.ndarray:
        return self.packed.arrays[0]

    @property
    def matrix(self) -> np.ndarray:
        return self.packed.arrays[1]

    @property
    def fill(self) -> np.ndarray:
        return self.packed.arrays[2]


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

    #: The first pass's geom, starts and weights, then the second's (``ResizePass``).
    packed: Packed
    mid_shapes: list[Shape]
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype

    @property
    def first(self) -> ResizePass:
        geom, starts, weights = self.packed.arrays[:3]
        return ResizePass(geom, starts, weights, self.mid_shapes)

    @property
    def second(self) -> ResizePass:
        geom, starts, weights = self.packed.arrays[3:]
        return ResizePass(geom, starts, weights, self.out_shapes)


@dataclass(frozen=True)
class NormalizePlan:
    """crop_mirror_normalize (``normalize.cu``)."""

    #: geom (N, 9) int64: in_h, in_w, channels, y0, x0, out_h, out_w, mirror,
    #: channels_out; mul and add (N, channels) float32.
    packed: Packed
    chw: bool
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype

    @property
    def geom(self) -> np.ndarray:
        return self.packed.arrays[0]

    @property
    def mul(self) -> np.ndarray:
        return self.packed.arrays[1]

    @property
    def add(self) -> np.ndarray:
        return self.packed.arrays[2]


@dataclass(frozen=True)
class CastPlan:
    """cast (``cast.cu``): samples of any shape."""

    packed: Packed  # counts (N,) int64: values per sample
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype

    @property
    def counts(self) -> np.ndarray:
        return self.packed.arrays[0]


@dataclass(frozen=True)
class ColorPlan:
    """brightness_contrast (``kind`` "brightness_contrast": coef (N, 2) mul, add) and hsv
    and color_twist ("color_matrix": coef (N, 12), a 3x4 matrix) (``color.cu``)."""

    kind: str
    packed: Packed  # geom (N, 2) int64: pixels, channels; coef float32
    out_shapes: list[Shape]
    in_dtype: np.dtype
    dtype: np.dtype

    @property
    def geom(self) -> np.ndarray:
        return self.packed.arrays[0]

    @property
    def coef(self) -> np.ndarray:
        return self.packed.arrays[1]


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
