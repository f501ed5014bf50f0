"""The per-sample operators: decode, rotate, resize, crop, flip, crop_mirror_normalize, cast.

Images are generated here and encoded with Pillow or OpenCV; every operator is built the
way the engine builds it, from an ``OpSpec`` through the schema.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import cv2
import numpy as np
import pytest
from PIL import Image

from conveyor.errors import DataFileError, DeviceUnavailable, InvalidArgument, SpecError
from conveyor.schema import decode_args, encode_arg
from conveyor.v1 import pipeline_pb2
from conveyor_server.engine.devices import cuda_device_count
from conveyor_server.engine.ops import decode, jpeg_fast, normalize, rotate
from conveyor_server.engine.ops.registry import (
    OpContext,
    SampleOp,
    builder_for,
    register,
    registered,
)

# -- helpers -----------------------------------------------------------------------------


def build(op_type: str, *, device: str = "cpu", tensor_args: Iterable[str] = (),
          input_layouts: tuple[str, ...] = ("HWC",), **args: Any) -> SampleOp:
    """Build an operator as the engine does: constants encoded, decoded with defaults."""
    spec = pipeline_pb2.OpSpec(type=op_type, device=device, num_outputs=1)
    for name, value in args.items():
        spec.args[name].CopyFrom(encode_arg(op_type, name, value))
    fed = tuple(tensor_args)
    for name in fed:
        spec.arg_inputs[name].CopyFrom(pipeline_pb2.OutputRef(op=0, output=0))
    ctx = OpContext(op_type=op_type, index=1, args=decode_args(spec),
                    tensor_args=frozenset(fed), device=device, input_layouts=input_layouts)
    op = builder_for(op_type)(ctx)
    assert isinstance(op, SampleOp)
    return op


def run(op: SampleOp, image: np.ndarray, **targs: Any) -> np.ndarray:
    """Run one sample through ``op``; check the output is one writable, contiguous array."""
    outs = op.fn([image], {k: np.asarray(v) for k, v in targs.items()})
    assert len(outs) == 1
    out = outs[0]
    assert out.flags.c_contiguous and out.flags.writeable
    assert not np.shares_memory(out, image), "the output must not alias the input"
    return out


def gradient(h: int = 48, w: int = 64) -> np.ndarray:
    """A smooth, asymmetric RGB image (compresses well, so lossy codecs stay close)."""
    y, x = np.mgrid[0:h, 0:w]
    return np.dstack([x * 255 // (w - 1), y * 255 // (h - 1), (x + y) * 127 // (h + w)]).astype(
        np.uint8)


def noise(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, c), dtype=np.uint8)


def pil_bytes(image: np.ndarray | Image.Image, fmt: str, **kw: Any) -> np.ndarray:
    pil = image if isinstance(image, Image.Image) else Image.fromarray(image.squeeze())
    buf = io.BytesIO()
    pil.save(buf, fmt, **kw)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def mean_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int32) - b.astype(np.int32)).mean())


# -- decoders.image ----------------------------------------------------------------------

#: name -> (Pillow format, save options, lossless)
CODECS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "jpeg-baseline": ("JPEG", {"quality": 95}, False),
    "jpeg-progressive": ("JPEG", {"quality": 95, "progressive": True}, False),
    "png": ("PNG", {}, True),
    "bmp": ("BMP", {}, True),
    "tiff": ("TIFF", {}, True),
    "webp-lossless": ("WEBP", {"lossless": True}, True),
    "webp-lossy": ("WEBP", {"quality": 95}, False),
}


@pytest.mark.parametrize("codec", CODECS)
def test_decode_formats_give_rgb_hwc_close_to_the_source(codec: str) -> None:
    src = gradient()
    fmt, options, lossless = CODECS[codec]
    out = run(build("decoders.image"), pil_bytes(src, fmt, **options))
    assert out.shape == (48, 64, 3) and out.dtype == np.uint8
    if lossless:
        np.testing.assert_array_equal(out, src)
    else:
        assert mean_abs_diff(out, src) < 2.0


def test_decode_output_types_bgr_and_gray() -> None:
    src = gradient()
    data = pil_bytes(src, "PNG")
    bgr = run(build("decoders.image", output_type="BGR"), data)
    np.testing.assert_array_equal(bgr, src[:, :, ::-1])
    gray = run(build("decoders.image", output_type="GRAY"), data)
    assert gray.shape == (48, 64, 1), "GRAY keeps a channel axis of 1, as DALI"
    expected = cv2.cvtColor(src, cv2.COLOR_RGB2GRAY)
    assert np.abs(gray[:, :, 0].astype(int) - expected).max() <= 1


def test_decode_grayscale_jpeg_to_rgb_and_gray() -> None:
    src = gradient()[:, :, 0]
    data = pil_bytes(src, "JPEG", quality=95)
    rgb = run(build("decoders.image"), data)
    assert rgb.shape == (48, 64, 3)
    assert mean_abs_diff(rgb, np.dstack([src] * 3)) < 2.0
    gray = run(build("decoders.image", output_type="GRAY"), data)
    assert gray.shape == (48, 64, 1)
    assert mean_abs_diff(gray[:, :, 0], src) < 2.0


def test_decode_cmyk_jpeg() -> None:
    src = gradient()
    raw = pil_bytes(Image.fromarray(src).convert("CMYK"), "JPEG", quality=95)
    out = run(build("decoders.image"), raw)
    assert out.shape == (48, 64, 3)
    pillow = np.asarray(Image.open(io.BytesIO(raw.tobytes())).convert("RGB"))
    assert mean_abs_diff(out, pillow) < 2.0
    assert mean_abs_diff(out, src) < 3.0


def test_decode_drops_alpha() -> None:
    src = gradient()
    rgba = np.dstack([src, np.full(src.shape[:2], 9, np.uint8)])
    out = run(build("decoders.image"), pil_bytes(rgba, "PNG"))
    np.testing.assert_array_equal(out, src)
    bgr = run(build("decoders.image", output_type="BGR"), pil_bytes(rgba, "PNG"))
    np.testing.assert_array_equal(bgr, src[:, :, ::-1])


def test_decode_16_bit_png_and_tiff_scale_to_8_bits() -> None:
    rng = np.random.default_rng(3)
    src16 = rng.integers(0, 65536, (20, 30, 3), dtype=np.uint16)
    expected = ((src16.astype(np.uint32) + 128) // 257).astype(np.uint8)  # round(v / 257)
    for ext in (".png", ".tiff"):
        ok, enc = cv2.imencode(ext, src16[:, :, ::-1])  # OpenCV writes BGR
        assert ok
        out = run(build("decoders.image"), enc.ravel())
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, expected, err_msg=ext)
    gray16 = src16[:, :, 0]
    out = run(build("decoders.image", output_type="GRAY"), pil_bytes(gray16, "PNG"))
    np.testing.assert_array_equal(out[:, :, 0], expected[:, :, 0])


def test_decode_applies_exif_orientation_6() -> None:
    src = gradient(40, 60)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored rotated: displayed = stored turned 90 degrees clockwise
    data = pil_bytes(src, "JPEG", quality=95, exif=exif)
    for output_type in ("RGB", "GRAY"):
        out = run(build("decoders.image", output_type=output_type), data)
        assert out.shape[:2] == (60, 40), output_type
    out = run(build("decoders.image"), data)
    assert mean_abs_diff(out, np.rot90(src, -1)) < 2.0
    assert mean_abs_diff(out, np.rot90(src, 1)) > 20.0


def _jpeg_kinds() -> dict[str, np.ndarray]:
    photo = cv2.add(gradient(61, 83), noise(61, 83, seed=3) // 4)  # odd sizes, fine detail
    exif1, exif6 = Image.Exif(), Image.Exif()
    exif1[0x0112], exif6[0x0112] = 1, 6
    ok, restart = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_QUALITY, 90,
                                               cv2.IMWRITE_JPEG_RST_INTERVAL, 2])
    assert ok
    return {
        "4:2:0": pil_bytes(photo, "JPEG", quality=90, subsampling=2),
        "4:2:2": pil_bytes(photo, "JPEG", quality=90, subsampling=1),
        "4:4:4": pil_bytes(photo, "JPEG", quality=90, subsampling=0),
        "progressive": pil_bytes(photo, "JPEG", quality=85, progressive=True),
        "optimized": pil_bytes(photo, "JPEG", quality=75, optimize=True),
        "grayscale": pil_bytes(photo[:, :, 1], "JPEG", quality=90),
        "restart markers": np.frombuffer(restart.tobytes(), dtype=np.uint8),
        "exif orientation 1": pil_bytes(photo, "JPEG", quality=90, exif=exif1),
        "exif orientation 6": pil_bytes(photo, "JPEG", quality=90, exif=exif6),
        "cmyk": pil_bytes(Image.fromarray(photo).convert("CMYK"), "JPEG", quality=90),
    }


OPENCV_FLAGS = {"RGB": cv2.IMREAD_COLOR_RGB, "BGR": cv2.IMREAD_COLOR,
                "GRAY": cv2.IMREAD_GRAYSCALE}


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY"])
def test_jpeg_fast_path_gives_opencvs_exact_bytes(output_type: str) -> None:
    """The simplejpeg path must decode exactly as OpenCV does, or step aside."""
    fast_kinds = set()
    for kind, data in _jpeg_kinds().items():
        out = run(build("decoders.image", output_type=output_type), data)
        reference = cv2.imdecode(data, OPENCV_FLAGS[output_type])
        assert reference is not None, kind
        if reference.ndim == 2:
            reference = reference[:, :, np.newaxis]
        np.testing.assert_array_equal(out, reference, err_msg=f"{kind}, {output_type}")
        if jpeg_fast.decode(data, output_type) is not None:
            fast_kinds.add(kind)
    assert {"4:2:0", "4:4:4", "progressive", "grayscale", "restart markers",
            "exif orientation 1"} <= fast_kinds
    assert "exif orientation 6" not in fast_kinds


def _with_exif(jpeg: np.ndarray, orientation: int, order: str) -> np.ndarray:
    """``jpeg`` with an APP1 Exif segment holding one IFD0 entry: the orientation."""
    end: Literal["little", "big"] = "little" if order == "II" else "big"
    tiff = (order.encode() + (42).to_bytes(2, end) + (8).to_bytes(4, end)
            + (1).to_bytes(2, end)  # one entry
            + (0x0112).to_bytes(2, end) + (3).to_bytes(2, end) + (1).to_bytes(4, end)
            + orientation.to_bytes(2, end) + b"\0\0" + (0).to_bytes(4, end))
    payload = b"Exif\0\0" + tiff
    segment = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    raw = jpeg.tobytes()
    return np.frombuffer(raw[:2] + segment + raw[2:], dtype=np.uint8)


def test_exif_orientation_is_read_in_either_byte_order() -> None:
    plain = pil_bytes(gradient(20, 30), "JPEG", quality=90)
    assert jpeg_fast.exif_orientation(plain) == 1
    for order in ("II", "MM"):
        for value in (1, 3, 6, 8):
            data = _with_exif(plain, value, order)
            assert jpeg_fast.exif_orientation(data) == value, (order, value)
            # Whichever path decodes it, the result is OpenCV's (which applies it).
            out = run(build("decoders.image"), data)
            np.testing.assert_array_equal(out, cv2.imdecode(data, cv2.IMREAD_COLOR_RGB))


def test_decode_empty_corrupt_and_truncated_data_raise_data_file_error() -> None:
    op = build("decoders.image")
    with pytest.raises(DataFileError, match="empty"):
        op.fn([np.zeros(0, np.uint8)], {})
    with pytest.raises(DataFileError, match="not recognised"):
        op.fn([noise(1, 500, 1).ravel()], {})
    jpeg = pil_bytes(noise(32, 32), "JPEG", quality=90)
    for cut in (2, 100, jpeg.size // 2):
        with pytest.raises(DataFileError, match="JPEG"):
            op.fn([jpeg[:-cut].copy()], {})
    png = pil_bytes(noise(32, 32), "PNG")
    with pytest.raises(DataFileError, match="PNG"):
        op.fn([png[: png.size // 2].copy()], {})
    with pytest.raises(InvalidArgument, match="1-D uint8"):
        op.fn([np.zeros((4, 4), np.float32)], {})


def test_truncated_jpeg_check_itself() -> None:
    """The EOI check, independent of what the OpenCV build does with a truncated file."""
    jpeg = pil_bytes(gradient(), "JPEG", quality=90)
    decode.check_jpeg_complete(jpeg)
    with pytest.raises(DataFileError, match="truncated JPEG"):
        decode.check_jpeg_complete(jpeg[:-2])
    # A thumbnail is a complete JPEG inside a header segment: its end-of-image marker must
    # not hide the truncation of the main image.
    thumbnail = pil_bytes(gradient(8, 8), "JPEG").tobytes()
    segment = b"\xff\xe9" + (len(thumbnail) + 2).to_bytes(2, "big") + thumbnail
    with_thumbnail = np.frombuffer(jpeg[:2].tobytes() + segment + jpeg[2:].tobytes(), np.uint8)
    op = build("decoders.image")
    assert mean_abs_diff(run(op, with_thumbnail), run(op, jpeg)) == 0
    with pytest.raises(DataFileError, match="truncated JPEG"):
        decode.check_jpeg_complete(with_thumbnail[:-40])


def test_decode_accepts_padding_and_data_after_the_jpeg_end() -> None:
    src = gradient()
    jpeg = pil_bytes(src, "JPEG", quality=95)
    op = build("decoders.image")
    for tail in (b"\x00" * 100, b"\r\n", b"appended data, not an image" * 5):
        data = np.concatenate([jpeg, np.frombuffer(tail, np.uint8)])
        assert mean_abs_diff(run(op, data), src) < 2.0


def test_decode_is_consistent_across_threads() -> None:
    data = pil_bytes(noise(64, 64), "JPEG", quality=90)
    op = build("decoders.image")
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda _: op.fn([data], {})[0], range(16)))
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])


@pytest.mark.skipif(cuda_device_count() > 0, reason="this machine has a CUDA device")
# (ids that are not "gpu": conftest skips tests with that keyword on machines without CUDA)
@pytest.mark.parametrize("device", ["mixed", "gpu"], ids=["on_mixed", "on_gpu"])
def test_decode_on_a_gpu_device_without_cuda_is_unavailable(device: str) -> None:
    with pytest.raises(DeviceUnavailable, match=f"device='{device}' needs a CUDA device"):
        build("decoders.image", device=device)


def test_decoder_id_names_the_library() -> None:
    assert decode.DECODER_ID.startswith("opencv ")
    assert cv2.__version__ in decode.DECODER_ID and "simplejpeg" in decode.DECODER_ID
    assert build("decoders.image").layouts == ("HWC",)


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
