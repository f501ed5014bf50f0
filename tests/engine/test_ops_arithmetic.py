"""The expression operators (math.binary, math.scalar, math.unary, math.clamp) against
per-element Python references, DALI's type promotions, weak constants, both operand
orders, their errors, and DALI-style expressions in a pipeline that resumes exactly."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import fn
from conveyor.definition.decorator import pipeline_def
from conveyor.errors import InvalidArgument
from conveyor_server import Pipeline
from conveyor_server.engine.ops.registry import SampleOp
from tests.support.op_helpers import build
from tests.support.resume import assert_resume_exact

INT_TYPES = ("uint8", "int8", "uint16", "int16", "int32", "uint32", "int64", "uint64")
FLOAT_TYPES = ("float16", "float32", "float64")


def values(dtype: str, seed: int, shape: tuple[int, ...] = (5, 6, 3)) -> np.ndarray:
    """Values of ``dtype`` across its range's small end, negatives for signed types."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        return (rng.integers(-400, 400, shape) / 8).astype(dtype)
    lo = 0 if np.dtype(dtype).kind == "u" else -100
    return rng.integers(lo, 120, shape).astype(dtype)


def run_op(op: SampleOp, *inputs: np.ndarray) -> np.ndarray:
    (out,) = op.fn(list(inputs), {})
    assert out.flags.c_contiguous and out.flags.writeable
    assert not any(np.shares_memory(out, i) for i in inputs)
    return out


def binary_op(op: str) -> SampleOp:
    return build("math.binary", op=op, input_layouts=("HWC", "HWC"))


def scalar_op(op: str, value: float, constant_type: str, reverse: bool = False) -> SampleOp:
    return build("math.scalar", op=op, value=value, constant_type=constant_type,
                 reverse=reverse)


# -- DALI's promotion table -----------------------------------------------------------------

PROMOTIONS = [
    ("uint8", "uint8", "uint8"), ("int16", "int16", "int16"), ("bool", "bool", "bool"),
    ("bool", "uint8", "uint8"), ("int8", "bool", "int8"), ("bool", "float32", "float32"),
    ("uint8", "int8", "int16"), ("uint16", "int8", "int32"), ("uint32", "int8", "int64"),
    ("uint64", "int8", "int64"), ("int16", "uint8", "int16"), ("uint16", "int16", "int32"),
    ("int32", "uint16", "int32"), ("uint32", "int32", "int64"), ("uint64", "int64", "int64"),
    ("int64", "uint32", "int64"), ("uint8", "uint32", "uint32"), ("int8", "int64", "int64"),
    ("int64", "float16", "float16"), ("uint8", "float32", "float32"),
    ("float16", "float32", "float32"), ("float32", "float64", "float64"),
    ("int32", "float64", "float64"),
]


@pytest.mark.parametrize(("left", "right", "result"), PROMOTIONS)
def test_two_inputs_promote_as_dali(left: str, right: str, result: str) -> None:
    a, b = values(left, 1), values(right, 2)
    for x, y in ((a, b), (b, a)):
        out = run_op(binary_op("add"), x, y)
        assert out.dtype == np.dtype(result), (x.dtype, y.dtype)
    assert run_op(binary_op("fdiv"), a, b).dtype == (
        np.dtype(result) if np.dtype(result).kind == "f" else np.float32)
    assert run_op(binary_op("lt"), a, b).dtype == np.bool_


WEAK = [
    ("uint8", "int", "uint8"), ("int16", "int", "int16"), ("float16", "int", "float16"),
    ("bool", "int", "int32"), ("uint8", "float", "float32"), ("int64", "float", "float32"),
    ("float16", "float", "float16"), ("float64", "float", "float64"),
    ("uint8", "bool", "uint8"), ("float32", "bool", "float32"),
]


@pytest.mark.parametrize(("tensor", "constant_type", "result"), WEAK)
def test_python_constants_are_weak(tensor: str, constant_type: str, result: str) -> None:
    value = {"int": 3.0, "float": 0.5, "bool": 1.0}[constant_type]
    for reverse in (False, True):
        out = run_op(scalar_op("mul", value, constant_type, reverse), values(tensor, 3))
        assert out.dtype == np.dtype(result)


# -- binary operators against per-element references ---------------------------------------


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_mod(a: int, b: int) -> int:
    return 0 if b == 0 else a - b * _trunc_div(a, b)


def _int_pow(a: int, b: int) -> int:
    if b >= 0:
        return int(a ** b)
    return 1 if a == 1 else (-1 if b % 2 else 1) if a == -1 else 0


INT_REFERENCE: dict[str, Callable[[int, int], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": _trunc_div, "mod": _c_mod, "pow": _int_pow, "min": min, "max": max,
    "bitand": lambda a, b: a & b, "bitor": lambda a, b: a | b,
    "bitxor": lambda a, b: a ^ b,
    "eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "leq": lambda a, b: a <= b, "gt": lambda a, b: a > b, "geq": lambda a, b: a >= b,
}
FLOAT_REFERENCE: dict[str, Callable[[float, float], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "fdiv": lambda a, b: a / b if b else math.copysign(math.inf, a) * math.copysign(1, b)
    if a else math.nan,
    "div": lambda a, b: a / b if b else math.nan, "mod": math.remainder,
    "min": lambda a, b: a if a < b else b, "max": lambda a, b: a if a > b else b,
    "atan2": math.atan2,
    "eq": lambda a, b: a == b, "lt": lambda a, b: a < b, "geq": lambda a, b: a >= b,
}


def _wrap(exact: int, dtype: np.dtype) -> int:
    """An exact integer wrapped into ``dtype`` (C's integer arithmetic)."""
    bits = 8 * dtype.itemsize
    wrapped = exact % (1 << bits)
    return wrapped - (1 << bits) if dtype.kind == "i" and wrapped >= 1 << (bits - 1) else wrapped


@pytest.mark.parametrize("op", sorted(INT_REFERENCE))
@pytest.mark.parametrize(("left", "right"), [("uint8", "uint8"), ("int16", "int16"),
                                             ("int8", "uint8"), ("int32", "int64"),
                                             ("uint16", "int32")])
def test_integer_operators_match_c(op: str, left: str, right: str) -> None:
    a, b = values(left, 4), values(right, 5)
    if op == "pow":
        b = (b % 5).astype(right)
        if np.dtype(right).kind == "i":
            b[0, 0] = -1  # a negative power: 0, or +-1 for a base of +-1
    out = run_op(binary_op(op), a, b)
    comparison = op in ("eq", "neq", "lt", "leq", "gt", "geq")
    for x, y, got in zip(a.ravel().tolist(), b.ravel().tolist(), out.ravel().tolist(),
                         strict=True):
        expected = INT_REFERENCE[op](x, y)
        if not comparison:
            expected = _wrap(expected, out.dtype)
        assert got == expected, (op, x, y)


@pytest.mark.parametrize("op", sorted(FLOAT_REFERENCE))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_operators_match_python(op: str, dtype: str) -> None:
    a, b = values(dtype, 6), values(dtype, 7)
    out = run_op(binary_op(op), a, b)
    for x, y, got in zip(a.ravel().tolist(), b.ravel().tolist(), out.ravel().tolist(),
                         strict=True):
        expected = FLOAT_REFERENCE[op](x, y)
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(got)
        elif op in ("atan2",):
            assert got == pytest.approx(expected, rel=1e-6)
        else:  # exact: one rounding of the exact result, as float32 arithmetic does
            assert got == float(np.asarray(expected, dtype=np.float64).astype(dtype))


def test_integer_division_truncates_and_float_floor_division_divides_as_dali() -> None:
    a = np.array([7, -7, 7, -7, 5], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 0], dtype=np.int32)
    assert run_op(binary_op("div"), a, b).tolist() == [3, -3, -3, 3, 0]
    assert run_op(binary_op("mod"), a, b).tolist() == [1, -1, 1, -1, 0]
    f = np.array([7.0, -7.0], dtype=np.float32)
    assert run_op(binary_op("div"), f, np.array([2, 2], dtype=np.float32)).tolist() == [3.5, -3.5]
    remainder = run_op(binary_op("mod"), np.array([5, 7.5, -7.5], dtype=np.float32),
                       np.array([2, 2, 2], dtype=np.float32))
    assert remainder.tolist() == [1.0, -0.5, 0.5]  # IEEE: the nearest quotient, ties to even
    assert run_op(binary_op("fdiv"), a[:2], b[:2]).dtype == np.float32


def test_signed_and_unsigned_compare_by_value() -> None:
    signed = np.array([-1, 5, -128], dtype=np.int8)
    unsigned = np.array([2**63, 5, 0], dtype=np.uint64)
    assert run_op(binary_op("lt"), signed, unsigned).tolist() == [True, False, True]
    assert run_op(binary_op("eq"), signed, unsigned).tolist() == [False, True, False]
    assert run_op(binary_op("gt"), unsigned, signed).tolist() == [True, False, True]
    minus_one, top = np.array([-1], dtype=np.int8), np.array([255], dtype=np.uint8)
    assert run_op(binary_op("neq"), minus_one, top).tolist() == [True]


def test_bool_arithmetic_stays_bool() -> None:
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert run_op(binary_op("add"), a, b).tolist() == [True, True, True, False]
    assert run_op(binary_op("mul"), a, b).tolist() == [True, False, False, False]
    assert run_op(binary_op("sub"), a, b).tolist() == [False, True, True, False]
    assert run_op(binary_op("bitxor"), a, b).dtype == np.bool_


# -- constants, both orders ----------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "sub", "mul", "fdiv", "div", "mod", "pow", "min",
                                "max", "lt", "geq"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32"])
def test_a_constant_equals_the_same_value_as_a_tensor(op: str, dtype: str) -> None:
    """``x op 3`` and ``3 op x`` are ``x op t`` and ``t op x`` for a tensor ``t`` of 3s of
    x's type (the constant takes x's type)."""
    x = values(dtype, 8)
    if dtype == "uint8" or op in ("pow",):
        x = np.abs(x.astype(np.float64) % 6).astype(dtype)
    threes = np.full_like(x, 3)
    for reverse in (False, True):
        got = run_op(scalar_op(op, 3.0, "int", reverse), x)
        want = run_op(binary_op(op), *((threes, x) if reverse else (x, threes)))
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_float_constant_makes_an_integer_input_float32() -> None:
    images = values("uint8", 9)
    np.testing.assert_array_equal(run_op(scalar_op("mul", 0.5, "float"), images),
                                  images.astype(np.float32) * np.float32(0.5))
    np.testing.assert_array_equal(run_op(scalar_op("sub", 2.5, "float", reverse=True), images),
                                  np.float32(2.5) - images.astype(np.float32))


def test_an_int_constant_wraps_with_the_input_and_compares_by_value() -> None:
    images = np.array([0, 1, 255], dtype=np.uint8)
    assert run_op(scalar_op("sub", 1.0, "int"), images).tolist() == [255, 0, 254]
    assert run_op(scalar_op("gt", 300.0, "int"), images).tolist() == [False] * 3
    assert run_op(scalar_op("lt", -1.0, "int", reverse=True), images).tolist() == [True] * 3
    with pytest.raises(InvalidArgument, match=r"math.scalar\[add\].*300.*uint8"):
        run_op(scalar_op("add", 300.0, "int"), images)


# -- unary functions and clamp --------------------------------------------------------------

UNARY_REFERENCE: dict[str, Callable[[float], float]] = {
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log2": math.log2,
    "log10": math.log10, "floor": math.floor, "ceil": math.ceil, "sin": math.sin,
    "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan,
}


@pytest.mark.parametrize("op", sorted(UNARY_REFERENCE))
@pytest.mark.parametrize(("dtype", "result"), [("uint8", "float32"), ("int16", "float32"),
                                                ("float16", "float16"),
                                                ("float32", "float32"),
                                                ("float64", "float64")])
def test_math_functions_round_the_exact_value_once(op: str, dtype: str, result: str) -> None:
    x = np.abs(values(dtype, 10).astype(np.float64)) + 1
    if op in ("asin", "acos"):
        x = x / x.max() if np.dtype(dtype).kind == "f" else np.ones_like(x)
    x = x.astype(dtype)
    out = run_op(build("math.unary", op=op), x)
    assert out.dtype == np.dtype(result)
    expected = np.array([UNARY_REFERENCE[op](v) for v in x.astype(np.float64).ravel()])
    if result == "float64":  # numpy's and Python's libm may differ in the last bit
        np.testing.assert_allclose(out.ravel(), expected, rtol=1e-15)
    else:
        with np.errstate(over="ignore"):  # exp(120) is inf in float32
            np.testing.assert_array_equal(out.ravel(), expected.astype(result))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32", "float16", "float64", "bool"])
def test_minus_and_abs_keep_the_type(dtype: str) -> None:
    x = values(dtype, 11)
    minus = run_op(build("math.unary", op="minus"), x)
    absolute = run_op(build("math.unary", op="abs"), x)
    assert minus.dtype == absolute.dtype == x.dtype
    if dtype == "bool":
        np.testing.assert_array_equal(minus, x)
        np.testing.assert_array_equal(absolute, x)
    else:
        np.testing.assert_array_equal(minus, np.negative(x))
        np.testing.assert_array_equal(absolute, x if dtype == "uint8" else np.abs(x))


def test_clamp_keeps_an_integer_type_with_int_bounds() -> None:
    x = np.array([-300, -5, 0, 100, 255, 256, 1000], dtype=np.int16)
    out = run_op(build("math.clamp", lo=0.0, hi=255.0, constant_type="int"), x)
    assert out.dtype == np.int16 and out.tolist() == [0, 0, 0, 100, 255, 255, 255]
    images = np.array([0, 7, 200], dtype=np.uint8)
    out = run_op(build("math.clamp", lo=-20.0, hi=100.0, constant_type="int"), images)
    assert out.dtype == np.uint8 and out.tolist() == [0, 7, 100]
    out = run_op(build("math.clamp", lo=0.5, hi=100.0, constant_type="float"), images)
    assert out.dtype == np.float32 and out.tolist() == [0.5, 7.0, 100.0]


# -- shapes and errors ---------------------------------------------------------------------


def test_a_scalar_per_sample_is_broadcast_and_other_shapes_are_refused() -> None:
    images = values("uint8", 12)
    one = np.array([2], dtype=np.uint8)
    np.testing.assert_array_equal(run_op(binary_op("mul"), images, one), images * 2)
    np.testing.assert_array_equal(run_op(binary_op("sub"), np.array(200, dtype=np.uint8), images),
                                  np.uint8(200) - images)
    with pytest.raises(InvalidArgument, match=r"math.binary\[add\].*\(5, 6, 3\).*\(5, 6\)"):
        run_op(binary_op("add"), images, images[..., 0])


def test_bitwise_operators_refuse_floats() -> None:
    with pytest.raises(InvalidArgument, match=r"bitand.*float32.*cast"):
        run_op(binary_op("bitand"), values("float32", 1), values("float32", 2))


# -- in a pipeline: DALI-style expressions that resume exactly --------------------------------


@pipeline_def(batch_size=3, num_threads=2, seed=5, enable_checkpointing=True)
def expressions_pipeline(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root, random_shuffle=True, name="reader")
    images = fn.resize(fn.decoders.image(jpegs), size=(12, 10))
    flipped = fn.flip(images)
    wide = fn.cast(images, dtype="int16")
    level = fn.random.uniform(range=(0.0, 255.0))
    return (images * 0.5, 0.5 * images, (images + flipped) // 2,
            fn.math.clamp(wide * 2 - 100, 0, 255), images > level, -wide,
            fn.math.sqrt(images) + fn.math.atan2(wide, 7), labels % 2 == 0)


def test_dali_style_expressions_in_a_pipeline(image_root: Path) -> None:
    spec = expressions_pipeline(str(image_root / "imgs"))
    with Pipeline(spec) as pipe:
        batch = pipe.run()
    half, half_left, mean, clamped, above, negated, mixed, even = batch
    for i in range(3):
        image = np.asarray(batch[0][i])  # float32 halves: the image is twice that
        pixels = (image * 2).astype(np.uint8)
        assert np.asarray(half[i]).dtype == np.float32
        np.testing.assert_array_equal(np.asarray(half_left[i]), image)
        flipped = pixels[:, ::-1]
        np.testing.assert_array_equal(
            np.asarray(mean[i]), ((pixels.astype(np.int32) + flipped) % 256 // 2)
            .astype(np.uint8))
        np.testing.assert_array_equal(
            np.asarray(clamped[i]), np.clip(pixels.astype(np.int16) * 2 - 100, 0, 255))
        assert np.asarray(clamped[i]).dtype == np.int16
        assert np.asarray(above[i]).dtype == np.bool_ and np.asarray(above[i]).shape == \
            pixels.shape
        np.testing.assert_array_equal(np.asarray(negated[i]), -pixels.astype(np.int16))
        assert np.asarray(mixed[i]).dtype == np.float32
        assert np.asarray(even[i]).dtype == np.bool_


def test_expressions_resume_exactly(image_root: Path) -> None:
    spec = expressions_pipeline(str(image_root / "imgs"))
    for before in (0, 2, 7):
        assert_resume_exact(spec, before, 4)
