"""crop_mirror_normalize of uint8 pixels by table lookup gives the bytes of its arithmetic:
every output type, layout, channel count, padding, crop and mirror, every input value."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from conveyor import types
from conveyor.definition.normalization import folded_coefficients
from conveyor_server.engine import catalog
from conveyor_server.engine.ops import registry
from conveyor_server.engine.ops.normalize import normalize, normalize_table
from conveyor_server.engine.ops.registry import BATCH, SAMPLE, BatchOp, SampleOp
from tests.support.op_helpers import op_context

DTYPES = ["float16", "float32", "uint8", "int8", "int16", "uint16", "int32", "bool",
          "float64", "int64"]


def _image(h: int, w: int, c: int, salt: int) -> np.ndarray:
    """Random pixels, with every one of the 256 values in every channel."""
    rng = np.random.default_rng(salt)
    image = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    image[0, :256 % w or w] = 0
    flat = image.reshape(-1, c)
    flat[:256] = np.arange(256, dtype=np.uint8)[:, np.newaxis]
    return image


def _arithmetic(view: np.ndarray, mul: np.ndarray, add: np.ndarray, dtype: str, *,
                chw: bool, channels_out: int) -> np.ndarray:
    out = np.empty(normalize.output_shape(view.shape, chw=chw, channels_out=channels_out),
                   dtype=dtype)
    if channels_out > view.shape[2]:
        (out[view.shape[2]:] if chw else out[..., view.shape[2]:]).fill(0)
    normalize._compute_into(out, view, mul, add, chw=chw)
    return out


COEFFICIENTS = [
    ([0.485 * 255, 0.456 * 255, 0.406 * 255, 100.0], [0.229 * 255, 0.224 * 255, 0.225 * 255,
                                                      30.0], 1.0, 0.0),
    ([128.0], [1.0], 1.0, 0.0),  # integers: saturation at both ends
    ([3.0], [0.7], 0.5, 64.0),
    ([0.0], [1e-3], 1.0, 0.0),  # float16 overflows to infinity
    ([0.0], [1e-41], 1.0, 0.0),  # mul is infinite: 0 * inf is NaN
    ([10.0], [3e5], 1.0, 0.0),  # float16 subnormals
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("coefficients", COEFFICIENTS)
def test_every_value_type_and_layout_gives_the_arithmetic_s_bytes(
        dtype: str, coefficients: tuple[list[float], list[float], float, float]) -> None:
    mean, std, scale, shift = coefficients
    for c in (1, 2, 3, 4, 5):
        image = _image(40, 70, c, salt=c)
        m = (mean * c)[:c] if len(mean) > 1 else mean * c
        s = (std * c)[:c] if len(std) > 1 else std * c
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            mul, add = folded_coefficients(m, s, scale, shift)
        views = {"whole": image, "crop": image[3:30, 5:61], "mirror": image[:, ::-1],
                 "crop mirrored": image[3:30, 5:61][:, ::-1]}
        for chw in (True, False):
            for pad in (c, c + 1 if c < 4 else c):
                for name, view in views.items():
                    with np.errstate(over="ignore", invalid="ignore"):
                        want = _arithmetic(view, mul, add, dtype, chw=chw, channels_out=pad)
                        got = normalize.normalize(view, mul, add, np.dtype(dtype), chw=chw,
                                                  channels_out=pad)
                    assert got.dtype == want.dtype and got.shape == want.shape
                    assert got.tobytes() == want.tobytes(), (c, chw, pad, name)


def test_threads_at_once_each_get_their_own_planes() -> None:
    """The lookup splits channels into scratch planes kept per thread: threads normalizing
    images of many sizes at once (one above the size kept) each get their image's bytes."""
    mul, add = folded_coefficients([120.5, 115.25, 100.0], [60.1, 58.7, 57.3], 1.0, 0.0)
    sizes = [(224, 224), (17, 301), (224, 224), (16, 16), (96, 128)] * 6
    sizes.append((1300, 1200))  # 4.7 MB of planes: above SCRATCH_BYTES, not kept
    images = [_image(h, w, 3, salt=i) for i, (h, w) in enumerate(sizes)]

    def normalized(i: int) -> bytes:
        view = images[i][:, ::-1] if i % 2 else images[i]
        return normalize.normalize(view, mul, add, np.dtype("float32"), chw=True,
                                   channels_out=3).tobytes()

    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(normalized, range(len(images))))
    for i, image in enumerate(images):
        view = image[:, ::-1] if i % 2 else image
        assert got[i] == _arithmetic(view, mul, add, "float32", chw=True,
                                     channels_out=3).tobytes(), sizes[i]
    assert normalize_table.SCRATCH_BYTES < 3 * 1300 * 1200


def test_the_table_path_is_the_one_taken_for_uint8_images() -> None:
    image = _image(24, 24, 3, salt=1)
    out = np.empty((3, 24, 24), np.float16)
    assert normalize_table.applies(out, image, chw=True)
    assert normalize_table.applies(out.transpose(1, 2, 0).copy(), image, chw=False)
    assert not normalize_table.applies(np.empty((24, 24, 4), np.float16), image, chw=False)
    assert not normalize_table.applies(out, image.astype(np.float32), chw=True)
    assert not normalize_table.applies(np.empty((3, 24, 24), np.float64), image, chw=True)
    assert normalize_table.applies(np.empty((3, 24, 24), np.float32), image, chw=True)
    assert normalize_table.applies(np.empty((3, 24, 24), np.int32), image, chw=True)
    assert not normalize_table.applies(np.empty((3, 0, 24), np.float16), image[:0], chw=True)
    # A table whose entries are marked reveals that the lookup, not arithmetic, wrote out.
    table = np.arange(256 * 3, dtype=np.uint16).reshape(256, 1, 3).view(np.float16)
    normalize_table.lookup_into(out, image[:, ::-1], table, chw=True)
    expected = image[:, ::-1].astype(np.uint16) * 3 + np.arange(3, dtype=np.uint16)
    assert out.view(np.uint16).tobytes() == expected.transpose(2, 0, 1).tobytes()


def test_float16_table_is_what_numpy_computes_per_value() -> None:
    mul, add = folded_coefficients([124.0, 117.0, 104.0], [58.0, 57.0, 57.0], 1.0, 0.0)
    table = normalize._table(mul.tobytes(), add.tobytes(), np.dtype(np.float16).str, 3)
    values = np.arange(256, dtype=np.float32)[:, np.newaxis]
    expected = ((values * mul).astype(np.float32) + add).astype(np.float16)
    assert table.reshape(256, 3).tobytes() == expected.tobytes()
    assert not table.flags.writeable


def test_float32_table_is_what_numpy_computes_per_value_and_the_lookup_takes_it() -> None:
    mul, add = folded_coefficients([124.0, 117.0, 104.0], [58.0, 57.0, 57.0], 1.0, 0.0)
    table = normalize._table(mul.tobytes(), add.tobytes(), np.dtype(np.float32).str, 3)
    values = np.arange(256, dtype=np.float32)[:, np.newaxis]
    assert table.reshape(256, 3).tobytes() == (values * mul + add).astype(np.float32).tobytes()
    # Entries marked by their index reveal that the lookup wrote a mirrored CHW crop.
    image = _image(24, 30, 3, salt=2)
    marked = np.arange(256 * 3, dtype=np.int32).reshape(256, 1, 3).view(np.float32)
    out = np.empty((3, 20, 24), np.float32)
    view = image[2:22, 3:27][:, ::-1]
    normalize_table.lookup_into(out, view, marked, chw=True)
    expected = view.astype(np.int32) * 3 + np.arange(3, dtype=np.int32)
    assert out.view(np.int32).tobytes() == expected.transpose(2, 0, 1).tobytes()


@pytest.mark.parametrize("args", [
    {"dtype": types.FLOAT16, "output_layout": "CHW"},
    {"dtype": types.FLOAT16, "output_layout": "HWC", "pad_output": True},
    {"dtype": types.FLOAT, "output_layout": "HWC", "crop": (20, 24)},
    {"dtype": types.FLOAT, "output_layout": "CHW", "crop": (20, 24)},
    {"dtype": types.FLOAT, "output_layout": "CHW", "pad_output": True},
    {"dtype": types.UINT8, "output_layout": "CHW", "crop": (20, 24), "pad_output": True},
])
def test_both_forms_of_the_operator_give_the_arithmetic_s_bytes(args: dict[str, Any]) -> None:
    catalog.load()  # every builder registered, the per-batch form's too
    ctx = op_context("crop_mirror_normalize", tensor_args=("mirror",),
                     mean=[124.0, 117.0, 104.0], std=[58.0, 57.0, 57.0], **args)
    per_sample, per_batch = registry.build(ctx, SAMPLE), registry.build(ctx, BATCH)
    assert isinstance(per_sample, SampleOp) and isinstance(per_batch, BatchOp)
    images = [_image(32, 40, 3, salt=i) for i in range(4)]
    mirror = [np.array(i % 2, np.int32) for i in range(4)]
    (batch,) = per_batch.fn([images], {"mirror": mirror})
    p = normalize.cmn_params(ctx)
    mul, add = p.coefficients(3)
    for i, image in enumerate(images):
        view = p.view(image, {"mirror": mirror[i]})
        want = _arithmetic(view, mul, add, str(p.dtype), chw=p.chw,
                           channels_out=p.channels_out(3))
        (one,) = per_sample.fn([image], {"mirror": mirror[i]})
        assert one.tobytes() == want.tobytes()
        assert batch[i].tobytes() == want.tobytes()
