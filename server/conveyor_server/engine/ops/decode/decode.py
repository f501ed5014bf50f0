"""``decoders.image``: encoded file bytes to an HWC uint8 image, as NVIDIA DALI's decoder.

On the CPU, OpenCV decodes (it releases the GIL while it works): JPEG (baseline,
progressive, grayscale, CMYK), PNG, BMP, TIFF, WebP and whatever else the installed build
reads. On ``device="mixed"`` a whole batch is decoded on the GPU (``decode_mixed.py``).
As DALI: EXIF orientation is applied, an alpha channel is dropped, 16-bit samples
are scaled to 8 bits, and GRAY output keeps a channel axis of 1.

Errors about the data raise ``DataFileError``; the engine adds the file's path. An image
whose header declares more than ``limits.max_image_pixels`` is refused before any decoder
allocates it (``image_header.py``); OpenCV's own cap, which a server sets to the same limit
at start, refuses what the header parser does not read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import cv2
import numpy as np

from conveyor.errors import DataFileError, InvalidArgument, ResourceExhausted
from conveyor_server.engine.admission.limits import NO_LIMITS, EngineLimits
from conveyor_server.engine.ops.decode import image_header, jpeg_fast, jpeg_markers
from conveyor_server.engine.ops.probes.inputs import probe_files
from conveyor_server.engine.ops.probes.probe_set import Case, op_probe
from conveyor_server.engine.ops.registry import OpContext, SampleOp, register

#: The decoder library and version; part of the engine's identity in checkpoints.
DECODER_ID = f"opencv {cv2.__version__}; {jpeg_fast.VERSION}"

OP = "decoders.image"

Targs = Mapping[str, np.ndarray]

# IMREAD_ANYDEPTH keeps 16-bit samples so that they are scaled here, by 1/257 with
# rounding, instead of OpenCV's keep-the-high-byte. These flags apply EXIF orientation.
# RGB is decoded as BGR and then reordered: OpenCV 5.0's IMREAD_COLOR_RGB garbles 16-bit
# TIFFs.
_FLAGS = {
    "RGB": cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH,
    "BGR": cv2.IMREAD_COLOR | cv2.IMREAD_ANYDEPTH,
    "GRAY": cv2.IMREAD_GRAYSCALE | cv2.IMREAD_ANYDEPTH,
}

_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"GIF8", "GIF"),
)

_JPEG_EOI = b"\xff\xd9"
#: Bytes some writers leave after a JPEG's end-of-image marker.
_PADDING = b"\x00 \t\r\n"


def sniff_format(data: np.ndarray) -> str:
    """The image format named by the file's leading bytes, or "unknown"."""
    head = data[:16].tobytes()
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return name
    return "unknown"


def _jpeg_scan_start(data: bytes) -> int | None:
    """Offset of the first start-of-scan marker, or None."""
    for marker, pos, _ in jpeg_markers.segments(data):
        if marker == jpeg_markers.SOS:
            return pos
    return None


def check_jpeg_complete(data: np.ndarray) -> None:
    """Raise ``DataFileError`` for a JPEG that stops before its end-of-image marker.

    Some decoder builds return the decoded part of a truncated JPEG with only a warning.
    The usual file ends with EOI (perhaps followed by padding); otherwise, for a file with
    other data appended after the image, an EOI must follow the first scan.
    """
    if data[-64:].tobytes().rstrip(_PADDING).endswith(_JPEG_EOI):
        return
    raw = data.tobytes()
    scan = _jpeg_scan_start(raw)
    if scan is None or raw.find(_JPEG_EOI, scan) < 0:
        raise DataFileError(f"cannot decode the image: truncated JPEG ({data.size} bytes, no "
                            "end-of-image marker)")


def _to_uint8_hwc(image: np.ndarray) -> np.ndarray:
    if image.dtype == np.uint16:
        image = cv2.convertScaleAbs(image, alpha=1 / 257)  # 65535 -> 255, rounded
    if image.ndim == 2:
        image = image[:, :, np.newaxis]
    return image


def check_declared_size(data: np.ndarray, limits: EngineLimits) -> None:
    """Refuse an image whose header declares more than ``limits.max_image_pixels`` (samples
    wider than 8 bits counted per byte), before any decoder allocates it; ``DataFileError``
    for a header cut short or invalid."""
    if limits.max_image_pixels is None:
        return
    check_size(image_header.read_size(data), limits)


def check_size(size: image_header.ImageSize | None, limits: EngineLimits) -> None:
    """``ResourceExhausted`` where ``size``, read from a header, is above
    ``limits.max_image_pixels``."""
    if size is not None:
        what = f"the {size.format} image" + (f" ({size.part})" if size.part else "")
        limits.check_image(size.height, size.width, what, size.bytes_per_sample,
                           "; its header says so: it was not decoded")


def _opencv_cap(fmt: str) -> ResourceExhausted:
    cap = os.environ.get("OPENCV_IO_MAX_IMAGE_PIXELS", "its default")
    what = "the image" if fmt == "unknown" else f"the {fmt} image"
    return ResourceExhausted(f"{what} is above OpenCV's pixel cap "
                             f"(OPENCV_IO_MAX_IMAGE_PIXELS = {cap}, which a server sets from "
                             "limits.max_image_pixels): it was not decoded")


def check_bytes(data: np.ndarray, op: str = OP) -> None:
    """``InvalidArgument`` unless ``data`` is a 1-D uint8 array; ``DataFileError`` where it is
    empty."""
    if data.dtype != np.uint8 or data.ndim != 1:
        raise InvalidArgument(f"{op}: expects a file's bytes as a 1-D uint8 array, got "
                              f"{data.dtype} of shape {data.shape}")
    if data.size == 0:
        raise DataFileError("cannot decode the image: the file is empty (0 bytes)")


def check_file(data: np.ndarray, limits: EngineLimits, op: str = OP) -> str:
    """What every decoder checks before decoding (the GPU's too): a file's bytes, not empty,
    a JPEG not cut short, a declared size within the limits. Returns the file's format.
    ``batch_headers.py`` checks a whole batch the same way, in these steps."""
    check_bytes(data, op)
    fmt = sniff_format(data)
    if fmt == "JPEG":
        check_jpeg_complete(data)
    check_declared_size(data, limits)
    return fmt


def decode_image(data: np.ndarray, output_type: str,
                 limits: EngineLimits = NO_LIMITS, *, upright_jpeg: bool = False) -> np.ndarray:
    """Decode one file's bytes (a 1-D uint8 array) to HWC uint8 with C = 3 (RGB, BGR) or 1.
    An image above ``limits.max_image_pixels`` is refused from its header, before decoding;
    in a format the header parser does not read, by OpenCV's cap or after decoding.
    ``upright_jpeg``: the caller has checked the file already (``check_file`` with these
    ``limits``, a JPEG) and read its EXIF orientation as 1; neither is done again."""
    fmt = "JPEG" if upright_jpeg else check_file(data, limits)
    if fmt == "JPEG":
        fast = jpeg_fast.decode(data, output_type, upright=upright_jpeg)
        if fast is not None:
            return fast
    flags = _FLAGS[output_type]
    if fmt == "JPEG" and output_type == "RGB":
        # JPEG samples are 8-bit: OpenCV converts to RGB while decoding, which saves a pass.
        flags = cv2.IMREAD_COLOR_RGB
    try:
        image = cv2.imdecode(data, flags)
        if image is not None and image.dtype not in (np.uint8, np.uint16):
            # Float or 32-bit samples: let OpenCV bring them to 8 bits its own way.
            image = cv2.imdecode(data, flags & ~cv2.IMREAD_ANYDEPTH)
    except cv2.error as exc:
        reason = str(exc).strip().splitlines()[-1]
        if "CV_IO_MAX_IMAGE" in reason:
            raise _opencv_cap(fmt) from None
        raise DataFileError(f"cannot decode the image ({fmt}, {data.size} bytes): "
                            f"{reason}") from None
    if image is None:
        what = "format not recognised" if fmt == "unknown" else f"corrupt or unsupported {fmt}"
        raise DataFileError(f"cannot decode the image ({data.size} bytes): {what}")
    image = _to_uint8_hwc(image)
    limits.check_image(image.shape[0], image.shape[1], f"the decoded {fmt} image")
    if output_type == "RGB" and flags != cv2.IMREAD_COLOR_RGB:
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    return image


@register("decoders.image")
def build_decode(ctx: OpContext) -> SampleOp:
    output_type = ctx.args["output_type"]
    limits = ctx.limits

    def decode(inputs: Sequence[np.ndarray], targs: Targs) -> tuple[np.ndarray, ...]:
        return (decode_image(inputs[0], output_type, limits),)

    return SampleOp(fn=decode, layouts=("HWC",))


# -- behaviour probe (engine/identity/behaviour/) ------------------------------------------------


@op_probe("decoders.image")
def _decode(variant: str) -> list[Case]:
    files = [(np.frombuffer(data, dtype=np.uint8).copy(),) for _, data in probe_files()]
    return [Case({"output_type": kind}, [(f, {}) for f in files], input_layouts=("",))
            for kind in ("RGB", "BGR", "GRAY")]
