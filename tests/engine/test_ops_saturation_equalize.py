"""saturation against a per-pixel YIQ reference (DALI's math: I and Q scaled, back through
the exact inverse), equalize against a histogram reference written from DALI's definition,
their types and errors, and ``fn.experimental.equalize`` as another name of ``fn.equalize``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def
from conveyor.definition.schemas.registry import encode_arg
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine import catalog
from tests.support.op_helpers import build, gradient, noise, run

YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    catalog.load()


def saturation_reference(image: np.ndarray, saturation: float) -> np.ndarray:
    yiq = image.astype(np.float64) @ YIQ.T
    yiq[..., 1:] *= saturation
    return np.asarray(yiq @ np.linalg.inv(YIQ).T)


def equalize_reference(channel: np.ndarray) -> np.ndarray:
    """Each value to 255 * (how many values are <= it, less the count of the lowest value)
    / (all values, less that count), rounded; a channel of one value stays as it is."""
    counts = np.bincount(channel.reshape(-1), minlength=256)
    lowest = int(np.flatnonzero(counts)[0])
    total, first = channel.size, int(counts[lowest])
    if first == total:
        return channel.copy()
    cdf = np.cumsum(counts)
    lut = np.clip(np.floor((cdf - first) * (255.0 / (total - first)) + 0.5), 0, 255)
    lut[:lowest + 1] = 0
    return lut.astype(np.uint8)[channel]


@pytest.mark.parametrize("saturation", [0.0, 0.3, 1.0, 1.7, 4.0])
def test_saturation_matches_the_yiq_formula(saturation: float) -> None:
    image = noise(12, 15, seed=3)
    out = run(build("saturation", saturation=saturation), image)
    expected = np.clip(np.rint(saturation_reference(image, saturation)), 0, 255)
    assert out.dtype == np.uint8
    assert np.abs(out.astype(np.float64) - expected).max() <= 1  # float32 vs float64
    assert np.mean(out == expected) > 0.99


def test_saturation_one_keeps_and_zero_greys_the_image() -> None:
    image = noise(9, 10, seed=1)
    assert np.array_equal(run(build("saturation"), image), image)
    grey = run(build("saturation", saturation=0.0, dtype="float32"), image)
    assert grey.dtype == np.float32
    assert np.abs(grey - saturation_reference(image, 0.0)).max() < 1e-3
    luma = image.astype(np.float64) @ YIQ[0]  # I and Q gone: the luma, in each channel
    for c in range(3):  # (scaled by the inverse's first column, 1 within 0.4%)
        assert np.abs(grey[..., c] - luma).max() < 0.004 * 255


def test_saturation_per_sample_and_its_limits() -> None:
    op = build("saturation", tensor_args=("saturation",))
    image = gradient(8, 9)
    expected = np.clip(np.rint(saturation_reference(image, 2.0)), 0, 255)
    assert np.abs(run(op, image, saturation=np.float32(2.0)).astype(float) - expected).max() <= 1
    with pytest.raises(InvalidArgument, match="'saturation' got -0.5 for this sample"):
        run(op, image, saturation=np.float32(-0.5))
    with pytest.raises(SpecError, match="saturation.*>= 0"):
        encode_arg("saturation", "saturation", -1.0)
    with pytest.raises(InvalidArgument, match="expects RGB images"):
        run(build("saturation"), noise(5, 5, 1))


def test_equalize_matches_the_histogram_definition() -> None:
    rng = np.random.default_rng(9)
    image = np.dstack([rng.integers(0, 256, (23, 31)),                        # every value
                       rng.integers(40, 90, (23, 31)),                        # a narrow range
                       np.full((23, 31), 200),                                # one value
                       rng.choice([3, 3, 3, 250], (23, 31))]).astype(np.uint8)  # two values
    out = run(build("equalize"), image)
    for c in range(image.shape[2]):
        assert np.array_equal(out[..., c], equalize_reference(image[..., c])), c
    assert np.array_equal(out[..., 2], image[..., 2])
    assert set(np.unique(out[..., 3])) == {0, 255}
    assert out[..., 1].min() == 0 and out[..., 1].max() == 255


def test_equalize_takes_uint8_only() -> None:
    with pytest.raises(InvalidArgument, match="float32 are not supported"):
        run(build("equalize"), noise(4, 4).astype(np.float32))


def test_fn_experimental_equalize_is_fn_equalize() -> None:
    assert fn.experimental.equalize is fn.equalize

    @pipeline_def(batch_size=2, seed=1)
    def both() -> Any:
        images = fn.random.uniform(shape=(4, 4, 3))
        return fn.experimental.equalize(images), fn.equalize(images)

    assert [op.type for op in both().spec.ops][1:] == ["equalize", "equalize"]
