"""Reading an image file's header: bounds-checked little reads of its bytes (without
copying the file), the size a header declares, and the errors a header that is cut short
or makes no sense raises (``DataFileError``: a per-sample data error). Shared by
``image_header.py`` and ``image_pages.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from conveyor.errors import DataFileError

Order = Literal["little", "big"]


@dataclass(frozen=True)
class ImageSize:
    format: str
    width: int
    height: int
    #: Channels the file holds (0 where the header does not say).
    channels: int = 0
    #: Bits per sample (the largest, where samples differ).
    bits: int = 8
    #: Which part of the file declared this size, for messages ("" for the image itself).
    part: str = ""

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def bytes_per_sample(self) -> int:
        return max(1, (self.bits + 7) // 8)


class HeaderBytes:
    """Bounds-checked little reads of a file's bytes, without copying the file (a
    ``memoryview``: indexing and short slices cost little next to numpy's)."""

    def __init__(self, data: np.ndarray | bytes) -> None:
        if isinstance(data, bytes):
            self.view = memoryview(data)
        else:
            self.view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
        self.size = len(self.view)
        self.fmt = ""

    def cut(self, what: str) -> DataFileError:
        return DataFileError(f"the {self.fmt} header is cut short: the file ends at byte "
                             f"{self.size}, before its {what}")

    def need(self, end: int, what: str) -> None:
        if end > self.size:
            raise self.cut(what)

    def span(self, start: int, end: int) -> bytes:
        return self.view[start:end].tobytes()

    def u8(self, pos: int, what: str) -> int:
        self.need(pos + 1, what)
        return int(self.view[pos])

    def uint(self, pos: int, size: int, order: Order, what: str) -> int:
        self.need(pos + size, what)
        return int.from_bytes(self.view[pos:pos + size], order)

    def find(self, values: bytes, start: int) -> int:
        """The offset of the next byte among ``values`` at or after ``start``, or -1."""
        chunk = 1 << 12
        while start < self.size:
            piece = self.view[start:start + chunk].tobytes()
            hits = [i for i in (piece.find(value) for value in values) if i >= 0]
            if hits:
                return start + min(hits)
            start += chunk
            chunk = min(chunk * 4, 1 << 20)
        return -1


def invalid(fmt: str, why: str) -> DataFileError:
    return DataFileError(f"the {fmt} header is invalid: {why}")
