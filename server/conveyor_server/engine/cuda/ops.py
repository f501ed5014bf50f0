"""The GPU operators: each planner of ``planners.py`` as a per-batch operator on
``device="gpu"``, registered for that device (``register(..., devices=("gpu",))``).

The batch's samples go to the pipeline's device first when they are host arrays (the
output of a CPU operator); the outputs are CuPy arrays there, HWC (CHW for
crop_mirror_normalize with ``output_layout="CHW"``), one per sample.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from conveyor.errors import DeviceUnavailable
from conveyor_server.engine.cuda import planners
from conveyor_server.engine.devices import cuda_device_count
from conveyor_server.engine.ops.registry import (
    BATCH,
    BatchOp,
    OpContext,
    SampleBatch,
    register,
)


def require_device(ctx: OpContext) -> None:
    """``DeviceUnavailable`` unless CuPy and the CUDA device ``ctx.device_id`` are here."""
    count = cuda_device_count()
    if count == 0:
        raise DeviceUnavailable(f"{ctx.op_type}: device='gpu' needs a CUDA device and CuPy, and "
                                "this server has neither a device nor CuPy with a driver "
                                "(use device='cpu')")
    if ctx.device_id >= count:  # -1: the current device
        raise DeviceUnavailable(f"{ctx.op_type}: device_id {ctx.device_id} is not among this "
                                f"server's {count} CUDA devices")


def build_gpu_op(ctx: OpContext) -> BatchOp:
    plan_of = planners.PLANNERS[ctx.op_type](ctx)  # the spec's errors first, on any machine
    require_device(ctx)
    from conveyor_server.engine.cuda import launch

    device_id = ctx.device_id if ctx.device_id >= 0 else launch.current_device()
    keyed = ctx.op_type == "random_resized_crop"

    def run(inputs: Sequence[SampleBatch],
            targs: Mapping[str, SampleBatch]) -> tuple[SampleBatch, ...]:
        images = launch.to_device(inputs[0], device_id)
        per_sample = [{k: v[i] for k, v in targs.items()} for i in range(len(images))]
        plan = plan_of(images, per_sample)
        return (launch.run(plan, images, device_id),)

    layout = "CHW" if ctx.op_type == "crop_mirror_normalize" and \
        ctx.args["output_layout"] == "CHW" else "HWC"
    if ctx.op_type == "cast":
        layout = ctx.input_layouts[0] if ctx.input_layouts else ""
    return BatchOp(fn=run, layouts=(layout,), device="gpu", keyed=keyed)


for _op_type in planners.PLANNERS:
    register(_op_type, per=BATCH, devices=("gpu",))(build_gpu_op)
