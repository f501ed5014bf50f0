"""warp_affine against hand-computed positions (DALI's convention: the matrix maps output
pixel centres (x + 0.5, y + 0.5) to input positions, pixel corners at integers), its
arguments (inverse_map, size, fill_value, dtype, a matrix fed per sample), how ``fn``
records it (the matrix as a second input), and its errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor import fn, pipeline_def, types
from conveyor.definition.schemas.registry import encode_arg
from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine import catalog
from conveyor_server.engine.ops.geometry import warp_affine
from tests.support.op_helpers import build, gradient, noise, run

SHEAR = (0.93, 0.21, 1.3, -0.17, 1.08, -2.4)


@pytest.fixture(scope="module", autouse=True)
def loaded() -> None:
    catalog.load()


def nearest_reference(image: np.ndarray, m: tuple[float, ...], out_hw: tuple[int, int],
                      fill: float | np.ndarray | None = None) -> np.ndarray:
    """Per output pixel, in float64: the input pixel whose square holds M (x+.5, y+.5)."""
    h, w, c = image.shape
    out = np.empty((*out_hw, c), dtype=image.dtype)
    for y, x in np.ndindex(out_hw):
        sx = m[0] * (x + 0.5) + m[1] * (y + 0.5) + m[2]
        sy = m[3] * (x + 0.5) + m[4] * (y + 0.5) + m[5]
        ix, iy = int(np.floor(sx)), int(np.floor(sy))
        if fill is not None and not (0 <= ix < w and 0 <= iy < h):
            out[y, x] = fill
        else:
            out[y, x] = image[min(max(iy, 0), h - 1), min(max(ix, 0), w - 1)]
    return out


def bilinear_reference(image: np.ndarray, m: tuple[float, ...]) -> np.ndarray:
    """Linear interpolation at M (x+.5, y+.5) - 0.5, the border replicated, in float64."""
    h, w = image.shape[:2]
    src = image.astype(np.float64)
    out = np.empty(image.shape, dtype=np.float64)
    for y, x in np.ndindex((h, w)):
        sx = m[0] * (x + 0.5) + m[1] * (y + 0.5) + m[2] - 0.5
        sy = m[3] * (x + 0.5) + m[4] * (y + 0.5) + m[5] - 0.5
        x0, y0 = int(np.floor(sx)), int(np.floor(sy))
        ax, ay = sx - x0, sy - y0

        def at(yy: int, xx: int) -> np.ndarray:
            return src[min(max(yy, 0), h - 1), min(max(xx, 0), w - 1)]

        out[y, x] = ((1 - ay) * ((1 - ax) * at(y0, x0) + ax * at(y0, x0 + 1))
                     + ay * ((1 - ax) * at(y0 + 1, x0) + ax * at(y0 + 1, x0 + 1)))
    return out


def test_identity_and_whole_pixel_shifts_copy_pixels() -> None:
    image = noise(13, 17)
    for interp in ("nn", "linear"):
        same = run(build("warp_affine", matrix=(1, 0, 0, 0, 1, 0), interp_type=interp), image)
        assert np.array_equal(same, image)
        shifted = run(build("warp_affine", matrix=(1, 0, 3, 0, 1, -2), interp_type=interp,
                            fill_value=0), image)
        assert np.array_equal(shifted[2:, :-3], image[:-2, 3:])
        assert not shifted[:2].any() and not shifted[:, -3:].any()


def test_nearest_takes_the_pixel_holding_the_mapped_centre() -> None:
    image = noise(21, 26, seed=4)
    out = run(build("warp_affine", matrix=SHEAR, interp_type="nn"), image)
    assert np.array_equal(out, nearest_reference(image, SHEAR, (21, 26)))
    sized = run(build("warp_affine", matrix=SHEAR, interp_type="nn", size=(15, 31),
                      fill_value=77), image)
    assert sized.shape == (15, 31, 3)
    assert np.array_equal(sized, nearest_reference(image, SHEAR, (15, 31), fill=77))


def test_linear_interpolates_between_the_four_pixels_around_the_position() -> None:
    image = gradient(19, 23)
    out = run(build("warp_affine", matrix=SHEAR), image)
    reference = np.clip(np.rint(bilinear_reference(image, SHEAR)), 0, 255)
    assert np.abs(out.astype(np.float64) - reference).max() <= 1  # OpenCV's fixed point
    assert np.mean(out == reference) > 0.95


def test_inverse_map_false_inverts_the_matrix_first() -> None:
    image = noise(16, 20, seed=2)
    forward = (1.25, 0.0, 2.0, 0.0, 0.8, -1.0)  # input to output
    backward = (0.8, 0.0, -1.6, 0.0, 1.25, 1.25)  # its inverse, exact in float32
    for interp in ("nn", "linear"):
        a = run(build("warp_affine", matrix=forward, inverse_map=False, interp_type=interp),
                image)
        b = run(build("warp_affine", matrix=backward, interp_type=interp), image)
        assert np.array_equal(a, b)


def test_a_matrix_fed_per_sample_as_a_2x3_tensor() -> None:
    op = build("warp_affine", tensor_args=("matrix",), interp_type="nn")
    image = noise(11, 12, seed=5)
    fed = np.asarray(SHEAR, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(run(op, image, matrix=fed), nearest_reference(image, SHEAR, (11, 12)))
    with pytest.raises(InvalidArgument, match=r"'matrix' must be a float tensor of shape \(2, 3\)"):
        run(op, image, matrix=np.zeros((3, 3), np.float32))
    with pytest.raises(InvalidArgument, match="'matrix'.*only finite numbers"):
        run(op, image, matrix=np.full((2, 3), np.nan, np.float32))


def test_output_type_and_fill_per_channel() -> None:
    image = noise(10, 14, seed=6)
    as_float = run(build("warp_affine", matrix=SHEAR, dtype="float32"), image)
    assert as_float.dtype == np.float32
    assert np.abs(as_float - bilinear_reference(image, SHEAR)).max() < 0.2
    floats = image.astype(np.float32) * 1.5 - 40
    back = run(build("warp_affine", matrix=(1, 0, 0, 0, 1, 0), dtype="uint8"), floats)
    assert np.array_equal(back, np.clip(np.rint(floats), 0, 255).astype(np.uint8))
    filled = run(build("warp_affine", matrix=(1, 0, 100, 0, 1, 0), fill_value=(1, 2, 3)), image)
    assert np.array_equal(filled, np.broadcast_to(np.array([1, 2, 3], np.uint8), image.shape))


def test_errors_name_the_argument() -> None:
    image = noise(8, 8)
    with pytest.raises(InvalidArgument, match="'matrix' is required"):
        build("warp_affine")
    with pytest.raises(InvalidArgument, match="cannot be inverted"):
        run(build("warp_affine", matrix=(1, 2, 0, 2, 4, 0), inverse_map=False), image)
    with pytest.raises(SpecError, match="interp_type.*expected one of 'nn', 'linear'"):
        encode_arg("warp_affine", "interp_type", "cubic")
    with pytest.raises(SpecError, match="matrix.*length 6"):
        encode_arg("warp_affine", "matrix", [1.0, 0.0, 0.0])
    with pytest.raises(InvalidArgument, match="float64 are not supported"):
        run(build("warp_affine", matrix=SHEAR), image.astype(np.float64))


def test_a_numpy_matrix_is_taken_row_by_row() -> None:
    encoded = encode_arg("warp_affine", "matrix", np.asarray(SHEAR).reshape(2, 3))
    assert list(encoded.floats.values) == pytest.approx(SHEAR)


def test_fn_takes_the_matrix_as_a_second_input_or_by_name() -> None:
    @pipeline_def(batch_size=2, seed=1)
    def by_input() -> Any:
        images = fn.external_source(source="tests.support.external_sources:samples",
                                    num_outputs=2)[0]
        mtx = fn.random.uniform(range=(0.9, 1.1), shape=(2, 3))
        return (fn.warp_affine(images, mtx, interp_type=types.INTERP_NN),
                fn.warp_affine(images, matrix=mtx))

    ops = by_input().spec.ops
    warps = [op for op in ops if op.type == "warp_affine"]
    assert len(warps) == 2
    for op in warps:
        assert len(op.inputs) == 1 and "matrix" in op.arg_inputs

    @pipeline_def(batch_size=2, seed=1)
    def twice() -> Any:
        images = fn.random.uniform(shape=(4, 4, 3))
        mtx = fn.random.uniform(shape=(2, 3))
        return fn.warp_affine(images, mtx, matrix=mtx)

    with pytest.raises(SpecError, match="matrix.*both as a positional input and by name"):
        twice()

    @pipeline_def(batch_size=2, seed=1)
    def three() -> Any:
        images = fn.random.uniform(shape=(4, 4, 3))
        return fn.warp_affine(images, images, images)

    with pytest.raises(SpecError, match="takes 1 to 2 positional input"):
        three()


def test_positions_are_dalis_row_start_plus_one_float32_step_per_pixel() -> None:
    m = np.asarray((0.71, -0.33, 12.6, 0.29, 0.84, -3.1), dtype=np.float32).reshape(2, 3)
    got = warp_affine.dali_positions(m, 0, (7, 40))
    for y in range(7):
        p = (m[0, 0] * np.float32(0.5) + m[0, 1] * np.float32(y + 0.5)) + m[0, 2]
        for x in range(40):
            assert got[y, x] == p, (y, x)
            p = np.float32(p + m[0, 0])
    # Not the position computed at once: float32 sums drift from it by a few ulps.
    direct = (m[0, 0] * (np.arange(40) + 0.5) + m[0, 1] * 6.5 + m[0, 2]).astype(np.float32)
    assert not np.array_equal(got[6], direct)


@pytest.mark.parametrize("channels", [1, 2, 4, 6])
def test_nearest_with_any_number_of_channels(channels: int) -> None:
    image = noise(17, 19, channels, seed=channels)
    fill = tuple(float(10 * c + 5) for c in range(channels))
    out = run(build("warp_affine", matrix=SHEAR, interp_type="nn", size=(23, 14),
                    fill_value=fill), image)
    expected = nearest_reference(image, SHEAR, (23, 14), fill=np.array(fill))
    assert np.array_equal(out, expected)
    assert np.all(out[0, -1] == np.array(fill, dtype=np.uint8))  # a corner outside the input
    replicated = run(build("warp_affine", matrix=SHEAR, interp_type="nn"), image)
    assert np.array_equal(replicated, nearest_reference(image, SHEAR, (17, 19)))
