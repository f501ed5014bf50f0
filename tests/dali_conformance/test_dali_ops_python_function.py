"""DALI's CPU tests of ``fn.python_function`` (``dali/test/python/operator_2/
test_python_function.py`` in NVIDIA/DALI), ported: functions of one image checked against
calling them directly, against Conveyor's own ``flip`` and ``rotate``, two outputs, two
inputs with three outputs (per sample and ``batch_processing``), the errors (an invalid
function, input sets, a batch function's result that is not a tuple, a wrong number of
outputs, too many ``output_layouts``), a sink (``num_outputs=0``), ``output_layouts`` and
conditionals; written anew against ``conveyor.dali``.

Changed, with the reason: DALI reads JPEGs from DALI_extra and resizes them to 300x300
with PIL inside a ``python_function``; here an external source generates random uint8
300x300x3 HWC images. Batches of 4 for 2 iterations (DALI: 8 for 16). The errors assert
Conveyor's exception types and messages. ``DLTensorPythonFunction`` (the ``_dl`` cases)
and ``enable_conditionals`` assert Conveyor's refusal, naming them. One difference:
``output_layouts=["IJK"]`` for two outputs gives both ``"IJK"`` (Conveyor records the
argument as strings, so a list of one reads as one string; DALI leaves the second empty).
``test_sink`` runs with ``prefetch_queue_depth=1``: with 2 the in-process pipeline has
computed the next batch too when ``run()`` returns. Not ported:
``test_dlpack_conversions`` (DALI's internal DLPack helpers), ``test_python_operator_
brightness`` (a GPU ``brightness_contrast``), ``test_func_with_side_effects`` (it counts calls
in a global: Conveyor requires pure functions, whose name stands for their outputs in
checkpoints, and may call them ahead).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor.dali import fn, types
from conveyor.dali.pipeline import pipeline_def
from conveyor.errors import ConveyorError

BATCH = 4
ITERS = 2


def images(seed: int = 0) -> Any:
    def source(iteration: int) -> list[np.ndarray]:
        rng = np.random.default_rng(1000 * seed + iteration)
        return [rng.integers(0, 256, (300, 300, 3), dtype=np.uint8) for _ in range(BATCH)]
    return source


def one_channel_normalize(image: np.ndarray) -> np.ndarray:
    return image[:, :, 1] / 255.0


def channels_mean(image: np.ndarray) -> np.ndarray:
    return np.array([np.mean(image[:, :, c]) for c in range(3)])


def bias(image: np.ndarray) -> np.ndarray:
    return np.array(image > 127, dtype=bool)


def flip(image: np.ndarray) -> np.ndarray:
    return np.fliplr(image)


def flip_batch(images: list[np.ndarray]) -> list[np.ndarray]:
    return [flip(x) for x in images]


def rotate(image: np.ndarray) -> np.ndarray:
    return np.rot90(image)


def split_red_blue(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return image[:, :, 0], image[:, :, 2]


def mixed_types(image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return bias(image), one_channel_normalize(image)


def three_outputs(inp: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return inp, inp, inp


def split_and_mix(images1: np.ndarray, images2: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple((images1[:, :, c] + images2[:, :, c]) // 2 for c in range(3))


def output_with_stride_mixed_types(images1: np.ndarray, images2: np.ndarray
                                   ) -> tuple[np.ndarray, ...]:
    return images1[:, :, 2], one_channel_normalize(images2), images1 > images2


def mix_and_split_batch(images1: list[np.ndarray], images2: list[np.ndarray]
                        ) -> tuple[list[np.ndarray], ...]:
    mixed = [(a + b) // 2 for a, b in zip(images1, images2, strict=True)]
    return tuple([im[:, :, c] for im in mixed] for c in range(3))


def with_stride_mixed_types_batch(images1: list[np.ndarray], images2: list[np.ndarray]
                                  ) -> tuple[list[np.ndarray], ...]:
    return ([im[:, :, 2] for im in images1], [one_channel_normalize(im) for im in images2],
            [a > b for a, b in zip(images1, images2, strict=True)])


def invalid_function(image: np.ndarray) -> np.ndarray:
    return img  # type: ignore[name-defined]  # noqa: F821 - invalid on purpose


def _pipe(build: Any, **kw: Any) -> Any:
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=12, **kw)
    def pipe() -> Any:
        return build(fn.external_source(images(), batch=True, layout="HWC"))
    return pipe()


def _samples(batch: Any) -> list[np.ndarray]:
    return [np.asarray(batch.at(i)) for i in range(len(batch))]


@pytest.mark.parametrize("func", [one_channel_normalize, channels_mean, bias])
def test_python_operator_run_case(func: Any) -> None:
    pipe = _pipe(lambda x: (x, fn.python_function(x, function=func)))
    for _ in range(ITERS):
        data, out = pipe.run()
        for image, got in zip(_samples(data), _samples(out), strict=True):
            assert np.array_equal(got, func(image))


@pytest.mark.parametrize(("func", "op"), [
    (flip, lambda x: fn.flip(x, horizontal=1)),
    (rotate, lambda x: fn.rotate(x, angle=90.0, interp_type=types.INTERP_NN)),
])
def test_python_operator_vs_conveyor_op(func: Any, op: Any) -> None:
    pipe = _pipe(lambda x: (fn.python_function(x, function=func), op(x)))
    for _ in range(ITERS):
        numpy_out, conveyor_out = pipe.run()
        for a, b in zip(_samples(numpy_out), _samples(conveyor_out), strict=True):
            assert np.array_equal(a, b)


def test_python_operator_invalid_function() -> None:
    pipe = _pipe(lambda x: fn.python_function(x, function=invalid_function))
    with pytest.raises(Exception, match="img.*not defined"):
        pipe.run()


def test_python_operator_with_input_sets() -> None:
    with pytest.raises(ConveyorError, match="python_function"):
        _pipe(lambda x: fn.python_function([x, x], function=rotate))


@pytest.mark.parametrize("func", [split_red_blue, mixed_types])
def test_two_outputs(func: Any) -> None:
    pipe = _pipe(lambda x: (x, *fn.python_function(x, function=func, num_outputs=2)))
    for _ in range(ITERS):
        data, out1, out2 = pipe.run()
        for image, a, b in zip(_samples(data), _samples(out1), _samples(out2), strict=True):
            ref1, ref2 = func(image)
            assert np.array_equal(a, ref1) and np.array_equal(b, ref2)


def _two_inputs(func: Any, batch: bool) -> Any:
    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=0, seed=12)
    def pipe() -> Any:
        x = fn.external_source(images(1), batch=True, layout="HWC")
        y = fn.external_source(images(2), batch=True, layout="HWC")
        return (x, y, *fn.python_function(x, y, function=func, num_outputs=3,
                                          batch_processing=batch))
    return pipe()


@pytest.mark.parametrize("func", [split_and_mix, output_with_stride_mixed_types])
def test_multi_input_multi_output_per_sample(func: Any) -> None:
    pipe = _two_inputs(func, False)
    for _ in range(ITERS):
        x, y, *outs = pipe.run()
        for i, (a, b) in enumerate(zip(_samples(x), _samples(y), strict=True)):
            for got, ref in zip(outs, func(a, b), strict=True):
                assert np.array_equal(np.asarray(got.at(i)), ref)


@pytest.mark.parametrize("func", [mix_and_split_batch, with_stride_mixed_types_batch])
def test_multi_input_multi_output_batch(func: Any) -> None:
    pipe = _two_inputs(func, True)
    for _ in range(ITERS):
        x, y, *outs = pipe.run()
        refs = func(_samples(x), _samples(y))
        for got, ref in zip(outs, refs, strict=True):
            for i in range(BATCH):
                assert np.array_equal(np.asarray(got.at(i)), ref[i])


def test_not_a_tuple() -> None:
    pipe = _pipe(lambda x: fn.python_function(x, function=flip_batch, num_outputs=2))
    with pytest.raises(Exception, match="tuple"):
        pipe.run()


def test_wrong_outputs_number() -> None:
    pipe = _pipe(lambda x: fn.python_function(x, function=three_outputs, num_outputs=2))
    with pytest.raises(Exception, match="returned tuple, expected a tuple of 2 outputs"):
        pipe.run()


def test_dl_tensor_python_function_is_refused() -> None:
    with pytest.raises(ConveyorError, match="dl_tensor_python_function"):
        fn.dl_tensor_python_function(function=flip_batch)


SINK: list[int] = []


def sink(image: np.ndarray) -> None:
    SINK.append(image.shape[0])


def test_sink() -> None:
    SINK.clear()
    pipe = _pipe(lambda x: (fn.python_function(x, function=sink, num_outputs=0), x)[1],
                 prefetch_queue_depth=1)
    pipe.run()
    assert len(SINK) == BATCH


def test_output_layout() -> None:
    pipe = _pipe(lambda x: (
        *fn.python_function(x, function=lambda v: (v, v.mean(2)), num_outputs=2,
                            output_layouts=["ABC", "DE"]),
        *fn.python_function(x, function=lambda v: (v, v / 2), num_outputs=2,
                            output_layouts="FGH"),
        *fn.python_function(x, function=lambda v: (v, v / 2), num_outputs=2,
                            output_layouts=["IJK"])))
    outs = pipe.run()
    # DALI: "IJK" then "" (a list shorter than the outputs); Conveyor records
    # ``output_layouts`` as strings, so a list of one reads as the string: every output.
    assert [o.layout() for o in outs] == ["ABC", "DE", "FGH", "FGH", "IJK", "IJK"]


def test_invalid_layouts_arg() -> None:
    with pytest.raises(ConveyorError, match="output_layouts"):
        @pipeline_def(batch_size=1, num_threads=1, device_id=0)
        def pipe() -> Any:
            return fn.python_function(function=lambda: np.zeros((1, 1)),
                                      output_layouts=["HW", "HWC"])
        pipe().run()


def test_python_function_conditionals_are_refused() -> None:
    with pytest.raises(ConveyorError, match="enable_conditionals"):
        @pipeline_def(batch_size=4, num_threads=1, device_id=0, enable_conditionals=True)
        def pipe() -> Any:
            return fn.python_function(function=lambda: np.array(0))
        pipe().run()
