"""The fast path of JPEG decoding: libjpeg-turbo through simplejpeg.

OpenCV and simplejpeg both decode with libjpeg-turbo's defaults (accurate integer IDCT,
fancy upsampling), so they give the same bytes (a test compares them on every JPEG kind we
make); simplejpeg skips OpenCV's metadata pass and buffer copies and decodes about a
quarter faster. The fast path takes only what it decodes exactly as OpenCV does: RGB, BGR
or GRAY output of a JPEG without an EXIF orientation other than 1. Anything else (a
rotated photo, CMYK, a stream libjpeg-turbo only warns about) returns None, and the caller
decodes with OpenCV as before.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import simplejpeg

from conveyor_server.engine.ops.decode import jpeg_markers

#: Part of the decoder's identity in checkpoints.
VERSION = f"simplejpeg {simplejpeg.__version__}"

_ORIENTATION_TAG = 0x0112


def exif_orientation(data: np.ndarray) -> int:
    """The EXIF orientation of a JPEG (1 when it has none), or 0 when it cannot be read."""
    for marker, pos, length in jpeg_markers.segments(data):
        if marker == jpeg_markers.SOS:
            return 1
        if marker == jpeg_markers.APP1 and bytes(data[pos + 4:pos + 10]) == b"Exif\0\0":
            return tiff_orientation(bytes(data[pos + 10:pos + 2 + length]))
    return 0


def tiff_orientation(tiff: bytes) -> int:
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return 0
    order: Literal["little", "big"] = "little" if tiff[:2] == b"II" else "big"
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return 0
    count = int.from_bytes(tiff[ifd:ifd + 2], order)
    for i in range(count):
        entry = ifd + 2 + 12 * i
        if entry + 12 > len(tiff):
            return 0
        if int.from_bytes(tiff[entry:entry + 2], order) == _ORIENTATION_TAG:
            return int.from_bytes(tiff[entry + 8:entry + 10], order)
    return 1


def decode(data: np.ndarray, output_type: str, *, upright: bool = False) -> np.ndarray | None:
    """The decoded HWC uint8 image, or None where OpenCV must decode it. ``upright``: the
    caller has read the file's EXIF orientation as 1 already (``jpeg_region.frame_size``)."""
    if not upright and exif_orientation(data) != 1:
        return None
    try:
        image = simplejpeg.decode_jpeg(data, colorspace=output_type, fastdct=False,
                                       fastupsample=False, strict=True)
    except (ValueError, RuntimeError):
        return None
    if image.ndim == 2:
        image = image[:, :, np.newaxis]
    return image
