"""A sample reduced over some of its axes in the order DALI's CPU reductions use, so that
float results are DALI's bits and the same on every CPU and thread count.

Adjacent reduced axes are merged first. The merged reduced axes are then walked from the
outermost: an extent whose values number more than ``LEAF`` is halved (the first half
``extent // 2``) and the two halves' results are combined; a smaller one is reduced one
entry after another, each entry reduced over the inner axes the same way; along the
innermost axis, a run of up to ``LEAF`` values is accumulated one value at a time from the
neutral value. Every output position (the kept axes) follows the same order, so all of them
are computed together: each step below is one numpy operation over every position and every
node of the tree of the same shape (at most a few shapes per level), never a Python loop
over values. numpy's own float sums use another order (and, for some types, SIMD kernels
chosen by the CPU), so they are not used for floats; integer sums, minima and maxima do not
depend on the order and use numpy's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: Runs of up to this many values are accumulated one by one; longer ones are halved.
LEAF = 32

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]
Key = tuple[int, int]  # (merged axis, extent)


def add(acc: np.ndarray, value: np.ndarray) -> np.ndarray:
    return acc + value


def smaller(acc: np.ndarray, value: np.ndarray) -> np.ndarray:
    """DALI's minimum step: the new value where it is smaller (so NaN is never taken)."""
    return np.where(value < acc, value, acc)


def larger(acc: np.ndarray, value: np.ndarray) -> np.ndarray:
    return np.where(value > acc, value, acc)


def merged(shape: Sequence[int], axes: Sequence[int]) -> tuple[list[int], list[int]]:
    """The reduced axes of a C-contiguous array of ``shape`` with adjacent ones merged:
    (extents, strides in elements), outermost first."""
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    sizes: list[int] = []
    steps: list[int] = []
    previous = -2
    for axis in sorted(axes):
        if axis == previous + 1:
            sizes[-1] *= shape[axis]
            steps[-1] = strides[axis]
        else:
            sizes.append(shape[axis])
            steps.append(strides[axis])
        previous = axis
    return sizes, steps


def lane_offsets(shape: Sequence[int], axes: Sequence[int]) -> np.ndarray:
    """The flat offset of every output position (the kept axes, in C order)."""
    offsets = np.zeros(1, dtype=np.int64)
    for axis in range(len(shape)):
        if axis in axes:
            continue
        stride = math.prod(shape[axis + 1:])
        offsets = (offsets[:, None] + np.arange(shape[axis], dtype=np.int64) * stride).ravel()
    return offsets


class _Requests:
    """The nodes one level asks of the level below, grouped by shape: where each node's
    result will be in its group's results."""

    def __init__(self) -> None:
        self.parts: dict[Key, list[np.ndarray]] = {}
        self.counts: dict[Key, int] = {}

    def add(self, key: Key, starts: np.ndarray) -> tuple[Key, int]:
        at = self.counts.get(key, 0)
        self.parts.setdefault(key, []).append(starts)
        self.counts[key] = at + starts.size
        return key, at


def tree_reduce(values: np.ndarray, axes: Sequence[int], combine: Combine,
                neutral: float | int) -> np.ndarray:
    """``values`` (already in the accumulation type) reduced over ``axes`` in DALI's order:
    one value per kept position, in C order."""
    shape = values.shape
    flat = np.ascontiguousarray(values).ravel()
    lanes = lane_offsets(shape, axes)
    sizes, strides = merged(shape, axes)
    dtype = values.dtype

    def fill(count: int) -> np.ndarray:
        return np.full((count, lanes.size), neutral, dtype=dtype)

    # Top down: the nodes of each level, grouped by shape (axis, extent), with where each
    # finds its children's results in the level below.
    root: Key = (0, sizes[0])
    levels: list[tuple[dict[Key, np.ndarray], dict[Key, tuple[str, list[tuple[Key, int]]]]]] = []
    current: dict[Key, list[np.ndarray]] = {root: [np.zeros(1, dtype=np.int64)]}
    while current:
        groups = {key: np.concatenate(parts) for key, parts in current.items()}
        below = _Requests()
        plan: dict[Key, tuple[str, list[tuple[Key, int]]]] = {}
        for key, starts in groups.items():
            axis, extent = key
            stride = strides[axis]
            inner = math.prod(sizes[axis + 1:])
            if axis == len(sizes) - 1 and extent <= LEAF:
                plan[key] = ("leaf", [])
            elif extent >= 2 and extent * inner > LEAF:
                half = extent // 2
                plan[key] = ("split", [below.add((axis, half), starts),
                                       below.add((axis, extent - half), starts + half * stride)])
            else:
                child = (axis + 1, sizes[axis + 1])
                plan[key] = ("rows", [below.add(child, starts + i * stride)
                                      for i in range(extent)])
        levels.append((groups, plan))
        current = below.parts

    # Bottom up: each level's results from those of the level below.
    results: dict[Key, np.ndarray] = {}
    for groups, plan in reversed(levels):
        here: dict[Key, np.ndarray] = {}
        for key, starts in groups.items():
            kind, children = plan[key]
            count = starts.size
            parts = [results[k][at:at + count] for k, at in children]
            if kind == "leaf":
                axis, extent = key
                acc = fill(count)
                for j in range(extent):
                    acc = combine(acc, flat[(starts + j * strides[axis])[:, None] + lanes])
                here[key] = combine(fill(count), acc)
            elif kind == "split":
                here[key] = combine(fill(count), combine(parts[0], parts[1]))
            else:
                acc = fill(count)
                for part in parts:
                    acc = combine(acc, part)
                here[key] = acc
        results = here
    return results[root][0]
