"""Decompression bombs: files of a few kilobytes declaring hundreds of millions of pixels,
in every format the decoder reads. Each is refused from its header before any decoder
allocates it, under every ``on_error`` policy, and a real server streaming a pipeline over
them stays within a stated memory bound."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conveyor import errors, fn, pipeline_def, types
from conveyor_server import Pipeline
from conveyor_server.engine.admission.limits import EngineLimits
from conveyor_server.engine.ops.decode.decode import decode_image
from tests.support.image_files import (
    REAL,
    bmp_bomb,
    gif_bomb,
    jpeg_bomb,
    opencv,
    pil,
    png_bomb,
    pnm_bomb,
    tiff_big_endian,
    tiff_bomb,
    webp_bomb,
)
from tests.support.images import make_image
from tests.support.servers import Start, client

#: The server's default limits.max_image_pixels.
LIMIT = 100_000_000
#: Above the limit, below OpenCV's own default cap (2^30): what OpenCV alone would decode.
SIDE = 16_000
#: What a server may grow by (peak RSS) while streaming a pipeline over every bomb.
RSS_BOUND_MIB = 200


def png_header_only(width: int, height: int) -> bytes:
    """A PNG of 57 bytes: signature, IHDR, IEND."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


#: name -> (file, declared width, height, bytes per sample).
def bombs() -> dict[str, tuple[bytes, int, int, int]]:
    s = SIDE
    out = {
        "jpeg-baseline.jpg": (jpeg_bomb(s, s), s, s, 1),
        "jpeg-progressive.jpg": (jpeg_bomb(s, s, progressive=True), s, s, 1),
        "png.png": (png_bomb(s, s), s, s, 1),
        "webp-vp8.webp": (webp_bomb("VP8", 16383, 16383), 16383, 16383, 1),
        "webp-vp8l.webp": (webp_bomb("VP8L", 16384, 16384), 16384, 16384, 1),
        "webp-vp8x.webp": (webp_bomb("VP8X", 16383, 16383), 16383, 16383, 1),
        "tiff-little.tif": (tiff_bomb(s, s), s, s, 1),
        "tiff-big-endian.tif": (tiff_bomb(s, s, tiff_big_endian()), s, s, 1),
        "tiff-bigtiff.tif": (tiff_bomb(s, s, pil("TIFF", big_tiff=True)), s, s, 1),
        "bmp.bmp": (bmp_bomb(s, s), s, s, 1),
        "gif.gif": (gif_bomb(s, s), s, s, 1),
        # 16-bit and float samples count per byte: these are below the limit in pixels.
        "pfm.pfm": (pnm_bomb("PF", 6000, 6000), 6000, 6000, 4),
        "png-16bit-gray.png": (png_16bit_bomb(8000, 8000), 8000, 8000, 2),
    }
    for magic, ext in (("P1", "pbm"), ("P2", "pgm"), ("P3", "ppm"), ("P4", "pbm"),
                       ("P5", "pgm"), ("P6", "ppm"), ("P7", "pam")):
        out[f"pnm-{magic}.{ext}"] = (pnm_bomb(magic, s, s), s, s, 1)
    return out


def png_16bit_bomb(width: int, height: int) -> bytes:
    data = bytearray(REAL["png-gray16"]())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def corpus() -> dict[str, tuple[bytes, int, int, int]]:
    """Every bomb, and a PNG that is nothing but a header."""
    return bombs() | {"png-header-only.png": (png_header_only(SIDE, SIDE), SIDE, SIDE, 1)}


def test_the_bombs_are_small_and_would_pass_opencvs_own_default_cap() -> None:
    for name, (data, width, height, _) in corpus().items():
        assert len(data) < 10_000, name
        assert width * height <= 1 << 30, name  # OpenCV's default would let it through


@pytest.mark.parametrize("name", sorted(corpus()))
def test_each_bomb_is_refused_from_its_header(name: str) -> None:
    data, width, height, per_sample = corpus()[name]
    with pytest.raises(errors.ResourceExhausted) as raised:
        decode_image(np.frombuffer(data, np.uint8), "RGB", EngineLimits(max_image_pixels=LIMIT))
    message = raised.value.message
    assert f"is {width}x{height} = {width * height:,} pixels" in message, message
    assert "limits.max_image_pixels = 100,000,000" in message
    assert message.endswith("its header says so: it was not decoded"), message
    if per_sample > 1:
        assert f"counted {per_sample}x" in message, message


def test_opencv_takes_every_bomb_header_as_valid(tmp_path: Path) -> None:
    """The bombs are what OpenCV would decode: in a process whose OpenCV cap is 1,000
    pixels, OpenCV's own header check refuses each of them for its size (and not for a
    broken header)."""
    folder = tmp_path / "bombs"
    folder.mkdir()
    for name, (data, *_) in bombs().items():
        (folder / name).write_bytes(data)
    script = (
        "import os, sys, numpy as np\n"
        "os.environ['OPENCV_IO_MAX_IMAGE_PIXELS'] = '1000'\n"
        "import cv2\n"
        "for path in sorted(os.listdir(sys.argv[1])):\n"
        "    data = np.fromfile(os.path.join(sys.argv[1], path), np.uint8)\n"
        "    try:\n"
        "        cv2.imdecode(data, cv2.IMREAD_COLOR)\n"
        "        print(path, 'decoded')\n"
        "    except cv2.error as exc:\n"
        "        print(path, 'capped' if 'CV_IO_MAX_IMAGE_PIXELS' in str(exc) else 'error')\n")
    done = subprocess.run([sys.executable, "-c", script, str(folder)], capture_output=True,
                          text=True, timeout=120, check=True)
    results = dict(line.split() for line in done.stdout.splitlines())
    assert results == {name: "capped" for name in bombs()}


@pipeline_def(batch_size=4, num_threads=2, seed=5, enable_checkpointing=True)
def decoding(root: str, on_error: str) -> Any:
    files, labels = fn.readers.file(file_root=root, file_filters=["*.*"], name="reader")
    images = fn.decoders.image(files, output_type=types.RGB, on_error=on_error)
    return fn.resize(images, size=(16, 16)), labels


def interleaved(root: Path) -> Path:
    """``root/mixed/``: a good JPEG, then a bomb, in turn (names sort so)."""
    folder = root / "mixed"
    folder.mkdir(parents=True)
    for i, (name, (data, *_)) in enumerate(sorted(corpus().items())):
        (folder / f"x{i:02d}a.jpg").write_bytes(opencv(".jpg", make_image(i, 30, 40)))
        (folder / f"x{i:02d}b-{name}").write_bytes(data)
    return root


def test_on_error_applies_to_bombs_as_to_any_bad_file(tmp_path: Path) -> None:
    root = interleaved(tmp_path / "data")
    count = len(corpus())
    limits = EngineLimits(max_image_pixels=LIMIT)
    with Pipeline(decoding(str(root), "skip"), limits=limits) as pipe:
        sizes = [len(pipe.run()[0]) for _ in range(count // 2)]
        assert sizes == [2] * (count // 2) and pipe.samples_skipped == count // 2 * 2
    with Pipeline(decoding(str(root), "replace"), limits=limits) as pipe:
        images, _ = pipe.run()
        assert len(images) == 4 and pipe.samples_replaced == 2
        assert np.array_equal(images[1], images[2])  # the bomb took the next good image
    with Pipeline(decoding(str(root), "fail"), limits=limits) as pipe, \
            pytest.raises(errors.ResourceExhausted,
                          match=r"decoders\.image \(op 1\) on '.*x0[01]b-\w.*': the .* image .*is "
                                r"\d+x\d+ = [\d,]+ pixels"):
        pipe.run()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_a_server_streaming_every_bomb_stays_within_its_memory_bound(
        start_server: Start, tmp_path: Path) -> None:
    root = interleaved(tmp_path / "data")
    count = len(corpus())
    server = start_server(roots=[root])  # the default limits: 10^8 pixels
    assert server.proc is not None
    with client(server) as c:
        c.pipelines()
        before = peak_rss_mib(server.proc.pid)
        pipe = c.create("bombs", decoding(str(root), "skip"))
        batches = [pipe.run() for _ in range(count)]  # every bomb twice
        after = peak_rss_mib(server.proc.pid)
        info = c.pipeline("bombs")
    assert all(len(images) == 2 for images, _ in batches)
    assert info.samples_skipped >= count * 2  # counted as produced, sent ahead included
    grew = after - before
    declared = [w * h for _, w, h, _ in corpus().values()]
    print(f"\nserver peak RSS (VmHWM): {before:.0f} MiB before the pipeline, {after:.0f} MiB "
          f"after {count} batches holding {2 * count} bombs, each declaring "
          f"{min(declared) / 1e9:.2f}-{max(declared) / 1e9:.2f} gigapixels "
          f"(+{grew:.0f} MiB; bound +{RSS_BOUND_MIB} MiB)")
    assert grew < RSS_BOUND_MIB
