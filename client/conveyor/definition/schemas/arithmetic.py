"""The expression operators' schemas (part of ``schema.SCHEMAS``): DALI's arithmetic
operators and ``fn.math`` functions, as four operators, one per kind of operand.

- ``math.binary``: two inputs, ``op`` one of ``BINARY_OPS`` (``a + b``, ``fn.math.min(a, b)``);
- ``math.scalar``: one input and a Python constant (``images * 0.5``, ``0.5 * images``:
  ``reverse`` puts the constant on the left), its type in ``constant_type``;
- ``math.unary``: one input, ``op`` one of ``UNARY_OPS`` (``-x``, ``fn.math.sqrt(x)``);
- ``math.clamp``: one input between two constants (``fn.math.clamp(x, 0, 255)``).

``op`` selects the implementation, so each one has its own behaviour key
(``math.binary[add]``). The names are DALI's: ``fdiv`` is ``/``, ``div`` is ``//``.
``conveyor.definition.expressions`` makes them from ``DataNode`` operators and ``fn.math``.
"""

from __future__ import annotations

from conveyor.definition.schemas.args import Arg, OpSchema

#: Two operands: arithmetic, comparisons, bitwise, and the two-argument math functions.
BINARY_OPS = ("add", "sub", "mul", "fdiv", "div", "mod", "pow", "min", "max", "atan2",
              "eq", "neq", "lt", "leq", "gt", "geq", "bitand", "bitor", "bitxor")
#: One operand: negation and the one-argument math functions.
UNARY_OPS = ("minus", "abs", "sqrt", "exp", "log", "log2", "log10", "floor", "ceil",
             "sin", "cos", "tan", "asin", "acos", "atan")
#: A constant's Python type: it decides the promotion (a "weak" type, as DALI's).
CONSTANT_TYPES = ("int", "float", "bool")
#: The largest integer constant a float64 holds exactly (constants travel as numbers).
MAX_EXACT_INT = 2 ** 53

MATH_SCHEMAS = {
    "math.binary": OpSchema(2, ("output",), {
        "op": Arg("enum", required=True, choices=BINARY_OPS),
    }),
    "math.scalar": OpSchema(1, ("output",), {
        "op": Arg("enum", required=True, choices=BINARY_OPS),
        "value": Arg("float", required=True, minimum=-MAX_EXACT_INT, maximum=MAX_EXACT_INT),
        "constant_type": Arg("enum", default="float", choices=CONSTANT_TYPES),
        #: The constant is the left operand (``2 - x``).
        "reverse": Arg("bool", default=False),
    }),
    "math.unary": OpSchema(1, ("output",), {
        "op": Arg("enum", required=True, choices=UNARY_OPS),
    }),
    "math.clamp": OpSchema(1, ("output",), {
        "lo": Arg("float", required=True, minimum=-MAX_EXACT_INT, maximum=MAX_EXACT_INT),
        "hi": Arg("float", required=True, minimum=-MAX_EXACT_INT, maximum=MAX_EXACT_INT),
        #: "int" when both bounds are Python ints, "float" when either is a float.
        "constant_type": Arg("enum", default="float", choices=CONSTANT_TYPES),
    }),
}
