"""What identifies the engine: the libraries whose results the output bytes depend on."""

from __future__ import annotations

import functools

import cv2
import numpy as np

from conveyor.v1 import checkpoint_pb2
from conveyor_server import __version__
from conveyor_server.engine import keyed_random


@functools.cache
def engine_id(gpu_decoder: bool = False) -> checkpoint_pb2.EngineId:
    """The engine's identity; ``gpu_decoder`` when the pipeline decodes on the GPU, whose
    library then decides the decoded bytes."""
    from conveyor_server.engine.ops.decode import DECODER_ID

    decoder = DECODER_ID
    if gpu_decoder:
        from nvidia import nvimgcodec

        decoder = f"nvimgcodec {getattr(nvimgcodec, '__version__', 'unknown')}"
    return checkpoint_pb2.EngineId(
        conveyor_version=__version__,
        decoder=decoder,
        warp=f"opencv {cv2.__version__}; numpy {np.__version__}",
        key_schedule=keyed_random.KEY_SCHEDULE,
    )
