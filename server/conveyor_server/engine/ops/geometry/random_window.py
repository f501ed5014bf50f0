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
    area = (random_area[0], random_area[-1])
    ratio = (random_aspect_ratio[0], random_aspect_ratio[-1])
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
    (a_lo, a_hi), (r_lo, r_hi) = params.area, params.ratio
    log_lo, log_hi = math.log(r_lo), math.log(r_hi)
    total = float(height) * float(width)
    for k in range(params.attempts):
        area = (a_lo + float(draws[2 * k]) * (a_hi - a_lo)) * total
        ratio = math.exp(log_lo + float(draws[2 * k + 1]) * (log_hi - log_lo))
        w = round_half_away(math.sqrt(area * ratio))
        h = round_half_away(math.sqrt(area / ratio))
        if 0 < w <= width and 0 < h <= height:
            y = _pick(float(draws[-2]), height - h)
            x = _pick(float(draws[-1]), width - w)
            return Window(y, x, h, w)
    h, w = height, width
    if w / h < r_lo:
        h = max(1, min(height, round_half_away(w / r_lo)))
    elif w / h > r_hi:
        w = max(1, min(width, round_half_away(h * r_hi)))
    return Window((height - h) // 2, (width - w) // 2, h, w)


def _pick(u: float, most: int) -> int:
    """An integer uniform in [0, most] from ``u`` uniform in [0, 1)."""
    return min(int(u * (most + 1)), most)
