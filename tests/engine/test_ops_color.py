"""brightness_contrast, hsv and color_twist against per-pixel numpy references written from
DALI's formulas, output types, per-sample arguments and argument errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from conveyor.errors import InvalidArgument, SpecError
from tests.support.op_helpers import build, noise, run

YIQ = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.321], [0.211, -0.523, 0.311]])
RGB = np.array([[1.0, 0.956, 0.621], [1.0, -0.272, -0.647], [1.0, -1.107, 1.705]])


def twist_reference(image: np.ndarray, hue: float = 0.0, sat: float = 1.0, val: float = 1.0,
                    bright: float = 1.0, contrast: float = 1.0, half: float = 128.0
                    ) -> np.ndarray:
    """Each pixel to YIQ, I and Q turned by the hue and scaled, back to RGB; then
    brightness * (half + contrast * (value - half)), in float64."""
    out = np.empty(image.shape, dtype=np.float64)
    c, s = math.cos(math.radians(hue)), math.sin(math.radians(hue))
    for index in np.ndindex(image.shape[:2]):
        y, i, q = YIQ @ image[index].astype(np.float64)
        i, q = c * i + s * q, -s * i + c * q
        rgb = RGB @ np.array([y * val, i * sat * val, q * sat * val])
        out[index] = bright * (half + contrast * (rgb - half))
    return out


def _close_after_rounding(out: np.ndarray, reference: np.ndarray, lo: float, hi: float) -> None:
    """Integer outputs: the reference rounded and clamped, within one step (float32 vs
    float64 may land on either side of a half)."""
    expected = np.clip(np.rint(reference), lo, hi)
    assert np.abs(out.astype(np.float64) - expected).max() <= 1
    assert np.mean(out == expected) > 0.99


def test_brightness_contrast_matches_the_formula() -> None:
    image = noise(9, 11)
    out = run(build("brightness_contrast", brightness=1.3, contrast=0.7, brightness_shift=0.05),
              image)
    ref = 0.05 * 255 + 1.3 * (128 + 0.7 * (image.astype(np.float64) - 128))
    assert out.dtype == np.uint8
    _close_after_rounding(out, ref, 0, 255)


def test_brightness_contrast_float_output_center_and_per_sample_values() -> None:
    image = noise(6, 7, 1)
    op = build("brightness_contrast", dtype="float32", contrast_center=100.0,
               tensor_args=("brightness", "contrast"))
    out = run(op, image, brightness=np.float32(0.5), contrast=np.float32(2.0))
    ref = 0.5 * (100 + 2.0 * (image.astype(np.float64) - 100))
    assert out.dtype == np.float32 and out.shape == image.shape
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-4)
    floats = image.astype(np.float32) / 255
    out = run(build("brightness_contrast", contrast=0.0, brightness_shift=0.25), floats)
    np.testing.assert_allclose(out, np.full(floats.shape, 0.75), atol=1e-6)  # 0.25 + 0.5


def test_brightness_contrast_saturates_integer_outputs() -> None:
    image = np.array([[[0, 100, 255]]], dtype=np.uint8)
    out = run(build("brightness_contrast", brightness=3.0, dtype="int16"), image)
    assert out.dtype == np.int16 and out.tolist() == [[[0, 300, 765]]]
    out = run(build("brightness_contrast", brightness=3.0), image)
    assert out.tolist() == [[[0, 255, 255]]]


@pytest.mark.parametrize(("hue", "sat", "val"), [(0.0, 1.0, 1.0), (35.0, 1.0, 1.0),
                                                  (-120.0, 0.4, 1.1), (180.0, 1.6, 0.8)])
def test_hsv_matches_the_yiq_reference(hue: float, sat: float, val: float) -> None:
    image = noise(7, 9, seed=2)
    out = run(build("hsv", hue=hue, saturation=sat, value=val), image)
    assert out.dtype == np.uint8  # DALI's default output type for hsv
    _close_after_rounding(out, twist_reference(image, hue, sat, val, half=0.0), 0, 255)
    floats = run(build("hsv", hue=hue, saturation=sat, value=val, dtype="float32"), image)
    np.testing.assert_allclose(floats, twist_reference(image, hue, sat, val, half=0.0),
                               rtol=1e-4, atol=2e-3)


def test_hsv_zero_saturation_is_gray_and_identity_keeps_the_image() -> None:
    image = noise(5, 6, seed=4)
    gray = run(build("hsv", saturation=0.0, dtype="float32"), image)
    luma = image.astype(np.float64) @ YIQ[0]
    np.testing.assert_allclose(gray, np.repeat(luma[..., None], 3, axis=2), atol=2e-3)
    same = run(build("hsv"), image)
    assert np.abs(same.astype(int) - image).max() <= 1  # DALI's rounded matrices


@pytest.mark.parametrize("args", [
    {"hue": 20.0, "saturation": 0.7, "brightness": 1.2, "contrast": 0.8},
    {"value": 1.3, "contrast": 1.5},
    {"hue": -60.0, "brightness": 0.5},
])
def test_color_twist_matches_the_reference(args: dict[str, Any]) -> None:
    image = noise(8, 10, seed=6)
    out = run(build("color_twist", **args), image)
    assert out.dtype == np.uint8  # the input's type
    ref = twist_reference(image, args.get("hue", 0.0), args.get("saturation", 1.0),
                          args.get("value", 1.0), args.get("brightness", 1.0),
                          args.get("contrast", 1.0))
    _close_after_rounding(out, ref, 0, 255)


def test_color_twist_on_float_images_centres_contrast_at_half() -> None:
    image = noise(4, 5, seed=8).astype(np.float32) / 255
    op = build("color_twist", tensor_args=("contrast",), dtype="float16")
    out = run(op, image, contrast=np.float32(0.0))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), np.full(image.shape, 0.5), atol=1e-3)


def test_color_ops_refuse_what_they_cannot_take() -> None:
    with pytest.raises(InvalidArgument, match="3 channels"):
        run(build("hsv"), noise(4, 4, 1))
    with pytest.raises(InvalidArgument, match="int32"):
        run(build("brightness_contrast"), noise(4, 4).astype(np.int32))
    with pytest.raises(SpecError, match="argument 'dtype'"):
        build("color_twist", dtype="int64")
    op = build("hsv", tensor_args=("hue",))
    with pytest.raises(InvalidArgument, match="argument 'hue'"):
        run(op, noise(4, 4), hue=np.float32(np.nan))
