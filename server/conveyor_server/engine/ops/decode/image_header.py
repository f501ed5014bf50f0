"""How big an image file says it is: its width, height, channels and sample size, read
from its header without decoding it.

The decoder checks this against ``limits.max_image_pixels`` before OpenCV or libjpeg-turbo
allocate anything: a WebP of a few kilobytes may declare 16383x16383 pixels, and decoding
it first and checking after costs 1.5 GiB. Formats: JPEG (the first SOFn marker, every
variant: baseline, extended, progressive, lossless, arithmetic), PNG (IHDR), WebP (VP8,
VP8L, VP8X), TIFF and BigTIFF (every directory of the main chain, both byte orders), BMP,
GIF (the logical screen and the image descriptors) and the PNM family (P1-P7, PFM). Other
formats give None: OpenCV's own pixel cap, set from the same limit in a server, covers them.

A header that is cut short or makes no sense raises ``DataFileError`` (a per-sample data
error, so a pipeline's ``on_error`` policy applies to it); nothing else escapes. Where the
decoders tolerate a quirk (garbage between JPEG markers, GIF frames past the screen) the
parser reads the file as they do, so that what it reports is what they would allocate.
"""

from __future__ import annotations

import numpy as np

from conveyor_server.engine.ops.decode import image_pages
from conveyor_server.engine.ops.decode.header_bytes import HeaderBytes, ImageSize, invalid

__all__ = ["ImageSize", "read_size"]

_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # not DHT, JPG, DAC
_JPEG_NO_LENGTH = frozenset(range(0xD0, 0xD8)) | {0x01}  # RSTn and TEM
_PNM_MAGIC = {b"P1": 1, b"P2": 1, b"P3": 3, b"P4": 1, b"P5": 1, b"P6": 3, b"Pf": 1,
              b"PF": 3}


def read_size(data: np.ndarray | bytes) -> ImageSize | None:
    """The size ``data`` (a whole file) declares, or None for a format not read here."""
    view = HeaderBytes(data)
    head = view.span(0, min(16, view.size))
    if head.startswith(b"\xff\xd8\xff"):
        return _jpeg(view)
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return _png(view)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(view)
    if head[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
        return image_pages.tiff(view)
    if head.startswith(b"BM"):
        return _bmp(view)
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return image_pages.gif(view)
    if head[:2] in _PNM_MAGIC or head[:3] == b"P7\n":
        return _pnm(view)
    return None


# -- JPEG --------------------------------------------------------------------------------


def _jpeg(v: HeaderBytes) -> ImageSize:
    """The frame header (SOFn), read past the segments before it as libjpeg does: bytes
    that are not a marker are skipped, fill bytes (0xFF) swallowed, stuffed zeros ignored."""
    v.fmt = "JPEG"
    pos = 2
    while True:
        if pos >= v.size or v.view[pos] != 0xFF:
            pos = v.find(b"\xff", pos)
            if pos < 0:
                raise v.cut("frame header (SOF marker)")
        while pos < v.size and v.view[pos] == 0xFF:
            pos += 1
        marker = v.u8(pos, "frame header (SOF marker)")
        pos += 1
        if marker == 0x00 or marker in _JPEG_NO_LENGTH:
            continue
        if marker in (0xD8, 0xD9, 0xDA):  # SOI again, EOI or SOS before any frame header
            raise invalid("JPEG", f"marker 0x{marker:02X} at byte {pos - 2} comes before "
                                  "any frame header (SOF)")
        length = v.uint(pos, 2, "big", f"marker 0x{marker:02X} segment length")
        if marker in _JPEG_SOF:
            v.need(pos + 8, "frame header (SOF) fields")
            return ImageSize("JPEG", width=v.uint(pos + 5, 2, "big", "width"),
                             height=v.uint(pos + 3, 2, "big", "height"),
                             channels=v.u8(pos + 7, "components"), bits=v.u8(pos + 2, "bits"))
        if length < 2:
            raise invalid("JPEG", f"marker 0x{marker:02X} at byte {pos - 2} has length {length}")
        pos += length


# -- PNG ---------------------------------------------------------------------------------

_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}


def _png(v: HeaderBytes) -> ImageSize:
    v.fmt = "PNG"
    v.need(33, "IHDR chunk")
    length, kind = v.uint(8, 4, "big", "IHDR"), v.span(12, 16)
    if kind != b"IHDR" or length != 13:
        raise invalid("PNG", f"the first chunk is {kind!r} of {length} bytes, not IHDR of 13")
    width, height = v.uint(16, 4, "big", "width"), v.uint(20, 4, "big", "height")
    if width >= 1 << 31 or height >= 1 << 31:
        raise invalid("PNG", f"width {width} or height {height} is above 2^31 - 1")
    return ImageSize("PNG", width, height, channels=_PNG_CHANNELS.get(v.u8(25, "colour"), 0),
                     bits=v.u8(24, "bit depth"))


# -- WebP --------------------------------------------------------------------------------


def _webp(v: HeaderBytes) -> ImageSize:
    v.fmt = "WebP"
    v.need(16, "first chunk")
    chunk = v.span(12, 16)
    if chunk == b"VP8 ":  # lossy: a key frame's tag, start code, then 14-bit sizes
        v.need(30, "VP8 frame header")
        if v.view[20] & 1 or v.span(23, 26) != b"\x9d\x01\x2a":
            raise invalid("WebP", "the VP8 chunk does not start with a key frame")
        return ImageSize("WebP", v.uint(26, 2, "little", "width") & 0x3FFF,
                         v.uint(28, 2, "little", "height") & 0x3FFF, channels=3)
    if chunk == b"VP8L":  # lossless: signature 0x2F, then 14-bit sizes minus one
        v.need(25, "VP8L header")
        if v.view[20] != 0x2F:
            raise invalid("WebP", "the VP8L chunk lacks its signature byte 0x2F")
        bits = v.uint(21, 4, "little", "VP8L sizes")
        if bits >> 29:
            raise invalid("WebP", f"VP8L version {bits >> 29} is not 0")
        return ImageSize("WebP", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1,
                         channels=4 if bits >> 28 & 1 else 3)
    if chunk == b"VP8X":  # extended: the canvas, 24-bit sizes minus one
        v.need(30, "VP8X canvas size")
        return ImageSize("WebP", v.uint(24, 3, "little", "width") + 1,
                         v.uint(27, 3, "little", "height") + 1,
                         channels=4 if v.view[20] & 0x10 else 3, part="canvas")
    raise invalid("WebP", f"the first chunk is {chunk!r}, not VP8, VP8L or VP8X")


# -- BMP ---------------------------------------------------------------------------------


def _bmp(v: HeaderBytes) -> ImageSize:
    """As OpenCV reads it: an OS/2 core header (16-bit sizes) or a Windows header of 36
    bytes or more (32-bit sizes; a negative height means top-down rows)."""
    v.fmt = "BMP"
    header = v.uint(14, 4, "little", "DIB header size")
    if header == 12:
        v.need(26, "OS/2 header")
        width, height = v.uint(18, 2, "little", "width"), v.uint(20, 2, "little", "height")
        bits = v.uint(24, 2, "little", "bits per pixel")
    elif header >= 36:
        v.need(30, "DIB header")
        width = int.from_bytes(v.span(18, 22), "little", signed=True)
        height = int.from_bytes(v.span(22, 26), "little", signed=True)
        bits = v.uint(28, 2, "little", "bits per pixel")
    else:
        raise invalid("BMP", f"its DIB header size is {header} (expected 12, or 36 and more)")
    if width <= 0 or height == 0:
        raise invalid("BMP", f"it declares a width of {width} and a height of {height}")
    return ImageSize("BMP", width, abs(height), channels=4 if bits == 32 else 3)


# -- PNM ---------------------------------------------------------------------------------


def _pnm(v: HeaderBytes) -> ImageSize:
    """P1-P6 and PFM: whitespace-separated numbers after the magic, with ``#`` comments
    to the end of a line between them; P7 (PAM): ``KEY value`` lines up to ENDHDR."""
    v.fmt = "PNM"
    magic = v.span(0, 2)
    if magic == b"P7":
        return _pam(v)
    tokens = _Tokens(v, 2)
    width, height = tokens.number("width"), tokens.number("height")
    bits = 32 if magic in (b"PF", b"Pf") else 1
    if magic in (b"P2", b"P3", b"P5", b"P6"):
        maxval = tokens.number("maximum value")
        bits = 16 if maxval > 255 else 8
    return ImageSize("PNM", width, height, channels=_PNM_MAGIC[magic], bits=bits)


def _pam(v: HeaderBytes) -> ImageSize:
    fields: dict[bytes, int] = {}
    tokens = _Tokens(v, 2)
    while True:
        key = tokens.word("PAM header field or ENDHDR")
        if key == b"ENDHDR":
            break
        if key == b"TUPLTYPE":
            tokens.word("tuple type")
        elif key in (b"WIDTH", b"HEIGHT", b"DEPTH", b"MAXVAL"):
            fields[key] = tokens.number(key.decode().lower())
        else:
            raise invalid("PNM", f"unknown PAM header field {key[:20]!r}")
    if b"WIDTH" not in fields or b"HEIGHT" not in fields:
        raise invalid("PNM", "the PAM header has no WIDTH or no HEIGHT")
    return ImageSize("PNM", fields[b"WIDTH"], fields[b"HEIGHT"],
                     channels=fields.get(b"DEPTH", 0),
                     bits=16 if fields.get(b"MAXVAL", 255) > 255 else 8)


class _Tokens:
    """Words of a PNM header: runs of non-space bytes, comments skipped."""

    _SPACE = frozenset(b" \t\r\n\v\f")

    def __init__(self, v: HeaderBytes, pos: int) -> None:
        self.v, self.pos = v, pos

    def word(self, what: str) -> bytes:
        v = self.v
        while True:
            c = v.u8(self.pos, what)
            if c == ord("#"):  # a comment, to the end of its line
                end = v.find(b"\n\r", self.pos)
                if end < 0:
                    raise v.cut(what)
                self.pos = end + 1
            elif c in self._SPACE:
                self.pos += 1
            else:
                break
        start = self.pos
        while self.pos < v.size and v.view[self.pos] not in self._SPACE \
                and self.pos - start <= 20:
            self.pos += 1
        if self.pos == v.size:  # a header ends with a space: this word may go on
            raise v.cut(what)
        return v.span(start, self.pos)

    def number(self, what: str) -> int:
        word = self.word(what)
        if not word.isdigit() or len(word) > 20:
            raise invalid("PNM", f"its {what} is {word[:24]!r}, not a number")
        return int(word)
