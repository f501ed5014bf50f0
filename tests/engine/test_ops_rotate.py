"""The rotate operator: angles, canvas sizes, fill and types as DALI; and its 4-channel
route: 3-channel images warp through RGBA (faster in OpenCV for nearest and linear) and must
give exactly the bytes of a direct 3-channel warp."""

from __future__ import annotations

import math
from typing import Any

import cv2
import numpy as np
import pytest

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.geometry import rotate
from tests.support.op_helpers import build, noise, run


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


# -- rotate ------------------------------------------------------------------------------


def test_rotate_by_zero_is_identity() -> None:
    image = noise(7, 10)
    for interp in ("nn", "linear", "cubic", "lanczos3"):
        np.testing.assert_array_equal(run(build("rotate", angle=0.0, interp_type=interp), image),
                                      image)


def test_rotate_90_swaps_extents_and_turns_counter_clockwise() -> None:
    image = noise(4, 6)
    image[0, 5] = (255, 0, 0)  # top-right corner
    out = run(build("rotate", angle=90.0), image)
    assert out.shape == (6, 4, 3)
    np.testing.assert_array_equal(out[0, 0], (255, 0, 0), err_msg="top-right to top-left")
    np.testing.assert_array_equal(out, np.rot90(image, 1))
    np.testing.assert_array_equal(run(build("rotate", angle=-90.0), image), np.rot90(image, -1))
    np.testing.assert_array_equal(run(build("rotate", angle=180.0), image), np.rot90(image, 2))
    np.testing.assert_array_equal(run(build("rotate", angle=270.0, interp_type="nn"), image),
                                  np.rot90(image, 3))


def test_rotate_keep_size_turns_about_the_centre() -> None:
    image = noise(5, 9)
    out = run(build("rotate", angle=180.0, keep_size=True), image)
    np.testing.assert_array_equal(out, image[::-1, ::-1])


def test_rotated_canvas_parity_follows_dali() -> None:
    assert rotate.rotated_canvas(5, 6, 90) == (6, 5)
    # 30 degrees: bounding box 7.33 x 7.70 -> 8 x 8, then height to the input height's
    # parity (5: odd) -> 9, width keeps the input width's parity (6: even) -> 8.
    assert rotate.rotated_canvas(5, 6, 30) == (9, 8)
    assert run(build("rotate", angle=30.0), noise(5, 6)).shape == (9, 8, 3)
    for h, w in ((5, 6), (32, 17), (100, 3)):
        for degrees in range(-180, 181, 7):
            out_h, out_w = rotate.rotated_canvas(h, w, degrees)
            rad = math.radians(degrees)
            c, s = abs(math.cos(rad)), abs(math.sin(rad))
            assert out_w >= c * w + s * h - 0.01 and out_h >= c * h + s * w - 0.01
            assert out_w <= c * w + s * h + 2 and out_h <= c * h + s * w + 2
            src_w, src_h = (w, h) if s <= c else (h, w)
            assert (out_w - src_w) % 2 == 0 and (out_h - src_h) % 2 == 0, (h, w, degrees)


def test_rotate_fill_value_and_border_replication() -> None:
    image = np.full((20, 20, 3), 100, np.uint8)
    replicated = run(build("rotate", angle=45.0), image)
    assert replicated.shape == (30, 30, 3)
    assert (replicated == 100).all(), "no fill_value: border pixels are replicated"
    filled = run(build("rotate", angle=45.0, fill_value=7.0), image)
    np.testing.assert_array_equal(filled[0, 0], (7, 7, 7))
    np.testing.assert_array_equal(filled[15, 15], (100, 100, 100))
    per_channel = run(build("rotate", angle=45.0, fill_value=[1, 2, 3]), image)
    np.testing.assert_array_equal(per_channel[-1, -1], (1, 2, 3))
    with pytest.raises(InvalidArgument, match="fill_value"):
        build("rotate", angle=45.0, fill_value=[1, 2]).fn([image], {})


def test_rotate_size_per_sample_angle_and_types() -> None:
    image = noise(8, 12)
    assert run(build("rotate", angle=10.0, keep_size=True), image).shape == (8, 12, 3)
    assert run(build("rotate", angle=10.0, size=[10, 20]), image).shape == (10, 20, 3)
    with pytest.raises(SpecError, match="size"):
        build("rotate", angle=10.0, size=[10, 20], keep_size=True)
    fed = build("rotate", tensor_args=["angle"])
    np.testing.assert_array_equal(run(fed, image, angle=np.float32(90)), np.rot90(image))
    with pytest.raises(InvalidArgument, match="angle"):
        fed.fn([image], {"angle": np.zeros(2, np.float32)})
    gray = noise(8, 12, 1)
    assert run(build("rotate", angle=90.0), gray).shape == (12, 8, 1)
    floats = image.astype(np.float32)
    out = run(build("rotate", angle=90.0), floats)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.rot90(floats))
    six = noise(8, 12, 6)
    np.testing.assert_array_equal(run(build("rotate", angle=90.0, interp_type="cubic"), six),
                                  np.rot90(six))
