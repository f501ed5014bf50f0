"""The random crop window of ``random_resized_crop`` and ``decoders.image_random_crop``.

Both draw the window the same way, so a pipeline may move the crop into the decoder
without changing a byte. The parameters are small numpy/Python functions with no image
in sight, so a GPU path can compute the same windows.

As DALI's ``RandomCropAttr``: each attempt draws an area fraction uniform in
``random_area`` and an aspect ratio (width / height) log-uniform in
``random_aspect_ratio``; the window is ``round(sqrt(area * ratio))`` wide and
``round(sqrt(area / ratio))`` high. The first attempt that fits in the image wins, at an
anchor uniform over the positions where it fits. When ``num_attempts`` all miss, the
window is the whole image narrowed to the nearest allowed aspect ratio, centred.

Draws are keyed: attempt ``k`` uses draws ``2k`` (area) and ``2k + 1`` (ratio), the
anchor draws ``2 * num_attempts`` (y) and ``2 * num_attempts + 1`` (x), each keyed by
(seed, operator index, global sample index), so a sample's window does not depend on
threads, batches or where the pipeline was restored. ``math.log``/``math.exp`` give the
aspect ratio (the C library's, one call per attempt); the behaviour probes digest the
windows, so a machine whose library rounds differently is told apart.

``random_window`` draws one sample's window; ``random_windows`` a batch's, as arrays, the
same integers for every sample (the GPU operator plans a batch at once).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from conveyor.errors import SpecError
from conveyor_server.engine import keyed_random
from conveyor_server.engine.ops.args import round_half_away


@dataclass(frozen=True)
class Window:
    """A crop window in pixels: top-left corner (y, x) and size (h, w)."""

    y: int
    x: int
    h: int
    w: int


@dataclass(frozen=True)
class WindowParams:
    """``random_area``, ``random_aspect_ratio`` and ``num_attempts``, checked."""

    area: tuple[float, float]
    ratio: tuple[float, float]
    attempts: int

    @property
    def num_draws(self) -> int:
        return 2 * self.attempts + 2


def window_params(op: str, random_area: Sequence[float], random_aspect_ratio: Sequence[float],
                  num_attempts: int) -> WindowParams:
    """The window arguments as DALI takes them (one value: a fixed area or ratio), or
    ``SpecError`` naming the argument that is out of range."""
    area = (float(random_area[0]), float(random_area[-1]))
    ratio = (float(random_aspect_ratio[0]), float(random_aspect_ratio[-1]))
    if not 0 < area[0] <= area[1] <= 1:
        raise SpecError(op, "random_area", f"got {list(random_area)}: expected "
                                           "0 < min <= max <= 1")
    if not 0 < ratio[0] <= ratio[1]:
        raise SpecError(op, "random_aspect_ratio", f"got {list(random_aspect_ratio)}: "
                                                   "expected 0 < min <= max")
    if num_attempts < 1:
        raise SpecError(op, "num_attempts", f"got {num_attempts}: expected >= 1")
    return WindowParams(area, ratio, num_attempts)


def window_draws(seed: int, op_index: int, sample_index: int, params: WindowParams) -> np.ndarray:
    """The uniform draws in [0, 1) one sample's window uses (``params.num_draws``)."""
    return keyed_random.uniform01_draws(seed, op_index, sample_index, params.num_draws)


def window_draws_batch(seed: int, op_index: int, sample_indices: np.ndarray,
                       params: WindowParams) -> np.ndarray:
    """``window_draws`` of each of ``sample_indices`` at once, bit for bit: row ``i`` is
    sample ``sample_indices[i]``'s draws."""
    return keyed_random.uniform01_draws_batch(seed, op_index, sample_indices, params.num_draws)


class WindowDraws:
    """``window_draws`` of one operator, per sample, computed a block of ``BLOCK``
    consecutive sample indices at a time (``window_draws_batch``): an operator that runs per
    sample gets its draws at a batch's cost without knowing the batch. The draws are a pure
    function of the sample index, so a block computed twice (two threads at once) is the
    same block, and which thread computes it changes nothing. The last ``KEEP`` blocks are
    kept: a pipeline's batches in flight (prefetch, a few workers) fall within them."""

    BLOCK = 64
    KEEP = 8

    def __init__(self, seed: int, op_index: int, params: WindowParams) -> None:
        self._seed, self._op, self._params = seed, op_index, params
        self._blocks: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def __call__(self, sample_index: int) -> np.ndarray:
        block, row = divmod(sample_index, self.BLOCK)
        draws = self._blocks.get(block)
        if draws is None:
            first = np.uint64(block * self.BLOCK)
            draws = window_draws_batch(self._seed, self._op,
                                       first + np.arange(self.BLOCK, dtype=np.uint64),
                                       self._params)
            draws.flags.writeable = False  # rows are handed out: nothing may change them
            with self._lock:
                self._blocks[block] = draws
                while len(self._blocks) > self.KEEP:
                    del self._blocks[next(iter(self._blocks))]  # the oldest kept
        return draws[row]


def random_window(height: int, width: int, params: WindowParams, draws: np.ndarray) -> Window:
    """The window for an image of ``height`` x ``width`` from its ``draws``."""
    win = _placed(height, width, params, draws, 0)
    return win if win is not None else _fallback(height, width, params)


def _placed(height: int, width: int, params: WindowParams, draws: np.ndarray,
            first: int) -> Window | None:
    """The window of the first attempt from attempt ``first`` on that fits; None when none
    does."""
    (a_lo, a_hi), (r_lo, r_hi) = params.area, params.ratio
    log_lo, log_hi = math.log(r_lo), math.log(r_hi)
    total = float(height) * float(width)
    for k in range(first, params.attempts):
        area = (a_lo + float(draws[2 * k]) * (a_hi - a_lo)) * total
        ratio = math.exp(log_lo + float(draws[2 * k + 1]) * (log_hi - log_lo))
        w = round_half_away(math.sqrt(area * ratio))
        h = round_half_away(math.sqrt(area / ratio))
        if 0 < w <= width and 0 < h <= height:
            y = _pick(float(draws[-2]), height - h)
            x = _pick(float(draws[-1]), width - w)
            return Window(y, x, h, w)
    return None


def _fallback(height: int, width: int, params: WindowParams) -> Window:
    """The window when every attempt misses: the whole image narrowed to the nearest
    allowed aspect ratio, centred."""
    (r_lo, r_hi) = params.ratio
    h, w = height, width
    if w / h < r_lo:
        h = max(1, min(height, round_half_away(w / r_lo)))
    elif w / h > r_hi:
        w = max(1, min(width, round_half_away(h * r_hi)))
    return Window((height - h) // 2, (width - w) // 2, h, w)


def _pick(u: float, most: int) -> int:
    """An integer uniform in [0, most] from ``u`` uniform in [0, 1)."""
    return min(int(u * (most + 1)), most)


#: The samples left unplaced below which ``random_windows`` tries them one by one.
_FEW = 16

#: A batch's windows: top-left corners (y, x) and sizes (h, w), int64, one per sample.
Windows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def random_windows(heights: np.ndarray | Sequence[int], widths: np.ndarray | Sequence[int],
                   params: WindowParams, draws: np.ndarray) -> Windows:
    """``random_window`` of every sample of a batch at once, the same integers: sample
    ``i`` is an image of ``heights[i]`` x ``widths[i]`` with draws ``draws[i]`` (a row of
    ``window_draws_batch``).

    Each attempt is computed for the samples that no earlier attempt placed, with the same
    float64 operations in the same order: products, sums, quotients and square roots are
    correctly rounded in numpy as in Python, and C's ``round`` is ``floor(|x| + 0.5)`` for
    the non-negative sizes; only the aspect ratio's ``exp`` is the C library's
    (``math.exp``, one call per sample still unplaced, as ``random_window`` makes), since
    numpy's may differ in the last bit. Once a few samples are left (``_FEW``), their
    remaining attempts are ``random_window``'s own, sample by sample (cheaper than numpy's
    calls on a few values), and so is the fallback of those every attempt misses. A size
    that is not finite (extreme arguments) makes every sample go through ``random_window``,
    which raises as it does."""
    heights = np.asarray(heights, dtype=np.int64).reshape(-1)
    widths = np.asarray(widths, dtype=np.int64).reshape(-1)
    n = heights.size
    draws = np.asarray(draws, dtype=np.float64).reshape(n, params.num_draws)
    (a_lo, a_hi), (r_lo, r_hi) = params.area, params.ratio
    log_lo, log_hi = math.log(r_lo), math.log(r_hi)
    a_span, log_span = a_hi - a_lo, log_hi - log_lo
    height_f, width_f = heights.astype(np.float64), widths.astype(np.float64)
    total = height_f * width_f
    out_h, out_w = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    left = np.arange(n)  # the samples no attempt has placed yet
    k = 0
    while k < params.attempts and left.size > _FEW:
        area = (a_lo + draws[left, 2 * k] * a_span) * total[left]
        ratio = np.array([math.exp(v) for v in (log_lo + draws[left, 2 * k + 1] * log_span
                                                 ).tolist()], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):  # not finite: checked next
            w = np.sqrt(area * ratio)
            h = np.sqrt(area / ratio)
        if not (np.isfinite(w).all() and np.isfinite(h).all()):
            return _one_by_one(heights, widths, params, draws)
        w, h = np.floor(w + 0.5), np.floor(h + 0.5)  # round_half_away: both are >= 0
        fits = (w > 0) & (w <= width_f[left]) & (h > 0) & (h <= height_f[left])
        won = left[fits]
        out_w[won], out_h[won] = w[fits], h[fits]
        left = left[~fits]
        k += 1
    y = _picks(draws[:, -2], heights - out_h)
    x = _picks(draws[:, -1], widths - out_w)
    for i in left.tolist():  # the attempts left, then the fallback, as random_window's
        height, width = int(heights[i]), int(widths[i])
        win = _placed(height, width, params, draws[i], k)
        if win is None:
            win = _fallback(height, width, params)
        y[i], x[i], out_h[i], out_w[i] = win.y, win.x, win.h, win.w
    return y, x, out_h, out_w


def _picks(u: np.ndarray, most: np.ndarray) -> np.ndarray:
    """``_pick`` of each (u, most): the product is non-negative, so ``int`` is the floor."""
    return np.minimum(np.floor(u * (most + 1).astype(np.float64)).astype(np.int64), most)


def _one_by_one(heights: np.ndarray, widths: np.ndarray, params: WindowParams,
                draws: np.ndarray) -> Windows:
    wins = [random_window(int(h), int(w), params, d)
            for h, w, d in zip(heights, widths, draws, strict=True)]
    y, x, h, w = np.array([(v.y, v.x, v.h, v.w) for v in wins], dtype=np.int64).reshape(-1, 4).T
    return y.copy(), x.copy(), h.copy(), w.copy()
