"""The expression operators' element rules (``expressions.py`` states them in words):
DALI's type promotions, for two tensors and for a tensor with a Python constant, and the
integer and float routines C defines but numpy lacks (truncating division, C's ``%``,
IEEE remainder, integer powers)."""

from __future__ import annotations

import numpy as np

BOOL = np.dtype(np.bool_)
FLOAT32 = np.dtype(np.float32)
FLOAT64 = np.dtype(np.float64)
INT32 = np.dtype(np.int32)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f"


def is_integer(dtype: np.dtype) -> bool:
    return dtype.kind in "iu"


def promote(left: np.dtype, right: np.dtype) -> np.dtype:
    """The result type of ``left op right`` for two tensors (DALI's promotion table)."""
    if left == right:
        return left
    if BOOL in (left, right):
        return right if left == BOOL else left
    if is_float(left) or is_float(right):
        if is_float(left) and is_float(right):
            return left if left.itemsize >= right.itemsize else right
        return left if is_float(left) else right
    if left.kind == right.kind:
        return left if left.itemsize >= right.itemsize else right
    signed, unsigned = (left, right) if left.kind == "i" else (right, left)
    if signed.itemsize > unsigned.itemsize:
        return signed
    return np.dtype(f"int{min(8 * 2 * unsigned.itemsize, 64)}")


def weak(tensor: np.dtype, constant_type: str) -> np.dtype:
    """The result type of a tensor of type ``tensor`` with a Python constant."""
    if constant_type == "bool":
        return tensor
    if constant_type == "int":
        return INT32 if tensor == BOOL else tensor
    return tensor if is_float(tensor) else FLOAT32


def float_result(dtype: np.dtype) -> np.dtype:
    """The type a float-valued operation gives for operands promoted to ``dtype``."""
    return dtype if is_float(dtype) else FLOAT32


def ieee_remainder(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's ``remainder``: ``x - n * y``, ``n`` the integer nearest ``x / y`` (ties to even).
    Exact: ``fmod`` is, and so is each subtraction below (Sterbenz's lemma)."""
    a = np.abs(y)
    half = a * 0.5
    t = np.abs(np.fmod(x, 2 * a))  # in [0, 2a); the quotient by a is even below a
    d = t - a
    r = np.where(t > half, np.where(d >= half, t - 2 * a, d), t)
    return np.where(np.signbit(x), -r, r).astype(x.dtype)


def int_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero; 0 where ``y`` is 0."""
    zero = y == 0
    safe = np.where(zero, 1, y).astype(y.dtype)
    quotient = (x - np.fmod(x, safe)) // safe
    return np.where(zero, 0, quotient).astype(x.dtype)


def int_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C's ``%``: the dividend's sign; 0 where ``y`` is 0."""
    zero = y == 0
    safe = np.where(zero, 1, y).astype(y.dtype)
    return np.where(zero, 0, np.fmod(x, safe)).astype(x.dtype)


def int_pow(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """Integer power in the operands' type; a negative exponent gives 0, 1 for base 1 and
    +-1 for base -1 (what 1 / base ** -exponent truncates to)."""
    negative = exponent < 0
    power = np.power(base, np.where(negative, 0, exponent).astype(exponent.dtype))
    if not negative.any():
        return power
    odd = (exponent % 2) != 0
    inverse = np.where(base == 1, 1, np.where(base == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, inverse, power).astype(base.dtype)
