"""The rotate operator's 4-channel route: 3-channel images warp through RGBA (faster in
OpenCV for nearest and linear) and must give exactly the bytes of a direct 3-channel warp."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np
import pytest

from conveyor_server.engine.ops import rotate


def direct(image: np.ndarray, matrix: np.ndarray, out_hw: tuple[int, int], interp: int,
           fill: np.ndarray | None) -> np.ndarray:
    """The plain 3-channel OpenCV warp, as the operator did before the 4-channel route."""
    border: dict[str, Any] = ({"borderMode": cv2.BORDER_REPLICATE} if fill is None else
                              {"borderMode": cv2.BORDER_CONSTANT,
                               "borderValue": tuple(fill.tolist())})
    return cv2.warpAffine(image, matrix, (out_hw[1], out_hw[0]),
                          flags=interp | cv2.WARP_INVERSE_MAP, **border)


def image(rng: np.random.Generator, dtype: str) -> np.ndarray:
    h, w = (int(v) for v in rng.integers(5, 90, 2))
    smooth = cv2.resize(rng.uniform(0, 1, (4, 4, 3)), (w, h), interpolation=cv2.INTER_CUBIC)
    values = np.clip(smooth + rng.normal(0, 0.1, (h, w, 3)), 0, 1)
    if dtype == "float32":
        return (values * 3 - 1).astype(np.float32)  # outside [0, 1] too
    top = np.iinfo(dtype).max
    return (values * top).round().astype(dtype)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "float32"])
@pytest.mark.parametrize("interp", [cv2.INTER_NEAREST, cv2.INTER_LINEAR])
@pytest.mark.parametrize("fill", [None, (0, 0, 0), (7, 200, 31)])
def test_the_four_channel_route_gives_the_same_bytes(dtype: str, interp: int,
                                                     fill: tuple[int, ...] | None) -> None:
    rng = np.random.default_rng([interp, len(dtype), 0 if fill is None else sum(fill)])
    for _ in range(12):
        src = image(rng, dtype)
        angle = float(rng.uniform(-180, 180))
        in_hw = (src.shape[0], src.shape[1])
        out_hw = (in_hw if rng.uniform() < 0.5 else
                  rotate.rotated_canvas(in_hw[0], in_hw[1], angle))
        matrix = rotate.rotation_matrix(in_hw, out_hw, angle)
        fill_array = None if fill is None else np.asarray(fill, np.float64)
        got = rotate.warp_affine(src, matrix, out_hw, interp, fill_array)
        want = direct(src, matrix, out_hw, interp, fill_array)
        assert got.dtype == src.dtype and got.shape == (*out_hw, 3)
        assert got.flags.c_contiguous and got.flags.writeable
        np.testing.assert_array_equal(got, want)


def test_other_channel_counts_and_filters_warp_directly() -> None:
    rng = np.random.default_rng(5)
    src = image(rng, "uint8")
    matrix = rotate.rotation_matrix(src.shape[:2], src.shape[:2], 33.0)
    cubic = rotate.warp_affine(src, matrix, src.shape[:2], cv2.INTER_CUBIC, None)
    np.testing.assert_array_equal(cubic, direct(src, matrix, src.shape[:2], cv2.INTER_CUBIC,
                                                None))
    gray = np.ascontiguousarray(src[:, :, :1])
    out = rotate.warp_affine(gray, matrix, src.shape[:2], cv2.INTER_LINEAR, None)
    assert out.shape == (*src.shape[:2], 1)
    np.testing.assert_array_equal(out[:, :, 0], direct(gray, matrix, src.shape[:2],
                                                       cv2.INTER_LINEAR, None))
