"""``fn.reductions.*``: DALI's summation order (checked against a plain recursive reading
of it), DALI's output types and values, and the refusals that name what is wrong."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server import Pipeline
from conveyor_server.engine.ops.reductions import tree
from conveyor_server.engine.ops.reductions.reductions import reduce_sample


def recursive_sum(values: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """DALI's CPU order read literally, one output position and one value at a time."""
    shape = values.shape
    sizes, strides = tree.merged(shape, axes)
    flat = values.ravel()
    zero = values.dtype.type(0)

    def node(axis: int, extent: int, start: int) -> Any:
        inner = math.prod(sizes[axis + 1:])
        if axis == len(sizes) - 1 and extent <= tree.LEAF:
            acc = zero
            for j in range(extent):
                acc = acc + flat[start + j * strides[axis]]
            return zero + acc
        if extent >= 2 and extent * inner > tree.LEAF:
            half = extent // 2
            return zero + (node(axis, half, start)
                           + node(axis, extent - half, start + half * strides[axis]))
        acc = zero
        for i in range(extent):
            acc = acc + node(axis + 1, sizes[axis + 1], start + i * strides[axis])
        return acc

    lanes = tree.lane_offsets(shape, axes)
    return np.array([node(0, sizes[0], int(lane)) for lane in lanes], dtype=values.dtype)


@pytest.mark.parametrize(("shape", "axes"), [
    ((1000,), (0,)), ((67, 45, 3), (0, 1)), ((67, 45, 3), (0, 2)), ((67, 45, 3), (1,)),
    ((5, 129, 3), (0, 1, 2)), ((33, 2, 65), (0, 2)), ((3, 40, 5, 7), (1, 3)),
    ((31, 33), (0,)), ((2, 17, 2), (0, 1, 2)),
])
def test_the_float_sum_is_dalis_order(shape: tuple[int, ...], axes: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape) * 100 + sum(axes))
    values = (rng.standard_normal(shape) * 1000).astype(np.float32)
    got = tree.tree_reduce(values, axes, tree.add, 0)
    assert got.tobytes() == recursive_sum(values, axes).tobytes()


def test_dalis_order_is_not_numpys() -> None:
    """Else the test above could not tell the orders apart."""
    values = (np.random.default_rng(5).standard_normal((67, 45, 3)) * 1000).astype(np.float32)
    ours = tree.tree_reduce(values, (0, 1), tree.add, 0)
    assert ours.tobytes() != values.sum(axis=(0, 1), dtype=np.float32).tobytes()


def test_default_output_types_are_dalis() -> None:
    x = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    expected = {"sum": np.uint64, "min": np.uint8, "max": np.uint8, "mean": np.float32,
                "mean_square": np.float32, "rms": np.float32}
    for kind, dtype in expected.items():
        out = reduce_sample("t", kind, x, None, False)
        assert out.dtype == dtype and out.shape == (), kind
    assert int(reduce_sample("t", "sum", x, None, False)) == 276
    assert int(reduce_sample("t", "sum", x, None, False, dtype="uint8")) == 276 % 256
    assert int(reduce_sample("t", "mean", x, None, False, dtype="uint8")) == 0  # 20 * (1/24)
    assert reduce_sample("t", "sum", np.arange(5, dtype=np.int8), None, False).dtype == np.int64


def test_axes_keep_dims_and_the_mean_input() -> None:
    x = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    assert reduce_sample("t", "sum", x, (-1,), False).tolist() == [[6, 22, 38], [54, 70, 86]]
    assert reduce_sample("t", "sum", x, (0, 2), True).shape == (1, 3, 1)
    assert reduce_sample("t", "sum", x, (), False).tolist() == x.tolist()
    mean = reduce_sample("t", "mean", x, (0,), False)
    std = reduce_sample("t", "std_dev", x, (0,), False, mean=mean)
    assert std.dtype == np.float32 and np.all(std == 6.0)
    kept = reduce_sample("t", "mean", x, (0,), True)
    assert np.array_equal(reduce_sample("t", "std_dev", x, (0,), True, mean=kept),
                          std.reshape(1, 3, 4))
    var = reduce_sample("t", "variance", x, None, False,
                        mean=reduce_sample("t", "mean", x, None, False), ddof=1)
    assert var == np.float32(50.0)  # DALI: 7.071068 ** 2
    # DALI's division by n - ddof: 0 -> inf, < 0 -> NaN
    assert np.all(np.isinf(reduce_sample("t", "std_dev", x, (0,), False, mean=mean, ddof=2)))


def test_min_and_max_follow_dalis_steps_for_nan_and_infinity() -> None:
    x = np.array([np.nan, 3.0, -0.0, 0.0, np.inf], dtype=np.float32)
    assert reduce_sample("t", "min", x, None, False) == np.float32(-0.0)
    assert np.signbit(reduce_sample("t", "min", x, None, False))  # the first zero is kept
    assert reduce_sample("t", "max", x, None, False) == np.inf
    only = np.array([np.nan, np.inf], dtype=np.float32)
    assert reduce_sample("t", "min", only, None, False) == np.finfo(np.float32).max


def test_integer_squares_wrap_as_c_ints_do() -> None:
    x = np.array([65535, 2], dtype=np.uint16)  # 65535 ** 2 overflows C's int
    wrapped = np.int32(np.int64(65535) ** 2 - 2 ** 32)
    got = reduce_sample("t", "mean_square", x, None, False)
    assert got == np.float32((np.float32(wrapped) + np.float32(4)) * np.float32(0.5))


@pytest.mark.parametrize(("call", "message"), [
    (lambda x: reduce_sample("t", "sum", x, (3,), False), "names axis 3, but the sample has 3"),
    (lambda x: reduce_sample("t", "sum", x, (0, -3), False), "names axis 0 twice"),
    (lambda x: reduce_sample("t", "sum", x.astype(np.float64), None, False),
     "type float64 are not supported"),
    (lambda x: reduce_sample("t", "mean", x, None, False, dtype="int64"),
     "'dtype' got 'int64' for an input of type uint8 \\(allowed: float32, uint8\\)"),
    (lambda x: reduce_sample("t", "std_dev", x, (0,), False,
                             mean=np.zeros(3, dtype=np.float32)), "must be \\(3, 4\\)"),
])
def test_bad_samples_are_refused_naming_the_argument(call: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        call(np.zeros((2, 3, 4), dtype=np.uint8))


def _pipe(make: Any) -> Any:
    @pipeline_def(batch_size=2, num_threads=1, seed=1)
    def pipe() -> Any:
        x = fn.external_source(source=_images, batch=True, layout="HWC")
        return make(x)
    return pipe()


def _images(info: Any = None) -> list[np.ndarray]:
    return [np.arange(60, dtype=np.uint8).reshape(3, 4, 5) + i for i in range(2)]


def test_in_a_pipeline_axis_names_read_the_layout() -> None:
    with Pipeline(_pipe(lambda x: fn.reductions.sum(x, axis_names="HC"))) as pipe:
        (out,) = pipe.run()
    assert out[0].tolist() == _images()[0].astype(np.uint64).sum(axis=(0, 2)).tolist()
    with pytest.raises(SpecError, match="names axis 'D', which the input's layout 'HWC'"):
        Pipeline(_pipe(lambda x: fn.reductions.max(x, axis_names="D")))
    with pytest.raises(SpecError, match="'axis_names': cannot be combined with 'axes'"):
        Pipeline(_pipe(lambda x: fn.reductions.min(x, axes=0, axis_names="H")))
    with pytest.raises(SpecError, match="'reduce_batch': is not supported"):
        Pipeline(_pipe(lambda x: fn.reductions.mean(x, reduce_batch=True)))
    with pytest.raises(SpecError, match="takes 2 positional input"):
        _pipe(fn.reductions.std_dev)
