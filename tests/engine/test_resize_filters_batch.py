"""``resize_filters``' filters of many pairs of sizes at once against its one-pair
definitions: the same starts and the same float32 weights, bit for bit, for pairs from 1
pixel to 100,000, shrinking, growing and equal, in batches mixing them (tables of one
width, and by width where one would be huge); and ``resize_plans`` against
``resize_plan``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from conveyor_server.engine.ops.geometry import resize_filters as rf

Batched = Callable[[list[int], list[int]], list[rf.AxisFilter]]
One = Callable[[int, int], rf.AxisFilter]
KINDS: list[tuple[str, Batched, One]] = [
    ("nn", rf.nearest_filters, rf.nearest_filter),
    ("linear", rf.linear_filters, rf.linear_filter),
    ("area", rf.area_filters, rf.area_filter),
]


def _pairs(rng: np.random.Generator, count: int, shrink: bool) -> tuple[list[int], list[int]]:
    ins, outs = [], []
    for _ in range(count):
        kind = int(rng.integers(0, 4))
        a = int(rng.integers(1, 9)) if kind == 0 else int(rng.integers(1, 3000)) if kind < 3 \
            else int(rng.integers(10_000, 100_001))
        grow = not shrink and rng.integers(2)
        b = int(rng.integers(a, 3 * a + 2)) if grow else int(rng.integers(1, a + 1))
        if kind == 2:
            b = a  # unchanged
        ins.append(a)
        outs.append(min(b, 20_000))
    return ins, outs


def _same(got: rf.AxisFilter, want: rf.AxisFilter) -> bool:
    start, weights = want.start, want.weights
    return (got.start.dtype == start.dtype and got.start.shape == start.shape
            and got.weights.dtype == weights.dtype and got.weights.shape == weights.shape
            and got.start.tobytes() == start.tobytes()
            and got.weights.tobytes() == weights.tobytes())


@pytest.mark.parametrize("name, batched, one", KINDS, ids=[k[0] for k in KINDS])
def test_a_batch_of_pairs_gives_each_pairs_filter(name: str, batched: Batched, one: One) -> None:
    rng = np.random.default_rng(len(name))
    for count in (1, 2, 40, 300):
        ins, outs = _pairs(rng, count, shrink=name == "area")
        got = batched(ins, outs)
        assert len(got) == count
        for flt, a, b in zip(got, ins, outs, strict=True):
            assert _same(flt, one(a, b)), (name, a, b)
            assert not flt.start.flags.writeable and not flt.weights.flags.writeable
            assert flt.weights.flags.c_contiguous  # and its own: no batch's array behind it
            assert flt.start.base is None and flt.weights.base is None


@pytest.mark.parametrize("cells", [rf._AREA_TABLE_CELLS, 0], ids=["one table", "by width"])
def test_area_tables_are_as_wide_as_each_pairs_own(cells: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # One pair with wide cells does not widen another's table, however they are tabled.
    monkeypatch.setattr(rf, "_AREA_TABLE_CELLS", cells)
    pairs = ((100_000, 224), (30, 20), (7, 7), (999, 10), (31, 20))
    got = rf.area_filters([a for a, _ in pairs], [b for _, b in pairs])
    for flt, (a, b) in zip(got, pairs, strict=True):
        assert _same(flt, rf.area_filter(a, b))
    assert got[1].taps < got[0].taps


def test_an_empty_batch_of_pairs() -> None:
    for _, batched, _ in KINDS:
        assert batched([], []) == []


@pytest.mark.parametrize("interp", ["nn", "linear"])
@pytest.mark.parametrize("antialias", [False, True])
def test_resize_plans_choose_as_resize_plan(interp: str, antialias: bool) -> None:
    sizes = [1, 2, 5, 16, 17, 40]
    grid = np.array([(a, b, c, d) for a in sizes for b in sizes for c in sizes for d in sizes])
    h, w, oh, ow = grid.T
    chosen = rf.resize_plans(h, w, oh, ow, interp, antialias)
    for i, (a, b, c, d) in enumerate(grid.tolist()):
        one = rf.resize_plan((a, b), (c, d), interp, antialias)
        for code, in_size, out_size, flt in ((chosen.rows[i], a, c, one.rows),
                                             (chosen.cols[i], b, d, one.cols)):
            assert _same(rf.axis_filter(int(code), in_size, out_size), flt)
        assert bool(chosen.cols_first[i]) == (one.first == "cols")
        assert bool(chosen.round_between[i]) == one.round_between
