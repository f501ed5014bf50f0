"""The plan of a batch of resizes (``resize`` and ``random_resized_crop`` on the GPU): each
sample's two separable passes (``resize.cu``) as the arrays of one
``plans.ResizeBatchPlan``, computed over the batch with numpy.

The filters are ``resize_filters``' own: which filter each axis takes is ``resize_plans``
(``resize_plan`` over arrays), and each filter, a pure function of its kind and two sizes,
is kept by the ``ResizeBatcher`` of one operator (its planner, built per pipeline) for the
sizes met last (``KeptFilters``); those a batch needs and does not find are computed
together (``resize_filters.nearest_filters``, ...). The arrays are written straight into the
plan's packed buffer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np

from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.geometry.resize_filters import (
    KINDS,
    AxisFilter,
    area_filters,
    linear_filters,
    nearest_filters,
    resize_plans,
)

#: A filter as the plan takes it: starts (int32), weights flattened (float32), taps.
Filter = tuple[np.ndarray, np.ndarray, int]
#: A filter's key: its kind (an index into ``KINDS``), input and output sizes.
FilterKey = tuple[int, int, int]

_MAKE: dict[str, Callable[[Sequence[int], Sequence[int]], list[AxisFilter]]] = {
    "nn": nearest_filters, "linear": linear_filters, "area": area_filters}


class KeptFilters:
    """Filters by key, kept for the keys met last: at most ``keep`` (each a few KB); when
    more are met, those the current batch does not use are dropped. The filters a batch
    needs and does not find are computed together, per kind. A filter is a pure function
    of its key, so what is kept changes the time only, never a value."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._kept: dict[FilterKey, Filter] = {}
        self._lock = threading.Lock()  # for writers; a reader sees one dict or the next

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, keys: list[FilterKey]) -> list[Filter]:
        kept = self._kept
        found = [kept.get(key) for key in keys]
        missing = sorted({key for key, flt in zip(keys, found, strict=True) if flt is None})
        if not missing:
            return cast(list[Filter], found)
        made: dict[FilterKey, Filter] = {}
        for code, kind in enumerate(KINDS):
            wanted = [key for key in missing if key[0] == code]
            if wanted:
                filters = _MAKE[kind]([k[1] for k in wanted], [k[2] for k in wanted])
                made.update((key, (f.start, f.weights.reshape(-1), f.taps))
                            for key, f in zip(wanted, filters, strict=True))
        with self._lock:
            kept = {**self._kept, **made}
            if len(kept) > self._keep:  # keep this batch's
                used = set(keys)
                kept = {key: flt for key, flt in kept.items() if key in used}
            self._kept = kept
        return [flt if flt is not None else made[key]
                for key, flt in zip(keys, found, strict=True)]


class ResizeBatcher:
    """Plans the resizes of one operator (``interp_type``, ``antialias``), batch by batch,
    keeping the last ``keep`` filters it computed."""

    def __init__(self, interp_type: str, antialias: bool, keep: int = 4096) -> None:
        self.interp_type, self.antialias = interp_type, antialias
        self.filters = KeptFilters(keep)

    def plan(self, shapes: np.ndarray, windows: np.ndarray, outs: np.ndarray,
             in_dtype: np.dtype, work: np.dtype) -> plans.ResizeBatchPlan:
        """The two passes resizing each sample's window to its output size: ``shapes``
        (N, 3) the images (HWC), ``windows`` (N, 4) their windows (y, x, h, w), ``outs``
        (N, 2) the output sizes, all int64; the first pass reads ``in_dtype`` and rounds
        to it between the passes where ``work`` is not a float type, the second writes
        ``work``."""
        n = len(shapes)
        full_w, c = shapes[:, 1], shapes[:, 2]
        y0, x0, h, w = windows.T
        out_h, out_w = outs.T
        chosen = resize_plans(h, w, out_h, out_w, self.interp_type, self.antialias)
        cols_first = chosen.cols_first
        # Each pass's axis (1: columns), filter and the extents it takes.
        axis = (cols_first.astype(np.int64), (~cols_first).astype(np.int64))
        kind = (np.where(cols_first, chosen.cols, chosen.rows),
                np.where(cols_first, chosen.rows, chosen.cols))
        size_in = (np.where(cols_first, w, h), np.where(cols_first, h, w))
        size_out = (np.where(cols_first, out_w, out_h), np.where(cols_first, out_h, out_w))
        mid_h, mid_w = np.where(cols_first, h, out_h), np.where(cols_first, out_w, w)
        keys = [list(zip(kind[p].tolist(), size_in[p].tolist(), size_out[p].tolist(),
                         strict=True)) for p in (0, 1)]
        both = self.filters.get(keys[0] + keys[1])
        filters = (both[:n], both[n:])
        taps = [np.array([f[2] for f in filters[p]], dtype=np.int64) for p in (0, 1)]
        # Starts: one per output pixel of the pass's axis; weights: taps per start.
        counts = [size_out[p] for p in (0, 1)]
        packed = plans.packed([
            ((n, 12), np.int64), ((_total(counts[0], n),), np.int32),
            ((_total(counts[0] * taps[0], n),), np.float32),
            ((n, 12), np.int64), ((_total(counts[1], n),), np.int32),
            ((_total(counts[1] * taps[1], n),), np.float32)])
        geom = (packed.arrays[0], packed.arrays[3])
        for p in (0, 1):
            if n:
                np.concatenate([f[0] for f in filters[p]], out=packed.arrays[3 * p + 1])
                np.concatenate([f[1] for f in filters[p]], out=packed.arrays[3 * p + 2])
            geom[p][:, 7] = axis[p]
            geom[p][:, 8] = _starts(counts[p])
            geom[p][:, 9] = _starts(counts[p] * taps[p])
            geom[p][:, 10] = taps[p]
            geom[p][:, 4] = c
        round_first = int(work.kind != "f")
        first, second = geom
        first[:, 0], first[:, 1], first[:, 2] = h, w, full_w * c
        first[:, 3] = (y0 * full_w + x0) * c
        first[:, 5], first[:, 6] = mid_h, mid_w
        first[:, 11] = chosen.round_between * round_first
        second[:, 0], second[:, 1], second[:, 2] = mid_h, mid_w, mid_w * c
        second[:, 5], second[:, 6] = out_h, out_w
        c_list = c.tolist()
        mids: list[plans.Shape] = list(zip(mid_h.tolist(), mid_w.tolist(), c_list, strict=True))
        out_shapes: list[plans.Shape] = list(zip(out_h.tolist(), out_w.tolist(), c_list,
                                                 strict=True))
        return plans.ResizeBatchPlan(packed, mids, out_shapes, in_dtype, work)


def _starts(sizes: np.ndarray) -> np.ndarray:
    """Where each sample's run of ``sizes`` values starts in their concatenation."""
    out = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=out[1:])
    return out


def _total(sizes: np.ndarray, n: int) -> int:
    """The length of the samples' concatenated runs: one value (0) for an empty batch, as
    every plan holds at least one."""
    return int(sizes.sum()) if n else 1
