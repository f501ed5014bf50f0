"""normalize against numpy (float64 statistics, float32 tolerance): statistics computed
over axes or axis names with ddof and epsilon, given as numbers or per-sample arrays,
scale, shift and integer outputs; batch=True and bad shapes refused naming the argument."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor.definition.schemas.registry import SCHEMAS
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine import catalog
from tests.support.op_helpers import build, noise, run


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    catalog.load()


def reference(x: np.ndarray, axes: tuple[int, ...], ddof: int = 0, epsilon: float = 0.0,
              scale: float = 1.0, shift: float = 0.0) -> np.ndarray:
    v = x.astype(np.float64)
    mean = v.mean(axis=axes, keepdims=True)
    n = np.prod([x.shape[a] for a in axes])
    var = ((v - mean) ** 2).sum(axis=axes, keepdims=True) / (n - ddof)
    return np.asarray(scale * (v - mean) / np.sqrt(var + epsilon) + shift)


def test_dali_defaults() -> None:
    args = SCHEMAS["normalize"].args
    assert (args["batch"].default, args["ddof"].default, args["epsilon"].default,
            args["scale"].default, args["shift"].default, args["dtype"].default) == \
        (False, 0, 0.0, 1.0, 0.0, "float32")
    assert args["mean"].tensor and args["stddev"].tensor


@pytest.mark.parametrize(("args", "axes"), [
    ({}, (0, 1, 2)), ({"axes": [0, 1]}, (0, 1)), ({"axes": [-1]}, (2,)),
    ({"axis_names": "HW", "ddof": 1}, (0, 1)), ({"axis_names": "W", "epsilon": 3.0}, (1,)),
    ({"axes": [0], "scale": 2.5, "shift": -1.0}, (0,)),
])
def test_computed_statistics(args: dict[str, Any], axes: tuple[int, ...]) -> None:
    x = noise(9, 11, seed=6)
    out = run(build("normalize", **args), x)
    keys = ("ddof", "epsilon", "scale", "shift")
    expected = reference(x, axes, **{k: v for k, v in args.items() if k in keys})
    assert out.dtype == np.float32 and out.shape == x.shape
    assert np.abs(out - expected).max() < 2e-5 * max(1.0, np.abs(expected).max())


def test_given_statistics_and_integer_output() -> None:
    x = noise(6, 7, seed=2)
    out = run(build("normalize", mean=120.0, stddev=50.0, scale=64.0, shift=128.0,
                    dtype="uint8"), x)
    expected = np.clip(np.rint(64.0 * (x.astype(np.float64) - 120.0) / 50.0 + 128.0), 0, 255)
    assert out.dtype == np.uint8 and np.abs(out - expected).max() <= 1
    op = build("normalize", tensor_args=("mean", "stddev"))
    mean = np.array([[[100, 120, 140]]], np.float32)
    std = np.array([[[30, 40, 50]]], np.float32)
    got = run(op, x, mean=mean, stddev=std)
    assert np.abs(got - (x - mean) / std).max() < 1e-5
    only_mean = run(build("normalize", mean=100.0, axes=[0, 1]), x)  # stddev about that mean
    v = x.astype(np.float64) - 100.0
    ref = v / np.sqrt((v ** 2).mean(axis=(0, 1), keepdims=True))
    assert np.abs(only_mean - ref).max() < 1e-4


def test_a_flat_sample_gives_zeros_and_errors_name_the_argument() -> None:
    flat = np.full((4, 5, 3), 9, np.uint8)
    assert np.array_equal(run(build("normalize"), flat), np.zeros((4, 5, 3), np.float32))
    with pytest.raises(SpecError, match="batch"):
        build("normalize", batch=True)
    with pytest.raises(SpecError, match="axis_names"):
        build("normalize", axes=[0], axis_names="H")
    op = build("normalize", tensor_args=("mean",))
    with pytest.raises(InvalidArgument, match="'mean' has shape \\(2,\\)"):
        run(op, noise(4, 4), mean=np.zeros(2, np.float32))
    with pytest.raises(InvalidArgument, match="float64 are not supported"):
        run(build("normalize"), noise(4, 4).astype(np.float64))


def test_ddof_at_or_above_the_values_reduced_gives_a_variance_of_zero() -> None:
    # As DALI: no degrees of freedom left is a variance of 0, so epsilon alone divides
    # (before, 1 value with ddof=2 gave NaN).
    x = noise(1, 5, seed=3)
    out = run(build("normalize", axes=[0], ddof=2, mean=1.0, epsilon=0.25), x)
    expected = (x.astype(np.float64) - 1.0) / 0.5
    assert np.abs(out - expected).max() < 1e-4
    flat = run(build("normalize", axes=[0], ddof=1), x)
    assert np.array_equal(flat, np.zeros_like(flat))
