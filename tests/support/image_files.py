"""Real image files in every format the decoder reads, written by OpenCV and Pillow or,
where neither writes a variant (big-endian TIFF, OS/2 BMP, plain PNM with comments, a GIF
frame past its screen), laid out by hand; and decompression bombs made from them: the same
files with their headers patched to declare a huge size (checksums fixed, so that the
decoders take the headers as valid)."""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
from PIL import Image

W, H = 32, 24


def pixels(channels: int = 3, seed: int = 1) -> np.ndarray:
    shape = (H, W, channels) if channels > 1 else (H, W)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def pil(fmt: str, mode: str = "RGB", **kw: Any) -> bytes:
    image = Image.fromarray(pixels(4 if mode == "RGBA" else 3)).convert(mode)
    if mode == "RGBA":  # real transparency, so that WebP keeps an alpha plane (VP8X)
        image.putalpha(Image.fromarray(pixels(1, seed=2)))
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


def opencv(ext: str, image: np.ndarray | None = None, params: tuple[int, ...] = ()) -> bytes:
    ok, buf = cv2.imencode(ext, pixels() if image is None else image, list(params))
    assert ok, ext
    return buf.tobytes()


def exif() -> Image.Exif:
    """EXIF data with an orientation and a long text, in a segment before the frame."""
    tags = Image.Exif()
    tags[0x0112] = 1
    tags[0x010F] = "x" * 300
    return tags


def tiff_big_endian(extra_tags: int = 0) -> bytes:
    """An uncompressed RGB strip in Motorola byte order ("MM"), with ``extra_tags`` private
    tags after the standard ones."""
    data = pixels().tobytes()
    entries = [(256, 3, 1, W), (257, 3, 1, H), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 2),
               (273, 4, 1, 0), (277, 3, 1, 3), (278, 3, 1, H), (279, 4, 1, len(data))]
    entries += [(50000 + i, 3, 1, i) for i in range(extra_tags)]
    ifd_size = 2 + 12 * len(entries) + 4
    strip = 8 + ifd_size
    out = bytearray(b"MM\x00*" + struct.pack(">I", 8) + struct.pack(">H", len(entries)))
    for tag, kind, count, value in entries:
        value = strip if tag == 273 else value
        packed = struct.pack(">HH", value, 0) if kind == 3 else struct.pack(">I", value)
        out += struct.pack(">HHI", tag, kind, count) + packed
    return bytes(out + b"\0\0\0\0" + data)


def bmp_os2() -> bytes:
    """A 24-bit BMP with the 12-byte OS/2 core header (16-bit sizes)."""
    rows = pixels()[::-1, :, ::-1]  # bottom-up BGR
    stride = (W * 3 + 3) & ~3
    body = b"".join(row.tobytes().ljust(stride, b"\0") for row in rows)
    header = struct.pack("<IHHHH", 12, W, H, 1, 24)
    return b"BM" + struct.pack("<IHHI", 26 + len(body), 0, 0, 26) + header + body


def bmp_top_down() -> bytes:
    data = bytearray(pil("BMP"))
    data[22:26] = struct.pack("<i", -H)
    return bytes(data)


def pnm_plain(magic: str) -> bytes:
    """P1, P2 or P3 with comments between the numbers."""
    image = pixels(3 if magic == "P3" else 1)
    if magic == "P1":
        values, head = (image > 127).astype(int).ravel(), f"{W} {H}"
    else:
        values, head = image.ravel(), f"{W}\n# a comment\n{H} # another\n255"
    body = " ".join(map(str, values)) + "\n"  # OpenCV wants a space after the last value
    return f"{magic}\n# made by a test\n{head}\n".encode() + body.encode()


def gif_frame_past_screen() -> bytes:
    """A GIF whose image descriptor is taller than its logical screen."""
    data = bytearray(pil("GIF"))
    data[8:10] = struct.pack("<H", H // 2)  # the screen is half as tall as the frame
    return bytes(data)


def jpeg_with_garbage() -> bytes:
    """Bytes that are not a marker between two segments: libjpeg skips them, warning."""
    data = pil("JPEG")
    length = int.from_bytes(data[4:6], "big")
    return data[:4 + length] + b"\x00\x17garbage" + data[4 + length:]


#: name -> (file, (width, height) it holds). Every one decodes with OpenCV to that size.
REAL: dict[str, Callable[[], bytes]] = {
    "jpeg-opencv": lambda: opencv(".jpg"),
    "jpeg-gray": lambda: opencv(".jpg", pixels(1)),
    "jpeg-progressive": lambda: pil("JPEG", progressive=True),
    "jpeg-cmyk": lambda: pil("JPEG", "CMYK"),
    "jpeg-exif": lambda: pil("JPEG", exif=exif()),
    "jpeg-garbage-between-markers": jpeg_with_garbage,
    "png-rgb": lambda: opencv(".png"),
    "png-gray16": lambda: opencv(".png", (pixels(1).astype(np.uint16) * 257)),
    "png-rgba": lambda: pil("PNG", "RGBA"),
    "png-palette": lambda: pil("PNG", "P"),
    "webp-lossy": lambda: opencv(".webp", params=(cv2.IMWRITE_WEBP_QUALITY, 80)),
    "webp-lossless": lambda: pil("WEBP", lossless=True),
    "webp-alpha-vp8x": lambda: pil("WEBP", "RGBA", quality=80),
    "tiff-little": lambda: opencv(".tiff"),
    "tiff-big-endian": tiff_big_endian,
    "tiff-many-tags": lambda: tiff_big_endian(extra_tags=100),  # searched with numpy
    "tiff-16bit": lambda: opencv(".tiff", pixels().astype(np.uint16) * 257),
    "tiff-bigtiff": lambda: pil("TIFF", big_tiff=True),
    "bmp-24": lambda: opencv(".bmp"),
    "bmp-32": lambda: pil("BMP", "RGBA"),
    "bmp-8-palette": lambda: pil("BMP", "P"),
    "bmp-top-down": bmp_top_down,
    "bmp-os2": bmp_os2,
    "gif": lambda: pil("GIF"),
    "gif-opencv": lambda: opencv(".gif"),
    "pbm-plain-p1": lambda: pnm_plain("P1"),
    "pgm-plain-p2": lambda: pnm_plain("P2"),
    "ppm-plain-p3": lambda: pnm_plain("P3"),
    "pbm-p4": lambda: pil("PPM", "1"),
    "pgm-p5": lambda: opencv(".pgm", pixels(1)),
    "ppm-p6": lambda: opencv(".ppm"),
    "pgm-16bit": lambda: opencv(".pgm", pixels(1).astype(np.uint16) * 257),
    "pam-p7": lambda: opencv(".pam"),
    "pfm": lambda: opencv(".pfm", pixels().astype(np.float32) / 255),
}


# -- bombs: real files, headers patched -------------------------------------------------


def _segments(data: bytes) -> list[tuple[int, int, int]]:
    """(marker, offset, length) of a JPEG's segments up to its first scan."""
    out, pos = [], 2
    while data[pos + 1] != 0xDA:
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        out.append((data[pos + 1], pos, length))
        pos += 2 + length
    return out


def jpeg_bomb(width: int, height: int, **kw: Any) -> bytes:
    data = bytearray(pil("JPEG", **kw))
    for marker, pos, _ in _segments(bytes(data)):
        if 0xC0 <= marker <= 0xC2:
            data[pos + 5:pos + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def png_bomb(width: int, height: int) -> bytes:
    data = bytearray(opencv(".png"))
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def _vp8_size(data: bytearray, at: int, width: int, height: int) -> None:
    data[at:at + 4] = struct.pack("<HH", width, height)


def webp_bomb(kind: str, width: int, height: int) -> bytes:
    if kind == "VP8":
        data = bytearray(opencv(".webp", params=(cv2.IMWRITE_WEBP_QUALITY, 80)))
        _vp8_size(data, 26, width, height)
    elif kind == "VP8L":
        data = bytearray(pil("WEBP", lossless=True))
        bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1)
        data[21:25] = (bits | (width - 1) | (height - 1) << 14).to_bytes(4, "little")
    else:  # VP8X: the canvas and the frame inside it
        data = bytearray(pil("WEBP", "RGBA", quality=80))
        data[24:30] = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
        frame = data.find(b"VP8 ", 30)
        _vp8_size(data, frame + 14, width, height)
    assert data[12:16] == kind.ljust(4).encode()
    return bytes(data)


def tiff_bomb(width: int, height: int, source: bytes | None = None) -> bytes:
    data = bytearray(source or opencv(".tiff"))
    order = "<" if data[:2] == b"II" else ">"
    big = bytes(data[2:4]) in (b"+\0", b"\0+")
    offset = struct.unpack(order + ("Q" if big else "I"), data[8 if big else 4:16 if big else 8])[0]
    count = struct.unpack(order + ("Q" if big else "H"), data[offset:offset + (8 if big else 2)])[0]
    first, size = offset + (8 if big else 2), 20 if big else 12
    for i in range(count):
        entry = first + size * i
        tag = struct.unpack(order + "H", data[entry:entry + 2])[0]
        if tag in (256, 257):
            value = width if tag == 256 else height
            data[entry + 2:entry + 4] = struct.pack(order + "H", 4)  # LONG
            data[entry + (12 if big else 8):entry + size] = \
                struct.pack(order + ("Q" if big else "I"), value)
    return bytes(data)


def bmp_bomb(width: int, height: int) -> bytes:
    data = bytearray(opencv(".bmp"))
    data[18:26] = struct.pack("<ii", width, height)
    return bytes(data)


def gif_bomb(width: int, height: int) -> bytes:
    data = bytearray(pil("GIF"))
    data[6:10] = struct.pack("<HH", width, height)
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while data[pos] == 0x21:  # extensions before the image
        pos += 2
        while data[pos]:
            pos += 1 + data[pos]
        pos += 1
    data[pos + 5:pos + 9] = struct.pack("<HH", width, height)
    return bytes(data)


def pnm_bomb(magic: str, width: int, height: int) -> bytes:
    if magic == "P7":
        head = f"P7\nWIDTH {width}\nHEIGHT {height}\nDEPTH 3\nMAXVAL 255\nTUPLTYPE RGB\nENDHDR\n"
    elif magic in ("P1", "P4"):
        head = f"{magic}\n# tiny\n{width} {height}\n"
    elif magic in ("PF", "Pf"):
        head = f"{magic}\n{width} {height}\n-1.0\n"
    else:
        head = f"{magic}\n# tiny\n{width} {height}\n255\n"
    return head.encode() + bytes(64)
