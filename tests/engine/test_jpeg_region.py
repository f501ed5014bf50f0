"""Decoding only a JPEG's window on the CPU (``jpeg_region.py``, nvImageCodec's CPU backend):
exactly the whole decode's bytes cut to the window, on every JPEG kind it takes, for windows
at the edges and at odd offsets; the JPEG kinds it does not take are told from the header;
the window decoders give the same bytes with nvImageCodec and without it (a process where
it cannot be imported).
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from PIL import Image

from conveyor import fn, pipeline_def
from conveyor_server.engine.identity import engine_id
from conveyor_server.engine.ops.decode import jpeg_fast, jpeg_region
from conveyor_server.engine.ops.decode.decode import decode_image
from conveyor_server.engine.ops.decode.nvimgcodec_batch import nvimgcodec_version
from conveyor_server.engine.ops.geometry.random_window import Window
from tests.support.op_helpers import gradient, noise, pil_bytes

pytest.importorskip("nvidia.nvimgcodec")

ROOT = Path(__file__).resolve().parents[2]

_SAMPLING = {"4:2:0": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
             "4:2:2": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
             "4:4:4": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
             "4:4:0": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440,
             "4:1:1": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411}


def photo(h: int, w: int, seed: int) -> np.ndarray:
    """Smooth shapes with texture, as a photo compresses."""
    return cv2.add(gradient(h, w), noise(h, w, seed=seed) // 3)


def encode(image: np.ndarray, sampling: str = "4:2:0", *, progressive: bool = False,
           restart: int = 0, quality: int = 90) -> np.ndarray:
    params = [cv2.IMWRITE_JPEG_QUALITY, quality]
    if image.ndim == 3:
        params += [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, _SAMPLING[sampling]]
    if progressive:
        params += [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]
    if restart:
        params += [cv2.IMWRITE_JPEG_RST_INTERVAL, restart]
    ok, buf = cv2.imencode(".jpg", image, params)
    assert ok
    return buf.reshape(-1)


def jpeg_kinds(h: int, w: int, seed: int) -> dict[str, np.ndarray]:
    image = photo(h, w, seed)
    kinds = {s: encode(image, s) for s in _SAMPLING}
    kinds.update({
        "progressive 4:2:0": encode(image, progressive=True),
        "progressive 4:4:4": encode(image, "4:4:4", progressive=True),
        "restarts every MCU, 4:2:0": encode(image, restart=1),
        "restarts every 3 MCUs, 4:2:2": encode(image, "4:2:2", restart=3),
        "quality 100, 4:4:4": encode(image, "4:4:4", quality=100),
        "grayscale": encode(image[:, :, 1]),
        "progressive grayscale": encode(image[:, :, 1], progressive=True),
        "PIL, optimized tables": pil_bytes(image, "JPEG", quality=85, optimize=True),
    })
    return kinds


def windows(h: int, w: int, rng: np.random.Generator, count: int) -> list[Window]:
    """Windows at the corners and edges, one pixel wide or high, at odd offsets, across MCU
    boundaries, then random windows as ``random_resized_crop`` draws them."""
    fixed = [Window(0, 0, 1, 1), Window(h - 1, w - 1, 1, 1), Window(0, w - 7, h, 7),
             Window(h - 9, 0, 9, w), Window(7, 9, 17, 33), Window(15, 15, 2, 2),
             Window(16, 16, 16, 16), Window(1, 1, h - 2, w - 2), Window(h // 2 - 1, 3, 1, w - 5)]
    out = [v for v in fixed if v.y >= 0 and v.x >= 0 and v.h > 0 and v.w > 0
           and v.y + v.h <= h and v.x + v.w <= w]
    while len(out) < count:
        area = rng.uniform(0.02, 0.6) * h * w
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        ww, wh = round(np.sqrt(area * ratio)), round(np.sqrt(area / ratio))
        if 0 < ww <= w and 0 < wh <= h:
            out.append(Window(int(rng.integers(0, h - wh + 1)), int(rng.integers(0, w - ww + 1)),
                              wh, ww))
    return out


@pytest.mark.parametrize("h, w", [(375, 500), (333, 501), (17, 250), (61, 13)])
def test_a_window_decoded_alone_is_the_whole_decode_cut(h: int, w: int) -> None:
    rng = np.random.default_rng(h * w)
    compared = 0
    for kind, data in jpeg_kinds(h, w, seed=h + w).items():
        assert jpeg_region.frame_size(data) == (h, w), kind
        for output_type in ("RGB", "BGR", "GRAY"):
            whole = decode_image(data, output_type)
            for win in windows(h, w, rng, 12):
                got = jpeg_region.decode(data, output_type, win)
                assert got is not None, (kind, output_type, win)
                assert got.flags.c_contiguous and got.flags.writeable
                np.testing.assert_array_equal(
                    got, whole[win.y:win.y + win.h, win.x:win.x + win.w],
                    err_msg=f"{kind}, {output_type}, {win}")
                compared += 1
    assert compared == 13 * 3 * 12  # 13 kinds, 3 outputs, 12 windows: 1,872 in all


def _sof_patched(data: np.ndarray, marker: int | None = None,
                 precision: int | None = None) -> np.ndarray:
    raw = bytearray(data.tobytes())
    pos = raw.index(b"\xff\xc0")
    if marker is not None:
        raw[pos + 1] = marker
    if precision is not None:
        raw[pos + 4] = precision
    return np.frombuffer(bytes(raw), dtype=np.uint8)


def test_the_jpegs_it_does_not_take_are_told_from_the_header() -> None:
    image = photo(40, 56, seed=3)
    rotated = Image.Exif()
    rotated[0x0112] = 6
    baseline = encode(image)
    assert jpeg_region.frame_size(baseline) == (40, 56)
    refused = {
        "CMYK (Adobe segment)": pil_bytes(Image.fromarray(image).convert("CMYK"), "JPEG"),
        "EXIF orientation 6": pil_bytes(image, "JPEG", exif=rotated),
        "PNG": pil_bytes(image, "PNG"),
        "12-bit samples": _sof_patched(baseline, precision=12),
        "lossless (SOF3)": _sof_patched(baseline, marker=0xC3),
        "arithmetic coding (SOF9)": _sof_patched(baseline, marker=0xC9),
        "cut before the frame header": baseline[:20],
    }
    for kind, data in refused.items():
        assert jpeg_region.frame_size(data) is None, kind


def _with_app1(data: np.ndarray, *payloads: bytes) -> np.ndarray:
    """The JPEG with APP1 segments holding ``payloads`` inserted after its SOI, in order."""
    raw = data.tobytes()
    segments = b"".join(b"\xff\xe1" + (len(p) + 2).to_bytes(2, "big") + p for p in payloads)
    return np.frombuffer(raw[:2] + segments + raw[2:], dtype=np.uint8)


def _exif(orientation: int) -> bytes:
    """An APP1 segment's payload: the EXIF header and a TIFF block with the orientation."""
    payload = _pil_exif(orientation).tobytes()
    assert payload.startswith(b"Exif\0\0")
    return payload


def test_frame_size_reads_the_exif_orientation_in_its_own_walk() -> None:
    """One walk over the segments gives what the frame header and ``exif_orientation``
    give apart: the size of a JPEG whose first EXIF segment says 1 (or that has none)."""
    baseline = encode(photo(40, 56, seed=5))
    xmp = b"http://ns.adobe.com/xap/1.0/\0<x:xmpmeta/>"
    files = {
        "no EXIF": baseline,
        "EXIF orientation 1": _with_app1(baseline, _exif(1)),
        "EXIF orientation 6": _with_app1(baseline, _exif(6)),
        "EXIF orientation 3": _with_app1(baseline, _exif(3)),
        "EXIF 1, then another EXIF 6": _with_app1(baseline, _exif(1), _exif(6)),
        "EXIF 8, then another EXIF 1": _with_app1(baseline, _exif(8), _exif(1)),
        "XMP, then EXIF 6": _with_app1(baseline, xmp, _exif(6)),
        "XMP, then EXIF 1": _with_app1(baseline, xmp, _exif(1)),
        "EXIF cut short": _with_app1(baseline, b"Exif\0\0II*\0"),
        "PIL, EXIF 1": pil_bytes(photo(40, 56, seed=5), "JPEG", exif=_pil_exif(1)),
        "PIL, EXIF 5": pil_bytes(photo(40, 56, seed=5), "JPEG", exif=_pil_exif(5)),
    }
    taken = set()
    for kind, data in files.items():
        orientation = jpeg_fast.exif_orientation(data)
        assert jpeg_region.frame_size(data) == ((40, 56) if orientation == 1 else None), kind
        if orientation == 1:
            taken.add(kind)
            np.testing.assert_array_equal(jpeg_fast.decode(data, "RGB", upright=True),
                                          decode_image(data, "RGB"), err_msg=kind)
    assert taken == {"no EXIF", "EXIF orientation 1", "EXIF 1, then another EXIF 6",
                     "XMP, then EXIF 1", "PIL, EXIF 1"}


def _pil_exif(orientation: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif


def test_the_share_of_the_image_decoded_alone() -> None:
    assert jpeg_region.worth_it(Window(0, 0, 10, 10), (20, 20))  # a quarter
    assert not jpeg_region.worth_it(Window(0, 0, 10, 20), (20, 20))  # half


def test_threads_decoding_at_once_each_get_their_window() -> None:
    data = encode(photo(200, 300, seed=9), "4:2:2")
    whole = decode_image(data, "RGB")
    wins = windows(200, 300, np.random.default_rng(4), 96)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda v: jpeg_region.decode(data, "RGB", v), wins))
    for win, out in zip(wins, got, strict=True):
        assert out is not None
        np.testing.assert_array_equal(out, whole[win.y:win.y + win.h, win.x:win.x + win.w])


@pytest.mark.parametrize("output_type", ["RGB", "BGR", "GRAY"])
def test_a_window_keeps_its_pixels_while_later_windows_are_decoded(output_type: str) -> None:
    """A window is the decoded image's own buffer (no copy): C-contiguous, writable, and
    held by the array, so decoding more windows (and collecting garbage) leaves it as it
    was."""
    data = encode(photo(120, 160, seed=6), "4:4:4")
    whole = decode_image(data, output_type)
    wins = windows(120, 160, np.random.default_rng(8), 40)
    kept = [jpeg_region.decode(data, output_type, v) for v in wins]
    for v in wins[::-1]:  # the decoders' buffers go round again
        assert jpeg_region.decode(data, output_type, v) is not None
    gc.collect()
    for win, out in zip(wins, kept, strict=True):
        assert out is not None and out.flags.c_contiguous and out.flags.writeable
        assert out.shape == (win.h, win.w, 1 if output_type == "GRAY" else 3)
        np.testing.assert_array_equal(out, whole[win.y:win.y + win.h, win.x:win.x + win.w])
    first = kept[0]
    assert first is not None
    first[...] = 0  # its own pixels: the others are untouched
    np.testing.assert_array_equal(kept[1], whole[wins[1].y:wins[1].y + wins[1].h,
                                                 wins[1].x:wins[1].x + wins[1].w])


# Runs the three window decoders over the same files and windows and prints a SHA-256 of
# each output: in this process (windows decoded alone) and in one where nvImageCodec
# cannot be imported (the whole decode, cut).
_DIGESTS = """
import hashlib, json, sys
import numpy as np
if sys.argv[1] == "without":
    sys.modules["nvidia.nvimgcodec"] = None  # import fails: as where it is not installed
from conveyor import fn, pipeline_def
from conveyor_server.engine.identity import engine_id
from conveyor_server.engine.ops.decode import jpeg_region
from conveyor_server.engine.ops.registry import SAMPLE_INDEX
from tests.support.op_helpers import build
files = [np.frombuffer(bytes.fromhex(h), np.uint8) for h in json.loads(sys.stdin.read())]
ops = {
    "image_random_crop": build("decoders.image_random_crop", random_area=[0.05, 1.0]),
    "image_crop": build("decoders.image_crop", crop=[31.0, 45.0], crop_pos_x=0.3,
                        crop_pos_y=0.7),
    "image_slice": build("decoders.image_slice", normalized_anchor=False,
                         normalized_shape=False),
}
out = {"available": jpeg_region.available(), "digests": [],
       "taken": sum(jpeg_region.available() and jpeg_region.frame_size(f) is not None
                    for f in files)}
for i, data in enumerate(files):
    for index in range(6):
        for name, op in ops.items():
            inputs = [data]
            if name == "image_slice":
                inputs += [np.array([3.0 + 5 * index, 1.0 + index]), np.array([40.0, 29.0])]
            (image,) = op.fn(inputs, {SAMPLE_INDEX: np.array(i * 6 + index, np.uint64)})
            out["digests"].append(hashlib.sha256(image.tobytes()).hexdigest())
print(json.dumps(out))
"""


def _digests(mode: str, files: list[np.ndarray]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _DIGESTS, mode], cwd=ROOT, text=True,
                          input=json.dumps([f.tobytes().hex() for f in files]),
                          capture_output=True, timeout=120, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_window_decoders_give_the_same_bytes_with_and_without_nvimgcodec() -> None:
    files = list(jpeg_kinds(120, 160, seed=1).values())
    files.append(pil_bytes(photo(90, 70, seed=2), "PNG"))
    with_it, without = _digests("with", files), _digests("without", files)
    assert with_it["available"] and not without["available"]
    assert len(with_it["digests"]) == len(files) * 6 * 3
    assert with_it["digests"] == without["digests"]
    assert len(set(with_it["digests"])) > len(files) * 6  # the windows differ
    assert with_it["taken"] == len(files) - 1 and without["taken"] == 0  # all but the PNG


@pipeline_def(batch_size=2, seed=1)
def window_pipeline(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    return fn.decoders.image_random_crop(jpegs), fn.decoders.image(jpegs), labels


@pipeline_def(batch_size=2, seed=1)
def whole_pipeline(root: str) -> Any:
    jpegs, labels = fn.readers.file(file_root=root)
    return fn.decoders.image(jpegs), labels


def test_a_checkpoint_names_nvimgcodec_where_it_decodes_windows() -> None:
    decoder, _ = engine_id.libraries(window_pipeline("/data").spec)
    assert decoder.startswith("opencv ") and "simplejpeg" in decoder
    assert decoder.endswith(f"; nvimgcodec {nvimgcodec_version()} (windows)")
    assert "nvimgcodec" not in engine_id.libraries(whole_pipeline("/data").spec)[0]
