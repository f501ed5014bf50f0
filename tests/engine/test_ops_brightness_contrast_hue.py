"""brightness, contrast and hue against references written from DALI's formulas: the
multiply-add of brightness and contrast (the neutral value of the other's arguments, half
the input type's range as the unset contrast centre), hue's turn of the YIQ chroma plane and
back through the exact inverse; the output types, per-sample values and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conveyor.definition.schemas.registry import SCHEMAS
from conveyor.errors import InvalidArgument
from conveyor_server.engine import catalog
from tests.support.op_helpers import build, gradient, noise, run

YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    catalog.load()


def rounded(x: np.ndarray, hi: int = 255) -> np.ndarray:
    return np.clip(np.rint(x), 0, hi)


def hue_reference(image: np.ndarray, degrees: float) -> np.ndarray:
    yiq = image.astype(np.float64) @ YIQ.T
    rad = math.radians(degrees)
    i, q = yiq[..., 1].copy(), yiq[..., 2].copy()
    yiq[..., 1] = i * math.cos(rad) + q * math.sin(rad)
    yiq[..., 2] = -i * math.sin(rad) + q * math.cos(rad)
    return np.asarray(yiq @ np.linalg.inv(YIQ).T)


def test_dali_arguments_and_defaults() -> None:
    assert SCHEMAS["brightness"].args["brightness"].default == 1.0
    assert SCHEMAS["brightness"].args["brightness_shift"].default == 0.0
    assert SCHEMAS["contrast"].args["contrast"].default == 1.0
    assert SCHEMAS["contrast"].args["contrast_center"].default is None
    assert SCHEMAS["hue"].args["hue"].default == 0.0
    for op in ("brightness", "contrast", "hue"):
        assert SCHEMAS[op].args["dtype"].default == ""  # the input's type
        assert SCHEMAS[op].devices == ("cpu", "gpu")


@pytest.mark.parametrize(("brightness", "shift"), [(1.0, 0.0), (0.45, 0.0), (1.37, 0.0),
                                                    (0.8, 0.15), (2.5, -0.3)])
def test_brightness_is_a_scale_and_a_shift_of_the_range(brightness: float, shift: float) -> None:
    image = noise(11, 13, seed=4)
    out = run(build("brightness", brightness=brightness, brightness_shift=shift), image)
    expected = rounded(image.astype(np.float64) * brightness + shift * 255)
    assert out.dtype == np.uint8
    assert np.abs(out - expected).max() <= 1  # float32 ties
    assert np.mean(out == expected) > 0.98
    floats = image.astype(np.float32) / 255
    got = run(build("brightness", brightness=brightness, brightness_shift=shift), floats)
    assert got.dtype == np.float32
    assert np.abs(got - (floats * brightness + shift)).max() < 1e-6  # shift: of 1 for floats


@pytest.mark.parametrize(("contrast", "center"), [(1.0, None), (1.7, None), (0.0, None),
                                                  (0.6, 90.0)])
def test_contrast_stretches_about_the_centre(contrast: float, center: float | None) -> None:
    image = noise(10, 12, seed=5)
    given = {} if center is None else {"contrast_center": center}
    op = build("contrast", contrast=contrast, **given)
    mid = 128.0 if center is None else center
    expected = rounded((image.astype(np.float64) - mid) * contrast + mid)
    out = run(op, image)
    assert np.abs(out - expected).max() <= 1
    assert np.mean(out == expected) > 0.98
    if contrast == 0.0:
        assert np.all(out == 128)
    floats = image.astype(np.float32) / 255  # the float centre: 0.5
    got = run(build("contrast", contrast=contrast), floats)
    assert np.abs(got - ((floats - 0.5) * contrast + 0.5)).max() < 1e-6


def test_contrast_centre_follows_the_input_type_and_dtype_converts() -> None:
    image = (noise(6, 7, seed=2).astype(np.int16) * 64)
    out = run(build("contrast", contrast=0.0), image)
    assert out.dtype == np.int16 and np.all(out == 16384)
    as_float = run(build("brightness", brightness=2.0, dtype="float32"), noise(4, 4, seed=1))
    assert as_float.dtype == np.float32
    assert np.array_equal(as_float, noise(4, 4, seed=1).astype(np.float32) * 2)


@pytest.mark.parametrize("degrees", [0.0, 37.0, -120.0, 180.0, 400.0])
def test_hue_turns_the_chroma_plane(degrees: float) -> None:
    image = noise(12, 15, seed=3)
    out = run(build("hue", hue=degrees), image)
    expected = rounded(hue_reference(image, degrees))
    assert out.dtype == np.uint8
    assert np.abs(out.astype(np.float64) - expected).max() <= 1
    assert np.mean(out == expected) > 0.99
    floats = run(build("hue", hue=degrees, dtype="float32"), image)
    assert np.abs(floats - hue_reference(image, degrees)).max() < 1e-3
    if degrees == 0.0:  # the exact inverse: no turn leaves the image as it is
        assert np.array_equal(out, image)


def test_per_sample_values_and_errors() -> None:
    image = gradient(8, 9)
    op = build("brightness", tensor_args=("brightness",))
    assert np.array_equal(run(op, image, brightness=np.float32(0.5)),
                          run(build("brightness", brightness=0.5), image))
    op = build("hue", tensor_args=("hue",))
    assert np.array_equal(run(op, image, hue=np.float32(90.0)),
                          run(build("hue", hue=90.0), image))
    with pytest.raises(InvalidArgument, match="'hue' must be one number per sample"):
        run(op, image, hue=np.zeros(2, np.float32))
    with pytest.raises(InvalidArgument, match="expects RGB images"):
        run(build("hue", hue=10.0), noise(5, 5, 1))
    grey = noise(5, 6, 1)  # brightness and contrast take any number of channels
    assert run(build("contrast", contrast=1.0), grey).shape == (5, 6, 1)
