"""The separable filters that define ``resize``: for each output pixel along one axis, the
input pixels it reads and their weights.

The CPU operator resizes with OpenCV; these are OpenCV's definitions, written out so that
another path (the GPU kernels, their numpy references) computes the same filter from the
same numbers: ``nn`` reads ``floor(x * in / out)``; ``linear`` reads the two pixels around
``(x + 0.5) * in / out - 0.5``, clamped to the image; ``area`` (linear with antialiasing, when
an axis shrinks) averages the input cells each output cell covers, weighted by how much of
each it covers. Weights are float32, as OpenCV's tables; a tap past the edge reads the edge
pixel (the kernels clamp every index).

``resize_steps`` is the choice of filters the CPU operator makes (``resize.resize_image``
follows it); ``resize_plan`` turns the same steps into one filter per axis, and
``resize_plans`` makes the same choice for every resize of a batch at once, as arrays.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AxisFilter:
    """One axis of a resize: output pixel ``i`` is
    ``sum(weights[i, k] * input[clamp(start[i] + k)] for k in range(taps))``."""

    start: np.ndarray  # int32, one per output pixel
    weights: np.ndarray  # float32, (output pixels, taps)

    @property
    def taps(self) -> int:
        return int(self.weights.shape[1])


def inverse_scale(in_size: int, out_size: int) -> float:
    """OpenCV's scale along an axis: 1 / (out / in), in double precision."""
    return 1.0 / (out_size / in_size)


def _frozen(start: np.ndarray, weights: np.ndarray) -> AxisFilter:
    # Filters are cached and shared between images: nothing may write to them.
    start.flags.writeable = False
    weights.flags.writeable = False
    return AxisFilter(start, weights)


# The filters are pure functions of two sizes, computed for every image of a batch (a random
# crop's size is drawn per image): each is kept for the sizes met last, a few KB apiece.
@functools.lru_cache(maxsize=4096)
def nearest_filter(in_size: int, out_size: int) -> AxisFilter:
    scale = inverse_scale(in_size, out_size)
    start = np.minimum(np.floor(np.arange(out_size) * scale), in_size - 1)
    return _frozen(start.astype(np.int32), np.ones((out_size, 1), dtype=np.float32))


@functools.lru_cache(maxsize=4096)
def linear_filter(in_size: int, out_size: int) -> AxisFilter:
    scale = inverse_scale(in_size, out_size)
    # OpenCV keeps the source position as a float32; the rest is exact in double precision.
    fx = ((np.arange(out_size) + 0.5) * scale - 0.5).astype(np.float32).astype(np.float64)
    sx = np.floor(fx)
    fx -= sx
    below = sx < 0
    fx[below], sx[below] = 0.0, 0.0
    past = sx >= in_size - 1
    fx[past], sx[past] = 0.0, in_size - 1
    weights = np.stack([1.0 - fx, fx], axis=1).astype(np.float32)
    return _frozen(sx.astype(np.int32), weights)


@functools.lru_cache(maxsize=4096)
def area_filter(in_size: int, out_size: int) -> AxisFilter:
    """OpenCV's ``INTER_AREA`` weights along a shrinking (or unchanged) axis: output cell
    ``x`` covers ``[x * scale, (x + 1) * scale)``; a partly covered first and last input
    pixel weigh what they cover (ignored under 1e-3), every whole one ``1 / cell``."""
    scale = inverse_scale(in_size, out_size)
    fsx1 = np.arange(out_size) * scale
    fsx2 = fsx1 + scale
    cell = np.minimum(scale, in_size - fsx1)
    sx2 = np.minimum(np.floor(fsx2), in_size - 1)
    sx1 = np.minimum(np.ceil(fsx1), sx2)
    head = (sx1 - fsx1) > 1e-3
    tail = (fsx2 - sx2) > 1e-3
    whole = (sx2 - sx1).astype(np.int64)
    taps = int((head + whole + tail).max())
    k = np.arange(taps)[None, :]
    lead = head.astype(np.int64)[:, None]
    table = np.where((k >= lead) & (k < lead + whole[:, None]), 1.0 / cell[:, None], 0.0)
    table[:, 0] = np.where(head, (sx1 - fsx1) / cell, table[:, 0])
    last = np.minimum(np.minimum(fsx2 - sx2, 1.0), cell) / cell
    rows = np.flatnonzero(tail)
    table[rows, (head + whole)[rows]] = last[rows]
    return _frozen((sx1 - head).astype(np.int32), table.astype(np.float32))


# -- the filters of many pairs of sizes at once --------------------------------------------
#
# Each filter above is defined output pixel by output pixel: the filters of several pairs of
# sizes are computed over the concatenation of their output pixels, each pixel with its own
# pair's sizes, by the same float64 operations in the same order, so each pair's filter is
# the one-pair function's, bit for bit (tests/engine/test_resize_filters_batch.py).

Sizes = Sequence[int] | np.ndarray


class _Pixels:
    """The output pixels of several (in_size, out_size) pairs, concatenated: for each, its
    position ``x`` in its pair's output, its pair's input size and scale."""

    def __init__(self, in_sizes: Sizes, out_sizes: Sizes) -> None:
        ins = np.asarray(in_sizes, dtype=np.int64).reshape(-1)
        self.outs = np.asarray(out_sizes, dtype=np.int64).reshape(-1)
        self.firsts = np.cumsum(self.outs) - self.outs  # where each pair's pixels start
        pair = np.repeat(np.arange(len(ins)), self.outs)
        self.x = np.arange(int(self.outs.sum())) - self.firsts[pair]
        self.in_size = ins[pair]
        self.scale = inverse_scales(ins, self.outs)[pair]


def _split(outs: np.ndarray, start: np.ndarray, weights: np.ndarray,
           taps: np.ndarray | None = None) -> list[AxisFilter]:
    """The filters of pairs whose pixels follow one another in ``start`` and ``weights``,
    ``outs`` pixels each (and ``taps`` columns of ``weights`` each, where given); each its
    own C-contiguous arrays (copies: a kept filter holds no batch's)."""
    firsts = (np.cumsum(outs) - outs).tolist()
    widths = [weights.shape[1]] * len(firsts) if taps is None else taps.tolist()
    return [_frozen(start[a:a + n].copy(), weights[a:a + n, :t].copy())
            for a, n, t in zip(firsts, outs.tolist(), widths, strict=True)]


def inverse_scales(in_sizes: np.ndarray, out_sizes: np.ndarray) -> np.ndarray:
    """``inverse_scale`` of each pair (int64 arrays): the same correctly rounded quotients
    (the sizes are exact in float64)."""
    return 1.0 / (out_sizes / in_sizes)


def nearest_filters(in_sizes: Sizes, out_sizes: Sizes) -> list[AxisFilter]:
    """``nearest_filter`` of each (in_sizes[i], out_sizes[i]), computed together."""
    px = _Pixels(in_sizes, out_sizes)
    start = np.minimum(np.floor(px.x * px.scale), px.in_size - 1)
    return _split(px.outs, start.astype(np.int32), np.ones((len(px.x), 1), dtype=np.float32))


def linear_filters(in_sizes: Sizes, out_sizes: Sizes) -> list[AxisFilter]:
    """``linear_filter`` of each (in_sizes[i], out_sizes[i]), computed together."""
    px = _Pixels(in_sizes, out_sizes)
    # OpenCV keeps the source position as a float32; the rest is exact in double precision.
    fx = ((px.x + 0.5) * px.scale - 0.5).astype(np.float32).astype(np.float64)
    sx = np.floor(fx)
    fx -= sx
    below = sx < 0
    fx[below], sx[below] = 0.0, 0.0
    past = sx >= px.in_size - 1
    fx[past], sx[past] = 0.0, (px.in_size - 1)[past]
    weights = np.stack([1.0 - fx, fx], axis=1).astype(np.float32)
    return _split(px.outs, sx.astype(np.int32), weights)


def area_filters(in_sizes: Sizes, out_sizes: Sizes) -> list[AxisFilter]:
    """``area_filter`` of each (in_sizes[i], out_sizes[i]), computed together. Each pair's
    table is as wide as its own widest cell (its taps)."""
    px = _Pixels(in_sizes, out_sizes)
    scale = px.scale
    fsx1 = px.x * scale
    fsx2 = fsx1 + scale
    cell = np.minimum(scale, px.in_size - fsx1)
    sx2 = np.minimum(np.floor(fsx2), px.in_size - 1)
    sx1 = np.minimum(np.ceil(fsx1), sx2)
    head = (sx1 - fsx1) > 1e-3
    tail = (fsx2 - sx2) > 1e-3
    whole = (sx2 - sx1).astype(np.int64)
    if len(whole) == 0:
        return []
    taps = np.maximum.reduceat(head + whole + tail, px.firsts)
    # Each value of a table as area_filter's float64 table holds it, rounded to float32
    # one by one (what its astype does to the whole table).
    inner = (1.0 / cell).astype(np.float32)
    first = ((sx1 - fsx1) / cell).astype(np.float32)
    last = (np.minimum(np.minimum(fsx2 - sx2, 1.0), cell) / cell).astype(np.float32)
    start = (sx1 - head).astype(np.int32)
    widest = int(taps.max())
    # One table as wide as the widest pair's, each pair's cut to its own width; pairs far
    # wider than the rest (a huge shrink) tabled by width instead, not to make it huge.
    groups = [widest] if len(whole) * widest <= _AREA_TABLE_CELLS else np.unique(taps).tolist()
    by_pair: dict[int, AxisFilter] = {}
    for width in groups:
        pairs = np.flatnonzero(taps <= width if len(groups) == 1 else taps == width)
        rows = slice(None) if len(groups) == 1 else np.flatnonzero(np.repeat(taps, px.outs)
                                                                  == width)
        k = np.arange(width)[None, :]
        lead = head[rows].astype(np.int64)[:, None]
        table = np.where((k >= lead) & (k < lead + whole[rows][:, None]),
                         inner[rows][:, None], np.float32(0.0))
        table[:, 0] = np.where(head[rows], first[rows], table[:, 0])
        ends = np.flatnonzero(tail[rows])
        table[ends, (head + whole)[rows][ends]] = last[rows][ends]
        outs = px.outs[pairs]
        by_pair.update(zip(pairs.tolist(), _split(outs, start[rows], table, taps[pairs]),
                           strict=True))
    return [by_pair[i] for i in range(len(px.outs))]


#: The most values of one table ``area_filters`` makes of several pairs at once.
_AREA_TABLE_CELLS = 1 << 22


#: One resize the CPU operator makes: (output height and width, filter), the filter an
#: ``interp_type`` or "area".
ResizeStep = tuple[tuple[int, int], str]


def resize_steps(in_hw: tuple[int, int], out_hw: tuple[int, int], interp_type: str,
                 antialias: bool) -> tuple[ResizeStep, ...]:
    """The resizes that take an image of ``in_hw`` to ``out_hw``, in order (none: a copy).

    Linear with ``antialias`` averages areas along every shrinking axis; when one axis
    shrinks and the other grows, the shrinking one is averaged first (a resize of its own,
    rounded to the image's type) and the other interpolated after.
    """
    (h, w), (out_h, out_w) = in_hw, out_hw
    if out_hw == (h, w):
        return ()
    if not (antialias and interp_type == "linear") or (out_h >= h and out_w >= w):
        return ((out_hw, interp_type),)
    if out_h <= h and out_w <= w:
        return ((out_hw, "area"),)
    if out_w < w:
        return (((h, out_w), "area"), (out_hw, "linear"))
    return (((out_h, w), "area"), (out_hw, "linear"))


_FILTERS = {"nn": nearest_filter, "linear": linear_filter, "area": area_filter}
#: The filters by code (``resize_plans`` names them by their index here).
KINDS = ("nn", "linear", "area")


def axis_filter(kind: int, in_size: int, out_size: int) -> AxisFilter:
    """The filter ``KINDS[kind]`` taking ``in_size`` pixels to ``out_size``."""
    return _FILTERS[KINDS[kind]](in_size, out_size)
#: The interpolations these filters define (the GPU operators take these).
FILTERED_INTERP = frozenset(("nn", "linear"))


@dataclass(frozen=True)
class ResizePlan:
    """One image's resize as two separable passes: ``first`` (the axis filtered first, "rows"
    or "cols") and then the other. ``round_between``: the first pass's values are rounded
    to the image's type before the second, as when the CPU operator makes two resizes."""

    rows: AxisFilter
    cols: AxisFilter
    first: str
    round_between: bool


def resize_plan(in_hw: tuple[int, int], out_hw: tuple[int, int], interp_type: str,
                antialias: bool) -> ResizePlan:
    """The passes of ``resize_steps(in_hw, out_hw, interp_type, antialias)`` for
    ``interp_type`` "nn" or "linear"."""
    if interp_type not in FILTERED_INTERP:
        raise ValueError(f"no separable filter is defined for interp_type {interp_type!r}")
    steps = resize_steps(in_hw, out_hw, interp_type, antialias) or ((out_hw, "nn"),)
    (h, w), (out_h, out_w) = in_hw, out_hw
    if len(steps) == 1:
        make = _FILTERS[steps[0][1]]
        return ResizePlan(make(h, out_h), make(w, out_w), "cols", False)
    (_, mid_w), _ = steps[0]
    if mid_w != w:  # the columns shrink first
        return ResizePlan(linear_filter(h, out_h), area_filter(w, out_w), "cols", True)
    return ResizePlan(area_filter(h, out_h), linear_filter(w, out_w), "rows", True)


@dataclass(frozen=True)
class ResizePlans:
    """``resize_plan`` of each resize of a batch, as arrays (one element per resize): the
    filter of the rows and of the columns (codes: indices into ``KINDS``), whether the
    columns are filtered first (``first == "cols"``), and ``round_between``."""

    rows: np.ndarray  # int64 codes
    cols: np.ndarray  # int64 codes
    cols_first: np.ndarray  # bool
    round_between: np.ndarray  # bool


def resize_plans(in_h: np.ndarray, in_w: np.ndarray, out_h: np.ndarray, out_w: np.ndarray,
                 interp_type: str, antialias: bool) -> ResizePlans:
    """``resize_plan`` of every ((in_h, in_w), (out_h, out_w)) at once: the same choice of
    ``resize_steps``, written over arrays."""
    if interp_type not in FILTERED_INTERP:
        raise ValueError(f"no separable filter is defined for interp_type {interp_type!r}")
    nn, area = KINDS.index("nn"), KINDS.index("area")
    rows = np.full(len(in_h), KINDS.index(interp_type), dtype=np.int64)
    cols = rows.copy()
    cols_first = np.ones(len(in_h), dtype=bool)
    round_between = np.zeros(len(in_h), dtype=bool)
    if antialias and interp_type == "linear":
        grows = (out_h >= in_h) & (out_w >= in_w)  # interpolated, one step
        shrinks = (out_h <= in_h) & (out_w <= in_w) & ~grows  # averaged, one step
        mixed = ~(grows | shrinks)  # the shrinking axis averaged first, then rounded
        rows[shrinks], cols[shrinks] = area, area
        cols_shrink = mixed & (out_w < in_w)
        rows_shrink = mixed & ~(out_w < in_w)
        cols[cols_shrink] = area
        rows[rows_shrink] = area
        cols_first[rows_shrink] = False
        round_between[mixed] = True
    same = (out_h == in_h) & (out_w == in_w)  # a copy: nearest, one step
    rows[same], cols[same] = nn, nn
    return ResizePlans(rows, cols, cols_first, round_between)
