"""``copy``: the input as it is, a new array. Its GPU form (a planner without a kernel) is
the transfer of a batch to the pipeline's GPU that DALI's ``DataNode.gpu()`` records: the
samples, any shape and type, as CuPy arrays there for the GPU operators it feeds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from conveyor.errors import InvalidArgument
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.cuda.ops import Planner, gpu_planner
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register


def _layout(ctx: OpContext) -> str:
    return (ctx.input_layouts or ("",))[0]


@register("copy")
def build_copy(ctx: OpContext) -> SampleOp:
    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        return (np.array(inputs[0], copy=True, order="C"),)

    return SampleOp(fn=run, layouts=(_layout(ctx),))


@gpu_planner("copy", layout=_layout)
def copy_planner(ctx: OpContext) -> Planner:
    def plan(images: Sequence[Any], targs: Sequence[Targs]) -> plans.Plan:
        dtypes = {np.dtype(image.dtype) for image in images}
        if len(dtypes) > 1:
            raise InvalidArgument(f"copy: on device='gpu' the samples of a batch share a type, "
                                  f"got {sorted(str(t) for t in dtypes)}")
        return plans.TransferPlan([tuple(image.shape) for image in images],
                                  dtypes.pop() if dtypes else np.dtype(np.uint8))

    return plan


@op_probe("copy")
def _copy(variant: str) -> list[Case]:
    return [Case({}, [((image(5, 7, 3),), {}), ((image(2, 3, 3, salt=1),), {})]),
            Case({}, [((image(2, 3, 1, "float32"),), {})])]
