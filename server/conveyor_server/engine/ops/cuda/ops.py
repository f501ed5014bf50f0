"""The GPU operators: each planner of ``planners.py`` as a per-batch operator on
``device="gpu"``. A planner registers itself with ``gpu_planner(op_type)``, which records
it (with whether its draws are keyed and its output's layout) and registers the GPU
operator for that device (``register(..., devices=("gpu",))``).

The batch's samples go to the pipeline's device first when they are host arrays (the
output of a CPU operator); the outputs are CuPy arrays there, HWC (CHW for
crop_mirror_normalize with ``output_layout="CHW"``), one per sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conveyor.errors import DeviceUnavailable
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops.args import Targs
from conveyor_server.engine.ops.cuda import plans
from conveyor_server.engine.ops.registry import (
    BATCH,
    BatchOp,
    OpContext,
    SampleBatch,
    register,
)

#: A planner made for one configured operator: a batch (arrays of any device: only shapes
#: and types are read) and each sample's ``targs`` to a plan (``plans.py``).
Planner = Callable[[Sequence[Any], Sequence[Targs]], plans.Plan]


def hwc_layout(ctx: OpContext) -> str:
    return "HWC"


@dataclass(frozen=True)
class GpuPlanner:
    """An operator's GPU form: its planner, and what the operator declares around it."""

    make: Callable[[OpContext], Planner]
    #: Draws keyed random numbers (gets the samples' global indices).
    keyed: bool = False
    #: The output's layout for a configured operator.
    layout: Callable[[OpContext], str] = hwc_layout


#: The GPU planner of each operator with a GPU form, as registered by ``gpu_planner``.
PLANNERS: dict[str, GpuPlanner] = {}


def gpu_planner(op_type: str, *, keyed: bool = False,
                layout: Callable[[OpContext], str] = hwc_layout,
                ) -> Callable[[Callable[[OpContext], Planner]], Callable[[OpContext], Planner]]:
    """Register ``op_type``'s planner, and its GPU operator (per batch, ``device="gpu"``)."""
    def add(make: Callable[[OpContext], Planner]) -> Callable[[OpContext], Planner]:
        if op_type in PLANNERS:
            raise ValueError(f"operator {op_type!r} already has a GPU planner")
        PLANNERS[op_type] = GpuPlanner(make, keyed, layout)
        register(op_type, per=BATCH, devices=("gpu",))(build_gpu_op)
        return make
    return add


def require_device(ctx: OpContext) -> None:
    """``DeviceUnavailable`` unless CuPy and the CUDA device ``ctx.device_id`` are here."""
    count = cuda_device_count()
    if count == 0:
        raise DeviceUnavailable(f"{ctx.op_type}: device='gpu' needs a CUDA device and CuPy, and "
                                "this machine has neither a device nor CuPy with a driver: "
                                "run the pipeline where a GPU is, or on the CPU "
                                "(device='cpu', and no .gpu() transfers)")
    if ctx.device_id >= count:  # -1: the current device
        raise DeviceUnavailable(f"{ctx.op_type}: device_id {ctx.device_id} is not among this "
                                f"server's {count} CUDA devices")


def build_gpu_op(ctx: OpContext) -> BatchOp:
    declared = PLANNERS[ctx.op_type]
    plan_of = declared.make(ctx)  # the spec's errors first, on any machine
    require_device(ctx)
    from conveyor_server.engine.ops.cuda import launch

    # No device named (-1): device 0, as the decoder, the copies out and the GPU path take it.
    device_id = max(ctx.device_id, 0)

    def run(inputs: Sequence[SampleBatch],
            targs: Mapping[str, SampleBatch]) -> tuple[SampleBatch, ...]:
        images = launch.to_device(inputs[0], device_id)
        per_sample = [{k: v[i] for k, v in targs.items()} for i in range(len(images))]
        plan = plan_of(images, per_sample)
        return (launch.run(plan, images, device_id),)

    return BatchOp(fn=run, layouts=(declared.layout(ctx),), device="gpu",
                   keyed=declared.keyed)
