"""Walking a JPEG's marker segments, without decoding and without copying the file."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

SOS = 0xDA
APP1 = 0xE1


def segments(data: np.ndarray | bytes) -> Iterator[tuple[int, int, int]]:
    """(marker, offset, length) of each marker segment after SOI, up to and including the
    first start-of-scan (yielded with length 0). Stops without SOS where the structure is
    broken or the data ends. Walking by segment lengths skips an EXIF thumbnail, which is a
    whole JPEG of its own."""
    view = data.data if isinstance(data, np.ndarray) else memoryview(data)
    pos = 2  # after SOI
    while pos + 4 <= len(view):
        if view[pos] != 0xFF:
            return
        marker = view[pos + 1]
        if marker == 0xFF:  # fill byte before a marker
            pos += 1
            continue
        if marker == SOS:
            yield marker, pos, 0
            return
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(view[pos + 2:pos + 4], "big")
        yield marker, pos, length
        pos += 2 + length
