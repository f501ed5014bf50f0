"""The float32 matrix arithmetic of DALI's affine transforms, one operation at a time:
products summed from the first term, each operation rounded once (numpy's elementwise
float32 operations, no fused multiply-add); sines and cosines are the double-precision C
library's, rounded to float32 (DALI calls the float ones, which may differ in the last bit:
docs/porting-from-dali.md)."""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32
#: Degrees to radians, DALI's float constant.
DEG2RAD = F32(math.pi / 180)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float32, each entry ``a[i, 0] * b[0, j] + a[i, 1] * b[1, j] + ...``
    summed from the first term, each operation rounded (DALI's ``mat`` product)."""
    acc = a[:, :1] * b[:1, :]
    for k in range(1, a.shape[1]):
        acc = acc + a[:, k:k + 1] * b[k:k + 1, :]
    return acc.astype(F32)


def mat_vec(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``m @ v`` in float32, summed from the first term."""
    acc = m[:, 0] * v[0]
    for k in range(1, m.shape[1]):
        acc = acc + m[:, k] * v[k]
    return acc.astype(F32)


def cos_sin(radians: np.float32) -> tuple[np.float32, np.float32]:
    return F32(math.cos(float(radians))), F32(math.sin(float(radians)))


def around(linear: np.ndarray, center: np.ndarray) -> np.ndarray:
    """The homogeneous matrix of ``linear`` applied about ``center``: its translation is
    ``linear @ -center + center``."""
    n = linear.shape[0]
    out = np.eye(n + 1, dtype=F32)
    out[:n, :n] = linear
    out[:n, n] = mat_vec(linear, -center) + center
    return out


def rotation_2d(degrees: np.float32) -> np.ndarray:
    c, s = cos_sin(F32(degrees) * DEG2RAD)
    return np.array([[c, -s], [s, c]], dtype=F32)


def rotation_3d(axis: np.ndarray, degrees: np.float32) -> np.ndarray:
    """DALI's rotation about ``axis`` (normalised by its length; a single non-zero component
    taken as +-1)."""
    radians = F32(degrees) * DEG2RAD
    if radians == 0:
        return np.eye(3, dtype=F32)
    c, s = cos_sin(radians)
    if np.count_nonzero(axis) == 1:
        axis = np.sign(axis).astype(F32)
    else:
        length = np.sqrt(axis[0] * axis[0] + axis[1] * axis[1] + axis[2] * axis[2])
        axis = (axis / length).astype(F32)
    u, v, w = axis
    one = F32(1)
    return np.array([
        [u * u + (v * v + w * w) * c, u * v * (one - c) - w * s, u * w * (one - c) + v * s],
        [u * v * (one - c) + w * s, v * v + (u * u + w * w) * c, v * w * (one - c) - u * s],
        [u * w * (one - c) - v * s, v * w * (one - c) + u * s, w * w + (u * u + v * v) * c],
    ], dtype=F32)
