"""The declared size of the image formats that hold several images: TIFF (pages, in a
chain of directories) and GIF (frames). OpenCV decodes the first; every one found is
checked, so that reading another page or frame later never meets an unchecked size, and the
largest is what the file declares. A cut-short or broken first image raises; a later one
ends the walk, as do loops and ``MAX_PARTS``."""

from __future__ import annotations

import numpy as np

from conveyor.errors import DataFileError
from conveyor_server.engine.ops.decode.header_bytes import HeaderBytes, ImageSize, Order, invalid

#: TIFF directories and GIF frames looked at.
MAX_PARTS = 64
#: GIF data sub-blocks skipped while looking for frames past the first.
_MAX_GIF_BLOCKS = 1 << 16


# -- TIFF --------------------------------------------------------------------------------

_TIFF_TYPE_SIZE = {1: 1, 3: 2, 4: 4, 6: 1, 8: 2, 9: 4, 16: 8, 17: 8}
_TIFF_SIGNED = frozenset({6, 8, 9, 17})
_WIDTH, _LENGTH, _BITS, _SAMPLES = 256, 257, 258, 277
_TAGS = (_WIDTH, _LENGTH, _BITS, _SAMPLES)
#: Directories with more entries are searched with numpy (up to 65535 each).
_FEW_ENTRIES = 64


def tiff(v: HeaderBytes) -> ImageSize:
    """Every directory of the main chain (the decoder reads the first; the others are
    checked too), the largest wins. The first directory must be whole; the walk ends
    quietly at a later one that is not, at a loop, or after ``MAX_PARTS``."""
    v.fmt = "TIFF"
    order: Order = "little" if v.span(0, 2) == b"II" else "big"
    big = v.span(2, 4) in (b"+\x00", b"\x00+")
    offset = v.uint(8, 8, order, "first directory offset") if big \
        else v.uint(4, 4, order, "first directory offset")
    seen: set[int] = set()
    largest: ImageSize | None = None
    for page in range(MAX_PARTS):
        if offset == 0 or offset in seen:
            break
        seen.add(offset)
        try:
            size, offset = _tiff_directory(v, offset, order, big, page)
        except DataFileError:
            if page == 0:
                raise
            break
        if largest is None or size.pixels * size.bytes_per_sample > \
                largest.pixels * largest.bytes_per_sample:
            largest = size
    if largest is None:
        raise invalid("TIFF", "it has no image directory")
    return largest


def _tiff_directory(v: HeaderBytes, offset: int, order: Order, big: bool,
                    page: int) -> tuple[ImageSize, int]:
    """One directory's size and the offset of the next directory."""
    count_size, entry_size, word = (8, 20, 8) if big else (2, 12, 4)
    count = v.uint(offset, count_size, order, f"directory {page}")
    table = offset + count_size
    end = table + count * entry_size
    v.need(end, f"directory {page}'s {count} entries")
    if count <= _FEW_ENTRIES:
        indices: list[int] = list(range(count))
    else:  # every entry's tag, in one pass
        tags = np.frombuffer(v.view[table:end], "<u2" if order == "little" else ">u2")
        indices = np.flatnonzero(np.isin(tags[::entry_size // 2], _TAGS)).tolist()
    found: dict[int, int] = {}
    for index in indices:
        at = table + index * entry_size
        tag = v.uint(at, 2, order, "tag")
        if tag in _TAGS and tag not in found:  # the first entry of a tag counts, as for libtiff
            kind = v.uint(at + 2, 2, order, "type")
            values = v.uint(at + 4, word, order, "count")
            found[tag] = _tiff_value(v, tag, kind, values, v.span(at + 4 + word, at + entry_size),
                                     order, page)
    if _WIDTH not in found or _LENGTH not in found:
        raise invalid("TIFF", f"directory {page} has no ImageWidth or no ImageLength")
    size = ImageSize("TIFF", found[_WIDTH], found[_LENGTH], channels=found.get(_SAMPLES, 1),
                     bits=found.get(_BITS, 1), part=f"page {page}" if page else "")
    # libtiff takes a missing next offset as none
    return size, (v.uint(end, word, order, "") if end + word <= v.size else 0)


def _tiff_value(v: HeaderBytes, tag: int, kind: int, count: int, raw: bytes, order: Order,
                page: int) -> int:
    """The first value of an entry: held in the entry (``raw``) when it fits, else at the
    offset ``raw`` holds."""
    width = _TIFF_TYPE_SIZE.get(kind)
    if width is None or count < 1:
        raise invalid("TIFF", f"directory {page}: tag {tag} has type {kind} and count {count}")
    if width * count <= len(raw):
        data = raw[:width]
    else:
        at = int.from_bytes(raw, order)
        v.need(at + width, f"directory {page}: tag {tag}'s value")
        data = v.span(at, at + width)
    value = int.from_bytes(data, order, signed=kind in _TIFF_SIGNED)
    if value < 0:
        raise invalid("TIFF", f"directory {page}: tag {tag} is negative ({value})")
    return value


# -- GIF ---------------------------------------------------------------------------------


def gif(v: HeaderBytes) -> ImageSize:
    """The logical screen, grown to hold every frame found (a frame may lie past it): the
    first frame must be reachable; the walk ends quietly at a cut-short later one, after
    ``MAX_PARTS`` frames or ``_MAX_GIF_BLOCKS`` data blocks."""
    v.fmt = "GIF"
    width, height = v.uint(6, 2, "little", "screen width"), v.uint(8, 2, "little", "screen height")
    flags = v.u8(10, "screen flags")
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    frames, blocks, part = 0, 0, ""
    try:
        while frames < MAX_PARTS and blocks < _MAX_GIF_BLOCKS:
            kind = v.u8(pos, "first image descriptor")
            if kind == 0x3B:  # trailer
                break
            if kind == 0x21:  # extension: label, then data sub-blocks
                pos += 2
            elif kind == 0x2C:  # image descriptor
                left, top = v.uint(pos + 1, 2, "little", "frame"), v.uint(pos + 3, 2, "little",
                                                                          "frame")
                fw, fh = v.uint(pos + 5, 2, "little", "frame"), v.uint(pos + 7, 2, "little",
                                                                       "frame")
                local = v.u8(pos + 9, "frame flags")
                if left + fw > width or top + fh > height:
                    part = f"frame {frames} ({fw}x{fh} at {left},{top})"
                width, height = max(width, left + fw), max(height, top + fh)
                frames += 1
                pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0) + 1  # + LZW size
            else:
                raise invalid("GIF", f"unknown block 0x{kind:02X} at byte {pos}")
            while blocks < _MAX_GIF_BLOCKS:  # data sub-blocks, up to an empty one
                length = v.u8(pos, "data blocks")
                pos += 1 + length
                blocks += 1
                if length == 0:
                    break
    except DataFileError:
        if frames == 0:
            raise
    return ImageSize("GIF", width, height, channels=3, part=part)
