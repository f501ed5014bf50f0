"""Operators, spelled as DALI's ``fn`` module: ``fn.readers.file``, ``fn.rotate``, ...

Each call records one operator in the pipeline being defined and returns its outputs as
``DataNode``s. Constant arguments are validated against ``conveyor.schema`` at once. Every
operator of ``conveyor.schema.SCHEMAS`` is here, made from its schema: ``rotate`` as
``fn.rotate``, ``readers.file`` as ``fn.readers.file`` (a namespace per prefix);
``external_source`` is wrapped to take a callable.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from conveyor import expressions
from conveyor import external_source as sources
from conveyor.errors import SpecError
from conveyor.pipeline_def import DataNode, current_builder
from conveyor.schema import SCHEMAS, encode_arg, num_outputs, schema_of
from conveyor.v1 import pipeline_pb2


def _make_op(op_type: str) -> Callable[..., Any]:
    schema = schema_of(op_type)

    def op(*inputs: Any, device: str = "cpu", name: str = "", **kwargs: Any) -> Any:
        builder = current_builder(op_type)
        if len(inputs) != schema.num_inputs:
            raise SpecError(op_type, None, f"takes {schema.num_inputs} positional input(s), "
                            f"got {len(inputs)}")
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


def _declared_ops() -> dict[str, Any]:
    """The top-level operators by name, and a namespace per prefix (``readers``); ``math``
    also holds DALI's ``fn.math`` functions (``conveyor.expressions``)."""
    made = {op_type: _make_op(op_type) for op_type in SCHEMAS}
    expressions.use_operators(made)
    top: dict[str, Any] = {}
    grouped: dict[str, dict[str, Callable[..., Any]]] = {"math": {}}
    for op_type, op in made.items():
        prefix, dot, name = op_type.rpartition(".")
        if dot:
            grouped.setdefault(prefix, {})[name] = op
        else:
            top[op_type] = op
    grouped["math"].update(expressions.math_functions())
    return {**top, **{prefix: SimpleNamespace(**ops) for prefix, ops in grouped.items()}}


_OPS = _declared_ops()
_external_source = _OPS.pop("external_source")


def __getattr__(name: str) -> Any:
    """``fn.rotate``, ``fn.readers``: the operators the schemas declare."""
    try:
        return _OPS[name]
    except KeyError:
        raise AttributeError(f"module 'conveyor.fn' has no operator {name!r} (known: "
                             f"{', '.join(sorted([*_OPS, 'external_source']))})") from None


def __dir__() -> list[str]:
    return sorted([*globals(), *_OPS])


def external_source(source: Any = None, num_outputs: int | None = None, **kwargs: Any) -> Any:
    """DALI's ``fn.external_source`` for a checkpointable source: ``source`` is a callable
    taking ``SampleInfo`` (``batch=False``) or ``BatchInfo`` / the iteration (``batch=True``),
    or its ``"module:function"`` name. A spec carries the name only: a server calls the
    callables its configuration lists; an in-process ``Pipeline`` calls the callable given
    here. With ``num_outputs`` the callable returns a tuple and so does this."""
    if source is None:
        raise SpecError("external_source", "source", "is required: a callable taking "
                        "SampleInfo or BatchInfo, or its 'module:function' name")
    if "cycle" in kwargs:
        raise SpecError("external_source", "cycle", "applies to iterables, which cannot be "
                        "checkpointed: give a callable that raises StopIteration instead")
    if isinstance(kwargs.get("ndim"), int) and not isinstance(kwargs["ndim"], bool):
        kwargs["ndim"] = [kwargs["ndim"]]  # one for every output, as dtype and layout
    if callable(source):  # in process it may be any callable (a lambda, a closure)
        name = sources.remember(source)
    else:
        name = source
        if isinstance(name, str):
            sources.check_name(name)
    out = _external_source(source=name, num_outputs=num_outputs or 0, **kwargs)
    if num_outputs:
        return out if isinstance(out, tuple) else (out,)
    return out
