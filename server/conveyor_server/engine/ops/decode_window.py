"""Decoders that output a window of the image: ``decoders.image_random_crop`` (the random
window of ``random_resized_crop``) and ``decoders.image_crop`` (``crop``'s window).

Each is defined as decoding the whole image (``decode.decode_image``) and cropping it, and
gives exactly those bytes. A cheaper decode of the window alone is used only where it is
exact; OpenCV and simplejpeg, the CPU decoders here, offer no region decode, and their
reduced decodes (DCT scaling) give other pixels, so today every image is decoded whole and
cropped: the window is a copy of the decoded rows it covers. The window is drawn from the
decoded image's size, which is the header's (``image_header.py``) after EXIF orientation.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from conveyor_server.engine.ops.args import Targs, crop_image, crop_window
from conveyor_server.engine.ops.decode import decode_image
from conveyor_server.engine.ops.random_resized_crop import params_of, sample_index
from conveyor_server.engine.ops.random_window import random_window, window_draws
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register


@register("decoders.image_random_crop")
def build_image_random_crop(ctx: OpContext) -> SampleOp:
    output_type, limits = ctx.args["output_type"], ctx.limits
    params = params_of(ctx)

    def image_random_crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = decode_image(inputs[0], output_type, limits)
        draws = window_draws(ctx.seed, ctx.index, sample_index(targs), params)
        win = random_window(image.shape[0], image.shape[1], params, draws)
        return (np.ascontiguousarray(image[win.y:win.y + win.h, win.x:win.x + win.w]),)

    return SampleOp(fn=image_random_crop, layouts=("HWC",), keyed=True)


@register("decoders.image_crop")
def build_image_crop(ctx: OpContext) -> SampleOp:
    output_type, limits = ctx.args["output_type"], ctx.limits
    window = crop_window(ctx, required=True)
    assert window is not None

    def image_crop(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        image = decode_image(inputs[0], output_type, limits)
        # DALI's decoders.image_crop refuses a window that does not fit ("error").
        return (np.ascontiguousarray(crop_image(window, image, targs, "error", (0.0,))),)

    return SampleOp(fn=image_crop, layouts=("HWC",))
