"""Encoded files for the header tests: JPEGs of every kind (EXIF orientations in both byte
orders, a thumbnail, CMYK and YCCK, progressive, restart markers, padding and data after
the end), PNGs (8 and 16 bit, gray, palette, alpha), the probe and REAL files, bombs, files
cut at many points and files with bytes changed at random; and what the per-file functions
(``check_file``, ``exif_orientation``, ``check_jpeg_complete``, ``read_size``) say of a file,
set beside what a batch's headers (``batch_headers.py``) say of it."""

from __future__ import annotations

import os
import shlex
import shutil
import sysconfig
from typing import Any, Literal

import cv2
import numpy as np
import pytest
from PIL import Image

from conveyor.errors import ConveyorError, DataFileError, InvalidArgument
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.ops.decode import batch_headers as bh
from conveyor_server.engine.ops.decode import decode, image_header, jpeg_fast
from conveyor_server.engine.ops.probes.inputs import probe_files
from tests.support.image_files import REAL, jpeg_bomb, png_bomb
from tests.support.op_helpers import gradient, noise, pil_bytes

OP = "decoders.image"

#: No limit; the server's default; limits around the test files' sizes (61x83 = 5,063
#: pixels, 10,126 counted for 16-bit samples; REAL's 32x24 = 768); limits out of range.
LIMITS = {
    "none": NO_LIMITS,
    "default": EngineLimits(max_image_pixels=100_000_000),
    "5063": EngineLimits(max_image_pixels=5063),
    "5062": EngineLimits(max_image_pixels=5062),
    "10125": EngineLimits(max_image_pixels=10125),
    "767": EngineLimits(max_image_pixels=767),
    "1": EngineLimits(max_image_pixels=1),
    # Beyond what the compiled walk compares (int64, not negative): every file in Python.
    "2^70": EngineLimits(max_image_pixels=2**70),
    "-1": EngineLimits(max_image_pixels=-1),
}


def c_compiler() -> str | None:
    """The C compiler an install of the server builds its extensions with, if there is one."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shutil.which(shlex.split(cc)[0])


needs_walk = pytest.mark.skipif(bh.WALK != "compiled walk",
                                reason="installed without a C compiler: no compiled walk")


# -- the files -------------------------------------------------------------------------------


def as_array(data: bytes | bytearray | np.ndarray) -> np.ndarray:
    return np.frombuffer(bytes(data), dtype=np.uint8).copy()


def with_exif(jpeg: np.ndarray, orientation: int, order: str, extra: bytes = b"") -> np.ndarray:
    """``jpeg`` with an APP1 Exif segment whose IFD0 holds a text entry, then the
    orientation (``order``: "II" little endian, "MM" big), and ``extra`` after it."""
    end: Literal["little", "big"] = "little" if order == "II" else "big"
    entries = [(0x010F, 2, 4, b"abc\0"), (0x0112, 3, 1, orientation.to_bytes(2, end) + b"\0\0")]
    tiff = order.encode() + (42).to_bytes(2, end) + (8).to_bytes(4, end)
    tiff += len(entries).to_bytes(2, end)
    for tag, kind, count, value in entries:
        tiff += tag.to_bytes(2, end) + kind.to_bytes(2, end) + count.to_bytes(4, end) + value
    tiff += (0).to_bytes(4, end) + extra
    payload = b"Exif\0\0" + tiff
    segment = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    raw = jpeg.tobytes()
    return as_array(raw[:2] + segment + raw[2:])


def ycck(cmyk: np.ndarray) -> np.ndarray:
    """A CMYK JPEG whose Adobe segment says YCCK (transform 2)."""
    raw = bytearray(cmyk.tobytes())
    at = raw.find(b"Adobe")  # after its marker (FF EE) and length
    assert at > 0 and raw[at - 4:at - 2] == b"\xff\xee" and raw[at + 11] == 0
    raw[at + 11] = 2
    return as_array(raw)


def jpeg_kinds() -> dict[str, np.ndarray]:
    photo = cv2.add(gradient(61, 83), noise(61, 83, seed=3) // 4)
    ok, restart = cv2.imencode(".jpg", photo, [cv2.IMWRITE_JPEG_QUALITY, 90,
                                               cv2.IMWRITE_JPEG_RST_INTERVAL, 2])
    assert ok
    plain = pil_bytes(photo, "JPEG", quality=90)
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"), "JPEG", quality=90)
    thumbnail = pil_bytes(gradient(8, 8), "JPEG").tobytes()
    kinds = {
        "4:2:0": plain,
        "4:4:4": pil_bytes(photo, "JPEG", quality=90, subsampling=0),
        "progressive": pil_bytes(photo, "JPEG", quality=85, progressive=True),
        "optimized": pil_bytes(photo, "JPEG", quality=75, optimize=True),
        "grayscale": pil_bytes(photo[:, :, 1], "JPEG", quality=90),
        "restart markers": as_array(restart.tobytes()),
        "cmyk": cmyk,
        "ycck": ycck(cmyk),
        "pillow exif": pil_bytes(photo, "JPEG", quality=90, exif=rotated_exif()),
        "exif thumbnail": with_exif(plain, 6, "MM", thumbnail),
        "padding after": as_array(plain.tobytes() + b"\0\r\n" * 30),
        "data after": as_array(plain.tobytes() + b"appended, not an image" * 5),
        "fill bytes": as_array(plain[:2].tobytes() + b"\xff\xff" + plain[2:].tobytes()),
    }
    for order in ("II", "MM"):
        for value in range(0, 10):
            kinds[f"exif {order} {value}"] = with_exif(plain, value, order)
    return kinds


def rotated_exif() -> Image.Exif:
    """Pillow's EXIF (little endian), orientation 3."""
    tags = Image.Exif()
    tags[0x0112] = 3
    return tags


def png_kinds() -> dict[str, np.ndarray]:
    photo = cv2.add(gradient(61, 83), noise(61, 83, seed=4) // 4)
    return {
        "png rgb": pil_bytes(photo, "PNG"),
        "png gray": pil_bytes(photo[:, :, 0], "PNG"),
        "png palette": pil_bytes(Image.fromarray(photo).convert("P"), "PNG"),
        "png rgba": pil_bytes(Image.fromarray(photo).convert("RGBA"), "PNG"),
        "png 16 bit": as_array(cv2.imencode(".png", photo.astype(np.uint16) * 257)[1]),
        "png gray 16 bit": as_array(cv2.imencode(".png", photo[:, :, 0].astype(np.uint16))[1]),
    }


def corpus() -> dict[str, np.ndarray]:
    files = {f"probe {name}": as_array(data) for name, data in probe_files()}
    files |= {f"real {name}": as_array(make()) for name, make in REAL.items()}
    files |= jpeg_kinds() | png_kinds()
    files |= {
        "jpeg bomb": as_array(jpeg_bomb(40000, 40000)),
        "jpeg bomb progressive": as_array(jpeg_bomb(65535, 65535, progressive=True)),
        "png bomb": as_array(png_bomb(100000, 100000)),
        "png bomb 2^31": as_array(png_bomb(2**31, 5)),
        "png widest": as_array(png_bomb(2**31 - 1, 2**31 - 1)),
        "empty": np.zeros(0, np.uint8),
        "one byte": np.zeros(1, np.uint8),
        "soi only": as_array(b"\xff\xd8\xff"),
        "png signature only": as_array(b"\x89PNG\r\n\x1a\n"),
        "not an image": as_array(b"not an image at all, only text" * 9),
        "noise": noise(1, 700, 1).ravel().copy(),
        "sof with length 0": as_array(b"\xff\xd8\xff\xc0\x00\x00\x08\x00\x10\x00\x20\x03"
                                      b"\xff\xda\x00\x02\xff\xd9"),
        "dht length 1": as_array(b"\xff\xd8\xff\xc4\x00\x01" + bytes(30) + b"\xff\xd9"),
        "eoi before sof": as_array(b"\xff\xd8\xff\xd9\xff\xc0\x00\x11\x08\x00\x10\x00\x20"),
    }
    return files


def cuts(data: np.ndarray) -> list[np.ndarray]:
    """``data`` cut at every byte of its first 700 and at 40 points after."""
    points = sorted(set(range(min(700, data.size))) | set(
        np.linspace(700, data.size, 40, endpoint=False, dtype=int).tolist()))
    return [data[:n].copy() for n in points if n < data.size]



def fuzzed(seed: int, count: int) -> list[np.ndarray]:
    """``count`` JPEGs and PNGs with bytes changed at random: most in the headers (the first
    700 bytes), some anywhere, some cut short; markers and Exif fields favoured."""
    rng = np.random.default_rng(seed)
    kinds = jpeg_kinds() | png_kinds()
    bases = [kinds[k] for k in ("4:2:0", "progressive", "cmyk", "exif II 6", "exif MM 3",
                                "exif thumbnail", "pillow exif", "restart markers", "png rgb",
                                "png 16 bit")]
    out = []
    for _ in range(count):
        data = bases[int(rng.integers(len(bases)))].copy()
        for _ in range(int(rng.integers(1, 9))):
            head = int(rng.integers(0, 10))
            at = int(rng.integers(min(700, data.size) if head else data.size))
            value = rng.choice([0x00, 0xFF, 0xD8, 0xD9, 0xDA, 0xE1, 0xC0, 0x01, 0x7F,
                                int(rng.integers(256))])
            data[at] = value
        if rng.random() < 0.25:
            data = data[:int(rng.integers(0, data.size))].copy()
        out.append(data)
    return out




# -- the per-file functions, as the decoders call them ---------------------------------------


def per_file(data: np.ndarray, limits: EngineLimits) -> dict[str, Any]:
    """What today's per-file functions say of one file, in BatchHeaders' terms."""
    said: dict[str, Any] = {}
    fmt: str | None
    try:
        fmt = decode.check_file(data, limits, OP)
        said["error"] = None
    except ConveyorError as exc:
        said["error"] = (type(exc), str(exc))
        fmt = decode.sniff_format(data) if data.dtype == np.uint8 and data.ndim == 1 else None
    said["format"] = fmt
    if fmt == "JPEG":
        said["orientation"] = jpeg_fast.exif_orientation(data)
        try:
            decode.check_jpeg_complete(data)
            said["complete"] = True
        except DataFileError:
            said["complete"] = False
    if fmt is not None:
        try:
            size = image_header.read_size(data)
        except DataFileError:
            size = None
        said["size"] = (0, 0, 0, 0) if size is None else (
            size.height, size.width, size.channels, size.bits)
    return said


def from_headers(heads: bh.BatchHeaders, i: int) -> dict[str, Any]:
    error = heads.errors.get(i)
    said: dict[str, Any] = {"error": None if error is None else (type(error), str(error))}
    valid = not isinstance(error, InvalidArgument)
    said["format"] = heads.format(i) if valid else None
    if said["format"] == "JPEG":
        said["orientation"] = int(heads.orientation[i])
        said["complete"] = bool(heads.complete[i])
    if valid:
        said["size"] = (int(heads.height[i]), int(heads.width[i]), int(heads.channels[i]),
                        int(heads.bits[i]))
    return said


def assert_same_as_per_file(names: list[str], files: list[np.ndarray],
                            limits: EngineLimits, compiled: bool) -> bh.BatchHeaders:
    heads = bh.batch_headers(files, limits, OP, compiled=compiled)
    for i, (name, data) in enumerate(zip(names, files, strict=True)):
        assert from_headers(heads, i) == per_file(data, limits), name
    return heads


def assert_walks_agree(files: list[np.ndarray], limits: EngineLimits) -> bh.BatchHeaders:
    """The compiled and Python walks give the same table (but which settled) and errors."""
    compiled = bh.batch_headers(files, limits, OP)
    python = bh.batch_headers(files, limits, OP, compiled=False)
    same = np.delete(compiled.table, bh.FIELDS.index("settled"), axis=1) == \
        np.delete(python.table, bh.FIELDS.index("settled"), axis=1)
    bad = np.flatnonzero(~same.all(axis=1))
    assert bad.size == 0, [(int(i), compiled.table[i].tolist(), python.table[i].tolist())
                           for i in bad[:5]]
    assert {i: (type(e), str(e)) for i, e in compiled.errors.items()} == \
        {i: (type(e), str(e)) for i, e in python.errors.items()}
    assert not python.settled.any()
    return compiled



