"""The per-sample operators: resize, crop, flip, crop_mirror_normalize, cast; the registry.

Every operator is built the way the engine builds it, from an ``OpSpec`` through the
schema (``tests/support/op_helpers.py``); decoding is tested in
``engine/test_ops_decode.py``, rotation in ``engine/test_ops_rotate.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine.ops.geometry import rotate
from conveyor_server.engine.ops.normalize import normalize
from conveyor_server.engine.ops.registry import (
    SampleOp,
    builder_for,
    register,
    registered,
)
from tests.support.op_helpers import build, noise, run

# -- resize ------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "expected"), [
    ({"resize_x": 30.0}, (20, 30)),
    ({"resize_y": 20.0}, (20, 30)),
    ({"resize_x": 35.0, "resize_y": 25.0}, (25, 35)),
    ({"resize_x": 30.0, "mode": "stretch"}, (40, 30)),
    ({"size": [20, 0]}, (20, 30)),  # (H, W); 0 keeps the aspect ratio
    ({"size": [20, 90]}, (20, 90)),
    ({"size": [0, 0]}, (40, 60)),  # nothing specified: unchanged, as DALI
    ({"size": [30, 30], "mode": "not_larger"}, (20, 30)),
    ({"size": [30, 30], "mode": "not_smaller"}, (30, 45)),
    ({"size": [60, 120], "mode": "not_smaller"}, (80, 120)),
    ({"resize_shorter": 32.0}, (32, 48)),
    ({"resize_longer": 30.0}, (20, 30)),
    ({"resize_shorter": 80.0, "max_size": 100.0}, (67, 100)),
    ({"resize_x": 600.0, "max_size": [50, 0]}, (50, 600)),  # default mode: clamp per axis
])
def test_resize_output_sizes(args: dict[str, Any], expected: tuple[int, int]) -> None:
    out = run(build("resize", **args), noise(40, 60))
    assert out.shape == (*expected, 3)
    assert out.dtype == np.uint8


def test_resize_max_size_keeps_aspect_ratio_in_not_smaller_mode() -> None:
    # DALI's example, scaled by 1/10: 60x120 (HxW), resize_shorter=80, max_size=140 -> 70x140.
    out = run(build("resize", resize_shorter=80.0, max_size=140.0), noise(60, 120))
    assert out.shape == (70, 140, 3)


def test_resize_rejects_bad_argument_combinations() -> None:
    with pytest.raises(SpecError, match="nothing to resize to"):
        build("resize")
    with pytest.raises(SpecError, match=r"'size'.*cannot be combined with resize_x"):
        build("resize", resize_x=10.0, size=[10, 10])
    with pytest.raises(SpecError, match="'resize_longer'"):
        build("resize", resize_shorter=10.0, resize_longer=20.0)
    with pytest.raises(SpecError, match="'mode'"):
        build("resize", resize_shorter=10.0, mode="stretch")


def test_resize_interpolation_and_antialias() -> None:
    small = np.array([[10, 20], [30, 40]], np.uint8)[:, :, None]
    up = run(build("resize", size=[4, 4], interp_type="nn"), small)
    np.testing.assert_array_equal(up[:, :, 0], np.repeat(np.repeat(small[:, :, 0], 2, 0), 2, 1))
    big = noise(8, 8, 1, seed=5)
    area = run(build("resize", size=[2, 2]), big)  # linear + antialias: area average
    blocks = big[:, :, 0].reshape(2, 4, 2, 4).astype(np.float64).mean(axis=(1, 3))
    assert np.abs(area[:, :, 0] - blocks).max() <= 0.5 + 1e-9
    plain = run(build("resize", size=[2, 2], antialias=False), big)
    centres = big[:, :, 0].reshape(2, 4, 2, 4)[:, 1:3, :, 1:3].astype(np.float64).mean(axis=(1, 3))
    assert np.abs(plain[:, :, 0] - centres).max() <= 1
    # One axis shrinks, the other grows.
    mixed = run(build("resize", size=[2, 16]), big)
    assert mixed.shape == (2, 16, 1)
    constant = np.full((9, 13, 3), 77, np.uint8)
    for interp in ("nn", "linear", "cubic", "lanczos3"):
        for size in ([5, 7], [20, 30], [5, 30]):
            out = run(build("resize", size=size, interp_type=interp), constant)
            assert (out == 77).all(), (interp, size)


def test_resize_dtype_and_per_sample_sizes() -> None:
    ramp = np.array([[0, 100]], np.uint8)[:, :, None]
    out = run(build("resize", size=[1, 4], dtype="float32"), ramp)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[0, :, 0], [0, 25, 75, 100])
    with pytest.raises(InvalidArgument, match="uint8"):
        build("resize", size=[2, 2], dtype="uint8").fn([np.zeros((4, 4, 1), np.float32)], {})
    with pytest.raises(InvalidArgument, match="int32"):
        build("resize", size=[2, 2]).fn([np.zeros((4, 4, 1), np.int32)], {})
    fed = build("resize", tensor_args=["resize_x"])
    assert run(fed, noise(40, 60), resize_x=np.float32(30)).shape == (20, 30, 3)
    assert run(fed, noise(40, 60), resize_x=np.array([120.0])).shape == (80, 120, 3)


# -- crop --------------------------------------------------------------------------------


def test_crop_anchors() -> None:
    image = noise(40, 60)
    np.testing.assert_array_equal(run(build("crop", crop=[10, 20]), image), image[15:25, 20:40])
    np.testing.assert_array_equal(
        run(build("crop", crop_h=10.0, crop_w=20.0, crop_pos_x=0.0, crop_pos_y=1.0), image),
        image[30:40, 0:20])
    # (11 - 10) * 0.5 = 0.5 rounds away from zero, to 1.
    odd = noise(11, 11)
    np.testing.assert_array_equal(run(build("crop", crop=[10, 10]), odd), odd[1:11, 1:11])
    fed = build("crop", crop=[10, 20], tensor_args=["crop_pos_x"])
    np.testing.assert_array_equal(run(fed, image, crop_pos_x=np.float32(1.0)), image[15:25, 40:60])
    with pytest.raises(InvalidArgument, match="crop_pos_x"):
        fed.fn([image], {"crop_pos_x": np.array(1.5, np.float32)})


def test_crop_argument_combinations() -> None:
    with pytest.raises(SpecError, match=r"crop_h.*cannot be combined"):
        build("crop", crop=[10, 10], crop_h=5.0)
    with pytest.raises(SpecError, match="together"):
        build("crop", crop_h=5.0)
    with pytest.raises(SpecError, match="missing crop size"):
        build("crop")


def test_crop_out_of_bounds_policies() -> None:
    image = noise(40, 60)
    with pytest.raises(InvalidArgument, match="50x20 crop window"):
        build("crop", crop=[50, 20]).fn([image], {})
    padded = run(build("crop", crop=[50, 20], out_of_bounds_policy="pad"), image)
    assert padded.shape == (50, 20, 3)
    assert (padded[:5] == 0).all() and (padded[45:] == 0).all()  # anchor y = round(-5) = -5
    np.testing.assert_array_equal(padded[5:45], image[:, 20:40])
    colour = run(build("crop", crop=[50, 70], out_of_bounds_policy="pad",
                       fill_values=[1, 2, 300]), image)
    np.testing.assert_array_equal(colour[0, 0], (1, 2, 255))  # saturated to uint8
    np.testing.assert_array_equal(colour[5:45, 5:65], image)
    trimmed = run(build("crop", crop=[50, 20], out_of_bounds_policy="trim_to_shape"), image)
    np.testing.assert_array_equal(trimmed, image[:, 20:40])


# -- flip --------------------------------------------------------------------------------


def test_flip() -> None:
    image = noise(5, 7)
    np.testing.assert_array_equal(run(build("flip"), image), image[:, ::-1])
    np.testing.assert_array_equal(run(build("flip", horizontal=0, vertical=1), image),
                                  image[::-1])
    np.testing.assert_array_equal(run(build("flip", vertical=1), image), image[::-1, ::-1])
    np.testing.assert_array_equal(run(build("flip", horizontal=0), image), image)
    fed = build("flip", tensor_args=["horizontal", "vertical"])
    np.testing.assert_array_equal(
        run(fed, image, horizontal=np.int32(0), vertical=np.int32(1)), image[::-1])
    for dtype in (np.int64, np.bool_, np.float32):  # OpenCV, or numpy where OpenCV can't
        typed = noise(5, 7, 1).astype(dtype)
        out = run(build("flip", vertical=1), typed)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out, typed[::-1, ::-1])


# -- crop_mirror_normalize ---------------------------------------------------------------


def cmn_reference(image: np.ndarray, mean: Any, std: Any, scale: float = 1.0,
                  shift: float = 0.0) -> np.ndarray:
    mean = np.asarray(mean, np.float64)
    std = np.asarray(std, np.float64)
    return (image.astype(np.float64) - mean) / std * scale + shift


def test_cmn_defaults_are_float32_chw() -> None:
    image = noise(6, 8)
    op = build("crop_mirror_normalize")
    assert op.layouts == ("CHW",)
    out = run(op, image)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, image.transpose(2, 0, 1).astype(np.float32))


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_cmn_matches_numpy_reference(layout: str) -> None:
    image = noise(40, 60)
    mean, std = [123.7, 116.3, 103.5], [58.4, 57.1, 57.4]
    op = build("crop_mirror_normalize", crop=[20, 30], crop_pos_x=0.25, crop_pos_y=0.0,
               mirror=1, mean=mean, std=std, scale=2.0, shift=0.5, output_layout=layout)
    assert op.layouts == (layout,)
    window = image[0:20, 8:38][:, ::-1]  # x = round(30 * 0.25) = 8, then mirrored
    expected = cmn_reference(window, mean, std, 2.0, 0.5)
    if layout == "CHW":
        expected = expected.transpose(2, 0, 1)
    out = run(op, image)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_cmn_per_sample_mirror_and_scalar_mean() -> None:
    image = noise(4, 5)
    op = build("crop_mirror_normalize", mean=128.0, std=2.0, output_layout="HWC",
               tensor_args=["mirror"])
    np.testing.assert_allclose(run(op, image, mirror=np.int32(0)), cmn_reference(image, 128, 2))
    np.testing.assert_allclose(run(op, image, mirror=np.int32(1)),
                               cmn_reference(image[:, ::-1], 128, 2))


def test_cmn_integer_outputs_round_and_saturate() -> None:
    image = np.array([[[0, 100, 255]]], np.uint8)
    out = run(build("crop_mirror_normalize", dtype="uint8", scale=2.0, output_layout="HWC"),
              image)
    np.testing.assert_array_equal(out, [[[0, 200, 255]]])
    out = run(build("crop_mirror_normalize", dtype="int8", mean=100.0, std=3.0,
                    output_layout="HWC"), image)
    assert out.dtype == np.int8
    np.testing.assert_array_equal(out, [[[-33, 0, 52]]])  # -33.3, 0, 51.67
    out = run(build("crop_mirror_normalize", dtype="int8", shift=-1000.0), image)
    assert (out == -128).all()
    half = run(build("crop_mirror_normalize", dtype="float16", std=255.0), image)
    assert half.dtype == np.float16
    np.testing.assert_allclose(half[:, 0, 0], [0, 100 / 255, 1], rtol=1e-3)


@pytest.mark.parametrize("layout", ["CHW", "HWC"])
def test_cmn_pad_output_to_four_channels(layout: str) -> None:
    image = noise(3, 4)
    out = run(build("crop_mirror_normalize", pad_output=True, mean=1.0, output_layout=layout),
              image)
    channels = out if layout == "CHW" else out.transpose(2, 0, 1)
    assert channels.shape == (4, 3, 4)
    assert (channels[3] == 0).all()
    np.testing.assert_array_equal(channels[:3], image.transpose(2, 0, 1) - 1.0)


def test_cmn_argument_checks() -> None:
    with pytest.raises(SpecError, match=r"'std'.*non-zero"):
        build("crop_mirror_normalize", std=[1.0, 0.0, 1.0])
    with pytest.raises(SpecError, match=r"'std'.*mean has 2"):
        build("crop_mirror_normalize", mean=[1.0, 2.0], std=[1.0, 2.0, 3.0])
    with pytest.raises(InvalidArgument, match="'mean' has 2 values"):
        build("crop_mirror_normalize", mean=[1.0, 2.0]).fn([noise(4, 4)], {})
    with pytest.raises(InvalidArgument, match="does not fit"):
        build("crop_mirror_normalize", crop=[5, 5]).fn([noise(4, 4)], {})


# -- cast --------------------------------------------------------------------------------


def test_cast_float_to_int_rounds_and_saturates() -> None:
    values = np.array([-1.6, -0.4, 0.6, 254.4, 255.6, 300.0, -np.inf, np.inf, np.nan],
                      np.float32)
    np.testing.assert_array_equal(run(build("cast", dtype="uint8"), values),
                                  [0, 0, 1, 254, 255, 255, 0, 255, 0])
    np.testing.assert_array_equal(run(build("cast", dtype="int8"), values),
                                  [-2, 0, 1, 127, 127, 127, -128, 127, 0])
    big = np.array([1e30, -1e30, 3e9], np.float64)
    np.testing.assert_array_equal(run(build("cast", dtype="int64"), big),
                                  [np.iinfo(np.int64).max, np.iinfo(np.int64).min, 3_000_000_000])
    # uint64 is not in the schema's types; the conversion itself handles it.
    np.testing.assert_array_equal(normalize.saturate_cast(big, np.dtype(np.uint64)),
                                  [np.iinfo(np.uint64).max, 0, 3_000_000_000])
    np.testing.assert_array_equal(run(build("cast", dtype="int32"), big.astype(np.float32)),
                                  [2**31 - 1, -(2**31), 2**31 - 1])


def test_cast_between_integers_and_to_float_and_bool() -> None:
    ints = np.array([-1000, -1, 5, 1000, 70000], np.int32)
    np.testing.assert_array_equal(run(build("cast", dtype="int8"), ints),
                                  [-128, -1, 5, 127, 127])
    np.testing.assert_array_equal(run(build("cast", dtype="uint8"), ints), [0, 0, 5, 255, 255])
    np.testing.assert_array_equal(run(build("cast", dtype="uint16"), ints),
                                  [0, 0, 5, 1000, 65535])
    np.testing.assert_array_equal(run(build("cast", dtype="int64"), np.array([255], np.uint8)),
                                  [255])
    half = run(build("cast", dtype="float16"), ints)
    assert half.dtype == np.float16 and np.isinf(half[-1])
    np.testing.assert_array_equal(run(build("cast", dtype="bool"), ints), [1, 1, 1, 1, 1])
    np.testing.assert_array_equal(run(build("cast", dtype="bool"), np.array([0.0, 0.5])),
                                  [False, True])
    same = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(build("cast", dtype="float32"), same), same)
    transposed = run(build("cast", dtype="float64"), same.T)
    np.testing.assert_array_equal(transposed, same.T)


def test_cast_keeps_the_input_layout() -> None:
    assert build("cast", dtype="uint8", input_layouts=("CHW",)).layouts == ("CHW",)
    assert build("cast", dtype="uint8", input_layouts=()).layouts == ("",)


# -- registry ----------------------------------------------------------------------------


def test_registry_lists_the_ops_and_rejects_a_duplicate() -> None:
    names = registered()
    for op in ("decoders.image", "rotate", "resize", "crop", "flip", "crop_mirror_normalize",
               "cast"):
        assert op in names
    with pytest.raises(ValueError, match="already registered"):
        register("rotate")(lambda ctx: SampleOp(fn=lambda inputs, targs: (), layouts=()))
    assert builder_for("rotate") is rotate.build_rotate
    with pytest.raises(KeyError, match="no per-sample operator"):
        builder_for("readers.file")
