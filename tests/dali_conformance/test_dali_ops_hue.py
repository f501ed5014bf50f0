"""DALI's CPU tests of ``fn.hue``, ported: ``test_color_twist_default_dtype`` (its only
operator is ``fn.hue``) and the reference of ``test_color_twist`` (the pixel to YIQ, the
(I, Q) plane turned by the hue angle, and back) applied to ``fn.hue`` alone, for each
input and output type of DALI's test (``dali/test/python/operator_1/test_color_twist.py``
in NVIDIA/DALI), written anew against ``conveyor.dali``.

Changed, with the reason: DALI builds its constant input with ``types.Constant``, which
Conveyor does not have (refused naming it: asserted once); here an external source gives
the same 10x10x3 array of 255. ``fn.hue`` of int32 (one of the default-dtype test's four
types) asserts Conveyor's refusal: its colour operators take uint8, int16, uint16, float16
and float32. The reference cases run in batches of 4 for 2 iterations (DALI: 32 for 8), FHWC
(``has_3_dims``) inputs assert the refusal of sequences. Not ported: the ``"gpu"`` cases
(GPU only) and ``test_video`` (DALI's video suite helper).
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn, types
from conveyor.dali.pipeline import pipeline_def
from conveyor.errors import InvalidArgument, NotSupported

NP_TYPES: dict[Any, Any] = {types.FLOAT: np.float32, types.INT16: np.int16, types.UINT8: np.uint8,
            types.INT32: np.int32}
BATCH = 4
ITERS = 2

rgb2yiq = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
yiq2rgb = np.linalg.inv(rgb2yiq)


def convert_sat(data: np.ndarray, out_dtype: Any) -> np.ndarray:
    if np.issubdtype(out_dtype, np.floating):
        return data.astype(out_dtype)
    info = np.iinfo(out_dtype)
    return np.round(np.clip(data, info.min, info.max)).astype(out_dtype)


def ref_hue(img: np.ndarray, hue: float, out_dtype: Any) -> np.ndarray:
    angle = math.radians(hue)
    s, c = math.sin(angle), math.cos(angle)
    hmat = np.array([[1, 0, 0], [0, c, s], [0, -s, c]])
    m = yiq2rgb @ hmat @ rgb2yiq
    pixels = img.reshape(-1, 3).astype(np.float64) @ m.T
    return convert_sat(pixels.reshape(img.shape), out_dtype)


def test_types_constant_is_refused_naming_it() -> None:
    with pytest.raises(NotSupported, match="types.Constant is not supported"):
        types.Constant(255, shape=(10, 10, 3), dtype=types.UINT8)


@pytest.mark.parametrize("dtype", [types.FLOAT, types.INT32, types.INT16, types.UINT8])
def test_color_twist_default_dtype(dtype: Any) -> None:
    np_type = NP_TYPES[dtype]

    @pipeline_def(batch_size=1, num_threads=3, device_id=0)
    def pipeline() -> Any:
        data = fn.external_source(lambda iteration: [np.full((10, 10, 3), 255, np_type)],
                                  batch=True,
                                  layout="HWC")
        return fn.hue(data)

    pipe = pipeline()
    pipe.build()
    if dtype == types.INT32:
        with pytest.raises(InvalidArgument, match="int32"):
            pipe.run()
        return
    (data,) = pipe.run()
    assert np.asarray(data.at(0)).dtype == np_type


def _cases() -> list[tuple[Any, Any, bool]]:
    rng = random.Random(7)
    return [(inp, out, rng.choice([False, True]))
            for inp in (types.FLOAT, types.INT16, types.UINT8)
            for out in (types.FLOAT, types.INT16, types.UINT8)]


@pytest.mark.parametrize(("inp", "out", "has_3_dims"), _cases())
def test_hue_vs_ref(inp: Any, out: Any, has_3_dims: bool) -> None:
    in_type, out_type = NP_TYPES[inp], NP_TYPES[out]
    shape = (3, 128, 32, 3) if has_3_dims else (128, 32, 3)
    is_float = np.issubdtype(in_type, np.floating)

    def source(info: types.BatchInfo) -> list[np.ndarray]:
        rng = np.random.default_rng(info.iteration)
        if is_float:
            # DALI scales float inputs to 0..255 where the output is an integer type.
            scale = 1.0 if np.issubdtype(out_type, np.floating) else 255.0
            return [(rng.random(shape) * scale).astype(np.float32) for _ in range(BATCH)]
        top = np.iinfo(in_type).max
        return [rng.integers(0, top, shape, endpoint=True).astype(in_type)
                for _ in range(BATCH)]

    @pipeline_def(batch_size=BATCH, num_threads=4, device_id=0, seed=2139)
    def pipe() -> Any:
        imgs = fn.external_source(source=source, batch_info=True,
                                  layout="FHWC" if has_3_dims else "HWC")
        hue = fn.random.uniform(range=[-20, 20])
        return imgs, fn.hue(imgs, hue=hue, dtype=out if out != inp else None), hue

    p = pipe()
    p.build()
    if has_3_dims:
        with pytest.raises(InvalidArgument, match="expected an HWC image"):
            p.run()
        return
    rel, tol = (1e-3, 1e-3) if np.issubdtype(out_type, np.floating) else (1 / 512, 1)
    for _ in range(ITERS):
        x, got, hue = p.run()
        for i in range(BATCH):
            ref = ref_hue(np.asarray(x.at(i)), float(np.asarray(hue.at(i))), out_type)
            sample = np.asarray(got.at(i))
            assert sample.dtype == out_type
            assert np.allclose(sample, ref, rel, tol), f"sample {i}"
