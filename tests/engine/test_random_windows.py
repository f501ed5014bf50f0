"""``random_windows`` (a batch's random crop windows as arrays) against ``random_window``
(one sample's) on tens of thousands of samples: every size from 1x1 to images of 10^10
pixels, extreme areas and aspect ratios, one attempt and a hundred, ratio bounds equal,
windows that never fit (the fallback), draws at the ends of [0, 1), and the keyed draws
the operators use."""

from __future__ import annotations

import numpy as np
import pytest

from conveyor_server.engine.ops.geometry import random_window as random_window_module
from conveyor_server.engine.ops.geometry.random_window import (
    WindowParams,
    random_window,
    random_windows,
    window_draws_batch,
    window_params,
)

# (random_area, random_aspect_ratio, num_attempts)
PARAMS = [
    ((0.08, 1.0), (3 / 4, 4 / 3), 10),           # DALI's defaults
    ((0.08, 1.0), (3 / 4, 4 / 3), 1),
    ((0.08, 1.0), (3 / 4, 4 / 3), 100),
    ((1e-9, 1.0), (1e-6, 1e6), 10),              # extreme areas and ratios
    ((1e-12, 1e-12), (0.5, 2.0), 3),             # windows far below a pixel
    ((1.0, 1.0), (1.0, 1.0), 10),                # the whole image, square: fits squares only
    ((0.5, 0.5), (2.0, 2.0), 5),                 # ratio bounds equal
    ((1.0, 1.0), (3.0, 4.0), 2),                 # the probe's case that never fits
    ((0.9, 1.0), (50.0, 1e3), 100),              # wide windows: the fallback narrows height
    ((0.9, 1.0), (1e-3, 0.02), 100),             # tall windows: the fallback narrows width
    ((0.25, 0.75), (0.1, 10.0), 1),
    ((0.999, 1.0), (0.999, 1.001), 100),
]


def _sizes(rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Heights and widths from a mix of shapes: tiny, 1xN and Nx1, photos, huge."""
    kind = rng.integers(0, 6, count)
    h = np.where(kind == 0, rng.integers(1, 5, count),
        np.where(kind == 1, 1,
        np.where(kind == 2, rng.integers(1, 3000, count),
        np.where(kind == 3, rng.integers(100, 1200, count),
        np.where(kind == 4, rng.integers(10_000, 100_001, count), rng.integers(1, 40, count))))))
    w = np.where(kind == 0, rng.integers(1, 5, count),
        np.where(kind == 1, rng.integers(1, 5000, count),
        np.where(kind == 2, 1,
        np.where(kind == 3, rng.integers(100, 1200, count),
        np.where(kind == 4, rng.integers(10_000, 100_001, count), rng.integers(1, 40, count))))))
    return h.astype(np.int64), w.astype(np.int64)


def _per_sample(h: np.ndarray, w: np.ndarray, params: WindowParams,
                draws: np.ndarray) -> np.ndarray:
    wins = [random_window(int(a), int(b), params, d) for a, b, d in zip(h, w, draws, strict=True)]
    return np.array([(v.y, v.x, v.h, v.w) for v in wins], dtype=np.int64).reshape(-1, 4)


def _batched(h: np.ndarray, w: np.ndarray, params: WindowParams,
             draws: np.ndarray) -> np.ndarray:
    out = random_windows(h, w, params, draws)
    assert all(v.dtype == np.int64 and v.shape == (len(h),) for v in out)
    return np.stack(out, axis=1)


@pytest.fixture(params=[0, random_window_module._FEW], ids=["numpy to the end",
                                                            "tail one by one"])
def few(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The samples left below which the batch goes one by one: 0 tries every attempt of
    every sample in numpy."""
    monkeypatch.setattr(random_window_module, "_FEW", request.param)
    return int(request.param)


@pytest.mark.usefixtures("few")
@pytest.mark.parametrize("area, ratio, attempts", PARAMS, ids=str)
def test_the_batch_draws_each_samples_window(area: tuple[float, float],
                                            ratio: tuple[float, float], attempts: int) -> None:
    params = window_params("random_resized_crop", area, ratio, attempts)
    rng = np.random.default_rng(attempts * 1000 + int(ratio[1] * 7))
    count = 3000
    h, w = _sizes(rng, count)
    draws = rng.random((count, params.num_draws))
    # Draws at the ends of [0, 1): the smallest and largest area, ratio and anchor.
    draws[:50] = 0.0
    draws[50:100] = 1.0 - 2.0**-53
    expected = _per_sample(h, w, params, draws)
    got = _batched(h, w, params, draws)
    assert np.array_equal(got, expected)
    y, x, wh, ww = expected.T  # and every window lies in its image
    assert (wh >= 1).all() and (ww >= 1).all() and (y >= 0).all() and (x >= 0).all()
    assert (y + wh <= h).all() and (x + ww <= w).all()


@pytest.mark.usefixtures("few")
def test_windows_that_never_fit_take_the_fallback_in_both() -> None:
    params = window_params("random_resized_crop", (1.0, 1.0), (3.0, 4.0), 2)
    h = np.array([10, 37, 1, 500, 3, 1, 80], dtype=np.int64)
    w = np.array([10, 12, 1, 40, 200, 7, 80], dtype=np.int64)
    draws = np.random.default_rng(3).random((len(h), params.num_draws))
    expected = _per_sample(h, w, params, draws)
    assert np.array_equal(_batched(h, w, params, draws), expected)
    # Square and tall images cannot hold a 3:1 window of their whole area: centred, narrowed.
    assert tuple(expected[0]) == (3, 0, 3, 10)


@pytest.mark.usefixtures("few")
def test_keyed_draws_of_a_pipeline_give_the_same_windows() -> None:
    params = window_params("random_resized_crop", (0.08, 1.0), (3 / 4, 4 / 3), 10)
    rng = np.random.default_rng(11)
    for seed in (0, 5, 2**40 + 3):
        indices = rng.integers(0, 2**62, 4000, dtype=np.uint64)
        draws = window_draws_batch(seed, 7, indices, params)
        h, w = _sizes(rng, len(indices))
        assert np.array_equal(_batched(h, w, params, draws), _per_sample(h, w, params, draws))


def test_the_fallback_and_every_attempt_are_exercised() -> None:
    # The cases above are meaningful only if samples resolve at late attempts and miss.
    params = window_params("random_resized_crop", (0.08, 1.0), (3 / 4, 4 / 3), 10)
    rng = np.random.default_rng(1)
    h, w = _sizes(rng, 3000)
    draws = rng.random((3000, params.num_draws))
    wins = _per_sample(h, w, params, draws)
    whole = (wins[:, 2] == h) & (wins[:, 3] == w)
    assert 0 < whole.sum() < len(h)  # tiny images often fall back to the whole image


def test_an_empty_batch() -> None:
    params = window_params("random_resized_crop", (0.08, 1.0), (3 / 4, 4 / 3), 10)
    out = random_windows(np.zeros(0, np.int64), np.zeros(0, np.int64), params,
                         np.zeros((0, params.num_draws)))
    assert all(v.shape == (0,) and v.dtype == np.int64 for v in out)


@pytest.mark.usefixtures("few")
def test_sizes_past_floating_point_raise_as_one_sample_does() -> None:
    # An aspect ratio near the largest double makes the window's width infinite: the
    # per-sample code raises (C's round of infinity has no integer), and so does the batch.
    params = WindowParams((1.0, 1.0), (1e300, 1.7e308), 3)
    h, w = np.array([100, 200]), np.array([100, 300])
    draws = np.full((2, params.num_draws), 0.999)
    with pytest.raises(OverflowError) as one:
        _per_sample(h, w, params, draws)
    with pytest.raises(OverflowError) as batch:
        _batched(h, w, params, draws)
    assert str(one.value) == str(batch.value)


@pytest.mark.usefixtures("few")
def test_halves_round_away_from_zero_in_both() -> None:
    # A quarter of an n x n image (n odd) with a ratio of 1 is a window of n / 2 pixels a
    # side, exactly: C's round takes (n + 1) / 2, not the even neighbour.
    params = window_params("random_resized_crop", (0.25, 0.25), (1.0, 1.0), 1)
    n = np.arange(1, 400, 2, dtype=np.int64)
    draws = np.random.default_rng(5).random((len(n), params.num_draws))
    expected = _per_sample(n, n, params, draws)
    assert np.array_equal(expected[:, 2], (n + 1) // 2)
    assert np.array_equal(_batched(n, n, params, draws), expected)
