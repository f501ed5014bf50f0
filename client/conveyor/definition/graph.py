"""The graph a pipeline definition records while its function runs.

``DataNode`` is one output of a recorded operator; ``GraphBuilder`` holds the operators of
the definition being run (``building()`` makes one current, ``current_builder`` finds it);
``make_op`` makes the function that records one call of an operator, as ``fn``'s are, its
constant arguments validated against the declarations
(``conveyor.definition.schemas.registry``) at once.

Devices, as DALI's: an operator called without ``device`` runs on the GPU when one of its
inputs is there (the output of a ``"gpu"`` operator or a ``"mixed"`` decoder), else on the
CPU. ``DataNode.gpu()`` is DALI's transfer: it records the declared operator ``copy`` on
``device="gpu"`` (the pipeline needs a ``device_id``), so the operators it feeds run on the
GPU; where the pipeline runs without a CUDA device, building it says so.

DALI's arithmetic expressions are ``DataNode``'s operators: ``images * 0.5``,
``(a + b) // 2``, ``-x``, ``a < b``, ``mask & 1``, ``0.5 * images`` each record one
operator (``conveyor.definition.schemas.arithmetic``) through ``make_op``: two operator outputs make
``math.binary``, an output and a Python number ``math.scalar`` (the number's type, int,
float or bool, is kept: it decides the result type, see the server's
``engine/ops/arithmetic/expressions.py`` for the promotion rules), one output
``math.unary``. ``fn.math``'s functions are in ``conveyor.definition.expressions``.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from conveyor.definition.schemas.arithmetic import MAX_EXACT_INT
from conveyor.definition.schemas.registry import encode_arg, num_outputs, schema_of
from conveyor.errors import InvalidArgument, SpecError
from conveyor.v1 import pipeline_pb2

#: The spec devices whose outputs are in GPU memory.
ON_GPU = ("gpu", "mixed")
_current: contextvars.ContextVar[GraphBuilder | None] = contextvars.ContextVar(
    "conveyor_graph", default=None
)


@dataclass(frozen=True)
class DataNode:
    """A symbolic output of an operator inside a pipeline definition."""

    op: int
    output: int
    builder: GraphBuilder

    def ref(self) -> pipeline_pb2.OutputRef:
        return pipeline_pb2.OutputRef(op=self.op, output=self.output)

    @property
    def device(self) -> str:
        """Where the data is, as DALI's ``DataNode.device``: "gpu" (the output of a GPU
        operator or of a "mixed" decoder) or "cpu"."""
        return "gpu" if self.builder.ops[self.op].device in ON_GPU else "cpu"

    def gpu(self) -> DataNode:
        """DALI's transfer to the GPU: this data as the input of GPU operators (an operator
        it feeds runs on ``device="gpu"`` unless told otherwise); the data itself where it
        is already there."""
        if self.device == "gpu":
            return self
        if self.builder.device_id is None:
            raise InvalidArgument("copy: data.gpu() moves data to the pipeline's GPU, and "
                                  "this pipeline has none (device_id=None): give the pipeline "
                                  "a device_id, or leave out .gpu() to keep it on the CPU")
        node: DataNode = _maker("copy")(self, device="gpu")
        return node

    # -- DALI's arithmetic operators: each records one operator (see the module's text) --
    def __add__(self, other: Any) -> Any: return binary("add", self, other)
    def __radd__(self, other: Any) -> Any: return binary("add", other, self)
    def __sub__(self, other: Any) -> Any: return binary("sub", self, other)
    def __rsub__(self, other: Any) -> Any: return binary("sub", other, self)
    def __mul__(self, other: Any) -> Any: return binary("mul", self, other)
    def __rmul__(self, other: Any) -> Any: return binary("mul", other, self)
    def __truediv__(self, other: Any) -> Any: return binary("fdiv", self, other)
    def __rtruediv__(self, other: Any) -> Any: return binary("fdiv", other, self)
    def __floordiv__(self, other: Any) -> Any: return binary("div", self, other)
    def __rfloordiv__(self, other: Any) -> Any: return binary("div", other, self)
    def __mod__(self, other: Any) -> Any: return binary("mod", self, other)
    def __rmod__(self, other: Any) -> Any: return binary("mod", other, self)
    def __pow__(self, other: Any) -> Any: return binary("pow", self, other)
    def __rpow__(self, other: Any) -> Any: return binary("pow", other, self)
    def __and__(self, other: Any) -> Any: return binary("bitand", self, other)
    def __rand__(self, other: Any) -> Any: return binary("bitand", other, self)
    def __or__(self, other: Any) -> Any: return binary("bitor", self, other)
    def __ror__(self, other: Any) -> Any: return binary("bitor", other, self)
    def __xor__(self, other: Any) -> Any: return binary("bitxor", self, other)
    def __rxor__(self, other: Any) -> Any: return binary("bitxor", other, self)
    def __eq__(self, other: object) -> Any: return binary("eq", self, other)
    def __ne__(self, other: object) -> Any: return binary("neq", self, other)
    def __lt__(self, other: Any) -> Any: return binary("lt", self, other)
    def __le__(self, other: Any) -> Any: return binary("leq", self, other)
    def __gt__(self, other: Any) -> Any: return binary("gt", self, other)
    def __ge__(self, other: Any) -> Any: return binary("geq", self, other)
    def __neg__(self) -> Any: return unary("minus", self)
    def __pos__(self) -> DataNode: return self
    def __abs__(self) -> Any: return unary("abs", self)
    def __hash__(self) -> int: return hash((self.op, self.output, id(self.builder)))
    __array_ufunc__ = None  # ``array * node``: a TypeError, not an array of nodes


class GraphBuilder:
    def __init__(self, device_id: int | None = None) -> None:
        self.ops: list[pipeline_pb2.OpSpec] = []
        #: The pipeline's GPU (None: a CPU-only pipeline, as DALI's ``device_id=None``).
        self.device_id = device_id

    def add(self, op: pipeline_pb2.OpSpec) -> int:
        self.ops.append(op)
        return len(self.ops) - 1


def current_builder(op_type: str) -> GraphBuilder:
    builder = _current.get()
    if builder is None:
        raise InvalidArgument(
            f"fn.{op_type} was called outside a @pipeline_def function: operators only "
            "describe a graph while a pipeline definition runs"
        )
    return builder


@contextmanager
def building(device_id: int | None = None) -> Iterator[GraphBuilder]:
    builder = GraphBuilder(device_id)
    token = _current.set(builder)
    try:
        yield builder
    finally:
        _current.reset(token)


def make_op(op_type: str) -> Callable[..., Any]:
    schema = schema_of(op_type)

    def op(*inputs: Any, device: str | None = None, name: str = "", **kwargs: Any) -> Any:
        builder = current_builder(op_type)
        extra = len(schema.input_args)
        counts = range(schema.num_inputs, schema.input_counts[-1] + extra + 1)
        if len(inputs) not in counts:
            takes = schema.inputs_text() if not extra else f"{counts[0]} to {counts[-1]}"
            raise SpecError(op_type, None, f"takes {takes} positional input(s), "
                            f"got {len(inputs)}")
        if extra:  # DALI's optional inputs that are argument inputs (warp_affine's matrix)
            for arg_name, node in zip(schema.input_args, inputs[schema.num_inputs:],
                                      strict=False):
                if arg_name in kwargs:
                    raise SpecError(op_type, arg_name, "given both as a positional input and "
                                    "by name")
                kwargs[arg_name] = node
            inputs = inputs[:schema.num_inputs]
        if device is None:  # DALI's rule: on the GPU where an input is
            fed_gpu = any(isinstance(node, DataNode) and node.builder is builder
                          and node.device == "gpu" for node in inputs)
            device = "gpu" if fed_gpu else "cpu"
            if device not in schema.devices:
                raise SpecError(op_type, "device", "its input is on the GPU (after .gpu() or "
                                "a 'mixed' decoder), and it runs on the CPU only: call it "
                                "before the transfer to the GPU")
        if device not in schema.devices:
            raise SpecError(op_type, "device", f"got {device!r}, expected one of "
                            + ", ".join(repr(d) for d in schema.devices))
        spec = pipeline_pb2.OpSpec(type=op_type, name=name, device=device,
                                   num_outputs=len(schema.outputs))
        for i, node in enumerate(inputs):
            if not isinstance(node, DataNode) or node.builder is not builder:
                raise SpecError(op_type, None, f"input {i} is {node!r}, expected the output "
                                "of another operator of this pipeline")
            spec.inputs.append(node.ref())
        for key, value in kwargs.items():
            if isinstance(value, DataNode):
                arg = schema.args.get(key)
                if arg is None:
                    encode_arg(op_type, key, value)  # raises: unknown argument
                elif not arg.tensor:
                    raise SpecError(op_type, key, "takes a constant, not an operator output")
                spec.arg_inputs[key].CopyFrom(value.ref())
            elif value is not None:
                spec.args[key].CopyFrom(encode_arg(op_type, key, value))
        spec.num_outputs = num_outputs(spec)
        if schema.outputs_from and not spec.num_outputs:
            raise SpecError(op_type, schema.outputs_from, "needs at least one entry (one per "
                            "output)")
        index = builder.add(spec)
        nodes = [DataNode(index, i, builder) for i in range(spec.num_outputs)]
        return nodes[0] if len(nodes) == 1 else tuple(nodes)

    op.__name__ = op_type.rsplit(".", 1)[-1]
    op.__qualname__ = f"fn.{op_type}"
    op.__doc__ = f"Operator ``fn.{op_type}``: arguments {sorted(schema.args)}."
    return op


@functools.cache
def _maker(op_type: str) -> Callable[..., Any]:
    return make_op(op_type)


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
        return _maker("math.binary")(left, right, op=op)
    node, other, reverse = (left, right, False) if isinstance(left, DataNode) else \
        (right, left, True)
    if not isinstance(node, DataNode):
        return NotImplemented
    given = constant(other)
    if given is None:
        return NotImplemented
    value, constant_type = given
    return _maker("math.scalar")(node, op=op, value=value, constant_type=constant_type,
                                reverse=reverse)


def unary(op: str, operand: Any) -> Any:
    if not isinstance(operand, DataNode):
        raise SpecError("math.unary", None, f"fn.math.{op}: got {operand!r}, expected the "
                        "output of another operator")
    return _maker("math.unary")(operand, op=op)
