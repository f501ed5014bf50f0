"""Building and running one operator the way the engine does, and test images."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

import numpy as np
from PIL import Image

from conveyor.definition.schemas.registry import decode_args, encode_arg
from conveyor.v1 import pipeline_pb2
from conveyor_server.engine import catalog
from conveyor_server.engine.ops.registry import (
    OpContext,
    SampleOp,
    builder_for,
)


def op_context(op_type: str, *, device: str = "cpu", tensor_args: Iterable[str] = (),
               input_layouts: tuple[str, ...] = ("HWC",), **args: Any) -> OpContext:
    """An operator's context as the engine makes it: constants encoded, then decoded with
    defaults; ``tensor_args`` fed per sample."""
    spec = pipeline_pb2.OpSpec(type=op_type, device=device, num_outputs=1)
    for name, value in args.items():
        spec.args[name].CopyFrom(encode_arg(op_type, name, value))
    fed = tuple(tensor_args)
    for name in fed:
        spec.arg_inputs[name].CopyFrom(pipeline_pb2.OutputRef(op=0, output=0))
    return OpContext(op_type=op_type, index=1, args=decode_args(spec),
                     tensor_args=frozenset(fed), device=device, input_layouts=input_layouts)


def build(op_type: str, **kwargs: Any) -> SampleOp:
    """Build an operator's per-sample form as the engine does (``op_context``'s arguments)."""
    catalog.load()  # as the plan does: every operator registered, whichever test runs first
    op = builder_for(op_type)(op_context(op_type, **kwargs))
    assert isinstance(op, SampleOp)
    return op


def run(op: SampleOp, image: np.ndarray, **targs: Any) -> np.ndarray:
    """Run one sample through ``op``; check the output is one writable, contiguous array."""
    outs = op.fn([image], {k: np.asarray(v) for k, v in targs.items()})
    assert len(outs) == 1
    out = outs[0]
    assert out.flags.c_contiguous and out.flags.writeable
    assert not np.shares_memory(out, image), "the output must not alias the input"
    return out


def gradient(h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth, asymmetric RGB image (compresses well, so lossy codecs stay close)."""
    y, x = np.mgrid[0:h, 0:w]
    return np.dstack([x * 255 // (w - 1), y * 255 // (h - 1), (x + y) * 127 // (h + w)]).astype(
        np.uint8)


def noise(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def pil_bytes(image: np.ndarray | Image.Image, fmt: str, **kw: Any) -> np.ndarray:
    pil = image if isinstance(image, Image.Image) else Image.fromarray(image.squeeze())
    buf = io.BytesIO()
    pil.save(buf, fmt, **kw)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int32) - b.astype(np.int32)).mean())


