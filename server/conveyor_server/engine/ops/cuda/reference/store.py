"""The kernels' loads and stores (``kernels/common.cuh``) in numpy."""

from __future__ import annotations

import numpy as np

_F32 = np.float32


def store_f(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 values stored as ``dtype``: ``store_f`` of common.cuh (round to nearest even,
    NaN to 0, clamp; i32 through double; float16 rounded to nearest even)."""
    values = np.asarray(values, dtype=_F32)
    if dtype == np.float32:
        return values.copy()
    if dtype == np.float16:
        return values.astype(np.float16)
    return store_d(values.astype(np.float64), dtype)


def store_d(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 values stored as ``dtype``: ``store_d`` of common.cuh."""
    values = np.asarray(values, dtype=np.float64)
    if dtype.kind == "f":
        with np.errstate(over="ignore"):
            return values.astype(dtype)
    info = np.iinfo(dtype)
    rounded = np.rint(values)
    rounded[np.isnan(rounded)] = 0.0
    return np.clip(rounded, float(info.min), float(info.max)).astype(dtype)


def load_f(values: np.ndarray) -> np.ndarray:
    return np.asarray(values).astype(_F32)


def as_type(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 values rounded as storing them in ``dtype`` and loading them back would."""
    return load_f(store_f(values, dtype))
