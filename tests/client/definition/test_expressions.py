"""DataNode arithmetic and fn.math record DALI's expressions as math.* operators: which
operator, which operation, the constant and its type, and the operand order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn
from conveyor.definition.decorator import pipeline_def
from conveyor.definition.graph import DataNode
from conveyor.definition.schemas.registry import decode_args
from conveyor.errors import InvalidArgument, SpecError
from conveyor.v1 import pipeline_pb2


def recorded(graph: Any) -> list[tuple[str, dict[str, Any], list[int]]]:
    """The operators a graph function records: (type, arguments, input operator indices)."""

    @pipeline_def(batch_size=2, seed=1)
    def define() -> Any:
        images = fn.random.uniform(range=(0.0, 1.0), shape=(4,))
        other = fn.random.normal(shape=(4,))
        return graph(images, other)

    spec: pipeline_pb2.PipelineSpec = define().spec
    return [(op.type, {k: v for k, v in decode_args(op).items() if k != "seed"},
             [ref.op for ref in op.inputs]) for op in spec.ops[2:]]


def test_a_node_times_a_float_is_one_scalar_operator() -> None:
    assert recorded(lambda images, _: images * 0.5) == [
        ("math.scalar", {"op": "mul", "value": 0.5, "constant_type": "float",
                         "reverse": False}, [0])]


def test_a_constant_on_the_left_is_reversed() -> None:
    assert recorded(lambda images, _: 0.5 * images)[0][1]["reverse"] is True
    assert recorded(lambda images, _: 2 - images)[0][1] == {
        "op": "sub", "value": 2.0, "constant_type": "int", "reverse": True}
    assert recorded(lambda images, _: 1 / images)[0][1]["op"] == "fdiv"


def test_node_node_expressions_chain() -> None:
    ops = recorded(lambda a, b: (a + b) // 2)
    assert ops == [("math.binary", {"op": "add"}, [0, 1]),
                   ("math.scalar", {"op": "div", "value": 2.0, "constant_type": "int",
                                    "reverse": False}, [2])]


OPERATORS = [
    (lambda a, b: a - b, "sub"), (lambda a, b: a * b, "mul"), (lambda a, b: a / b, "fdiv"),
    (lambda a, b: a // b, "div"), (lambda a, b: a % b, "mod"), (lambda a, b: a ** b, "pow"),
    (lambda a, b: a & b, "bitand"), (lambda a, b: a | b, "bitor"),
    (lambda a, b: a ^ b, "bitxor"), (lambda a, b: a == b, "eq"), (lambda a, b: a != b, "neq"),
    (lambda a, b: a < b, "lt"), (lambda a, b: a <= b, "leq"), (lambda a, b: a > b, "gt"),
    (lambda a, b: a >= b, "geq"), (fn.math.min, "min"),
    (fn.math.max, "max"), (fn.math.pow, "pow"),
    (fn.math.atan2, "atan2"),
]


@pytest.mark.parametrize(("expression", "op"), OPERATORS)
def test_every_binary_operator(expression: Any, op: str) -> None:
    assert recorded(expression) == [("math.binary", {"op": op}, [0, 1])]
    (kind, args, _), = recorded(lambda a, _: expression(a, 3))
    assert (kind, args["op"], args["constant_type"]) == ("math.scalar", op, "int")


def test_comparisons_with_a_constant_on_the_left_mirror() -> None:
    """Python turns ``3 < x`` into ``x > 3``."""
    assert recorded(lambda a, _: 3 < a)[0][1]["op"] == "gt"  # noqa: SIM300


@pytest.mark.parametrize("name", ["abs", "sqrt", "exp", "log", "log2", "log10", "floor",
                                  "ceil", "sin", "cos", "tan", "asin", "acos", "atan"])
def test_every_unary_function(name: str) -> None:
    assert recorded(lambda a, _: getattr(fn.math, name)(a)) == [
        ("math.unary", {"op": name}, [0])]


def test_unary_operators_and_clamp() -> None:
    assert recorded(lambda a, _: -a) == [("math.unary", {"op": "minus"}, [0])]
    assert recorded(lambda a, _: abs(a)) == [("math.unary", {"op": "abs"}, [0])]
    assert recorded(lambda a, _: fn.math.clamp(a, 0, 255)) == [
        ("math.clamp", {"lo": 0.0, "hi": 255.0, "constant_type": "int"}, [0])]
    assert recorded(lambda a, _: fn.math.clamp(a, 0, 0.5))[0][1]["constant_type"] == "float"


def test_constant_types_follow_python() -> None:
    for constant, kind in ((True, "bool"), (3, "int"), (np.int64(3), "int"), (2.5, "float"),
                           (np.float32(2.5), "float")):
        assert recorded(lambda a, _, c=constant: a + c)[0][1]["constant_type"] == kind


def test_unsupported_operands_are_refused() -> None:
    with pytest.raises(TypeError):
        recorded(lambda a, _: a + "x")
    with pytest.raises(TypeError):  # numpy arrays are not spread over nodes either
        recorded(lambda a, _: a * np.ones(3))
    with pytest.raises(TypeError):
        recorded(lambda a, _: np.ones(3) + a)
    with pytest.raises(SpecError, match=r"math.binary.*fn.math.min.*operator output"):
        recorded(lambda a, _: fn.math.min(2, 3))
    with pytest.raises(SpecError, match=r"math.scalar.*value.*2\*\*53"):
        recorded(lambda a, _: a + 2**60)
    with pytest.raises(SpecError, match=r"math.clamp.*hi.*Python number"):
        recorded(lambda a, _: fn.math.clamp(a, 0, "x"))
    with pytest.raises(SpecError, match="finite"):
        recorded(lambda a, _: a * float("inf"))


def test_expressions_outside_a_pipeline_definition_are_refused() -> None:
    stray = DataNode(0, 0, object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="outside a @pipeline_def"):
        stray * 2


def test_nodes_stay_hashable() -> None:
    def graph(a: DataNode, b: DataNode) -> Any:
        assert len({a, b, a}) == 2
        return a
    recorded(graph)
