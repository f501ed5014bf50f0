"""DALI's arithmetic expressions on ``DataNode``s, and the ``fn.math`` functions.

``images * 0.5``, ``(a + b) // 2``, ``-x``, ``a < b``, ``mask & 1``, ``0.5 * images`` and
``fn.math.clamp(x, 0, 255)`` each record one operator (``conveyor.math_schemas``) through
the same path as every ``fn`` call: two operator outputs make ``math.binary``, an output
and a Python number ``math.scalar`` (the number's type, int, float or bool, is kept: it
decides the result type, see ``engine/ops/arithmetic/expressions.py`` on the server for the
promotion rules), one output ``math.unary``. At least one operand must be an operator
output; the operations run elementwise on each sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conveyor.errors import SpecError
from conveyor.math_schemas import MAX_EXACT_INT
from conveyor.pipeline_def import DataNode

#: The declared operators, by type (``fn`` hands them over: ``use_operators``).
OpMaker = Callable[..., Any]
_made: dict[str, OpMaker] = {}


def use_operators(made: dict[str, OpMaker]) -> None:
    """Called by ``conveyor.fn`` once it has made the declared operators."""
    _made.update({t: made[t] for t in ("math.binary", "math.scalar", "math.unary",
                                       "math.clamp")})


def constant(value: Any) -> tuple[float, str] | None:
    """A Python (or numpy) scalar as (value, constant type); None for anything else."""
    kind = type(value).__name__
    if isinstance(value, bool) or kind == "bool_":
        return float(bool(value)), "bool"
    if isinstance(value, int) or (hasattr(value, "dtype") and getattr(value, "shape", 1) == ()
                                  and value.dtype.kind in "iu"):
        number = int(value)
        if abs(number) > MAX_EXACT_INT:
            raise SpecError("math.scalar", "value", f"got {number}: integer constants are "
                            f"limited to +-2**53; make a wider constant with an operator")
        return float(number), "int"
    if isinstance(value, float) or (hasattr(value, "dtype") and getattr(value, "shape", 1) == ()
                                    and value.dtype.kind == "f"):
        return float(value), "float"
    return None


def binary(op: str, left: Any, right: Any) -> Any:
    """``left op right`` as an operator; ``NotImplemented`` unless one operand is a
    ``DataNode`` and the other a ``DataNode`` or a Python number."""
    if isinstance(left, DataNode) and isinstance(right, DataNode):
        return _made["math.binary"](left, right, op=op)
    node, other, reverse = (left, right, False) if isinstance(left, DataNode) else \
        (right, left, True)
    if not isinstance(node, DataNode):
        return NotImplemented
    given = constant(other)
    if given is None:
        return NotImplemented
    value, constant_type = given
    return _made["math.scalar"](node, op=op, value=value, constant_type=constant_type,
                                reverse=reverse)


def unary(op: str, operand: Any) -> Any:
    if not isinstance(operand, DataNode):
        raise SpecError("math.unary", None, f"fn.math.{op}: got {operand!r}, expected the "
                        "output of another operator")
    return _made["math.unary"](operand, op=op)


def _binary_function(op: str, name: str) -> Callable[[Any, Any], Any]:
    def function(left: Any, right: Any) -> Any:
        result = binary(op, left, right)
        if result is NotImplemented:
            raise SpecError("math.binary", None, f"fn.math.{name}: got {left!r} and "
                            f"{right!r}: one must be an operator output, the other an "
                            "operator output or a Python number")
        return result

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"DALI's ``math.{name}``, elementwise (operator ``math.binary``)."
    return function


def _unary_function(op: str) -> Callable[[Any], Any]:
    def function(operand: Any) -> Any:
        return unary(op, operand)

    function.__name__ = function.__qualname__ = op
    function.__doc__ = f"DALI's ``math.{op}``, elementwise (operator ``math.unary``)."
    return function


def clamp(operand: Any, lo: Any, hi: Any) -> Any:
    """DALI's ``math.clamp(x, lo, hi)``: ``lo`` where ``x <= lo``, else ``hi`` where
    ``x >= hi``, else ``x``; ``lo`` and ``hi`` are Python numbers (both ints keep an integer
    input's type, a float makes it float32)."""
    if not isinstance(operand, DataNode):
        raise SpecError("math.clamp", None, f"got {operand!r}, expected the output of another "
                        "operator")
    bounds = [constant(lo), constant(hi)]
    for name, given, value in (("lo", bounds[0], lo), ("hi", bounds[1], hi)):
        if given is None:
            raise SpecError("math.clamp", name, f"got {value!r}, expected a Python number")
    types = {b[1] for b in bounds if b is not None}
    constant_type = "float" if "float" in types else "int" if "int" in types else "bool"
    return _made["math.clamp"](operand, lo=bounds[0][0] if bounds[0] else 0.0,
                               hi=bounds[1][0] if bounds[1] else 0.0,
                               constant_type=constant_type)


def math_functions() -> dict[str, Callable[..., Any]]:
    """``fn.math``'s functions, with DALI's names and signatures."""
    functions: dict[str, Callable[..., Any]] = {
        name: _unary_function(name)
        for name in ("abs", "sqrt", "exp", "log", "log2", "log10", "floor", "ceil", "sin",
                     "cos", "tan", "asin", "acos", "atan")}
    functions.update({name: _binary_function(name, name)
                      for name in ("min", "max", "pow", "atan2")})
    functions["clamp"] = clamp
    return functions
