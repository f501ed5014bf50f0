"""The header parser against real files: the size it reads is the size OpenCV decodes, in
every format and variant the decoder takes; headers cut short or garbled give a clear
``DataFileError``, never another exception."""

from __future__ import annotations

import io
import struct

import cv2
import numpy as np
import pytest
from PIL import Image

from conveyor.errors import ConveyorError, DataFileError
from conveyor_server.engine.ops.decode.image_header import ImageSize, read_size
from tests.support.image_files import REAL, H, W, gif_frame_past_screen, pixels

FORMAT_OF = {"jpeg": "JPEG", "png": "PNG", "webp": "WebP", "tiff": "TIFF", "bmp": "BMP",
             "gif": "GIF", "pbm": "PNM", "pgm": "PNM", "ppm": "PNM", "pam": "PNM", "pfm": "PNM"}


def decoded(data: bytes) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert image is not None, "OpenCV cannot decode the test file"
    return image


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_declared_size_is_the_decoded_size(name: str) -> None:
    data = REAL[name]()
    size = read_size(data)
    image = decoded(data)
    assert size is not None and size.format == FORMAT_OF[name.split("-", maxsplit=1)[0]]
    assert (size.height, size.width) == image.shape[:2] == (H, W)
    depth = {np.dtype(np.uint8): 8, np.dtype(np.uint16): 16, np.dtype(np.float32): 32}
    if size.bits > 1:  # 1-bit files decode to bytes
        assert size.bits == depth[image.dtype], (size, image.dtype)


@pytest.mark.parametrize(("name", "channels"), [
    ("jpeg-gray", 1), ("jpeg-cmyk", 4), ("png-rgba", 4), ("png-gray16", 1),
    ("webp-alpha-vp8x", 4), ("tiff-16bit", 3), ("pgm-p5", 1), ("pam-p7", 3)])
def test_channels_where_the_header_says(name: str, channels: int) -> None:
    size = read_size(REAL[name]())
    assert size is not None and size.channels == channels


def test_every_jpeg_frame_kind_is_read() -> None:
    """SOF0-SOF15 but DHT, JPG and DAC: baseline, extended, progressive, lossless,
    hierarchical, arithmetic; libjpeg decodes some of them, but all declare a size."""
    base = REAL["jpeg-opencv"]()
    at = base.index(b"\xff\xc0")
    for marker in [m for m in range(0xC0, 0xD0) if m not in (0xC4, 0xC8, 0xCC)]:
        data = base[:at + 1] + bytes([marker]) + base[at + 2:]
        assert read_size(data) == ImageSize("JPEG", W, H, 3, 8), hex(marker)


def test_a_multi_page_tiff_declares_its_largest_page() -> None:
    small = Image.fromarray(pixels())
    large = Image.fromarray(np.zeros((300, 200, 3), np.uint8))
    out = io.BytesIO()
    small.save(out, "TIFF", save_all=True, append_images=[large])
    size = read_size(out.getvalue())
    assert size is not None and (size.width, size.height, size.part) == (200, 300, "page 1")
    assert decoded(out.getvalue()).shape[:2] == (H, W)  # OpenCV reads the first page


def test_a_gif_frame_past_the_screen_or_later_in_the_file_counts() -> None:
    first = Image.fromarray(pixels())
    later = Image.fromarray(np.zeros((H, W, 3), np.uint8) + 9)
    out = io.BytesIO()
    first.save(out, "GIF", save_all=True, append_images=[later], duration=10)
    data = bytearray(out.getvalue())
    assert read_size(bytes(data)) == ImageSize("GIF", W, H, 3)
    # Make the second frame's descriptor reach past the screen: the size grows to hold it.
    second = data.rfind(b"\x2c\x00\x00\x00\x00")
    data[second + 5:second + 9] = struct.pack("<HH", 900, 700)
    size = read_size(bytes(data))
    assert size is not None and (size.width, size.height) == (900, 700)
    assert size.part.startswith("frame 1")
    size = read_size(gif_frame_past_screen())  # a screen half as tall as its one frame
    assert size is not None and (size.width, size.height) == (W, H)
    assert size.part.startswith("frame 0")


def test_unknown_formats_are_left_to_opencv() -> None:
    for data in (b"", b"\x00" * 40, b"#?RADIANCE\n", b"Y\xa6j\x95" + bytes(40), b"P9 1 1\n"):
        assert read_size(data) is None


@pytest.mark.parametrize("name", sorted(REAL))
def test_every_cut_short_header_is_a_clear_data_error(name: str) -> None:
    data = REAL[name]()
    full = read_size(data)
    assert full is not None
    cuts = sorted(set(range(min(len(data), 700))) | set(range(700, len(data), 97)))
    errors = 0
    for n in cuts:
        try:
            got = read_size(data[:n])
        except DataFileError as exc:
            assert exc.message.startswith(f"the {full.format} header is "), exc.message
            errors += 1
            continue
        # A prefix too short to show its signature is no known format; a longer one
        # either holds the whole header or a later part was cut (TIFF, GIF: lenient).
        assert (got is None and n < 12) or (got is not None and got.format == full.format), \
            (n, got)
        if got is not None:
            assert (got.width, got.height) == (full.width, full.height), (n, got)
    assert errors > 0  # cutting inside the header is noticed


@pytest.mark.parametrize("name", sorted(REAL))
def test_garbled_headers_never_raise_anything_but_a_conveyor_error(name: str) -> None:
    data = REAL[name]()
    rng = np.random.default_rng(sum(map(ord, name)))
    head = min(len(data), 96)
    outcomes = {"size": 0, "error": 0, "none": 0}
    for _ in range(300):
        garbled = bytearray(data)
        for at in rng.integers(0, head, int(rng.integers(1, 4))):
            garbled[at] = int(rng.integers(0, 256))
        try:
            got = read_size(bytes(garbled))
        except ConveyorError as exc:
            assert isinstance(exc, DataFileError), exc
            outcomes["error"] += 1
            continue
        outcomes["none" if got is None else "size"] += 1
        if got is not None:
            assert got.width >= 0 and got.height >= 0
    assert outcomes["size"] > 0, outcomes


def test_messages_say_what_is_wrong() -> None:
    png = REAL["png-rgb"]()
    with pytest.raises(DataFileError, match=r"the PNG header is cut short: the file ends at "
                                            r"byte 20, before its IHDR chunk"):
        read_size(png[:20])
    with pytest.raises(DataFileError, match=r"the PNG header is invalid: the first chunk is "
                                            r"b'IDAT'"):
        read_size(png[:12] + b"IDAT" + png[16:])
    with pytest.raises(DataFileError, match="the TIFF header is invalid: directory 0 has no "
                                            "ImageWidth"):
        read_size(b"II*\x00\x08\x00\x00\x00\x00\x00\x00\x00\x00\x00")
    with pytest.raises(DataFileError, match="PNM header is invalid: its width is b'wide'"):
        read_size(b"P6\nwide 3\n255\n")
    with pytest.raises(DataFileError, match="JPEG header is invalid: marker 0xDA"):
        read_size(b"\xff\xd8\xff\xda\x00\x02")
