"""The arithmetic of ``crop_mirror_normalize``, shared by the server's operator and the
trainer-side helper (``conveyor.torch.normalize``), so both compute the same bytes.

``out = (in - mean) / std * scale + shift`` is folded into one multiply and one add per
channel: ``mul = scale / std`` and ``add = shift - mean * mul``, both computed in float64
from the arguments and rounded once to float32. The pixels are then converted to float32,
multiplied by ``mul`` and ``add`` is added, each step rounded to float32 (never a fused
multiply-add). Conversions to float16 round to nearest, ties to even; values beyond its
range become infinite.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def folded_coefficients(mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray,
                        scale: float, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """(mul, add) as float32 arrays, one value per channel: ``mean`` and ``std`` hold one
    value per channel (or broadcast against each other)."""
    mean64 = np.asarray(mean, dtype=np.float64)
    mul = float(scale) / np.asarray(std, dtype=np.float64)
    add = float(shift) - mean64 * mul
    return mul.astype(np.float32), add.astype(np.float32)


def next_pow2(n: int) -> int:
    """The channels of a padded output (``pad_output``): 3 -> 4, as DALI pads."""
    return 1 << (n - 1).bit_length()
