"""``python_function``: a named Python function run on each sample's inputs, or on the
batch's samples as lists (``batch_processing``), as DALI's operator.

The function is found as an external source's callable is (``engine/stages/
source_callables.py``): on a server only one its configuration registers, in process any.
Its outputs are copied into new, C-contiguous numpy arrays; a function that returns
another count of outputs, or something that is not an array, fails its sample naming the
operator. The function's name stands for its behaviour: keeping it pure is the user's part.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from conveyor.definition import external_source as names
from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.probes.probe_set import Targs as ProbeTargs
from conveyor_server.engine.ops.registry import (
    BATCH,
    BatchOp,
    OpContext,
    SampleBatch,
    SampleOp,
    register,
)


def _function(ctx: OpContext) -> Callable[..., Any]:
    """The function the spec names: through the server's registry where the engine gives
    one, else (in process) the callable ``fn`` was given, or the module's."""
    name = ctx.args["function"]
    if ctx.callables is not None:
        return ctx.callables(name, ctx.index, ctx.op_type, "function")
    where = f"ops[{ctx.index}].args.function"
    return names.remembered(name) or names.import_source(name, where)


def _layouts(ctx: OpContext) -> tuple[str, ...]:
    count = ctx.args["num_outputs"]
    given = ctx.args["output_layouts"]
    if given is None:
        return ("",) * count
    if len(given) == 1:
        return tuple(given) * count
    if len(given) != count:
        raise InvalidArgument(f"python_function: 'output_layouts' has {len(given)} entries "
                              f"for {count} outputs; give one, or one per output")
    return tuple(given)


def _outputs(op: str, result: Any, count: int) -> tuple[Any, ...]:
    if count == 0:
        return ()
    if count == 1:
        return (result,)
    if not isinstance(result, tuple | list) or len(result) != count:
        raise InvalidArgument(f"{op}: the function returned {type(result).__name__}, "
                              f"expected a tuple of {count} outputs (num_outputs={count})")
    return tuple(result)


def _array(op: str, value: Any) -> np.ndarray:
    try:
        return np.array(value, order="C", copy=True)
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"{op}: the function returned {type(value).__name__}, which "
                              f"is not an array: {error}") from None


@register("python_function")
def build_python_function(ctx: OpContext) -> SampleOp:
    function, count, op = _function(ctx), ctx.args["num_outputs"], ctx.op_type
    if ctx.args["batch_processing"]:
        raise InvalidArgument("python_function: batch_processing=True runs in the batch "
                              "form only")

    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        result = function(*[np.array(x) for x in inputs])  # copies: the inputs stay as they are
        return tuple(_array(op, v) for v in _outputs(op, result, count))

    return SampleOp(fn=run, layouts=_layouts(ctx))


@register("python_function", per=BATCH)
def build_python_function_batch(ctx: OpContext) -> BatchOp:
    function, count, op = _function(ctx), ctx.args["num_outputs"], ctx.op_type
    per_batch = ctx.args["batch_processing"]

    def run(inputs: Sequence[SampleBatch], targs: Any) -> tuple[SampleBatch, ...]:
        batches = [[np.array(x) for x in batch] for batch in inputs]
        if not per_batch:
            size = len(batches[0]) if batches else 0
            results = [_outputs(op, function(*[b[i] for b in batches]), count)
                       for i in range(size)]
            return tuple([_array(op, r[k]) for r in results] for k in range(count))
        result = _outputs(op, function(*batches), count)
        out = []
        for value in result:
            if not isinstance(value, list | tuple):
                raise InvalidArgument(f"{op}: with batch_processing=True the function "
                                      "returns a list of samples per output")
            out.append([_array(op, v) for v in value])
        return tuple(out)

    return BatchOp(fn=run, layouts=_layouts(ctx))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------


def probe_function(a: Any, b: Any = None) -> Any:
    """The probe's pure function: a mirrored, widened copy of ``a`` (and the sum of ``a``
    and ``b`` where two inputs come)."""
    mirrored = np.asarray(a)[:, ::-1].astype(np.int32) * 3 - 7
    if b is None:
        return mirrored
    return mirrored, np.asarray(a, np.int32) + np.asarray(b, np.int32)


_PROBE = f"{__name__}:probe_function"


@op_probe("python_function")
def _python_function(variant: str) -> list[Case]:
    one: list[tuple[Sequence[np.ndarray], ProbeTargs]] = [((image(4, 5, 3),), {}),
                                                          ((image(2, 6, 1),), {})]
    two: list[tuple[Sequence[np.ndarray], ProbeTargs]] = [
        ((image(3, 4, 3), image(3, 4, 3, salt=1)), {})]
    return [Case({"function": _PROBE}, one),
            Case({"function": _PROBE, "num_outputs": 2, "output_layouts": ["HWC"]}, two,
                 input_layouts=("HWC", "HWC"))]
