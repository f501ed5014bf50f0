"""random_resized_crop, decoders.image_random_crop and decoders.image_crop: the random
window against an independent reference, its distribution, keyed draws, the decoders'
equality with decoding whole and cropping, and argument errors naming the argument."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cv2
import numpy as np
import pytest
from PIL import Image

from conveyor.errors import InvalidArgument, SpecError
from conveyor_server.engine import catalog, keyed_random
from conveyor_server.engine.ops.decode.decode import decode_image
from conveyor_server.engine.ops.geometry.random_window import (
    WindowDraws,
    window_draws,
    window_draws_batch,
    window_params,
)
from conveyor_server.engine.ops.registry import SAMPLE_INDEX, OpContext, SampleOp, builder_for
from tests.support.op_helpers import gradient, noise, op_context, pil_bytes

SEED = 77


def _build(op_type: str, seed: int = SEED, **args: Any) -> SampleOp:
    catalog.load()  # the operators register on import: this file runs alone too
    ctx = op_context(op_type, **args)
    ctx = OpContext(**{**ctx.__dict__, "seed": seed})
    op = builder_for(op_type)(ctx)
    assert isinstance(op, SampleOp) and op.keyed == op_type.endswith(("random_crop",
                                                                      "resized_crop"))
    return op


def _run(op: SampleOp, data: np.ndarray, index: int, **targs: Any) -> np.ndarray:
    feed = {k: np.asarray(v) for k, v in targs.items()}
    feed[SAMPLE_INDEX] = np.array(index, dtype=np.uint64)
    (out,) = op.fn([data], feed)
    assert out.flags.c_contiguous and not np.shares_memory(out, data)
    return out


def reference_window(h: int, w: int, index: int, area: tuple[float, float] = (0.08, 1.0),
                     ratio: tuple[float, float] = (0.75, 4 / 3), attempts: int = 10,
                     seed: int = SEED) -> tuple[int, int, int, int]:
    """The documented window, written out: (y, x, h, w)."""
    def u(draw: int) -> float:
        return float(keyed_random.uniform01(seed, 1, np.array([index], np.uint64), draw)[0])

    for k in range(attempts):
        a = (area[0] + u(2 * k) * (area[1] - area[0])) * h * w
        r = math.exp(math.log(ratio[0]) + u(2 * k + 1) * (math.log(ratio[1]) -
                                                          math.log(ratio[0])))
        cw, ch = math.floor(math.sqrt(a * r) + 0.5), math.floor(math.sqrt(a / r) + 0.5)
        if 0 < cw <= w and 0 < ch <= h:
            y = min(int(u(2 * attempts) * (h - ch + 1)), h - ch)
            x = min(int(u(2 * attempts + 1) * (w - cw + 1)), w - cw)
            return y, x, ch, cw
    ch, cw = h, w
    if w / h < ratio[0]:
        ch = math.floor(w / ratio[0] + 0.5)
    elif w / h > ratio[1]:
        cw = math.floor(h * ratio[1] + 0.5)
    return (h - ch) // 2, (w - cw) // 2, ch, cw


def test_random_resized_crop_is_the_window_resized() -> None:
    image = noise(90, 120)
    op = _build("random_resized_crop", size=[32.0, 40.0], antialias=False)
    for index in (0, 1, 5, 2**40 + 3):
        y, x, h, w = reference_window(90, 120, index)
        expected = cv2.resize(image[y:y + h, x:x + w], (40, 32), interpolation=cv2.INTER_LINEAR)
        np.testing.assert_array_equal(_run(op, image, index), expected, err_msg=str(index))


def test_random_resized_crop_one_size_is_square_and_float_images_work() -> None:
    image = noise(50, 70).astype(np.float32) / 3
    out = _run(_build("random_resized_crop", size=[17.0], interp_type="nn"), image, 4)
    assert out.shape == (17, 17, 3) and out.dtype == np.float32


def test_windows_follow_area_and_aspect_ratio_ranges() -> None:
    op = _build("random_resized_crop", size=[8.0], random_area=[0.2, 0.5],
                random_aspect_ratio=[0.5, 2.0])
    probe = np.arange(400 * 300, dtype=np.int32).reshape(400, 300, 1)
    areas, ratios = [], []
    for index in range(400):
        y, x, h, w = reference_window(400, 300, index, (0.2, 0.5), (0.5, 2.0))
        assert y >= 0 and y + h <= 400 and x >= 0 and x + w <= 300
        areas.append(h * w / (400 * 300))
        ratios.append(w / h)
    assert min(areas) > 0.19 and max(areas) < 0.51
    assert min(ratios) > 0.48 and max(ratios) < 2.05
    assert abs(np.mean(np.log(ratios))) < 0.1  # log-uniform about 1
    assert len({_run(op, probe.astype(np.float32), i).tobytes() for i in range(20)}) == 20


def test_window_is_keyed_by_seed_and_sample_index() -> None:
    image = noise(64, 64)
    op = _build("random_resized_crop", size=[16.0, 16.0])
    first = _run(op, image, 9)
    assert np.array_equal(first, _run(op, image, 9))
    assert not np.array_equal(first, _run(op, image, 10))
    other_seed = _build("random_resized_crop", seed=SEED + 1, size=[16.0, 16.0])
    assert not np.array_equal(first, _run(other_seed, image, 9))


def test_window_draws_of_a_batch_and_per_block_are_each_sample_s_draws() -> None:
    params = window_params("random_resized_crop", [0.08, 1.0], [3 / 4, 4 / 3], 10)
    few = window_params("random_resized_crop", [0.5], [1.0, 2.0], 1)
    indices = [0, 1, 63, 64, 65, 127, 128, 1000, 2**40 + 3, 2**63, 2**64 - 65, 2**64 - 1]
    for p in (params, few):
        batch = window_draws_batch(SEED, 4, np.array(indices, np.uint64), p)
        assert batch.shape == (len(indices), p.num_draws)
        by_block = WindowDraws(SEED, 4, p)
        for row, index in zip(batch, indices, strict=True):
            one = window_draws(SEED, 4, index, p)
            assert row.tobytes() == one.tobytes(), index
            assert by_block(index).tobytes() == one.tobytes(), index
    # Samples asked for in any order, from several threads at once, past the blocks kept.
    by_block = WindowDraws(SEED, 9, params)
    order = np.random.default_rng(3).permutation(64 * (WindowDraws.KEEP + 3))
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: by_block(int(i)).tobytes(), order))
    assert got == [window_draws(SEED, 9, int(i), params).tobytes() for i in order]
    assert not by_block(5).flags.writeable  # rows of a kept block: read only


def test_fallback_is_the_centred_window_at_the_nearest_allowed_ratio() -> None:
    image = noise(40, 100)  # ratio 2.5, above the allowed 1..1.5
    op = _build("random_resized_crop", size=[40.0, 60.0], random_area=[1.0],
                random_aspect_ratio=[1.0, 1.5], num_attempts=3)
    assert reference_window(40, 100, 0, (1.0, 1.0), (1.0, 1.5), 3) == (0, 20, 40, 60)
    np.testing.assert_array_equal(_run(op, image, 0), image[:, 20:80])


def _jpeg(h: int = 75, w: int = 101) -> np.ndarray:
    return pil_bytes(cv2.add(gradient(h, w), noise(h, w, seed=5) // 3), "JPEG", quality=90)


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY"])
def test_image_random_crop_is_decode_then_crop(output_type: str) -> None:
    data = _jpeg()
    whole = decode_image(data, output_type)
    op = _build("decoders.image_random_crop", output_type=output_type,
                random_area=[0.1, 0.9])
    for index in range(12):
        y, x, h, w = reference_window(75, 101, index, (0.1, 0.9))
        np.testing.assert_array_equal(_run(op, data, index), whole[y:y + h, x:x + w])


def test_image_random_crop_windows_the_oriented_image() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed 90 degrees turned: the decoded image is 101 x 75
    data = pil_bytes(gradient(75, 101), "JPEG", quality=90, exif=exif)
    whole = decode_image(data, "RGB")
    assert whole.shape[:2] == (101, 75)
    y, x, h, w = reference_window(101, 75, 3)
    out = _run(_build("decoders.image_random_crop"), data, 3)
    np.testing.assert_array_equal(out, whole[y:y + h, x:x + w])


def test_image_random_crop_then_resize_equals_random_resized_crop() -> None:
    data = _jpeg()
    crop = _build("decoders.image_random_crop")
    rrc = _build("random_resized_crop", size=[24.0, 24.0])
    resize = builder_for("resize")(op_context("resize", size=[24.0, 24.0]))
    for index in range(5):
        (resized,) = resize.fn([_run(crop, data, index)], {})
        np.testing.assert_array_equal(resized, _run(rrc, decode_image(data, "RGB"), index))


def test_image_crop_is_decode_then_crop() -> None:
    data = _jpeg()
    whole = decode_image(data, "RGB")
    op = builder_for("decoders.image_crop")(
        op_context("decoders.image_crop", crop=[30.0, 40.0], tensor_args=("crop_pos_x",),
                   crop_pos_y=0.25))
    for pos_x in (0.0, 0.5, 1.0):
        (out,) = op.fn([data], {"crop_pos_x": np.array(pos_x, dtype=np.float32)})
        x = math.floor((101 - 40) * pos_x + 0.5)
        y = math.floor((75 - 30) * 0.25 + 0.5)
        np.testing.assert_array_equal(out, whole[y:y + 30, x:x + 40])
    too_big = builder_for("decoders.image_crop")(
        op_context("decoders.image_crop", crop=[80.0, 40.0]))
    with pytest.raises(InvalidArgument, match="does not fit"):
        too_big.fn([data], {})


@pytest.mark.parametrize(("op_type", "args", "name"), [
    ("random_resized_crop", {"size": [10.0], "random_area": [0.5, 0.2]}, "random_area"),
    ("random_resized_crop", {"size": [10.0], "random_area": [0.0, 0.2]}, "random_area"),
    ("random_resized_crop", {"size": [10.0], "random_aspect_ratio": [2.0, 1.0]},
     "random_aspect_ratio"),
    ("decoders.image_random_crop", {"random_aspect_ratio": [0.0, 1.0]},
     "random_aspect_ratio"),
    ("decoders.image_crop", {}, "crop"),
])
def test_argument_errors_name_the_argument(op_type: str, args: dict[str, Any],
                                           name: str) -> None:
    with pytest.raises(SpecError, match=f"argument '{name}'") as err:
        builder_for(op_type)(op_context(op_type, **args))
    assert err.value.argument == name


@pytest.mark.parametrize(("args", "name"), [
    ({}, "size"),  # required
    ({"size": [0.0]}, "size"),
    ({"size": [10.0], "num_attempts": 0}, "num_attempts"),
    ({"size": [10.0], "random_area": [0.1, 1.5]}, "random_area"),
])
def test_schema_refuses_bad_window_arguments(args: dict[str, Any], name: str) -> None:
    with pytest.raises(SpecError, match=f"argument '{name}'") as err:
        op_context("random_resized_crop", **args)
    assert err.value.argument == name
