"""DALI's ``fn.math`` functions: ``abs``, ``sqrt``, ..., ``min``, ``max``, ``pow``,
``atan2`` and ``clamp(x, lo, hi)``, each the expression operator of ``conveyor.definition.graph`` it
names (``math.unary``, ``math.binary``, ``math.scalar``, ``math.clamp``); one operand must be
an operator output, the other an output or a Python number."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from conveyor.definition.graph import DataNode, binary, constant, make_op, unary
from conveyor.errors import SpecError


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
    return make_op("math.clamp")(operand, lo=bounds[0][0] if bounds[0] else 0.0,
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
