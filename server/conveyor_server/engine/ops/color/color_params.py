"""The parameters of the colour operators, as DALI computes them: small numpy functions
with no image in sight, shared by the CPU operators (``color.py``) and any later GPU path.

``brightness_contrast`` is one multiply-add per value. ``hsv`` and ``color_twist`` are a
3x3 matrix and an offset applied to each RGB pixel: the pixel is taken to YIQ, the hue
turns the (I, Q) plane, saturation scales it, value scales all three, and the result comes
back to RGB; ``color_twist`` then scales by brightness and contrast about half the range.
"""

from __future__ import annotations

import math

import numpy as np

#: DALI's RGB -> YIQ matrix and its precomputed inverse (rounded as DALI's).
RGB_TO_YIQ = np.array([[0.299, 0.587, 0.114],
                       [0.596, -0.274, -0.321],
                       [0.211, -0.523, 0.311]], dtype=np.float64)
YIQ_TO_RGB = np.array([[1.0, 0.956, 0.621],
                       [1.0, -0.272, -0.647],
                       [1.0, -1.107, 1.705]], dtype=np.float64)


def half_range(dtype: np.dtype) -> float:
    """DALI's half range of a type: 0.5 for floats, 2**(bits - 1 - signed) for integers
    (128 for uint8, 16384 for int16)."""
    if dtype.kind == "f":
        return 0.5
    return float(1 << (8 * dtype.itemsize - (dtype.kind == "i") - 1))


def output_range(dtype: np.dtype) -> float:
    """1 for floats, the largest value for integers (what ``brightness_shift`` 1 adds)."""
    return 1.0 if dtype.kind == "f" else float(np.iinfo(dtype).max)


def brightness_contrast(brightness: float, brightness_shift: float, contrast: float,
                        contrast_center: float, out_range: float) -> tuple[float, float]:
    """(mul, add) with ``out = in * mul + add`` equal to DALI's
    ``brightness_shift * range + brightness * (center + contrast * (in - center))``."""
    mul = brightness * contrast
    add = brightness_shift * out_range + brightness * contrast_center * (1.0 - contrast)
    return mul, add


def hsv_matrix(hue: float, saturation: float, value: float) -> np.ndarray:
    """The 3x3 RGB matrix of a hue turn (degrees), a saturation and a value factor."""
    rad = hue * math.pi / 180.0
    c, s = math.cos(rad), math.sin(rad)
    turn = np.array([[1.0, 0.0, 0.0], [0.0, c, s], [0.0, -s, c]])
    scale = np.diag([value, value * saturation, value * saturation])
    return YIQ_TO_RGB @ turn @ scale @ RGB_TO_YIQ


def saturation_matrix(saturation: float) -> np.ndarray:
    """The 3x3 RGB matrix of DALI's ``saturation``: I and Q scaled, and back to RGB through
    the exact inverse of ``RGB_TO_YIQ`` (DALI 2.4's; ``hsv`` keeps the rounded
    ``YIQ_TO_RGB``, which differs by up to 1 LSB in uint8)."""
    return np.linalg.solve(RGB_TO_YIQ, np.diag([1.0, saturation, saturation]) @ RGB_TO_YIQ)


def hue_matrix(hue: float) -> np.ndarray:
    """The 3x3 RGB matrix of DALI's ``hue``: the (I, Q) plane turned by ``hue`` degrees,
    back to RGB through the exact inverse of ``RGB_TO_YIQ`` (DALI 2.4's, as
    ``saturation_matrix``)."""
    rad = hue * math.pi / 180.0
    c, s = math.cos(rad), math.sin(rad)
    turn = np.array([[1.0, 0.0, 0.0], [0.0, c, s], [0.0, -s, c]])
    return np.linalg.solve(RGB_TO_YIQ, turn @ RGB_TO_YIQ)


def color_twist(hue: float, saturation: float, value: float, brightness: float,
                contrast: float, half: float) -> tuple[np.ndarray, float]:
    """(matrix, offset) with ``out = matrix @ rgb + offset``, as DALI's ``color_twist``."""
    matrix = brightness * contrast * hsv_matrix(hue, saturation, value)
    return matrix, (half - half * contrast) * brightness
