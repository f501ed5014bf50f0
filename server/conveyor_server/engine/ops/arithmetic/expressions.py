"""DALI's arithmetic expressions, elementwise on each sample's array.

``math.binary`` takes two inputs, ``math.scalar`` one input and a Python constant,
``math.unary`` one input, ``math.clamp`` one input between two constants; ``op`` names
the operation as DALI does (``fdiv`` is ``/``, ``div`` is ``//``).

Shapes: two inputs have one shape, or one of them holds one element (a scalar per sample),
which is broadcast to the other's shape; anything else is ``InvalidArgument``.

Type promotion (DALI's ``arithmetic_meta.h``), for ``T`` and ``U`` the operand types:

- ``T op T`` is ``T``; ``bool`` with any other type is that type;
- a float with a non-float is that float; two floats give the wider one;
- two signed (or two unsigned) integers give the wider one;
- ``intX`` with ``uintY`` is ``intX`` when X > Y, else the signed type of twice Y's width
  (``int64`` at most): ``int8 + uint8`` is ``int16``, ``int64 + uint64`` is ``int64``.

A Python constant is "weak": its type gives way to the input's. An ``int`` constant keeps
the input's integer or float type (``uint8 - 1`` is ``uint8``; ``bool + 1`` is ``int32``),
a ``float`` constant keeps a float input's type and makes an integer input ``float32``
(``uint8 * 0.5`` is ``float32``), a ``bool`` constant always keeps the input's type. An int
constant that the input's integer type cannot hold (``uint8 + 300``) is refused
(``InvalidArgument``): cast the input first. ``clamp``'s two bounds are one constant type.

Results: ``+ - * // % ** min max & | ^`` and ``clamp`` give the promoted type (integer
arithmetic wraps around); ``/`` and ``atan2`` give ``float32`` for integer or bool operands,
else the promoted float; comparisons give ``bool`` (signed against unsigned compares the
values exactly); the unary functions but ``minus`` and ``abs`` give ``float32`` for
integer or bool input, else the input's float type. As DALI: ``//`` of integers truncates
toward zero and of floats is a plain division; ``%`` of integers has the dividend's sign
(C's ``%``) and of floats is the IEEE remainder (``x - n * y``, ``n`` the nearest integer
to ``x / y``, ties to even). Where C leaves it undefined this engine defines it: an integer
``//`` or ``%`` by zero gives 0, and an integer raised to a negative power gives 0 (1 for a
base of 1, +-1 for a base of -1). ``& | ^`` take integers or bools only. ``-`` and ``abs``
of a bool are the bool itself; of an unsigned integer, ``-`` wraps and ``abs`` is the value.

Exactness: float16 and float32 transcendental functions (``exp``, ``sin``, ``pow``, ...)
are computed in float64 and rounded once to the output type, so the result does not depend
on which SIMD code of numpy ran; every output is a new, C-contiguous array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.arithmetic.elementwise import (
    BOOL,
    FLOAT32,
    FLOAT64,
    float_result,
    ieee_remainder,
    int_div,
    int_mod,
    int_pow,
    is_float,
    is_integer,
    promote,
    weak,
)
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

COMPARISONS = {"eq": np.equal, "neq": np.not_equal, "lt": np.less, "leq": np.less_equal,
               "gt": np.greater, "geq": np.greater_equal}
BITWISE = {"bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor}
#: The binary operations whose result is a float even for integer operands.
FLOAT_RESULT = frozenset({"fdiv", "atan2"})
FLOAT_FUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "log2": np.log2, "log10": np.log10,
    "floor": np.floor, "ceil": np.ceil, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
}


# -- the operations ----------------------------------------------------------------------


def _wide(values: np.ndarray) -> np.ndarray:
    """float64 for computing a float32/float16 result rounded once."""
    return values.astype(FLOAT64) if values.dtype != FLOAT64 else values


def _safe_compare(op: str, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """A comparison of the values themselves: a negative signed integer is below every
    unsigned one (DALI's safe comparisons); otherwise compared in the promoted type."""
    compare = COMPARISONS[op]
    lt, rt = left.dtype, right.dtype
    if is_integer(lt) and is_integer(rt) and lt.kind != rt.kind:
        unsigned = lt if lt.kind == "u" else rt
        if unsigned.itemsize < 8:
            return np.asarray(compare(left.astype(np.int64), right.astype(np.int64)))
        signed_left = lt.kind == "i"
        signed = left if signed_left else right
        negative = signed < 0
        as_unsigned = signed.astype(np.uint64)
        plain = compare(as_unsigned, right) if signed_left else compare(left, as_unsigned)
        below = compare(-1, 0) if signed_left else compare(0, -1)  # signed < unsigned
        return np.where(negative, below, plain)
    common = promote(lt, rt)
    return np.asarray(compare(left.astype(common, copy=False),
                              right.astype(common, copy=False)))


def _compare_constant(op: str, values: np.ndarray, value: float, constant_type: str,
                      reverse: bool) -> np.ndarray:
    """A comparison with a constant: in the float type where either is a float, else with
    the integer's own value (``uint8 > 300`` is all False)."""
    compare = COMPARISONS[op]
    constant: Any
    if constant_type == "float" or is_float(values.dtype):
        common = weak(values.dtype, constant_type)
        values = values.astype(common, copy=False)
        constant = np.asarray(value, dtype=FLOAT64).astype(common)
    else:
        constant = int(value)
    return np.asarray(compare(constant, values) if reverse else compare(values, constant))


def binary(op: str, left: np.ndarray, right: np.ndarray, out_type: np.dtype,
           where: str) -> np.ndarray:
    """``left op right`` with both converted to ``out_type`` (the promoted type; bool for
    comparisons, which compare the operands themselves)."""
    if op in COMPARISONS:
        return _safe_compare(op, left, right)
    if op in BITWISE:
        if not (is_integer(out_type) or out_type == BOOL):
            raise InvalidArgument(f"{where}: '{op}' takes integer or bool operands, got "
                                  f"{left.dtype} and {right.dtype}: cast them first")
        return np.asarray(BITWISE[op](left.astype(out_type), right.astype(out_type)))
    if out_type == BOOL and op not in FLOAT_RESULT:
        # In C, bools are added as ints and the result made a bool again.
        wide = binary(op, left.astype(np.uint8), right.astype(np.uint8), np.dtype(np.uint8),
                      where)
        return np.asarray(wide != 0)
    x, y = left.astype(out_type), right.astype(out_type)
    if op == "add":
        return np.asarray(x + y)
    if op == "sub":
        return np.asarray(x - y)
    if op == "mul":
        return np.asarray(x * y)
    if op == "min":
        return np.where(x < y, x, y)
    if op == "max":
        return np.where(x > y, x, y)
    if op == "div":
        return int_div(x, y) if is_integer(out_type) else np.asarray(x / y)
    if op == "mod":
        if is_integer(out_type):
            return int_mod(x, y)
        if out_type == np.float16:
            return ieee_remainder(x.astype(FLOAT32), y.astype(FLOAT32)).astype(out_type)
        return ieee_remainder(x, y)
    if op == "pow":
        if is_integer(out_type):
            return int_pow(x, y)
        return np.power(_wide(x), _wide(y)).astype(out_type)
    if op == "fdiv":
        return np.asarray(x / y)
    if op == "atan2":
        return np.arctan2(_wide(x), _wide(y)).astype(out_type)
    raise AssertionError(op)  # pragma: no cover - the schema lists the operations


def binary_type(op: str, common: np.dtype) -> np.dtype:
    """The result type of ``op`` for operands promoted to ``common``."""
    if op in COMPARISONS:
        return BOOL
    return float_result(common) if op in FLOAT_RESULT else common


def unary(op: str, values: np.ndarray) -> np.ndarray:
    dtype = values.dtype
    if op == "minus":
        if dtype == BOOL:
            return values.copy()
        return np.negative(values)
    if op == "abs":
        return values.copy() if dtype == BOOL or dtype.kind == "u" else np.abs(values)
    out_type = float_result(dtype)
    if dtype == FLOAT64:
        return np.asarray(FLOAT_FUNCTIONS[op](values))
    return np.asarray(FLOAT_FUNCTIONS[op](values.astype(FLOAT64))).astype(out_type)


def _fresh(result: np.ndarray, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The result as a new, writable, C-contiguous array (never a view of an input)."""
    out = np.asarray(result)
    if (out.ndim == 0 or not out.flags.writeable or not out.flags.c_contiguous
            or any(np.may_share_memory(out, i) for i in inputs)):
        out = np.array(out, order="C")
    return out


def _operands(where: str, left: np.ndarray, right: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Two operands of one shape: a one-element operand is broadcast to the other's."""
    if left.shape == right.shape:
        return left, right
    if right.size == 1:
        return left, np.broadcast_to(right.reshape(()), left.shape)
    if left.size == 1:
        return np.broadcast_to(left.reshape(()), right.shape), right
    raise InvalidArgument(f"{where}: the operands' shapes {left.shape} and {right.shape} "
                          "differ: give arrays of one shape, or one number per sample")


def _constant(where: str, value: float, constant_type: str, dtype: np.dtype) -> np.ndarray:
    """A Python constant as a 0-d array of ``dtype`` (the weak type it takes)."""
    if constant_type == "float" or is_float(dtype):
        return np.asarray(value, dtype=FLOAT64).astype(dtype)
    number = int(value)
    info = np.iinfo(dtype) if dtype != BOOL else None
    if info is not None and not info.min <= number <= info.max:
        raise InvalidArgument(f"{where}: the constant {number} does not fit the input's type "
                              f"{dtype} (range {info.min}..{info.max}): cast the input to a "
                              "wider type first (fn.cast)")
    return np.asarray(number, dtype=dtype)


def _bound(value: float, dtype: np.dtype) -> np.ndarray:
    """A clamp bound in ``dtype``; an integer type's range caps it (``clamp(uint8, -20,
    100)`` is ``clamp(uint8, 0, 100)``: the same values)."""
    if is_float(dtype):
        return np.asarray(value, dtype=FLOAT64).astype(dtype)
    if dtype == BOOL:
        return np.asarray(value != 0)
    info = np.iinfo(dtype)
    return np.asarray(min(max(int(value), int(info.min)), int(info.max)), dtype=dtype)


def _layout(ctx: OpContext) -> tuple[str, ...]:
    return (next((layout for layout in ctx.input_layouts if layout), ""),)


@register("math.binary")
def build_binary(ctx: OpContext) -> SampleOp:
    op = str(ctx.args["op"])
    where = f"math.binary[{op}]"

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        left, right = _operands(where, np.asarray(inputs[0]), np.asarray(inputs[1]))
        common = promote(left.dtype, right.dtype)
        with np.errstate(all="ignore"):
            result = binary(op, left, right, common, where)
        out_type = binary_type(op, common)
        return (_fresh(np.asarray(result).astype(out_type, copy=False), inputs),)

    return SampleOp(fn=run, layouts=_layout(ctx))


@register("math.scalar")
def build_scalar(ctx: OpContext) -> SampleOp:
    op = str(ctx.args["op"])
    value = float(ctx.args["value"])
    constant_type = str(ctx.args["constant_type"])
    reverse = bool(ctx.args["reverse"])
    where = f"math.scalar[{op}]"

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        values = np.asarray(inputs[0])
        common = weak(values.dtype, constant_type)
        with np.errstate(all="ignore"):
            if op in COMPARISONS:
                result = _compare_constant(op, values, value, constant_type, reverse)
            else:
                constant = _constant(where, value, constant_type, common)
                scalar = np.broadcast_to(constant, values.shape)
                left, right = (scalar, values) if reverse else (values, scalar)
                result = binary(op, left, right, common, where)
        return (_fresh(np.asarray(result).astype(binary_type(op, common), copy=False),
                       inputs),)

    return SampleOp(fn=run, layouts=_layout(ctx))


@register("math.unary")
def build_unary(ctx: OpContext) -> SampleOp:
    op = str(ctx.args["op"])

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        values = np.asarray(inputs[0])
        with np.errstate(all="ignore"):
            return (_fresh(unary(op, values), inputs),)

    return SampleOp(fn=run, layouts=_layout(ctx))


@register("math.clamp")
def build_clamp(ctx: OpContext) -> SampleOp:
    lo, hi = float(ctx.args["lo"]), float(ctx.args["hi"])
    constant_type = str(ctx.args["constant_type"])

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        values = np.asarray(inputs[0])
        out_type = weak(values.dtype, constant_type)
        x = values.astype(out_type)
        low, high = (_bound(lo, out_type), _bound(hi, out_type))
        # DALI's clamp: lo at or below lo, else hi at or above hi, else the value.
        result = np.where(x <= low, low, np.where(x >= high, high, x)).astype(out_type)
        return (_fresh(result, inputs),)

    return SampleOp(fn=run, layouts=_layout(ctx))


# -- behaviour probe (engine/identity/behaviour/) ----------------------------------------


#: Input types the probes cover: bytes, signed and wide integers, half, single, double.
PROBE_TYPES = ("uint8", "int16", "int32", "float16", "float32", "float64")


def _probe_array(dtype: str, salt: int, shape: tuple[int, int, int] = (7, 5, 3)) -> np.ndarray:
    """Exact probe values of ``dtype``: integers centred on 0 (signed types), quarter steps
    for floats; ``probe_image``'s bits, so identical everywhere."""
    raw = image(*shape, dtype="int16", salt=salt).astype(np.int64)  # 0..254
    if dtype in ("float16", "float32", "float64"):
        return ((raw - 100) * 0.25).astype(dtype)
    if dtype.startswith("int"):
        return (raw - 100).astype(dtype)
    return raw.astype(dtype)


def _pairs(op: str) -> list[tuple[Sequence[np.ndarray], ProbeTargs]]:
    samples: list[tuple[Sequence[np.ndarray], ProbeTargs]] = []
    for i, left_type in enumerate(PROBE_TYPES):
        right_type = PROBE_TYPES[(i + 2) % len(PROBE_TYPES)]
        left = _probe_array(left_type, 2 * i)
        right = _probe_array(right_type, 2 * i + 1)
        if op in ("pow",):
            right = (np.abs(right.astype(np.float64)) % 4).astype(right_type)
        samples.append(((left, right), {}))
        samples.append(((left, _probe_array(left_type, 40 + i)), {}))
    scalar = np.asarray([3], dtype=np.int32)
    samples.append(((_probe_array("uint8", 50), scalar), {}))  # a number per sample
    samples.append(((_probe_array("int16", 51), _probe_array("uint8", 52)), {}))
    samples.append(((_probe_array("float32", 53), _probe_array("int16", 54)), {}))
    if op.startswith("bit"):
        samples = [s for s in samples if all(a.dtype.kind in "iub" for a in s[0])]
    return samples


def _singles(dtypes: Sequence[str], scale: float | None = None
             ) -> list[tuple[Sequence[np.ndarray], ProbeTargs]]:
    samples: list[tuple[Sequence[np.ndarray], ProbeTargs]] = []
    for i, dtype in enumerate(dtypes):
        values = _probe_array(dtype, 60 + i)
        if scale is not None and values.dtype.kind == "f":
            values = (values * scale).astype(dtype)
        samples.append(((values,), {}))
    return samples


@op_probe("math.binary", variant_arg="op")
def _binary_probe(variant: str) -> list[Case]:
    return [Case({"op": variant}, _pairs(variant))]


@op_probe("math.scalar", variant_arg="op")
def _scalar_probe(variant: str) -> list[Case]:
    types = PROBE_TYPES if not variant.startswith("bit") else ("uint8", "int16", "int32")
    cases = [Case({"op": variant, "value": 3.0, "constant_type": "int"}, _singles(types)),
             Case({"op": variant, "value": -2.0, "constant_type": "int", "reverse": True},
                  _singles(types[1:]))]
    if not variant.startswith("bit"):
        cases.append(Case({"op": variant, "value": 0.75, "constant_type": "float"},
                          _singles(types)))
        cases.append(Case({"op": variant, "value": 1.5, "constant_type": "float",
                           "reverse": True}, _singles(types)))
    cases.append(Case({"op": variant, "value": 1.0, "constant_type": "bool"},
                      _singles(types)))
    return cases


@op_probe("math.unary", variant_arg="op")
def _unary_probe(variant: str) -> list[Case]:
    # Inputs in the functions' domains: asin and acos take [-1, 1] (quarter steps / 32).
    scale = 1 / 32 if variant in ("asin", "acos") else None
    return [Case({"op": variant}, _singles(PROBE_TYPES, scale))]


@op_probe("math.clamp")
def _clamp_probe(variant: str) -> list[Case]:
    return [Case({"lo": -20.0, "hi": 100.0, "constant_type": "int"}, _singles(PROBE_TYPES)),
            Case({"lo": -3.5, "hi": 7.25, "constant_type": "float"}, _singles(PROBE_TYPES))]
