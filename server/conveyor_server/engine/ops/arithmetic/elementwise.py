"""The expression operators' element rules (``expressions.py`` states them in words):
DALI's type promotions, for two tensors and for a tensor with a Python constant, and the
integer and float routines C defines but numpy lacks (truncating division, C's ``%``,
IEEE remainder, integer powers), and the transcendental functions computed by the C
library one value at a time (``libm``), not by numpy's SIMD loops."""

from __future__ import annotations

import math
from collections.abc import Callable

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


# -- transcendental functions, the same bits on every SIMD level -----------------------------
#
# numpy's float64 exp, log, the trigonometric functions, atan2 and power run on AVX-512 CPUs
# through their own vector routines (SVML), whose last bits differ from those numpy runs on
# an AVX2 CPU (tests/engine/test_cpu_paths.py found atan2, asin, acos, tan, exp and log10
# apart). The C library's scalar functions do not follow the SIMD level numpy dispatches on:
# they are called here one value at a time (about 0.1 us a value), with numpy's answers
# where C raises (a domain error is NaN, log of 0 is -inf, an overflow is +-inf).


def _log_of(function: Callable[[float], float]) -> Callable[[float], float]:
    def log(x: float) -> float:
        if x == 0.0:
            return -math.inf
        if x < 0.0 or math.isnan(x):
            return math.nan
        return function(x)
    return log


def _guarded(function: Callable[[float], float]) -> Callable[[float], float]:
    def guarded(x: float) -> float:
        try:
            return function(x)
        except ValueError:  # outside the domain (asin(2), sin(inf))
            return math.nan
        except OverflowError:  # exp of a large value
            return math.inf
    return guarded


def _pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except ValueError:  # a negative base to a fractional power; 0 to a negative power
        if base != 0.0:
            return math.nan
        odd = exponent.is_integer() and int(exponent) % 2 == 1
        return math.copysign(math.inf, base) if odd else math.inf
    except OverflowError:
        odd = exponent.is_integer() and int(exponent) % 2 == 1
        return -math.inf if base < 0.0 and odd else math.inf


_SCALAR_UNARY: dict[str, Callable[[float], float]] = {
    "exp": _guarded(math.exp), "log": _log_of(math.log), "log2": _log_of(math.log2),
    "log10": _log_of(math.log10), "sin": _guarded(math.sin), "cos": _guarded(math.cos),
    "tan": _guarded(math.tan), "asin": _guarded(math.asin), "acos": _guarded(math.acos),
    "atan": _guarded(math.atan),
}
_SCALAR_BINARY: dict[str, Callable[[float, float], float]] = {"pow": _pow,
                                                              "atan2": math.atan2}


def libm_unary(name: str, values: np.ndarray) -> np.ndarray:
    """``name`` (exp, log, log2, log10, sin, cos, tan, asin, acos, atan) of float64 values,
    by the C library, as a new float64 array."""
    function = np.frompyfunc(_SCALAR_UNARY[name], 1, 1)
    return np.asarray(function(values.astype(FLOAT64, copy=False)), dtype=FLOAT64)


def libm_binary(name: str, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``name`` (pow, atan2) of float64 values, broadcast, by the C library."""
    function = np.frompyfunc(_SCALAR_BINARY[name], 2, 1)
    return np.asarray(function(left.astype(FLOAT64, copy=False),
                               right.astype(FLOAT64, copy=False)), dtype=FLOAT64)


#: The unary functions numpy computes exactly on every SIMD level (IEEE operations).
EXACT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil}
def float_function(name: str, values: np.ndarray) -> np.ndarray:
    """``name`` of float64 values, the same bits on every CPU of one C library."""
    if name in EXACT_UNARY:
        return np.asarray(EXACT_UNARY[name](values))
    return libm_unary(name, values)
