"""The decoders on ``device="mixed"``: a whole batch decoded into GPU memory at once.

``decoders.image``, ``decoders.image_random_crop`` and ``decoders.image_crop`` are per-batch
operators here (``nvimgcodec_batch.py``): their output is a GPU batch, a list of CuPy arrays
(HWC uint8, one per sample, on the pipeline's ``device_id``), which the CUDA operators take
as it is and the engine copies out of the GPU through its pinned ring
(``engine/gpu_staging.py``). The windows are drawn by the same functions as on the CPU
(``random_window``, ``CropWindow.anchor``) from the same keyed draws, so a mixed pipeline
crops where the CPU one does; the pixels inside differ by the decoders' IDCTs.

``image_op``, ``image_random_crop_op`` and ``image_crop_op`` build the operators over any
``BatchDecoder``: the registered builders give them the GPU's; tests give them one on
nvImageCodec's CPU backend, and run the same batched path in a pipeline without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from conveyor.errors import DeviceUnavailable
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops.args import crop_window
from conveyor_server.engine.ops.decode.nvimgcodec_batch import BatchDecoder, WindowFn, gpu_target
from conveyor_server.engine.ops.geometry.random_resized_crop import params_of, sample_index
from conveyor_server.engine.ops.geometry.random_window import (
    Window,
    random_window,
    window_draws_batch,
)
from conveyor_server.engine.ops.registry import BATCH, SAMPLE_INDEX, BatchOp, OpContext, register

MIXED = ("mixed", "gpu")

Batch = Sequence[Any]


def batch_decoder(ctx: OpContext) -> BatchDecoder:
    """The pipeline's GPU decoder for ``ctx``, or ``DeviceUnavailable`` why there is none."""
    if cuda_device_count() == 0:
        raise DeviceUnavailable(f"{ctx.op_type}: device={ctx.device!r} needs a CUDA device, and "
                                "this machine has none (use device='cpu')")
    if ctx.device_id >= cuda_device_count():
        raise DeviceUnavailable(f"{ctx.op_type}: device_id={ctx.device_id}: this machine has "
                                f"{cuda_device_count()} CUDA device(s)")
    args = ctx.args
    # No device named (-1): device 0, as the operators, the copies out and the GPU path.
    target = gpu_target(max(ctx.device_id, 0), float(args["hw_decoder_load"]), ctx.batch_size,
                        int(args["preallocate_width_hint"]), int(args["preallocate_height_hint"]))
    return BatchDecoder(ctx.op_type, ctx.device, ctx.args["output_type"], target, ctx.limits)


@register("decoders.image", per=BATCH, devices=MIXED)
def build_image_mixed(ctx: OpContext) -> BatchOp:
    return image_op(batch_decoder(ctx))


def image_op(decoder: BatchDecoder) -> BatchOp:
    def decode(inputs: Sequence[Batch], targs: Mapping[str, Batch]) -> tuple[Batch, ...]:
        return (decoder.decode(inputs[0]),)

    return BatchOp(fn=decode, layouts=("HWC",), device=decoder.device)


def random_windows(ctx: OpContext, targs: Mapping[str, Batch]) -> WindowFn:
    """Each sample's random window, drawn as ``decoders.image_random_crop`` on the CPU."""
    params = params_of(ctx)
    indices = np.array([sample_index({SAMPLE_INDEX: i}) for i in targs[SAMPLE_INDEX]],
                       dtype=np.uint64)
    draws = window_draws_batch(ctx.seed, ctx.index, indices, params)  # the batch's at once

    def window(i: int, height: int, width: int) -> Window:
        return random_window(height, width, params, draws[i])

    return window


@register("decoders.image_random_crop", per=BATCH, devices=("mixed",))
def build_image_random_crop_mixed(ctx: OpContext) -> BatchOp:
    params_of(ctx)  # bad window arguments are refused when the pipeline is built
    return image_random_crop_op(ctx, batch_decoder(ctx))


def image_random_crop_op(ctx: OpContext, decoder: BatchDecoder) -> BatchOp:
    def decode(inputs: Sequence[Batch], targs: Mapping[str, Batch]) -> tuple[Batch, ...]:
        return (decoder.decode(inputs[0], random_windows(ctx, targs)),)

    return BatchOp(fn=decode, layouts=("HWC",), device=decoder.device, keyed=True)


def crop_windows(ctx: OpContext, targs: Mapping[str, Batch]) -> WindowFn:
    """Each sample's window, placed as ``decoders.image_crop`` places it on the CPU; a
    window that does not fit is refused as there."""
    spec = crop_window(ctx, required=True)
    assert spec is not None
    names = list(targs)

    def window(i: int, height: int, width: int) -> Window:
        mine = {name: targs[name][i] for name in names}
        y, x = spec.anchor((height, width), mine)
        ch, cw = spec.size
        if y < 0 or x < 0 or y + ch > height or x + cw > width:
            raise spec.out_of_bounds((height, width), (y, x))
        return Window(y, x, ch, cw)

    return window


@register("decoders.image_crop", per=BATCH, devices=("mixed",))
def build_image_crop_mixed(ctx: OpContext) -> BatchOp:
    crop_window(ctx, required=True)  # bad window arguments are refused at build
    return image_crop_op(ctx, batch_decoder(ctx))


def image_crop_op(ctx: OpContext, decoder: BatchDecoder) -> BatchOp:
    def decode(inputs: Sequence[Batch], targs: Mapping[str, Batch]) -> tuple[Batch, ...]:
        return (decoder.decode(inputs[0], crop_windows(ctx, targs)),)

    return BatchOp(fn=decode, layouts=("HWC",), device=decoder.device)
