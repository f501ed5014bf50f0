"""``copy``: the input as it is, on the CPU a new array, on ``device="gpu"`` the transfer of
a batch to the pipeline's GPU (what DALI's ``DataNode.gpu()`` records), its outputs CuPy
arrays there for the GPU operators it feeds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from conveyor.errors import DeviceUnavailable
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.probes.inputs import image
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.registry import (
    BATCH,
    BatchOp,
    OpContext,
    SampleBatch,
    SampleOp,
    register,
)


def _layout(ctx: OpContext) -> str:
    return (ctx.input_layouts or ("",))[0]


@register("copy")
def build_copy(ctx: OpContext) -> SampleOp:
    def run(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        return (np.array(inputs[0], copy=True, order="C"),)

    return SampleOp(fn=run, layouts=(_layout(ctx),))


@register("copy", per=BATCH, devices=("gpu",))
def build_copy_to_gpu(ctx: OpContext) -> BatchOp:
    count = cuda_device_count()
    if count == 0:
        raise DeviceUnavailable("copy: the transfer to the GPU (data.gpu(), or device='gpu') "
                                "needs a CUDA device and CuPy where the pipeline runs, and "
                                "there is none: run the pipeline on a machine or server with "
                                "a GPU, or leave out .gpu() to keep it on the CPU")
    if ctx.device_id >= count:
        raise DeviceUnavailable(f"copy: device_id {ctx.device_id} is not among the "
                                f"{count} CUDA devices where the pipeline runs; give one of "
                                f"0..{count - 1}")
    from conveyor_server.engine.ops.cuda import launch

    device_id = ctx.device_id if ctx.device_id >= 0 else launch.current_device()

    def run(inputs: Sequence[SampleBatch],
            targs: Mapping[str, SampleBatch]) -> tuple[SampleBatch, ...]:
        return (launch.to_device(inputs[0], device_id),)

    return BatchOp(fn=run, layouts=(_layout(ctx),), device="gpu")


@op_probe("copy")
def _copy(variant: str) -> list[Case]:
    return [Case({}, [((image(5, 7, 3),), {}), ((image(2, 3, 1, "float32"),), {})])]
