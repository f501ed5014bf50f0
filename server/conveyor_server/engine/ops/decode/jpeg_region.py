"""Decoding only a window of a JPEG on the CPU: nvImageCodec's CPU backend (libjpeg-turbo's
scanline crop and skip), used by the window decoders (``decode_window.py``) where it gives
exactly the bytes of the whole decode (``jpeg_fast``) cut to the window.

Rows below the window are not read at all, rows above it are only entropy-decoded, and
columns beside it are not transformed nor converted: a window of a quarter of the image
decodes in ~0.65 of the whole decode's time here, but nvImageCodec's whole decode is ~10 %
slower than simplejpeg's, so a window of half the image or more is decoded whole.

Exact for what is taken (tests/engine/test_jpeg_region.py compares 1,872 windows):
8-bit Huffman-coded JPEGs, baseline or progressive (SOF0, SOF1, SOF2), with 1 or 3
components (grayscale, YCbCr at any chroma subsampling), restart markers or not, no
Adobe APP14 segment (CMYK, YCCK or RGB transforms: its CMYK conversion rounds otherwise)
and no EXIF rotation. Anything else returns None and the caller decodes the whole image.
The choice is made from the header alone, so it is the same on every run; either way the
bytes are the same. Optional: without nvImageCodec (the server's ``test``, ``gpu`` or
``gpu-cu13`` extras bring it) every window is cut from the whole decode.

nvImageCodec runs without a GPU only with both its CPU-only device id and its CPU-only
backend. A decoder is not safe to share between threads; each call takes one from a pool
(one per engine worker at most), with one CPU thread of its own: the engine's workers are
the parallelism.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from typing import Any

import numpy as np

from conveyor_server.engine.ops.decode import jpeg_fast, jpeg_markers
from conveyor_server.engine.ops.geometry.random_window import Window

#: Start-of-frame markers of 8- or 12-bit Huffman JPEGs: baseline, extended, progressive.
_SOF_HUFFMAN = (0xC0, 0xC1, 0xC2)
_APP14 = 0xEE

_log = logging.getLogger(__name__)

#: A window whose area is at least this share of the image is decoded whole (faster).
WHOLE_DECODE_SHARE = 0.5


def _load() -> Any:
    """nvImageCodec, or None. Importing it loads its extensions, and those for absent
    libraries (nvJPEG2000, nvTIFF: not needed here) write their complaints straight to the
    standard error, which would break a server's JSON log lines: they are caught and
    logged at debug level."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            from nvidia import nvimgcodec
        except ImportError:
            nvimgcodec = None
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode(errors="replace").strip()
    if text:
        _log.debug("nvImageCodec, loading its extensions: %s", text)
    return nvimgcodec


_NV = _load()


def available() -> bool:
    """Whether windows of JPEGs can be decoded alone here (nvImageCodec is installed)."""
    return _NV is not None


def frame_size(data: np.ndarray) -> tuple[int, int] | None:
    """(height, width) of a JPEG whose windows decode exactly alone, from its header;
    None for any other file (see the module's docstring). Such a JPEG's EXIF orientation
    is 1 (``jpeg_fast.exif_orientation``, read in the same walk over the segments), so
    ``jpeg_fast.decode(data, ..., upright=True)`` decodes it whole."""
    view = data.data
    size = None
    orientation = 1  # the first EXIF segment's, as jpeg_fast.exif_orientation reads it
    exif = False
    for marker, pos, length in jpeg_markers.segments(data):
        if (marker == jpeg_markers.APP1 and not exif
                and bytes(view[pos + 4:pos + 10]) == b"Exif\0\0"):
            exif = True
            orientation = jpeg_fast.tiff_orientation(bytes(view[pos + 10:pos + 2 + length]))
        if marker == _APP14 or (0xC3 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC)):
            return None  # Adobe transform; lossless, hierarchical or arithmetic coding
        if marker in _SOF_HUFFMAN and length >= 8 and pos + 10 <= len(view):
            precision, height = view[pos + 4], int.from_bytes(view[pos + 5:pos + 7], "big")
            width, components = int.from_bytes(view[pos + 7:pos + 9], "big"), view[pos + 9]
            if precision != 8 or components not in (1, 3) or height == 0 or width == 0:
                return None
            size = (height, width)
        if marker == jpeg_markers.SOS:
            return size if size is not None and orientation == 1 else None
    return None


def worth_it(window: Window, size: tuple[int, int]) -> bool:
    """Whether decoding ``window`` alone is cheaper than the whole image (measured above)."""
    return window.h * window.w < WHOLE_DECODE_SHARE * size[0] * size[1]


def _new_decoder() -> Any:
    nv = _NV
    return nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                      backends=[nv.Backend(nv.BackendKind.CPU_ONLY)])


class _Decoders:
    """nvImageCodec CPU decoders, one per concurrent caller, made on first need."""

    def __init__(self) -> None:
        self._free: list[Any] = []
        self._lock = threading.Lock()

    def take(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        return _new_decoder()

    def give(self, decoder: Any) -> None:
        with self._lock:
            self._free.append(decoder)


_DECODERS = _Decoders()
_PARAMS: dict[str, Any] = {}


def _params(output_type: str) -> Any:
    params = _PARAMS.get(output_type)
    if params is None:
        color = _NV.ColorSpec.GRAY if output_type == "GRAY" else _NV.ColorSpec.SRGB
        params = _PARAMS[output_type] = _NV.DecodeParams(
            color_spec=color, allow_any_depth=False, apply_exif_orientation=True)
    return params


def decode(data: np.ndarray, output_type: str, window: Window) -> np.ndarray | None:
    """``window`` (inside the image) of a JPEG that ``frame_size`` takes, decoded alone: HWC
    uint8, C-contiguous, writable; None where nvImageCodec is absent or did not decode it
    (the caller then decodes the whole image, which reports what is wrong with the file)."""
    if _NV is None:
        return None
    nv = _NV
    encoded = data.tobytes()
    decoder = _DECODERS.take()
    try:
        stream = nv.CodeStream(encoded).get_sub_code_stream(
            region=nv.Region(window.y, window.x, window.y + window.h, window.x + window.w))
        image = decoder.decode(stream, params=_params(output_type))
    except (RuntimeError, ValueError):
        image = None
    finally:
        _DECODERS.give(decoder)
    if image is None:
        return None
    array = np.asarray(image.cpu())
    if array.ndim == 2:
        array = array[:, :, np.newaxis]
    if array.shape[:2] != (window.h, window.w) or array.dtype != np.uint8:
        return None
    if output_type == "BGR":
        return np.ascontiguousarray(array[:, :, ::-1])
    # The decoded Image's own buffer, not a copy: the array holds the Image (its ``base``),
    # which owns the buffer and is never decoded into again.
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)
