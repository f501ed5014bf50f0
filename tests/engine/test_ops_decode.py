"""decoders.image: formats, output types, EXIF, the fast JPEG path, bad data, devices."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import cv2
import numpy as np
import pytest
from PIL import Image

from conveyor.errors import DataFileError, DeviceUnavailable, InvalidArgument
from conveyor_server.engine.device.devices import cuda_device_count
from conveyor_server.engine.ops.decode import decode, jpeg_fast
from conveyor_server.engine.ops.registry import BATCH, builder_for
from tests.support.op_helpers import (
    build,
    gradient,
    mean_abs_diff,
    noise,
    op_context,
    pil_bytes,
    run,
)

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
        builder_for("decoders.image", BATCH, device)(op_context("decoders.image", device=device))


def test_decoder_id_names_the_library() -> None:
    assert decode.DECODER_ID.startswith("opencv ")
    assert cv2.__version__ in decode.DECODER_ID and "simplejpeg" in decode.DECODER_ID
    assert build("decoders.image").layouts == ("HWC",)


