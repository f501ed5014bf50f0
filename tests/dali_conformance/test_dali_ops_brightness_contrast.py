"""DALI's CPU tests of ``fn.brightness`` and ``fn.contrast``
(``dali/test/python/operator_1/test_brightness_contrast.py`` in NVIDIA/DALI), ported:
the same cases (``test_equivalence``: ``brightness``/``contrast`` against
``brightness_contrast`` with the same random arguments; ``test_vs_ref``: against DALI's
reference formula), each input and output type of the three, HWC and FHWC inputs, a
constant or random ``contrast_center``, written anew against ``conveyor.dali``.

Changed, with the reason: the ``has_3_dims`` cases (FHWC video) assert Conveyor's refusal
(INVALID_ARGUMENT, "expected an HWC image ...", naming the operator and the sample): its
colour operators take images, not sequences (19 of 36 ``test_equivalence`` cases and 11 of
18 ``test_vs_ref`` cases). The data are generated per iteration (DALI's
``RandomDataIterator`` over DALI_extra-free random arrays, as here), in batches of 4 for 2
iterations (DALI: 32 for 16 and 8), to keep the run short; the reference is computed from
the pipeline's own outputs (its inputs and random arguments) instead of a
``python_function`` node. Not ported: the ``"gpu"`` half of both tests (GPU only), and
``test_video`` (DALI's video suite helper; FHWC inputs are covered by the ``has_3_dims``
cases).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn, types
from conveyor.dali.pipeline import pipeline_def
from conveyor.errors import InvalidArgument
from tests.dali_conformance.dali_test_utils import compare_pipelines

BATCH = 4
ITERS = 2
NP_TYPES = {types.FLOAT: np.float32, types.INT16: np.int16, types.UINT8: np.uint8}


def max_range(dtype: Any) -> float:
    return 1.0 if np.issubdtype(dtype, np.floating) else float(np.iinfo(dtype).max)


def convert_sat(data: np.ndarray, out_dtype: Any) -> np.ndarray:
    if np.issubdtype(out_dtype, np.floating):
        return data.astype(out_dtype)
    info = np.iinfo(out_dtype)
    return np.round(np.clip(data, info.min, info.max)).astype(out_dtype)


def bricon_ref(x: np.ndarray, brightness: float, shift: float, contrast: float, center: float,
               out_dtype: Any) -> np.ndarray:
    out = shift * max_range(out_dtype) + brightness * (center + contrast * (x - center))
    return convert_sat(out, out_dtype)


def random_data(dtype: Any, shape: tuple[int, ...]) -> Any:
    """A source of random batches of ``shape`` (a pure function of the iteration)."""
    def source(info: types.BatchInfo) -> list[np.ndarray]:
        rng = np.random.default_rng(1000 * info.epoch_idx + info.iteration)
        if np.issubdtype(dtype, np.floating):
            return [rng.random(shape, dtype=np.float32) for _ in range(BATCH)]
        info_t = np.iinfo(dtype)
        return [rng.integers(info_t.min, info_t.max, shape, endpoint=True).astype(dtype)
                for _ in range(BATCH)]
    return source


def contrast_param() -> Any:
    return fn.random.uniform(range=[-1.0, 1.0], seed=123)


def contrast_center_param() -> Any:
    return fn.random.uniform(range=[0.0, 1.0], seed=123)


def brightness_params() -> tuple[Any, Any]:
    return (fn.random.uniform(range=[0.0, 5.0], seed=123),
            fn.random.uniform(range=[-1.0, 1.0], seed=123))


@pipeline_def(num_threads=4, device_id=0, seed=1234)
def bri_pipe(source: Any, dtype: Any, layout: str) -> Any:
    brightness, shift = brightness_params()
    inp = fn.external_source(source=source, batch_info=True, layout=layout)
    return fn.brightness(inp, brightness=brightness, brightness_shift=shift, dtype=dtype)


@pipeline_def(num_threads=4, device_id=0, seed=1234)
def con_pipe(source: Any, center: Any, dtype: Any, layout: str) -> Any:
    contrast = contrast_param()
    if center is None:
        center = contrast_center_param()
    inp = fn.external_source(source=source, batch_info=True, layout=layout)
    return fn.contrast(inp, contrast=contrast, contrast_center=center, dtype=dtype)


@pipeline_def(num_threads=4, device_id=0, seed=1234)
def bricon_pipe(source: Any, center: Any, bri: bool, con: bool, dtype: Any, layout: str) -> Any:
    args: dict[str, Any] = {}
    if bri:
        args["brightness"], args["brightness_shift"] = brightness_params()
    if con:
        args["contrast"] = contrast_param()
    random_center = center is None
    if random_center:
        center = contrast_center_param()
    if con:
        args["contrast_center"] = center
    inp = fn.external_source(source=source, batch_info=True, layout=layout)
    out = fn.brightness_contrast(inp, dtype=dtype, **args)
    if not (bri and con):
        return out
    # The inputs and random arguments too, for the reference.
    return (out, inp, args["brightness"], args["brightness_shift"], args["contrast"],
            *([center] if random_center else []))


def _shape(has_3_dims: bool) -> tuple[tuple[int, ...], str]:
    return ((random.randint(2, 5), 128, 32, 3), "FHWC") if has_3_dims else ((128, 32, 3), "HWC")


def _cases(with_op: bool) -> list[tuple[Any, ...]]:
    rng = random.Random(42)
    cases = []
    for inp in (types.FLOAT, types.INT16, types.UINT8):
        for out in (types.FLOAT, types.INT16, types.UINT8):
            for op in (("brightness", "contrast") if with_op else (None,)):
                for has_3_dims, const_center in rng.sample(
                        [(b1, b2) for b1 in (True, False) for b2 in (True, False)], 2):
                    cases.append((inp, out, op, has_3_dims, const_center) if with_op
                                 else (inp, out, has_3_dims, const_center))
    return cases


@pytest.mark.parametrize(("inp", "out", "op", "has_3_dims", "const_center"), _cases(True))
def test_equivalence(inp: Any, out: Any, op: str, has_3_dims: bool, const_center: bool) -> None:
    shape, layout = _shape(has_3_dims)
    dtype = NP_TYPES[inp]
    center = 0.4 * max_range(dtype) if const_center else None
    source = random_data(dtype, shape)
    if op == "brightness":
        pipe1 = bri_pipe(source, out, layout, batch_size=BATCH)
    else:
        pipe1 = con_pipe(source, center, out, layout, batch_size=BATCH)
    pipe2 = bricon_pipe(source, center, op == "brightness", op == "contrast", out, layout,
                        batch_size=BATCH)
    eps = 1e-4 if out == types.FLOAT else 1
    if has_3_dims:
        for pipe in (pipe1, pipe2):
            with pytest.raises(InvalidArgument, match="expected an HWC image"):
                pipe.run()
        return
    compare_pipelines(pipe1, pipe2, BATCH, ITERS, eps=eps)


@pytest.mark.parametrize(("inp", "out", "has_3_dims", "const_center"), _cases(False))
def test_vs_ref(inp: Any, out: Any, has_3_dims: bool, const_center: bool) -> None:
    shape, layout = _shape(has_3_dims)
    dtype = NP_TYPES[inp]
    center = 0.4 * max_range(dtype) if const_center else None
    pipe = bricon_pipe(random_data(dtype, shape), center, True, True, out, layout,
                       batch_size=BATCH)
    eps = 1e-4 if out == types.FLOAT else 1
    if has_3_dims:
        with pytest.raises(InvalidArgument, match="expected an HWC image"):
            pipe.run()
        return
    for _ in range(ITERS):
        got, x, brightness, shift, contrast, *rest = pipe.run()
        for i in range(BATCH):
            c = float(np.asarray(rest[0].at(i))) if rest else float(center or 0.0)
            ref = bricon_ref(np.asarray(x.at(i)).astype(np.float64),
                             float(np.asarray(brightness.at(i))),
                             float(np.asarray(shift.at(i))),
                             float(np.asarray(contrast.at(i))), c, NP_TYPES[out])
            sample = np.asarray(got.at(i))
            assert sample.dtype == ref.dtype and sample.shape == ref.shape
            # DALI's allowance is absolute; float32 outputs of int16 inputs carry the float32
            # rounding of terms of up to 6e4 times the brightness (its reference runs in
            # float64), so the allowance here grows with them: one float32 unit of that.
            bright = float(np.asarray(brightness.at(i)))
            tol = eps + (2e-7 * max_range(dtype) * max(bright, 1.0) if out == types.FLOAT
                         else 0.0)
            assert np.allclose(sample.astype(np.float64), ref.astype(np.float64), rtol=0,
                               atol=tol), (i, np.max(np.abs(sample - ref)))
